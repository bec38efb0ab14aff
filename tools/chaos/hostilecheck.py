"""Accounting of the hostile-client mix (:mod:`.hostile`, :mod:`.cursors`).

Findings (violations unless said otherwise):

CALLBACK_ACCEPTED     a callback signed for another outside job, stale or altered got
                      past the signature check (2xx, or a 404 / 409 from behind it)
HOSTILE_WROTE         a task holds what a refused callback sent (its marker in a result
                      or error), or a history entry written by the callback route (no
                      callback of a run is genuine: the producer ends outside jobs through
                      the Python API)
STORM_UNACCOUNTED     a storm task's history does not account for the PAUSEs / RESUMEs
                      answered as applied (kept entries plus elided counts), or its
                      entries and elided counts do not add up to its entry count
TASK_OVER_CEILING     a storm task keeps more than KEPT_MAX entries, or its hash is over
                      the documented ceiling (docs/task-size.md: 6 KiB)
QUOTA_EXCEEDED        a flooding owner got more queues than its quota (answers or the
                      ``queues:owners`` count), or was refused before reaching it
QUEUE_REFUSAL_WROTE   a queue name refused by the quota left a trace: a stream, a
                      registry entry, an owner entry, a stats field, a dedup key
CURSOR_ACCEPTED       a crafted, altered, cross-owner or cross-filter cursor was answered
                      with a page
CURSOR_LEAK           a cursor (its text, or the answer to it) revealed a task id of its
                      page or its owner; a genuine next page held another owner's task
HOSTILE_MISHANDLED    an answer that is not the clear refusal expected (a 5xx, another
                      error code, an exception outside ConfigError; a genuine cursor
                      refused; a storm command answered wrongly)

A hostile action with no answer through the faults is a warning (HOSTILE_UNANSWERED).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from rsjobs.store.history import KEPT_MAX

from .records import RunData, TaskRecord, Violation
from .wfcheck import Bad

__all__ = ["STORM_CEILING_BYTES", "elided_counts", "hostile_findings"]

#: the documented ceiling of a task whose payload, result and messages are small
STORM_CEILING_BYTES = 6 * 1024


def elided_counts(rec: TaskRecord) -> tuple[int, Counter[str]]:
    """How many entries the task's history elided, and per event (``EVENT`` accepted,
    ``EVENT!`` refused, repeats included) the counts its ELIDED entry gives."""
    n, per = 0, Counter[str]()
    for e in rec.history:
        if e.event != "ELIDED":
            continue
        n += int(e.extra.get("elided") or 0)
        for part in str(e.extra.get("counts") or "").split(","):
            name, _, count = part.partition("=")
            if name and count.isdigit():
                per[name] += int(count)
    return n, per


def hostile_findings(
    d: RunData,
    present: dict[str, TaskRecord],
    bad: Bad,
    c: Counter[str],
    warnings: list[Violation],
    at_risk: Callable[[int, int], bool] = lambda lo, hi: False,
    risk_point: Callable[[int, int], int] = lambda lo, hi: hi,
) -> None:
    _callbacks(d, present, bad, c)
    _storms(d, bad, c, at_risk, risk_point)
    _floods(d, bad, c)
    _cursors(d, bad, c)
    for what in (
        [f"callback {p.variant} to {p.task_id}" for p in d.callbacks if p.outcome == "unanswered"]
        + [f"cursor {p.variant} {p.route}" for p in d.cursor_probes if p.outcome == "unanswered"]
        + [f"queue flood {f.seq}: {len(f.unknown)} names" for f in d.queue_floods if f.unknown]
    ):
        warnings.append(Violation(kind="HOSTILE_UNANSWERED", detail=f"{what}: no answer"))


def _callbacks(d: RunData, present: dict[str, TaskRecord], bad: Bad, c: Counter[str]) -> None:
    markers = set()
    for p in d.callbacks:
        c["hostile_callbacks"] += 1
        c[f"hostile_callbacks_{p.outcome}"] += 1
        markers.add(p.marker)
        what = f"callback ({p.variant}) to {p.target}, signed for {p.signed_for}"
        if p.outcome == "accepted":
            bad("CALLBACK_ACCEPTED", p.task_id, f"{what}: HTTP {p.status} {p.error}")
        elif p.outcome == "mishandled":
            bad("HOSTILE_MISHANDLED", p.task_id, f"{what}: HTTP {p.status} {p.error}")
    if not d.callbacks:
        return
    for tid, rec in sorted(present.items()):
        held = rec.fields.get("result", "") + rec.fields.get("error", "")
        found = sorted(m for m in markers if m in held)
        if found:
            bad("HOSTILE_WROTE", tid, f"holds what a refused callback sent ({found[0]})")
        by_route = [e.id for e in rec.history if e.source == "callback"]
        if by_route:
            bad("HOSTILE_WROTE", tid, f"history entries {by_route[:3]} written by a callback")


def _storms(
    d: RunData,
    bad: Bad,
    c: Counter[str],
    at_risk: Callable[[int, int], bool],
    risk_point: Callable[[int, int], int],
) -> None:
    sizes = d.hostile_traces.sizes if d.hostile_traces is not None else {}
    for s in d.storms:
        c["storms"] += 1
        c["storm_cycles"] += s.cycles
        c["storm_applied"] += s.paused + s.resumed
        c["storm_unanswered"] += s.unknown_pause + s.unknown_resume
        c["storm_refused"] += s.refused
        what = f"storm of {s.cycles} cycles via {s.channel}"
        if s.errors:
            bad("HOSTILE_MISHANDLED", s.task_id, f"{what}: {s.errors} wrong answers ({s.error})")
        # a refusal follows a lost answer (the storm lost track of the state), or an applied
        # command that Redis lost in its AOF window (SIGKILLed under appendfsync everysec:
        # the next command finds the state before it)
        at_risk_here = (
            {"written_ms": risk_point(s.first_ms, s.last_ms)}
            if at_risk(s.first_ms, s.last_ms)
            else {}
        )
        if s.refused > s.unknown_pause + s.unknown_resume:
            bad(
                "HOSTILE_MISHANDLED",
                s.task_id,
                f"{what}: {s.refused} commands refused, but the storm never lost track of "
                f"the task's state ({s.unknown_pause + s.unknown_resume} unanswered)",
                **at_risk_here,
            )
        rec = d.tasks.get(s.task_id)
        if rec is None or not rec.fields:
            continue  # the task itself is accounted for (LOST) by the task checks
        elided, per = elided_counts(rec)
        kept = [e for e in rec.history if e.event != "ELIDED"]
        c["storm_elided"] += elided
        total = int(rec.history[-1].id) if rec.history else 0
        if len(kept) > KEPT_MAX:
            bad("TASK_OVER_CEILING", s.task_id, f"{what}: {len(kept)} entries kept")
        size = sizes.get(s.task_id, 0)
        c["storm_max_bytes"] = max(c["storm_max_bytes"], size)
        if size > STORM_CEILING_BYTES:
            bad("TASK_OVER_CEILING", s.task_id, f"{what}: its hash is {size} B")
        if len(kept) + elided != total or sum(per.values()) != elided:
            bad(
                "STORM_UNACCOUNTED",
                s.task_id,
                f"{what}: {len(kept)} entries kept + {elided} elided (counted "
                f"{sum(per.values())} by event), but the history has {total}",
            )
        for event, done, unknown in (
            ("PAUSE", s.paused, s.unknown_pause),
            ("RESUME", s.resumed, s.unknown_resume),
        ):
            got = per[event] + sum(1 for e in kept if e.event == event and not e.rejected)
            if done <= got <= done + unknown:
                continue
            bad(
                "STORM_UNACCOUNTED",
                s.task_id,
                f"{what}: {done} {event}s answered as applied (+{unknown} unanswered), the "
                f"history accounts for {got} ({per[event]} of them elided)",
                **at_risk_here,
            )


def _floods(d: RunData, bad: Bad, c: Counter[str]) -> None:
    traces = d.hostile_traces.queue_traces if d.hostile_traces is not None else {}
    owners = d.hostile_traces.owner_counts if d.hostile_traces is not None else {}
    for f in d.queue_floods:
        c["queue_floods"] += 1
        c["queue_flood_names"] += len(f.sent)
        c["queue_flood_accepted"] += len(f.accepted)
        c["queue_flood_refused"] += len(f.refused)
        what = f"queue flood of {len(f.sent)} names by {f.owner} via {f.channel} (quota {f.quota})"
        for name, why in sorted(f.mishandled.items()):
            bad("HOSTILE_MISHANDLED", "", f"{what}: {name}: {why}")
        made = owners.get(f.owner, 0) if d.hostile_traces is not None else len(f.accepted)
        if len(f.accepted) > f.quota or made > f.quota:
            bad(
                "QUOTA_EXCEEDED",
                "",
                f"{what}: {len(f.accepted)} accepted, {made} counted for the owner",
            )
        elif f.refused and len(f.accepted) + len(f.unknown) < f.quota:
            bad(
                "QUOTA_EXCEEDED",
                "",
                f"{what}: refused after {len(f.accepted)} queues, short of the quota",
            )
        if made > len(f.accepted) + len(f.unknown):
            bad(
                "QUEUE_REFUSAL_WROTE",
                "",
                f"{what}: {made} queues counted for the owner, {len(f.accepted)} accepted",
            )
        for name in f.refused:
            if traces.get(name):
                bad(
                    "QUEUE_REFUSAL_WROTE",
                    "",
                    f"{what}: refused {name} left {', '.join(traces[name][:5])}",
                )


def _cursors(d: RunData, bad: Bad, c: Counter[str]) -> None:
    for p in d.cursor_probes:
        c["cursor_probes"] += 1
        c[f"cursor_probes_{p.outcome}"] += 1
        what = f"cursor {p.variant} to {p.route} via {p.channel}"
        if p.leaked:
            bad("CURSOR_LEAK", "", f"{what} revealed {p.leaked[:5]}")
        if p.variant == "genuine":
            if p.outcome == "refused" or p.outcome == "mishandled":
                bad("HOSTILE_MISHANDLED", "", f"{what}: a genuine cursor answered {p.error}")
        elif p.outcome == "accepted" and p.variant != "cursor_text":
            bad("CURSOR_ACCEPTED", "", f"{what} was answered with a page")
        elif p.outcome == "mishandled":
            status = f"HTTP {p.status}: " if p.status else ""
            bad("HOSTILE_MISHANDLED", "", f"{what}: {status}{p.error}")
