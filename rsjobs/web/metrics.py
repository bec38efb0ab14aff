"""Prometheus metrics: read from Redis at scrape time, plus task durations seen by the hub.

Scrape-time metrics come from what the transition scripts keep (the ``stats`` hash, the
queue streams, the workers hash), so every web process reports the same numbers:

- ``rsjobs_redis_up``: 1 when this scrape could read Redis
- ``rsjobs_queue_depth{queue}``: tasks waiting for a worker (PENDING)
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

Per process:

- ``rsjobs_task_duration_seconds{queue,state}``: a histogram of START -> terminal time of
  the last attempt, from the ``ts`` fields (Redis TIME) of the events the hub reads.
  Only tasks whose START this process saw are observed, so a process started mid-task
  does not count it; every web process observes every task, so aggregate with ``max``
  (or scrape one instance), not ``sum``.
- ``rsjobs_web_event_streams``: open SSE connections; ``rsjobs_web_hub_entries_read_total``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ..errors import RsjobsError
from ..model import TERMINAL, State
from ..store.tasks import Tasks

__all__ = ["CONTENT_TYPE", "DURATION_BUCKETS", "Metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: Generation work runs from a second to an hour.
DURATION_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, float("inf"))

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
        for q in s.queues:
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
        yield from (depth, length, live, done, trans, rej, late)
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

    def __init__(self, tasks: Tasks, *, max_tracked: int = 100_000) -> None:
        self.tasks = tasks
        self.registry = CollectorRegistry(auto_describe=False)
        self.duration = Histogram(
            "rsjobs_task_duration_seconds",
            "START to terminal state of a task's last attempt (Redis TIME)",
            labelnames=["queue", "state"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self._collector = _RedisCollector(self)
        self.registry.register(self._collector)
        self._started: OrderedDict[str, int] = OrderedDict()
        self._max_tracked = max_tracked
        #: set by the app: open SSE connections, entries read by the hub
        self.open_streams: Callable[[], int] = lambda: 0
        self.entries_read: Callable[[], int] = lambda: 0

    def observe(self, task_id: str, hid: str, fields: dict[str, str]) -> None:
        """Hub observer: remember START times, observe the duration at a terminal state."""
        if fields.get("rej") == "1":
            return
        ev, to = fields.get("ev", ""), fields.get("to", "")
        if ev == "START":
            self._started[task_id] = int(fields.get("ts") or 0)
            self._started.move_to_end(task_id)
            if len(self._started) > self._max_tracked:
                self._started.popitem(last=False)
        elif to in TERMINAL:
            start = self._started.pop(task_id, None)
            if start:
                seconds = max(0, int(fields.get("ts") or 0) - start) / 1000
                self.duration.labels(fields.get("q", ""), to).observe(seconds)

    async def _read(self) -> _Snapshot:
        o = await self.tasks.overview()
        snap = _Snapshot()
        snap.stats, snap.queues, snap.lengths = o.counters, o.queues, o.lengths
        snap.workers, snap.events = o.workers, o.events
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
