"""A worker's own Prometheus figures, served with the namespace's (:mod:`rsjobs.metrics`)
by ``rsjobs worker --metrics-port N``:

- ``rsjobs_worker_attempts_total{type,end}``: attempts this process ended (COMPLETE,
  FAIL, TIMEOUT, REQUEUE, DEFER), whatever the scripts answered
- ``rsjobs_worker_handler_seconds{type}``: a histogram of its handlers' time, START's
  reply to the end (this process's clock)
- ``rsjobs_worker_charges_total{type,unit}``: what its handlers charged
- ``rsjobs_worker_slots``, ``rsjobs_worker_busy_slots``: its concurrency, and the slots
  its jobs and starts hold

Labels are the registry's task types: bounded by the handlers a worker has.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric

from ..costs import SCALE
from ..metrics import DURATION_BUCKETS

__all__ = ["WorkerMetrics"]


class WorkerMetrics:
    """The counters one worker keeps (a Worker each: several may share a process)."""

    def __init__(self, slots: int, busy: Callable[[], int]) -> None:
        self.slots = slots
        self.busy = busy
        self.ended: Counter[tuple[str, str]] = Counter()
        self.charged: Counter[tuple[str, str]] = Counter()
        #: type -> bucket counts (DURATION_BUCKETS, not cumulative) and the sum of seconds
        self.handler: dict[str, tuple[list[int], float]] = {}

    def attempt_ended(
        self, ttype: str, end: str, seconds: float, charges: Mapping[str, int]
    ) -> None:
        """An attempt this worker ended: its type, end, handler time and charges
        (millionths)."""
        self.ended[(ttype, end)] += 1
        for unit, micro in charges.items():
            self.charged[(ttype, unit)] += micro
        counts, total = self.handler.get(ttype) or ([0] * len(DURATION_BUCKETS), 0.0)
        for i, bound in enumerate(DURATION_BUCKETS):
            if seconds <= bound:
                counts[i] += 1
                break
        self.handler[ttype] = (counts, total + max(0.0, seconds))

    def families(self) -> Iterator[Metric]:
        ended = CounterMetricFamily(
            "rsjobs_worker_attempts", "attempts this worker ended, by how",
            labels=["type", "end"],
        )  # fmt: skip
        for (ttype, end), n in sorted(self.ended.items()):
            ended.add_metric([ttype, end], n)
        charged = CounterMetricFamily(
            "rsjobs_worker_charges", "what this worker's handlers charged, in their unit",
            labels=["type", "unit"],
        )  # fmt: skip
        for (ttype, unit), micro in sorted(self.charged.items()):
            charged.add_metric([ttype, unit], micro / SCALE)
        hist = HistogramMetricFamily(
            "rsjobs_worker_handler_seconds", "this worker's handler time per attempt",
            labels=["type"],
        )  # fmt: skip
        for ttype, (counts, total) in sorted(self.handler.items()):
            cumulative, buckets = 0, []
            for bound, n in zip(DURATION_BUCKETS, counts, strict=True):
                cumulative += n
                buckets.append(("+Inf" if bound == float("inf") else str(bound), cumulative))
            hist.add_metric([ttype], buckets, total)
        yield from (ended, charged, hist)
        yield GaugeMetricFamily("rsjobs_worker_slots", "this worker's concurrency", self.slots)
        yield GaugeMetricFamily(
            "rsjobs_worker_busy_slots", "slots its jobs and starts hold now", self.busy()
        )
