"""A million tasks through rsjobs, end to end: ``python -m bench.soak [--tasks N] ...``
(``make soak``; a short try: ``make soak SOAK_ARGS="--tasks 50000"``).

On one Redis of its own (loopback, default configuration, no persistence), with
rsjobs's own worker and reaper processes, a producer enqueues ``--tasks`` no-op tasks
at a steady ``--rate``; finished tasks are kept ``--retention-s``; once the producer
has stopped, the run goes on until retention has expired every task. Every
``--sample-s`` it records used_memory, DBSIZE, the tasks Redis holds, tasks finished
per second, enqueue-to-start latency and the CPU of Redis, the worker, the reaper and
of anything else on the machine. Results: bench/results/soak-latest.{json,md,png}.
Exit status 1 if a task was lost or a check missed its target (bench/soak_report.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from bench import keyspace, redis_stats, soak_report
from bench.handler_support import COUNTER_KEY
from bench.machine import busy_cpu_s, own_cpu_s
from bench.peers.base import TASK_NAME
from bench.peers.rsjobs_app import NAMESPACE, QUEUE
from bench.redis_server import RedisServer
from bench.soak_probe import LatencySampler, Retained
from bench.workers import REPO_ROOT, WorkerGroup
from rsjobs import Client, EnqueueRequest, Settings, State, connect
from rsjobs.store.scripts import SCRIPT_NAMES, script_sha, script_source

RESULTS_DIR = REPO_ROOT / "bench" / "results"
_UNFINISHED = (State.PENDING, State.SCHEDULED, State.RUNNING, State.PAUSED)
# The producer wakes this often and enqueues what is due, in one enqueue_many call.
_TICK_S = 0.01
# Other load on the machine is measured over this long a window (see _Sampler.sample).
LOAD_WINDOW_S = 10.0
# Keys that may exist at the end and not at the baseline without being anyone's task.
_FIXED_KEYS_SLACK = 10


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    p.add_argument("--tasks", type=int, default=1_000_000)
    p.add_argument("--rate", type=float, default=2500.0, help="tasks enqueued per second")
    p.add_argument("--retention-s", type=float, default=60.0, help="how long finished tasks stay")
    p.add_argument("--sample-s", type=float, default=2.0, help="seconds between samples")
    p.add_argument("--concurrency", type=int, default=32, help="of the worker")
    p.add_argument(
        "--latency-per-sample",
        type=int,
        default=1000,
        help="about this many tasks per sample are read back for their latency",
    )
    p.add_argument(
        "--max-s",
        type=float,
        default=0.0,
        help="stop after this long even if tasks remain (default: 1.5 x the planned time + 120 s)",
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=2000,
        help="tasks run and expired before the baseline is taken (see _warm_up)",
    )
    p.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    p.add_argument(
        "--log-dir", type=Path, help="keep the worker's and reaper's logs here (default: dropped)"
    )
    p.add_argument("--name", default="soak-latest", help="file name of the results")
    args = p.parse_args(argv)
    if args.tasks < 1 or args.rate <= 0 or args.retention_s <= 0 or args.sample_s <= 0:
        p.error("--tasks, --rate, --retention-s and --sample-s must be positive")
    if args.warmup < 0:
        p.error("--warmup must be zero or positive")
    if args.concurrency < 1 or args.latency_per_sample < 1:
        p.error("--concurrency and --latency-per-sample must be positive")
    planned = (args.tasks + args.warmup) / args.rate + 2 * args.retention_s
    args.max_s = args.max_s or 1.5 * planned + 120
    return args


@dataclass
class _Run:
    """What the producer and the sampler share."""

    enqueued: int = 0
    behind_max: int = 0  # most tasks the producer was ever behind its schedule
    produced_at: float = 0.0  # monotonic time the last task was enqueued (0 = not yet)


async def _produce(
    client: Client, args: argparse.Namespace, run: _Run, retained: Retained, lat: LatencySampler
) -> None:
    """Enqueue at a steady rate: at each tick, every task due by now (catching up if the
    loop was late), in one enqueue_many call."""
    start = time.monotonic()
    while run.enqueued < args.tasks:
        due = min(args.tasks, int((time.monotonic() - start) * args.rate) + 1)
        batch = min(due - run.enqueued, 1000)
        if batch > 0:
            run.behind_max = max(run.behind_max, due - run.enqueued)
            first = run.enqueued
            reqs = [
                EnqueueRequest(type=TASK_NAME, payload={"i": i}, queue=QUEUE)
                for i in range(first, first + batch)
            ]
            ids = await client.enqueue_many(reqs)
            retained.add(ids)
            lat.add(first, ids)
            run.enqueued += batch
        next_due = start + (run.enqueued + 1) / args.rate
        await asyncio.sleep(max(0.0, min(_TICK_S, next_due - time.monotonic())))
    run.produced_at = time.monotonic()


def _percentile(values: list[int], pct: float) -> float | None:
    return soak_report.percentile(sorted(values), pct) if values else None


class _Sampler:
    def __init__(
        self, raw: Redis, client: Client, worker: WorkerGroup, reaper: WorkerGroup
    ) -> None:
        self.raw, self.client, self.worker, self.reaper = raw, client, worker, reaper
        self.t0 = time.monotonic()
        # tasks of the warm-up round, not counted as the run's
        self.warm_finished = 0
        self.last: dict[str, float] = {}
        # (time, CPU counters) of recent samples, for the machine-load window
        self.recent: deque[tuple[float, dict[str, float]]] = deque()

    async def sample(self, run: _Run, retained: Retained, lat: LatencySampler) -> dict[str, Any]:
        now = time.monotonic()
        # one consistent reading of memory, cpu, stats and keyspace (Redis 6.2 takes one
        # section name per INFO: "all" covers them)
        info: dict[str, Any] = await self.raw.execute_command("INFO", "all")
        dbsize = int(await self.raw.dbsize())
        stats = (await self.client.stats()).get(QUEUE, {})
        held = await retained.count(self.client)
        waits = [s.wait_ms for s in await lat.collect(self.client)]
        cpu = {
            "redis": float(info["used_cpu_sys"]) + float(info["used_cpu_user"]),
            "worker": self.worker.cpu_seconds(),
            "reaper": self.reaper.cpu_seconds(),
            "busy": busy_cpu_s(),
            "own": own_cpu_s(),
        }
        finished = _finished(stats) - self.warm_finished
        row: dict[str, Any] = {
            "t": now - self.t0,
            "producing": run.produced_at == 0.0,
            "enqueued": run.enqueued,
            "finished": finished,
            "unfinished": sum(int(stats.get(s, 0)) for s in _UNFINISHED),
            "retained": held,
            "dbsize": dbsize,
            "used_memory": int(info["used_memory"]),
            "stored_memory": int(info["used_memory"])
            - int(info.get("mem_clients_normal", 0))
            - int(info.get("used_memory_scripts", 0)),
            "expired_keys": int(info.get("expired_keys", 0)),
            # Redis's own estimate of the keys with a TTL that are expired, not reclaimed
            "expired_stale_perc": float(info.get("expired_stale_perc", 0.0)),
            "latency_samples": len(waits),
            "latency_p50_ms": _percentile(waits, 50),
            "latency_p99_ms": _percentile(waits, 99),
            "cpu_s": cpu,
        }
        if self.last:
            dt = now - self.last["t"]
            row["finished_per_s"] = (finished - self.last["finished"]) / dt
            ours = ("redis", "worker", "reaper", "own")
            row["cores"] = {k: (cpu[k] - self.last[k]) / dt for k in ours}
            # The machine-wide counters of /proc/stat arrive in lumps on a VM (3.5 cores
            # busy in one 2 s interval of a 2-CPU machine, 0.2 in the next), so other
            # load is taken over the last LOAD_WINDOW_S, not per interval.
            while len(self.recent) > 1 and now - self.recent[1][0] >= LOAD_WINDOW_S:
                self.recent.popleft()
            then_t, then = self.recent[0]
            span = now - then_t
            other = (cpu["busy"] - then["busy"]) / span
            other -= sum(cpu[k] - then[k] for k in ours) / span
            row["other_cpu_cores"] = max(0.0, other)
        self.last = {"t": now, "finished": finished, **cpu}
        self.recent.append((now, cpu))
        return row


async def _clear_slowlog(raw: Redis) -> dict[str, int]:
    """Empties Redis's slow log; what it held: entries and bytes of used_memory."""
    before = await redis_stats.settled(raw)
    entries = int(await raw.execute_command("SLOWLOG", "LEN"))
    await raw.execute_command("SLOWLOG", "RESET")
    after = await redis_stats.settled(raw)
    return {"entries": entries, "bytes": before.stored_memory - after.stored_memory}


def _pairs(reply: Any) -> dict[Any, Any]:
    """A RESP2 flat list of name, value, ... (or a RESP3 map) as a dict."""
    if isinstance(reply, dict):
        return reply
    return dict(zip(reply[::2], reply[1::2], strict=True))


async def _memory_parts(raw: Redis) -> dict[str, int]:
    """MEMORY STATS' byte counts (dataset, overheads, per-db hash tables...), flattened."""
    items = _pairs(await raw.execute_command("MEMORY", "STATS"))
    parts: dict[str, int] = {}
    for key, value in items.items():
        name = key.decode() if isinstance(key, bytes) else str(key)
        if isinstance(value, int) and not name.endswith(("perc", "ratio")):
            parts[name] = value
        elif isinstance(value, list | dict):  # db.0: overhead.hashtable.main, .expires
            for k2, v2 in _pairs(value).items():
                n2 = k2.decode() if isinstance(k2, bytes) else str(k2)
                if isinstance(v2, int):
                    parts[f"{name}.{n2}"] = v2
    shas = [script_sha(n) for n in SCRIPT_NAMES]
    cached = await raw.script_exists(*shas)
    parts.update({f"script:{n}": int(c) for n, c in zip(SCRIPT_NAMES, cached, strict=True)})
    info = await raw.info("memory")
    for name in ("number_of_cached_scripts", "used_memory_lua", "used_memory_scripts"):
        if name in info:
            parts[name] = int(info[name])
    return parts


def _finished(stats: dict[str, Any]) -> int:
    return sum(
        int(stats.get(s, 0))
        for s in (State.SUCCEEDED, State.FAILED, State.CANCELLED, State.TIMED_OUT)
    )


async def _warm_up(
    args: argparse.Namespace, raw: Redis, client: Client, deadline_s: float
) -> tuple[int, int]:
    """Every script loaded, and a small round of tasks through every path the run
    takes (enqueue_many, the worker's start and finish, the latency and retention
    probes, the reaper's expiry and trims), left to expire, so that the baseline already
    holds what is created once and kept for good: Redis's script cache, the queue stream
    and its group, the stats hash, the events stream, the handlers' counter. Without it
    the run's end is compared with a Redis that had never run a task. Returns the
    round's finished tasks and handler runs, which the run's own figures leave out."""
    if args.warmup == 0:
        return 0, 0
    # every script of the package, also those the round may not call (a heartbeat comes
    # only when a task runs long): each loads once, into Redis's script cache and Lua heap
    for name in SCRIPT_NAMES:
        await raw.script_load(script_source(name))
    retained = Retained()
    lat = LatencySampler(every=10)
    for first in range(0, args.warmup, 500):
        reqs = [
            EnqueueRequest(type=TASK_NAME, payload={"i": i}, queue=QUEUE)
            for i in range(first, min(args.warmup, first + 500))
        ]
        ids = await client.enqueue_many(reqs)
        retained.add(ids)
        lat.add(first, ids)
        await asyncio.sleep(0.1)
    deadline = time.monotonic() + deadline_s
    while True:
        await lat.collect(client)
        stats = (await client.stats()).get(QUEUE, {})
        if _finished(stats) >= args.warmup and await retained.count(client) == 0:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"the warm-up round did not finish and expire: {stats}")
        await asyncio.sleep(1.0)
    # the reaper's next sweeps trim what the expiry left (events by age, the indexes)
    await asyncio.sleep(min(10.0, args.retention_s))
    return _finished(stats), int(await raw.get(COUNTER_KEY) or 0)


def _worker_env(url: str) -> dict[str, str]:
    env = dict(os.environ, BENCH_REDIS_URL=url, BENCH_GATED="0", BENCH_RECORD_STARTS="0")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    return env


async def _soak(args: argparse.Namespace, url: str, log_dir: Path) -> dict[str, Any]:
    retention_ms = int(args.retention_s * 1000)
    settings = Settings(namespace=NAMESPACE, retention_ms=retention_ms)
    env = _worker_env(url)
    py = sys.executable
    worker = WorkerGroup(
        [py, "-m", "bench.soak_worker", url, NAMESPACE, QUEUE, str(retention_ms),
         str(args.concurrency)],
        1, env, log_dir / "worker",
    )  # fmt: skip
    reaper = WorkerGroup(
        [py, "-m", "rsjobs", "--url", url, "--namespace", NAMESPACE, "--log-level", "WARNING",
         "reaper", "--retention-ms", str(retention_ms), "--quiet"],
        1, env, log_dir / "reaper",
    )  # fmt: skip
    for d in ("worker", "reaper"):
        (log_dir / d).mkdir()
    raw = Redis.from_url(url)
    client = Client(connect(url), settings)
    run, retained = _Run(), Retained()
    per_sample = args.rate * args.sample_s
    lat = LatencySampler(every=max(1, round(per_sample / args.latency_per_sample)))
    samples: list[dict[str, Any]] = []
    problems: list[str] = []
    try:
        worker.start()
        reaper.start()
        await worker.wait_idle()
        await reaper.wait_idle()
        warm_finished, warm_runs = await _warm_up(args, raw, client, 3 * args.retention_s + 120)
        base_slowlog = await _clear_slowlog(raw)
        base = await redis_stats.settled(raw)
        base_parts = await _memory_parts(raw)
        base_keys = await keyspace.groups(raw)
        base_dbsize = int(await raw.dbsize())
        sampler = _Sampler(raw, client, worker, reaper)
        sampler.warm_finished = warm_finished
        samples.append(await sampler.sample(run, retained, lat))
        producer = asyncio.create_task(_produce(client, args, run, retained, lat))
        deadline = time.monotonic() + args.max_s
        next_at = time.monotonic() + args.sample_s
        quiet = 0
        while True:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            next_at += args.sample_s
            if producer.done():
                producer.result()  # re-raise the producer's error, if any
            row = await sampler.sample(run, retained, lat)
            samples.append(row)
            worker.check_alive()
            reaper.check_alive()
            _progress(row, args)
            # Every task gone, and the keyspace back to its baseline but for a few fixed
            # keys written after it (the handlers' counter, the reaper's guard).
            drained = (
                producer.done()
                and row["finished"] >= args.tasks
                and row["retained"] == 0
                and row["dbsize"] <= base_dbsize + _FIXED_KEYS_SLACK
            )
            # two more samples once everything is gone: memory after the last expiry
            quiet = quiet + 1 if drained else 0
            if quiet >= 3:
                break
            if time.monotonic() > deadline:
                problems.append(f"stopped after {args.max_s:.0f} s with tasks left: {row}")
                break
        final_slowlog = await _clear_slowlog(raw)
        final = await redis_stats.settled(raw)
        final_parts = await _memory_parts(raw)
        final_keys = await keyspace.groups(raw)
        stats = (await client.stats()).get(QUEUE, {})
        ran = int(await raw.get(COUNTER_KEY) or 0) - warm_runs
        succeeded = int(stats.get(State.SUCCEEDED, 0)) - warm_finished
        if succeeded != args.tasks:
            problems.append(f"stats: {succeeded} SUCCEEDED of {args.tasks} (past the warm-up)")
        if ran != args.tasks:
            problems.append(f"the handler ran {ran} times for {args.tasks} tasks")
        if not producer.done():
            producer.cancel()
    finally:
        worker.stop(grace_s=10)
        reaper.stop(grace_s=10)
        await client.close()
        await raw.aclose()
    return {
        "samples": samples,
        "baseline": {"stored_memory": base.stored_memory, "used_memory": base.used_memory,
                     "dbsize": base_dbsize},
        "final": {"stored_memory": final.stored_memory, "used_memory": final.used_memory,
                  "dbsize": samples[-1]["dbsize"]},
        "residual_keys": [g.as_dict() for g in keyspace.growth(base_keys, final_keys)],
        # Redis's slow log (at most slowlog-max-len entries, each with the first arguments
        # of a command that took over slowlog-log-slower-than) is emptied before both
        # readings: a bounded diagnostic buffer that fills on a busy machine, not task data
        "slowlog_cleared": {"baseline": base_slowlog, "final": final_slowlog},
        # where used_memory went between the baseline and the end, by MEMORY STATS' parts
        "residual_parts": {
            k: final_parts[k] - base_parts.get(k, 0)
            for k in final_parts
            if final_parts[k] != base_parts.get(k, 0)
        },
        "final_stats": stats,
        "handler_runs": ran,
        "warmup": {"tasks": args.warmup, "finished": warm_finished, "handler_runs": warm_runs},
        "producer_behind_max": run.behind_max,
        "latency": {"every": lat.every, "lost": lat.lost,
                    "samples": [[s.index, s.wait_ms, s.finished_at] for s in lat.samples]},
        "problems": problems,
    }  # fmt: skip


def _progress(row: dict[str, Any], args: argparse.Namespace) -> None:
    p99 = row.get("latency_p99_ms")
    print(
        f"t={row['t']:6.0f}s enqueued={row['enqueued']:>9,} finished={row['finished']:>9,} "
        f"retained={row['retained']:>8,} dbsize={row['dbsize']:>8,} "
        f"mem={row['used_memory'] / 2**20:7.1f} MiB "
        f"rate={row.get('finished_per_s', 0):6.0f}/s p99={'-' if p99 is None else p99:>4} ms "
        f"other={row.get('other_cpu_cores', 0):.2f} cores",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    server = RedisServer()
    server.start()
    started = datetime.now(UTC)
    try:
        meta: dict[str, Any] = {
            "redis_version": server.version(),
            "tasks": args.tasks,
            "rate": args.rate,
            "retention_s": args.retention_s,
            "sample_s": args.sample_s,
            "concurrency": args.concurrency,
            "warmup": args.warmup,
            "workers": 1,
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "started_at": started.isoformat(timespec="seconds"),
        }
        print(
            f"Redis {meta['redis_version']} at {server.url}; {args.tasks:,} tasks at "
            f"{args.rate:,.0f}/s, retention {args.retention_s:.0f} s",
            flush=True,
        )
        if args.log_dir is not None:
            args.log_dir.mkdir(parents=True, exist_ok=False)
            result = asyncio.run(_soak(args, server.url, args.log_dir))
        else:
            with tempfile.TemporaryDirectory(prefix="rsjobs-soak-") as tmp:
                result = asyncio.run(_soak(args, server.url, Path(tmp)))
    finally:
        server.stop()
    meta["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    analysis = soak_report.analyse(meta, result)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = args.out_dir / args.name
    out.with_suffix(".json").write_text(
        json.dumps({"meta": meta, "analysis": analysis, **result}, indent=None)
    )
    md = soak_report.markdown(meta, analysis, result)
    out.with_suffix(".md").write_text(md)
    soak_report.write_chart(out.with_suffix(".png"), meta, analysis, result)
    print()
    print(md)
    print(f"Wrote {out}.json, .md and .png")
    failed = result["problems"] or any(not c["ok"] for c in analysis["checks"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
