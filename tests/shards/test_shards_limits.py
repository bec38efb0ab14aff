"""Limits of shared queues in a namespace of 4 shards (the session's standalone Redis):
a setting is written to every shard (each shard's scripts read their own), a rate is
split between them and read back whole, and an owner's limit holds on the owner's shard
(which need not be shard 0) for a sharded worker."""

from __future__ import annotations

import asyncio
import itertools

import pytest
import redis as sync_redis

from rsjobs import Client, Settings, Worker, connect
from rsjobs.store.shards import shard_of
from tests.support.apps import tasks

pytestmark = pytest.mark.integration

NS = "lim"
S = 4


async def test_limits_go_to_every_shard_and_hold_on_the_owners_shard(redis_url: str) -> None:
    c = Client(connect(redis_url), Settings(namespace=NS, shards=S))
    r = sync_redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        await c.set_limit("gpu", 1)
        await c.set_rate("gpu", 8.0, burst=6)
        shards = await c.store.open()
        for k in range(S):
            key = c.store.shard(k).keys.limits
            assert r.hget(key, "c|gpu|*") == "1", k
            assert r.hget(key, "r|gpu") == "2 2", (k, r.hgetall(key))
        (view,) = await c.limits("gpu")
        assert view.default == 1
        assert [(x.per_second, x.burst) for x in view.rates] == [(8.0, 8)]
        assert await c.clear_rate("gpu") is True
        assert all(r.hget(c.store.shard(k).keys.limits, "r|gpu") is None for k in range(S))

        owner = next(f"o{i}" for i in range(100) if shards.place(owner=f"o{i}") != 0)
        ids = [await c.enqueue("sleep", {"s": 0.1, "steps": 1}, queue="gpu", owner=owner)
               for _ in range(3)]  # fmt: skip
        assert {shard_of(t) for t in ids} == {shards.place(owner=owner)} != {0}
        w = Worker(tasks, url=redis_url, settings=Settings(namespace=NS), queues=["gpu"],
                   concurrency=4, lease_ms=2000, handle_signals=False)  # fmt: skip
        run = asyncio.create_task(w.run())
        try:
            for t in ids:
                assert (await c.wait(t, timeout_ms=20_000)).state == "SUCCEEDED"
            # the owner's limit held on its shard: no two runs overlap (Redis time)
            runs = sorted([await running(c, t) for t in ids])
            for (_, end), (start, _) in itertools.pairwise(runs):
                assert end <= start, runs
        finally:
            w.stop()
            await asyncio.wait_for(run, 20)
            await w.redis.aclose()
    finally:
        r.close()
        await c.close()


async def running(c: Client, tid: str) -> tuple[int, int]:
    """When the task's (only) run started and ended, from its history (Redis time, ms)."""
    entries = [e for e in await c.history(tid) if not e.rejected]
    start = next(e.ts for e in entries if e.to_state == "RUNNING")
    end = next(e.ts for e in entries if e.from_state == "RUNNING" and e.to_state != "RUNNING")
    return start, end
