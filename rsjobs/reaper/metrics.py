"""A reaper's own Prometheus figures, served with the namespace's (:mod:`rsjobs.metrics`)
by ``rsjobs reaper --metrics-port N``:

- ``rsjobs_reaper_sweeps_total``: sweeps done (those another reaper's guard skipped too)
- ``rsjobs_reaper_actions_total{action}``: what its sweeps did, summed (the numeric
  fields of :class:`rsjobs.reaper.SweepReport`: retried, failed, deadlettered,
  timed_out, expired, promoted, quarantined, errors, workflows_spawned...)
- ``rsjobs_reaper_sweep_seconds_total``: the time its sweeps took
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric

__all__ = ["reaper_families"]

#: report fields that are no count of actions
_NOT_ACTIONS = frozenset({"ms", "queues"})


def reaper_families(sweeps: int, totals: Counter[str]) -> Iterator[Metric]:
    """The families of a reaper that did ``sweeps`` sweeps summing to ``totals``."""
    yield CounterMetricFamily("rsjobs_reaper_sweeps", "sweeps this reaper did", sweeps)
    actions = CounterMetricFamily(
        "rsjobs_reaper_actions", "what this reaper's sweeps did, summed", labels=["action"]
    )
    for name, n in sorted(totals.items()):
        if name not in _NOT_ACTIONS:
            actions.add_metric([name], n)
    yield actions
    yield CounterMetricFamily(
        "rsjobs_reaper_sweep_seconds", "the time this reaper's sweeps took",
        totals.get("ms", 0) / 1000,
    )  # fmt: skip
