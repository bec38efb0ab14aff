"""The report of a chaos run: one JSON document (``--report FILE``) and a text summary."""

from __future__ import annotations

from collections import Counter
from typing import Any

import msgspec

from .checker import Violation
from .faults import PlannedFault
from .records import FaultEvent, TaskRecord

__all__ = ["ChaosReport", "format_history", "format_report"]


class ChaosReport(msgspec.Struct, kw_only=True):
    passed: bool
    seed: int
    config: dict[str, Any]
    replay: str  #: the command line that replays this schedule
    elapsed_s: float
    drain_s: float
    drained: bool
    run_dir: str
    fsync: str
    schedule: list[PlannedFault]
    faults: list[FaultEvent]
    #: faults injected (and unplanned exits observed), by kind
    fault_counts: dict[str, int]
    counts: dict[str, int]
    states: dict[str, int]
    by_kind: dict[str, dict[str, int]]
    #: kind -> "<state>/<error_type>" -> count, for tasks that did not succeed
    reasons: dict[str, dict[str, int]]
    recovery: dict[str, Any]
    violations: list[Violation]
    aof_window_losses: list[Violation]
    warnings: list[Violation]
    #: acknowledged writes lost in a failover's replication window (reported apart)
    failover_window_losses: list[Violation] = msgspec.field(default_factory=list)
    #: harness-side facts: producer retries, dropped side tasks, forced stops, errors
    harness: dict[str, Any] = msgspec.field(default_factory=dict)
    #: histories of (up to 10) tasks named by violations, for the post-mortem
    evidence: dict[str, list[str]] = msgspec.field(default_factory=dict)


def format_history(rec: TaskRecord) -> list[str]:
    lines = []
    for e in rec.history:
        mark = "REFUSED " if e.rejected else ""
        extra = " ".join(f"{k}={v}" for k, v in e.extra.items())
        lines.append(
            f"{e.ts} {mark}{e.event} {e.from_state or '-'}->{e.to_state} att={e.attempt} "
            f"src={e.source} {e.message} {extra}".rstrip()
        )
    return lines


#: entries of an evidence history printed at each end (the JSON report keeps them all)
EVIDENCE_ENDS = 12


def _ends(lines: list[str]) -> list[str]:
    """A long history's first and last entries, with how many were left out between."""
    if len(lines) <= 2 * EVIDENCE_ENDS + 1:
        return lines
    cut = len(lines) - 2 * EVIDENCE_ENDS
    return [
        *lines[:EVIDENCE_ENDS],
        f"... {cut} entries (all in the JSON report)",
        *lines[-EVIDENCE_ENDS:],
    ]


def _kinds(vs: list[Violation]) -> str:
    return ", ".join(f"{k}={n}" for k, n in sorted(Counter(v.kind for v in vs).items()))


def _outcomes(r: ChaosReport) -> str:
    parts = []
    for kind in sorted(r.by_kind):
        ok = r.by_kind[kind].get("SUCCEEDED", 0)
        rest = sorted(r.reasons.get(kind, {}).items(), key=lambda kv: -kv[1])
        items = ([f"ok {ok}"] if ok else []) + [f"{why} {n}" for why, n in rest]
        parts.append(f"{kind}: {', '.join(items)}")
    return "\n           ".join(parts)


def format_report(r: ChaosReport) -> str:
    c = r.counts
    rec = r.recovery
    out = [
        "",
        f"== rsjobs chaos report: {'PASS' if r.passed else 'FAIL'} "
        f"(seed {r.seed}, fsync {r.fsync}, {r.elapsed_s:.0f}s, drain {r.drain_s:.1f}s)",
        f"tasks      accepted {c.get('accepted', 0)} (submits {c.get('submissions', 0)}), "
        f"found in redis {c.get('tasks_found', 0)}, created without ack "
        f"{c.get('unacked_created', 0)}, indeterminate submits "
        f"{c.get('indeterminate_submits', 0)}",
        "states     " + ", ".join(f"{k} {v}" for k, v in sorted(r.states.items())),
        "faults     " + (", ".join(f"{k} {v}" for k, v in r.fault_counts.items()) or "none"),
        "outcomes   " + _outcomes(r),
        f"executions {c.get('executions', 0)} for {c.get('starts', 0)} STARTs; duplicate "
        f"executions {c.get('duplicate_executions', 0)} (finished "
        f"{c.get('duplicate_executions_finished', 0)}, stopped "
        f"{c.get('duplicate_executions_stopped', 0)}); results discarded "
        f"{c.get('discarded_results', 0)}; late results refused by the fence "
        f"{c.get('refused_results', 0)}",
        f"recovery   {rec.get('reclaims', 0)} reclaims ({rec.get('restarted', 0)} restarted); "
        f"owner loss -> new START p50 {rec.get('p50_ms', 0)} ms, p99 {rec.get('p99_ms', 0)} ms,"
        f" max {rec.get('max_ms', 0)} ms; detection p50 {rec.get('detect_p50_ms', 0)} ms, p99 "
        f"{rec.get('detect_p99_ms', 0)} ms; loss basis {rec.get('by_basis', {})}",
        f"reaper     deadlettered {c.get('deadlettered', 0)}, timeouts "
        f"{c.get('reaper_timeouts', 0)}",
        f"workflows  started {c.get('workflows_started', 0)}: "
        + ", ".join(
            f"{k.removeprefix('workflows_')} {v}"
            for k, v in sorted(c.items())
            if k.startswith("workflows_") and k != "workflows_started"
        )
        + f"; {c.get('workflow_tasks', 0)} tasks",
        f"pools      {c.get('owner_starts', 0)} starts of owners' tasks, peaks "
        + ", ".join(
            f"{k.removeprefix('owner_peak_')} {v}"
            for k, v in sorted(c.items())
            if k.startswith("owner_peak_")
        )
        + f" ({c.get('owners_at_limit', 0)} owners at their limit); parked "
        f"{c.get('tasks_parked_seen', 0)} tasks, rate-held {c.get('tasks_throttled_seen', 0)}; "
        f"{c.get('rated_starts', 0)} rated starts, at most {c.get('rated_peak_per_s', 0)} in 1 s"
        f" ({c.get('rate_windows_after_outage', 0)} windows after an outage over the bound); "
        f"{c.get('prioritized_tasks', 0)} tasks with a priority, "
        f"{c.get('priority_levels_started', 0)} levels started",
        f"poison     {c.get('poison_inputs', 0)} inputs: refused {c.get('poison_refused', 0)}, "
        f"accepted {c.get('poison_accepted', 0)}, mishandled {c.get('poison_mishandled', 0)}, "
        f"unanswered {c.get('poison_unanswered', 0)}; next-stage-over-limit workflows "
        f"{c.get('poison_next_stage_workflows', 0)}; {c.get('floods', 0)} floods of "
        f"{c.get('flood_commands', 0)} refused commands ({c.get('flood_refused', 0)} answered "
        "as refused)",
        f"hostile    {c.get('hostile_callbacks', 0)} forged callbacks (refused "
        f"{c.get('hostile_callbacks_refused', 0)}); {c.get('storms', 0)} pause/resume storms "
        f"of {c.get('storm_cycles', 0)} cycles ({c.get('storm_applied', 0)} commands applied, "
        f"{c.get('storm_unanswered', 0)} unanswered, {c.get('storm_refused', 0)} refused; "
        f"{c.get('storm_elided', 0)} entries elided, "
        f"largest hash {c.get('storm_max_bytes', 0)} B); {c.get('queue_floods', 0)} queue "
        f"floods of {c.get('queue_flood_names', 0)} names (accepted "
        f"{c.get('queue_flood_accepted', 0)}, refused {c.get('queue_flood_refused', 0)}); "
        f"{c.get('cursor_probes', 0)} cursor probes (refused "
        f"{c.get('cursor_probes_refused', 0)})",
        f"AOF        {r.fault_counts.get('redis_term', 0)} SIGTERM restarts, "
        f"{r.fault_counts.get('redis_kill', 0)} SIGKILL restarts; lost in an AOF window: "
        f"{len(r.aof_window_losses)}"
        + (f" ({_kinds(r.aof_window_losses)})" if r.aof_window_losses else ""),
    ]
    if r.config.get("topology") in ("sentinel", "cluster"):
        mode = (
            "durable: enqueues WAIT for the replica" if r.config.get("durable") else "not durable"
        )
        kind = "redis_failover" if r.config.get("topology") == "sentinel" else "cluster_failover"
        out.append(
            f"failover   {r.fault_counts.get(kind, 0)} failovers ({mode}); "
            f"lost in a failover window: {len(r.failover_window_losses)}"
            + (f" ({_kinds(r.failover_window_losses)})" if r.failover_window_losses else "")
        )
    out.append(
        f"violations {len(r.violations)}" + (f" ({_kinds(r.violations)})" if r.violations else "")
    )
    for v in r.violations[:30]:
        out.append(f"  ! {v.kind} {v.task_id} {v.detail}")
    if len(r.violations) > 30:
        out.append(f"  ... {len(r.violations) - 30} more in the JSON report")
    for v in (r.aof_window_losses + r.failover_window_losses)[:10]:
        out.append(f"  ~ {v.kind} {v.task_id} {v.detail}")
    if r.warnings:
        out.append(f"warnings   {len(r.warnings)} ({_kinds(r.warnings)})")
        for v in r.warnings[:5]:
            out.append(f"  ? {v.kind} {v.task_id} {v.detail}")
    for tid, lines in list(r.evidence.items())[:3]:
        out.append(f"history of {tid}:")
        out.extend(f"    {line}" for line in _ends(lines))
    out.append(f"replay     {r.replay}")
    out.append(f"run dir    {r.run_dir}")
    return "\n".join(out)
