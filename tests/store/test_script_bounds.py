"""Refusals are coalesced (bounded histories), a refused late result names its own
attempt, queue-wait deadlines hold at START and PROMOTE, and malformed arguments are
refused before any write (fakeredis)."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from rsjobs.store import layout
from rsjobs.store.layout import (
    BeatArgs,
    BeatItem,
    ControlArgs,
    DeadlineArgs,
    DeadlineItem,
    Ending,
    Entry,
    Packed,
    StartArgs,
)
from tests.support.lua import LuaHarness

A, B = "a" * 32, "b" * 32


def refused(h: LuaHarness, tid: str) -> list[tuple[str, str, int, int]]:
    return [(e.event, e.to_state, e.attempt, e.repeats) for e in h.history(tid) if e.rejected]


def rej(h: LuaHarness, event: str) -> int:
    return int(h.r.hget(h.k.stats, f"rej:{event}") or 0)


# -- coalesced refusals ----------------------------------------------------------------


def test_repeated_refusals_in_one_state_are_one_entry_with_a_count() -> None:
    h = LuaHarness()
    h.group()
    h.enqueue(A)
    assert list(h.control(A, "CANCEL")) == [1, "CANCELLED"]
    n_before = len(h.history(A))
    for _ in range(50):
        assert list(h.control(A, "CANCEL")) == [0, "CANCELLED"]
    entries = h.history(A)
    assert len(entries) == n_before + 1
    first = entries[-1]
    assert first.rejected and first.event == "CANCEL" and first.message == "already CANCELLED"
    assert first.repeats == 49 and first.count == 50 and first.last_ts >= first.ts
    assert rej(h, "CANCEL") == 50
    # nothing but the first went to the events stream either (which tells of every
    # entry but a task's first, ENQUEUE)
    assert h.r.xlen(h.k.events) == len(entries) - 1


def test_alternating_refusals_do_not_escape_the_bound() -> None:
    h = LuaHarness()
    h.group()
    h.enqueue(A)
    r = h.start(A, h.deliver()[0])
    assert list(h.finish(A, "COMPLETE", r[5], body='"ok"')) == [1, "SUCCEEDED"]
    n_before = len(h.history(A))
    for _ in range(30):
        h.control(A, "CANCEL")
        h.control(A, "PAUSE")
        h.control(A, "RESUME")
        assert h.heartbeat(A, r[5], "1-1") == "SUCCEEDED"
        assert list(h.finish(A, "FAIL", r[5])) == [-2, "SUCCEEDED"]
    assert len(h.history(A)) == n_before + 5
    assert sorted(refused(h, A)) == [
        ("CANCEL", "SUCCEEDED", 1, 29),
        ("FAIL", "SUCCEEDED", 1, 29),
        ("HEARTBEAT", "SUCCEEDED", 1, 29),
        ("PAUSE", "SUCCEEDED", 1, 29),
        ("RESUME", "SUCCEEDED", 1, 29),
    ]
    assert sum(e.count for e in h.history(A)) == 150


def test_a_new_state_records_its_refusals_anew() -> None:
    """The coalescing is per stay in a state: after a transition (even back to the same
    state) the first refusal is an entry again, and the old entry keeps its count."""
    h = LuaHarness()
    h.group()
    h.enqueue(A)
    for _ in range(3):
        assert list(h.control(A, "RESUME")) == [-2, "PENDING"]
    assert list(h.control(A, "PAUSE")) == [1, "PAUSED"]
    assert list(h.control(A, "RESUME")) == [1, "PENDING"]
    for _ in range(2):
        assert list(h.control(A, "RESUME")) == [-2, "PENDING"]
    assert [(e.event, e.rejected, e.repeats) for e in h.history(A)] == [
        ("ENQUEUE", False, 0),
        ("RESUME", True, 2),
        ("PAUSE", False, 0),
        ("RESUME", False, 0),
        ("RESUME", True, 1),
    ]
    assert "refusals" in h.task(A)  # the current stay's list; the next transition clears it
    h.control(A, "CANCEL")
    assert "refusals" not in h.task(A)


def test_refusals_of_different_attempts_are_separate_entries() -> None:
    """Late results of two older attempts, refused in one state, are two entries, each
    with the attempt its lease names; a lease naming no attempt of the task has its own."""
    h = LuaHarness()
    h.group()
    h.enqueue(A)
    leases = []
    for n in (1, 2, 3):
        r = h.start(A, h.deliver()[0], nonce=f"n{n}")
        leases.append(r[5])
        if n < 3:
            h.control(A, "PAUSE")
            h.control(A, "RESUME")
    for lease in (leases[0], leases[1], leases[0], "99:forged", "77:forged", "x"):
        assert list(h.finish(A, "COMPLETE", lease, body='"late"')) == [-3, "RUNNING"]
    assert refused(h, A) == [
        ("COMPLETE", "RUNNING", 1, 1),
        ("COMPLETE", "RUNNING", 2, 0),
        ("COMPLETE", "RUNNING", 99, 1),  # attempts the task never had share one entry
        ("COMPLETE", "RUNNING", 0, 0),  # a token naming no attempt at all
    ]
    assert rej(h, "COMPLETE") == 6


def test_a_refused_late_result_records_the_attempt_of_its_lease() -> None:
    """A zombie of attempt 1 reports after attempt 2 succeeded: its refusal says attempt 1,
    not the task's current attempt 2 (and so does a refused heartbeat of it)."""
    h = LuaHarness()
    h.group()
    h.enqueue(A)
    zombie = h.start(A, h.deliver()[0], nonce="zombie")[5]
    h.control(A, "PAUSE")
    h.control(A, "RESUME")
    owner = h.start(A, h.deliver()[0], nonce="owner")
    assert owner[4] == 2
    assert h.heartbeat(A, zombie, "1-1") == "LOST"
    assert list(h.finish(A, "COMPLETE", owner[5], body='"owner"')) == [1, "SUCCEEDED"]
    assert list(h.finish(A, "COMPLETE", zombie, body='"zombie"')) == [-2, "SUCCEEDED"]
    assert refused(h, A) == [("HEARTBEAT", "RUNNING", 1, 0), ("COMPLETE", "SUCCEEDED", 1, 0)]
    # the events stream tells of both refusal entries
    told = {f["hid"] for _, f in h.r.xrange(h.k.events) if f["id"] == A}
    assert {e.id for e in h.history(A) if e.rejected} <= told


# -- queue-wait deadlines without a reaper ---------------------------------------------


def test_start_expires_a_task_past_its_queue_wait_deadline() -> None:
    h = LuaHarness()
    h.group()
    h.enqueue(A, wait_timeout_ms=1)
    entry = h.deliver()[0]
    h.advance(5)
    assert list(h.start(A, entry)) == [-4, "TIMED_OUT"]
    t = h.record(A)
    assert t.state == "TIMED_OUT" and t.error_type == "WaitTimeout"
    assert t.attempt == 0 and t.lease == ""
    last = h.history(A)[-1]
    assert (last.event, last.from_state, last.to_state) == ("EXPIRE", "PENDING", "TIMED_OUT")
    assert "queue-wait deadline" in last.message and "at START by w1" in last.message
    assert last.extra["worker"] == "w1"
    assert [e.event for e in h.history(A)] == ["ENQUEUE", "EXPIRE"]
    # the delivered entry is acked and deleted, nothing is left indexed
    assert h.r.xlen(h.k.queue("q")) == 0
    assert h.r.xpending(h.k.queue("q"), "workers")["pending"] == 0
    assert h.r.zcard(h.k.deadlines) == 0


def test_start_in_time_runs_and_drops_the_wait_deadline() -> None:
    h = LuaHarness()
    h.group()
    h.enqueue(A, wait_timeout_ms=60_000)
    assert h.r.zcard(h.k.deadlines) == 1
    assert h.start(A, h.deliver()[0])[0] == 1
    assert h.r.zcard(h.k.deadlines) == 0  # no timeout_ms: no deadline of any kind left


def test_promote_expires_a_scheduled_task_past_its_queue_wait_deadline() -> None:
    h = LuaHarness()
    h.group()
    h.enqueue(A, delay_ms=1, wait_timeout_ms=1)
    h.enqueue(B, delay_ms=1)
    h.advance(5)
    promoted, next_due = h.promote()
    assert (promoted, next_due) == (1, -1)
    assert h.task(A)["state"] == "TIMED_OUT" and h.task(B)["state"] == "PENDING"
    last = h.history(A)[-1]
    assert (last.event, last.from_state) == ("EXPIRE", "SCHEDULED")
    assert "at PROMOTE" in last.message
    assert h.r.zcard(h.k.scheduled) == 0 and h.r.zcard(h.k.deadlines) == 0
    assert h.r.xlen(h.k.queue("q")) == 1  # B's entry only


def test_a_pause_does_not_stop_the_queue_wait_clock() -> None:
    """RESUME of a task never started indexes its wait deadline again (the reaper drops
    a PAUSED task's member), and START expires it once that deadline has passed."""
    h = LuaHarness()
    h.group()
    h.enqueue(A, wait_timeout_ms=1)
    h.control(A, "PAUSE")
    h.r.zrem(h.k.deadlines, f"q:{A}")  # as the reaper does for a PAUSED task
    h.advance(5)
    h.control(A, "RESUME")
    assert h.r.zscore(h.k.deadlines, f"q:{A}") == float(h.task(A)["expires_at"])
    assert list(h.start(A, h.deliver()[0])) == [-4, "TIMED_OUT"]


# -- malformed arguments are refused before any write -----------------------------------


def _fails_writing_nothing(h: LuaHarness, call: Packed) -> None:
    before = h.snapshot()
    with pytest.raises(redis.ResponseError, match="rsjobs: invalid"):
        h.run(call)
    assert h.snapshot() == before


def _two_running(h: LuaHarness) -> tuple[list[Any], list[Any]]:
    h.group()
    h.enqueue(A, timeout_ms=60_000)
    h.enqueue(B, timeout_ms=60_000)
    ea, eb = h.deliver()
    return h.start(A, ea), h.start(B, eb)


def _finish(h: LuaHarness, *endings: tuple[str, Ending]) -> Packed:
    return layout.finish(h.c, h.k, "worker", [(h.tk(t), e) for t, e in endings])


def _beat(h: LuaHarness, lease_ms: Any, *beats: tuple[str, BeatItem]) -> Packed:
    return layout.heartbeat(
        h.c, "worker", BeatArgs("w1", lease_ms), [(h.tk(t), b) for t, b in beats]
    )


def _start(h: LuaHarness, tid: str, lease_ms: Any, nonce: str, entry: str) -> Packed:
    return layout.start(
        h.c, h.k, "worker", StartArgs("w1", lease_ms, nonce, "q"), [(h.tk(tid), Entry(entry))]
    )


def test_finish_checks_the_whole_batch_first() -> None:
    h = LuaHarness()
    ra, rb = _two_running(h)
    good = Ending("COMPLETE", ra[5], '"ok"', "", 1, -1, 0.5)
    for bad in (
        Ending("CANCEL", rb[5], "x", "E", 1, -1, 0.5),  # not an end of attempt
        Ending("FAIL", rb[5], "x", "E", 1, "soon", 0.5),
        Ending("FAIL", rb[5], "x", "E", 1, -1, "nan"),
        Ending("FAIL", rb[5], "x", "E", 1, -1, 2),
    ):
        _fails_writing_nothing(h, _finish(h, (A, good), (B, bad)))
    both = _finish(h, (A, good), (B, good))
    _fails_writing_nothing(h, both._replace(argv=both.argv[:-7]))  # one task's values missing
    assert h.task(A)["state"] == "RUNNING" and h.task(B)["state"] == "RUNNING"


def test_heartbeat_start_enqueue_deadline_control_check_arguments_first() -> None:
    h = LuaHarness()
    ra, rb = _two_running(h)
    beat = BeatItem(ra[5], h.task(A)["entry"], "10", "m")
    for bad_b in (
        BeatItem(rb[5], "not-an-id", "", ""),
        BeatItem(rb[5], "1-1", "0x10", ""),
        BeatItem(rb[5], "1-1", "101", ""),
    ):
        _fails_writing_nothing(h, _beat(h, 30_000, (A, beat), (B, bad_b)))
    _fails_writing_nothing(h, _beat(h, "1e3", (A, beat)))
    h.enqueue("c" * 32)
    (entry,) = h.deliver()
    _fails_writing_nothing(h, _start(h, "c" * 32, "-5", "n", entry))
    _fails_writing_nothing(h, _start(h, "c" * 32, 1000, "", entry))
    ok = h.new_task("d" * 32, payload="{}")
    for change in (
        {"max_attempts": 0},
        {"delay_ms": 10**30},
        {"delay_ms": "1e30"},
        {"delay_ms": -1},
        {"wait_timeout_ms": 1.5},
        {"queue": ""},
    ):
        queue = str(change.pop("queue", "q"))
        spec = h.new_task("e" * 32, payload="{}", **change)._replace(queue=queue)
        tasks = [(h.tk("d" * 32), ok), (h.tk("e" * 32, queue or "q"), spec)]
        _fails_writing_nothing(h, layout.enqueue(h.c, "api", tasks))
    for raw in (
        b"[]",
        b"{",
        b'{"max_attempts": 3, "priority": 1}',
        b'{"owner": 5, "max_attempts": 1}',
    ):
        spec = h.new_task("e" * 32)._replace(options=raw)
        tasks = [(h.tk("d" * 32), ok), (h.tk("e" * 32), spec)]
        _fails_writing_nothing(h, layout.enqueue(h.c, "api", tasks))
    members = [f"q:{A}", f"q:{B}"]
    items = [(h.tk(A), DeadlineItem(members[0], 0.5)), (h.tk(B), DeadlineItem(members[1], "x"))]
    _fails_writing_nothing(h, layout.deadline(h.c, "reaper", DeadlineArgs(0), items))
    items = [(h.tk(A), DeadlineItem(members[0], 0.5))]
    _fails_writing_nothing(h, layout.deadline(h.c, "reaper", DeadlineArgs("later"), items))
    for args in (
        ControlArgs("CANCEL", "x" * 5000, h.k.control),
        ControlArgs("CANCEL", "", ""),
    ):
        _fails_writing_nothing(h, layout.control(h.c, h.k, "user", h.tk(A), args))


def test_release_start_and_worker_texts_are_checked_first() -> None:
    h = LuaHarness()
    ra, _ = _two_running(h)
    h.enqueue("c" * 32)
    (entry,) = h.deliver()
    items = [(h.tk("c" * 32), Entry(entry)), (h.tk(A), Entry("garbage"))]
    _fails_writing_nothing(h, layout.release(h.c, "worker", items))
    _fails_writing_nothing(h, _start(h, "c" * 32, 1000, "n", "garbage"))
    long = "x" * 3000
    _fails_writing_nothing(h, _beat(h, 30_000, (A, BeatItem(ra[5], "1-1", "5", long))))
    _fails_writing_nothing(h, _beat(h, 30_000, (A, BeatItem(long, "1-1", "", ""))))
    _fails_writing_nothing(h, _finish(h, (A, Ending("COMPLETE", long, '"x"', "", 1, -1, 0.5))))
    release = layout.release(h.c, "worker", [(h.tk("c" * 32), Entry(entry))])
    assert h.run(release) == [1]  # well formed


def test_every_script_refuses_a_call_that_does_not_match_its_layout() -> None:
    """A call with a key or a value too many or too few is refused before any write, by
    each script's own check of #KEYS and #ARGV against its header."""
    from rsjobs.store.scripts import SCRIPT_NAMES

    h = LuaHarness()
    h.group()
    h.enqueue(A)
    for name in SCRIPT_NAMES:
        keys = [*h.k.common(), *h.tk(A)]
        too_few = Packed(name, keys, ["api", *h.c.argv])
        before = h.snapshot()
        with pytest.raises(redis.ResponseError, match="rsjobs: invalid layout"):
            h.run(too_few)
        assert h.snapshot() == before, name
        # a key or values more: some shape takes one of these as one more item of a
        # per-item layout (poll.lua: 3 keys and 1 value per candidate), whose own checks
        # then refuse it; each is refused with nothing written, most by the layout check
        layout_refusals = 0
        for extra_keys, extra_args in ((["x"], ["x", "y"]), (["x", "y"], ["x", "y", "z"])):
            call = Packed(name, [*keys, *extra_keys], ["api", *h.c.argv, *extra_args])
            before = h.snapshot()
            with pytest.raises(redis.ResponseError, match="rsjobs: invalid") as refused:
                h.run(call)
            assert h.snapshot() == before, name
            layout_refusals += "invalid layout" in str(refused.value)
        assert layout_refusals >= 1, name
