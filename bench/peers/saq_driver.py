"""saq: Queue.enqueue and the saq worker CLI."""

from __future__ import annotations

from collections.abc import Sequence

from saq import Status

from bench.peers import saq_app
from bench.peers.base import TASK_NAME, python


class SaqDriver:
    name = "saq"
    has_bulk = False  # saq has no bulk enqueue (Queue.map enqueues and then waits)

    def __init__(self) -> None:
        self._queue = saq_app.queue
        self._keys: list[str] = []

    async def setup(self) -> None:
        await self._queue.connect()

    async def teardown(self) -> None:
        await self._queue.disconnect()

    async def enqueue_one(self, i: int) -> None:
        job = await self._queue.enqueue(TASK_NAME, i=i)
        assert job is not None, "saq refused a job as a duplicate"
        self._keys.append(job.key)

    async def enqueue_bulk(self, indices: Sequence[int]) -> None:
        raise NotImplementedError("saq has no bulk enqueue API")

    def worker_argv(self, concurrency: int) -> list[str]:
        # Concurrency comes from settings (BENCH_CONCURRENCY); the CLI logs at WARNING
        # by default, i.e. not per job.
        return [python(), "-m", "saq", "bench.peers.saq_app.settings", "--workers", "1"]

    async def outstanding(self) -> int:
        # "incomplete" is saq's set of queued + active + scheduled jobs.
        return await self._queue.count("incomplete")

    async def verify(self, n: int) -> list[str]:
        problems: list[str] = []
        if len(self._keys) != n:
            problems.append(f"saq: {len(self._keys)} jobs enqueued, expected {n}")
        statuses: dict[str, int] = {}
        for start in range(0, len(self._keys), 1000):
            for job in await self._queue.jobs(self._keys[start : start + 1000]):
                status = "missing" if job is None else str(job.status)
                statuses[status] = statuses.get(status, 0) + 1
        complete = statuses.pop(str(Status.COMPLETE), 0)
        if complete != len(self._keys) or statuses:
            problems.append(f"saq: {complete} complete, others: {statuses}")
        return problems


def make_driver() -> SaqDriver:
    return SaqDriver()
