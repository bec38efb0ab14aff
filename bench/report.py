"""Turn per-run records into medians, rsjobs/peer ratios and a markdown report."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Literal

from bench import paired
from bench.machine import OTHER_LOAD_WARN_CORES
from bench.paired import Pair

BASELINE = "rsjobs"


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    unit: str
    better: Literal["higher", "lower"]
    digits: int  # decimals shown


# The figures of the report, in order. Runs also record 2-worker Redis figures and the
# memory growth of the 1-worker processing run (redis_mem_bytes_per_task_1w, measured
# with a worker running); those are kept in the JSON but left out of the table.
METRICS: tuple[Metric, ...] = (
    Metric("enqueue_one_per_s", "Enqueue, one by one", "tasks/s", "higher", 0),
    Metric("enqueue_bulk_per_s", "Enqueue, bulk API", "tasks/s", "higher", 0),
    Metric("proc_1w_per_s", "Processing, 1 worker", "tasks/s", "higher", 0),
    Metric("proc_2w_per_s", "Processing, 2 workers", "tasks/s", "higher", 0),
    Metric("worker_cpu_us_per_task_1w", "Worker CPU per task (1 worker)", "µs", "lower", 0),
    Metric("worker_cpu_us_per_task_2w", "Worker CPU per task (2 workers)", "µs", "lower", 0),
    Metric("redis_cpu_us_per_task_1w", "Redis CPU per task", "µs", "lower", 1),
    Metric("redis_cmds_per_task_1w", "Redis commands per task", "cmds", "lower", 1),
    Metric("latency_p50_ms", "Enqueue-to-start latency p50", "ms", "lower", 2),
    Metric("latency_p99_ms", "Enqueue-to-start latency p99", "ms", "lower", 2),
    Metric("mem_waiting_bytes_per_task", "Redis memory per waiting task", "bytes", "lower", 0),
    Metric("mem_finished_bytes_per_task", "Redis memory per finished task", "bytes", "lower", 0),
)


def all_metrics(meta: dict[str, Any]) -> tuple[Metric, ...]:
    """METRICS, with the peak and the latency of every load level the run had."""
    fractions: list[int] = meta.get("load_fractions") or []
    extra: list[Metric] = []
    if fractions and "load" in meta.get("experiments", ()):
        extra.append(
            Metric(
                "load_peak_per_s", "Peak processing before the load runs", "tasks/s", "higher", 0
            )
        )
        for f in fractions:
            for pct in (50, 99):
                label = f"Latency p{pct} at {f}% of peak"
                extra.append(Metric(f"load{f}_p{pct}_ms", label, "ms", "lower", 2))
    return METRICS + tuple(extra)


def medians(records: list[dict[str, Any]], systems: list[str]) -> dict[str, dict[str, float]]:
    """Median over rounds of every metric of every system, from successful runs only."""
    samples: dict[str, dict[str, list[float]]] = {s: {} for s in systems}
    for rec in records:
        if rec["problems"]:
            continue
        for key, value in rec["metrics"].items():
            samples[rec["system"]].setdefault(key, []).append(float(value))
    return {
        s: {k: statistics.median(v) for k, v in sorted(per.items())} for s, per in samples.items()
    }


def ratios(med: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """rsjobs / peer for every metric both have (>1 is better for rsjobs only where
    higher is better; the report says which way each metric goes)."""
    base = med.get(BASELINE, {})
    out: dict[str, dict[str, float]] = {}
    for system, values in med.items():
        if system == BASELINE:
            continue
        out[system] = {k: base[k] / v for k, v in values.items() if k in base and v}
    return out


def _cell(value: float | None, digits: int) -> str:
    if value is None:
        return "—"
    return f"{value:,.{digits}f}"


def markdown(
    meta: dict[str, Any],
    med: dict[str, dict[str, float]],
    rat: dict[str, dict[str, float]],
    records: list[dict[str, Any]],
    paired_result: dict[str, dict[str, Any]] | None = None,
) -> str:
    systems: list[str] = meta["systems"]
    # a revision of rsjobs (--baseline) is no peer: it has its own paired section
    revision = (meta.get("baseline") or {}).get("label")
    peers = [s for s in systems if s not in (BASELINE, revision)]
    metrics = all_metrics(meta)
    lines = [
        "# rsjobs benchmark",
        "",
        f"Redis {meta['redis_version']} on 127.0.0.1, {meta['tasks']:,} no-op async tasks per "
        f"run, concurrency {meta['concurrency']} per worker, {meta['latency_samples']} latency "
        f"samples; median of {meta['rounds']} round(s), systems interleaved per round. "
        f"{meta['cpus']} CPUs, Python {meta['python']}.",
        "",
        "## Medians",
        "",
        "| Figure | Better | " + " | ".join(systems) + " |",
        "|---|---|" + "---:|" * len(systems),
    ]
    for m in metrics:
        if not any(m.key in med.get(s, {}) for s in systems):
            continue  # an experiment this run left out (--experiments)
        cells = [_cell(med.get(s, {}).get(m.key), m.digits) for s in systems]
        lines.append(f"| {m.label} ({m.unit}) | {m.better} | " + " | ".join(cells) + " |")
    if peers and BASELINE in systems:
        lines += [
            "",
            "## Ratios rsjobs / peer",
            "",
            "Above 1 favours rsjobs where higher is better; below 1 where lower is better.",
            "",
            "| Figure | Better | " + " | ".join(peers) + " |",
            "|---|---|" + "---:|" * len(peers),
        ]
        for m in metrics:
            cells = [_cell(rat.get(p, {}).get(m.key), 2) for p in peers]
            lines.append(f"| {m.label} | {m.better} | " + " | ".join(cells) + " |")
    if paired_result is not None and revision:
        pair = Pair(BASELINE, revision)
        rows = [(m.key, m.label, m.better) for m in metrics]
        rows.insert(7, ("redis_cpu_us_per_task_2w", "Redis CPU per task (2 workers)", "lower"))
        lines += paired.markdown(paired_result, pair, rows, meta["sources"])
    lines += load_levels(meta, records)
    lines += memory_breakdown(meta, records)
    lines += ["", "## Versions", ""]
    for system in systems:
        versions = meta["versions"].get(system, {})
        lines.append(f"- {system}: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    other = [r["raw"]["other_cpu_cores"] for r in records if "other_cpu_cores" in r["raw"]]
    if other:
        lines += ["", "## Machine load", ""]
        lines.append(
            f"CPU used by other processes during processing windows: median "
            f"{statistics.median(other):.2f} cores, max {max(other):.2f} cores."
        )
        if max(other) > OTHER_LOAD_WARN_CORES:
            lines.append(
                f"**Warning:** above {OTHER_LOAD_WARN_CORES} cores the machine was busy with "
                "other work; rerun on a quiet machine before trusting these figures."
            )
    failed = [r for r in records if r["problems"]]
    lines += ["", "## Verification", ""]
    if not failed:
        lines.append(
            f"All {len(records)} runs verified: every task ran exactly once (handler counter) "
            "and the system's own bookkeeping reports it completed."
        )
    else:
        lines.append(
            f"{len(failed)} of {len(records)} runs FAILED and are left out of the medians:"
        )
        lines.append("")
        for r in failed:
            first = r["problems"][0].strip().splitlines()
            lines.append(
                f"- round {r['round']} {r['system']} {r['experiment']}: "
                + (first[-1] if first else "?")
            )
    return "\n".join(lines) + "\n"


def load_levels(meta: dict[str, Any], records: list[dict[str, Any]]) -> list[str]:
    """The load runs' producer: the rate asked for and achieved at each level (medians over
    rounds), so that a producer that fell behind its schedule shows."""
    runs = [r for r in records if r["experiment"] == "load" and not r["problems"]]
    if not runs:
        return []
    lines = [
        "",
        "## Latency under load: the producer",
        "",
        "Each level: an open-loop producer enqueues the run's tasks at the given share of the "
        "peak measured just before (every task due at a wake-up in one bulk call where the "
        "system has one); latency is handler start minus the time just before the call that "
        "enqueued the task. Medians over rounds.",
        "",
        "| System | Level | Asked (tasks/s) | Achieved (tasks/s) | Producer max lag (ms) |",
        "|---|---|---:|---:|---:|",
    ]
    for system in meta["systems"]:
        mine = [r for r in runs if r["system"] == system]
        for level in map(str, meta.get("load_fractions") or []):
            rows = [r["raw"]["levels"][level] for r in mine if level in r["raw"]["levels"]]
            if not rows:
                continue
            asked, achieved, lag = (
                statistics.median(row[k] for row in rows)
                for k in ("rate_per_s", "achieved_per_s", "max_lag_ms")
            )
            lines.append(f"| {system} | {level}% | {asked:,.0f} | {achieved:,.0f} | {lag:,.1f} |")
    return lines


def _pattern_medians(records: list[dict[str, Any]], field: str, value: str) -> dict[str, float]:
    samples: dict[str, list[float]] = {}
    for rec in records:
        for row in rec["raw"].get(field, []):
            samples.setdefault(row["pattern"], []).append(float(row[value]))
    return {p: statistics.median(v) for p, v in samples.items()}


def memory_breakdown(meta: dict[str, Any], records: list[dict[str, Any]]) -> list[str]:
    """Per system, what its waiting and finished tasks hold, by key pattern (medians over
    the rounds' memory runs, bytes per task)."""
    n: int = meta["tasks"]
    if not any(r["experiment"] == "memory" for r in records):
        return []
    lines = [
        "",
        "## Memory by key pattern",
        "",
        "Bytes per task, medians over rounds (`memory` runs). *MEMORY USAGE*: Σ `MEMORY "
        "USAGE key SAMPLES 0` growth of the keys of that pattern (for streams Redis estimates "
        "the radix tree, and over-counts a one-node stream such as a task's history by "
        "about 250 B); *freed*: what deleting those keys gave back, measured with "
        "`used_memory` after the run (exact; only for keys that exist per task). "
        "*Δ used_memory* is the figure of the table above; *not in any key* is Δ "
        "`used_memory` minus Σ of the best figure per row (keyspace and expires bucket "
        "arrays, allocator rounding; negative where MEMORY USAGE over-counts).",
    ]
    for system in meta["systems"]:
        runs = [
            r
            for r in records
            if r["system"] == system and r["experiment"] == "memory" and not r["problems"]
        ]
        if not runs:
            continue
        waiting = _pattern_medians(runs, "keys_waiting", "bytes")
        finished = _pattern_medians(runs, "keys_finished", "bytes")
        freed = _pattern_medians(runs, "released_finished", "freed_bytes")
        kinds = {
            row["pattern"]: row["type"]
            for r in runs
            for field in ("keys_waiting", "keys_finished")
            for row in r["raw"].get(field, [])
        }
        total_w = statistics.median(r["metrics"]["mem_waiting_bytes_per_task"] for r in runs)
        total_f = statistics.median(r["metrics"]["mem_finished_bytes_per_task"] for r in runs)
        lines += [
            "",
            f"### {system}",
            "",
            "| key pattern | type | waiting (MEMORY USAGE) | finished (MEMORY USAGE) "
            "| finished (freed) |",
            "|---|---|---:|---:|---:|",
        ]
        patterns = sorted(
            set(waiting) | set(finished), key=lambda p: -abs(finished.get(p, waiting.get(p, 0)))
        )
        best_w = best_f = 0.0
        for p in patterns:
            w, f, d = waiting.get(p), finished.get(p), freed.get(p)
            if max(abs(w or 0), abs(f or 0)) / n < 0.5:
                continue  # fixed keys that changed by a few bytes (registrations, locks)
            best_w += (w or 0) / n
            best_f += (d if d is not None else (f or 0)) / n
            lines.append(
                f"| `{p}` | {kinds.get(p, '?')} | {_cell(None if w is None else w / n, 0)} "
                f"| {_cell(None if f is None else f / n, 0)} "
                f"| {_cell(None if d is None else d / n, 0)} |"
            )
        lines.append(f"| **Δ used_memory** | | **{total_w:,.0f}** | **{total_f:,.0f}** | |")
        lines.append(f"| not in any key | | {total_w - best_w:,.0f} | | {total_f - best_f:,.0f} |")
    return lines
