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

import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

from redis.exceptions import ResponseError

from ..isolation import about_item, each_alone
from ..keys import GROUP
from .calls import ReaperScripts
from .config import ReaperConfig
from .quarantine import Suspect, isolate, log_error

__all__ = ["RECOVERY_OUTCOMES", "recover", "recover_queue"]

log = logging.getLogger("rsjobs.reaper")

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
    """Recover the idle deliveries of one queue; returns how many per outcome (plus
    QUARANTINED and ERRORS: entries whose task made the script fail, see quarantine)."""
    qkey = rs.keys.queue(queue)
    counts: Counter[str] = Counter()
    suspects: list[Suspect] = []
    start = "-"
    argv_head = [cfg.idle_ms, cfg.max_deliveries, cfg.dead_after_leases, cfg.lease_ms]
    argv_head.append(cfg.deadletter_maxlen)
    extra = [rs.keys.deadletter, rs.keys.workers]

    async def call(part: Sequence[tuple[str, str, str | None]]) -> list[Any]:
        tasks = [rs.task_keys(tid, queue, d) for _, tid, d in part]
        argv = [*argv_head, *(e for e, _, _ in part)]
        replies: list[Any] = await rs.call("reclaim", tasks, argv, extra_keys=extra)
        return replies

    for _ in range(cfg.max_batches):
        try:
            rows = await rs.redis.xpending_range(
                qkey, GROUP, min=start, max="+", count=cfg.batch, idle=cfg.idle_ms
            )
        except ResponseError as exc:
            if "NOGROUP" in str(exc):  # no worker ever read this queue
                break
            raise
        if not rows:
            break
        entries = [str(r["message_id"]) for r in rows]
        ids = await _task_ids(rs, qkey, entries)
        items = []
        for e, tid, (dedup, intact) in zip(entries, ids, await rs.screen(ids), strict=True):
            if intact:
                items.append((e, tid, dedup))
            else:
                suspects.append(Suspect(tid, queue, "queue", e, None))
        if items:
            done = await each_alone(call, items, log, f"reclaim on {queue}")
            for replies in done.replies:
                counts.update(str(w) for w in replies)
            suspects += [Suspect(t, queue, "queue", e, exc) for (e, t, _), exc in done.failed]
        if len(rows) < cfg.batch:
            break
        start = "(" + entries[-1]
    if suspects:
        counts["QUARANTINED"], counts["ERRORS"] = await isolate(rs, cfg, "recovery", suspects)
    return counts


async def recover(rs: ReaperScripts, queues: list[str], cfg: ReaperConfig) -> Counter[str]:
    """Recover every queue's idle deliveries; outcome counts summed over the queues. A
    queue whose recovery fails on its data (e.g. its key is not a stream) is logged and
    counted in ERRORS; the other queues go on."""
    total: Counter[str] = Counter()
    for q in queues:
        try:
            total.update(await recover_queue(rs, q, cfg))
        except Exception as exc:
            if not about_item(exc):
                raise
            log_error("recovery", exc, queue=q)
            total["ERRORS"] += 1
    return total
