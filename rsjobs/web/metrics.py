"""Prometheus metrics, read from Redis at scrape time.

Scrape-time metrics come from what the transition scripts keep (the ``stats`` hash, the
queue streams, the workers hash), so every web process reports the same numbers:

- ``rsjobs_redis_up``: 1 when this scrape could read Redis
- ``rsjobs_queue_depth{queue}``: tasks waiting for a worker (PENDING)
- ``rsjobs_queue_paused{queue}``: 1 while the queue is paused
- ``rsjobs_queue_stream_length{queue}``: entries in the queue stream (waiting + running)
- ``rsjobs_tasks{queue,state}``: tasks now in each non-terminal state
- ``rsjobs_tasks_finished_total{queue,state}``: tasks that reached each terminal state
- ``rsjobs_transitions_total{event}``: applied transitions per event (``ev:*``)
- ``rsjobs_reclaims_total``: tasks taken back from a lost worker (``ev:RECLAIM``)
- ``rsjobs_rejected_total{event}``: refused events per event (``rej:*``)
- ``rsjobs_late_results_rejected_total{event}``: refused COMPLETE / FAIL, i.e. results
  from a worker that had lost its lease (zombie or late worker)
- ``rsjobs_workers``: registered workers
- ``rsjobs_events_stream_length``: entries in the namespace events stream
- ``rsjobs_task_duration_seconds{queue,state}``: a histogram of START -> terminal time of
  the last attempt (Redis TIME), for every task that was started: the transition scripts
  count it in the stats hash (``dur:<queue>:<STATE>:<le ms>`` per bucket,
  ``dur_ms:<queue>:<STATE>`` the sum; ``observe_duration`` in ``fsm.lua``)

Per process:

- ``rsjobs_web_event_streams``: open SSE connections; ``rsjobs_web_hub_entries_read_total``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ..errors import RsjobsError
from ..model import TERMINAL, State
from ..store.tasks import Tasks

__all__ = ["CONTENT_TYPE", "DURATION_BUCKETS", "Metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: Generation work runs from a second to an hour.
#: the duration histogram's bucket bounds in seconds (``DURATION_LE_MS`` in ``fsm.lua``)
DURATION_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, float("inf"))
#: the same bounds as the stats hash names them (ms; "inf" past the last)
_LE_MS = [str(round(b * 1000)) for b in DURATION_BUCKETS[:-1]] + ["inf"]

_LIVE_STATES = [s.value for s in State if s.value not in TERMINAL]


class _Snapshot:
    """What one scrape read from Redis."""

    def __init__(self) -> None:
        self.up = False
        self.stats: dict[str, int] = {}
        self.queues: list[str] = []
        self.lengths: dict[str, int] = {}
        self.workers = 0
        self.events = 0
        self.paused: set[str] = set()


def _durations(s: _Snapshot) -> HistogramMetricFamily:
    """The duration histogram from the stats hash's per-bucket counts and sums."""
    hist = HistogramMetricFamily(
        "rsjobs_task_duration_seconds",
        "START to terminal state of a task's last attempt (Redis TIME)",
        labels=["queue", "state"],
    )
    for q in s.queues:
        for st in sorted(TERMINAL):
            counts = [s.stats.get(f"dur:{q}:{st}:{le}", 0) for le in _LE_MS]
            if not any(counts):
                continue
            cumulative, buckets = 0, []
            for bound, n in zip(DURATION_BUCKETS, counts, strict=True):
                cumulative += n
                buckets.append(("+Inf" if bound == float("inf") else str(bound), cumulative))
            hist.add_metric([q, st], buckets, s.stats.get(f"dur_ms:{q}:{st}", 0) / 1000)
    return hist


class _RedisCollector(Collector):
    def __init__(self, owner: Metrics) -> None:
        self.owner = owner
        self.snap = _Snapshot()

    def collect(self) -> Iterator[Metric]:
        s = self.snap
        yield GaugeMetricFamily("rsjobs_redis_up", "1 when this scrape could read Redis", s.up)
        depth = GaugeMetricFamily(
            "rsjobs_queue_depth", "tasks waiting for a worker (PENDING)", labels=["queue"]
        )
        length = GaugeMetricFamily(
            "rsjobs_queue_stream_length",
            "entries in the queue stream (waiting and running)",
            labels=["queue"],
        )
        live = GaugeMetricFamily(
            "rsjobs_tasks", "tasks now in each non-terminal state", labels=["queue", "state"]
        )
        done = CounterMetricFamily(
            "rsjobs_tasks_finished",
            "tasks that reached a terminal state",
            labels=["queue", "state"],
        )
        paused = GaugeMetricFamily(
            "rsjobs_queue_paused", "1 while the queue is paused (workers start nothing of it)",
            labels=["queue"],
        )  # fmt: skip
        for q in s.queues:
            paused.add_metric([q], 1 if q in s.paused else 0)
            depth.add_metric([q], max(0, s.stats.get(f"{q}:PENDING", 0)))
            length.add_metric([q], s.lengths.get(q, 0))
            for st in _LIVE_STATES:
                live.add_metric([q, st], max(0, s.stats.get(f"{q}:{st}", 0)))
            for st in sorted(TERMINAL):
                done.add_metric([q, st], s.stats.get(f"{q}:{st}", 0))
        trans = CounterMetricFamily(
            "rsjobs_transitions", "applied transitions per event", labels=["event"]
        )
        rej = CounterMetricFamily("rsjobs_rejected", "refused events per event", labels=["event"])
        late = CounterMetricFamily(
            "rsjobs_late_results_rejected",
            "results refused because the worker no longer held the lease",
            labels=["event"],
        )
        for field, value in sorted(s.stats.items()):
            kind, _, event = field.partition(":")
            if kind == "ev":
                trans.add_metric([event], value)
            elif kind == "rej":
                rej.add_metric([event], value)
        for event in ("COMPLETE", "FAIL"):
            late.add_metric([event], s.stats.get(f"rej:{event}", 0))
        yield from (depth, length, paused, live, done, trans, rej, late, _durations(s))
        yield CounterMetricFamily(
            "rsjobs_reclaims", "tasks taken back from a lost worker", s.stats.get("ev:RECLAIM", 0)
        )
        yield GaugeMetricFamily("rsjobs_workers", "registered workers", s.workers)
        yield GaugeMetricFamily(
            "rsjobs_events_stream_length", "entries in the namespace events stream", s.events
        )
        yield GaugeMetricFamily(
            "rsjobs_web_event_streams", "open SSE connections", self.owner.open_streams()
        )
        yield CounterMetricFamily(
            "rsjobs_web_hub_entries_read",
            "events stream entries read by this process",
            self.owner.entries_read(),
        )


class Metrics:
    """The metrics of one app: a private registry (several apps may live in one process)."""

    def __init__(self, tasks: Tasks) -> None:
        self.tasks = tasks
        self.registry = CollectorRegistry(auto_describe=False)
        self._collector = _RedisCollector(self)
        self.registry.register(self._collector)
        #: set by the app: open SSE connections, entries read by the hub
        self.open_streams: Callable[[], int] = lambda: 0
        self.entries_read: Callable[[], int] = lambda: 0

    async def _read(self) -> _Snapshot:
        o = await self.tasks.overview()
        snap = _Snapshot()
        snap.stats, snap.queues, snap.lengths = o.counters, o.queues, o.lengths
        snap.workers, snap.events, snap.paused = o.workers, o.events, o.paused
        snap.up = True
        return snap

    async def render(self) -> bytes:
        """The exposition text, reading Redis now (a failed read reports redis_up 0)."""
        try:
            snap = await self._read()
        except (RsjobsError, OSError):
            snap = _Snapshot()
        self._collector.snap = snap
        return generate_latest(self.registry)
