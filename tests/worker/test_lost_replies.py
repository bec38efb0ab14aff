"""A worker recovers what a lost reply hid from it, and a handler learns it lost its task
(real Redis, an in-process worker)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from rsjobs import Client, Context, LeaseLost, Registry, Settings, Worker
from tests.support.processes import wait_for_state

pytestmark = pytest.mark.integration

NS = "lost"
tasks = Registry()
STOPPED = threading.Event()
REPORTS: list[str] = []


@tasks.handler("noop")
async def noop(ctx: Context, payload: Any) -> Any:
    return payload


@tasks.handler("reporter")
def reporter(ctx: Context, payload: Any) -> str:
    """A sync handler that ignores ``ctx.cancelled`` but reports progress."""
    try:
        while True:
            ctx.report(50, "working")
            time.sleep(0.02)
    except LeaseLost as exc:
        REPORTS.append(exc.reason)
        raise
    finally:
        STOPPED.set()


@pytest.fixture
async def lc(redis_url: str) -> AsyncIterator[Client]:
    c = Client.from_url(redis_url, namespace=NS)
    yield c
    await c.close()


async def _run(w: Worker, until: Any, timeout: float = 10) -> None:
    runner = asyncio.create_task(w.run())
    try:
        await asyncio.wait_for(until(), timeout)
    finally:
        w.stop(force=True)
        await asyncio.wait_for(runner, 15)
        await w.store.close()


async def test_a_start_whose_reply_was_lost_is_run_by_the_same_worker(
    lc: Client, redis_url: str
) -> None:
    """The worker's START ran but its reply never came back (here: the call is made by
    hand, and its reply dropped). At its next start the worker reads its own pending
    list, STARTs the entry again and is answered as before: it runs the task now, not
    after the reaper took it back at the end of a lease (60 s here, and no reaper)."""
    tid = await lc.enqueue("noop", {"x": 1})
    w = Worker(
        tasks,
        url=redis_url,
        settings=Settings(namespace=NS),
        lease_ms=60_000,
        name="w-lost",
        handle_signals=False,
    )
    stream = w.keys.queue("default")
    work = w.store.work
    await work.ensure_groups([stream])
    deliveries = await work.read(w.name, {stream: "default"}, 10, None)
    (lost,) = await work.start(w.name, w.lease_ms, w.nonce, deliveries)
    assert lost.code == 1 and (await lc.get(tid)).state == "RUNNING"

    async def done() -> None:
        await lc.wait(tid)

    await _run(w, done)
    info = await lc.get(tid)
    assert info.state == "SUCCEEDED" and info.result == {"x": 1} and info.attempt == 1
    history = await lc.history(tid)
    assert [(e.event, e.rejected) for e in history] == [
        ("ENQUEUE", False),
        ("START", False),
        ("COMPLETE", False),
    ]


async def test_an_attempt_whose_end_is_not_written_yet_is_not_taken_for_a_lost_start(
    lc: Client, redis_url: str
) -> None:
    """Its entry is still in the worker's pending list, and START would answer it as the
    worker's own again: re-reading the pending list (at every lease, after a connection
    error) must not queue it, or its handler would run twice under one lease."""
    tid = await lc.enqueue("noop", {"x": 1})
    w = Worker(tasks, url=redis_url, settings=Settings(namespace=NS), handle_signals=False)
    try:
        stream = w.keys.queue("default")
        await w.store.work.ensure_groups([stream])
        (d,) = await w.store.work.read(w.name, {stream: "default"}, 10, None)
        (started,) = await w.store.work.start(w.name, w.lease_ms, w.nonce, [d])
        assert started.code == 1 and d.task_id == tid
        w._ending_entries.add(d.entry)  # its handler returned; finish.lua not written yet
        await w._adopt_own_pending()
        assert list(w._buffer) == []
        w._ending_entries.clear()  # as after a START whose reply was lost: adopted
        await w._adopt_own_pending()
        assert [b.entry for b in w._buffer] == [d.entry]
    finally:
        await w.store.close()


async def test_a_sync_handler_that_reports_after_its_cancel_ends_with_lease_lost(
    lc: Client, redis_url: str
) -> None:
    """ctx.report raises LeaseLost once the worker stopped the handler: a sync handler
    that ignores ctx.cancelled ends at its next report, and its slot is free at once."""
    STOPPED.clear()
    REPORTS.clear()
    tid = await lc.enqueue("reporter")
    w = Worker(
        tasks,
        url=redis_url,
        settings=Settings(namespace=NS),
        concurrency=1,
        handle_signals=False,
        progress_ms=20,
        heartbeat_ms=100,
    )

    async def cancelled_and_stopped() -> None:
        await wait_for_state(lc, tid, "RUNNING")
        assert await lc.cancel(tid) == "CANCELLED"
        assert await asyncio.to_thread(STOPPED.wait, 5)
        deadline = time.monotonic() + 5
        while w._stuck or w.jobs:  # the slot is free
            assert time.monotonic() < deadline, (w._stuck, w.jobs)
            await asyncio.sleep(0.02)

    await _run(w, cancelled_and_stopped, timeout=10)
    assert REPORTS == ["CANCELLED"]
    assert (await lc.get(tid)).state == "CANCELLED"
