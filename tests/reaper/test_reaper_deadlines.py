"""Deadlines and delayed work, enforced by the reaper even when no worker can."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator

import pytest

from rsjobs import Client
from rsjobs.store.keys import GROUP
from tests.support.processes import stop_process, wait_for_state
from tests.support.reaper import (
    reaper_loop,
    spawn,
    terminal_transitions,
    wait_history,
    wait_registered,
)
from tests.support.reference import replay

pytestmark = pytest.mark.integration


@pytest.fixture
async def dclient(redis_url: str) -> AsyncIterator[Client]:
    c = Client.from_url(redis_url, namespace="dl")
    yield c
    await c.close()


async def test_hung_worker_is_timed_out_at_its_deadline(dclient: Client, redis_url: str) -> None:
    # a long lease, so that it is the deadline (not the lost lease) that ends the attempt
    w = spawn(redis_url, "dl", "hung", lease_ms=10_000)
    try:
        await wait_registered(dclient, ["hung"])
        async with reaper_loop(redis_url, "dl", interval_ms=100, deadline_grace_ms=200):
            tid = await dclient.enqueue("sleep", {"s": 30}, timeout_ms=600, max_attempts=1)
            running = await wait_for_state(dclient, tid, "RUNNING")
            w.send_signal(signal.SIGSTOP)  # its own asyncio timeout can never fire now
            info = await dclient.wait(tid, timeout_ms=5000)
            assert info.state == "TIMED_OUT" and info.error_type == "TimeoutError"
            entries = await dclient.history(tid)
            last = entries[-1]
            assert (last.event, last.source, last.extra["worker"]) == ("TIMEOUT", "reaper", "hung")
            assert last.ts >= running.deadline_at + 200
            assert "attempts exhausted (1/1)" in last.message
            # thawed, the worker's own late TIMEOUT is refused and recorded
            w.send_signal(signal.SIGCONT)
            late = await wait_history(dclient, tid, lambda e: e.rejected, timeout=10)
            assert late.source == "worker" and late.to_state == "TIMED_OUT"
        entries = await dclient.history(tid)
        assert len(terminal_transitions(entries)) == 1 and replay(entries) == []
    finally:
        stop_process(w)


async def test_unstarted_tasks_expire_at_their_queue_wait_deadline(
    dclient: Client, redis_url: str
) -> None:
    async with reaper_loop(redis_url, "dl", interval_ms=100):
        # nobody serves queue "idle"
        pending = await dclient.enqueue("noop", queue="idle", wait_timeout_ms=300)
        delayed = await dclient.enqueue("noop", queue="idle", delay_ms=5000, wait_timeout_ms=300)
        for tid in (pending, delayed):
            info = await dclient.wait(tid, timeout_ms=5000)
            assert info.state == "TIMED_OUT" and info.error_type == "WaitTimeout"
            assert "queue-wait deadline" in info.error
            last = (await dclient.history(tid))[-1]
            assert (last.event, last.source) == ("EXPIRE", "reaper")
            assert last.ts >= info.expires_at
    assert await dclient.redis.xlen(dclient.keys.queue("idle")) == 0
    assert await dclient.redis.zcard(dclient.keys.scheduled) == 0
    assert await dclient.redis.zcard(dclient.keys.deadlines) == 0


async def test_delayed_work_is_promoted_with_no_worker_polling(
    dclient: Client, redis_url: str
) -> None:
    async with reaper_loop(redis_url, "dl", interval_ms=100):
        tid = await dclient.enqueue("noop", queue="nobody", delay_ms=300)
        info = await wait_for_state(dclient, tid, "PENDING", timeout=5)
    promote = (await dclient.history(tid))[-1]
    assert (promote.event, promote.source) == ("PROMOTE", "reaper")
    assert promote.ts >= info.due_at
    # it sits on its queue for the next worker
    assert await dclient.redis.xlen(dclient.keys.queue("nobody")) == 1


async def test_deliveries_of_a_vanished_consumer_go_back_on_the_queue(
    dclient: Client, redis_url: str
) -> None:
    """Entries read by a consumer that never started them (its worker died in between)
    are put back on the queue once that consumer is gone from the registry."""
    qkey = dclient.keys.queue("ghosted")
    work = dclient.store.work
    await work.ensure_groups([qkey])
    ids = [await dclient.enqueue("noop", {"n": n}, queue="ghosted") for n in range(2)]
    got = await work.read("ghost", {qkey: "ghosted"}, 10, 100)
    assert sorted(d.task_id for d in got) == sorted(ids)
    async with reaper_loop(redis_url, "dl", interval_ms=100, lease_ms=300) as r:
        deadline = time.monotonic() + 5
        while r.totals["redelivered"] < 2:
            assert time.monotonic() < deadline, r.totals
            await asyncio.sleep(0.05)
    assert (await dclient.redis.xpending(qkey, GROUP))["pending"] == 0
    assert await dclient.redis.xlen(qkey) == 2
    for tid in ids:
        info = await dclient.get(tid)
        assert info.state == "PENDING"
        assert await dclient.redis.hget(dclient.keys.task(tid), "deliveries") == "1"
    again = await work.read("fresh", {qkey: "ghosted"}, 10, 100)
    assert sorted(d.task_id for d in again) == sorted(ids)
