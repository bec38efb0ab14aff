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

from bench import keyspace, redis_stats
from bench.handler_support import COUNTER_KEY, GATE_KEY, STARTS_KEY
from bench.machine import busy_cpu_s, own_cpu_s
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


def _worker_env(concurrency: int, *, gated: bool, record_starts: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["BENCH_REDIS_URL"] = redis_url()
    # For app modules whose worker CLI takes no concurrency flag (they read it here).
    env["BENCH_CONCURRENCY"] = str(concurrency)
    # Worker CLIs import our app modules (bench.peers.*_app) by dotted path.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env["BENCH_GATED"] = "1" if gated else "0"
    env["BENCH_RECORD_STARTS"] = "1" if record_starts else "0"
    return env


def prepare_driver(driver: Driver, workers: int, concurrency: int) -> None:
    """Tell a driver that sizes its setup by the run's worker slots (``rsjobs-pools``: its
    per-owner limits) how many there are."""
    prepare = getattr(driver, "prepare", None)
    if prepare is not None:
        prepare(workers, concurrency)


@asynccontextmanager
async def session(driver: Driver) -> AsyncIterator[Redis]:
    """An emptied Redis and an open driver; closed afterwards."""
    client = Redis.from_url(redis_url())
    try:
        await redis_stats.reset(client)
        await driver.setup()
        try:
            yield client
        finally:
            await driver.teardown()
    finally:
        await client.aclose()


@asynccontextmanager
async def idle_workers(
    driver: Driver,
    count: int,
    concurrency: int,
    *,
    gated: bool,
    record_starts: bool,
    wait_idle: bool = True,
) -> AsyncIterator[WorkerGroup]:
    """``count`` worker processes of the system, started and (unless ``wait_idle`` is
    false) idle on an empty queue; stopped afterwards. A failure inside carries the tail
    of the workers' logs."""
    with tempfile.TemporaryDirectory(prefix="rsjobs-bench-workers-") as log_dir:
        env = _worker_env(concurrency, gated=gated, record_starts=record_starts)
        group = WorkerGroup(driver.worker_argv(concurrency), count, env, Path(log_dir))
        try:
            group.start()
            if wait_idle:
                await group.wait_idle()
            yield group
        except Exception as exc:
            raise RuntimeError(f"{exc}\n{group.logs_tail()}") from exc
        finally:
            group.stop()


async def wait_done(driver: Driver, group: WorkerGroup, timeout: float, poll: float) -> int:
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


async def check_ran(client: Redis, driver: Driver, n: int) -> list[str]:
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
    """Enqueue n tasks while the workers' handlers are held at the start gate (the
    enqueue figure), then open the gate and time the workers draining the queue.

    The workers are started and idle before anything is enqueued, so the window holds
    no start-up (imports, connecting, loading scripts, first housekeeping) and starts
    with every task queued and every worker warm.
    """
    result = RunResult()
    prepare_driver(driver, workers, concurrency)
    async with (
        session(driver) as client,
        idle_workers(driver, workers, concurrency, gated=True, record_starts=False) as group,
    ):
        mem_before = await redis_stats.snapshot(client)
        t0 = time.perf_counter()
        if bulk:
            await driver.enqueue_bulk(range(n))
        else:
            for i in range(n):
                await driver.enqueue_one(i)
        enqueue_s = time.perf_counter() - t0
        per_poll = await _poll_cost(client, driver)

        cpu_before = group.cpu_seconds()
        busy_before, own_before = busy_cpu_s(), own_cpu_s()
        before = await redis_stats.snapshot(client)
        t1 = time.perf_counter()
        await client.set(GATE_KEY, 1)
        await client.publish(GATE_KEY, 1)

        polls = await wait_done(driver, group, timeout, DONE_POLL_S)

        window_s = time.perf_counter() - t1
        cpu_after = group.cpu_seconds()
        busy_after, own_after = busy_cpu_s(), own_cpu_s()
        after = await redis_stats.snapshot(client)
        result.problems = await check_ran(client, driver, n)

    d = redis_stats.delta(before, after)
    # CPU that neither the workers, Redis nor this process used during the window: other
    # load on the machine, which makes figures unreliable; the report flags it.
    other_s = (busy_after - busy_before) - (cpu_after - cpu_before) - d.cpu_s
    other_s -= own_after - own_before
    stored_bytes = after.stored_memory - mem_before.stored_memory
    # Our own traffic inside the window: the handlers' counter INCRs (one per task, the
    # same for every system), opening the gate (SET + PUBLISH) and completion polling.
    own = n + 2 + polls * per_poll
    result.metrics = {
        f"proc_{workers}w_per_s": n / window_s,
        f"worker_cpu_us_per_task_{workers}w": (cpu_after - cpu_before) / n * 1e6,
        f"redis_cpu_us_per_task_{workers}w": d.cpu_s / n * 1e6,
        f"redis_cmds_per_task_{workers}w": (d.total_commands - own) / n,
        f"redis_mem_bytes_per_task_{workers}w": stored_bytes / n,
    }
    # The enqueue figure of this run: one-by-one from the 1-worker run, bulk from the
    # 2-worker run. A system without a bulk API enqueues one by one in the 2-worker run
    # too; that rate stays in raw so every system has one enqueue sample per round.
    if bulk:
        result.metrics["enqueue_bulk_per_s"] = n / enqueue_s
    elif workers == 1:
        result.metrics["enqueue_one_per_s"] = n / enqueue_s
    result.raw = {
        "enqueue_mode": "bulk" if bulk else "one",
        "enqueue_per_s": n / enqueue_s,
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
        "clients_memory_before": mem_before.clients_memory,
        "clients_memory_after": after.clients_memory,
        "scripts_memory_before": mem_before.scripts_memory,
        "scripts_memory_after": after.scripts_memory,
        "other_cpu_cores": max(0.0, other_s) / window_s,
    }
    return result


async def memory_run(
    driver: Driver, n: int, concurrency: int, bulk: bool, timeout: float
) -> RunResult:
    """Redis memory per waiting and per finished task, from one baseline.

    1. Warm-up: one worker starts on the empty queue, runs one task (index ``n``, not one
       of the measured tasks) and is stopped, so that everything the system creates once
       (streams, consumer groups, registrations, counters, sweep locks) is in the baseline.
    2. Baseline, then ``n`` tasks are enqueued with no worker running: waiting.
    3. A worker starts and drains them; once the system says nothing is outstanding:
       finished. Nothing has expired yet (every system keeps finished work longer).
    Each point is a settled snapshot (redis_stats.settled) followed by a keyspace pass
    (bench.keyspace) for the breakdown by key pattern.
    """
    result = RunResult()
    async with session(driver) as client:
        async with idle_workers(driver, 1, concurrency, gated=False, record_starts=False) as g:
            await driver.enqueue_one(n)
            await wait_done(driver, g, timeout, DONE_POLL_S)
        base = await redis_stats.settled(client)
        base_keys = await keyspace.groups(client)
        t0 = time.perf_counter()
        if bulk:
            await driver.enqueue_bulk(range(n))
        else:
            for i in range(n):
                await driver.enqueue_one(i)
        enqueue_s = time.perf_counter() - t0
        waiting = await redis_stats.settled(client)
        waiting_keys = await keyspace.groups(client)
        # The worker starts next to a full queue. (saq's start-up sweep, which could abort
        # jobs being dequeued at that moment, is still locked out by the warm-up's sweep.)
        async with idle_workers(
            driver, 1, concurrency, gated=False, record_starts=False, wait_idle=False
        ) as g:
            await wait_done(driver, g, timeout, DONE_POLL_S)
            finished = await redis_stats.settled(client)
            finished_keys = await keyspace.groups(client)
            result.problems = await check_ran(client, driver, n + 1)
        # Exact cross-check of the per-task keys (those whose count grew with the tasks),
        # once verified and with no worker left: delete them pattern by pattern.
        finished_growth = keyspace.growth(base_keys, finished_keys)
        per_task = [g.pattern for g in finished_growth if g.keys >= n // 2]
        released = await keyspace.release(client, per_task) if not result.problems else []

    waiting_growth = keyspace.growth(base_keys, waiting_keys)
    waiting_b = waiting.stored_memory - base.stored_memory
    finished_b = finished.stored_memory - base.stored_memory
    result.metrics = {
        "mem_waiting_bytes_per_task": waiting_b / n,
        "mem_finished_bytes_per_task": finished_b / n,
    }
    result.raw = {
        "enqueue_mode": "bulk" if bulk else "one",
        "enqueue_s": enqueue_s,
        "stored_memory": {
            "baseline": base.stored_memory,
            "waiting": waiting.stored_memory,
            "finished": finished.stored_memory,
        },
        "used_memory": {
            "baseline": base.used_memory,
            "waiting": waiting.used_memory,
            "finished": finished.used_memory,
        },
        "keys_waiting": [g.as_dict() for g in waiting_growth],
        "keys_finished": [g.as_dict() for g in finished_growth],
        "memory_usage_sum_waiting": sum(g.bytes for g in waiting_growth),
        "memory_usage_sum_finished": sum(g.bytes for g in finished_growth),
        "released_finished": [
            {"pattern": r.pattern, "keys": r.keys, "freed_bytes": r.freed_bytes} for r in released
        ],
    }
    return result


async def latency_run(driver: Driver, samples: int, concurrency: int, timeout: float) -> RunResult:
    """Enqueue one task at a time to an idle worker; the handler records when it started."""
    result = RunResult()
    latencies: list[float] = []
    async with (
        session(driver) as client,
        idle_workers(driver, 1, concurrency, gated=False, record_starts=True) as group,
    ):
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
            await wait_done(driver, group, timeout, 0.001)
            await asyncio.sleep(random.uniform(0.005, 0.025))
        result.problems = await check_ran(client, driver, samples)

    ms = sorted(x * 1000 for x in latencies)
    result.metrics = {
        "latency_p50_ms": percentile(ms, 50),
        "latency_p99_ms": percentile(ms, 99),
    }
    result.raw = {"latency_ms": ms, "mean_ms": statistics.fmean(ms), "max_ms": ms[-1]}
    return result


def percentile(sorted_values: list[float], pct: float) -> float:
    """Nearest-rank percentile (no interpolation between samples)."""
    rank = max(1, math.ceil(pct / 100 * len(sorted_values)))
    return sorted_values[rank - 1]
