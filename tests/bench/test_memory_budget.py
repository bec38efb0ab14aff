"""The memory budget per task, as bench/memory.py measures it (the benchmark's workload:
10,000 no-op tasks enqueued in bulk, one worker, default settings) on a Redis of its own
at its default configuration: a waiting task within 500 B, a finished one, its whole
history readable, within 600 B."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.memory import Workload, measure
from bench.redis_server import RedisServer
from rsjobs import Client, Settings, connect

# (no skip: the benchmark's server is the one rsjobs starts, as the session's is)
pytestmark = pytest.mark.integration

WAITING_MAX = 500
FINISHED_MAX = 600


@pytest.fixture
def default_redis() -> Iterator[RedisServer]:
    server = RedisServer()  # the benchmark's server: default configuration, loopback
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.timeout(300)
async def test_a_task_stays_within_its_memory_budget(default_redis: RedisServer) -> None:
    settings = Settings(namespace="memory")
    fp = await measure(default_redis.url, Workload(tasks=10_000, settings=settings))
    assert fp.waiting_bytes_per_task <= WAITING_MAX, fp.waiting_keys
    assert fp.finished_bytes_per_task <= FINISHED_MAX, fp.finished_keys
    # the footprint is of tasks whose history is whole: read one back
    client = Client(connect(default_redis.url), settings)
    try:
        done = [k async for k in client.redis.scan_iter(match="rsjobs:{memory}:task:*", count=1000)]
        tid = done[0].rsplit(":", 1)[-1]
        events = [e.event for e in await client.history(tid)]
        assert events == ["ENQUEUE", "START", "COMPLETE"]
        info = await client.get(tid)
        assert info.started_at and info.finished_at >= info.started_at and info.worker
    finally:
        await client.close()
