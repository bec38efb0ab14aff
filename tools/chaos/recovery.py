"""How long recovery took: from the loss of a task's owner to the task's next START.

The owner is lost at the fault that hit its worker (SIGKILL, SIGSTOP, unplanned exit) when
the schedule has one during the attempt; otherwise at the lease expiry, which the RECLAIM
entry tells: its ``idle_ms`` is the time since the last heartbeat, so the lease expired at
``ts - idle_ms + lease_ms``. Everything comes from history timestamps (Redis TIME) and the
harness's fault log (the same host's clock).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable

import msgspec

from .records import FaultEvent, TaskRecord

__all__ = [
    "OWNER_FAULTS",
    "REDIS_FAULTS",
    "Recovery",
    "RecoveryStats",
    "percentile",
    "recoveries",
    "summarize",
]

#: faults that take a worker away from its tasks
OWNER_FAULTS = frozenset(
    {"worker_kill", "worker_stop", "worker_term", "worker_term_done", "worker_term_hung"}
    | {"worker_exit"}
)
#: faults that interrupt every worker's heartbeats for a moment
REDIS_FAULTS = frozenset({"redis_term", "redis_kill", "redis_exit", "redis_drop"})


class Recovery(msgspec.Struct, frozen=True, kw_only=True):
    """One RECLAIM of a lost attempt and, if the task got another, its next START."""

    task_id: str
    worker: str  #: the lost owner
    basis: str  #: "fault" (the fault time) or "lease" (lease expiry) as the loss time
    loss_ms: int
    reclaim_ms: int
    start_ms: int = 0  #: 0 when the RECLAIM ended the task (attempts exhausted)
    #: no fault hit the owner and no Redis restart happened near it: a healthy task taken?
    unexplained: bool = False

    @property
    def total_ms(self) -> int:
        return self.start_ms - self.loss_ms


class RecoveryStats(msgspec.Struct, frozen=True, kw_only=True):
    reclaims: int = 0
    restarted: int = 0  #: reclaims followed by a new START
    by_basis: dict[str, int] = msgspec.field(default_factory=dict)
    #: loss -> next START, in ms
    p50_ms: int = 0
    p99_ms: int = 0
    max_ms: int = 0
    #: loss -> RECLAIM (detection by the reaper), in ms
    detect_p50_ms: int = 0
    detect_p99_ms: int = 0


def percentile(values: list[int], q: float) -> int:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0
    s = sorted(values)
    return s[max(0, min(len(s), math.ceil(q / 100 * len(s))) - 1)]


def _index(faults: Iterable[FaultEvent]) -> tuple[dict[str, list[int]], list[int]]:
    by_worker: dict[str, list[int]] = {}
    redis: list[int] = []
    for f in faults:
        if f.kind in OWNER_FAULTS:
            by_worker.setdefault(f.target, []).append(f.at_ms)
        elif f.kind in REDIS_FAULTS:
            redis.append(f.at_ms)
    for v in by_worker.values():
        v.sort()
    redis.sort()
    return by_worker, redis


def _first_in(times: list[int], lo: int, hi: int) -> int | None:
    i = bisect.bisect_left(times, lo)
    return times[i] if i < len(times) and times[i] <= hi else None


def recoveries(
    tasks: Iterable[TaskRecord], faults: Iterable[FaultEvent], lease_ms: int
) -> list[Recovery]:
    """Every accepted RECLAIM in the histories, with its loss time and next START."""
    by_worker, redis = _index(faults)
    out: list[Recovery] = []
    for rec in tasks:
        accepted = [e for e in rec.history if not e.rejected]
        start_ts = 0
        for i, e in enumerate(accepted):
            if e.event == "START":
                start_ts = e.ts
            if e.event != "RECLAIM":
                continue
            worker = e.extra.get("worker", "")
            idle = int(e.extra.get("idle_ms") or 0)
            fault = _first_in(by_worker.get(worker, []), start_ts, e.ts)
            if fault is not None:
                basis, loss = "fault", fault
            else:
                basis, loss = "lease", max(start_ts, min(e.ts, e.ts - idle + lease_ms))
            # a Redis restart stops every heartbeat: a reclaim soon after one is explained
            near_redis = _first_in(redis, start_ts - lease_ms, e.ts) is not None
            nxt = next((n.ts for n in accepted[i + 1 :] if n.event == "START"), 0)
            out.append(
                Recovery(
                    task_id=rec.task_id,
                    worker=worker,
                    basis=basis,
                    loss_ms=loss,
                    reclaim_ms=e.ts,
                    start_ms=nxt,
                    unexplained=fault is None and not near_redis,
                )
            )
    return out


def summarize(items: list[Recovery]) -> RecoveryStats:
    restarted = [r for r in items if r.start_ms]
    totals = [r.total_ms for r in restarted]
    detect = [r.reclaim_ms - r.loss_ms for r in items]
    basis: dict[str, int] = {}
    for r in items:
        basis[r.basis] = basis.get(r.basis, 0) + 1
    return RecoveryStats(
        reclaims=len(items),
        restarted=len(restarted),
        by_basis=basis,
        p50_ms=percentile(totals, 50),
        p99_ms=percentile(totals, 99),
        max_ms=max(totals, default=0),
        detect_p50_ms=percentile(detect, 50),
        detect_p99_ms=percentile(detect, 99),
    )
