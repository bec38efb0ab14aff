"""Promotion: due SCHEDULED tasks (delays, retry backoff) back to their queues.

Workers promote too (``rsjobs.worker.promote_due``); the reaper's pass makes delayed work
run on time when no worker polls, and isolates a member whose task makes ``promote.lua``
fail (see :mod:`rsjobs.reaper.quarantine`), so one bad task cannot stop promotion.
Candidates come from the scheduled zset by this machine's clock (1 s of slack); the script
decides by Redis TIME.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence

from ..isolation import each_alone
from ..keys import split_member
from .calls import ReaperScripts
from .config import ReaperConfig
from .quarantine import Suspect, isolate

__all__ = ["promote"]

log = logging.getLogger("rsjobs.reaper")


async def promote(rs: ReaperScripts, cfg: ReaperConfig) -> Counter[str]:
    """Promote due SCHEDULED tasks; returns PROMOTED, QUARANTINED and ERRORS counts."""
    counts: Counter[str] = Counter()
    suspects: list[Suspect] = []
    skip: set[str] = set()

    async def call(members: Sequence[str]) -> int:
        tasks = [rs.task_keys(tid, q) for q, tid in map(split_member, members)]
        promoted, _next_due = await rs.core.call("promote", "reaper", tasks, list(members))
        return int(promoted)

    for _ in range(cfg.max_batches):
        horizon = int(time.time() * 1000) + 1000
        fetched: list[str] = await rs.redis.zrangebyscore(
            rs.keys.scheduled, "-inf", horizon, start=0, num=cfg.batch + len(skip)
        )
        members = [m for m in fetched if m not in skip][: cfg.batch]
        if not members:
            break
        screened = await rs.screen([split_member(m)[1] for m in members])
        items = []
        for m, (_, intact) in zip(members, screened, strict=True):
            if intact:
                items.append(m)
            else:
                q, tid = split_member(m)
                suspects.append(Suspect(tid, q, "scheduled", m, None))
                skip.add(m)
        promoted, failed = 0, 0
        if items:
            done = await each_alone(call, items, log, "promote batch")
            promoted, failed = sum(done.replies), len(done.failed)
            for m, exc in done.failed:
                q, tid = split_member(m)
                suspects.append(Suspect(tid, q, "scheduled", m, exc))
                skip.add(m)
        counts["PROMOTED"] += promoted
        if len(members) < cfg.batch or promoted < len(items) - failed:
            break  # nothing more is due (by Redis TIME), or what is left is stale
    if suspects:
        counts["QUARANTINED"], counts["ERRORS"] = await isolate(rs, cfg, "promotion", suspects)
    return counts
