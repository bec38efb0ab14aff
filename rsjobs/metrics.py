"""Prometheus metrics of a namespace, read from Redis at scrape time, for every process
that exports them: the web app's ``/metrics``, and ``rsjobs worker --metrics-port N`` and
``rsjobs reaper --metrics-port N`` (:func:`serve_metrics`, on 127.0.0.1 by default), each
adding its own counters to what it reads from Redis.

What the transition scripts keep (the ``stats`` and ``costs`` hashes, the queue streams,
the workers hash) is the same for every reader, so every process reports the same
namespace figures:

- ``rsjobs_redis_up``: 1 when this scrape could read Redis
- ``rsjobs_queue_depth{queue}``: tasks waiting for a worker (PENDING): the backlog
- ``rsjobs_queue_oldest_pending_age_seconds{queue}``: how long the oldest work entry no
  worker has read yet has waited (0: none)
- ``rsjobs_queue_paused{queue}``, ``rsjobs_queue_stream_length{queue}``
- ``rsjobs_queue_workers_wanted{queue}``: the autoscaling signal (rsjobs/scaling.py)
- ``rsjobs_tasks{queue,state}``, ``rsjobs_tasks_finished_total{queue,state}``
- ``rsjobs_transitions_total{event}``, ``rsjobs_rejected_total{event}``,
  ``rsjobs_late_results_rejected_total{event}``, ``rsjobs_reclaims_total``
- ``rsjobs_workers``, ``rsjobs_events_stream_length``
- ``rsjobs_task_duration_seconds{queue,state}``: START -> terminal of a task's last attempt
- per stage and type (``by`` = queue, type or stage; ``name`` its name; a stage is
  ``<definition>/<stage>``; owners are left out: there is no bound on them, the API has
  their totals), from the cost accounting (``docs/costs.md``):

  - ``rsjobs_attempts_total{by,name,category}``: ended attempts per category (ok, failed,
    reclaimed, timed_out, cancelled, superseded): the failure and timeout rates are
    ``category="failed"`` / ``"timed_out"`` over all
  - ``rsjobs_attempt_run_seconds_total{by,name,category}``: their workers' time
  - ``rsjobs_attempt_wait_seconds_total{by,name,category}``: deferred attempts' waits
  - ``rsjobs_charges_total{by,name,unit,category}``: what handlers charged
  - ``rsjobs_attempt_duration_seconds{by,name}``: a histogram of START -> end of every
    ended attempt (its wait included)
  - ``rsjobs_retries_total{by,name}``: attempts whose end retried their task
- ``rsjobs_workflow_duration_seconds{definition,status}``: a histogram of a workflow's
  start -> finish (PUBLISHED, FAILED, CANCELLED)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from .costs import BUILTIN_UNITS, SCALE, split_field
from .errors import RsjobsError
from .model import TERMINAL, State
from .scaling import per_worker, serving, slots_wanted, workers_wanted

__all__ = [
    "CONTENT_TYPE",
    "DURATION_BUCKETS",
    "NamespaceCollector",
    "Probes",
    "Snapshot",
    "read_snapshot",
    "serve_metrics",
]

log = logging.getLogger("rsjobs.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: Generation work runs from a second to an hour.
#: the duration histograms' bucket bounds in seconds (``DURATION_LE_MS`` in ``fsm.lua``)
DURATION_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, float("inf"))
#: the same bounds as the stats hash names them (ms; "inf" past the last)
LE_MS = [str(round(b * 1000)) for b in DURATION_BUCKETS[:-1]] + ["inf"]

_LIVE_STATES = [s.value for s in State if s.value not in TERMINAL]
#: the dimensions Prometheus gets (owners are unbounded)
_BY = ("queue", "type", "stage")


class Snapshot:
    """What one scrape read from Redis."""

    def __init__(self) -> None:
        self.up = False
        self.stats: dict[str, int] = {}
        self.queues: list[str] = []
        self.lengths: dict[str, int] = {}
        self.workers = 0
        self.events = 0
        self.paused: set[str] = set()
        self.costs: dict[str, int] = {}
        #: queue -> when its oldest unread work entry was queued (ms; 0: none)
        self.oldest: dict[str, int] = {}
        #: the live workers' registrations (JSON: their queues and concurrency)
        self.registrations: list[str] = []
        self.now_ms = 0


async def read_snapshot(store: Any) -> Snapshot:
    """Read what a scrape reports from ``store`` (a :class:`rsjobs.store.Store`). Raises
    what the store raises."""
    o = await store.tasks.overview()
    snap = Snapshot()
    snap.stats, snap.queues, snap.lengths = o.counters, o.queues, o.lengths
    snap.workers, snap.events, snap.paused = o.workers, o.events, o.paused
    snap.costs = await store.costs.raw()
    if snap.queues:
        snap.oldest = await store.index.oldest_pending(snap.queues)
    snap.now_ms = await store.reaper.now_ms()
    snap.registrations = await store.reaper.registrations()
    snap.up = True
    return snap


def _histogram(counts: list[int], total_ms: int) -> tuple[list[tuple[str, float]], float]:
    cumulative = 0
    buckets: list[tuple[str, float]] = []
    for bound, n in zip(DURATION_BUCKETS, counts, strict=True):
        cumulative += n
        buckets.append(("+Inf" if bound == float("inf") else str(bound), cumulative))
    return buckets, total_ms / 1000


def _task_durations(s: Snapshot) -> HistogramMetricFamily:
    """The duration histogram from the stats hash's per-bucket counts and sums."""
    hist = HistogramMetricFamily(
        "rsjobs_task_duration_seconds",
        "START to terminal state of a task's last attempt (Redis TIME)",
        labels=["queue", "state"],
    )
    for q in s.queues:
        for st in sorted(TERMINAL):
            counts = [s.stats.get(f"dur:{q}:{st}:{le}", 0) for le in LE_MS]
            if any(counts):
                buckets, total = _histogram(counts, s.stats.get(f"dur_ms:{q}:{st}", 0))
                hist.add_metric([q, st], buckets, total)
    return hist


def _attempt_families(s: Snapshot) -> Iterator[Metric]:
    """The per queue, type and stage figures: the costs hash and the stats hash's
    attempt histograms and retries."""
    attempts = CounterMetricFamily(
        "rsjobs_attempts", "ended attempts per category (ok or a waste kind)",
        labels=["by", "name", "category"],
    )  # fmt: skip
    run = CounterMetricFamily(
        "rsjobs_attempt_run_seconds", "worker time of ended attempts (START to end or DEFER)",
        labels=["by", "name", "category"],
    )  # fmt: skip
    wait = CounterMetricFamily(
        "rsjobs_attempt_wait_seconds", "deferred attempts' waits (DEFER to end)",
        labels=["by", "name", "category"],
    )  # fmt: skip
    charges = CounterMetricFamily(
        "rsjobs_charges", "what handlers charged to ended attempts, in their unit",
        labels=["by", "name", "unit", "category"],
    )  # fmt: skip
    # every series with attempts has its worker time, 0 when none was counted (attempts
    # that each ran under 1 ms store no run_ms field): a counter never vanishes
    run_s: dict[tuple[str, str, str], float] = {}
    for field, value in sorted(s.costs.items()):
        parts = split_field(field)
        if parts is None or parts[0] not in _BY:
            continue
        dim, name, unit, category = parts
        if unit == "attempts":
            attempts.add_metric([dim, name, category], value)
            run_s.setdefault((dim, name, category), 0.0)
        elif unit == "run_ms":
            run_s[(dim, name, category)] = value / 1000
        elif unit == "wait_ms":
            wait.add_metric([dim, name, category], value / 1000)
        elif unit not in BUILTIN_UNITS:
            charges.add_metric([dim, name, unit, category], value / SCALE)
    for (dim, name, category), seconds in sorted(run_s.items()):
        run.add_metric([dim, name, category], seconds)
    yield from (attempts, run, wait, charges)
    hist = HistogramMetricFamily(
        "rsjobs_attempt_duration_seconds",
        "START to end of ended attempts, a deferred wait included (Redis TIME)",
        labels=["by", "name"],
    )
    retries = CounterMetricFamily(
        "rsjobs_retries", "ended attempts whose end retried their task", labels=["by", "name"]
    )
    names: set[tuple[str, str]] = set()
    for field, value in s.stats.items():
        if field.startswith("adur_ms:"):
            dim, _, name = field[len("adur_ms:") :].partition("|")
            if dim in _BY:
                names.add((dim, name))
        elif field.startswith("retry:"):
            dim, _, name = field[len("retry:") :].partition("|")
            if dim in _BY:
                retries.add_metric([dim, name], value)
    for dim, name in sorted(names):
        counts = [s.stats.get(f"adur:{dim}|{name}|{le}", 0) for le in LE_MS]
        buckets, total = _histogram(counts, s.stats.get(f"adur_ms:{dim}|{name}", 0))
        hist.add_metric([dim, name], buckets, total)
    yield from (hist, retries)
    wf = HistogramMetricFamily(
        "rsjobs_workflow_duration_seconds", "start to finish of finished workflows",
        labels=["definition", "status"],
    )  # fmt: skip
    finished: set[tuple[str, str]] = set()
    for field in s.stats:
        if field.startswith("wfdur_ms:"):
            d, _, status = field[len("wfdur_ms:") :].rpartition("|")
            finished.add((d, status))
    for d, status in sorted(finished):
        counts = [s.stats.get(f"wfdur:{d}|{status}|{le}", 0) for le in LE_MS]
        buckets, total = _histogram(counts, s.stats.get(f"wfdur_ms:{d}|{status}", 0))
        wf.add_metric([d, status], buckets, total)
    yield wf


def namespace_families(s: Snapshot) -> Iterator[Metric]:
    """Every family a scrape reports from Redis."""
    yield GaugeMetricFamily("rsjobs_redis_up", "1 when this scrape could read Redis", s.up)
    depth = GaugeMetricFamily(
        "rsjobs_queue_depth", "tasks waiting for a worker (PENDING)", labels=["queue"]
    )
    oldest = GaugeMetricFamily(
        "rsjobs_queue_oldest_pending_age_seconds",
        "how long the queue's oldest work entry no worker has read yet has waited (0: none)",
        labels=["queue"],
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
        "rsjobs_tasks_finished", "tasks that reached a terminal state", labels=["queue", "state"]
    )
    paused = GaugeMetricFamily(
        "rsjobs_queue_paused", "1 while the queue is paused (workers start nothing of it)",
        labels=["queue"],
    )  # fmt: skip
    wanted = GaugeMetricFamily(
        "rsjobs_queue_workers_wanted",
        "workers to run every waiting and running task of the queue at once, in slots of "
        "the live workers serving it (0 when nothing waits or runs; rsjobs/scaling.py)",
        labels=["queue"],
    )
    served = serving(s.registrations)
    for q in s.queues:
        need = slots_wanted(s.stats.get(f"{q}:PENDING", 0), s.stats.get(f"{q}:RUNNING", 0), 0, 0)
        wanted.add_metric([q], workers_wanted(need, per_worker(*served.get(q, (0, 0)))))
        paused.add_metric([q], 1 if q in s.paused else 0)
        depth.add_metric([q], max(0, s.stats.get(f"{q}:PENDING", 0)))
        since = s.oldest.get(q, 0)
        oldest.add_metric([q], max(0, s.now_ms - since) / 1000 if since else 0)
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
    yield from (depth, oldest, length, paused, wanted, live, done, trans, rej, late)
    yield _task_durations(s)
    yield from _attempt_families(s)
    yield CounterMetricFamily(
        "rsjobs_reclaims", "tasks taken back from a lost worker", s.stats.get("ev:RECLAIM", 0)
    )
    yield GaugeMetricFamily("rsjobs_workers", "registered workers", s.workers)
    yield GaugeMetricFamily(
        "rsjobs_events_stream_length", "entries in the namespace events stream", s.events
    )


class NamespaceCollector(Collector):
    """The namespace families of the last snapshot, and ``more()``: the families of the
    process that serves them."""

    def __init__(self, more: Callable[[], Iterator[Metric]] | None = None) -> None:
        self.snap = Snapshot()
        self.more = more

    def collect(self) -> Iterator[Metric]:
        yield from namespace_families(self.snap)
        if self.more is not None:
            yield from self.more()


class Exporter:
    """A private registry (several processes' parts may live in one process) holding the
    namespace collector and the process's own; :meth:`render` reads Redis first."""

    def __init__(self, store: Any, more: Callable[[], Iterator[Metric]] | None = None) -> None:
        self.store = store
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = NamespaceCollector(more)
        self.registry.register(self.collector)

    async def render(self) -> bytes:
        """The exposition text, reading Redis now (a failed read reports redis_up 0)."""
        try:
            snap = await read_snapshot(self.store)
        except (RsjobsError, OSError):
            snap = Snapshot()
        self.collector.snap = snap
        return generate_latest(self.registry)


#: the longest request line and headers a metrics server reads
_MAX_REQUEST = 8192


class Probes:
    """A process's own health, for ``GET /livez`` and ``GET /readyz`` beside its metrics
    (no Redis read at probe time: what the process last saw). ``live``: its main loop
    turned within ``stale_s`` (``beat()``; a process whose event loop is blocked does not
    answer at all); ``ready``: live, and its last Redis contact succeeded within
    ``stale_s`` (``contact()``; none yet: not ready)."""

    def __init__(self, stale_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stale_s = stale_s
        self.clock = clock
        self.beat_at = clock()
        self.contact_at: float | None = None

    def beat(self) -> None:
        self.beat_at = self.clock()

    def contact(self) -> None:
        self.contact_at = self.clock()

    def live(self) -> bool:
        return self.clock() - self.beat_at <= self.stale_s

    def ready(self) -> bool:
        at = self.contact_at
        return self.live() and at is not None and self.clock() - at <= self.stale_s

    def answer(self, path: str) -> tuple[str, bytes]:
        ok = self.live() if path == "/livez" else self.ready()
        return ("200 OK", b"ok\n") if ok else ("503 Service Unavailable", b"not ok\n")


async def serve_metrics(
    render: Callable[[], Awaitable[bytes]],
    port: int,
    host: str = "127.0.0.1",
    probes: Probes | None = None,
) -> asyncio.Server:
    """An HTTP server for ``GET /metrics`` (and ``/``) on ``host:port``: the text
    ``render()`` returns; with ``probes``, ``GET /livez`` and ``/readyz`` too (200 or 503,
    see :class:`Probes`). Anything else answers 404 (405 for another method); a broken
    request is dropped. Close it with ``server.close()``."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            method, path, *_ = head[:_MAX_REQUEST].split(b"\r\n", 1)[0].decode().split(" ")
            path = path.split("?", 1)[0]
            if method not in ("GET", "HEAD"):
                status, body, ctype = "405 Method Not Allowed", b"GET only\n", "text/plain"
            elif probes is not None and path in ("/livez", "/readyz"):
                (status, body), ctype = probes.answer(path), "text/plain"
            elif path not in ("/metrics", "/"):
                status, body, ctype = "404 Not Found", b"try /metrics\n", "text/plain"
            else:
                status, body, ctype = "200 OK", await render(), CONTENT_TYPE
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}"
                "\r\nConnection: close\r\n\r\n".encode()
                + (body if method != "HEAD" else b"")
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
                ConnectionError, UnicodeDecodeError, ValueError):  # fmt: skip
            pass  # a broken or slow request: dropped
        except Exception:  # one scrape must not stop the process it runs in
            log.exception("metrics: answering a scrape failed")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    return await asyncio.start_server(handle, host, port, limit=_MAX_REQUEST)
