"""Accounting of the poison inputs of a chaos run: each bad input refused with a clear
error and nothing written, each flood of refused commands answered and recorded.

Refusals are counted from two sources: the history (a refusal entry stands for the first
refusal of its event in one state, and the repeats coalesced into it are counted on the
task hash: ``HistoryEntry.count``) and the ``rej:<EVENT>`` counters, which count every
refusal. A flood is held to both: its task's history accounts for every refusal it was
answered (and for no command it did not send), and the counters for at least as many.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from rsjobs.codec import decode
from rsjobs.schemas import HistoryEntry

from .records import RunData, TaskRecord, Violation
from .wfcheck import Bad

__all__ = ["marker_of", "poison_findings", "refusals"]


def refusals(history: list[HistoryEntry], event: str, since_ms: int = 0) -> int:
    """Refusals of ``event`` the history accounts for from ``since_ms`` (an entry with its
    coalesced repeats)."""
    kept = sum(
        e.count
        for e in history
        if e.rejected and e.event == event and max(e.ts, e.last_ts) >= since_ms
    )
    # and the refusals a long history elided ("EVENT!=n" in its ELIDED entry's counts)
    elided = sum(
        int(n)
        for e in history
        if e.event == "ELIDED" and e.ts >= since_ms
        for name, _, n in (p.partition("=") for p in str(e.extra.get("counts") or "").split(","))
        if name == f"{event}!" and n.isdigit()
    )
    return kept + elided


def marker_of(value: Any) -> str:
    """The poison marker a task payload or workflow input carries ('' for none); a
    workflow task carries its workflow's input."""
    if not isinstance(value, dict):
        return ""
    if isinstance(value.get("poison"), str):
        return str(value["poison"])
    return marker_of(value.get("input"))


def _payload(rec: TaskRecord) -> Any:
    try:
        return decode(rec.fields.get("payload"))
    except Exception:  # not JSON: not ours
        return None


def poison_findings(
    d: RunData,
    present: dict[str, TaskRecord],
    bad: Bad,
    c: Counter[str],
    warnings: list[Violation],
    at_risk: Callable[[int, int], bool] = lambda lo, hi: False,
    risk_point: Callable[[int, int], int] = lambda lo, hi: hi,
) -> None:
    """``at_risk(lo, hi)``: whether writes acknowledged between the two times may be lost
    lawfully (an AOF or failover window the checker excuses); ``risk_point(lo, hi)``: the
    time in that span a loss is dated by (inside such a window when one overlaps)."""
    inputs = {p.marker: p for p in d.poison}
    c["poison_inputs"] = len(d.poison)
    for p in d.poison:
        what = f"{p.kind} via {p.channel}"
        if p.kind == "wf_next_over_limit":
            c["poison_next_stage_workflows"] += 1  # accepted on purpose: it fits at start
        else:
            c[f"poison_{p.outcome}"] += 1
        if p.kind == "wf_next_over_limit" or p.kind.startswith("flood"):
            if p.outcome == "mishandled":
                bad("POISON_MISHANDLED", p.created, f"{what}: {p.error}")
            elif p.outcome == "unanswered":
                warnings.append(Violation(kind="POISON_UNANSWERED", detail=f"{what} {p.error}"))
            continue
        if p.outcome == "accepted":
            bad("POISON_ACCEPTED", p.created, f"{what} was accepted (HTTP {p.status})")
        elif p.outcome == "mishandled":
            status = f"HTTP {p.status}: " if p.status else ""
            bad("POISON_MISHANDLED", p.created, f"{what}: {status}{p.error}")
        elif p.outcome == "unanswered":
            warnings.append(
                Violation(kind="POISON_UNANSWERED", detail=f"{what}: no answer through faults")
            )
    # nothing a refused input sent may be in Redis
    for tid, rec in sorted(present.items()):
        m = marker_of(_payload(rec))
        sent = inputs.get(m) if m else None
        if sent is None:
            continue
        if sent.kind == "wf_next_over_limit":
            if rec.fields.get("wf_stage") not in ("", "0"):  # the stage index
                bad("POISON_ACCEPTED", tid, "the next stage of an over-limit workflow was created")
            continue
        if sent.outcome != "accepted":
            bad("POISON_WROTE", tid, f"{sent.kind} via {sent.channel} answered "
                f"{sent.outcome}, yet this task carries it")  # fmt: skip
    refused_ids = set(d.refused_wf_ids)
    for wid, wf in sorted(d.wf_records.items()):
        if not (wf.fields or wf.history):
            continue
        inp = decode(wf.fields.get("input")) if wf.fields.get("input") else None
        by = inputs.get(marker_of(inp))
        if wid in refused_ids or (by is not None and by.kind != "wf_next_over_limit"):
            answered = by.outcome if by is not None else "refused"
            if by is None or by.outcome != "accepted":
                bad("POISON_WROTE", wid, f"refused workflow start ({answered}) left wf:{wid} "
                    f"in state {wf.fields.get('status') or '-'}")  # fmt: skip
    _floods(d, bad, c, at_risk, risk_point)


def _floods(
    d: RunData,
    bad: Bad,
    c: Counter[str],
    at_risk: Callable[[int, int], bool],
    risk_point: Callable[[int, int], int],
) -> None:
    by_event: Counter[str] = Counter()
    for f in d.floods:
        c["floods"] += 1
        c["flood_commands"] += f.sent
        c["flood_refused"] += f.refused
        if not at_risk(f.first_ms, f.last_ms):
            by_event[f.event] += f.refused
        what = f"{f.sent} x {f.event} via {f.channel} of a {f.state} task"
        if f.accepted:
            bad("FLOOD_ACCEPTED", f.task_id, f"{what}: {f.accepted} answered as a change")
        if f.errors:
            bad("POISON_MISHANDLED", f.task_id, f"{what}: {f.errors} errors ({f.error})")
        rec = d.tasks.get(f.task_id)
        if rec is None or not rec.fields:
            continue  # the task itself is accounted for (LOST) by the task checks
        if rec.fields.get("state") != f.state:
            bad(
                "TERMINAL_CHANGED",
                f.task_id,
                f"{what}: it ended {rec.fields.get('state')}",
                written_ms=f.first_ms,
            )
        got = refusals(rec.history, f.event, f.first_ms - 1000)
        # every answered refusal accounted for; commands whose answer was lost may or may
        # not have reached Redis
        if not f.refused <= got <= f.refused + f.unknown:
            bad(
                "REFUSALS_UNACCOUNTED",
                f.task_id,
                f"{what} from {f.first_ms} to {f.last_ms}: {f.refused} refusals answered "
                f"(+{f.unknown} unknown), the history accounts for {got}",
                written_ms=risk_point(f.first_ms, f.last_ms),
                # refusals are answered after WAIT too (Client.cancel / pause are durable)
                durable_write=True,
            )
    if d.stats is None:
        return
    # floods that overlapped a window where writes may be lost lawfully are left out
    for event, n in sorted(by_event.items()):
        have = d.stats.get(f"rej:{event}", 0)
        if have < n:
            bad(
                "REFUSALS_UNACCOUNTED",
                "",
                f"stats rej:{event} = {have}, but floods outside every loss window alone "
                f"got {n} refusals",
            )
