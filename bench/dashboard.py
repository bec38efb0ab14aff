"""The operator console's back end at scale: with ``--tasks`` finished tasks in Redis
(100,000 by default), how long the calls of the console take, p50 / p95 over
``--requests`` requests each (the app in-process over httpx's ASGI transport, the JSON
included), and whether memory comes back to its baseline once they expire.

    python -m bench.dashboard [--url URL] [--tasks 100000] [--requests 40] [--retention-s 300]

Without ``--url`` it starts its own loopback Redis (default configuration, persistence
off). Steps:

1. warm-up: 200 tasks made by the real scripts with a 1 s retention, and 1,000 PENDING
   and 100 SCHEDULED ones on a queue no one serves (they stay: part of the baseline);
   24 h of per-minute samples per queue, written as the reaper writes them (one entry
   per minute: a series read returns full windows, and the baseline holds what a day of
   sampling keeps; the bench runs for minutes, not a day); every call measured below,
   once; a reaper sweeps (every script of its sweep runs) until the 200 expired; then
   the baseline: DBSIZE and ``used_memory``.
2. load: ``--tasks`` finished tasks (``bench.lists.fill``: the real enqueue, start,
   finish and control scripts in batches of 250; three queues, 80 % SUCCEEDED, 15 %
   FAILED, 5 % CANCELLED, 500 owners, half the tasks labelled) with ``--retention-s``.
3. measure: each call ``--requests`` times: ``GET /tasks?limit=50`` (first page), two
   filtered lists (state+queue, label), pages 2..N following cursors, ``GET /queues``,
   ``GET /queues/{q}/series`` (60 and 1440 minutes), ``GET /workers``,
   ``GET /workflows``, and the console's first screen: ``/queues`` + the series of every
   queue + ``/workers`` + ``/tasks?limit=50``, one after another (summed per screen).
4. retention: a reaper sweeps every second until the loaded tasks expired and their
   index entries are trimmed; DBSIZE and ``used_memory`` against the baseline.

Targets: first screen and filtered list p95 <= 200 ms, a list page p95 <= 50 ms. The
results go to ``bench/results/dashboard-latest.md`` (``--out``). :func:`run` is what the
suite's bounded test calls.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import redis

from bench.lists import QUEUES, TOKEN, fill
from rsjobs.reaper import Reaper, ReaperConfig
from rsjobs.settings import Settings
from rsjobs.store.keys import Keys
from rsjobs.store.series import MAX_MINUTES, STEP_MS

NAMESPACE = "dash"
WARMUP_RETENTION_MS = 1000
#: p95 budgets (ms)
SCREEN_MS = 200.0
FILTERED_MS = 200.0
PAGE_MS = 50.0
#: the calls measured: name -> (path, query); "screen" is measured apart
CALLS: dict[str, tuple[str, dict[str, str]]] = {
    "tasks first page": ("/tasks", {"limit": "50"}),
    "filtered: state+queue": ("/tasks", {"state": "FAILED", "queue": "gpu", "limit": "50"}),
    "filtered: label": ("/tasks", {"label": "user=u_7", "limit": "50"}),
    "queues": ("/queues", {}),
    "series 60 min": ("/queues/gpu/series", {"minutes": "60"}),
    "series 1440 min": ("/queues/gpu/series", {"minutes": "1440"}),
    "workers": ("/workers", {}),
    "workflows": ("/workflows", {"limit": "50"}),
}
#: the budget each call is held to (None: reported only)
BUDGETS: dict[str, float | None] = {
    "tasks first page": PAGE_MS,
    "filtered: state+queue": FILTERED_MS,
    "filtered: label": FILTERED_MS,
    "tasks pages 2..N": PAGE_MS,
    "queues": None,
    "series 60 min": None,
    "series 1440 min": None,
    "workers": None,
    "workflows": None,
    "first screen": SCREEN_MS,
}


def _p(times: list[float], q: float) -> float:
    s = sorted(times)
    return s[max(0, round(q * len(s)) - 1)]


def seed_series(url: str, namespace: str, queues: list[str]) -> None:
    """24 h of per-minute samples per queue, as ``series.lua`` writes them (entry id
    ``<minute>-0``, cumulative counters), ending the minute before now."""
    r = redis.Redis.from_url(url, decode_responses=True)
    try:
        k = Keys(namespace)
        secs, _ = r.time()
        minute = int(secs) * 1000 // STEP_MS * STEP_MS
        for q in queues:
            key = k.series(q)
            pipe = r.pipeline(transaction=False)
            n = st = ok = f = c = 0
            for m in range(MAX_MINUTES + 1, 0, -1):
                n, st = n + 30, st + 28
                ok, f, c = ok + 24, f + 3, c + 1
                fields = {"n": n, "st": st, "ok": ok, "f": f, "c": c, "to": 0, "p": 12, "age": 900}
                pipe.xadd(key, fields, id=f"{minute - m * STEP_MS}-0")  # type: ignore[arg-type]
            pipe.execute()
    finally:
        r.close()


async def _timed(call: Callable[[], Awaitable[httpx.Response]]) -> tuple[float, httpx.Response]:
    t0 = time.perf_counter()
    resp = await call()
    ms = (time.perf_counter() - t0) * 1000
    if resp.status_code != 200:
        raise SystemExit(f"bench.dashboard: {resp.request.url}: {resp.status_code} {resp.text}")
    return ms, resp


async def measure(url: str, *, requests: int, namespace: str = NAMESPACE) -> dict[str, Any]:
    """Per call: p50, p95 and max ms over ``requests`` requests (and what they returned)."""
    from rsjobs.web import create_app

    app = create_app(url, namespace=namespace, admin_token=TOKEN, env={})
    headers = {"Authorization": f"Bearer {TOKEN}"}
    out: dict[str, Any] = {}
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as http:

            def get(path: str, params: dict[str, str]) -> Callable[[], Awaitable[httpx.Response]]:
                return lambda: http.get(path, params=params, headers=headers)

            for path, params in CALLS.values():  # warm: connections, scripts
                await http.get(path, params=params, headers=headers)
            for name, (path, params) in CALLS.items():
                times, sizes = [], []
                for _ in range(requests):
                    ms, resp = await _timed(get(path, params))
                    times.append(ms)
                    body = resp.json()
                    sizes.append(
                        len(body.get("items") or body.get("points") or body.get("queues")
                            or body.get("workers") or body.get("workflows") or [])
                    )  # fmt: skip
                out[name] = _row(times, sizes)
            # pages 2..N of the whole list, following the cursors (starting over at the end)
            times, sizes = [], []
            cursor = None
            while len(times) < requests:
                q = {"limit": "50", **({"cursor": cursor} if cursor else {})}
                ms, resp = await _timed(get("/tasks", q))
                body = resp.json()
                if cursor is not None:
                    times.append(ms)
                    sizes.append(len(body["items"]))
                cursor = body["cursor"]
            out["tasks pages 2..N"] = _row(times, sizes)
            # the first screen: every call it makes, one after another
            queues = [
                q["name"] for q in (await http.get("/queues", headers=headers)).json()["queues"]
            ]
            times, sizes = [], []
            for _ in range(requests):
                t0 = time.perf_counter()
                await _timed(get("/queues", {}))
                for q in queues:
                    await _timed(get(f"/queues/{q}/series", {"minutes": "60"}))
                await _timed(get("/workers", {}))
                _, resp = await _timed(get("/tasks", {"limit": "50"}))
                times.append((time.perf_counter() - t0) * 1000)
                sizes.append(len(resp.json()["items"]))
            out["first screen"] = _row(times, sizes, calls=3 + len(queues))
    finally:
        await app.state.rsjobs.aclose()
    return out


def _row(times: list[float], sizes: list[int], calls: int = 1) -> dict[str, float]:
    return {
        "p50_ms": statistics.median(times),
        "p95_ms": _p(times, 0.95),
        "max_ms": max(times),
        "n": len(times),
        "items": statistics.mean(sizes) if sizes else 0,
        "calls": calls,
    }


async def _sweep_until(
    reaper: Reaper, r: redis.Redis, done: Callable[[], bool], timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        await reaper.sweep_once()
        if await asyncio.to_thread(done):
            return
        if time.monotonic() > deadline:
            raise SystemExit("bench.dashboard: the tasks did not expire in time")
        await asyncio.sleep(1.0)


def _task_keys_left(r: redis.Redis, namespace: str) -> int:
    """Keys of finished tasks left (task hashes beyond the live tasks', the done streams,
    the tags index and its trim queue): 0 once everything past retention is gone."""
    k = Keys(namespace)
    stats = r.hgetall(k.stats)
    live = sum(
        int(v) for f, v in stats.items()
        if f.decode().rpartition(":")[2] in ("PENDING", "SCHEDULED", "RUNNING", "PAUSED")
    )  # fmt: skip
    hashes = sum(1 for _ in r.scan_iter(match=f"{k.prefix}task:*", count=5000))
    indexes = sum(int(r.exists(d)) for d in k.done) + int(r.exists(k.tags_trim))
    return max(0, hashes - live) + indexes + int(r.zcard(k.tags))


async def _reap(url: str, namespace: str, retention_ms: int, timeout: float) -> None:
    settings = Settings(namespace=namespace, retention_ms=retention_ms)
    reaper = Reaper(url=url, settings=settings, config=ReaperConfig(guard=False))
    r = redis.Redis.from_url(url)
    try:
        await _sweep_until(reaper, r, lambda: _task_keys_left(r, namespace) == 0, timeout)
    finally:
        await reaper.close()
        r.close()


def _memory(url: str) -> tuple[int, int]:
    r = redis.Redis.from_url(url)
    try:
        return int(r.dbsize()), int(r.info("memory")["used_memory"])
    finally:
        r.close()


def run(
    url: str, *, tasks: int, requests: int, retention_s: float, namespace: str = NAMESPACE
) -> dict[str, Any]:
    """The four steps (see the module); everything measured. ``retention_s`` 0: the
    tasks are kept for ever and step 4 is left out (``memory["end"]`` is then the
    loaded state)."""
    # 1. warm-up and baseline
    warm = Settings(namespace=namespace, retention_ms=WARMUP_RETENTION_MS)
    fill(url, 200, settings=warm, seed=3, live=True)
    # a namespace that has run for a day holds a day of samples per queue: the baseline too
    seed_series(url, namespace, [q for q, _ in QUEUES] + ["idle"])
    asyncio.run(measure(url, requests=1, namespace=namespace))  # the web app's scripts too
    asyncio.run(_reap(url, namespace, WARMUP_RETENTION_MS, timeout=60))
    base_keys, base_mem = _memory(url)
    # 2. load
    retention_ms = int(retention_s * 1000)
    t0 = time.perf_counter()
    fill(
        url,
        tasks,
        settings=Settings(namespace=namespace, retention_ms=retention_ms),
        seed=11,
        live=False,
    )
    loaded_s = time.perf_counter() - t0
    peak_keys, peak_mem = _memory(url)
    # 3. measure (all of it well inside the retention period: nothing expires meanwhile)
    rows = asyncio.run(measure(url, requests=requests, namespace=namespace))
    measured_s = time.perf_counter() - t0
    if retention_s and measured_s > retention_s * 0.9:
        raise SystemExit(
            f"bench.dashboard: load and measurement took {measured_s:.0f} s, close to the "
            f"{retention_s:.0f} s retention: tasks may have expired during it; raise --retention-s"
        )
    # 4. retention (0: the tasks are kept for ever, nothing to wait for)
    t1 = time.perf_counter()
    if retention_s:
        asyncio.run(_reap(url, namespace, retention_ms, timeout=retention_s + 120))
    expired_s = time.perf_counter() - t1
    end_keys, end_mem = _memory(url)
    return {
        "load": os.getloadavg(),
        "tasks": tasks,
        "requests": requests,
        "retention_s": retention_s,
        "loaded_s": loaded_s,
        "expired_s": expired_s,
        "rows": rows,
        "memory": {
            "base": (base_keys, base_mem),
            "peak": (peak_keys, peak_mem),
            "end": (end_keys, end_mem),
        },
    }


def verdicts(result: dict[str, Any]) -> list[str]:
    """What missed its budget (empty: all met)."""
    out = []
    for name, budget in BUDGETS.items():
        row = result["rows"].get(name)
        if budget is not None and row is not None and row["p95_ms"] > budget:
            out.append(f"{name}: p95 {row['p95_ms']:.1f} ms > {budget:.0f} ms")
    return out


def report(result: dict[str, Any], version: str) -> str:
    m = result["memory"]
    lines = [
        "# Operator console back end: latency at scale and memory after retention",
        "",
        f"`python -m bench.dashboard --tasks {result['tasks']} --requests {result['requests']} "
        f"--retention-s {result['retention_s']:.0f}`; Redis {version}, its own loopback "
        "server; the app in-process over httpx's ASGI transport (JSON encoding and "
        "decoding included), one request at a time, on a shared 2-core machine (load "
        "average at the end: " + ", ".join(f"{x:.1f}" for x in result["load"]) + ").",
        "",
        f"{result['tasks']:,} finished tasks loaded in {result['loaded_s']:.0f} s "
        "(plus 1,100 waiting); each queue's series holds 24 h of per-minute samples "
        "(written before the baseline, as a day of sampling leaves them).",
        "",
        "| call | p50 ms | p95 ms | max ms | requests | items | budget (p95) |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for name, row in result["rows"].items():
        budget = BUDGETS.get(name)
        mark = (
            "-"
            if budget is None
            else f"<= {budget:.0f} ms: " + ("met" if row["p95_ms"] <= budget else "**missed**")
        )
        label = name if row["calls"] == 1 else f"{name} ({row['calls']} calls, summed)"
        lines.append(
            f"| {label} | {row['p50_ms']:.1f} | {row['p95_ms']:.1f} | {row['max_ms']:.1f} | "
            f"{row['n']} | {row['items']:.0f} | {mark} |"
        )
    (bk, bm), (pk, pm), (ek, em) = m["base"], m["peak"], m["end"]
    lines += [
        "",
        "The first screen is `/queues`, `/queues/{q}/series?minutes=60` for each queue, "
        "`/workers` and `/tasks?limit=50`, one after another (a page would send them at "
        "once: this is the slower bound). `items`: the mean length of each answer's list.",
        "",
        "## Memory",
        "",
        "| | DBSIZE | used_memory |",
        "|---|---:|---:|",
        f"| baseline (after the warm-up's tasks expired) | {bk:,} | {bm / 2**20:.1f} MiB |",
        f"| loaded | {pk:,} | {pm / 2**20:.1f} MiB |",
        f"| after retention ({result['expired_s']:.0f} s of reaper sweeps) | {ek:,} | "
        f"{em / 2**20:.1f} MiB |",
        "",
        f"After retention: {ek - bk:+,} keys and {(em - bm) / 2**10:+,.0f} KiB against the "
        "baseline.",
    ]
    missed = verdicts(result)
    lines += ["", "Budgets: " + ("all met." if not missed else "missed: " + "; ".join(missed))]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.dashboard", description=__doc__.splitlines()[0]
    )
    p.add_argument("--url", help="Redis URL (default: start a loopback redis-server)")
    p.add_argument("--tasks", type=int, default=100_000)
    p.add_argument("--requests", type=int, default=40, help="requests per call (>= 40)")
    p.add_argument("--retention-s", type=float, default=300.0)
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "dashboard-latest.md"))
    a = p.parse_args(argv)
    stop: Callable[[], None] = lambda: None  # noqa: E731
    url = a.url
    if url is None:
        from bench.redis_server import RedisServer

        server = RedisServer()
        server.start()
        url, stop = server.url, server.stop
    try:
        result = run(url, tasks=a.tasks, requests=a.requests, retention_s=a.retention_s)
        r = redis.Redis.from_url(url)
        version = str(r.info("server")["redis_version"])
        r.close()
    finally:
        stop()
    text = report(result, version)
    Path(a.out).write_text(text, encoding="utf-8")
    print(text)
    return 1 if verdicts(result) else 0


if __name__ == "__main__":
    sys.exit(main())
