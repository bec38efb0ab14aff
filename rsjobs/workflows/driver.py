"""The driver: re-drives every active workflow from persisted state, forever.

Workers and clients advance workflows as they go (a stage's last result completes it in
``wf_finish.lua``; the next stage is spawned right after). The driver is the safety net
that makes a crash between two steps harmless, and it accounts for the task ends that do
not pass through a workflow script (the reaper's RECLAIM / TIMEOUT / DEADLETTER, a cancel
through the task API). Each pass is :func:`rsjobs.workflows.spawn.redrive` for every id
in the active set: idempotent, so any number of drivers may run (``rsjobs workflows
drive``), and the reaper may call :meth:`WorkflowDriver.sweep_once` as part of its sweep.

No one workflow can stop it: a workflow that fails to be driven is checked, moved to
FAILED when it cannot go on (:mod:`rsjobs.workflows.abort`) or logged and counted when
nothing is found wrong with it, and the pass goes on with the next one. Any other error
ends one pass, logged with its traceback, never :meth:`WorkflowDriver.run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
import traceback
from collections.abc import Sequence

import msgspec
from redis.asyncio import Redis

from ..errors import ConfigError, NotMigrated, RedisUnavailable
from ..settings import Settings
from ..store import Store, WfCode
from ..store.connection import connect
from ..store.isolation import about_item
from .abort import abort, reason_of
from .spawn import redrive

__all__ = ["DriveReport", "WorkflowDriver"]

log = logging.getLogger("rsjobs.workflows")


class DriveReport(msgspec.Struct, kw_only=True):
    """What one pass did."""

    visited: int = 0
    #: workflows whose next stage (or retry round) had to be spawned by the driver
    spawned_workflows: int = 0
    spawned_tasks: int = 0
    #: ids dropped from the active set (the workflow no longer exists)
    gone: int = 0
    #: index entries of expired workflows removed
    pruned: int = 0
    #: workflows that could not go on (next tasks over the payload limit, stored data that
    #: does not decode), moved to FAILED (ABORT) with the reason in their history
    aborted: int = 0
    #: workflows the table cannot move (no status, an unknown one): dropped from the active
    #: set, a refused ABORT in their history
    quarantined: int = 0
    #: workflows whose drive failed with nothing found wrong in their data: left as they
    #: are, logged with a traceback; the next pass tries again
    errors: int = 0
    ms: int = 0


class WorkflowDriver:
    """Sweeps the active workflows of one namespace every ``interval_ms``."""

    def __init__(
        self,
        *,
        redis: Redis | None = None,
        url: str = "redis://127.0.0.1:6379/0",
        settings: Settings | None = None,
        interval_ms: int = 1000,
        batch: int = 200,
        source: str = "driver",
        handle_signals: bool = False,
    ) -> None:
        if interval_ms < 1 or batch < 1:
            raise ConfigError("interval_ms and batch must be >= 1")
        self.redis = redis if redis is not None else connect(url)
        self._own_redis = redis is None
        self.settings = settings or Settings()
        self.store = Store(self.redis, self.settings)
        self.keys = self.store.keys
        self.interval_ms = interval_ms
        self.batch = batch
        self.source = source
        self.handle_signals = handle_signals
        self.passes = 0
        #: passes that failed (logged with their traceback; the next one is retried)
        self.failed_passes = 0
        self._stopping = asyncio.Event()

    async def close(self) -> None:
        if self._own_redis:
            await self.store.close()

    def stop(self) -> None:
        self._stopping.set()

    async def sweep_once(self, shards: Sequence[int] | None = None) -> DriveReport:
        """Re-drive every active workflow once (of ``shards`` only, when given: a reaper
        drives those it holds the guard of); returns what was done."""
        t0 = time.monotonic()
        report = DriveReport()
        # a namespace of an earlier layout is not driven (it would be misread): once per run
        await self.store.require_layout()
        for store in await self.store.each():
            if shards is None or store.number in shards:
                await self._sweep_shard(store, report)
        self.passes += 1
        report.ms = int((time.monotonic() - t0) * 1000)
        return report

    async def _sweep_shard(self, store: Store, report: DriveReport) -> None:
        cursor = 0
        while True:
            cursor, ids = await store.workflows.active(cursor, self.batch)
            for wf_id in ids:
                report.visited += 1
                try:
                    result = await redrive(store, wf_id, self.source)
                except Exception as exc:
                    if not about_item(exc):
                        raise  # Redis itself: the pass is retried
                    try:
                        await self._isolate(wf_id, exc, report)
                    except Exception as again:
                        if not about_item(again):
                            raise
                        report.errors += 1
                        log.error("workflow drive: %s cannot be aborted", wf_id, exc_info=again)
                    continue
                if not result.found:
                    report.gone += 1
                if result.spawned:
                    report.spawned_workflows += 1
                    report.spawned_tasks += result.spawned
            if cursor == 0:
                break
        report.pruned += await self._prune_index(store)

    async def _isolate(self, wf_id: str, exc: Exception, report: DriveReport) -> None:
        """One workflow failed to be driven: ABORT it when its data says why, else log."""
        reason = await reason_of(self.store, wf_id, exc)
        if not reason:
            report.errors += 1
            log.error(
                "workflow drive: %s failed, nothing wrong found in its data; left as it is",
                wf_id,
                exc_info=exc,
            )
            return
        reply = await abort(self.store, wf_id, reason, self.source)
        if reply.code is WfCode.APPLIED:
            report.aborted += 1
        elif reply.code is WfCode.QUARANTINED:
            report.quarantined += 1
        elif reply.code is WfCode.NOT_FOUND:
            report.gone += 1
        log.warning(
            "workflow drive: %s %s: %s",
            wf_id,
            {
                WfCode.APPLIED: "FAILED (ABORT)",
                WfCode.QUARANTINED: "quarantined",
                WfCode.NOT_FOUND: "gone",
            }.get(reply.code, reply.status),
            reason,
        )

    async def _prune_index(self, store: Store) -> int:
        """Drop index entries of workflows that expired (older than the retention) from
        one shard's index, by that shard's clock."""
        retention = self.settings.retention_ms
        if retention <= 0 or self.passes % 60:
            return 0
        horizon = await store.reaper.now_ms() - retention
        return await store.workflows.prune_index(horizon)

    async def run(self) -> None:
        """Sweep every ``interval_ms`` until :meth:`stop` (or SIGTERM / SIGINT)."""
        loop = asyncio.get_running_loop()
        if self.handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        backoff = 0.1
        try:
            while not self._stopping.is_set():
                delay = self.interval_ms / 1000
                try:
                    report = await self.sweep_once()
                    backoff = 0.1
                    if (
                        report.spawned_workflows
                        or report.gone
                        or report.aborted
                        or report.quarantined
                        or report.errors
                    ):
                        log.info("workflow drive: %s", msgspec.json.encode(report).decode())
                except RedisUnavailable as exc:
                    log.warning("workflow drive: redis unavailable (%s)", exc)
                    delay, backoff = backoff, min(backoff * 2, 5.0)
                except Exception as exc:
                    if isinstance(exc, NotMigrated) and not self.store.layout_ok:
                        raise  # the namespace is not migrated: the driver does not run
                    # not one input may end the driver: log it whole, back off, go on
                    # (only stop() / SIGTERM / SIGINT end this loop)
                    self.failed_passes += 1
                    log.error(
                        "workflow drive: pass failed: %s",
                        "".join(traceback.format_exception(exc)).rstrip(),
                    )
                    delay = max(delay, backoff)
                    backoff = min(backoff * 2, 5.0)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), delay)
        finally:
            if self.handle_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
