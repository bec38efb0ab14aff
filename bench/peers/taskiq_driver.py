"""taskiq with taskiq-redis's RedisStreamBroker (Redis Streams + consumer group)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from taskiq import AsyncTaskiqTask

from bench.peers import taskiq_app
from bench.peers.base import python


class TaskiqDriver:
    name = "taskiq"
    has_bulk = False  # taskiq has no bulk kick API

    def __init__(self) -> None:
        self._app = taskiq_app
        self._tasks: list[AsyncTaskiqTask[Any]] = []

    async def setup(self) -> None:
        # A producer calls broker.startup(); for the stream broker this also creates
        # the consumer group, at the stream's current end, before anything is sent.
        await self._app.broker.startup()

    async def teardown(self) -> None:
        await self._app.broker.shutdown()

    async def enqueue_one(self, i: int) -> None:
        self._tasks.append(await self._app.noop.kiq(i))

    async def enqueue_bulk(self, indices: Sequence[int]) -> None:
        raise NotImplementedError("taskiq has no bulk enqueue API")

    def worker_argv(self, concurrency: int) -> list[str]:
        return [
            python(),
            "-m",
            "taskiq",
            "worker",
            "bench.peers.taskiq_app:broker",
            "--workers",
            "1",
            "--max-async-tasks",
            str(concurrency),
            # taskiq logs every task at INFO; per-task logging is off for every system.
            "--log-level",
            "WARNING",
        ]

    async def outstanding(self) -> int:
        # The consumer group is taskiq's bookkeeping: "lag" counts entries not yet
        # delivered, "pending" those delivered but not acknowledged. taskiq acks only
        # after the result is saved (its default WHEN_SAVED), so 0 + 0 means done.
        broker = self._app.broker
        async with Redis(connection_pool=broker.connection_pool) as r:
            groups = await r.xinfo_groups(broker.queue_name)
        for g in groups:
            if g["name"] in (broker.consumer_group_name, broker.consumer_group_name.encode()):
                if g["lag"] is None:
                    # Redis cannot tell (entries were deleted); never guess "done".
                    raise RuntimeError("taskiq consumer group lag is unknown")
                return int(g["lag"]) + int(g["pending"])
        raise RuntimeError("taskiq consumer group not found")

    async def verify(self, n: int) -> list[str]:
        problems: list[str] = []
        if len(self._tasks) != n:
            problems.append(f"taskiq: {len(self._tasks)} tasks enqueued, expected {n}")
        failed = missing = 0
        for start in range(0, len(self._tasks), 500):
            batch = self._tasks[start : start + 500]
            ready = await asyncio.gather(*(t.is_ready() for t in batch))
            missing += ready.count(False)
            done = [t for t, ok in zip(batch, ready, strict=True) if ok]
            results = await asyncio.gather(*(t.get_result() for t in done))
            failed += sum(1 for res in results if res.is_err)
        if missing:
            problems.append(f"taskiq: {missing} tasks have no result")
        if failed:
            problems.append(f"taskiq: {failed} tasks failed")
        return problems


def make_driver() -> TaskiqDriver:
    return TaskiqDriver()
