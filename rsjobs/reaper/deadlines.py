"""Deadlines: time out RUNNING attempts past their execution deadline (even when their
worker hangs) and expire tasks that waited too long for a worker.

Both live in the ``deadlines`` zset (see ``rsjobs.keys``); ``deadline.lua`` re-checks
each due member against its task and Redis TIME, and re-scores the ones not due yet, so
every batch makes progress.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from ..keys import split_member
from .calls import ReaperScripts
from .config import ReaperConfig

__all__ = ["DEADLINE_OUTCOMES", "enforce_deadlines"]

#: the words deadline.lua answers per member (see its header)
DEADLINE_OUTCOMES = ("RETRY", "TIMED_OUT", "EXPIRED", "LATER", "STALE")


async def enforce_deadlines(rs: ReaperScripts, cfg: ReaperConfig, now_ms: int) -> Counter[str]:
    """Handle the members of the deadlines zset due by ``now_ms`` (Redis TIME)."""
    counts: Counter[str] = Counter()
    for _ in range(cfg.max_batches):
        members: list[str] = await rs.redis.zrangebyscore(
            rs.keys.deadlines, "-inf", now_ms, start=0, num=cfg.batch
        )
        if not members:
            break
        pairs = [split_member(m) for m in members]
        dedups = await rs.dedup_keys([tid for _, tid in pairs])
        tasks = [rs.task_keys(tid, q, d) for (q, tid), d in zip(pairs, dedups, strict=True)]
        argv: list[Any] = [cfg.deadline_grace_ms]
        for m in members:
            argv += (m, random.random())
        replies = await rs.call("deadline", tasks, argv)
        counts.update(str(w) for w in replies)
        if len(members) < cfg.batch:
            break
    return counts
