"""Memory is bounded by construction: after many finished tasks and the retention period,
the keyspace is back to its baseline, the list indexes included (the reaper trims them)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest

from rsjobs import Client, EnqueueRequest, Settings, Worker, connect
from rsjobs.model import TERMINAL, State
from rsjobs.reaper import Reaper, ReaperConfig, memory_report
from tests.support.apps import tasks
from tests.support.waits import keyspace as notifications
from tests.support.waits import on_events

pytestmark = pytest.mark.integration

RETENTION_MS = 1000
SETTINGS = Settings(namespace="mem", retention_ms=RETENTION_MS, events_maxlen=100)


@contextlib.asynccontextmanager
async def worker(url: str) -> AsyncIterator[Worker]:
    w = Worker(
        tasks,
        url=url,
        settings=SETTINGS,
        concurrency=32,
        lease_ms=2000,
        handle_signals=False,
        promote_ms=20,
    )
    run = asyncio.create_task(w.run())
    try:
        yield w
    finally:
        w.stop()
        await asyncio.wait_for(run, 20)
        await w.redis.aclose()


async def keyspace(client: Client) -> set[str]:
    return {k async for k in client.redis.scan_iter(match="rsjobs:*", count=1000)}


def expires_with_tasks(key: str, client: Client) -> bool:
    """Keys that exist only while finished tasks do: their hashes and dedup keys, and the
    list indexes of finished tasks (the done:<STATE> streams, the tags index and its trim
    queue), which the reaper trims with them and deletes once empty."""
    k = client.keys
    return ":task:" in key or ":dedup:" in key or key in (*k.done, k.tags, k.tags_trim)


async def settle(client: Client, timeout: float) -> int:
    """Wait until every finished task (hash, history, dedup key, index entries) has
    expired; DBSIZE. The keys are looked at again each time Redis tells of expired or
    deleted keys (keyspace notifications), not on a timer."""
    deadline = time.monotonic() + timeout
    channels = ("__keyevent@0__:expired", "__keyevent@0__:del")
    async with notifications(client.redis, "Egx", *channels) as told:
        while True:
            left = [k for k in await keyspace(client) if expires_with_tasks(k, client)]
            if not left:
                return int(await client.redis.dbsize())
            wait = deadline - time.monotonic()
            assert wait > 0, f"{len(left)} task keys left, e.g. {left[:3]}"
            if await told.get_message(ignore_subscribe_messages=True, timeout=wait):
                while await told.get_message(ignore_subscribe_messages=True, timeout=0):
                    pass  # (the batch so far: one look for all of them)


async def round_of_tasks(client: Client, n: int) -> None:
    """n tasks of every ending: success, retry then success, failure, cancellation,
    expiry, with dedup keys, payloads, delays, owners and labels; waits until all are
    terminal."""
    reqs = []
    for i in range(n):
        kind = i % 5
        if kind == 0:
            reqs.append(
                EnqueueRequest(
                    type="noop",
                    payload={"i": i, "pad": "x" * 200},
                    dedup_key=f"d{i}-{time.monotonic_ns()}",
                    owner=f"user{i % 7}",
                    labels={"character": f"c{i % 11}", "batch": "b"},
                )
            )
        elif kind == 1:
            reqs.append(
                EnqueueRequest(
                    type="fail",
                    payload={"until": 2},
                    max_attempts=3,
                    backoff_base_ms=10,
                    backoff_max_ms=20,
                )
            )
        elif kind == 2:
            reqs.append(EnqueueRequest(type="fatal", payload=None))
        elif kind == 3:
            reqs.append(
                EnqueueRequest(type="noop", payload={"i": i}, delay_ms=60_000, owner="alice")
            )
        else:
            reqs.append(EnqueueRequest(type="noop", queue="nobody", wait_timeout_ms=50))
    ids = await client.enqueue_many(reqs)
    for tid, r in zip(ids, reqs, strict=True):
        if r.delay_ms:
            await client.cancel(tid, "not needed")
    # Not client.wait per task: with a 1 s retention a task waited for after the others
    # may have finished and expired already. The live counts say when none is left, and
    # every id then reads as terminal or as expired (a task expires only once terminal).
    live = [s.value for s in State if s.value not in TERMINAL]

    async def none_live() -> bool:  # looked at again at each transition (events stream)
        stats = await client.stats()
        return not any(stats.get(q, {}).get(st, 0) for q in ("default", "nobody") for st in live)

    await on_events(client.store.events, none_live, 20, "every task terminal")
    for info in await client.get_many(ids):
        assert info is None or info.terminal, info


async def test_keyspace_returns_to_baseline_after_retention(redis_url: str) -> None:
    client = Client(connect(redis_url), SETTINGS)
    reaper = Reaper(
        url=redis_url,
        settings=SETTINGS,
        config=ReaperConfig(lease_ms=2000, guard=False, interval_ms=100),
    )
    run = asyncio.create_task(reaper.run())
    try:
        async with worker(redis_url):
            # warm-up: creates what lives for good (queue streams and group, counters,
            # registry, a full events stream, the dead-letter stream...)
            await round_of_tasks(client, 100)
            base_n = await settle(client, timeout=RETENTION_MS / 1000 + 15)
            base_keys = await keyspace(client)
            base_mem = int((await client.redis.info("memory"))["used_memory"])
            base_usage = {k: await client.redis.memory_usage(k) for k in sorted(base_keys)}

            # the finished tasks are there for a while (their retention: the most seen at
            # once, sampled while they run; a slow round sees the first ones expire)...
            peak = base_n
            sampling = True

            async def sample() -> None:
                nonlocal peak
                while sampling:
                    peak = max(peak, int(await client.redis.dbsize()))
                    await asyncio.sleep(0.02)

            sampler = asyncio.create_task(sample())
            try:
                await round_of_tasks(client, 500)
            finally:
                sampling = False
                await sampler
            assert peak > base_n + 100
            report = await memory_report(client.store)
            assert {q.queue for q in report.queues} >= {"default", "nobody"}

            n = await settle(client, timeout=RETENTION_MS / 1000 + 15)  # ...then gone
            assert n == base_n
            assert reaper.totals["index_trimmed"] > 0  # the reaper trimmed the list indexes
            assert await keyspace(client) == base_keys
            mem = int((await client.redis.info("memory"))["used_memory"])
            usage = {k: await client.redis.memory_usage(k) for k in sorted(base_keys)}
    finally:
        reaper.stop()
        await asyncio.wait_for(run, 10)
        await reaper.close()
        await client.close()
    # streams keep their (trimmed) tails and allocator slack: allow a small margin
    # the keys that stay are bounded: the events stream by MAXLEN ~ (its size moves within
    # about two listpack nodes), the others by construction (counters, names, entries of
    # work not yet done)
    for key, size in usage.items():
        if key == client.keys.events:
            assert size <= max(2 * base_usage[key], 64 * 1024), (key, base_usage[key], size)
        else:
            assert size <= base_usage[key] + 256, (key, base_usage[key], size)
    # and the server as a whole (allocator slack and hash-table sizes move a little)
    assert mem <= base_mem + max(base_mem // 10, 256 * 1024), (base_mem, mem)


#: the events test's retention: its 100 cancels are written well within it
EVENTS_RETENTION_MS = 500


@pytest.mark.parametrize(("retention", "kept"), [(EVENTS_RETENTION_MS, False), (0, True)])
async def test_the_reaper_drops_the_events_of_tasks_past_their_retention(
    redis_url: str, retention: int, kept: bool
) -> None:
    """A namespace gone quiet keeps no events stream: its entries name tasks that expired.
    With retention 0 (kept for ever) nothing is dropped."""
    settings = Settings(namespace=f"evtrim{retention}", retention_ms=retention)
    client = Client(connect(redis_url), settings)
    reaper = Reaper(url=redis_url, settings=settings, config=ReaperConfig(guard=False))
    try:
        ids = await client.enqueue_many(
            [EnqueueRequest(type="noop", payload=None) for _ in range(100)]
        )
        for tid in ids:
            await client.cancel(tid, "enough")  # an events entry per task, then terminal
        told = int(await client.redis.xlen(client.keys.events))
        assert told == 100
        fresh = await reaper.sweep_once()
        assert fresh.events_trimmed == 0  # younger than the retention: kept
        # until the newest entry is past the retention, by Redis's clock
        newest = int((await client.store.events.last_id()).split("-")[0])
        now = await client.store.reaper.now_ms()
        await asyncio.sleep(max(0, newest + EVENTS_RETENTION_MS + 20 - now) / 1000)
        report = await reaper.sweep_once()
        left = int(await client.redis.xlen(client.keys.events))
        if kept:
            assert (report.events_trimmed, left) == (0, told)
        else:
            assert (report.events_trimmed, left) == (told, 0)
            assert report.changed == 0  # a quiet sweep still (its line is not logged)
    finally:
        await reaper.close()
        await client.close()
