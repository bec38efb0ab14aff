"""The reaper sidecar: one sweep recovers lost deliveries, enforces deadlines, releases
successors, promotes delayed work, keeps the workers registry honest and trims the list
indexes with retention;
:meth:`Reaper.run` sweeps forever.

Any number of reapers may run beside the workers. A guard key (``SET NX PX``) lets one
of them do a given sweep and the others skip it, which only saves work: every change is
made by a script that re-checks the task first, so two reapers sweeping at once are as
safe as one. Redis restarts and failovers are ridden out with reconnects and backoff.

No one task or workflow can stop it: each step runs on its own, a batch that fails on its
data is split entry by entry and the entry that fails alone is quarantined
(:mod:`rsjobs.reaper.quarantine`), and any other error ends one sweep, logged with its
traceback, never the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TypeVar

import msgspec
from redis.asyncio import Redis

from ..errors import ConfigError, NotMigrated, RedisUnavailable
from ..logfmt import FIELDS
from ..metrics import Exporter, Probes, serve_metrics
from ..settings import Settings
from ..store import Store
from ..store.connection import connect
from ..store.isolation import about_item
from ..store.transient import is_failover
from .config import ReaperConfig
from .deadlines import enforce_deadlines
from .metrics import reaper_families
from .promotion import promote
from .quarantine import log_error
from .recovery import recover
from .registry import sweep_workers

__all__ = ["Reaper", "SweepReport"]

log = logging.getLogger("rsjobs.reaper")

T = TypeVar("T")

#: longest pause between two attempts while Redis is unreachable (seconds)
MAX_BACKOFF = 2.0
#: who the reaper's scripts name as the source of what they do
SOURCE = "reaper"


class SweepReport(msgspec.Struct, kw_only=True):
    """What one sweep did (logged as one JSON line)."""

    reaper: str
    sweep: int
    #: True when another reaper held the guard key: nothing was done
    skipped: bool = False
    guard_holder: str = ""
    queues: int = 0
    #: recovery (reclaim.lua): RECLAIM -> PENDING / FAILED, DEADLETTER, re-delivered
    retried: int = 0
    failed: int = 0
    deadlettered: int = 0
    redelivered: int = 0
    #: idle entries left alone: lease still held / no longer idle; garbage entries dropped
    alive: int = 0
    busy: int = 0
    stale_entries: int = 0
    #: deadlines (deadline.lua): TIMEOUT -> SCHEDULED / TIMED_OUT, EXPIRE -> TIMED_OUT
    timeout_retried: int = 0
    timed_out: int = 0
    expired: int = 0
    #: the release step (successors): release entries handled, successors released onto
    #: their queues and cancelled by their predecessors' ends
    release_entries: int = 0
    successors_released: int = 0
    successors_cancelled: int = 0
    #: delayed or backed-off tasks moved to their queues
    promoted: int = 0
    #: events stream entries older than the retention, dropped
    events_trimmed: int = 0
    workers_dead: list[str] = msgspec.field(default_factory=list)
    workers_forgotten: list[str] = msgspec.field(default_factory=list)
    consumers_deleted: int = 0
    #: tasks whose data made a script fail, moved to FAILED (DEADLETTER) or taken out of
    #: the index that kept bringing them back; both are on the dead-letter stream
    quarantined: int = 0
    #: steps, or items of a step, that failed unexpectedly and were left as they were
    #: (logged with a traceback as ``item_error``); the next sweep tries again
    errors: int = 0
    #: workflows re-driven (rsjobs.workflows.WorkflowDriver): visited, stages spawned,
    #: moved to FAILED because they cannot go on (ABORT), dropped from the active set
    #: because not even that is possible
    workflows_visited: int = 0
    workflows_spawned: int = 0
    workflows_aborted: int = 0
    workflows_quarantined: int = 0
    #: entries of the list indexes removed with their tasks after the retention period
    #: (done:<STATE> entries and tags members; trim.lua)
    index_trimmed: int = 0
    #: queues whose counters were sampled for their per-minute series (series.lua)
    series_sampled: int = 0
    #: ticks of recurring schedules this sweep fired (rsjobs.schedules)
    ticks_fired: int = 0
    #: the shards this reaper swept (a sharded namespace: those whose guard it got)
    shards: list[int] = msgspec.field(default_factory=list)
    #: per-owner RUNNING counts found wrong and set right (recount.lua; rsjobs.limits)
    counts_fixed: int = 0
    ms: int = 0

    @property
    def changed(self) -> int:
        """How many tasks this sweep moved (or re-delivered)."""
        return (
            self.retried
            + self.failed
            + self.deadlettered
            + self.redelivered
            + self.timeout_retried
            + self.timed_out
            + self.expired
            + self.promoted
            + self.successors_released
            + self.successors_cancelled
            + self.quarantined
            + self.workflows_spawned
            + self.workflows_aborted
            + self.workflows_quarantined
        )


class Reaper:
    """Sweeps one namespace: recovery, deadlines, promotion, workers registry.

    Pass a ``redis`` client (``decode_responses=True``, e.g. :func:`rsjobs.connect`) or
    a ``url``. ``settings`` must match the workers' (namespace, retention). All timings
    are in :class:`ReaperConfig`, in milliseconds. ``metrics_port``: serve Prometheus
    metrics (the namespace's and this reaper's own, :mod:`rsjobs.metrics`) at
    ``http://<metrics_host>:<port>/metrics`` while :meth:`run` runs (0: a free port).
    """

    def __init__(
        self,
        *,
        redis: Redis | None = None,
        url: str = "redis://127.0.0.1:6379/0",
        settings: Settings | None = None,
        config: ReaperConfig | None = None,
        name: str | None = None,
        handle_signals: bool = False,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
    ) -> None:
        if metrics_port is not None and not 0 <= metrics_port <= 65535:
            raise ConfigError("metrics_port must be a TCP port (0: any free one)")
        self.redis = redis if redis is not None else connect(url)
        self._own_redis = redis is None
        self._url = url if redis is None else None
        self.settings = settings or Settings()
        self.config = config or ReaperConfig()
        self.store = Store(self.redis, self.settings)
        self.keys = self.store.keys
        from ..workflows.driver import WorkflowDriver

        self._driver = WorkflowDriver(redis=self.redis, settings=self.settings, source="reaper")
        self.name = name or f"reaper-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.handle_signals = handle_signals
        #: sweeps completed (skipped ones included: the guard said another reaper did it)
        self.sweeps = 0
        #: running sums of the numeric fields of every sweep report (for tests, metrics)
        self.totals: Counter[str] = Counter()
        #: /livez and /readyz beside /metrics: live while the sweep loop turns, ready while
        #: its sweeps reach Redis (three intervals of slack, at least 10 s)
        self.probes = Probes(max(3 * self.config.interval_ms / 1000, 10.0))
        self._stopping = asyncio.Event()
        #: per shard, the minute (ms) of the last series sample this reaper took or found
        #: taken, and the queues it sampled
        self._sampled: dict[int, tuple[int, frozenset[str]]] = {}
        #: Prometheus metrics (the namespace's and this reaper's) on metrics_port (None:
        #: not served) at metrics_host, while run() runs
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        self.metrics_server: asyncio.Server | None = None
        #: when this reaper last recounted the per-owner RUNNING counts (monotonic s)
        #: per shard, when its per-owner RUNNING counts were last recounted (monotonic)
        self._recounted: dict[int, float] = {}

    async def close(self) -> None:
        if self._own_redis:
            await self.store.close()

    def stop(self) -> None:
        """Ask :meth:`run` to return after the current sweep."""
        self._stopping.set()

    # -- one sweep ---------------------------------------------------------------------

    async def _take_guard(self) -> str:
        """'' when this reaper may sweep now, else the name of the reaper that does."""
        return await self.store.reaper.take_guard(self.name, self.config.guard_ms)

    async def sweep_once(self) -> SweepReport:
        """One full sweep now (unless another reaper holds the guard); returns its report.

        A sharded namespace is swept shard by shard: each shard has a guard of its own,
        and this reaper sweeps the shards whose guard it gets (several reapers split
        them), each by the clock of the node that serves it. Schedules are fired with
        shard 0 (they live there)."""
        cfg = self.config
        t0 = time.monotonic()
        report = SweepReport(reaper=self.name, sweep=self.sweeps + 1)
        # a namespace of an earlier layout is not swept (it would be misread): once per run
        await self.store.require_layout()
        stores = await self.store.each()
        held: list[Store] = []
        for store in stores:
            if cfg.guard:
                holder = await store.reaper.take_guard(self.name, cfg.guard_ms)
                if holder:
                    report.guard_holder = report.guard_holder or holder
                    continue
            held.append(store)
        if not held:
            report.skipped = True
            self.sweeps += 1
            return report
        if len(stores) > 1:
            report.shards = [s.number for s in held]
        for store in held:
            await self._sweep_shard(store, report)
        # workflows whose tasks the sweep (or anything else) ended advance here too, so a
        # deployment needs no separate driver process
        shards = None if len(stores) == 1 else [s.number for s in held]
        drive = await self._step(report, "workflows", lambda: self._driver.sweep_once(shards))
        if drive is not None:
            report.workflows_visited = drive.visited
            report.workflows_spawned = drive.spawned_workflows
            report.workflows_aborted = drive.aborted
            report.workflows_quarantined = drive.quarantined
            report.errors += drive.errors
        report.ms = int((time.monotonic() - t0) * 1000)
        self.sweeps += 1
        self.totals.update(
            {
                k: v
                for k, v in msgspec.structs.asdict(report).items()
                if type(v) is int and k != "sweep"
            }
        )
        return report

    async def _sweep_shard(self, store: Store, report: SweepReport) -> None:
        """The steps of one sweep on one shard (the only one, unsharded)."""
        cfg = self.config
        queues = await store.reaper.queues()
        report.queues = max(report.queues, len(queues))
        # each step on its own: one that fails on some data is logged and counted, and the
        # sweep goes on with the next (a failure of Redis itself ends the sweep)
        rec = await self._step(report, "recovery", lambda: recover(store, queues, cfg))
        if rec is not None:
            report.retried += rec["RETRIED"]
            report.failed += rec["FAILED"]
            report.deadlettered += rec["DEADLETTERED"]
            report.redelivered += rec["REDELIVERED"]
            report.alive += rec["ALIVE"]
            report.busy += rec["BUSY"]
            report.stale_entries += rec["STALE"]
            self._isolated(report, rec)

        now_ms = await store.reaper.now_ms()  # the clock of the shard's node
        dl = await self._step(report, "deadlines", lambda: enforce_deadlines(store, cfg, now_ms))
        if dl is not None:
            report.timeout_retried += dl["RETRY"]
            report.timed_out += dl["TIMED_OUT"]
            report.expired += dl["EXPIRED"]
            self._isolated(report, dl)

        # the successors of tasks that ended (here, or anywhere a release entry was left
        # behind by a crash): after recovery and deadlines, so that what they ended is
        # released in the same sweep; one XRANGE of an empty stream when idle
        rel = await self._step(report, "successors", lambda: store.successors.release(SOURCE))
        if rel is not None:
            report.release_entries += rel.handled
            report.successors_released += rel.released
            report.successors_cancelled += rel.cancelled
            report.errors += rel.failed

        pr = await self._step(report, "promotion", lambda: promote(store, cfg))
        if pr is not None:
            report.promoted += pr["PROMOTED"]
            self._isolated(report, pr)

        if store.number == 0:
            # recurring schedules: each due tick enqueues one task, however many reapers
            # run (they live on shard 0, and so do their tasks)
            ticks = await self._step(report, "schedules", self._fire_schedules)
            report.ticks_fired = ticks or 0

        retention = self.settings.retention_ms
        if retention > 0:  # the events of tasks past their retention (0: kept for ever)
            trimmed = await self._step(
                report, "events", lambda: store.reaper.trim_events(now_ms - retention)
            )
            report.events_trimmed += trimmed or 0

        last_count = self._recounted.get(store.number, float("-inf"))
        if cfg.recount_ms and time.monotonic() - last_count >= cfg.recount_ms / 1000:
            fixed = await self._step(report, "recount", lambda: self._recount(store, queues))
            report.counts_fixed += fixed or 0

        ws = await self._step(report, "workers", lambda: sweep_workers(store, queues, cfg))
        if ws is not None:
            report.workers_dead += [n for n in ws.newly_dead if n not in report.workers_dead]
            report.workers_forgotten += [
                n for n in ws.forgotten if n not in report.workers_forgotten
            ]
            report.consumers_deleted += ws.consumers_deleted

        # the list indexes lose what expired with its tasks (memory returns to baseline)
        tr = await self._step(report, "index", lambda: store.index.trim(SOURCE))
        if tr is not None:
            report.index_trimmed += tr.members + tr.done

        # the queues' counters, sampled once a minute for their series (one sample per
        # minute however many reapers sweep: series.lua keeps the first)
        # (again within a minute when a queue appeared: it gets its first sample at once)
        seen = (now_ms - now_ms % 60_000, frozenset(queues))
        last = self._sampled.get(store.number, (-1, frozenset()))
        if seen[0] != last[0] or not seen[1] <= last[1]:
            sampled = await self._step(report, "series", lambda: self._sample(store, queues))
            if sampled is not None:
                report.series_sampled += sampled
                self._sampled[store.number] = seen

    async def _recount(self, store: Store, queues: list[str]) -> int:
        """Recount the per-owner RUNNING counts of the queues that have some, on one shard
        (a queue that moved while it was read is recounted at the next sweep)."""
        with_counts = {q.queue for q in await store.limits.of_here(queues) if q.running}
        fixed, settled = 0, True
        for q in sorted(with_counts):
            n = await store.reaper.recount(q)
            if n is None:
                settled = False
            else:
                fixed += n
        if settled:
            self._recounted[store.number] = time.monotonic()
        return fixed

    async def _sample(self, store: Store, queues: list[str]) -> int:
        oldest = await store.index.oldest_here(queues)  # this shard's alone
        done, _ = await store.series.sample(SOURCE, oldest)
        return done

    async def _fire_schedules(self) -> int:
        """Fire the due ticks by Redis TIME now (the sweep's earlier steps took time)."""
        return await self.store.schedules.fire_due(SOURCE, await self.store.reaper.now_ms())

    async def _step(
        self, report: SweepReport, name: str, run: Callable[[], Awaitable[T]]
    ) -> T | None:
        """``run()``; None when it failed on some data (logged with its traceback and
        counted in ``errors``). Errors of Redis itself are raised: the sweep is retried."""
        try:
            return await run()
        except Exception as exc:
            if not about_item(exc):
                raise
            log_error(name, exc, reaper=self.name)
            report.errors += 1
            return None

    @staticmethod
    def _isolated(report: SweepReport, counts: Counter[str]) -> None:
        report.quarantined += counts["QUARANTINED"]
        report.errors += counts["ERRORS"]

    # -- forever -----------------------------------------------------------------------

    def _log(self, event: str, level: int = logging.INFO, **fields: object) -> None:
        line = {"ts": round(time.time(), 3), "event": event, **fields}
        # the text is the line in text mode; --log-format json takes the fields as members
        log.log(level, json.dumps(line, separators=(",", ":"), default=str), extra={FIELDS: line})

    async def run(self) -> None:
        """Sweep every ``interval_ms`` until :meth:`stop` (or SIGTERM / SIGINT)."""
        loop = asyncio.get_running_loop()
        if self.handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        cfg = self.config
        try:
            # refused before it says it starts (the first sweep checks it again, once Redis
            # answers)
            await self.store.require_layout()
        except RedisUnavailable:
            pass
        self._log(
            "start",
            reaper=self.name,
            namespace=self.settings.namespace,
            redis=self.store.describe(self._url),
            config=msgspec.to_builtins(cfg),
        )
        backoff = 0.1
        try:
            await self._serve_metrics()
            while not self._stopping.is_set():
                delay = cfg.interval_ms / 1000
                self.probes.beat()
                try:
                    report = await self.sweep_once()
                    self.probes.contact()
                    backoff = 0.1
                    if cfg.log_idle or report.changed or report.workers_dead or report.errors:
                        self._log("sweep", **msgspec.to_builtins(report))
                except RedisUnavailable as exc:
                    self._log(
                        "redis_unavailable",
                        logging.WARNING,
                        reaper=self.name,
                        error=f"{type(exc).__name__}: {exc}",
                        retry_in_ms=int(backoff * 1000),
                    )
                    if is_failover(exc):
                        # a failover: drop the connections so the next ones find the primary
                        await self.store.reset_connections()
                    delay, backoff = backoff, min(backoff * 2, MAX_BACKOFF)
                except Exception as exc:
                    if isinstance(exc, NotMigrated) and not self.store.layout_ok:
                        raise  # the namespace is not migrated: the reaper does not run
                    # not one input may end the reaper: log it whole, back off, go on
                    # (only stop() / SIGTERM / SIGINT end this loop)
                    self.totals["sweep_errors"] += 1
                    self._log(
                        "sweep_error",
                        logging.ERROR,
                        reaper=self.name,
                        error=f"{type(exc).__name__}: {exc}",
                        traceback="".join(traceback.format_exception(exc)),
                        retry_in_ms=int(max(delay, backoff) * 1000),
                    )
                    delay = max(delay, backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), delay)
        finally:
            if self.metrics_server is not None:
                self.metrics_server.close()
            if self.handle_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
            self._log("stop", reaper=self.name, sweeps=self.sweeps)

    async def _serve_metrics(self) -> None:
        if self.metrics_port is None:
            return
        exporter = Exporter(self.store, lambda: reaper_families(self.sweeps, self.totals))
        try:
            server = await serve_metrics(
                exporter.render, self.metrics_port, self.metrics_host, self.probes
            )
        except OSError as exc:
            where = f"{self.metrics_host}:{self.metrics_port}"
            raise ConfigError(f"metrics: cannot listen on {where}: {exc}") from None
        self.metrics_server = server
        port = server.sockets[0].getsockname()[1]
        self._log("metrics", reaper=self.name, url=f"http://{self.metrics_host}:{port}/metrics")
