"""queue.lua and start.lua on fakeredis: a queue's pause flag, and START of a paused queue's
delivery (handed back, the task PENDING, nothing recorded)."""

from __future__ import annotations

import json

import pytest
import redis

from rsjobs.store import layout
from rsjobs.store.layout import QueueArgs
from tests.support.lua import LuaHarness

A, B = "a" * 32, "b" * 32


def test_pause_and_resume_a_queue() -> None:
    h = LuaHarness()
    code, record = h.queue_flag("PAUSE_QUEUE", "gpu", "driver update")
    assert code == 1
    rec = json.loads(record)
    assert rec["by"] == "admin:ops" and rec["reason"] == "driver update" and rec["at"] > 0
    assert h.r.hget(h.k.paused, "gpu") == record
    assert "gpu" in h.r.smembers(h.k.queues)  # listed before its first task
    # a repeat answers the record in force and writes nothing
    before = h.snapshot()
    assert h.queue_flag("PAUSE_QUEUE", "gpu", "again") == [0, record]
    assert h.snapshot() == before
    assert h.queue_flag("RESUME_QUEUE", "gpu") == [1, ""]
    assert h.r.hexists(h.k.paused, "gpu") == 0
    assert h.queue_flag("RESUME_QUEUE", "gpu") == [0, ""]


def test_a_paused_queues_delivery_is_handed_back_and_the_task_waits() -> None:
    h = LuaHarness()
    h.group()
    h.enqueue(A)
    h.enqueue(B, queue="other")
    h.group("other")
    (entry,) = h.deliver()
    h.queue_flag("PAUSE_QUEUE", "q")
    history = h.history(A)
    assert h.start(A, entry) == [-5, "PENDING"]
    task = h.task(A)
    assert task["state"] == "PENDING" and task["entry"] != entry
    # the delivered entry is acked and deleted; a fresh one waits on the stream
    stream = h.r.xrange(h.k.queue("q"))
    assert [e for e, _ in stream] == [task["entry"]]
    assert h.r.xpending(h.k.queue("q"), "workers")["pending"] == 0
    assert h.history(A) == history  # no transition, no entry
    # another queue is not held back
    (other,) = h.deliver(queue="other")
    assert h.start(B, other, queue="other")[0] == 1
    # once resumed, the fresh entry starts
    h.queue_flag("RESUME_QUEUE", "q")
    (fresh,) = h.deliver()
    assert fresh == task["entry"] and h.start(A, fresh)[0] == 1


def test_a_paused_queue_does_not_stop_the_queue_wait_deadline() -> None:
    h = LuaHarness()
    h.group()
    h.enqueue(A, wait_timeout_ms=1)
    (entry,) = h.deliver()
    h.queue_flag("PAUSE_QUEUE", "q")
    h.r.hset(h.k.task(A), "expires_at", 1)  # long past
    assert h.start(A, entry) == [-4, "TIMED_OUT"]


def test_malformed_queue_calls_write_nothing() -> None:
    h = LuaHarness()
    for args in (
        QueueArgs("PAUSE", "q", "", h.k.control),
        QueueArgs("PAUSE_QUEUE", "", "", h.k.control),
        QueueArgs("PAUSE_QUEUE", "q", "x" * 5000, h.k.control),
        QueueArgs("PAUSE_QUEUE", "q", "", ""),
    ):
        before = h.snapshot()
        with pytest.raises(redis.ResponseError, match=r"rsjobs: (invalid|unknown)"):
            h.run(layout.queue(h.c, h.k, "cli", args))
        assert h.snapshot() == before
        assert h.r.exists(h.k.queues) == 0
