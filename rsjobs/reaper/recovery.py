"""Recovery: take back the idle deliveries of consumers that are gone.

A worker's heartbeat renews its lease and resets its entry's idle time in one step
(``heartbeat.lua``), so an entry idle for longer than the lease belongs to a dead (or
frozen) worker. The pending list of each queue's group is scanned with
``XPENDING ... IDLE <min idle>``, which, unlike XAUTOCLAIM, changes nothing: it reports
each candidate's consumer and delivery count without moving it or counting a delivery to
the reaper. ``reclaim.lua`` then re-checks every candidate (still pending and idle, task
lease expired by Redis TIME, or consumer unregistered) before it recovers it, so a
healthy task is never taken and two reapers never recover the same delivery twice.
"""

from __future__ import annotations

from collections import Counter

from redis.exceptions import ResponseError

from ..keys import GROUP
from .calls import ReaperScripts
from .config import ReaperConfig

__all__ = ["RECOVERY_OUTCOMES", "recover", "recover_queue"]

#: the words reclaim.lua answers per entry (see its header)
RECOVERY_OUTCOMES = ("RETRIED", "FAILED", "DEADLETTERED", "REDELIVERED", "ALIVE", "BUSY", "STALE")


async def _task_ids(rs: ReaperScripts, qkey: str, entries: list[str]) -> list[str]:
    """The task id each entry carries ('' when the entry is gone from the stream)."""
    async with rs.redis.pipeline(transaction=False) as pipe:
        for e in entries:
            pipe.xrange(qkey, e, e, count=1)
        rows = await pipe.execute()
    return [r[0][1].get("id", "") if r else "" for r in rows]


async def recover_queue(rs: ReaperScripts, queue: str, cfg: ReaperConfig) -> Counter[str]:
    """Recover the idle deliveries of one queue; returns how many per outcome."""
    qkey = rs.keys.queue(queue)
    counts: Counter[str] = Counter()
    start = "-"
    for _ in range(cfg.max_batches):
        try:
            rows = await rs.redis.xpending_range(
                qkey, GROUP, min=start, max="+", count=cfg.batch, idle=cfg.idle_ms
            )
        except ResponseError as exc:
            if "NOGROUP" in str(exc):  # no worker ever read this queue
                return counts
            raise
        if not rows:
            break
        entries = [str(r["message_id"]) for r in rows]
        ids = await _task_ids(rs, qkey, entries)
        dedups = await rs.dedup_keys(ids)
        tasks = [rs.task_keys(tid, queue, d) for tid, d in zip(ids, dedups, strict=True)]
        argv = [
            cfg.idle_ms,
            cfg.max_deliveries,
            cfg.dead_after_leases,
            cfg.lease_ms,
            cfg.deadletter_maxlen,
            *entries,
        ]
        replies = await rs.call(
            "reclaim", tasks, argv, extra_keys=[rs.keys.deadletter, rs.keys.workers]
        )
        counts.update(str(w) for w in replies)
        if len(rows) < cfg.batch:
            break
        start = "(" + entries[-1]
    return counts


async def recover(rs: ReaperScripts, queues: list[str], cfg: ReaperConfig) -> Counter[str]:
    """Recover every queue's idle deliveries; outcome counts summed over the queues."""
    total: Counter[str] = Counter()
    for q in queues:
        total.update(await recover_queue(rs, q, cfg))
    return total
