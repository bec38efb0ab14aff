"""arq: create_pool / ArqRedis.enqueue_job and the arq worker CLI."""

from __future__ import annotations

from collections.abc import Sequence

from arq import create_pool
from arq.connections import ArqRedis
from arq.constants import default_queue_name

from bench.peers.arq_app import redis_settings
from bench.peers.base import TASK_NAME, python


class ArqDriver:
    name = "arq"
    has_bulk = False  # arq has no bulk enqueue API

    def __init__(self) -> None:
        self._pool: ArqRedis | None = None

    @property
    def pool(self) -> ArqRedis:
        assert self._pool is not None, "setup() not called"
        return self._pool

    async def setup(self) -> None:
        self._pool = await create_pool(redis_settings())

    async def teardown(self) -> None:
        await self.pool.aclose()

    async def enqueue_one(self, i: int) -> None:
        job = await self.pool.enqueue_job(TASK_NAME, i)
        assert job is not None, "arq refused a job as a duplicate"

    async def enqueue_bulk(self, indices: Sequence[int]) -> None:
        raise NotImplementedError("arq has no bulk enqueue API")

    def worker_argv(self, concurrency: int) -> list[str]:
        # max_jobs comes from WorkerSettings (BENCH_CONCURRENCY).
        return [
            python(),
            "-m",
            "arq",
            "bench.peers.arq_app.WorkerSettings",
            "--custom-log-dict",
            "bench.peers.arq_app.LOG_CONFIG",
        ]

    async def outstanding(self) -> int:
        # arq's queue is a sorted set of job ids; a job leaves it only when it finishes.
        return int(await self.pool.zcard(default_queue_name))

    async def verify(self, n: int) -> list[str]:
        # arq keeps every job's result (keep_result defaults to an hour).
        results = await self.pool.all_job_results()
        ok = sum(1 for r in results if r.success)
        problems = []
        if ok != n or len(results) != n:
            problems.append(f"arq: {ok} successful results of {len(results)}, expected {n}")
        return problems


def make_driver() -> ArqDriver:
    return ArqDriver()
