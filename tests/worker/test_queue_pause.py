"""Queue pause with real workers: a paused queue costs no Redis work per waiting task, a
task submitted while paused stays PENDING and runs at once after the resume; a worker
that missed the pause notice is stopped by start.lua and then reads nothing more."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import redis as sync_redis

from rsjobs import Client
from tests.support.processes import spawn_worker, stop_process
from tests.support.reaper import wait_registered
from tests.support.web import eventually, running_worker

pytestmark = pytest.mark.integration

#: the span over which the worker's calls are counted
WINDOW_S = 0.6


def _calls(r: sync_redis.Redis) -> dict[str, int]:
    """Calls per command since the last CONFIG RESETSTAT (INFO commandstats)."""
    stats = r.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


async def no_blocked_read(r: sync_redis.Redis) -> None:
    """Until no client is blocked in a read: a worker's XREADGROUP begun before it saw the
    pause ends within its block time, and would count in the window that follows."""
    await eventually(
        lambda: not any("b" in c["flags"] for c in r.client_list()), 5, "no blocked read"
    )


async def test_a_paused_queue_costs_nothing_per_task_and_resumes_at_once(
    client: Client, redis_url: str
) -> None:
    r = sync_redis.Redis.from_url(redis_url)
    await client.pause_queue("gpu", "maintenance")
    proc = spawn_worker(redis_url, "t", "-q", "gpu", "-c", "4", "--name", "pw")
    try:
        tids = [await client.enqueue("noop", {"i": i}, queue="gpu") for i in range(50)]
        # the worker is up (registered: it read the pause before) and done starting
        await wait_registered(client, ["pw"])
        await no_blocked_read(r)
        r.config_resetstat()
        await asyncio.sleep(WINDOW_S)  # what the worker does over a span of time
        calls = _calls(r)
        # no read of the queue, no START: the 50 waiting tasks cost nothing, and what the
        # worker does meanwhile (promotion sweeps, a heartbeat) does not depend on them
        assert calls.get("xreadgroup", 0) == 0, calls
        assert calls.get("evalsha", 0) + calls.get("eval", 0) == 0, calls
        assert sum(calls.values()) < 25, calls
        waiting = await client.get_many(tids)
        assert {(i.state, i.queue_paused) for i in waiting if i is not None} == {("PENDING", True)}
        t0 = time.monotonic()
        await client.resume_queue("gpu")
        first = await client.wait(tids[0], timeout_ms=5000)
        assert first.state == "SUCCEEDED" and time.monotonic() - t0 < 1.0
        for t in tids:
            assert (await client.wait(t, timeout_ms=10_000)).state == "SUCCEEDED"
    finally:
        stop_process(proc)
        r.close()


async def test_a_worker_that_missed_the_pause_is_stopped_by_start(
    client: Client, redis_url: str
) -> None:
    r = sync_redis.Redis.from_url(redis_url, decode_responses=True)
    async with running_worker(redis_url, queues=["gpu"], block_ms=200, lease_ms=30_000) as w:
        await eventually(lambda: bool(r.hkeys("rsjobs:{t}:workers")), 10, "the worker")
        # the flag without its notice (as if the notice was lost)
        r.hset("rsjobs:{t}:paused", "gpu", json.dumps({"at": 1, "by": "test", "reason": ""}))
        tid = await client.enqueue("noop", {}, queue="gpu")
        await eventually(lambda: "gpu" in w.paused, 5, "the worker to find the queue paused")
        info = await client.get(tid)
        assert info.state == "PENDING" and [e.event for e in await client.history(tid)] == [
            "ENQUEUE"
        ]
        # the worker's fetch loop is parked (no stream left to read) and no start is in
        # flight: a read it had sent beside the refused START (the loop reads on while a
        # batch starts) has come back, with the handed-back entry or empty, and been dealt
        # with; the window counts only what the paused worker does from here
        await eventually(
            lambda: bool(w._slot_free._waiters) and not w._start_tasks and not w._starting,  # type: ignore[attr-defined]
            5,
            "the fetch loop parked",
        )
        # its delivery was handed back (again, if that read had it): a fresh entry
        # waits, nothing in anyone's hands (checked once the loop is parked: a test
        # under load saw the read's delivery pending before its START was refused)
        await eventually(
            lambda: r.xpending("rsjobs:{t}:queue:gpu", "workers")["pending"] == 0,
            5,
            "the delivery handed back",
        )
        assert r.xlen("rsjobs:{t}:queue:gpu") == 1
        await no_blocked_read(r)
        r.config_resetstat()
        await asyncio.sleep(WINDOW_S)  # over a span of its reads (200 ms each)
        assert _calls(r).get("xreadgroup", 0) == 0  # no busy loop on the paused queue
        await client.resume_queue("gpu")
        assert (await client.wait(tid, timeout_ms=5000)).state == "SUCCEEDED"
    r.close()
