"""The promises of shared queues (docs/limits.md), checked from a run's histories and its
keys after the drain: per-owner concurrency limits (LIMIT_EXCEEDED), the counts and lists
the limits are kept with (COUNT_DRIFT), priorities (PRIORITY_LOST) and a rate limit
(RATE_EXCEEDED). Pure functions of what was observed; the checker adds their findings.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable

from rsjobs.model import TERMINAL, running_delta

from .collect import member_id
from .records import FaultEvent, PoolState, RunData, TaskRecord
from .recovery import redis_intervals

__all__ = [
    "CLAIM_MS",
    "EARLY_MS",
    "LATE_MS",
    "OUTAGE_CATCHUP_MS",
    "admissions",
    "pool_findings",
    "rate_bound",
]

#: how long take.lua's claim of a task handed out counts against its owner (CLAIM_MS in
#: take.lua): a claim is written at its expiry minus this
CLAIM_MS = 10_000
#: a task let through on its reserved time starts up to this early (start.lua: ``rt <=
#: now + 50``)
EARLY_MS = 50
#: ... and, handed out when its time came, starts this much later on a loaded machine (a
#: worker's take-to-start delay) when no sample saw its reservation (one seen is counted
#: at its reserved time: admissions): its slot was taken at its reserved time, so a
#: window may hold it besides the starts whose slots are in it
LATE_MS = 250
#: a Redis disruption (restart, freeze, failover, drop) or a worker's SIGSTOP that ended
#: this shortly before (or inside) a 1 s window excuses that window's excess: the tasks
#: the bucket reserved times for during the outage start late, together, when it ends
#: (counted in ``rate_windows_after_outage``, never hidden)
OUTAGE_CATCHUP_MS = 2000
#: the events a task's priority is carried on (its ENQUEUE, and a RETRY / REPLAY clone's)
PRIORITY_EVENTS = frozenset({"ENQUEUE", "RETRY", "REPLAY"})

Bad = Callable[[str, str, str], None]


def rate_bound(per_second: float, burst: int) -> int:
    """The most starts one bucket lets through in any 1 s window: ``burst`` at once, then
    one per interval over the window widened by the tolerances (EARLY_MS, LATE_MS)."""
    return burst + math.ceil(per_second * (1000 + EARLY_MS + LATE_MS) / 1000)


def pool_findings(d: RunData, present: dict[str, TaskRecord], bad: Bad, c: Counter[str]) -> None:
    """Every finding about the shared-queue limits (nothing when the run set none)."""
    if d.pools is None:
        return
    _priorities(d, present, bad, c)
    _limits(d.pools, present, bad, c)
    _rate(d.pools, present, d.faults, bad, c)
    _counts(d.pools, present, bad, c)


def _accepted(rec: TaskRecord) -> list[tuple[int, str, str, str, int]]:
    """(ts, event, from, to, attempt) of the accepted entries, in order."""
    return [
        (e.ts, e.event, e.from_state, e.to_state, e.attempt) for e in rec.history if not e.rejected
    ]


def _priorities(d: RunData, present: dict[str, TaskRecord], bad: Bad, c: Counter[str]) -> None:
    """PRIORITY_LOST: the task's ``pr`` and its ENQUEUE entry's are the submitted one."""
    levels: set[int] = set()
    seen: set[str] = set()
    for s in d.submissions:
        rec = present.get(s.task_id)
        if rec is None or not rec.fields or s.task_id in seen:
            continue  # LOST / HASH_MISSING say so
        seen.add(s.task_id)
        if s.priority:
            c["prioritized_tasks"] += 1
        stored = rec.fields.get("priority", "0") or "0"
        if stored != str(s.priority):
            bad("PRIORITY_LOST", s.task_id, f"submitted with priority {s.priority}, has {stored}")
        for e in rec.history:
            if e.rejected or e.event not in PRIORITY_EVENTS:
                continue
            got = e.extra.get("pr", "0") or "0"
            if got != str(s.priority):
                bad(
                    "PRIORITY_LOST",
                    s.task_id,
                    f"{e.event} entry {e.id} names priority {got}, submitted {s.priority}",
                )
        if s.priority and any(e.event == "START" and not e.rejected for e in rec.history):
            levels.add(s.priority)
    c["priority_levels_started"] = len(levels)


def _owned(pools: PoolState, present: dict[str, TaskRecord]) -> dict[str, list[TaskRecord]]:
    """The tasks of the limited queue with an owner, by owner."""
    out: dict[str, list[TaskRecord]] = defaultdict(list)
    for rec in present.values():
        f = rec.fields
        if f.get("owner") and f.get("queue") == pools.settings.queue:
            out[f["owner"]].append(rec)
    return out


def _limits(pools: PoolState, present: dict[str, TaskRecord], bad: Bad, c: Counter[str]) -> None:
    """LIMIT_EXCEEDED: an owner's overlapping RUNNING intervals (START to the entry that
    leaves RUNNING, as the state machine counts them: rsjobs.model.running_delta) never
    outnumber its limit. At one millisecond, exits count before entries (the script that
    started a task saw the exits before it)."""
    for owner, recs in sorted(_owned(pools, present).items()):
        limit = pools.settings.limit_of(owner)
        moves: list[tuple[int, int, str]] = []
        for rec in recs:
            for ts, event, frm, to, _ in _accepted(rec):
                delta = running_delta(frm, to)
                if delta:
                    moves.append((ts, delta, rec.task_id))
                if event == "START":
                    c["owner_starts"] += 1
        running = peak = 0
        over = False
        for ts, delta, tid in sorted(moves):
            running += delta
            peak = max(peak, running)
            if running > limit and not over:
                bad(
                    "LIMIT_EXCEEDED",
                    tid,
                    f"owner {owner} had {running} tasks RUNNING on {pools.settings.queue} at "
                    f"{ts}, over its limit {limit}",
                )
            over = running > limit
        c[f"owner_peak_{owner}"] = peak
        c["owners_at_limit"] += peak >= limit
    c["tasks_parked_seen"] = len(pools.parked_seen)


def admissions(rec: TaskRecord, seen: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(admitted, started) of each START of ``rec``: the time the bucket counted it —
    the start time reserved for it when a sample saw it rate-held since its previous
    START (start.lua lets it through on that reservation, however late its worker comes:
    the bucket took that slot when it reserved it), else its START's own time."""
    out: list[tuple[int, int]] = []
    prev = 0
    for ts, ev, *_ in _accepted(rec):
        if ev != "START":
            continue
        held = [r for at, r in seen if prev < at <= ts and r <= ts + EARLY_MS]
        out.append((min(ts, held[-1]) if held else ts, ts))
        prev = ts
    return out


def _rate(
    pools: PoolState,
    present: dict[str, TaskRecord],
    faults: list[FaultEvent],
    bad: Bad,
    c: Counter[str],
) -> None:
    """RATE_EXCEEDED: the rated type's STARTs (every attempt) on the queue, each at the
    time the bucket counted it (:func:`admissions`), in any 1 s window, are no more than
    :func:`rate_bound` allows (a window right after an outage excepted:
    OUTAGE_CATCHUP_MS); and from the time the rate was set, never more in all than the
    bucket held (``burst`` + one per interval: this one no outage excuses)."""
    st = pools.settings
    starts: list[tuple[int, str]] = []
    for rec in present.values():
        f = rec.fields
        if f.get("type") != st.rated_type or f.get("queue") != st.queue:
            continue
        for admitted, ts in admissions(rec, pools.throttled_seen.get(rec.task_id, [])):
            starts.append((admitted, rec.task_id))
            if ts - admitted > LATE_MS:
                c["rated_late_starts"] += 1  # its worker came late to its reserved time
    starts.sort()
    c["rated_starts"] = len(starts)
    c["tasks_throttled_seen"] = len(pools.throttled_seen)
    interval = 1000 / st.per_second
    for i, (ts, tid) in enumerate(starts):
        allowed = st.burst + math.floor((ts + EARLY_MS - pools.set_ms) / interval)
        if i + 1 > allowed:
            bad(
                "RATE_EXCEEDED",
                tid,
                f"start {i + 1} of {st.rated_type} (counted at {ts}): the bucket "
                f"({st.per_second:g}/s, burst {st.burst}, set at {pools.set_ms}) allowed "
                f"{allowed} by then",
            )
            break
    bound = rate_bound(st.per_second, st.burst)
    ends = [b for _, b in redis_intervals(faults)] + _stop_ends(faults)
    j = 0
    peak = 0
    flagged_until = -1
    for i, (ts, tid) in enumerate(starts):
        while j < len(starts) and starts[j][0] < ts + 1000:
            j += 1
        n = j - i  # starts counted in [ts, ts + 1000)
        peak = max(peak, n)
        if n <= bound or ts < flagged_until:
            continue
        flagged_until = ts + 1000  # one finding per excess window
        if any(ts - OUTAGE_CATCHUP_MS <= e < ts + 1000 for e in ends):
            c["rate_windows_after_outage"] += 1
            continue
        bad(
            "RATE_EXCEEDED",
            tid,
            f"{n} starts of {st.rated_type} counted in the 1 s from {ts} (rate "
            f"{st.per_second:g}/s, burst {st.burst}: at most {bound} with the tolerances)",
        )
    c["rated_peak_per_s"] = peak


def _stop_ends(faults: list[FaultEvent]) -> list[int]:
    """When each SIGSTOPped worker was continued (its takes and starts resume then)."""
    return [f.at_ms for f in faults if f.kind == "worker_cont"]


def _counts(pools: PoolState, present: dict[str, TaskRecord], bad: Bad, c: Counter[str]) -> None:
    """COUNT_DRIFT: after the drain no owner has a RUNNING task counted, the parked and
    throttled lists name no terminal or missing task, and no worker's claim still counts
    against an owner that take.lua wrote after that owner's last task had moved for the
    last time (a claim left behind and kept alive) or that outlives CLAIM_MS."""
    for field, n in sorted(pools.running.items()):
        if n:
            bad("COUNT_DRIFT", "", f"running {field} = {n} after the drain (no task is RUNNING)")
    for name, lists in (("parked", pools.parked), ("throttled", pools.throttled)):
        for q, members in sorted(lists.items()):
            for m in members:
                tid = member_id(m)
                rec = present.get(tid)
                state = rec.fields.get("state", "") if rec is not None else ""
                if not state or state in TERMINAL:
                    bad(
                        "COUNT_DRIFT",
                        tid,
                        f"{name}:{q} holds {m!r}, a task that is {state or 'missing'}",
                    )
    last: dict[tuple[str, str], int] = {}
    for rec in present.values():
        f = rec.fields
        if f.get("owner") and rec.history:
            key = (f.get("queue", ""), f["owner"])
            last[key] = max(last.get(key, 0), max(e.ts for e in rec.history))
    for q, by_worker in sorted(pools.claims.items()):
        for worker, raw in sorted(by_worker.items()):
            head, *parts = raw.split() or [""]
            field_exp = int(head) if head.isdigit() else 0
            for part in parts:
                # "<owner>=<count>:<its expiry>" (an older claim: "<owner>=<count>", the
                # field's expiry)
                owner, _, rest = part.partition("=")
                count, _, own_exp = rest.partition(":")
                if not count.isdigit() or int(count) <= 0:
                    continue
                exp = int(own_exp) if own_exp.isdigit() else field_exp
                if exp <= pools.read_ms:
                    c["claims_expired_left"] += 1  # no longer counted (take.lua drops it)
                    continue
                why = ""
                if exp > pools.read_ms + CLAIM_MS:
                    why = f"expires {exp - pools.read_ms} ms after the read, past CLAIM_MS"
                elif exp - CLAIM_MS > last.get((q, owner), 0):
                    why = (
                        f"written at {exp - CLAIM_MS}, after {owner}'s last task on {q} last "
                        f"moved ({last.get((q, owner), 0) or 'never'})"
                    )
                if why:
                    bad(
                        "COUNT_DRIFT",
                        "",
                        f"claims:{q} of {worker} still counts {owner}={count} after the "
                        f"drain: {why}",
                    )
