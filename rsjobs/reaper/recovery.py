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

from ..store import Recovery, Store, Suspect
from ..store.isolation import about_item, each_alone
from ..store.keys import level_name
from ..store.layout import ReclaimArgs
from .config import ReaperConfig
from .quarantine import isolate, log_error

__all__ = ["recover", "recover_queue"]

log = logging.getLogger("rsjobs.reaper")


async def recover_queue(store: Store, queue: str, cfg: ReaperConfig) -> Counter[str]:
    """Recover the idle deliveries of one queue; returns how many per outcome (plus
    QUARANTINED and ERRORS: entries whose task made the script fail, see quarantine)."""
    reaper = store.reaper
    counts: Counter[str] = Counter()
    suspects: list[Suspect] = []
    start = "-"
    args = ReclaimArgs(
        cfg.idle_ms, cfg.max_deliveries, cfg.dead_after_leases, cfg.lease_ms, cfg.deadletter_maxlen
    )

    async def call(part: Sequence[tuple[str, str, str | None]]) -> list[Recovery]:
        return await reaper.reclaim(queue, args, part)

    for _ in range(cfg.max_batches):
        page = await reaper.idle_deliveries(queue, start, cfg.batch, cfg.idle_ms)
        if not page:  # None: no worker ever read this queue
            break
        # entries held for a limit (~waiting) belong to no worker: passed over
        entries = [e for e in page if not e.startswith("~")]
        if not entries:
            if len(page) < cfg.batch:
                break
            start = "(" + page[-1].lstrip("~")
            continue
        ids = await reaper.entry_tasks(queue, entries)
        items = []
        for e, tid, screened in zip(entries, ids, await reaper.screen(ids), strict=True):
            if screened.intact:
                items.append((e, tid, screened.dedup))
            else:
                suspects.append(Suspect(tid, queue, "queue", e, None))
        if items:
            done = await each_alone(call, items, log, f"reclaim on {queue}")
            for replies in done.replies:
                counts.update(w.value for w in replies)
            suspects += [Suspect(t, queue, "queue", e, exc) for (e, t, _), exc in done.failed]
        if len(page) < cfg.batch:
            break
        start = "(" + page[-1].lstrip("~")
    if suspects:
        counts["QUARANTINED"], counts["ERRORS"] = await isolate(store, cfg, "recovery", suspects)
    return counts


async def recover(store: Store, queues: list[str], cfg: ReaperConfig) -> Counter[str]:
    """Recover every queue's idle deliveries (each priority level's stream); outcome counts
    summed over the queues. A queue whose recovery fails on its data (e.g. its key is not
    a stream) is logged and counted in ERRORS; the other queues go on."""
    total: Counter[str] = Counter()
    levels = await store.index.levels(queues)
    for name in [level_name(q, p) for q in queues for p in levels[q]]:
        try:
            total.update(await recover_queue(store, name, cfg))
        except Exception as exc:
            if not about_item(exc):
                raise
            log_error("recovery", exc, queue=name)
            total["ERRORS"] += 1
    return total
