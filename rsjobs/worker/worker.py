"""The worker: reads queue streams in batches, runs handlers with bounded concurrency,
keeps leases alive, and ends every attempt through the transition scripts.

Round trips on the hot path are batched: one XREADGROUP and one ``start.lua`` call per
batch of deliveries, and one ``finish.lua`` call per batch of finished attempts (whatever
finished while the previous call was in flight).

A sharded namespace (:mod:`rsjobs.store.shards`) is read shard by shard: one lane per
shard (:mod:`rsjobs.worker.lanes`) with its own fetch loop and control channel, sharing
the concurrency; start, finish, heartbeat, deferral and release calls go per shard (one
single-slot call per shard's group of a batch). The worker registers on every shard: the
reaper's scripts read the registry in the slot of the shard they sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import socket
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec
from redis.asyncio import Redis

from ..callbacks import secret_from_env
from ..codec import decode, encode, encode_payload
from ..errors import (
    ConfigError,
    LeaseLost,
    NonRetryable,
    PayloadError,
    RedisUnavailable,
    RsjobsError,
)
from ..logfmt import TaskFields, bind_task
from ..metrics import Exporter, Probes, serve_metrics
from ..names import validate_name
from ..settings import Settings
from ..store import Beat, Code, Delivery, Started, Store, Suspect, TaskKeys
from ..store.isolation import about_server, each_alone
from ..store.keys import WAITING_CONSUMER
from ..store.layout import BeatItem, Ending
from ..store.quarantine import DEADLETTER_MAXLEN
from ..store.transient import is_failover
from ..successors import decode_predecessors, parse_after
from ..tracing import Attempt, TraceContext, start_attempt, task_attributes
from .context import Context
from .deferral import Deferral
from .failures import TRACEBACK_CHARS, TRACEBACK_MAX, format_traceback, log_failure
from .lanes import ShardLane, group_by_shard
from .metrics import WorkerMetrics
from .polling import PollRunner
from .registry import Registry
from .threads import HandlerThread

if TYPE_CHECKING:
    from ..workflows.finish import WorkflowFinisher

__all__ = ["Worker"]

log = logging.getLogger("rsjobs.worker")


class _Job:
    """A task this worker started: its lease, its handler task and its context."""

    __slots__ = (
        "ctx",
        "dedup",
        "entry",
        "id",
        "keys",
        "lease",
        "progress_sent",
        "queue",
        "span",
        "t0",
        "task",
        "thread",
        "wf",
    )

    def __init__(
        self, tid: str, queue: str, entry: str, lease: str, dedup: str, keys: TaskKeys, wf: str
    ) -> None:
        self.id = tid
        self.wf = wf  # id of the workflow the task belongs to ('' = a plain task)
        self.queue = queue
        self.entry = entry
        self.lease = lease
        self.dedup = dedup
        self.keys = keys
        self.task: asyncio.Task[None] | None = None
        self.ctx: Context | None = None
        self.progress_sent: float | None = None
        #: the thread of a sync handler's call (None for an async handler)
        self.thread: HandlerThread | None = None
        #: the attempt's span (rsjobs.tracing), ended once its end is written
        self.span = Attempt(None)
        #: when START answered (this process's clock): its handler time, for the metrics
        self.t0 = time.monotonic()

    def stop(self, reason: str) -> None:
        """Stop the handler: the task left RUNNING (or this worker lost its lease)."""
        if self.ctx is not None and not self.ctx.stop_reason:
            self.ctx.stop_reason = reason
            self.ctx.cancelled.set()
        if self.task is not None and not self.task.done():
            self.task.cancel()


class _Stuck(NamedTuple):
    """A sync handler's thread still running after its job ended."""

    task_id: str
    attempt: int
    reason: str  #: why the job ended: TIMEOUT, CANCELLED, PAUSED, LOST, SHUTDOWN
    since: float  #: time.time() when the job ended


class Worker:
    """Runs handlers of a :class:`Registry` for the tasks of some queues.

    All timing settings are milliseconds. ``lease_ms`` is how long a task stays ours
    without a heartbeat (heartbeats go every ``heartbeat_ms``, default a third of the
    lease); ``grace_ms`` is how long a graceful stop lets running handlers finish before
    handing their tasks back (REQUEUE). ``traceback_chars`` bounds the traceback each
    failed attempt keeps in its history entry (0: none kept; the log has it whole).
    ``metrics_port``: serve Prometheus metrics (the namespace's and this worker's own,
    :mod:`rsjobs.metrics`) at ``http://<metrics_host>:<port>/metrics`` (0: a free port).
    ``priority_age_ms``: the starvation bound of priorities (aging, see ``take.lua``): a
    waiting task counts one level higher for each such period it has waited (0: never).
    """

    def __init__(
        self,
        registry: Registry,
        *,
        redis: Redis | None = None,
        url: str = "redis://127.0.0.1:6379/0",
        settings: Settings | None = None,
        queues: tuple[str, ...] | list[str] = ("default",),
        concurrency: int = 16,
        lease_ms: int = 30_000,
        heartbeat_ms: int | None = None,
        block_ms: int = 1000,
        grace_ms: int = 10_000,
        promote_ms: int = 250,
        progress_ms: int = 200,
        name: str | None = None,
        handle_signals: bool = True,
        traceback_chars: int = TRACEBACK_CHARS,
        callback_secret: str | None = None,
        callback_url: str | None = None,
        poll_ms: int = 250,
        poll_claim_ms: int = 30_000,
        poll_concurrency: int = 8,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
        priority_age_ms: int = 30_000,
    ) -> None:
        if not queues:
            raise ConfigError("a worker needs at least one queue")
        for q in queues:
            validate_name("queue", q)
        if concurrency < 1:
            raise ConfigError("concurrency must be >= 1")
        if lease_ms < 100:
            raise ConfigError("lease_ms must be >= 100")
        heartbeat_ms = heartbeat_ms or max(50, lease_ms // 3)
        if heartbeat_ms >= lease_ms:
            raise ConfigError("heartbeat_ms must be shorter than lease_ms")
        if not 0 <= traceback_chars <= TRACEBACK_MAX:
            raise ConfigError(f"traceback_chars must be between 0 and {TRACEBACK_MAX}")
        from ..client import connect

        self.registry = registry
        self.redis = redis if redis is not None else connect(url)
        #: where this worker connects (None when given a client), for its start-up line
        self.url: str | None = url if redis is None else None
        self.settings = settings or Settings()
        self.store = Store(self.redis, self.settings)
        self.keys = self.store.keys
        self.queues = list(queues)
        #: one lane per shard of the namespace (rsjobs.worker.lanes): shard 0's until the
        #: set-up has read the namespace's shards
        self._lanes = [ShardLane(self.store, self.queues)]
        #: shard 0's priority-0 queue streams (made with their group at start-up), and the
        #: streams of every level (take.lua makes a level's group when it first sees it)
        self.streams = self._lanes[0].streams
        self.level_streams = self._lanes[0].level_streams
        self.concurrency = concurrency
        self.lease_ms = lease_ms
        self.heartbeat_ms = heartbeat_ms
        self.block_ms = block_ms
        self.grace_ms = grace_ms
        self.promote_ms = promote_ms
        self.progress_ms = progress_ms
        self.name = name or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        if self.name == WAITING_CONSUMER:
            raise ConfigError(f"{WAITING_CONSUMER!r} is the name of no worker (see rsjobs.limits)")
        if not 0 <= priority_age_ms <= 365 * 24 * 3600 * 1000:
            raise ConfigError("priority_age_ms must be between 0 (no aging) and one year")
        #: aging (take.lua): a waiting task's priority rises by one level per this many ms
        self.priority_age_ms = priority_age_ms
        self.nonce = f"{self.name}-{uuid.uuid4().hex[:8]}"
        self.handle_signals = handle_signals

        self.jobs: dict[str, _Job] = {}
        #: shard 0's deliveries read and not started yet (each lane has its own buffer)
        self._buffer = self._lanes[0].buffer
        self._closing = False
        #: deliveries whose start.lua call is in flight: they hold slots (concurrency) but
        #: are not jobs yet; the fetch loop reads the next batch meanwhile
        self._starting = 0
        self._starting_entries: set[str] = set()
        #: entries of attempts that ended here and whose end is not written yet (finish.lua
        #: or wf_finish.lua in flight or waiting out an outage): still in this consumer's
        #: pending list, and START would answer them as ours again (start.lua answers its
        #: own repeats), so they must not be taken for lost replies and run twice
        self._ending_entries: set[str] = set()
        self._start_tasks: set[asyncio.Task[None]] = set()
        #: slots a sharded worker's takes hold while in flight (see rsjobs.worker.lanes)
        self._reserved = 0
        #: while a start is in flight, read again only once this many slots are free, so
        #: batches (and their per-call cost) stay large under load; an idle worker reads
        #: at once whatever is free
        self._min_batch = max(1, concurrency // 4)
        self._slot_free = asyncio.Event()
        self._stopping = asyncio.Event()
        self._force = False
        self._progress_wake = asyncio.Event()
        #: ended attempts to write: (task keys, the end, task id, entry)
        self._finish_items: list[tuple[TaskKeys, Ending, str, str]] = []
        #: the spans of the attempts in _finish_items, by entry (rsjobs.tracing)
        self._spans: dict[str, Attempt] = {}
        self._finish_idle = asyncio.Event()
        self._finish_idle.set()
        #: set while no ended attempt waits to be sent (the finisher took them all): a
        #: take sent after that reaches Redis after their ends on the lane, which runs
        #: calls in order (see _take)
        self._finish_sent = asyncio.Event()
        self._finish_sent.set()
        self._finisher: asyncio.Task[None] | None = None
        # workflow tasks end through wf_finish.lua, one call each (rsjobs.workflows)
        self._wf_finisher: WorkflowFinisher | None = None
        self._wf_pending: set[asyncio.Task[int]] = set()
        #: the release step (successors), run after a finish batch that wrote release
        #: entries (on the shards in _release_shards): one at a time; asked again while it
        #: runs, it runs once more
        self._releaser: asyncio.Task[None] | None = None
        self._release_shards: set[int] = set()
        #: threads of sync handlers that outlived their job (they ignored ctx.cancelled):
        #: each holds a slot until it returns (see _hold); key -> what it ran
        self._stuck: dict[int, _Stuck] = {}
        self.traceback_chars = traceback_chars
        #: deferred attempts (Context.defer): the secret their callback tokens are signed
        #: with and the web app's base URL (rsjobs.callbacks), the DEFER calls in flight,
        #: and the polls of DEFERRED tasks this registry has pollers for
        self.callback_secret = callback_secret or secret_from_env()
        self.callback_url = callback_url or os.environ.get("RSJOBS_CALLBACK_URL") or None
        self._defer_pending: set[asyncio.Task[None]] = set()
        if poll_ms < 10 or poll_claim_ms < 100 or poll_concurrency < 1:
            raise ConfigError("poll_ms >= 10, poll_claim_ms >= 100, poll_concurrency >= 1")
        self.polls = PollRunner(
            self.store,
            registry,
            self.settings,
            name=self.name,
            every_ms=poll_ms,
            claim_ms=poll_claim_ms,
            concurrency=poll_concurrency,
        )
        self._polls_closing = asyncio.Event()
        self.processed = 0
        self.started_at = 0.0
        #: its own Prometheus figures; served with the namespace's on metrics_port (None:
        #: not served) at metrics_host (rsjobs.metrics)
        self.metrics = WorkerMetrics(concurrency, lambda: len(self.jobs) + self._starting)
        if metrics_port is not None and not 0 <= metrics_port <= 65535:
            raise ConfigError("metrics_port must be a TCP port (0: any free one)")
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        #: the metrics server while it runs (its sockets tell the port it got)
        self.metrics_server: asyncio.Server | None = None
        #: /livez and /readyz beside /metrics: live while the heartbeat loop turns, ready
        #: while its registrations reach Redis (three heartbeats of slack, at least 10 s)
        self.probes = Probes(max(3 * self.heartbeat_ms / 1000, 10.0))

    # -- lifecycle -----------------------------------------------------------------------

    def stop(self, *, force: bool = False) -> None:
        """Ask for a graceful stop (``force``: hand running tasks back without waiting)."""
        if self._stopping.is_set():
            force = True  # a second signal means: now
        self._force = self._force or force
        self._stopping.set()
        self._slot_free.set()

    async def run(self) -> None:
        """Run until :meth:`stop` (or SIGTERM / SIGINT); then stop gracefully."""
        loop = asyncio.get_running_loop()
        if self.handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        self.started_at = time.time()
        try:
            ready = await self._wait_for_redis()
        except BaseException:
            self._remove_signal_handlers(loop)
            raise
        if not ready:
            log.info("worker %s stopped before redis was reachable", self.name)
            self._remove_signal_handlers(loop)
            return
        helpers = [
            asyncio.create_task(self._beat_loop(), name="rsjobs-beat"),
            asyncio.create_task(self._promote_loop(), name="rsjobs-promote"),
        ]
        helpers += [  # one per shard: each shard's notices come on its own channel
            asyncio.create_task(
                self._control_loop(lane),
                name="rsjobs-control" + (f"-{lane.number}" if lane.number else ""),
            )
            for lane in self._lanes
        ]
        if self.registry.has_pollers:
            helpers.append(
                asyncio.create_task(self.polls.run(self._polls_closing), name="rsjobs-polls")
            )
        log.info(
            "worker %s: queues=%s concurrency=%d redis=%s%s",
            self.name,
            self.queues,
            self.concurrency,
            self.store.describe(self.url),
            f" shards={len(self._lanes)}" if len(self._lanes) > 1 else "",
        )
        try:
            await self._serve_metrics()
            await self._fetch()
            await self._drain()
        finally:
            # redis-py can turn a cancellation during a blocking read into a connection
            # error, which the loops would retry: they also check this flag, and the wait
            # is bounded
            self._closing = True
            self._polls_closing.set()
            if self.metrics_server is not None:
                self.metrics_server.close()
            for h in helpers:
                h.cancel()
            await asyncio.wait(helpers, timeout=5)
            await self._wait_starts()
            await self._flush_all()
            await self._unregister()
            if self._stuck:
                log.error(
                    "worker %s: exiting while %d handler threads have not returned (%s); "
                    "their tasks are already ended or handed back",
                    self.name,
                    len(self._stuck),
                    ", ".join(s.task_id for s in self._stuck.values()),
                )
            self._remove_signal_handlers(loop)
            log.info("worker %s stopped after %d tasks", self.name, self.processed)

    async def _serve_metrics(self) -> None:
        if self.metrics_port is None:
            return
        exporter = Exporter(self.store, self.metrics.families)
        try:
            server = await serve_metrics(
                exporter.render, self.metrics_port, self.metrics_host, self.probes
            )
        except OSError as exc:
            where = f"{self.metrics_host}:{self.metrics_port}"
            raise ConfigError(f"metrics: cannot listen on {where}: {exc}") from None
        self.metrics_server = server
        port = server.sockets[0].getsockname()[1]
        log.info(
            "worker %s: metrics at http://%s:%d/metrics (probes /livez, /readyz)",
            self.name, self.metrics_host, port,
        )  # fmt: skip

    def _remove_signal_handlers(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)

    async def _setup(self) -> None:
        """The namespace's layout (an earlier one is refused: :class:`rsjobs.NotMigrated`),
        the groups of the queue streams, the queue names, the first registration."""
        await self.store.ping()
        await self.store.require_layout()
        stores = await self.store.each()  # the namespace's shards (given S, or as stored)
        if len(stores) != len(self._lanes):
            self._lanes[1:] = [ShardLane(s, self.queues) for s in stores[1:]]
        for lane in self._lanes:
            await lane.store.work.ensure_groups(lane.streams)
        await self.store.scripts.preload(("take", "start", "finish", "heartbeat"))
        await self.store.tasks.remember_queues(self.queues)
        await self._read_paused()
        await self._register()

    async def _wait_for_redis(self) -> bool:
        """Wait until Redis answers and takes the worker's set-up writes: a worker may
        start before its Redis does (a deploy, a restart), or while Redis refuses writes
        (out of memory, a replica). Retries with backoff up to 5 s; False when stopped
        first."""
        delay, warned = 0.1, False
        while not self._stopping.is_set():
            try:
                await self._setup()
            except Exception as exc:
                if not about_server(exc):
                    raise  # the worker's own settings are wrong: say so and exit
                if not warned:
                    log.warning("worker %s: redis unusable (%s); waiting for it", self.name, exc)
                    warned = True
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), delay)
                delay = min(delay * 2, 5.0)
                continue
            if warned:
                log.warning("worker %s: redis is reachable; starting", self.name)
            return True
        return False

    async def _drain(self) -> None:
        """Graceful stop: let handlers finish within the grace period, hand back the rest."""
        await self._wait_starts()
        for lane in self._lanes:
            if lane.buffer:
                await self._release(list(lane.buffer), lane)
                lane.buffer.clear()
        if self.jobs and not self._force:
            pending = [j.task for j in self.jobs.values() if j.task is not None]
            log.info(
                "worker %s: waiting up to %d ms for %d tasks",
                self.name,
                self.grace_ms,
                len(pending),
            )
            await asyncio.wait(pending, timeout=self.grace_ms / 1000)
        left = list(self.jobs.values())
        for job in left:
            job.stop("SHUTDOWN")
        if left:
            await asyncio.wait([j.task for j in left if j.task is not None], timeout=5)

    # -- fetching ------------------------------------------------------------------------

    async def _fetch(self) -> None:
        """Run the fetch loop of every lane (one per shard) until a stop."""
        if len(self._lanes) == 1:
            await self._fetch_loop(self._lanes[0])
        else:
            await asyncio.gather(*(self._fetch_loop(lane) for lane in self._lanes))

    def _free(self) -> int:
        """Slots neither running, starting, held by a stuck thread nor reserved by a read."""
        held = len(self.jobs) + self._starting + len(self._stuck) + self._reserved
        return self.concurrency - held

    async def _fetch_loop(self, lane: ShardLane) -> None:
        """Read deliveries of one shard's queues for free slots and start them.

        A batch's start.lua call runs in the background (:meth:`_start_batch`) while this
        loop goes on to read the next batch for slots that free meanwhile: a read and a
        start are in flight together, instead of one after the other. Deliveries being
        started hold their slots, so at most ``concurrency`` tasks are ever started and not
        finished. A sharded worker runs one such loop per shard (rsjobs.worker.lanes): the
        loops take turns at the free slots, in the order they began to wait for one.
        """
        backoff = 0.1
        while not self._stopping.is_set():
            free = self._free()
            streams = lane.streams_to_read()
            if lane.start_error is None and (
                free <= 0 or (self._starting and free < self._min_batch) or not streams
            ):
                # no slot, or every queue paused: wait for a slot, a RESUME_QUEUE or a stop
                # (set at once by each; no polling)
                self._slot_free.clear()
                await self._slot_free.wait()
                continue
            try:
                if lane.start_error is not None:
                    exc, lane.start_error = lane.start_error, None
                    raise exc
                if lane.recheck:
                    await self._adopt_own_pending(lane)
                    lane.recheck = False
                if lane.buffer:
                    batch = [lane.buffer.popleft() for _ in range(min(free, len(lane.buffer)))]
                else:
                    batch = await self._read(lane, streams, free)
                if batch:
                    self._starting += len(batch)
                    self._starting_entries.update(d.entry for d in batch)
                    task = asyncio.get_running_loop().create_task(self._start_batch(batch, lane))
                    self._start_tasks.add(task)
                    task.add_done_callback(self._start_tasks.discard)
                backoff = 0.1
            except RedisUnavailable as exc:
                # a batch read but not started, or a reply lost on the way, is still in this
                # consumer's pending list: look there once Redis answers again
                lane.recheck = True
                log.warning("worker %s: redis unavailable (%s); retrying", self.name, exc)
                if is_failover(exc):
                    await self.store.reset_connections()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
            except Exception:
                # OOM, BUSY, a queue key that is not a stream, a bug: nothing one task or
                # one key does may end the worker; say it loudly, back off, go on
                lane.recheck = True
                log.exception("worker %s: fetching failed; retrying in %.1fs", self.name, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    async def _read(self, lane: ShardLane, streams: dict[str, str], free: int) -> list[Delivery]:
        """A batch of new deliveries of one lane for ``free`` slots (what is taken beyond
        them waits in the lane's buffer). Unsharded: :meth:`_take` for every free slot.
        Sharded (rsjobs.worker.lanes): a hot lane takes for them without waiting, holding
        them meanwhile; a cold one takes (and waits) for a part of them, holding none."""
        queues = list(streams.values())
        if len(self._lanes) == 1:
            return await self._take(lane, queues, free)
        if lane.hot:
            self._reserved += free
            batch: list[Delivery] = []
            more = False
            try:
                batch, more = await self._take_now(lane, queues, free)
            finally:
                self._reserved -= free
                if len(batch) < free:
                    # slots handed back: wake the lanes waiting for one (only then: a
                    # wake here would queue them again behind this lane, and the lanes
                    # take turns in the order they began to wait)
                    self._slot_free.set()
            take = min(len(batch), free)
            lane.hot = bool(batch) or more
        else:
            batch = await self._take(lane, queues, -(-free // len(self._lanes)))
            take = min(len(batch), max(0, self._free()))
            lane.hot = bool(batch)
        if len(batch) > take:
            lane.buffer.extend(batch[take:])
            batch = batch[:take]
        return batch

    async def _take_now(
        self, lane: ShardLane, queues: list[str], free: int
    ) -> tuple[list[Delivery], bool]:
        """What take.lua hands out on ``lane``'s shard for ``free`` slots, without waiting;
        and whether it stopped with entries left (take again at once)."""
        work = lane.store.work
        if lane.held and not self._finish_sent.is_set():
            # owners were at their limits: ends about to be sent free their slots, so take
            # once they are on their way (a take sent after them runs after them), not
            # now, for nothing
            await self._finish_sent.wait()
        taken = await work.take(self.name, queues, free, age_ms=self.priority_age_ms)
        lane.held = taken.held
        lane.taken = taken
        return taken.deliveries, taken.more

    async def _take(self, lane: ShardLane, queues: list[str], free: int) -> list[Delivery]:
        """What take.lua hands out on ``lane``'s shard for ``free`` slots; when it hands out
        nothing, wait for work (XREAD BLOCK on the queues' streams, bounded by ``block_ms``
        and by the time a held-back task may start), and return nothing."""
        deliveries, more = await self._take_now(lane, queues, free)
        taken = lane.taken
        if deliveries or more or taken is None:
            return deliveries
        if not self._finish_idle.is_set():
            # an end in flight may free an owner's slot: take again once it has landed
            # instead of blocking
            await self._finish_idle.wait()
            return []
        block = self.block_ms
        if taken.next_due:
            now = int(time.time() * 1000)
            block = max(1, min(block, taken.next_due - now + 5))
        await lane.store.work.wait(taken.cursors, block)
        return []

    @property
    def paused(self) -> set[str]:
        """Queues this worker serves whose pause flag it has seen (queue.lua; a sharded
        namespace: on any of its shards): their streams are not read (on that shard) until
        a RESUME_QUEUE notice (or a heartbeat's read of the flags) says so."""
        if len(self._lanes) == 1:
            return self._lanes[0].paused
        return set().union(*(lane.paused for lane in self._lanes))

    def _streams_to_read(self) -> dict[str, str]:
        """The streams of shard 0's queues that are not paused (stream key -> queue)."""
        return self._lanes[0].streams_to_read()

    def _set_paused(
        self, queue: str, paused: bool, how: str, lane: ShardLane | None = None
    ) -> None:
        """Mark one of our queues paused or not (on ``lane``'s shard, by default shard 0);
        a resume wakes the fetch loops at once."""
        lane = lane or self._lanes[0]
        if queue not in self.queues or (queue in lane.paused) == paused:
            return
        where = f" on shard {lane.number}" if len(self._lanes) > 1 else ""
        if paused:
            lane.paused.add(queue)
            log.info("worker %s: queue %s is paused%s (%s): taking no new work from it",
                     self.name, queue, where, how)  # fmt: skip
        else:
            lane.paused.discard(queue)
            log.info("worker %s: queue %s is resumed%s (%s)", self.name, queue, where, how)
            self._slot_free.set()

    def _resumed(self, queue: str, how: str, lane: ShardLane | None = None) -> None:
        """The queue was seen going (a RESUME_QUEUE notice, a read of the flags): counted,
        so that a START sent before, which found it still paused, does not mark it paused
        again when its reply comes in after."""
        lane = lane or self._lanes[0]
        if queue in lane.streams.values():
            lane.resumes[queue] = lane.resumes.get(queue, 0) + 1
            self._set_paused(queue, False, how, lane)

    async def _read_paused(self, lane: ShardLane | None = None) -> None:
        """Read the pause flags of our queues (notices may have been missed), on
        ``lane``'s shard or, by default, every shard."""
        for one in [lane] if lane is not None else self._lanes:
            now = await one.store.work.paused(self.queues)
            for q in self.queues:
                if q in now:
                    self._set_paused(q, True, "flag read", one)
                else:
                    self._resumed(q, "flag read", one)

    async def _start_batch(self, batch: list[Delivery], lane: ShardLane) -> None:
        """Start one batch in the background of its lane's fetch loop; an error goes to the
        loop, which handles it as if its own call had raised it."""
        try:
            await self._start(batch, lane)
        except Exception as exc:
            lane.start_error = exc
        finally:
            self._starting -= len(batch)
            self._starting_entries.difference_update(d.entry for d in batch)
            self._slot_free.set()

    async def _wait_starts(self) -> None:
        """Let the start calls in flight land, so their tasks are jobs (drained, handed
        back) and not left RUNNING without a handler."""
        if self._start_tasks:
            await asyncio.wait(list(self._start_tasks), timeout=10)
        for lane in self._lanes:
            if lane.start_error is not None:
                # stopping: the fetch loop no longer handles it (the deliveries stay in
                # this consumer's pending list for the reaper)
                log.warning("worker %s: starting a batch failed: %s", self.name,
                            lane.start_error)  # fmt: skip
                lane.start_error = None

    async def _adopt_own_pending(self, lane: ShardLane | None = None) -> None:
        """Queue up what this consumer was delivered and runs nowhere (on ``lane``'s shard,
        by default shard 0): a batch read but not started, or started by a START whose
        reply was lost (start.lua answers the repeat as it did the first). Entries this
        worker runs, starts or is ending are left out, whether they were so before the
        read or became so during it."""
        lane = lane or self._lanes[0]

        def known() -> set[str]:
            held = {j.entry for j in self.jobs.values()} | {d.entry for d in lane.buffer}
            return held | self._starting_entries | self._ending_entries

        before = known()
        pending = await lane.store.work.own_pending(self.name, lane.level_streams)
        skip = before | known()
        for d in pending:
            if d.entry not in skip:
                lane.buffer.append(d)

    async def _start(self, batch: list[Delivery], lane: ShardLane) -> None:
        """START (start.lua) of one lane's batch, one single-slot call on its shard."""
        work = lane.store.work
        resumes = lane.resumes.copy()  # a resume heard after this call was sent wins

        async def call(part: Sequence[Delivery]) -> list[Started]:
            return await work.start(self.name, self.lease_ms, self.nonce, part)

        # one task whose data breaks start.lua must not stop the others (nor the worker);
        # a failed batch call started the tasks before the bad one and its reply was lost:
        # the single calls find them started by this consumer and answer the same
        done = await each_alone(call, batch, log, f"worker {self.name}: start batch")
        if done.failed:
            await self._quarantine(done.failed, lane)
            bad = {d.entry for d, _ in done.failed}
            batch = [d for d in batch if d.entry not in bad]
        replies = [r for part in done.replies for r in part]
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        for d, r in zip(batch, replies, strict=True):
            if r.code is Code.QUEUE_PAUSED and resumes.get(d.queue) == lane.resumes.get(d.queue):
                # paused before we heard: start.lua handed the delivery back
                self._set_paused(d.queue, True, "found at START", lane)
            if r.code is not Code.APPLIED:
                continue
            keys = lane.keys.task_keys(r.id, d.queue, r.dedup or None, d.priority)
            job = _Job(r.id, d.queue, d.entry, r.lease, r.dedup, keys, r.wf)
            timeout_s = r.timeout_ms / 1000 if r.timeout_ms else None
            ctx = Context(
                task_id=r.id,
                type=r.type,
                queue=d.queue,
                payload=None,
                attempt=r.attempt,
                deadline=None if timeout_s is None else now + timeout_s,
                worker=self.name,
                loop=loop,
                on_progress=self._progress_wake.set,
                namespace=self.keys.namespace,
                callback_secret=self.callback_secret,
                callback_base=self.callback_url,
                predecessor_states={t: s for t, s in parse_after(r.after) if s},
            )
            job.ctx = ctx
            attributes = task_attributes(r.id, r.type, d.queue, "process")
            attributes.update(
                {
                    "rsjobs.task.attempt": r.attempt,
                    "rsjobs.task.owner": r.owner,
                    "rsjobs.worker": self.name,
                }
            )
            job.span = start_attempt(TraceContext(r.traceparent, r.tracestate), r.type, attributes)
            old = self.jobs.get(r.id)
            if old is not None:
                # this worker ran an earlier attempt of the task and lost its lease (the
                # reaper took it back while heartbeats could not get through): that attempt's
                # result would be refused, so stop it now
                old.stop("LOST")
            self.jobs[r.id] = job
            job.task = loop.create_task(
                self._run(job, r.type, r.payload, timeout_s, r.predecessors)
            )

    async def _quarantine(self, failed: list[tuple[Delivery, Exception]], lane: ShardLane) -> None:
        """Deliveries whose task start.lua fails on: quarantined (FAILED through DEADLETTER
        when the task's data is found defective), else left in this consumer's pending
        list for the reaper."""
        for d, exc in failed:
            log.error("worker %s: cannot start task %s: %s", self.name, d.task_id, exc)
        suspects = [Suspect(d.task_id, d.queue, "queue", d.entry, exc) for d, exc in failed]
        try:
            verdicts = await lane.store.quarantine.isolate(
                "worker", "start", suspects, DEADLETTER_MAXLEN
            )
        except RsjobsError as exc:
            log.warning("worker %s: quarantine failed (%s); left to the reaper", self.name, exc)
            return
        for v in verdicts:
            if v.outcome is not None:
                log.warning(
                    "worker %s: task %s quarantined (%s): %s",
                    self.name,
                    v.suspect.task_id,
                    v.outcome,
                    v.why,
                )

    async def _release(self, deliveries: list[Delivery], lane: ShardLane) -> None:
        with contextlib.suppress(RsjobsError):
            await lane.store.work.release(deliveries)

    # -- running -------------------------------------------------------------------------

    async def _run(
        self,
        job: _Job,
        ttype: str,
        raw_payload: str,
        timeout_s: float | None,
        raw_predecessors: str = "",
    ) -> None:
        ctx = job.ctx
        assert ctx is not None
        bind_task(TaskFields(job.id, ttype, job.queue, ctx.attempt))  # this Task's lines
        try:
            with job.span.active():  # the handler's own spans are children of the attempt's
                await self._attempt(job, ctx, ttype, raw_payload, timeout_s, raw_predecessors)
        finally:
            # not handed to a finish (stopped: cancelled, paused, lost; or cancelled itself)
            job.span.end(ctx.stop_reason or "STOPPED")

    async def _attempt(
        self,
        job: _Job,
        ctx: Context,
        ttype: str,
        raw_payload: str,
        timeout_s: float | None,
        raw_predecessors: str = "",
    ) -> None:
        handler = self.registry.get(ttype)
        try:
            if handler is None:
                error = f"no handler registered for task type {ttype!r}"
                log_failure(log, self.name, job.id, ttype, job.queue, ctx.attempt, error)
                job.span.failed(error)
                self._finish(job, "FAIL", error, "NoHandler", retryable=False)
                return
            try:
                ctx.payload = _payload(raw_payload)
                ctx.predecessors = decode_predecessors(raw_predecessors)
            except PayloadError as exc:  # no attempt can do better: fail it at once
                log_failure(log, self.name, job.id, ttype, job.queue, ctx.attempt, str(exc))
                job.span.failed(str(exc), exc)
                self._finish(job, "FAIL", str(exc), "PayloadError", retryable=False)
                return
            try:
                if timeout_s is None:
                    result = await self._call(job, handler, ctx)
                else:
                    async with asyncio.timeout(timeout_s):
                        result = await self._call(job, handler, ctx)
            except asyncio.CancelledError:
                if not ctx.stop_reason:
                    raise
                self._stopped(job, ctx)
                return
            except TimeoutError:
                ctx.stop_reason = "TIMEOUT"
                ctx.cancelled.set()
                job.span.failed(f"execution exceeded {timeout_s:g}s")
                self._finish(job, "TIMEOUT", f"execution exceeded {timeout_s:g}s", "TimeoutError")
                return
            except Exception as exc:
                if isinstance(exc, LeaseLost) and ctx.stop_reason:
                    # ctx.progress / report told the handler it was stopped: as a cancel
                    self._stopped(job, ctx)
                    return
                retryable = not isinstance(exc, (NonRetryable, *handler.non_retryable))
                # (NonRetryable's name says no more than the "non-retryable: " the task's
                # error gets: its message alone; any other exception is "<type>: <message>")
                plain = isinstance(exc, NonRetryable) and str(exc)
                error = (str(exc) if plain else f"{type(exc).__name__}: {exc}")[:2000]
                log_failure(log, self.name, job.id, ttype, job.queue, ctx.attempt, error, exc)
                job.span.failed(error, exc)
                self._finish(
                    job,
                    "FAIL",
                    error,
                    type(exc).__name__,
                    retryable=retryable,
                    traceback=format_traceback(exc, self.traceback_chars),
                )
                return
            if isinstance(result, Deferral):
                self._defer(job, result)
                return
            try:
                body = encode_payload(result, self.settings.payload_limit, "result")
            except PayloadError as exc:
                job.span.failed(str(exc), exc)
                self._finish(job, "FAIL", str(exc), "PayloadError", retryable=False)
                return
            self._finish(job, "COMPLETE", body, "")
        finally:
            if job.thread is not None and not job.thread.returned.is_set():
                self._hold(job, job.thread)  # before the job's slot looks free
            if self.jobs.get(job.id) is job:  # not a newer attempt of the same task
                del self.jobs[job.id]
            self._slot_free.set()

    def _stopped(self, job: _Job, ctx: Context) -> None:
        """The handler ended because the worker stopped it (``job.stop``)."""
        if ctx.stop_reason == "SHUTDOWN":
            self._finish(job, "REQUEUE", "worker shutting down: task handed back", "")
        # CANCELLED / PAUSED / LOST...: the task already left our hands; nothing to say

    async def _call(self, job: _Job, handler: Any, ctx: Context) -> Any:
        if handler.is_async:
            return await handler.fn(ctx, ctx.payload)
        job.thread = HandlerThread(
            handler.fn,
            (ctx, ctx.payload),
            name=f"rsjobs-{job.id[:12]}",
            loop=asyncio.get_running_loop(),
        )
        return await job.thread.result

    def _hold(self, job: _Job, thread: HandlerThread) -> None:
        """The job ended (timeout, cancel, lost lease, shutdown) but its sync handler did
        not return: its thread still runs, so its slot stays taken until it does. The task
        itself is already ended truthfully; this is about not starting more work than
        there are threads to run it."""
        ctx = job.ctx
        assert ctx is not None
        key = id(thread)
        self._stuck[key] = _Stuck(job.id, ctx.attempt, ctx.stop_reason or "?", time.time())
        log.warning(
            "worker %s: the sync handler of task %s (attempt %d) ignored %s and still runs; "
            "its slot stays taken until its thread returns (%d of %d slots held so)",
            self.name,
            job.id,
            ctx.attempt,
            ctx.stop_reason or "its end",
            len(self._stuck),
            self.concurrency,
        )
        thread.when_returned(lambda: self._released(key))

    def _released(self, key: int) -> None:
        stuck = self._stuck.pop(key, None)
        if stuck is not None:
            log.warning(
                "worker %s: the handler thread of task %s returned %.1f s after %s; slot free",
                self.name,
                stuck.task_id,
                time.time() - stuck.since,
                stuck.reason,
            )
        self._slot_free.set()

    # -- finishing (batched) -------------------------------------------------------------

    def _ended(self, job: _Job, end: str) -> str:
        """Count the attempt's end in this worker's metrics; returns its charges' text."""
        if job.ctx is None:
            return ""
        amounts = job.ctx.charges.amounts()
        self.metrics.attempt_ended(job.ctx.type, end, time.monotonic() - job.t0, amounts)
        return job.ctx.charges.text()

    def _finish(
        self,
        job: _Job,
        event: str,
        body: str | bytes,
        etype: str,
        *,
        retryable: bool = True,
        traceback: str = "",
    ) -> None:
        # (what the handler charged travels with its end: no round trip of its own)
        charges = self._ended(job, event)
        ending = Ending(
            event, job.lease, body, etype, int(retryable), -1, random.random(), traceback, charges
        )
        self.processed += 1
        self._ending_entries.add(job.entry)
        # the span ends with the reply, which says the state the attempt left the task in
        span, job.span = job.span, Attempt(None)
        if job.wf:
            # a workflow's task: its end and the workflow's accounting are one script call
            # (wf_finish.lua), off the batched path below
            self._finish_workflow_task(job, ending, span)
            return
        self._spans[job.entry] = span
        self._finish_items.append((job.keys, ending, job.id, job.entry))
        self._finish_sent.clear()
        if self._finisher is None or self._finisher.done():
            self._finish_idle.clear()
            self._finisher = asyncio.get_running_loop().create_task(self._flush_finishes())

    def _shard(self, task_id: str) -> int:
        """The shard (lane number) of one of the namespace's task ids."""
        if len(self._lanes) == 1:
            return 0
        k = self.store.shards.shard_of(task_id)
        return k if k < len(self._lanes) else 0

    def _store_of(self, task_id: str) -> Store:
        """The store of the shard of a task id (the namespace's, unsharded)."""
        return self._lanes[self._shard(task_id)].store

    async def _flush_finishes(self) -> None:
        """Send whatever finished, in one script call per batch and shard, until nothing
        is left."""
        backoff = 0.05
        give_up = time.monotonic() + self.lease_ms / 1000
        while self._finish_items:
            items, self._finish_items = self._finish_items[:500], self._finish_items[500:]
            if not self._finish_items:
                # (unsharded, the call below writes them before this task yields: see
                # _take; sharded, each shard's call is on its way once gathered)
                self._finish_sent.set()
            groups = group_by_shard(items, lambda i: self._shard(i[2]), len(self._lanes))
            if len(groups) == 1:
                ((shard, group),) = groups.items()
                outcomes: list[Exception | None] = [await self._finish_group(shard, group)]
            else:
                outcomes = await asyncio.gather(
                    *(self._finish_group(k, g) for k, g in groups.items())
                )
            again = [i for g, exc in zip(groups.values(), outcomes, strict=True) if exc for i in g]
            if not again:
                continue
            exc = next(e for e in outcomes if e is not None)
            # keep the results: the lease may still be ours when Redis is back
            self._finish_items[:0] = again
            self._finish_sent.clear()
            if time.monotonic() > give_up:
                log.error(
                    "worker %s: dropping %d results after redis outage (%s); the "
                    "reaper will recover the tasks",
                    self.name,
                    len(again),
                    exc,
                )
                for _, e, _, entry in self._finish_items:
                    self._end_span(entry, e.event)
                # their entries stay marked as ending: the tasks are RUNNING under this
                # worker's lease until the reaper takes them back, and must not run again
                self._finish_items.clear()
                self._finish_sent.set()
                break
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)
        self._finish_idle.set()

    async def _finish_group(
        self, shard: int, items: list[tuple[TaskKeys, Ending, str, str]]
    ) -> Exception | None:
        """finish.lua for one shard's part of a batch; the error that Redis could not be
        reached with (the items are to be sent again), else None once written."""
        work = self._lanes[shard].store.work

        async def call(part: Sequence[tuple[TaskKeys, Ending, str, str]]) -> list[Any]:
            return await work.finish([(k, e) for k, e, _, _ in part])

        try:
            done = await each_alone(call, items, log, f"worker {self.name}: finish batch")
        except Exception as exc:
            if not about_server(exc):
                raise
            return exc
        for (_, e, tid, entry), err in done.failed:
            # its task's data breaks finish.lua: the reaper takes the task back after
            # its lease and quarantines it (its entry stays marked as ending)
            log.error("worker %s: %s of task %s failed: %s", self.name, e.event, tid, err)
            self._end_span(entry, e.event)
        bad = {tid for (_, _, tid, _), _ in done.failed}
        items = [i for i in items if i[2] not in bad]
        replies = [r for part in done.replies for r in part]
        if any(r.released for r in replies):
            # tasks with successors ended: release (or cancel) them now, not at the
            # reaper's next sweep
            self._release_successors(shard)
        self._ending_entries.difference_update(entry for *_, entry in items)
        for (_, e, tid, entry), (code, state) in zip(items, replies, strict=True):
            # a refused end leaves the task as it was: the state says which
            self._end_span(entry, e.event if code >= 0 else f"{e.event} refused", state)
            if code < 0:
                log.warning(
                    "worker %s: %s of task %s refused (task is %s)",
                    self.name,
                    e.event,
                    tid,
                    state,
                )
        return None

    def _release_successors(self, shard: int = 0) -> None:
        self._release_shards.add(shard)
        if self._releaser is None or self._releaser.done():
            self._releaser = asyncio.get_running_loop().create_task(self._run_releases())

    async def _run_releases(self) -> None:
        while self._release_shards:
            shards, self._release_shards = sorted(self._release_shards), set()
            for shard in shards:
                try:
                    await self._lanes[shard].store.successors.release("worker")
                except RsjobsError as exc:
                    # the entries stay on the release stream: the reaper's sweep handles
                    # them
                    log.warning(
                        "worker %s: release step failed (%s); left to the reaper", self.name, exc
                    )

    def _end_span(self, entry: str, outcome: str, state: str = "") -> None:
        span = self._spans.pop(entry, None)
        if span is not None:
            span.end(outcome, state)

    def _finish_workflow_task(self, job: _Job, ending: Ending, span: Attempt) -> None:
        if self._wf_finisher is None:
            from ..workflows.finish import WorkflowFinisher

            self._wf_finisher = WorkflowFinisher(self.store, self.name)
        finisher, entry = self._wf_finisher, job.entry

        async def call() -> int:
            try:
                code = await finisher.finish(
                    job.wf, job.id, job.keys, ending, give_up_s=self.lease_ms / 1000
                )
            finally:
                span.end(ending.event)
            if code:  # written (0: given up, the entry stays marked as ending)
                self._ending_entries.discard(entry)
            return code

        task = asyncio.get_running_loop().create_task(call())
        self._wf_pending.add(task)
        task.add_done_callback(self._wf_pending.discard)

    def _defer(self, job: _Job, d: Deferral) -> None:
        """The handler handed its attempt to an outside job: DEFER (defer.lua), off the
        handler's slot (freed when _run returns). Retried through a Redis outage until the
        lease would lapse (then the reaper takes the task back: RECLAIM)."""
        self.processed += 1
        self._ending_entries.add(job.entry)
        deferred, entry = self._store_of(job.id).deferred, job.entry
        charges = self._ended(job, "DEFER")

        async def call() -> None:
            backoff, give_up = 0.05, time.monotonic() + self.lease_ms / 1000
            while True:
                try:
                    reply = await deferred.defer(
                        job.keys,
                        job.lease,
                        d.external_id,
                        d.provider,
                        d.max_wait_ms,
                        d.poll_every_ms,
                        d.message,
                        charges,
                    )
                    break
                except RedisUnavailable as exc:
                    if time.monotonic() > give_up:
                        log.error(
                            "worker %s: DEFER of task %s dropped after redis outage (%s)",
                            self.name,
                            job.id,
                            exc,
                        )
                        return
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 2.0)
                except RsjobsError as exc:
                    log.error("worker %s: DEFER of task %s failed: %s", self.name, job.id, exc)
                    return
            self._ending_entries.discard(entry)
            if reply.code < 0:
                log.warning(
                    "worker %s: DEFER of task %s refused (%s, task is %s)",
                    self.name,
                    job.id,
                    reply.code.name,
                    reply.state,
                )

        task = asyncio.get_running_loop().create_task(call())
        self._defer_pending.add(task)
        task.add_done_callback(self._defer_pending.discard)

    async def _flush_all(self) -> None:
        while self._finisher is not None and not self._finisher.done():
            await self._finisher
        if self._finish_items:
            await self._flush_finishes()
        if self._wf_pending:
            await asyncio.gather(*self._wf_pending, return_exceptions=True)
        if self._defer_pending:
            await asyncio.gather(*self._defer_pending, return_exceptions=True)
        if self._releaser is not None:
            await asyncio.gather(self._releaser, return_exceptions=True)
        await self.polls.drain()

    # -- heartbeats, progress, control ---------------------------------------------------

    async def _beat_loop(self) -> None:
        hb = self.heartbeat_ms / 1000
        next_beat = time.monotonic() + hb
        next_recheck = time.monotonic() + self.lease_ms / 1000
        while not self._closing:
            self.probes.beat()
            wait = next_beat - time.monotonic()
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._progress_wake.wait(), wait)
            self._progress_wake.clear()
            full = time.monotonic() >= next_beat
            jobs = [
                j
                for j in self.jobs.values()
                if j.ctx is not None and (full or j.ctx.progress_value != j.progress_sent)
            ]
            try:
                if jobs:
                    await self._beat(jobs)
                if full:
                    await self._read_paused()
                    await self._register()
            except Exception as exc:  # heartbeats must go on, whatever one beat met
                log.warning("worker %s: heartbeat failed (%s)", self.name, exc)
            if full:
                next_beat = time.monotonic() + hb
                if next_beat >= next_recheck:
                    # once a lease: anything delivered to us that we do not run (a reply
                    # that never arrived) is picked up from our own pending list
                    for lane in self._lanes:
                        lane.recheck = True
                    next_recheck = next_beat + self.lease_ms / 1000
            else:
                await asyncio.sleep(self.progress_ms / 1000)  # coalesce progress bursts

    async def _beat(self, jobs: list[_Job]) -> None:
        """Heartbeats (heartbeat.lua) of running jobs: one call per shard's group, the
        groups together; the first error, once every group is done."""
        groups = group_by_shard(jobs, lambda j: self._shard(j.id), len(self._lanes))
        if len(groups) == 1:
            ((shard, group),) = groups.items()
            await self._beat_shard(shard, group)
            return
        outcomes = await asyncio.gather(
            *(self._beat_shard(k, g) for k, g in groups.items()), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def _beat_shard(self, shard: int, jobs: list[_Job]) -> None:
        items: list[tuple[TaskKeys, BeatItem]] = []
        sent: list[float | None] = []
        for j in jobs:
            ctx = j.ctx
            assert ctx is not None
            p = ctx.progress_value
            changed = p is not None and p != j.progress_sent
            beat = BeatItem(
                j.lease,
                j.entry,
                f"{p:g}" if changed and p is not None else "",
                ctx.progress_msg if changed else "",
            )
            items.append((j.keys, beat))
            sent.append(p)
        work = self._lanes[shard].store.work

        async def call(part: Sequence[int]) -> list[Beat]:
            return await work.heartbeat(self.name, self.lease_ms, [items[i] for i in part])

        # one task whose data breaks heartbeat.lua must not cost every other its lease
        done = await each_alone(call, range(len(jobs)), log, f"worker {self.name}: heartbeat")
        for i, exc in done.failed:
            log.error("worker %s: heartbeat of task %s failed (%s); stopping it", self.name,
                      jobs[i].id, exc)  # fmt: skip
            jobs[i].stop("LOST")
        bad = {i for i, _ in done.failed}
        keep = [i for i in range(len(jobs)) if i not in bad]
        jobs, sent = [jobs[i] for i in keep], [sent[i] for i in keep]
        replies = [r for part in done.replies for r in part]
        for j, p, word in zip(jobs, sent, replies, strict=True):
            j.progress_sent = p
            if word is not Beat.OK:
                log.info("worker %s: task %s is %s; stopping its handler", self.name, j.id, word)
                j.stop(word.value)

    async def _control_loop(self, lane: ShardLane) -> None:
        """Hear CANCEL / PAUSE notices of tasks and PAUSE_QUEUE / RESUME_QUEUE notices of
        queues on one shard's control channel at once (heartbeats are the fallback: they
        renew leases and read the pause flags again)."""
        while not self._closing:
            try:
                async for event, subject in lane.store.work.control_notices():
                    if event == "SUBSCRIBED":
                        # what was published before we listened (a read that fails now is
                        # made again by the next heartbeat)
                        with contextlib.suppress(RsjobsError):
                            await self._read_paused(lane)
                    elif event == "PAUSE_QUEUE":
                        self._set_paused(subject, True, "notice", lane)
                    elif event == "RESUME_QUEUE":
                        self._resumed(subject, "notice", lane)
                    elif (job := self.jobs.get(subject)) is not None:
                        job.stop({"CANCEL": "CANCELLED", "PAUSE": "PAUSED"}.get(event, event))
            except RedisUnavailable:
                await asyncio.sleep(0.5)

    async def _promote_loop(self) -> None:
        """Move due SCHEDULED tasks back to their queues (the reaper does it too), on
        every shard."""
        last: dict[int, str] = {}
        while not self._closing:
            await asyncio.sleep(self.promote_ms / 1000)
            for lane in self._lanes:
                try:
                    await lane.store.work.promote_due("worker")
                    last.pop(lane.number, None)
                except RedisUnavailable:
                    pass
                except Exception as exc:  # e.g. a corrupt scheduled task: the reaper isolates it
                    if str(exc) != last.get(lane.number):
                        log.warning("worker %s: promoting failed (%s)", self.name, exc)
                    last[lane.number] = str(exc)

    async def _register(self) -> None:
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "queues": self.queues,
            "concurrency": self.concurrency,
            "started_at": int(self.started_at * 1000),
            "beat_at": int(time.time() * 1000),
            "lease_ms": self.lease_ms,
            "running": list(self.jobs)[:100],
            "processed": self.processed,
            # its queues whose pause flag it has seen (it reads nothing of them)
            "paused": sorted(self.paused),
            # sync handlers that outlived their task, each holding a slot (see _hold)
            "stuck": [
                {
                    "task": s.task_id,
                    "attempt": s.attempt,
                    "reason": s.reason,
                    "since": int(s.since * 1000),
                }
                for s in list(self._stuck.values())[:100]
            ],
        }
        registration = encode(info)
        if len(self._lanes) == 1:
            await self.store.work.register(self.name, registration)
        else:
            # on every shard: the reaper's scripts read the registry in the slot they sweep
            await asyncio.gather(
                *(lane.store.work.register(self.name, registration) for lane in self._lanes)
            )
        self.probes.contact()

    async def _unregister(self) -> None:
        for lane in self._lanes:
            with contextlib.suppress(RsjobsError, OSError):
                await lane.store.work.unregister(self.name)


def _payload(raw: str) -> Any:
    """A task's stored payload, decoded; :class:`PayloadError` when it does not decode (it
    was not written by rsjobs) or is missing."""
    if not raw:
        raise PayloadError("the task has no payload field")
    try:
        return decode(raw)
    except msgspec.DecodeError as exc:
        raise PayloadError(f"the task's payload does not decode as JSON: {exc}") from None
