"""after.lua and successors.lua on fakeredis: the checks before any write, the release
stream a predecessor's end writes (only when it has successors), release and cancel
exactly once (a repeat, two steps at once, a diamond), a predecessor gone by retention,
RETRY and REPLAY of predecessors and successors, PAUSE and CANCEL of a WAITING task."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from rsjobs.store import layout
from rsjobs.store.layout import NewTask, SuccessorItem, task_options
from tests.support.lua import LuaHarness
from tests.support.reference import replay

A, B, C, D = "a" * 32, "b" * 32, "c" * 32, "d" * 32


def _harness() -> LuaHarness:
    h = LuaHarness()
    h.group()
    return h


def _run(h: LuaHarness, tid: str, event: str = "COMPLETE", body: str = '{"v": 1}') -> Any:
    """Start the task's current entry and end it with ``event`` (non-retryable FAIL)."""
    entry = h.task(tid)["entry"]
    h.deliver()
    started = h.start(tid, entry)
    assert started[0] == 1, started
    return h.finish(tid, event, started[5], body=body, retryable=False)


def _state(h: LuaHarness, tid: str) -> str:
    return h.task(tid)["state"]


def _fails_writing_nothing(
    h: LuaHarness, call: layout.Packed, match: str = "rsjobs: invalid"
) -> None:
    before = h.snapshot()
    with pytest.raises(redis.ResponseError, match=match):
        h.run(call)
    assert h.snapshot() == before


# -- enqueue: the checks ------------------------------------------------------------------


def test_a_successor_waits_and_its_predecessor_notes_it() -> None:
    h = _harness()
    h.enqueue(A)
    assert h.after(B, [A]) == [1, B, "WAITING", ""]
    b = h.task(B)
    assert b["after"] == A and "entry" not in b and "expires_at" not in b
    assert h.task(A)["successors"] == B
    assert h.r.zrange(h.k.waiting, 0, -1) == [f"q:{B}"]
    # nothing a worker or the reaper reads: no work entry, no schedule, no deadline
    assert h.r.xlen(h.k.queue("q")) == 1
    assert h.r.zcard(h.k.scheduled) == h.r.zcard(h.k.deadlines) == 0
    assert h.r.hget(h.k.stats, "q:WAITING") == "1"


def test_an_unknown_predecessor_and_another_owners_get_the_same_answer() -> None:
    h = _harness()
    h.enqueue(A, owner="alice")
    before = h.snapshot()
    other = h.after(B, [A], owner="bob")
    missing = h.after(B, [C], owner="bob")
    assert other == [-1, "", "", A] and missing == [-1, "", "", C]
    assert h.snapshot() == before
    # the same owner may
    assert h.after(B, [A], owner="alice")[0] == 1


def test_a_workflow_task_and_a_full_predecessor_are_refused_writing_nothing() -> None:
    h = _harness()
    h.enqueue(A)
    h.r.hset(h.k.task(A), "wf", "w1")
    before = h.snapshot()
    code, _, _, why = h.after(B, [A])
    assert code == -2 and "workflow w1" in why
    assert h.snapshot() == before
    h.r.hdel(h.k.task(A), "wf")
    h.r.hset(h.k.task(A), "sc", ",".join(f"{i:032x}" for i in range(1000)))
    before = h.snapshot()
    code, _, _, why = h.after(B, [A])
    assert code == -2 and "1000 successors" in why
    assert h.snapshot() == before


@pytest.mark.parametrize(
    "predecessors, why",
    [
        ([], "number of predecessors"),
        ([f"{i:032x}" for i in range(33)], "number of predecessors"),
        ([A, A], r"predecessor \(named twice\)"),
        ([B], r"predecessor \(the new task itself\)"),
        (["a,b"], "predecessor id"),
        (["x:y"], "predecessor id"),
    ],
)
def test_malformed_predecessors_write_nothing(predecessors: list[str], why: str) -> None:
    h = _harness()
    h.enqueue(A)
    task = h.new_task(B)
    call = layout.after(h.c, h.k, "api", h.tk(B), task, predecessors)
    _fails_writing_nothing(h, call, f"rsjobs: invalid {why}")


@pytest.mark.parametrize(
    "task",
    [
        NewTask(
            "a,b",
            "img",
            "q",
            "{}",
            task_options(max_attempts=1, backoff_base_ms=0, backoff_max_ms=0),
        ),
        NewTask(
            B, "", "q", "{}", task_options(max_attempts=1, backoff_base_ms=0, backoff_max_ms=0)
        ),
        NewTask(B, "img", "q", "{}", '{"max_attempts": 1, "after_policy": "sometimes"}'),
        NewTask(B, "img", "q", "{}", "not json"),
    ],
)
def test_a_malformed_successor_writes_nothing(task: NewTask) -> None:
    h = _harness()
    h.enqueue(A)
    _fails_writing_nothing(h, layout.after(h.c, h.k, "api", h.tk(B), task, [A]))


def test_a_cut_layout_writes_nothing() -> None:
    h = _harness()
    h.enqueue(A)
    call = layout.after(h.c, h.k, "api", h.tk(B), h.new_task(B), [A])
    _fails_writing_nothing(h, call._replace(argv=call.argv[:-1]))
    _fails_writing_nothing(h, call._replace(keys=call.keys[:-1]))


def test_a_dedup_key_in_use_answers_the_live_task() -> None:
    h = _harness()
    h.enqueue(A)
    assert h.after(B, [A], dedup="k")[:3] == [1, B, "WAITING"]
    before = h.snapshot()
    assert h.after(C, [A], dedup="k")[:2] == [0, B]
    assert h.after(B, [A])[:3] == [0, B, "WAITING"]
    assert h.snapshot() == before


def test_finished_predecessors_count_at_once() -> None:
    h = _harness()
    h.enqueue(A)
    _run(h, A, body='{"img": "a.png"}')
    h.enqueue(B)
    # all SUCCEEDED: released by the enqueue itself, their results kept
    assert h.after(C, [A], delay_ms=60_000)[:3] == [1, C, "SCHEDULED"]
    c = h.task(C)
    assert c["after"] == f"{A}:SUCCEEDED" and c["predecessors"] == f'{{"{A}":{{"img": "a.png"}}}}'
    assert "successors" not in h.task(A)  # finished: nothing to note
    # one finished, one not: counted, and waits for the other
    assert h.after(D, [A, B])[:3] == [1, D, "WAITING"]
    assert h.task(D)["after"] == f"{A}:SUCCEEDED,{B}"
    assert h.task(B)["successors"] == D
    assert [(e.event, e.to_state) for e in h.history(C)] == [
        ("ENQUEUE", "WAITING"),
        ("RELEASE", "SCHEDULED"),
    ]


def test_a_failed_predecessor_cancels_at_once_and_notes_nothing_elsewhere() -> None:
    h = _harness()
    h.enqueue(A, max_attempts=1)
    _run(h, A, "FAIL", "boom")
    h.enqueue(B)
    assert h.after(C, [B, A])[:3] == [1, C, "CANCELLED"]
    assert "successors" not in h.task(B)  # it has nothing to wait for
    assert h.r.zcard(h.k.waiting) == 0
    cancel = h.history(C)[-1]
    assert cancel.extra == {"pred": A, "pred_state": "FAILED"}
    assert "boom" in cancel.message
    # under "always" it is counted instead, and waits for B
    assert h.after(D, [B, A], after_policy="always")[:3] == [1, D, "WAITING"]
    assert h.task(D)["after"] == f"{B},{A}:FAILED" and h.task(D)["after_policy"] == "always"


# -- the release stream ---------------------------------------------------------------------


def test_a_task_without_successors_writes_no_release_entry() -> None:
    h = _harness()
    h.enqueue(A)
    assert _run(h, A) == [1, "SUCCEEDED"]
    assert h.r.exists(h.k.release) == 0
    assert "successors" not in h.task(A)


def test_the_finish_reply_says_when_it_wrote_a_release_entry() -> None:
    h = _harness()
    h.enqueue(A)
    h.after(B, [A])
    assert _run(h, A, body='{"x": 1}') == [1, "SUCCEEDED", 1]
    ((_, entry),) = h.r.xrange(h.k.release)
    assert entry == {"id": A, "q": "q", "s": "SUCCEEDED", "sc": B, "r": '{"x": 1}'}


def test_a_cancelled_predecessor_says_so_in_the_control_reply() -> None:
    h = _harness()
    h.enqueue(A)
    h.after(B, [A])
    assert list(h.control(A, "CANCEL", message="not needed")) == [1, "CANCELLED", 1]
    ((_, entry),) = h.r.xrange(h.k.release)
    assert entry["s"] == "CANCELLED" and "not needed" in entry["err"]
    assert h.release_all() == ["CANCELLED"]
    assert "not needed" in h.task(B)["error"]


def test_a_long_error_is_cut_on_a_character_boundary() -> None:
    h = _harness()
    h.enqueue(A, max_attempts=1)
    h.after(B, [A])
    _run(h, A, "FAIL", "é" * 300)
    ((_, entry),) = h.r.xrange(h.k.release)
    assert len(entry["err"].encode()) <= 200  # read as text: no character was split


# -- the release step -----------------------------------------------------------------------


def test_a_chain_moves_one_link_per_end_and_each_release_step_is_idempotent() -> None:
    h = _harness()
    h.enqueue(A)
    h.after(B, [A])
    h.after(C, [B])
    _run(h, A, body='{"n": 1}')
    items = h.release_items()
    reply = h.run(layout.successors(h.c, h.k, "worker", items))
    assert reply == [["RELEASED"], 1, 0]
    # the same items again: the entry is gone, nothing is written
    before = h.snapshot()
    assert h.run(layout.successors(h.c, h.k, "worker", items)) == [["DONE"], 0, 0]
    assert h.snapshot() == before
    assert _state(h, B) == "PENDING" and _state(h, C) == "WAITING"
    assert h.task(B)["predecessors"] == f'{{"{A}":{{"n": 1}}}}'


def test_two_release_steps_at_once_release_each_of_twenty_successors_once() -> None:
    h = _harness()
    h.enqueue(A)
    succ = [f"{i:032x}" for i in range(1, 21)]
    for s in succ:
        h.after(s, [A])
    _run(h, A)
    first, second = h.release_items(), h.release_items()  # both read before either runs
    assert h.run(layout.successors(h.c, h.k, "worker", first))[0] == ["RELEASED"] * 20
    assert h.run(layout.successors(h.c, h.k, "reaper", second))[0] == ["DONE"] * 20
    entries = h.r.xrange(h.k.queue("q"))
    assert sorted(f["id"] for _, f in entries) == sorted(succ)  # one queue entry each
    for s in succ:
        assert [e.event for e in h.history(s)] == ["ENQUEUE", "RELEASE"]
    assert h.r.hget(h.k.stats, "ev:RELEASE") == "20"


def test_a_diamond_releases_its_last_task_once() -> None:
    h = _harness()
    h.enqueue(A)
    h.after(B, [A])
    h.after(C, [A])
    h.after(D, [B, C])
    _run(h, A)
    assert sorted(h.release_all()) == ["RELEASED", "RELEASED"]
    _run(h, B)
    assert h.release_all() == ["COUNTED"]
    assert _state(h, D) == "WAITING"
    _run(h, C)
    assert h.release_all() == ["RELEASED"]
    assert h.task(D)["after"] == f"{B}:SUCCEEDED,{C}:SUCCEEDED"
    assert [e.event for e in h.history(D)] == ["ENQUEUE", "RELEASE"]
    assert h.r.xlen(h.k.release) == 0


def test_a_predecessor_gone_by_retention_still_releases_its_successor() -> None:
    h = _harness()
    h.enqueue(A)
    h.after(B, [A])
    _run(h, A, body='{"url": "a.png"}')
    h.r.delete(h.k.task(A))  # its hash expired before the release step ran
    assert h.release_all() == ["RELEASED"]
    assert h.task(B)["predecessors"] == f'{{"{A}":{{"url": "a.png"}}}}'


def test_a_successor_gone_or_unreadable_is_skipped_and_the_entry_deleted() -> None:
    h = _harness()
    h.enqueue(A)
    h.after(B, [A])
    h.after(C, [A])
    _run(h, A)
    h.r.delete(h.k.task(B))
    h.r.hdel(h.k.task(C), "q")  # not written by rsjobs: no queue
    assert h.release_all() == ["GONE", "GONE"]
    assert h.r.xlen(h.k.release) == 0


@pytest.mark.parametrize("cut", ["entry", "successor", "order", "split"])
def test_a_malformed_release_call_writes_nothing(cut: str) -> None:
    h = _harness()
    h.enqueue(A)
    h.after(B, [A])
    h.after(C, [A])
    _run(h, A)
    items = h.release_items()
    (k1, i1), (k2, i2) = items
    bad: list[tuple[Any, SuccessorItem]] = {
        "entry": [(k1, i1._replace(entry="x")), (k2, i2)],
        "successor": [(k1, i1._replace(id="a,b")), (k2, i2)],
        "order": [(k2, i2), (k1, i1)],
        "split": [(k1, i1)],
    }[cut]
    _fails_writing_nothing(h, layout.successors(h.c, h.k, "worker", bad))


def test_retry_and_replay_of_a_predecessor_do_not_release_twice() -> None:
    h = _harness()
    h.enqueue(A, max_attempts=1)
    h.after(B, [A], after_policy="always")
    _run(h, A, "FAIL", "boom")
    assert h.release_all() == ["RELEASED"]
    assert h.retry(A, C)[0] == 1
    assert "successors" not in h.task(C)
    assert h.r.xlen(h.k.release) == 0
    _run(h, C)
    assert h.r.xlen(h.k.release) == 0
    assert h.retry(C, D, "REPLAY")[0] == 1
    assert h.r.xlen(h.k.release) == 0
    assert [e.event for e in h.history(B)] == ["ENQUEUE", "RELEASE"]


def test_a_released_successor_starts_over_with_its_predecessors_results() -> None:
    h = _harness()
    h.enqueue(A)
    h.after(B, [A])
    _run(h, A, body='{"n": 7}')
    h.release_all()
    _run(h, B)
    assert h.retry(B, C, "REPLAY")[0] == 1
    c = h.task(C)
    assert c["state"] == "PENDING" and c["after"] == f"{A}:SUCCEEDED"
    assert c["predecessors"] == f'{{"{A}":{{"n": 7}}}}'
    assert h.r.zcard(h.k.waiting) == 0


def test_a_successor_cancelled_while_waiting_is_not_started_over() -> None:
    h = _harness()
    h.enqueue(A, max_attempts=1)
    h.after(B, [A])
    _run(h, A, "FAIL", "boom")
    h.release_all()
    code, state, why = h.retry(B, C)
    assert (code, state) == (-2, "CANCELLED") and "never released" in why
    assert not h.r.exists(h.k.task(C))


def test_a_waiting_task_refuses_pause_and_leaves_its_index_when_cancelled() -> None:
    h = _harness()
    h.enqueue(A)
    h.after(B, [A])
    assert list(h.control(B, "PAUSE")) == [-2, "WAITING"]
    (refusal,) = [e for e in h.history(B) if e.rejected]
    assert refusal.event == "PAUSE" and refusal.from_state == "WAITING"
    assert list(h.control(B, "CANCEL")) == [1, "CANCELLED"]
    assert h.r.zcard(h.k.waiting) == 0
    _run(h, A)
    assert h.release_all() == ["STALE"]  # counted by nothing: it is not WAITING
    assert _state(h, B) == "CANCELLED"
    assert replay(h.history(B)) == []


def test_a_released_successors_delay_and_queue_wait_deadline_start_at_its_release() -> None:
    h = _harness()
    h.enqueue(A)
    h.after(B, [A], delay_ms=50_000, wait_timeout_ms=90_000)
    b = h.task(B)
    assert (b["release_delay_ms"], b["release_wait_ms"]) == ("50000", "90000")
    _run(h, A)
    h.release_all()
    b = h.task(B)
    released = int(h.r.time()[0]) * 1000
    assert b["state"] == "SCHEDULED"
    assert abs(int(b["due_at"]) - (released + 50_000)) < 5_000
    assert abs(int(b["expires_at"]) - (released + 90_000)) < 5_000
    assert h.r.zscore(h.k.deadlines, f"q:{B}") == float(b["expires_at"])


def test_a_heartbeat_or_start_of_a_waiting_task_is_refused() -> None:
    h = _harness()
    h.enqueue(A)
    h.after(B, [A])
    assert h.heartbeat(B, "1:x", "1-1") == "WAITING"
    assert h.start(B, "1-1")[0] == -2
    assert _state(h, B) == "WAITING"


def test_a_quarantined_predecessor_cancels_its_successor() -> None:
    from rsjobs.store.layout import QuarantineArgs

    h = _harness()
    h.enqueue(A)
    h.after(B, [A])
    (entry,) = h.deliver()
    h.start(A, entry)
    h.r.hset(h.k.task(A), "type", "garbled")  # what a quarantine is for: data that breaks
    args = QuarantineArgs(A, "q", "queue", entry, "recovery", "broken on purpose", 1000)
    assert h.run(layout.quarantine(h.c, h.k, "reaper", h.tk(A), args))[0] == "DEADLETTERED"
    assert h.release_all() == ["CANCELLED"]
    assert h.history(B)[-1].extra == {"pred": A, "pred_state": "FAILED"}


def test_an_entry_naming_what_is_not_a_task_id_is_refused_writing_nothing() -> None:
    h = _harness()
    h.r.xadd(h.k.release, {"id": A, "q": "q", "s": "FAILED", "sc": "x y"})
    ((eid, _),) = h.r.xrange(h.k.release)
    items = [(h.tk("x y"), SuccessorItem(eid, "x y"))]
    _fails_writing_nothing(h, layout.successors(h.c, h.k, "worker", items))
