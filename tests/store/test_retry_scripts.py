"""retry.lua on fakeredis: RETRY / REPLAY start a finished task over as a new task, linked
both ways, the old one left in its state; refusals are recorded and write nothing else; a
second call answers the first one's task; malformed calls write nothing."""

from __future__ import annotations

import pytest
import redis

from rsjobs.labels import encode_labels
from rsjobs.model import TERMINAL, allowed
from rsjobs.store import layout
from rsjobs.store.index import label_tag, owner_tag
from rsjobs.store.layout import NewTask, RetryArgs, task_options
from tests.support.lua import LuaHarness
from tests.support.reference import replay

A, B, C, D = "a" * 32, "b" * 32, "c" * 32, "d" * 32


def _failed(h: LuaHarness, tid: str = A, *, dedup: str | None = None, **kw: object) -> None:
    """Enqueue ``tid`` and fail its only attempt (non-retryable): FAILED."""
    h.group()
    h.enqueue(tid, dedup=dedup, max_attempts=1, **kw)  # type: ignore[arg-type]
    (entry,) = h.deliver()
    started = h.start(tid, entry)
    assert h.finish(tid, "FAIL", started[5], "ValueError: bad", dedup=dedup) == [1, "FAILED"]


def _succeeded(h: LuaHarness, tid: str = A) -> None:
    h.group()
    h.enqueue(tid)
    (entry,) = h.deliver()
    started = h.start(tid, entry)
    assert h.finish(tid, "COMPLETE", started[5], '"ok"') == [1, "SUCCEEDED"]


def test_retry_starts_a_failed_task_over_as_a_linked_new_task() -> None:
    h = LuaHarness()
    _failed(h, timeout_ms=5000, backoff=200, backoff_max=400, payload='{"p": 7}')
    old_before = h.task(A)
    assert h.retry(A, B, message="fixed the model") == [1, B, "PENDING", ""]
    new, old = h.task(B), h.task(A)
    # the new task: the old one's type, queue, payload and options, PENDING on its queue
    for name in ("type", "queue", "payload", "max_attempts", "timeout_ms", "backoff_base_ms",
                 "backoff_max_ms"):  # fmt: skip
        assert new[name] == old_before[name], name
    assert (new["state"], new.get("attempt", "0")) == ("PENDING", "0")
    assert new["retry_of"] == A and "failures" not in new and "error" not in new
    assert h.r.xrange(h.k.queue("q"))[-1][1] == {"id": B}
    # the old task: still FAILED, linked, its history says who started it over and as what
    assert old["state"] == "FAILED" and old["retried_as"] == B
    last = h.history(A)[-1]
    assert (last.event, last.from_state, last.to_state, last.source) == (
        "RETRY", "FAILED", "FAILED", "admin:ops",
    )  # fmt: skip
    assert last.extra == {"as": B} and last.message == "fixed the model" and not last.rejected
    first = h.history(B)[0]
    assert (first.event, first.to_state, first.source) == ("ENQUEUE", "PENDING", "admin:ops")
    assert first.message == f"retry of {A} (FAILED): fixed the model"
    # both histories are paths of the table; the counters saw the RETRY
    assert replay(h.history(A)) == [] and replay(h.history(B)) == []
    assert h.r.hget(h.k.stats, "ev:RETRY") == "1"
    assert h.r.hget(h.k.stats, "q:PENDING") == "1" and h.r.hget(h.k.stats, "q:FAILED") == "1"


def test_replay_starts_a_succeeded_task_over() -> None:
    h = LuaHarness()
    _succeeded(h)
    assert h.retry(A, B, "REPLAY") == [1, B, "PENDING", ""]
    assert h.task(A)["state"] == "SUCCEEDED" and h.task(A)["retried_as"] == B
    last = h.history(A)[-1]
    assert (last.event, last.to_state, last.extra) == ("REPLAY", "SUCCEEDED", {"as": B})
    assert h.history(B)[0].message == f"replay of {A} (SUCCEEDED)"


@pytest.mark.parametrize("state", sorted(TERMINAL))
def test_each_terminal_state_takes_its_own_event_only(state: str) -> None:
    h = LuaHarness()
    h.group()
    h.enqueue(A, max_attempts=1, timeout_ms=1)
    (entry,) = h.deliver()
    lease = h.start(A, entry)[5]
    if state == "CANCELLED":
        h.control(A, "CANCEL")
    else:
        event = {"SUCCEEDED": "COMPLETE", "FAILED": "FAIL", "TIMED_OUT": "TIMEOUT"}[state]
        h.finish(A, event, lease, '"x"' if event == "COMPLETE" else "x")
    assert h.task(A)["state"] == state
    for event, new in (("RETRY", B), ("REPLAY", C)):
        reply = h.retry(A, new, event)
        if allowed(state, event, state):
            assert reply == [1, new, "PENDING", ""]
        else:
            assert reply[0] == -2 and reply[1] == state
            assert h.r.exists(h.k.task(new)) == 0


@pytest.mark.parametrize("state", ["PENDING", "SCHEDULED", "RUNNING", "PAUSED"])
def test_an_unfinished_task_is_refused_and_only_the_refusal_is_written(state: str) -> None:
    h = LuaHarness()
    h.group()
    h.enqueue(A, delay_ms=60_000 if state == "SCHEDULED" else 0)
    if state == "RUNNING":
        (entry,) = h.deliver()
        h.start(A, entry)
    if state == "PAUSED":
        h.control(A, "PAUSE")
    before = h.snapshot()
    reply = h.retry(A, B)
    assert reply[:2] == [-2, state] and "only a finished task" in reply[2]
    assert h.task(A)["state"] == state and h.r.exists(h.k.task(B)) == 0
    refusal = h.history(A)[-1]
    assert (refusal.event, refusal.rejected, refusal.to_state) == ("RETRY", True, state)
    # a second refusal is coalesced into the first: nothing more in the history
    n = len(h.history(A))
    assert h.retry(A, C)[0] == -2 and len(h.history(A)) == n
    assert h.history(A)[-1].repeats == 1
    after = h.snapshot()
    # what changed: the task hash (its refusal entry and counters), the events stream, the
    # refusal counter; no task, queue entry or index was added
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert changed <= {h.k.task(A), h.k.events, h.k.stats}


def test_a_second_retry_answers_the_first_ones_task_and_writes_nothing() -> None:
    h = LuaHarness()
    _failed(h)
    assert h.retry(A, B)[0] == 1
    before = h.snapshot()
    assert h.retry(A, C) == [0, B, "", f"already started over as {B}"]
    assert h.snapshot() == before


def test_a_retry_whose_task_expired_can_be_made_again() -> None:
    h = LuaHarness()
    _failed(h)
    assert h.retry(A, B)[0] == 1
    h.r.delete(h.k.task(B))  # its retention ended
    assert h.retry(A, C, replaces=B) == [1, C, "PENDING", ""]
    assert h.task(A)["retried_as"] == C
    # naming a task that is not the linked one changes nothing
    before = h.snapshot()
    assert h.retry(A, D, replaces=B)[:2] == [0, C] and h.snapshot() == before


def test_the_dedup_key_moves_to_the_new_task() -> None:
    h = LuaHarness()
    _failed(h, dedup="job-7")
    dkey = h.k.dedup("job-7")
    assert h.r.get(dkey) == A
    assert h.retry(A, B, dedup="job-7")[0] == 1
    assert h.r.get(dkey) == B and h.r.pttl(dkey) == -1  # a live task's key does not expire
    assert h.task(B)["dedup"] == "job-7"
    # a submit with the key answers the new task
    assert h.enqueue(C, dedup="job-7") == [B, "", 1]


def test_a_dedup_key_naming_another_task_stays_where_it_is() -> None:
    h = LuaHarness()
    _failed(h, dedup="k")
    h.r.set(h.k.dedup("k"), D)
    assert h.retry(A, B, dedup="k")[0] == 1
    assert h.r.get(h.k.dedup("k")) == D and "dedup" not in h.task(B)


def test_owner_labels_and_queue_wait_deadline_are_kept() -> None:
    h = LuaHarness()
    h.group()
    options = task_options(max_attempts=1, backoff_base_ms=1000, backoff_max_ms=300_000,
                           owner="alice", wait_timeout_ms=60_000)  # fmt: skip
    task = NewTask(A, "img", "q", "{}", options)
    h.run(layout.enqueue(h.c, "api", [(h.tk(A), task)]))
    h.r.hset(h.k.task(A), "labels", '{"user":"u_9"}')
    h.control(A, "CANCEL")
    assert h.retry(A, B)[0] == 1
    new = h.task(B)
    assert new["owner"] == "alice" and new["labels"] == '{"user":"u_9"}'
    assert int(new["expires_at"]) - int(new["created_at"]) == 60_000
    assert h.r.zscore(h.k.deadlines, f"q:{B}") == int(new["expires_at"])
    assert "backoff_base_ms" not in new and "max_attempts" in new  # defaults stay unstored


def test_the_new_task_is_in_the_owner_and_label_index_as_a_submit_puts_it() -> None:
    h = LuaHarness()
    h.group()
    labels = encode_labels({"user": "u_9", "character": "c_1"})
    h.run(layout.enqueue(h.c, "api", [(h.tk(A), h.new_task(A, owner="alice", labels=labels))]))
    h.control(A, "CANCEL")
    assert h.retry(A, B)[0] == 1
    new = h.task(B)
    assert new["labels"] == labels
    tags = (owner_tag("alice"), label_tag("user", "u_9"), label_tag("character", "c_1"))
    mine = sorted(f"{tag}|{int(new['created_at']):013d}|{B}" for tag in tags)
    assert sorted(m for m in h.r.zrange(h.k.tags, 0, -1) if m.endswith(B)) == mine


def test_labels_that_do_not_read_are_refused_and_nothing_else_written() -> None:
    h = LuaHarness()
    _failed(h)
    h.r.hset(h.k.task(A), "labels", "not json")
    before = h.snapshot()
    code, state, why = h.retry(A, B)
    assert (code, state) == (-2, "FAILED") and "labels" in why
    assert not h.r.exists(h.k.task(B)) and not h.r.exists(h.k.tags)
    last = h.history(A)[-1]
    assert last.rejected and last.event == "RETRY"
    after = h.snapshot()
    changed = {k for k in after if after[k] != before.get(k)}
    # the refusal: its entry in the task hash and the events stream, its counter
    assert changed <= {h.k.task(A), h.k.events, h.k.stats}


def test_a_workflows_task_is_refused() -> None:
    h = LuaHarness()
    _failed(h)
    h.r.hset(h.k.task(A), "wf", "f" * 32)
    reply = h.retry(A, B)
    assert reply[0] == -2 and "retry it through its workflow" in reply[2]
    assert h.r.exists(h.k.task(B)) == 0


def test_malformed_calls_write_nothing() -> None:
    h = LuaHarness()
    _failed(h, dedup="k")
    for args in (
        RetryArgs("RESTART", B, "", ""),
        RetryArgs("RETRY", "", "", ""),
        RetryArgs("RETRY", B, "x" * 5000, ""),
        RetryArgs("RETRY", A, "", ""),  # the new id is in use
    ):
        call = layout.retry(h.c, "cli", h.tk(A, "q", "k"), h.tk(args.new_id or B, "q", "k"), args)
        _fails(h, call)
    args = RetryArgs("RETRY", B, "", "")
    # the new task on another queue, or with another dedup key, or the task's dedup key
    # not passed: refused before any write
    _fails(h, layout.retry(h.c, "cli", h.tk(A, "q", "k"), h.tk(B, "other", "k"), args))
    _fails(h, layout.retry(h.c, "cli", h.tk(A, "q", "k"), h.tk(B, "q", "j"), args))
    _fails(h, layout.retry(h.c, "cli", h.tk(A, "q"), h.tk(B, "q"), args))


def _fails(h: LuaHarness, call: layout.Packed) -> None:
    before = h.snapshot()
    with pytest.raises(redis.ResponseError, match=r"rsjobs: (invalid|unknown)"):
        h.run(call)
    assert h.snapshot() == before


def test_no_such_task() -> None:
    h = LuaHarness()
    assert h.retry(A, B) == [-1, "", "", "no such task"]
    assert h.r.exists(h.k.task(B)) == 0
