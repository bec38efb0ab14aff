"""streaq application: the Worker object the ``streaq`` CLI runs
(``streaq run bench.peers.streaq_app:worker``), also used by the producer."""

from __future__ import annotations

from streaq import Worker

from bench.handler_support import task_ran
from bench.peers.base import TASK_NAME, concurrency, redis_url

worker = Worker(redis_url=redis_url(), queue_name="bench", concurrency=concurrency())


# silent=True is streaq's switch for its two per-task INFO log lines; per-task logging
# is off for every system.
@worker.task(name=TASK_NAME, silent=True)
async def noop(i: int) -> None:
    await task_ran(i)
