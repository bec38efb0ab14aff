"""The driver: re-drives every active workflow from persisted state, forever.

Workers and clients advance workflows as they go (a stage's last result completes it in
``wf_finish.lua``; the next stage is spawned right after). The driver is the safety net
that makes a crash between two steps harmless, and it accounts for the task ends that do
not pass through a workflow script (the reaper's RECLAIM / TIMEOUT / DEADLETTER, a cancel
through the task API). Each pass is :func:`rsjobs.workflows.spawn.redrive` for every id
in the active set: idempotent, so any number of drivers may run (``rsjobs workflows
drive``), and the reaper may call :meth:`WorkflowDriver.sweep_once` as part of its sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time

import msgspec
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..errors import ConfigError
from ..settings import Settings
from .calls import WorkflowScripts
from .spawn import redrive

__all__ = ["DriveReport", "WorkflowDriver"]

log = logging.getLogger("rsjobs.workflows")

_TRANSIENT = (RedisConnectionError, RedisTimeoutError, OSError)


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
        from ..client import connect

        self.redis = redis if redis is not None else connect(url)
        self._own_redis = redis is None
        self.settings = settings or Settings()
        self.scripts = WorkflowScripts(self.redis, self.settings)
        self.keys = self.scripts.keys
        self.interval_ms = interval_ms
        self.batch = batch
        self.source = source
        self.handle_signals = handle_signals
        self.passes = 0
        self._stopping = asyncio.Event()

    async def close(self) -> None:
        if self._own_redis:
            await self.redis.aclose()

    def stop(self) -> None:
        self._stopping.set()

    async def sweep_once(self) -> DriveReport:
        """Re-drive every active workflow once; returns what was done."""
        t0 = time.monotonic()
        report = DriveReport()
        cursor: int | str = 0
        while True:
            cursor, ids = await self.redis.sscan(
                self.keys.workflows_active, cursor, count=self.batch
            )
            for wf_id in ids:
                result = await redrive(self.scripts, wf_id, self.source)
                report.visited += 1
                if not result.found:
                    report.gone += 1
                if result.spawned:
                    report.spawned_workflows += 1
                    report.spawned_tasks += result.spawned
            if int(cursor) == 0:
                break
        report.pruned = await self._prune_index()
        report.ms = int((time.monotonic() - t0) * 1000)
        self.passes += 1
        return report

    async def _prune_index(self) -> int:
        """Drop index entries of workflows that expired (older than the retention)."""
        retention = self.settings.retention_ms
        if retention <= 0 or self.passes % 60:
            return 0
        secs, micros = await self.redis.time()
        horizon = int(secs) * 1000 + int(micros) // 1000 - retention
        old = await self.redis.zrangebyscore(
            self.keys.workflows, "-inf", horizon, start=0, num=1000
        )
        gone = []
        for wf_id in old:
            if not await self.redis.exists(self.keys.workflow(wf_id)):
                gone.append(wf_id)
        if gone:
            await self.redis.zrem(self.keys.workflows, *gone)
        return len(gone)

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
                    if report.spawned_workflows or report.gone:
                        log.info("workflow drive: %s", msgspec.json.encode(report).decode())
                except _TRANSIENT as exc:
                    log.warning("workflow drive: redis unavailable (%s)", exc)
                    delay, backoff = backoff, min(backoff * 2, 5.0)
                except RedisError as exc:
                    log.error("workflow drive: %s", exc)
                    delay = max(delay, backoff)
                    backoff = min(backoff * 2, 5.0)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), delay)
        finally:
            if self.handle_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
