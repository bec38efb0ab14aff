"""The PNG chart: one small bar chart per figure, every system side by side."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display here; must precede pyplot
import matplotlib.pyplot as plt

from bench.report import BASELINE, all_metrics

_BASE_COLOR = "#c0392b"
_PEER_COLOR = "#7f8c8d"


def write_chart(path: Path, meta: dict[str, Any], med: dict[str, dict[str, float]]) -> None:
    systems: list[str] = meta["systems"]
    metrics = all_metrics(meta)
    cols = 3
    rows = math.ceil(len(metrics) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 4.6, rows * 3.0), squeeze=False)
    for ax, metric in zip(axes.flat, metrics, strict=False):
        names = [s for s in systems if metric.key in med.get(s, {})]
        values = [med[s][metric.key] for s in names]
        colors = [_BASE_COLOR if s == BASELINE else _PEER_COLOR for s in names]
        bars = ax.barh(names, values, color=colors)
        ax.invert_yaxis()
        ax.set_title(f"{metric.label}\n({metric.unit}, {metric.better} is better)", fontsize=9)
        ax.tick_params(labelsize=8)
        labels = [f"{v:,.{metric.digits}f}" for v in values]
        ax.bar_label(bars, labels=labels, fontsize=7, padding=2)
        ax.margins(x=0.25)
    for ax in list(axes.flat)[len(metrics) :]:
        ax.axis("off")
    fig.suptitle(
        f"rsjobs vs peers — Redis {meta['redis_version']}, {meta['tasks']:,} tasks, "
        f"concurrency {meta['concurrency']}, median of {meta['rounds']} round(s)",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
