"""Deterministic replays of what chaos runs found in the worker (see docs/chaos.md).

Each test is a small, exact version of a failure a chaos run reported; it was marked
``xfail(strict=True)`` while the bug was open and now guards the fix.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator

import pytest

from rsjobs import Client
from tests.support.processes import spawn_worker, stop_process, wait_for_state
from tests.support.reaper import reaper_loop, wait_history, wait_registered

pytestmark = pytest.mark.integration

NS = "t"
APP = "tools.chaos.handlers:tasks"


@pytest.fixture
def chaos_env(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The chaos handlers record their executions in the test's Redis."""
    monkeypatch.setenv("RSJOBS_CHAOS_URL", redis_url)
    monkeypatch.setenv("RSJOBS_CHAOS_NAMESPACE", NS)
    yield


@pytest.mark.timeout(60)
async def test_a_worker_that_gets_its_lost_task_back_keeps_it(
    client: Client, redis_url: str, chaos_env: None
) -> None:
    w = spawn_worker(redis_url, NS, "-c", "4", "--lease-ms", "1000", "--name", "only", app=APP)
    try:
        await wait_registered(client, ["only"])
        async with reaper_loop(redis_url, NS, interval_ms=100, lease_ms=1000, max_deliveries=10):
            tid = await client.enqueue("chaos", {"k": "slow", "ms": 1500}, max_attempts=5)
            await wait_for_state(client, tid, "RUNNING", timeout=10)
            await asyncio.sleep(0.2)
            os.kill(w.pid, signal.SIGSTOP)
            # past the lease: reclaimed while the only worker is frozen
            await wait_history(client, tid, lambda e: e.event == "RECLAIM", 15)
            os.kill(w.pid, signal.SIGCONT)  # ... and gets the task back
            info = await client.wait(tid, timeout_ms=30_000)
        history = await client.history(tid)
    finally:
        stop_process(w)
    reclaims = [e for e in history if e.event == "RECLAIM" and not e.rejected]
    assert info.state == "SUCCEEDED", [(e.event, e.to_state, e.message) for e in history]
    assert len(reclaims) == 1  # only the attempt that was frozen


@pytest.mark.timeout(60)
async def test_a_delivery_the_worker_never_saw_is_recovered(
    client: Client, redis_url: str, chaos_env: None
) -> None:
    w = spawn_worker(redis_url, NS, "-c", "1", "--lease-ms", "1000", "--name", "only", app=APP)
    try:
        await wait_registered(client, ["only"])
        busy = await client.enqueue("chaos", {"k": "slow", "ms": 1500})
        await wait_for_state(client, busy, "RUNNING", timeout=10)
        tid = await client.enqueue("chaos", {"k": "fast", "ms": 1})
        # what a lost reply leaves behind: delivered to the worker's consumer, never seen
        got = await client.redis.xreadgroup(
            "workers", "only", {client.keys.queue("default"): ">"}, count=1
        )
        assert got
        async with reaper_loop(redis_url, NS, interval_ms=100, lease_ms=1000):
            info = await client.wait(tid, timeout_ms=15_000)
    finally:
        stop_process(w)
    assert info.state == "SUCCEEDED"


async def test_the_drain_does_not_wait_for_a_task_whose_resume_was_lost(client: Client) -> None:
    """A task PAUSED although the producer's RESUME was acknowledged (lost in a failover)
    never moves again: the drain does not wait for it until its bound (the checker
    reports it); any other unfinished task it waits for."""
    from tools.chaos.run import drain

    tid = await client.enqueue("noop", {"x": 1})
    assert await client.pause(tid) == "PAUSED"
    lines: list[str] = []
    assert await drain(client, [tid], 1.0, lines.append, frozenset({tid})) == (True, [])
    assert await drain(client, [tid], 1.0, lines.append) == (False, [tid])
    await client.cancel(tid)
