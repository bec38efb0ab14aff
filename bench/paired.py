"""Paired runs of the work tree against a git revision (``bench.run --baseline REV``):
the order of the two in each round, and the per-round ratios tree / baseline.

Both sides run in every round, one right after the other, on the same Redis, so both
meet the same machine load; which goes first alternates from round to round. A figure's
ratio is taken within each round (tree / baseline of that round's runs), and the report
gives the median of those ratios over the rounds, with their min and max: a ratio of
medians would pair a fast round of one side with a slow round of the other.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Pair:
    tree: str  # system label of the work tree's runs
    baseline: str  # system label of the revision's runs


def round_order(systems: Sequence[str], rnd: int, pair: Pair | None = None) -> list[str]:
    """The order of the systems in round ``rnd`` (0-based): rotated by one each round, so no
    system is always first or last; the pair runs back to back, tree first in even rounds
    and baseline first in odd ones. ``systems`` holds the tree but not the baseline."""
    units: list[tuple[str, ...]] = [(s,) for s in systems]
    if pair is not None:
        at = list(systems).index(pair.tree)
        both = (pair.tree, pair.baseline) if rnd % 2 == 0 else (pair.baseline, pair.tree)
        units[at] = both
    shift = rnd % len(units)
    return [s for unit in units[shift:] + units[:shift] for s in unit]


def per_round(records: list[dict[str, Any]], pair: Pair) -> dict[str, list[dict[str, float]]]:
    """For every metric both sides measured in a round (successful runs only): that
    round's tree value, baseline value and their ratio, in round order. A zero baseline
    value gives no ratio."""
    values: dict[tuple[str, int, str], float] = {}
    for rec in records:
        if rec["problems"] or rec["system"] not in (pair.tree, pair.baseline):
            continue
        for key, value in rec["metrics"].items():
            values[(rec["system"], rec["round"], key)] = float(value)
    out: dict[str, list[dict[str, float]]] = {}
    for (system, rnd, key), tree in sorted(values.items(), key=lambda kv: (kv[0][2], kv[0][1])):
        if system != pair.tree:
            continue
        base = values.get((pair.baseline, rnd, key))
        if base is None or base == 0:
            continue
        out.setdefault(key, []).append(
            {"round": rnd, "tree": tree, "baseline": base, "ratio": tree / base}
        )
    return out


def summarize(rows: list[dict[str, float]]) -> dict[str, Any]:
    """Median, min and max of the per-round ratios (and the rows they come from)."""
    ratios = [r["ratio"] for r in rows]
    return {
        "median": statistics.median(ratios),
        "min": min(ratios),
        "max": max(ratios),
        "rounds": len(ratios),
        "per_round": rows,
    }


def paired(records: list[dict[str, Any]], pair: Pair) -> dict[str, dict[str, Any]]:
    return {key: summarize(rows) for key, rows in per_round(records, pair).items()}


def markdown(
    result: dict[str, dict[str, Any]],
    pair: Pair,
    metrics: Sequence[tuple[str, str, str]],
    sources: dict[str, dict[str, Any]],
) -> list[str]:
    """The section of the report: one row per figure (key, label, better)."""
    tree, base = sources[pair.tree], sources[pair.baseline]
    lines = [
        "",
        f"## Tree / baseline, paired: {pair.tree} / {pair.baseline}",
        "",
        f"- tree: `{tree['sha'][:10] or '?'}`{' + uncommitted changes' if tree['dirty'] else ''}"
        f", rsjobs {tree.get('version', '?')} imported from `{tree.get('imported_from', '?')}`",
        f"- baseline: `{base['sha'][:10]}` (`{base.get('rev', '?')}`), rsjobs "
        f"{base.get('version', '?')} imported from `{base.get('imported_from', '?')}`",
        "",
        "Per round, tree / baseline of that round's two runs (back to back, the first of the "
        "two alternating); median, min and max over the rounds. Above 1 favours the tree "
        "where higher is better, below 1 where lower is better.",
        "",
        "| Figure | Better | median | min | max | rounds |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for key, label, better in metrics:
        s = result.get(key)
        if s is None:
            continue
        lines.append(
            f"| {label} | {better} | {s['median']:.3f} | {s['min']:.3f} | {s['max']:.3f} "
            f"| {s['rounds']} |"
        )
    return lines
