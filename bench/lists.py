"""Task lists at scale: with ``--tasks`` finished tasks (100,000 by default) in Redis, how
long a page of ``GET /tasks`` takes (p50 / p95 per kind of query, the app in-process over
httpx's ASGI transport, the JSON included) and how many Redis commands it sends.

    python -m bench.lists [--url URL] [--tasks 100000] [--pages 40] [--limit 50]

Without ``--url`` it starts its own loopback Redis (default configuration). The tasks are
made by the real scripts (enqueue, start, finish, control), in batches, as workers and
clients would make them: three queues (gpu 50 %, cpu 35 %, io 15 %), 80 % SUCCEEDED,
15 % FAILED, 5 % CANCELLED; every task has an owner (500 owners) and half of them two
labels (``user``: 1,000 values, ``character``: 50); 1,000 tasks wait (PENDING, queue idle)
and 100 are SCHEDULED. Each kind of query walks its list page by page (starting over at its end) for
``--pages`` pages. :func:`fill` is what the suite's bounded test uses too.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import redis

from rsjobs.labels import encode_labels
from rsjobs.settings import Settings
from rsjobs.store import layout
from rsjobs.store.keys import GROUP, Keys
from rsjobs.store.layout import ControlArgs, Ending, Entry, NewTask, StartArgs, task_options
from rsjobs.store.marker import LAYOUT
from rsjobs.store.scripts import script_source

QUEUES = (("gpu", 0.50), ("cpu", 0.35), ("io", 0.15))
NAMESPACE = "lists"
TOKEN = "bench-admin"

#: kind of query -> its parameters of GET /tasks
QUERIES: dict[str, dict[str, str]] = {
    "everything": {},
    "state": {"state": "SUCCEEDED"},
    "state+queue": {"state": "FAILED", "queue": "gpu"},
    "state+queue (rare)": {"state": "CANCELLED", "queue": "io"},
    "label": {"label": "user=u_7"},
    "label (common)": {"label": "character=c_3"},
    "owner": {"owner": "user-7"},
    "owner+state": {"owner": "user-7", "state": "FAILED"},
    "pending": {"state": "PENDING"},
}


def _run(r: redis.Redis, shas: dict[str, str], call: layout.Packed) -> Any:
    return r.evalsha(shas[call.script], len(call.keys), *call.keys, *call.argv)


def fill(
    url: str, n: int, *, settings: Settings | None = None, seed: int = 7, live: bool = True
) -> None:
    """``n`` finished tasks (and, with ``live``, 1,000 PENDING and 100 SCHEDULED ones) in
    the namespace of ``settings``, made by the real scripts (see the module)."""
    settings = settings or Settings(namespace=NAMESPACE)
    rnd = random.Random(seed)
    r = redis.Redis.from_url(url, decode_responses=True)
    try:
        shas = {
            s: r.script_load(script_source(s))
            for s in ("marker", "enqueue", "start", "finish", "control")
        }
        k = Keys(settings.namespace)
        c = layout.Common.of(k, settings.events_maxlen, settings.retention_ms)
        # marked first, as a store marks a namespace without data: the web app then reads it
        _run(r, shas, layout.marker(c, k, "api", LAYOUT))
        r.sadd(k.queues, *(q for q, _ in QUEUES))
        for q, _ in QUEUES:
            try:
                r.xgroup_create(k.queue(q), GROUP, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
        done = 0
        serial = 0
        while done < n:
            batch = min(250, n - done)
            by_queue: dict[str, list[tuple[str, str]]] = {}
            tasks = []
            for _ in range(batch):
                serial += 1
                q = rnd.choices([q for q, _ in QUEUES], [w for _, w in QUEUES])[0]
                tid = uuid.UUID(int=rnd.getrandbits(128)).hex
                labels = None
                if serial % 2:
                    labels = {
                        "user": f"u_{rnd.randrange(1000)}",
                        "character": f"c_{rnd.randrange(50)}",
                    }
                opts = task_options(
                    max_attempts=1, backoff_base_ms=1000, backoff_max_ms=300_000,
                    owner=f"user-{rnd.randrange(500)}", labels=encode_labels(labels),
                )  # fmt: skip
                tasks.append((k.task_keys(tid, q), NewTask(tid, "render", q, '{"i":1}', opts)))
                end = rnd.choices(("COMPLETE", "FAIL", "CANCEL"), (0.80, 0.15, 0.05))[0]
                by_queue.setdefault(q, []).append((tid, end))
            _run(r, shas, layout.enqueue(c, "api", tasks))
            for q, items in by_queue.items():
                for tid, end in items:
                    if end == "CANCEL":
                        args = ControlArgs("CANCEL", "bench", k.control)
                        _run(r, shas, layout.control(c, k, "api", k.task_keys(tid, q), args))
                rows = r.xreadgroup(GROUP, "bench", {k.queue(q): ">"}, count=batch)
                entries = rows[0][1] if rows else []
                if not entries:
                    continue
                items_ = [(k.task_keys(f["id"], q), Entry(eid)) for eid, f in entries]
                started = _run(
                    r, shas, layout.start(c, k, "worker", StartArgs("bench", 60000, "n", q), items_)
                )
                ending = dict(items)
                ends = []
                for (_, f), s in zip(entries, started, strict=True):
                    if s[0] != 1:
                        continue
                    ev = ending[f["id"]]
                    ends.append(
                        (
                            k.task_keys(f["id"], q),
                            Ending(
                                ev,
                                s[5],
                                "null" if ev == "COMPLETE" else "boom",
                                "" if ev == "COMPLETE" else "E",
                                0,
                                -1,
                                0.5,
                            ),
                        )
                    )
                if ends:
                    _run(r, shas, layout.finish(c, k, "worker", ends))
            done += batch
        if live:
            # on a queue of their own, which no fill reads (a later fill must not start them)
            r.sadd(k.queues, "idle")
            for i in range(11):
                delay = 60_000 if i == 10 else 0
                tasks = []
                for _ in range(100):
                    tid = uuid.UUID(int=rnd.getrandbits(128)).hex
                    opts = task_options(
                        max_attempts=3, backoff_base_ms=1000, backoff_max_ms=300_000,
                        delay_ms=delay,
                    )  # fmt: skip
                    tasks.append(
                        (k.task_keys(tid, "idle"), NewTask(tid, "render", "idle", "{}", opts))
                    )
                _run(r, shas, layout.enqueue(c, "api", tasks))
    finally:
        r.close()


def commands(r: redis.Redis) -> int:
    """Commands Redis has run so far (INFO commandstats), less the INFO calls themselves."""
    stats = r.info("commandstats")
    return sum(int(v["calls"]) for name, v in stats.items() if name != "cmdstat_info")


async def measure(
    url: str,
    *,
    pages: int,
    limit: int,
    queries: dict[str, dict[str, str]] = QUERIES,
    namespace: str = NAMESPACE,
) -> dict[str, dict[str, float]]:
    """Per kind of query: p50 and p95 ms per page, the mean tasks and commands per page."""
    from rsjobs.web import create_app

    app = create_app(url, namespace=namespace, admin_token=TOKEN, env={})
    r = redis.Redis.from_url(url, decode_responses=True)
    out: dict[str, dict[str, float]] = {}
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as http:
            await http.get("/tasks", params={"limit": 1}, headers=headers)  # connections, scripts
            for kind, params in queries.items():
                times: list[float] = []
                sizes: list[int] = []
                cursor = None
                before = commands(r)
                for _ in range(pages):
                    q = {**params, "limit": str(limit), **({"cursor": cursor} if cursor else {})}
                    t0 = time.perf_counter()
                    resp = await http.get("/tasks", params=q, headers=headers)
                    times.append((time.perf_counter() - t0) * 1000)
                    if resp.status_code != 200:
                        raise SystemExit(f"bench.lists: {kind}: {resp.status_code} {resp.text}")
                    body = resp.json()
                    sizes.append(len(body["items"]))
                    cursor = body["cursor"]
                used = commands(r) - before
                times.sort()
                out[kind] = {
                    "p50_ms": statistics.median(times),
                    "p95_ms": times[max(0, round(0.95 * len(times)) - 1)],
                    "tasks_per_page": statistics.mean(sizes),
                    "commands_per_page": used / pages,
                }
    finally:
        await app.state.rsjobs.aclose()
        r.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.lists", description=__doc__.splitlines()[0])
    p.add_argument("--url", help="Redis URL (default: start a loopback redis-server)")
    p.add_argument("--tasks", type=int, default=100_000)
    p.add_argument("--pages", type=int, default=40)
    p.add_argument("--limit", type=int, default=50)
    a = p.parse_args(argv)
    stop: Callable[[], None] = lambda: None  # noqa: E731
    url = a.url
    if url is None:
        from bench.redis_server import RedisServer

        server = RedisServer()
        server.start()
        url, stop = server.url, server.stop
    try:
        t0 = time.perf_counter()
        fill(url, a.tasks)
        filled = time.perf_counter() - t0
        r = redis.Redis.from_url(url)
        version = r.info("server")["redis_version"]
        used = r.info("memory")["used_memory"]
        r.close()
        rows = asyncio.run(measure(url, pages=a.pages, limit=a.limit))
    finally:
        stop()
    print(
        f"Redis {version}; {a.tasks:,} finished tasks (+1,100 waiting; made in {filled:.0f} s, "
        f"used_memory {used / 2**20:.0f} MiB); GET /tasks?limit={a.limit}, "
        f"{a.pages} pages per kind"
    )
    print(f"| {'query':22s} | p50 ms | p95 ms | tasks/page | commands/page |")
    print(f"|{'-' * 24}|-------:|-------:|-----------:|--------------:|")
    for kind, m in rows.items():
        print(f"| {kind:22s} | {m['p50_ms']:6.1f} | {m['p95_ms']:6.1f} | "
              f"{m['tasks_per_page']:10.1f} | {m['commands_per_page']:13.1f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
