"""Deadlines: time out RUNNING attempts past their execution deadline (even when their
worker hangs) and expire tasks that waited too long for a worker.

Both live in the ``deadlines`` zset (see ``rsjobs.keys``); ``deadline.lua`` re-checks
each due member against its task and Redis TIME, and re-scores the ones not due yet, so
every batch makes progress.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..isolation import each_alone
from ..keys import split_member
from .calls import ReaperScripts
from .config import ReaperConfig
from .quarantine import Suspect, isolate

__all__ = ["DEADLINE_OUTCOMES", "enforce_deadlines"]

log = logging.getLogger("rsjobs.reaper")

#: the words deadline.lua answers per member (see its header)
DEADLINE_OUTCOMES = ("RETRY", "TIMED_OUT", "EXPIRED", "LATER", "STALE")


async def enforce_deadlines(rs: ReaperScripts, cfg: ReaperConfig, now_ms: int) -> Counter[str]:
    """Handle the members of the deadlines zset due by ``now_ms`` (Redis TIME). Members
    whose task makes the script fail are isolated (QUARANTINED / ERRORS, see quarantine);
    those left in place are not fetched again in this sweep."""
    counts: Counter[str] = Counter()
    suspects: list[Suspect] = []
    skip: set[str] = set()

    async def call(part: Sequence[tuple[str, str, str, str | None]]) -> list[Any]:
        tasks = [rs.task_keys(tid, q, d) for _, q, tid, d in part]
        argv: list[Any] = [cfg.deadline_grace_ms]
        for m, _, _, _ in part:
            argv += (m, random.random())
        replies: list[Any] = await rs.call("deadline", tasks, argv)
        return replies

    for _ in range(cfg.max_batches):
        fetched: list[str] = await rs.redis.zrangebyscore(
            rs.keys.deadlines, "-inf", now_ms, start=0, num=cfg.batch + len(skip)
        )
        members = [m for m in fetched if m not in skip][: cfg.batch]
        if not members:
            break
        pairs = [split_member(m) for m in members]
        screened = await rs.screen([tid for _, tid in pairs])
        items = []
        for m, (q, tid), (dedup, intact) in zip(members, pairs, screened, strict=True):
            if intact:
                items.append((m, q, tid, dedup))
            else:
                suspects.append(Suspect(tid, q, "deadlines", m, None))
                skip.add(m)
        if items:
            done = await each_alone(call, items, log, "deadline batch")
            for replies in done.replies:
                counts.update(str(w) for w in replies)
            for (m, q, tid, _), exc in done.failed:
                suspects.append(Suspect(tid, q, "deadlines", m, exc))
                skip.add(m)
        if len(members) < cfg.batch:
            break
    if suspects:
        counts["QUARANTINED"], counts["ERRORS"] = await isolate(rs, cfg, "deadlines", suspects)
    return counts
