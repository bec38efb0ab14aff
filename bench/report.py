"""Turn per-run records into medians, rsjobs/peer ratios and a markdown report."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Literal

BASELINE = "rsjobs"

# Above this much CPU (in cores) used by other processes during a processing window,
# the machine was not quiet enough for the figures to be trusted.
OTHER_LOAD_WARN_CORES = 0.15


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    unit: str
    better: Literal["higher", "lower"]
    digits: int  # decimals shown


# The figures of the report, in order. Runs also record 2-worker Redis figures; those
# are kept in the JSON but left out of the table to keep it readable.
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
    Metric("redis_mem_bytes_per_task_1w", "Redis memory per finished task", "bytes", "lower", 0),
)


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
) -> str:
    systems: list[str] = meta["systems"]
    peers = [s for s in systems if s != BASELINE]
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
    for m in METRICS:
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
        for m in METRICS:
            cells = [_cell(rat.get(p, {}).get(m.key), 2) for p in peers]
            lines.append(f"| {m.label} | {m.better} | " + " | ".join(cells) + " |")
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
