"""The reaper and shared queues (rsjobs.limits): it passes over the entries held for a
limit (no worker holds them), and recounts the per-owner RUNNING counts so that one a lost
task left wrong heals."""

from __future__ import annotations

import asyncio
import time

import pytest

from rsjobs import Client
from rsjobs.store.keys import WAITING_CONSUMER
from tests.support.processes import start_as
from tests.support.reaper import reaper_loop, sweeps_past

pytestmark = pytest.mark.integration


async def _until(check: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_a_count_a_lost_task_left_wrong_heals(client: Client, redis_url: str) -> None:
    await client.set_limit("default", 1)
    ids = [await client.enqueue("noop", owner="alice") for _ in range(3)]
    started = await start_as(client, "zombie", lease_ms=60_000)
    assert sum(1 for s in started if s.state == "RUNNING") == 1  # (its limit: the others park)
    r = client.redis
    (limits,) = await client.limits("default")
    assert limits.running == {"alice": 1} and limits.waiting == 2
    # its RUNNING task's hash is deleted by hand: nothing will ever end it, its slot stays
    running = next(s.id for s in started if s.state == "RUNNING")
    await r.delete(client.keys.task(running))
    # (a short lease: the held entries are idle long past it, and still left alone)
    async with reaper_loop(redis_url, "t", recount_ms=1, lease_ms=200) as reaper:

        async def healed() -> bool:
            return (await client.limits("default"))[0].running == {}

        await _until(healed)
        assert reaper.totals["counts_fixed"] >= 1
        # through the reaper's sweeps of three more leases, the parked tasks are left
        # alone: held by ~waiting, not redelivered
        await sweeps_past(reaper, await client.store.reaper.now_ms() + 600)
        rows = await r.xpending_range(client.keys.queue("default"), "workers", "-", "+", 10)
        held = [x for x in rows if x["consumer"] == WAITING_CONSUMER]
        assert len(held) == 2
        assert reaper.totals["redelivered"] == 0
    for t in ids:
        if t != running:
            assert (await client.get(t)).state == "PENDING"
