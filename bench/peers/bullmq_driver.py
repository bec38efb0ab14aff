"""BullMQ's Python port: Queue.add / Queue.addBulk and a Worker."""

from __future__ import annotations

from collections.abc import Sequence

from bullmq import Queue

from bench.peers.base import TASK_NAME, chunks, python, redis_url
from bench.peers.bullmq_worker import QUEUE

# Every state a job passes through before it is finished.
_UNFINISHED = ("waiting", "active", "delayed", "prioritized", "paused", "waiting-children")


class BullmqDriver:
    name = "bullmq"
    has_bulk = True

    def __init__(self) -> None:
        self._queue: Queue | None = None

    @property
    def queue(self) -> Queue:
        assert self._queue is not None, "setup() not called"
        return self._queue

    async def setup(self) -> None:
        self._queue = Queue(QUEUE, {"connection": redis_url()})

    async def teardown(self) -> None:
        await self.queue.close()

    async def enqueue_one(self, i: int) -> None:
        await self.queue.add(TASK_NAME, {"i": i})

    async def enqueue_bulk(self, indices: Sequence[int]) -> None:
        for chunk in chunks(indices):
            await self.queue.addBulk([{"name": TASK_NAME, "data": {"i": i}} for i in chunk])

    def worker_argv(self, concurrency: int) -> list[str]:
        return [python(), "-m", "bench.peers.bullmq_worker", str(concurrency)]

    async def outstanding(self) -> int:
        counts = await self.queue.getJobCounts(*_UNFINISHED)
        return int(sum(counts.values()))

    async def verify(self, n: int) -> list[str]:
        # BullMQ keeps completed jobs by default (removeOnComplete is off), so its own
        # counts say how many completed and failed.
        counts = await self.queue.getJobCounts("completed", "failed")
        problems = []
        if counts["completed"] != n:
            problems.append(f"bullmq: {counts['completed']} completed, expected {n}")
        if counts["failed"]:
            problems.append(f"bullmq: {counts['failed']} failed")
        return problems


def make_driver() -> BullmqDriver:
    return BullmqDriver()
