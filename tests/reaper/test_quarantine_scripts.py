"""A task hash the scripts did not write: fsm.lua's load refuses it before any write, and
quarantine.lua fails it through the table (DEADLETTER) or takes it out of an index."""

from __future__ import annotations

from typing import Any

import pytest
from redis.exceptions import ResponseError

from rsjobs.store import layout
from rsjobs.store.layout import QuarantineArgs
from rsjobs.store.record import field
from tests.support.lua import LuaHarness

TID = "a" * 32
OTHER = "b" * 32


def dump(h: LuaHarness) -> dict[str, Any]:
    return {k: h.r.dump(k) for k in sorted(h.r.keys("*"))}


def running(h: LuaHarness, tid: str = TID) -> str:
    """A RUNNING task; returns its entry."""
    h.enqueue(tid)
    h.group()
    (entry,) = h.deliver()
    assert h.start(tid, entry)[0] == 1
    return entry


def quarantine(
    h: LuaHarness, index: str, ref: str, tid: str = TID, queue: str = "q", step: str = "test"
) -> list[Any]:
    args = QuarantineArgs(tid, queue, index, ref, step, "broken on purpose", 1000)
    reply: list[Any] = h.run(layout.quarantine(h.c, h.k, "reaper", h.tk(tid, queue), args))
    return reply


def deadletters(h: LuaHarness) -> list[dict[str, str]]:
    return [f for _, f in h.r.xrange(h.k.deadletter)]


def test_load_refuses_a_task_without_its_queue_before_any_write() -> None:
    h = LuaHarness()
    h.enqueue(TID)
    h.group()
    (entry,) = h.deliver()
    h.r.hdel(h.k.task(TID), field("queue"))
    before = dump(h)
    with pytest.raises(ResponseError, match=r"corrupt task hash .* no id or queue field"):
        h.start(TID, entry)
    assert dump(h) == before


def test_a_garbled_backoff_falls_back_to_the_defaults() -> None:
    h = LuaHarness()
    entry = running(h)
    h.r.hset(h.k.task(TID), mapping={"backoff_base_ms": "soon", "backoff_max_ms": ""})
    lease = h.task(TID)["lease"]
    assert h.finish(TID, "FAIL", lease, "boom") == [1, "SCHEDULED"]
    assert h.r.xrange(h.k.queue("q"), entry, entry) == []
    due = int(h.task(TID)["due_at"]) - int(h.task(TID)["updated_at"])
    assert 500 <= due < 1000  # the first retry of base 1000 ms, with jitter


def test_a_running_task_without_queue_is_dead_lettered_and_its_fields_restored() -> None:
    h = LuaHarness()
    entry = running(h)
    h.r.hdel(h.k.task(TID), field("queue"))
    assert quarantine(h, "queue", entry, step="recovery") == ["DEADLETTERED", "FAILED"]
    t = h.task(TID)
    assert t["state"] == "FAILED" and t["queue"] == "q" and t["error_type"] == "DeadLetter"
    assert t["error"].startswith("quarantined: recovery failed on this task: broken on purpose")
    last = h.history(TID)[-1]
    assert (last.from_state, last.event, last.to_state) == ("RUNNING", "DEADLETTER", "FAILED")
    assert last.extra["step"] == "recovery"
    (dl,) = deadletters(h)
    assert dl["id"] == TID and dl["action"] == "DEADLETTER" and dl["from"] == "RUNNING"
    assert t["deadletter"]  # requeue-able like any dead letter
    assert (
        h.r.xrange(h.k.queue("q")) == [] and h.r.xpending(h.k.queue("q"), "workers")["pending"] == 0
    )


def test_a_scheduled_task_can_be_dead_lettered() -> None:
    h = LuaHarness()
    h.enqueue(TID, delay_ms=60_000)
    member = f"q:{TID}"
    assert h.r.zscore(h.k.scheduled, member) is not None
    assert quarantine(h, "scheduled", member, step="promotion") == ["DEADLETTERED", "FAILED"]
    assert h.r.zscore(h.k.scheduled, member) is None
    assert h.history(TID)[-1].from_state == "SCHEDULED"


def test_a_task_the_table_cannot_move_is_taken_out_of_its_index_and_recorded() -> None:
    h = LuaHarness()
    h.enqueue(TID)
    assert h.control(TID, "PAUSE")[0] == 1
    member = f"q:{TID}"
    h.r.zadd(h.k.deadlines, {member: 1})
    assert quarantine(h, "deadlines", member, step="deadlines") == ["REMOVED", "PAUSED"]
    assert h.r.zscore(h.k.deadlines, member) is None
    assert h.task(TID)["state"] == "PAUSED"
    (dl,) = deadletters(h)
    assert dl["action"] == "REMOVED" and "reference removed from deadlines" in dl["reason"]
    # again: the reference is gone, nothing to do, nothing written
    before = dump(h)
    assert quarantine(h, "deadlines", member) == ["GONE", "PAUSED"]
    assert dump(h) == before


def test_a_garbled_history_count_overwrites_no_entry() -> None:
    """A task whose history count (hn) does not parse is dead-lettered with its DEADLETTER
    entry after the last entry there: no entry of its history is overwritten."""
    h = LuaHarness()
    entry = running(h)
    before = [e.event for e in h.history(TID)]
    h.r.hset(h.k.task(TID), "hn", "lots")
    assert quarantine(h, "queue", entry) == ["DEADLETTERED", "FAILED"]
    assert h.task(TID)["hn"] == str(len(before) + 1)
    assert [e.event for e in h.history(TID)] == [*before, "DEADLETTER"]


def test_a_key_that_is_not_a_hash() -> None:
    h = LuaHarness()
    h.r.set(h.k.task(OTHER), "junk")
    h.r.zadd(h.k.scheduled, {f"q:{OTHER}": 1})
    assert quarantine(h, "scheduled", f"q:{OTHER}", tid=OTHER) == ["REMOVED", ""]
    assert "a string, not a hash" in deadletters(h)[0]["reason"]
    assert h.r.get(h.k.task(OTHER)) == "junk"
