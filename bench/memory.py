"""Redis memory per waiting and per finished rsjobs task, on a given Redis, for a given
workload: ``await measure(url, Workload(...))``. Meant to be imported (a test can fail
when the footprint grows) and runnable: ``python -m bench.memory [--url URL] [--tasks N]``
(without ``--url`` it starts its own loopback Redis, as the benchmark does).

It drives rsjobs only through its public API (``Client``, ``Worker``, ``Registry``,
``Settings``) and measures the same way as the benchmark's ``memory`` experiment
(bench/README.md, "Memory per task"):

1. warm-up: one task runs through its whole life on an in-process ``Worker``, which is
   then stopped, so that every structure rsjobs creates once (queue stream and consumer
   group, stats, queue registration, the events stream's first node) is in the baseline;
2. baseline, then ``tasks`` tasks are enqueued with no worker running: *waiting*;
3. a worker drains them; once no task is unfinished: *finished* (nothing has expired:
   the retention period must be longer than the run, which the default 7 days is).

Each figure is Δ stored memory (``used_memory`` less client buffers and the script
cache) / tasks, from settled snapshots. The namespace must be empty and nothing else
should write to that Redis meanwhile (a test's flushed database is fine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from redis.asyncio import Redis

from bench import keyspace, redis_stats
from bench.keyspace import KeyGroup, Released
from rsjobs import Client, Context, EnqueueRequest, Registry, Settings, State, Worker, connect

TASK_TYPE = "noop"
_UNFINISHED = (State.PENDING, State.SCHEDULED, State.RUNNING, State.PAUSED)

registry = Registry()


@registry.handler(TASK_TYPE)
async def noop(ctx: Context, payload: Any) -> None:
    """The workload's handler does nothing: what is measured is what rsjobs keeps."""


def small_payload(i: int) -> Any:
    """The benchmark's payload: ``{"i": i}``."""
    return {"i": i}


@dataclass(frozen=True)
class Workload:
    """What is enqueued, and how."""

    tasks: int = 10_000
    #: payload of task ``i``
    payload: Callable[[int], Any] = small_payload
    #: ``Client.enqueue_many`` (1,000 per call) rather than one ``Client.enqueue`` each
    bulk: bool = True
    #: submit every task with a dedup key of its own (``memory-<i>``)
    dedup_keys: bool = False
    queue: str = "memory"
    concurrency: int = 32
    #: the namespace (must hold no task yet) and the retention, among others
    settings: Settings = field(default_factory=lambda: Settings(namespace="memory"))


@dataclass(frozen=True)
class Footprint:
    """Bytes per task, and where they are (growth by key pattern, bench.keyspace)."""

    tasks: int
    waiting_bytes_per_task: float
    finished_bytes_per_task: float
    #: growth from the baseline by key pattern, MEMORY USAGE bytes (all tasks, not per task)
    waiting_keys: list[KeyGroup]
    finished_keys: list[KeyGroup]
    #: per-task key patterns deleted after the run and what that freed (``release=True``)
    released: list[Released]
    #: server version and the encoding settings that shape the figures
    redis: dict[str, str]

    def per_task(self, group: KeyGroup | Released) -> float:
        size = group.bytes if isinstance(group, KeyGroup) else group.freed_bytes
        return size / self.tasks

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class FootprintError(RuntimeError):
    """Raised when the workload did not run as it should (a task did not succeed, or the
    worker did not drain the queue in time): the figures would not mean anything."""


_CONFIG = ("stream-node-max-bytes", "stream-node-max-entries", "hash-max-*", "zset-max-*")


async def _redis_facts(r: Redis) -> dict[str, str]:
    facts = {"version": str((await r.info("server"))["redis_version"])}
    for pattern in _CONFIG:
        raw = await r.config_get(pattern)
        facts.update({_text(k): _text(v) for k, v in raw.items()})
    return facts


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def _unfinished(client: Client, queue: str) -> int:
    stats = (await client.stats()).get(queue, {})
    return sum(stats.get(s, 0) for s in _UNFINISHED)


async def _drain(client: Client, workload: Workload, url: str, timeout_s: float) -> None:
    """Run an in-process worker until no task of the queue is unfinished, then stop it."""
    worker = Worker(
        registry,
        url=url,
        settings=workload.settings,
        queues=[workload.queue],
        concurrency=workload.concurrency,
        handle_signals=False,
    )
    running = asyncio.create_task(worker.run())
    deadline = time.monotonic() + timeout_s
    try:
        while await _unfinished(client, workload.queue):
            if running.done():
                running.result()  # the worker's own error, if it had one
                raise FootprintError("the worker stopped before the queue was drained")
            if time.monotonic() > deadline:
                raise FootprintError(f"tasks still unfinished after {timeout_s:.0f} s")
            await asyncio.sleep(0.01)
    finally:
        worker.stop()
        await running
        await worker.redis.aclose()  # a Worker given a URL leaves its client to its owner


async def _enqueue(client: Client, workload: Workload) -> list[str]:
    def request(i: int) -> EnqueueRequest:
        dedup = f"memory-{i}" if workload.dedup_keys else None
        return EnqueueRequest(
            type=TASK_TYPE, payload=workload.payload(i), queue=workload.queue, dedup_key=dedup
        )

    ids: list[str] = []
    if workload.bulk:
        for start in range(0, workload.tasks, 1000):
            stop = min(start + 1000, workload.tasks)
            ids += await client.enqueue_many([request(i) for i in range(start, stop)])
    else:
        for i in range(workload.tasks):
            r = request(i)
            ids.append(
                await client.enqueue(r.type, r.payload, queue=r.queue, dedup_key=r.dedup_key)
            )
    return ids


async def _check_succeeded(client: Client, ids: list[str]) -> None:
    states: dict[str, int] = {}
    for start in range(0, len(ids), 1000):
        for info in await client.get_many(ids[start : start + 1000]):
            state = "missing" if info is None else str(info.state)
            states[state] = states.get(state, 0) + 1
    if states != {State.SUCCEEDED: len(ids)}:
        raise FootprintError(f"expected {len(ids)} SUCCEEDED tasks, found {states}")


async def measure(
    url: str,
    workload: Workload | None = None,
    *,
    release: bool = False,
    timeout_s: float = 120.0,
) -> Footprint:
    """Bytes per waiting and per finished task of ``workload`` on the Redis at ``url``.

    ``release``: afterwards, delete the per-task keys pattern by pattern and measure what
    each gave back (exact, unlike MEMORY USAGE for streams); the tasks are gone then.
    Raises :class:`FootprintError` if a task did not succeed.
    """
    workload = workload or Workload()
    if workload.tasks < 1:
        raise ValueError("a workload needs at least one task")
    raw = Redis.from_url(url)
    client = Client(connect(url), workload.settings)
    try:
        facts = await _redis_facts(raw)
        warm = await client.enqueue(TASK_TYPE, workload.payload(-1), queue=workload.queue)
        await _drain(client, workload, url, timeout_s)
        base = await redis_stats.settled(raw)
        base_keys = await keyspace.groups(raw)

        ids = await _enqueue(client, workload)
        waiting = await redis_stats.settled(raw)
        waiting_keys = await keyspace.groups(raw)

        await _drain(client, workload, url, timeout_s)
        finished = await redis_stats.settled(raw)
        finished_keys = await keyspace.groups(raw)
        await _check_succeeded(client, [warm, *ids])

        finished_growth = keyspace.growth(base_keys, finished_keys)
        released: list[Released] = []
        if release:
            per_task = [g.pattern for g in finished_growth if g.keys >= workload.tasks // 2]
            released = await keyspace.release(raw, per_task)
    finally:
        await client.close()
        await raw.aclose()
    n = workload.tasks
    return Footprint(
        tasks=n,
        waiting_bytes_per_task=(waiting.stored_memory - base.stored_memory) / n,
        finished_bytes_per_task=(finished.stored_memory - base.stored_memory) / n,
        waiting_keys=keyspace.growth(base_keys, waiting_keys),
        finished_keys=finished_growth,
        released=released,
        redis=facts,
    )


def _print(fp: Footprint) -> None:
    print(f"Redis {fp.redis['version']}, {fp.tasks:,} tasks")
    print(f"  waiting:  {fp.waiting_bytes_per_task:8,.0f} B/task")
    for g in fp.waiting_keys:
        print(f"    {fp.per_task(g):8,.0f}  {g.pattern} ({g.type}, MEMORY USAGE)")
    print(f"  finished: {fp.finished_bytes_per_task:8,.0f} B/task")
    for g in fp.finished_keys:
        print(f"    {fp.per_task(g):8,.0f}  {g.pattern} ({g.type}, MEMORY USAGE)")
    for r in fp.released:
        print(f"    {fp.per_task(r):8,.0f}  {r.pattern} (freed when deleted)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__)
    p.add_argument("--url", help="Redis URL (default: start a loopback redis-server)")
    p.add_argument("--tasks", type=int, default=10_000)
    p.add_argument("--one-by-one", action="store_true", help="Client.enqueue, not enqueue_many")
    p.add_argument("--dedup-keys", action="store_true", help="a dedup key per task")
    p.add_argument(
        "--traced",
        action="store_true",
        help="submit with OpenTelemetry tracing on (an SDK tracer provider: every task "
        "stores its submit's trace context; needs the otel extra)",
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.tasks < 1:
        p.error("--tasks must be positive")
    if args.traced:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider

        # spans are recorded (and dropped: no exporter); what is measured is the task
        trace.set_tracer_provider(TracerProvider())
    workload = Workload(tasks=args.tasks, bulk=not args.one_by_one, dedup_keys=args.dedup_keys)
    if args.url is not None:
        fp = asyncio.run(measure(args.url, workload, release=True))
    else:
        from bench.redis_server import RedisServer

        server = RedisServer()
        server.start()
        try:
            fp = asyncio.run(measure(server.url, workload, release=True))
        finally:
            server.stop()
    if args.json:
        print(json.dumps(fp.as_dict(), indent=1))
    else:
        _print(fp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
