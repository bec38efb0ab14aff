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

from ..model import TERMINAL, State
from ..store import Store

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
    #: mean MEMORY USAGE of a sampled task's history stream, which earlier releases wrote
    #: (0 once none is left: a task's history is in its hash, in task_bytes_avg)
    history_bytes_avg: int
    live_bytes_est: int  #: live_tasks * (task + history mean) + stream_bytes


class MemoryReport(msgspec.Struct, frozen=True, kw_only=True):
    used_memory: int  #: INFO memory used_memory of the whole server
    used_memory_human: str
    namespace_keys: dict[str, int]  #: MEMORY USAGE of the namespace-wide keys
    queues: list[QueueMemory]


async def memory_report(store: Store, *, sample: int = 20) -> MemoryReport:
    """Memory of the namespace-wide keys and, per queue, its stream and sampled tasks."""
    reaper, keys = store.reaper, store.keys
    queues = await reaper.queues()
    stats = await store.tasks.counters()
    shared = {
        "events": keys.events,
        "stats": keys.stats,
        "scheduled": keys.scheduled,
        "deadlines": keys.deadlines,
        "workers": keys.workers,
        "deadletter": keys.deadletter,
        "workers:dead": keys.workers_dead,
        "queues": keys.queues,
        "waiting": keys.waiting,
        "release": keys.release,
    }
    sizes_shared = await reaper.memory_usage(list(shared.values()))
    shared_bytes = dict(zip(shared, sizes_shared, strict=True))
    out: list[QueueMemory] = []
    for q in queues:
        (stream_bytes,) = await reaper.memory_usage([keys.queue(q)])
        length, pending = await reaper.queue_sizes(q)
        live = sum(stats.get(f"{q}:{s}", 0) for s in _LIVE)
        ids = await reaper.sample_tasks(q, sample)
        sizes = await reaper.memory_usage([k for i in ids for k in (keys.task(i), keys.history(i))])
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
    info: dict[str, Any] = await reaper.memory_info()
    return MemoryReport(
        used_memory=int(info.get("used_memory", 0)),
        used_memory_human=str(info.get("used_memory_human", "")),
        namespace_keys=shared_bytes,
        queues=out,
    )
