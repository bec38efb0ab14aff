"""Deadlines: time out RUNNING attempts past their execution deadline (even when their
worker hangs) and expire tasks that waited too long for a worker.

Both live in the ``deadlines`` zset (see ``rsjobs.store.keys``); ``deadline.lua``
re-checks each due member against its task and Redis TIME, and re-scores the ones not due
yet, so every batch makes progress.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence

from ..store import DeadlineOutcome, Store, Suspect
from ..store.isolation import each_alone
from ..store.reaper import Candidate
from .config import ReaperConfig
from .quarantine import isolate

__all__ = ["enforce_deadlines"]

log = logging.getLogger("rsjobs.reaper")


async def enforce_deadlines(store: Store, cfg: ReaperConfig, now_ms: int) -> Counter[str]:
    """Handle the members of the deadlines zset due by ``now_ms`` (Redis TIME). Members
    whose task makes the script fail are isolated (QUARANTINED / ERRORS, see quarantine);
    those left in place are not fetched again in this sweep."""
    reaper = store.reaper
    counts: Counter[str] = Counter()
    suspects: list[Suspect] = []
    skip: set[str] = set()

    async def call(part: Sequence[tuple[Candidate, str | None]]) -> list[DeadlineOutcome]:
        return await reaper.deadline(cfg.deadline_grace_ms, part)

    for _ in range(cfg.max_batches):
        fetched = await reaper.due_deadlines(now_ms, cfg.batch + len(skip))
        due = [c for c in fetched if c.member not in skip][: cfg.batch]
        if not due:
            break
        items = []
        for c, screened in zip(due, await reaper.screen([c.task_id for c in due]), strict=True):
            if screened.intact:
                items.append((c, screened.dedup))
            else:
                suspects.append(Suspect(c.task_id, c.queue, "deadlines", c.member, None))
                skip.add(c.member)
        if items:
            done = await each_alone(call, items, log, "deadline batch")
            for replies in done.replies:
                counts.update(w.value for w in replies)
            for (c, _), exc in done.failed:
                suspects.append(Suspect(c.task_id, c.queue, "deadlines", c.member, exc))
                skip.add(c.member)
        if len(due) < cfg.batch:
            break
    if suspects:
        counts["QUARANTINED"], counts["ERRORS"] = await isolate(store, cfg, "deadlines", suspects)
    return counts
