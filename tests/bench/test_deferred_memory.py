"""The memory of a finished deferred task, on a Redis of its own at its default
configuration: its hash (history whole) and its external key together within the 600 B
of a finished task, for a provider id of up to 20 characters (the DEFER entry stays
under the 64 bytes past which Redis turns the hash into a hashtable)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.redis_server import RedisServer
from rsjobs import Client
from rsjobs.external import resolve_external

pytestmark = pytest.mark.integration

FINISHED_MAX = 600


@pytest.fixture
def default_redis() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_a_finished_deferred_task_stays_within_the_budget(default_redis: RedisServer) -> None:
    client = Client.from_url(default_redis.url, namespace="memory")
    store, k = client.store, client.store.keys
    try:
        ids = [await client.enqueue("gen", None) for _ in range(100)]
        await store.work.ensure_groups([k.queue("default")])
        deliveries = await store.work.read("w", {k.queue("default"): "default"}, 200, None)
        started = await store.work.start("w", 60_000, "w-n", deliveries)
        for d, s in zip(deliveries, started, strict=True):
            job = f"job-{d.task_id[:16]}"  # 20 characters
            keys = k.task_keys(d.task_id, "default")
            await store.deferred.defer(keys, s.lease, job, "acme", 600_000)
            done = await resolve_external(
                store, event="COMPLETE", external_id=job, provider="acme", result={"url": "x"}
            )
            assert done.state == "SUCCEEDED"
        sizes = []
        for tid in ids:
            hash_bytes = await client.redis.memory_usage(k.task(tid))
            key_bytes = await client.redis.memory_usage(k.external("acme", f"job-{tid[:16]}"))
            sizes.append(hash_bytes + key_bytes)
        assert max(sizes) <= FINISHED_MAX, sizes
        # its history is whole: the DEFER entry names the outside job, read back long-named
        history = await client.history(ids[0])
        defer = next(e for e in history if e.event == "DEFER")
        assert defer.extra["external_id"] == f"job-{ids[0][:16]}"
        assert defer.extra["wait_ms"] == "600000"
    finally:
        await client.close()
