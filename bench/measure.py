"""The measurements of one system in one run: processing (with its enqueue) and latency.

Every run starts from an empty Redis, starts its own workers, proves at the end that
every task ran exactly once (our counter) and completed (the system's own status API),
and stops its workers.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from bench import redis_stats
from bench.handler_support import COUNTER_KEY, STARTS_KEY
from bench.peers.base import Driver, redis_url
from bench.workers import REPO_ROOT, WorkerGroup

# How often the end of the processing window is polled: the window is known to within
# this, i.e. <1% of a window of 1 s or more.
DONE_POLL_S = 0.005


@dataclass
class RunResult:
    metrics: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)


def _worker_env(record_starts: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["BENCH_REDIS_URL"] = redis_url()
    # Worker CLIs import our app modules (bench.peers.*_app) by dotted path.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env["BENCH_RECORD_STARTS"] = "1" if record_starts else "0"
    return env


@asynccontextmanager
async def _running(
    driver: Driver, workers: int, concurrency: int, record_starts: bool
) -> AsyncIterator[tuple[Redis, WorkerGroup]]:
    """Empty Redis, open the driver, start idle workers; undo all of it afterwards."""
    client = Redis.from_url(redis_url())
    await redis_stats.reset(client)
    await driver.setup()
    with tempfile.TemporaryDirectory(prefix="rsjobs-bench-workers-") as log_dir:
        group = WorkerGroup(
            driver.worker_argv(concurrency), workers, _worker_env(record_starts), Path(log_dir)
        )
        try:
            group.start()
            await group.wait_idle()
            yield client, group
        except Exception as exc:
            raise RuntimeError(f"{exc}\n{group.logs_tail()}") from exc
        finally:
            group.stop()
            await driver.teardown()
            await client.aclose()


async def _wait_done(driver: Driver, group: WorkerGroup, timeout: float, poll: float) -> int:
    """Poll the system's bookkeeping until nothing is outstanding; returns the polls made."""
    deadline = time.monotonic() + timeout
    polls = 0
    next_alive_check = time.monotonic() + 1.0
    while True:
        polls += 1
        if await driver.outstanding() == 0:
            return polls
        now = time.monotonic()
        if now > deadline:
            raise TimeoutError(f"tasks still outstanding after {timeout:.0f}s")
        if now > next_alive_check:
            group.check_alive()
            next_alive_check = now + 1.0
        await asyncio.sleep(poll)


async def _check_ran(client: Redis, driver: Driver, n: int) -> list[str]:
    problems = await driver.verify(n)
    ran = int(await client.get(COUNTER_KEY) or 0)
    if ran != n:
        problems.append(f"handler ran {ran} times for {n} tasks")
    return problems


async def _poll_cost(client: Redis, driver: Driver) -> int:
    """Commands one ``outstanding()`` call costs, so our polling can be taken back out
    of the system's command count."""
    before = await redis_stats.snapshot(client)
    await driver.outstanding()
    after = await redis_stats.snapshot(client)
    return redis_stats.delta(before, after).total_commands


async def processing_run(
    driver: Driver, n: int, workers: int, concurrency: int, bulk: bool, timeout: float
) -> RunResult:
    """Enqueue n tasks to frozen idle workers, then time the workers draining them.

    Records the enqueue rate (one-by-one or bulk), processing throughput, worker CPU,
    Redis CPU, Redis commands and Redis memory per task.
    """
    result = RunResult()
    async with _running(driver, workers, concurrency, record_starts=False) as (client, group):
        group.freeze()
        mem_before = await redis_stats.snapshot(client)

        t0 = time.perf_counter()
        if bulk:
            await driver.enqueue_bulk(range(n))
        else:
            for i in range(n):
                await driver.enqueue_one(i)
        enqueue_s = time.perf_counter() - t0

        per_poll = await _poll_cost(client, driver)
        before = await redis_stats.snapshot(client)
        cpu_before = group.cpu_seconds()
        t1 = time.perf_counter()
        group.thaw()
        polls = await _wait_done(driver, group, timeout, DONE_POLL_S)
        window_s = time.perf_counter() - t1
        cpu_after = group.cpu_seconds()
        after = await redis_stats.snapshot(client)

        result.problems = await _check_ran(client, driver, n)

    d = redis_stats.delta(before, after)
    # Our own traffic inside the window: the handlers' counter INCRs (one per task, the
    # same for every system) and our completion polling.
    own = n + polls * per_poll
    system_cmds = d.total_commands - own
    kind = "bulk" if bulk else "one"
    result.metrics = {
        f"enqueue_{kind}_per_s": n / enqueue_s,
        f"proc_{workers}w_per_s": n / window_s,
        f"worker_cpu_us_per_task_{workers}w": (cpu_after - cpu_before) / n * 1e6,
        f"redis_cpu_us_per_task_{workers}w": d.cpu_s / n * 1e6,
        f"redis_cmds_per_task_{workers}w": system_cmds / n,
        f"redis_mem_bytes_per_task_{workers}w": (after.used_memory - mem_before.used_memory) / n,
    }
    result.raw = {
        "enqueue_s": enqueue_s,
        "window_s": window_s,
        "worker_cpu_s": cpu_after - cpu_before,
        "redis_cpu_s": d.cpu_s,
        "redis_commands": d.commands,
        "own_commands_subtracted": own,
        "polls": polls,
        "commands_per_poll": per_poll,
        "used_memory_before": mem_before.used_memory,
        "used_memory_after": after.used_memory,
    }
    return result


async def latency_run(driver: Driver, samples: int, concurrency: int, timeout: float) -> RunResult:
    """Enqueue one task at a time to an idle worker; the handler records when it started."""
    result = RunResult()
    latencies: list[float] = []
    async with _running(driver, 1, concurrency, record_starts=True) as (client, group):
        for i in range(samples):
            t0 = time.time()
            await driver.enqueue_one(i)
            popped = await client.blpop([STARTS_KEY], timeout=timeout)
            if popped is None:
                raise TimeoutError(f"task {i} did not start within {timeout:.0f}s")
            started = float(popped[1].split()[1])
            latencies.append(started - t0)
            # Let the task finish and the worker settle back into its idle wait. The
            # random pause keeps samples from locking onto a polling worker's period.
            await _wait_done(driver, group, timeout, 0.001)
            await asyncio.sleep(random.uniform(0.005, 0.025))
        result.problems = await _check_ran(client, driver, samples)

    ms = sorted(x * 1000 for x in latencies)
    result.metrics = {
        "latency_p50_ms": _percentile(ms, 50),
        "latency_p99_ms": _percentile(ms, 99),
    }
    result.raw = {"latency_ms": ms, "mean_ms": statistics.fmean(ms), "max_ms": ms[-1]}
    return result


def _percentile(sorted_values: list[float], pct: float) -> float:
    """Nearest-rank percentile (no interpolation between samples)."""
    rank = max(1, math.ceil(pct / 100 * len(sorted_values)))
    return sorted_values[rank - 1]
