"""Latency under load: enqueue-to-start latency while a paced producer feeds one worker at
fixed fractions of the rate it can process.

1. Peak: a processing run (bench.measure.processing_run: one worker, gated, N tasks)
   gives the system's processing rate in this round, on this machine.
2. On an emptied Redis with a fresh worker that is idle first, a warm-up of up to 200
   tasks at the first level's rate (not measured: a worker's first tasks after idling
   pay for its first takes and connections). Then, for each fraction (50 % and 80 % by
   default): an open-loop producer enqueues N tasks at ``fraction x peak``
   tasks/s. It does not wait for tasks to finish; at each wake-up it enqueues every task
   that is due by then (in one bulk call where the system has a bulk API, so that the
   producer keeps up at rates above its one-by-one enqueue rate), then sleeps until the
   next task is due. The handler pushes its wall-clock start time; the latency of a task
   is that time minus the wall-clock time just before the call that enqueued it (same
   host, same clock).

The figures per fraction: p50 and p99 (nearest rank) of the N latencies; the raw part
also keeps the rate asked for and the rate achieved (a producer that falls behind shows
there), the producer's largest lag behind its schedule and the number of enqueue calls.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from redis.asyncio import Redis

from bench.handler_support import STARTS_KEY
from bench.measure import (
    RunResult,
    check_ran,
    idle_workers,
    percentile,
    prepare_driver,
    processing_run,
    session,
    wait_done,
)
from bench.peers.base import Driver

DEFAULT_FRACTIONS = (50, 80)
# tasks run before the first level and left out of the figures
WARMUP_TASKS = 200


def metric_keys(fraction: int) -> tuple[str, str]:
    """The p50 and p99 metric names of one load level (percent of the peak)."""
    return f"load{fraction}_p50_ms", f"load{fraction}_p99_ms"


async def paced_enqueue(
    driver: Driver, indices: Sequence[int], rate: float
) -> tuple[dict[int, float], dict[str, float]]:
    """Enqueue ``indices`` at ``rate`` tasks/s, open loop. Returns, per task, the wall time
    just before the call that enqueued it, and the producer's own figures."""
    sent_at: dict[int, float] = {}
    n = len(indices)
    start = time.monotonic()
    sent = calls = 0
    max_lag = 0.0
    while sent < n:
        elapsed = time.monotonic() - start
        due = min(n, int(elapsed * rate) + 1)
        if due <= sent:
            await asyncio.sleep(start + sent / rate - time.monotonic())
            continue
        max_lag = max(max_lag, elapsed - sent / rate)
        batch = indices[sent:due]
        if driver.has_bulk and len(batch) > 1:
            t0 = time.time()
            await driver.enqueue_bulk(batch)
            sent_at.update((i, t0) for i in batch)
            calls += 1
        else:
            for i in batch:
                sent_at[i] = time.time()
                await driver.enqueue_one(i)
                calls += 1
        sent = due
    took = time.monotonic() - start
    # n tasks span n - 1 intervals of the schedule
    achieved = (n - 1) / took if n > 1 and took > 0 else float(n)
    return sent_at, {"achieved_per_s": achieved, "max_lag_ms": max_lag * 1000, "calls": calls}


async def _starts(client: Redis) -> dict[int, float]:
    """The handler start times pushed so far (index -> wall time), and the list emptied."""
    rows = await client.lrange(STARTS_KEY, 0, -1)
    await client.delete(STARTS_KEY)
    out: dict[int, float] = {}
    for row in rows:
        i, started = row.split()
        out[int(i)] = float(started)
    return out


async def load_run(
    make_driver: Callable[[], Driver],
    n: int,
    concurrency: int,
    fractions: Sequence[int],
    timeout: float,
) -> RunResult:
    """The peak, then enqueue-to-start latency at each fraction (percent) of it."""
    peak_driver = make_driver()
    peak = await processing_run(
        peak_driver, n, 1, concurrency, bulk=peak_driver.has_bulk, timeout=timeout
    )
    result = RunResult(problems=list(peak.problems))
    if result.problems:
        return result
    peak_per_s = peak.metrics["proc_1w_per_s"]
    result.metrics["load_peak_per_s"] = peak_per_s
    levels: dict[str, Any] = {}
    result.raw = {"peak": peak.metrics, "levels": levels}

    driver = make_driver()
    prepare_driver(driver, 1, concurrency)
    async with (
        session(driver) as client,
        idle_workers(driver, 1, concurrency, gated=False, record_starts=True) as group,
    ):
        # Warm-up, not measured: the worker's first tasks after idling (its first takes,
        # opening connections for its concurrency) at the first level's rate, so that
        # they are not inside the first level's figures.
        warm = min(n, WARMUP_TASKS)
        await paced_enqueue(driver, range(warm), peak_per_s * fractions[0] / 100)
        await wait_done(driver, group, timeout, 0.005)
        await _starts(client)
        for k, fraction in enumerate(fractions):
            rate = peak_per_s * fraction / 100
            indices = range(warm + k * n, warm + (k + 1) * n)
            sent_at, producer = await paced_enqueue(driver, indices, rate)
            await wait_done(driver, group, timeout, 0.005)
            starts = await _starts(client)
            missing = [i for i in indices if i not in starts]
            if missing:
                result.problems.append(f"load {fraction}%: {len(missing)} tasks never started")
                continue
            ms = sorted((starts[i] - sent_at[i]) * 1000 for i in indices)
            p50_key, p99_key = metric_keys(fraction)
            result.metrics[p50_key] = percentile(ms, 50)
            result.metrics[p99_key] = percentile(ms, 99)
            levels[str(fraction)] = {
                "rate_per_s": rate,
                **producer,
                "max_ms": ms[-1],
                "latency_ms": [round(x, 3) for x in ms],
            }
        result.problems += await check_ran(client, driver, warm + n * len(fractions))
    return result
