"""streaq: task.enqueue / Worker.enqueue_many and the streaq worker CLI."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AsyncExitStack

from streaq import TaskStatus

from bench.peers import streaq_app
from bench.peers.base import chunks, python


class StreaqDriver:
    name = "streaq"
    has_bulk = True

    def __init__(self) -> None:
        self._app = streaq_app
        self._stack = AsyncExitStack()

    async def setup(self) -> None:
        # A producer enqueues inside ``async with worker``, as streaq documents.
        await self._stack.enter_async_context(self._app.worker)

    async def teardown(self) -> None:
        await self._stack.aclose()

    async def enqueue_one(self, i: int) -> None:
        await self._app.noop.enqueue(i)

    async def enqueue_bulk(self, indices: Sequence[int]) -> None:
        for chunk in chunks(indices):
            await self._app.worker.enqueue_many([self._app.noop.enqueue(i) for i in chunk])

    def worker_argv(self, concurrency: int) -> list[str]:
        # Concurrency comes from the app's Worker (BENCH_CONCURRENCY).
        return [python(), "-m", "streaq", "run", "bench.peers.streaq_app:worker", "--workers", "1"]

    async def outstanding(self) -> int:
        # Stream entries are deleted when a task finishes; queue_size counts what's left.
        return await self._app.worker.queue_size()

    async def verify(self, n: int) -> list[str]:
        # Results are kept for the task's ttl (5 minutes by default).
        results = await self._app.worker.get_tasks_by_status(TaskStatus.DONE, limit=n + 1)
        ok = sum(1 for r in results if r.success)
        problems = []
        if ok != n or len(results) != n:
            problems.append(f"streaq: {ok} successful results of {len(results)}, expected {n}")
        return problems


def make_driver() -> StreaqDriver:
    return StreaqDriver()
