"""taskiq application: stream broker + Redis result backend, as taskiq-redis documents.

Imported by the taskiq worker CLI (``taskiq worker bench.peers.taskiq_app:broker``)
and by the driver, like any taskiq app shares one module between producer and worker.
"""

from __future__ import annotations

from taskiq_redis import RedisAsyncResultBackend, RedisStreamBroker

from bench.handler_support import task_ran
from bench.peers.base import TASK_NAME, redis_url

# The result backend is taskiq's own record that a task completed; verification
# reads it. It is part of taskiq-redis's documented setup.
broker = RedisStreamBroker(url=redis_url()).with_result_backend(
    RedisAsyncResultBackend(redis_url=redis_url())
)


@broker.task(task_name=TASK_NAME)
async def noop(i: int) -> None:
    await task_ran(i)
