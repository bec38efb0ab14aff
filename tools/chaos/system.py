"""Checks of the system around the tasks: the processes (did anything crash, did graceful
stops end in time), the events stream (the web app's source) and the stats counters.

Pure functions of what was observed; the checker adds their findings to its result.
"""

from __future__ import annotations

import signal
from collections import Counter

from rsjobs.workflows.model import NOTES as WF_NOTES

from .records import FaultEvent, TaskRecord, Violation, WorkflowRecord
from .recovery import redis_intervals

__all__ = ["event_findings", "fault_counts", "process_findings", "stats_findings"]

#: what fault_counts counts: faults injected, and unplanned exits observed
INJECTED = frozenset(
    {"worker_kill", "worker_stop", "worker_term", "worker_exit", "reaper_kill", "reaper_exit"}
    | {"redis_drop", "redis_term", "redis_kill", "redis_exit", "redis_freeze"}
    | {"redis_failover", "redis_failover_auto", "sentinel_exit", "web_exit"}
    | {"cluster_failover"}
)
#: unplanned exits: a crash unless explained
EXITS = frozenset({"worker_exit", "reaper_exit", "redis_exit", "sentinel_exit", "web_exit"})


def fault_counts(faults: list[FaultEvent]) -> dict[str, int]:
    """How many faults of each kind were injected (or observed, for unplanned exits)."""
    return dict(sorted(Counter(f.kind for f in faults if f.kind in INJECTED).items()))


def process_findings(
    faults: list[FaultEvent], c: Counter[str], warnings: list[Violation]
) -> list[Violation]:
    """Processes that died on their own, and graceful stops that failed.

    A worker SIGKILLed by a poison task (-9) is the workload's doing; a worker that could
    not reach Redis because it was started while Redis was down (the CLI exits with status
    3) is a warning; every other unplanned exit is a crash."""
    found: list[Violation] = []
    outages = redis_intervals(faults)
    for f in faults:
        if f.kind in ("worker_term_done", "worker_term_hung"):
            c["graceful_stops"] += 1
            c["graceful_stop_max_ms"] = max(c["graceful_stop_max_ms"], f.ran_ms)
        if f.status == -signal.SIGKILL and f.kind in ("worker_exit", "worker_term_done"):
            c["poison_kills"] += 1
        elif f.kind == "worker_term_hung" or (f.kind == "worker_term_done" and f.status):
            why = "did not stop within the bound" if f.kind.endswith("hung") else ""
            found.append(
                Violation(
                    kind="SHUTDOWN_FAILED",
                    detail=f"{f.target} after SIGTERM: exit status {f.status} {f.detail} "
                    f"{why}".strip(),
                )
            )
        elif f.kind in EXITS:
            began = f.at_ms - f.ran_ms
            if f.status == 3 and any(a - 500 <= began <= b + 500 for a, b in outages):
                warnings.append(
                    Violation(
                        kind="START_WITHOUT_REDIS",
                        detail=f"{f.target} started while Redis was down and exited "
                        f"(status 3: cannot reach redis) after {f.ran_ms} ms",
                    )
                )
                continue
            found.append(
                Violation(kind="PROCESS_CRASH", detail=f"{f.target} (pid {f.pid}) {f.detail}")
            )
    return found


def event_findings(
    events: dict[str, list[str]], present: dict[str, TaskRecord], *, trimmed: bool
) -> list[Violation]:
    """The events stream must name exactly each task's history entries but its first
    (ENQUEUE: no one watches a task before it exists), in order (once MAXLEN ~ trimmed it:
    no entry the history does not have)."""
    found: list[Violation] = []
    for tid, rec in sorted(present.items()):
        named = events.get(tid, [])
        hist = _entry_ids(rec)[1:]
        if trimmed:
            extra = sorted(set(named) - set(hist))
            if extra:
                found.append(
                    Violation(
                        kind="EVENTS_MISMATCH",
                        task_id=tid,
                        detail=f"events name unknown entries {extra[:5]}",
                    )
                )
        elif named != hist:
            found.append(
                Violation(
                    kind="EVENTS_MISMATCH",
                    task_id=tid,
                    detail=f"events name {len(named)} entries, history has {len(hist)}",
                )
            )
    for tid in sorted(set(events) - set(present)):
        found.append(
            Violation(kind="EVENTS_MISMATCH", task_id=tid, detail="events name no such task")
        )
    return found


def _entry_ids(rec: TaskRecord) -> list[str]:
    """The ids of every entry the history had, the elided ones included (the ELIDED entry
    stands for the entries from its ``first`` to its own number)."""
    out: list[str] = []
    for e in rec.history:
        if e.event == "ELIDED" and str(e.extra.get("first") or "").isdigit():
            out += [str(n) for n in range(int(e.extra["first"]), int(e.id) + 1)]
        else:
            out.append(e.id)
    return out


#: the duration histograms' bucket bounds (ms; DURATION_LE_MS in fsm.lua), "inf" past them
DURATION_LE_MS = (100, 500, 1000, 2500, 5000, 10000, 30000, 60000, 120000, 300000, 600000,
                  1800000, 3600000)  # fmt: skip
#: the ends of an attempt that retry its task when they lead back to a wait
RETRY_EVENTS = frozenset({"FAIL", "TIMEOUT", "RECLAIM"})


def _le(ms: int) -> str:
    return next((str(b) for b in DURATION_LE_MS if ms <= b), "inf")


def _attempt_stats(rec: TaskRecord, want: Counter[str]) -> None:
    """What the task's ended attempts put in the stats hash (account_attempt in fsm.lua):
    per queue, type and stage, the histogram of each attempt's START to its end (a DEFER
    does not end it) and the retries."""
    f = rec.fields
    dims = [f"{d}|{f[k]}" for d, k in (("queue", "queue"), ("type", "type"),
                                       ("stage", "wf_stage_name")) if f.get(k)]  # fmt: skip
    started: dict[int, int] = {}
    for e in rec.history:
        if e.rejected or e.event == "ELIDED":
            continue
        if e.event == "START":
            started[e.attempt] = e.ts
            continue
        if e.from_state not in ("RUNNING", "DEFERRED") or e.to_state == e.from_state:
            continue
        if e.event == "DEFER":
            continue
        ms = max(0, e.ts - started.get(e.attempt, e.ts))
        retried = e.event in RETRY_EVENTS and e.to_state in ("SCHEDULED", "PENDING")
        for d in dims:
            want[f"adur:{d}|{_le(ms)}"] += 1
            want[f"adur_ms:{d}"] += ms
            if retried:
                want[f"retry:{d}"] += 1


def stats_findings(
    stats: dict[str, int],
    present: dict[str, TaskRecord],
    workflows: dict[str, WorkflowRecord] | None = None,
) -> list[Violation]:
    """In a fresh namespace the stats hash must equal what the tasks and workflows say:
    state counts per queue (terminal ones are totals), ev:<EVENT> per accepted history
    entry and rej:<EVENT> per refusal: a refusal entry and the repeats coalesced into it,
    started:<queue> per accepted START of the queue's tasks (PROGRESS notes are not
    transitions and have no ev: counter), wfev: / wfrej: per workflow history entry
    (SPAWN and ASSET notes have none); the attempts' histograms and retries per queue,
    type and stage (adur:, adur_ms:, retry:) from each attempt's START and end entries, and
    the finished workflows' (wfdur:, wfdur_ms:) from their start and finish times. Every
    one of those histograms is bounded: a field per name and bucket."""
    want: Counter[str] = Counter()
    for wf in (workflows or {}).values():
        for w in wf.history:
            if w.rejected:
                want[f"wfrej:{w.event}"] += 1
            elif w.event not in WF_NOTES:
                want[f"wfev:{w.event}"] += 1
        wff = wf.fields
        if wff.get("finished_at") and wff.get("created_at"):
            ms = max(0, int(wff["finished_at"]) - int(wff["created_at"]))
            d = f"{wff.get('def') or '?'}|{wff.get('status', '')}"
            want[f"wfdur:{d}|{_le(ms)}"] += 1
            want[f"wfdur_ms:{d}"] += ms
    for rec in present.values():
        q = rec.fields.get("queue", "")
        if q:
            want[f"{q}:{rec.fields.get('state', '')}"] += 1
        for e in rec.history:
            if e.event == "ELIDED":  # its counts per event: "EVENT=n", refused "EVENT!=n"
                for part in str(e.extra.get("counts") or "").split(","):
                    name, _, n = part.partition("=")
                    if name and n.isdigit():
                        refused = name.endswith("!")
                        want[f"{'rej' if refused else 'ev'}:{name.rstrip('!')}"] += int(n)
            elif e.rejected:
                want[f"rej:{e.event}"] += e.count  # the entry and its coalesced repeats
            elif e.event != "PROGRESS":
                want[f"ev:{e.event}"] += 1
                if e.event == "START" and q:  # per queue, for its per-minute series
                    want[f"started:{q}"] += 1
        _attempt_stats(rec, want)
    # (the duration histogram's dur: fields are no counts of tasks or entries)
    have = {k: v for k, v in stats.items() if v and k != "ev:PROGRESS" and not k.startswith("dur")}
    return [
        Violation(kind="STATS_DRIFT", detail=f"stats {k} = {have.get(k, 0)}, tasks say {want[k]}")
        for k in sorted(set(have) | {k for k, v in want.items() if v})
        if have.get(k, 0) != want[k]
    ]
