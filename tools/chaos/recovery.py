"""How long recovery took: from the loss of a task's owner to the task's next START.

The owner is lost at the fault that hit its worker when there is one: its death (SIGKILL,
graceful stop, unplanned exit, or the ``kill`` record a poison task writes just before it
SIGKILLs its worker), or a SIGSTOP that lasted into the attempt. A death counts even
before the attempt's START: a worker's name is never reused, so a START under it after
its death was a request in flight. Otherwise the owner is lost at the lease expiry, which
the RECLAIM entry tells: its ``idle_ms`` is the time since the last heartbeat, so the
lease expired at ``ts - idle_ms + lease_ms``. Everything comes from history timestamps
(Redis TIME) and the harness's fault log (the same host's clock).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import msgspec

from .records import FaultEvent, TaskRecord

__all__ = [
    "DEATHS",
    "OWNER_FAULTS",
    "REDIS_FAULTS",
    "Recovery",
    "RecoveryStats",
    "percentile",
    "recoveries",
    "redis_intervals",
    "summarize",
]

#: faults that end a worker process (its name is never used again: a START under that
#: name after one of them was a request in flight when it died)
DEATHS = frozenset(
    {"worker_kill", "worker_term", "worker_term_done", "worker_term_hung", "worker_exit"}
)
#: faults that take a worker away from its tasks: its deaths, and SIGSTOP (until SIGCONT)
OWNER_FAULTS = DEATHS | {"worker_stop"}
#: faults that interrupt every worker's heartbeats: each opens an interval that the
#: matching event of the same node closes (a drop is a moment)
REDIS_FAULTS: dict[str, frozenset[str]] = {
    "redis_term": frozenset({"redis_up"}),
    "redis_kill": frozenset({"redis_up"}),
    "redis_exit": frozenset({"redis_up"}),
    "redis_drop": frozenset(),
    "redis_freeze": frozenset({"redis_thaw"}),
    "redis_failover": frozenset({"redis_failover_done"}),
    "redis_failover_auto": frozenset(),
    "cluster_failover": frozenset({"cluster_failover_done"}),
}


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


def redis_intervals(faults: Iterable[FaultEvent]) -> list[tuple[int, int]]:
    """(from, to) of every Redis disruption: a restart until that node is up again, a
    freeze until its SIGCONT, a failover until it settled, a drop for a moment (an
    interval never closed lasts to the end)."""
    out: list[tuple[int, int]] = []
    open_: list[tuple[FaultEvent, frozenset[str]]] = []
    for f in sorted(faults, key=lambda f: f.at_ms):
        for o in list(open_):
            ev, ends = o
            # a failover ends on the new primary; the others on the node they hit
            if f.kind in ends and (f.target == ev.target or f.kind.endswith("failover_done")):
                out.append((ev.at_ms, f.at_ms))
                open_.remove(o)
        closers = REDIS_FAULTS.get(f.kind)
        if closers is None:
            continue
        if closers:
            open_.append((f, closers))
        else:
            out.append((f.at_ms, f.at_ms))
    out += [(ev.at_ms, 2**62) for ev, _ in open_]
    return sorted(out)


class _Owners:
    """When each worker died, and when it was stopped (SIGSTOP until SIGCONT)."""

    def __init__(self, faults: list[FaultEvent], kills: Iterable[tuple[str, int]]) -> None:
        self.deaths: dict[str, int] = {}
        self.stops: dict[str, list[tuple[int, int]]] = {}
        stopped: dict[str, int] = {}
        for f in sorted(faults, key=lambda f: f.at_ms):
            if f.kind in DEATHS:
                self.deaths.setdefault(f.target, f.at_ms)
            elif f.kind == "worker_stop":
                stopped.setdefault(f.target, f.at_ms)
            elif f.kind == "worker_cont" and f.target in stopped:
                self.stops.setdefault(f.target, []).append((stopped.pop(f.target), f.at_ms))
        for worker, at in stopped.items():
            self.stops.setdefault(worker, []).append((at, 2**62))
        for worker, ts in kills:
            self.deaths[worker] = min(ts, self.deaths.get(worker, ts))

    def lost_at(self, worker: str, start_ms: int, reclaim_ms: int) -> int | None:
        """When ``worker`` stopped serving an attempt it STARTed at ``start_ms`` and lost
        at ``reclaim_ms``: its death (even before the START: the request was in flight),
        or a stop overlapping the attempt; None when no fault explains the loss."""
        found: list[int] = []
        death = self.deaths.get(worker)
        if death is not None and death <= reclaim_ms:
            found.append(max(death, start_ms))
        for a, b in self.stops.get(worker, []):
            if a <= reclaim_ms and b >= start_ms:
                found.append(max(a, start_ms))
        return min(found, default=None)


def _overlaps(intervals: list[tuple[int, int]], lo: int, hi: int) -> bool:
    return any(a <= hi and b >= lo for a, b in intervals)


def recoveries(
    tasks: Iterable[TaskRecord],
    faults: Iterable[FaultEvent],
    lease_ms: int,
    kills: Iterable[tuple[str, int]] = (),
) -> list[Recovery]:
    """Every accepted RECLAIM in the histories, with its loss time and next START.

    ``kills``: (worker, Redis TIME) of the ``kill`` records of poison tasks."""
    faults = list(faults)
    owners = _Owners(faults, kills)
    redis = redis_intervals(faults)
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
            fault = owners.lost_at(worker, start_ts, e.ts)
            if fault is not None:
                basis, loss = "fault", fault
            else:
                basis, loss = "lease", max(start_ts, min(e.ts, e.ts - idle + lease_ms))
            # a Redis restart, freeze or failover stops every heartbeat (or loses the
            # last ones): a reclaim of an attempt it overlapped is explained
            near_redis = _overlaps(redis, start_ts - lease_ms, e.ts)
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
