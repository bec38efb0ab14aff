"""A Redis restart (SIGKILL, AOF with fsync always) while tasks are in flight: workers and
the reaper reconnect, and every task still ends in exactly one terminal state."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from rsjobs import Client
from rsjobs.server import EmbeddedRedis
from tests.support.processes import stop_process
from tests.support.reaper import (
    reaper_loop,
    spawn,
    sweeps_past,
    terminal_transitions,
    wait_registered,
    wait_terminal,
)
from tests.support.reference import replay
from tests.support.waits import on_events

pytestmark = pytest.mark.integration

#: short, so that Redis can stay down longer than a lease within the test's second of sleeping
LEASE_MS = 600
#: how long Redis stays down: longer than a lease (the leases' deadlines are at most a lease
#: after the kill, so every lease has lapsed by Redis's clock when it comes back)
DOWN_MS = LEASE_MS + 100


@pytest.fixture
def aof_server() -> Iterator[EmbeddedRedis]:
    """A server of its own (not the session's): this test kills it."""
    server = EmbeddedRedis(appendonly=True, appendfsync="always")
    server.start()
    yield server
    server.cleanup()


async def test_tasks_in_flight_survive_a_redis_restart(aof_server: EmbeddedRedis) -> None:
    url = aof_server.url
    client = Client.from_url(url, namespace="rs")
    procs = [spawn(url, "rs", n, lease_ms=LEASE_MS, conc=4) for n in ("r1", "r2")]
    try:
        await wait_registered(client, ["r1", "r2"])
        async with reaper_loop(url, "rs", lease_ms=LEASE_MS, interval_ms=200) as reaper:
            ids = [
                await client.enqueue(
                    "sleep", {"s": 0.4 + 0.1 * (n % 8), "steps": 4}, max_attempts=5
                )
                for n in range(16)
            ]
            delayed = await client.enqueue("noop", {"d": 1}, delay_ms=800)

            # restart while some run, some wait, one is delayed
            async def four_running() -> bool:
                infos = await client.get_many(ids)
                return sum(1 for i in infos if i and i.state == "RUNNING") >= 4

            await on_events(client.store.events, four_running, 10, "four tasks running")
            # worker r1 dies, then Redis goes down for longer than a lease: on its return,
            # r2's heartbeats renew its leases and r1's tasks are left to the reaper
            stop_process(procs[0])
            orphans = [
                i.id
                for i in await client.get_many(ids)
                if i and i.state == "RUNNING" and i.worker == "r1"
            ]
            aof_server.stop(kill=True)
            await asyncio.sleep(DOWN_MS / 1000)  # the outage itself: no condition to wait on
            aof_server.start()
            infos = [await wait_terminal(client, tid, 45) for tid in [*ids, delayed]]
            # the reaper rode it out and kept sweeping: whole sweeps begun after now
            await sweeps_past(reaper, await reaper.store.reaper.now_ms(), timeout=10)
        assert all(i.state == "SUCCEEDED" for i in infos), [(i.id, i.state) for i in infos]
        assert reaper.totals["retried"] >= len(orphans)
        for tid in [*ids, delayed]:
            entries = await client.history(tid)
            assert len(terminal_transitions(entries)) == 1, entries
            if tid in orphans:
                rec = next(e for e in entries if e.event == "RECLAIM")
                assert (rec.source, rec.extra["worker"]) == ("reaper", "r1")
            assert replay(entries) == []
        # nothing left behind: no delivery pending, no live entry on the queue
        qkey = client.keys.queue("default")
        assert (await client.redis.xpending(qkey, "workers"))["pending"] == 0
        assert await client.redis.xlen(qkey) == 0
    finally:
        for p in procs:
            stop_process(p)
        await client.close()
