"""Memory use per queue, measured with MEMORY USAGE (no SCAN, no KEYS).

For each queue: the stream (live entries plus its group's pending list), and the task
hashes and histories of a sample of its tasks (those on the stream, and recent ones from
the events stream, finished or not). The estimate for live tasks is the sample's mean
times the live task count; finished tasks are kept for the retention period only and
are not counted (their number is not known without scanning).
"""

from __future__ import annotations

from typing import Any

import msgspec
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from ..model import TERMINAL, State
from ..store.keys import GROUP, Keys

__all__ = ["MemoryReport", "QueueMemory", "memory_report"]

_LIVE = [s.value for s in State if s.value not in TERMINAL]


class QueueMemory(msgspec.Struct, frozen=True, kw_only=True):
    queue: str
    stream_bytes: int  #: MEMORY USAGE of the queue stream
    stream_length: int  #: XLEN: entries waiting or delivered and not yet acked
    pending: int  #: entries delivered and not yet acked (the group's PEL)
    live_tasks: int  #: tasks not in a terminal state (from the stats counters)
    sampled: int  #: task hashes measured
    task_bytes_avg: int  #: mean MEMORY USAGE of a sampled task hash
    history_bytes_avg: int  #: mean MEMORY USAGE of a sampled history stream
    live_bytes_est: int  #: live_tasks * (task + history mean) + stream_bytes


class MemoryReport(msgspec.Struct, frozen=True, kw_only=True):
    used_memory: int  #: INFO memory used_memory of the whole server
    used_memory_human: str
    namespace_keys: dict[str, int]  #: MEMORY USAGE of the namespace-wide keys
    queues: list[QueueMemory]


async def _usage(redis: Redis, names: list[str]) -> list[int]:
    async with redis.pipeline(transaction=False) as pipe:
        for n in names:
            pipe.memory_usage(n)
        rows = await pipe.execute()
    return [int(r or 0) for r in rows]


async def _sample_ids(redis: Redis, keys: Keys, queue: str, sample: int) -> list[str]:
    ids: list[str] = []
    for _, f in await redis.xrange(keys.queue(queue), "-", "+", count=sample):
        if f.get("id"):
            ids.append(f["id"])
    if len(ids) < sample:
        for _, f in await redis.xrevrange(keys.events, "+", "-", count=sample * 20):
            if f.get("q") == queue and f.get("id") and f["id"] not in ids:
                ids.append(f["id"])
                if len(ids) >= sample:
                    break
    return ids


async def memory_report(redis: Redis, keys: Keys, *, sample: int = 20) -> MemoryReport:
    """Memory of the namespace-wide keys and, per queue, its stream and sampled tasks."""
    queues = sorted(await redis.smembers(keys.queues))
    stats: dict[str, str] = await redis.hgetall(keys.stats)
    shared = {
        "events": keys.events,
        "stats": keys.stats,
        "scheduled": keys.scheduled,
        "deadlines": keys.deadlines,
        "workers": keys.workers,
        "deadletter": keys.deadletter,
        "workers:dead": keys.workers_dead,
        "queues": keys.queues,
    }
    shared_bytes = dict(zip(shared, await _usage(redis, list(shared.values())), strict=True))
    out: list[QueueMemory] = []
    for q in queues:
        qkey = keys.queue(q)
        (stream_bytes,) = await _usage(redis, [qkey])
        length = int(await redis.xlen(qkey))
        try:
            pending = int((await redis.xpending(qkey, GROUP))["pending"])
        except ResponseError:
            pending = 0
        live = sum(int(stats.get(f"{q}:{s}", 0)) for s in _LIVE)
        ids = await _sample_ids(redis, keys, q, sample)
        sizes = await _usage(redis, [k for i in ids for k in (keys.task(i), keys.history(i))])
        task_sizes = [s for s in sizes[0::2] if s]
        hist_sizes = [s for s in sizes[1::2] if s]
        t_avg = sum(task_sizes) // len(task_sizes) if task_sizes else 0
        h_avg = sum(hist_sizes) // len(hist_sizes) if hist_sizes else 0
        out.append(
            QueueMemory(
                queue=q,
                stream_bytes=stream_bytes,
                stream_length=length,
                pending=pending,
                live_tasks=live,
                sampled=len(task_sizes),
                task_bytes_avg=t_avg,
                history_bytes_avg=h_avg,
                live_bytes_est=live * (t_avg + h_avg) + stream_bytes,
            )
        )
    info: dict[str, Any] = await redis.info("memory")
    return MemoryReport(
        used_memory=int(info.get("used_memory", 0)),
        used_memory_human=str(info.get("used_memory_human", "")),
        namespace_keys=shared_bytes,
        queues=out,
    )
