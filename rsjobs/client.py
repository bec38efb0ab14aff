"""The asyncio client: submit tasks, read them, control them, wait for them.

Every state change goes through a transition script (``fsm.lua``); this module checks
arguments and turns the store's typed replies into results or exceptions. It speaks to
Redis only through :class:`rsjobs.store.Store`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
from redis.asyncio import Redis

from .bulk import RETRYABLE, check_filter, check_limit, run_bulk
from .codec import decode, encode_payload
from .costs import DIMENSIONS, CostReport, TaskCost, WorkflowCost
from .dedup import Submitted, check_batch, check_repeat
from .errors import (
    ConfigError,
    InvalidTransition,
    PredecessorRefused,
    RedisUnavailable,
    TaskNotFound,
    UnknownPredecessor,
    UnknownQueue,
    WaitTimeout,
    WorkflowNotFound,
)
from .ids import validate_task_id
from .labels import encode_labels, validate_labels
from .limits import (
    QueueLimits,
    RateLimit,
    check_owner,
    check_owner_limit,
    check_priority,
    check_rate,
    check_type,
    queue_name,
    rate_field,
)
from .model import RESTART, allowed, is_terminal
from .names import validate_name, validate_type
from .queries import Labels, Names, list_query
from .schedules import Schedule, ScheduleInfo
from .schedules import check as check_schedule
from .schemas import (
    BulkItem,
    BulkResult,
    EnqueueRequest,
    EnqueueResult,
    HistoryEntry,
    QueuePause,
    RetryResult,
    TaskFilter,
    TaskInfo,
    TaskPage,
    WebhookDelivery,
)
from .settings import Settings
from .store import Code, Shards, Store, TaskRef, error_of
from .store.connection import connect
from .store.history import position as history_position
from .store.layout import NewTask, task_options
from .store.replies import AfterReply
from .store.selection import Selected
from .store.tasks import pause_record
from .successors import SUCCESSORS_MAX, check_after
from .tracing import NO_TRACE, TraceContext, enqueue_span, task_attributes

if TYPE_CHECKING:
    from .overview import DeadLetterPage, QueueSeries, QueueView
    from .reaper import WorkerInfo
    from .workflows.listing import WorkflowPage

#: events read per XREAD of Client.wait
_WAIT_BATCH = 1000

__all__ = ["Client", "connect", "validate_task_id"]

_ID_CHARS = frozenset("0123456789abcdef")


def _is_task_id(value: str) -> bool:
    return isinstance(value, str) and len(value) == 32 and set(value) <= _ID_CHARS


_delivery = msgspec.json.Decoder(WebhookDelivery)


def new_task_id() -> str:
    return uuid.uuid4().hex


#: the longest time a request may name (delays, deadlines, backoff): one year
MAX_MS = 365 * 24 * 3600 * 1000
#: the longest reason a cancel / pause / resume may carry (control.lua takes 4096 bytes)
MAX_REASON = 1000
#: how long a client takes a queue it registered as registered (s): a queue deleted since
#: is registered again by the client's next submit to it after this
KNOWN_QUEUES_S = 60.0
_MS_FIELDS = ("timeout_ms", "delay_ms", "wait_timeout_ms", "backoff_base_ms", "backoff_max_ms")


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_request(r: EnqueueRequest, limit: int) -> bytes:
    """Validate one request before anything is written; returns its encoded payload."""
    validate_type(r.type)
    validate_name("queue", r.queue)
    if not _is_int(r.max_attempts) or not 1 <= r.max_attempts <= 1000:
        raise ConfigError("max_attempts must be an integer between 1 and 1000")
    for name in _MS_FIELDS:
        v = getattr(r, name)
        if not _is_int(v) or not 0 <= v <= MAX_MS:
            raise ConfigError(f"{name} must be an integer of milliseconds in [0, {MAX_MS}]")
    if r.backoff_max_ms < r.backoff_base_ms:
        raise ConfigError("backoff_max_ms must be >= backoff_base_ms")
    if r.dedup_key is not None and not (
        isinstance(r.dedup_key, str) and 0 < len(r.dedup_key) <= 256
    ):
        raise ConfigError("dedup_key must be a string of 1-256 characters")
    if r.owner is not None and not (isinstance(r.owner, str) and 0 < len(r.owner) <= 200):
        raise ConfigError("owner must be a string of 1-200 characters")
    if r.labels is not None:
        validate_labels(r.labels)
    check_after(r.after, r.after_policy)
    check_priority(r.priority)
    return encode_payload(r.payload, limit)


def new_task(
    tid: str, r: EnqueueRequest, payload: bytes, trace: TraceContext = NO_TRACE
) -> NewTask:
    """What ``enqueue.lua`` takes for one checked request, submitted in ``trace``."""
    return NewTask(
        tid,
        r.type,
        r.queue,
        payload,
        task_options(
            max_attempts=r.max_attempts,
            timeout_ms=r.timeout_ms,
            delay_ms=r.delay_ms,
            wait_timeout_ms=r.wait_timeout_ms,
            backoff_base_ms=r.backoff_base_ms,
            backoff_max_ms=r.backoff_max_ms,
            dedup=r.dedup_key,
            owner=r.owner,
            labels=encode_labels(r.labels),
            traceparent=trace.traceparent,
            tracestate=trace.tracestate,
            after_policy=r.after_policy if r.after else "",
            priority=r.priority,
        ),
    )


def _after_result(reply: AfterReply) -> EnqueueResult:
    """What ``after.lua`` answered, or the exception it stands for."""
    if reply.code is Code.NOT_FOUND:
        raise UnknownPredecessor(reply.message)
    if reply.code is Code.REFUSED:
        raise PredecessorRefused(reply.message)
    return EnqueueResult(id=reply.id, state=reply.state, duplicate=reply.code is Code.NOTHING)


class Client:
    """Submit, inspect and control tasks of one namespace.

    ``redis`` must be a ``redis.asyncio.Redis`` created with ``decode_responses=True``
    (use :func:`connect` or :meth:`from_url`). ``source`` is what history records as the
    actor of control commands (``api``, ``user``, ...).
    """

    def __init__(
        self, redis: Redis, settings: Settings | None = None, *, source: str = "api"
    ) -> None:
        self.redis = redis
        self.settings = settings or Settings()
        self.source = source
        self.store = Store(redis, self.settings)
        self.keys = self.store.keys
        #: the queues this client registered (each registered once, not per submit), kept
        #: KNOWN_QUEUES_S: a queue deleted meanwhile (``delete_queue``) is registered again
        self._known_queues: set[str] = set()
        self._known_since = time.monotonic()

    @classmethod
    def from_url(cls, url: str, *, source: str = "api", **settings: Any) -> Client:
        return cls(connect(url), Settings(**settings), source=source)

    async def close(self) -> None:
        await self.store.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- submitting ----------------------------------------------------------------------

    async def enqueue(
        self,
        type: str,
        payload: Any = None,
        *,
        queue: str = "default",
        max_attempts: int = 3,
        timeout_ms: int = 0,
        delay_ms: int = 0,
        dedup_key: str | None = None,
        owner: str | None = None,
        backoff_base_ms: int = 1000,
        backoff_max_ms: int = 300_000,
        wait_timeout_ms: int = 0,
        labels: Mapping[str, str] | None = None,
        after: Sequence[str] | None = None,
        after_policy: str = "succeeded",
        shard_key: str | None = None,
        priority: int = 0,
    ) -> str:
        """Submit one task; returns its id.

        ``max_attempts`` bounds failed executions (failures, timeouts, lost workers);
        ``timeout_ms`` is the execution deadline of one attempt (0 = none); ``delay_ms``
        schedules it for later; a second submit with the same ``dedup_key`` (while the first
        task exists) and the same type, queue and payload returns the first task's id and
        writes nothing, one with another type, queue or payload raises
        :class:`DedupKeyReused` (see :mod:`rsjobs.dedup`); ``owner`` is recorded for access
        control; ``wait_timeout_ms`` expires it if no worker starts it in time; ``labels``
        (at most 8 ``key: value`` texts, :mod:`rsjobs.labels`) are shown with it and listed
        by; ``priority`` (0-9, higher first; :mod:`rsjobs.limits`) orders it on its queue.
        ``after`` (1-32 task ids of the same owner) makes it a successor: it waits
        (WAITING) until they all SUCCEEDED, then runs with their results
        (``ctx.predecessors``); one that fails, times out or is cancelled cancels it, with
        that reason, unless ``after_policy="always"`` (it runs once all are finished). Its
        delay and queue-wait deadline start when it is released (:mod:`rsjobs.successors`).
        Raises :class:`ConfigError` or :class:`PayloadError` on bad input,
        :class:`UnknownPredecessor` (no such task, or another owner's) or
        :class:`PredecessorRefused`, before any write.

        In a sharded namespace (:mod:`rsjobs.store.shards`) a task goes to the shard of
        its owner, else of its dedup key, else of its predecessors, else of ``shard_key``
        (any text: tasks given the same one share a shard, e.g. the tasks of a diamond of
        successors), else round-robin. ``shard_key`` changes nothing else and is not
        stored; it does nothing in a namespace of one shard.
        """
        result = await self.submit(
            EnqueueRequest(
                type=type,
                payload=payload,
                queue=queue,
                max_attempts=max_attempts,
                timeout_ms=timeout_ms,
                delay_ms=delay_ms,
                dedup_key=dedup_key,
                owner=owner,
                backoff_base_ms=backoff_base_ms,
                backoff_max_ms=backoff_max_ms,
                wait_timeout_ms=wait_timeout_ms,
                labels=dict(labels) if labels is not None else None,
                after=list(after) if after is not None else None,
                after_policy=after_policy,
                priority=priority,
            ),
            shard_key=shard_key,
        )
        return result.id

    async def submit(self, req: EnqueueRequest, *, shard_key: str | None = None) -> EnqueueResult:
        """Submit one task and say what happened (id, state, duplicate); see :meth:`enqueue`."""
        encoded = _check_request(req, self.settings.payload_limit)
        _check_shard_key(shard_key)
        shards = await self.store.open()
        shard = self._shard_of(shards, req, shard_key)
        store, tid = self.store.shard(shard), shards.new_id(shard)
        if not self._knows(req.queue):
            # a queue new to this client is registered (and counted for its owner) once
            # every check that could refuse the request has passed: a refusal writes nothing
            await self._check_predecessors([req])
            await self._check_dedup([req], [encoded], [shard])
            await self._remember_queues([req])
        keys = store.keys.task_keys(tid, req.queue, req.dedup_key, req.priority)
        attributes = task_attributes(tid, req.type, req.queue, "send")
        attributes["rsjobs.task.owner"] = req.owner
        with enqueue_span(f"rsjobs.enqueue {req.type}", attributes) as trace:
            task = new_task(tid, req, encoded, trace)
            if req.after:
                result = _after_result(
                    await store.successors.enqueue(self.source, keys, task, req.after, durable=True)
                )
            else:
                (result,) = await store.tasks.enqueue(self.source, [(keys, task)], durable=True)
            if result.duplicate and req.dedup_key is not None:
                # enqueue.lua wrote nothing; the task the key names must be this request
                info = await self.store.tasks.get(result.id)
                if info is not None:  # expired since: nothing left to disagree with
                    check_repeat(info, req.dedup_key, req.type, req.queue, decode(encoded))
        return result

    async def enqueue_many(
        self,
        requests: Iterable[EnqueueRequest],
        *,
        chunk: int = 250,
        shard_key: str | None = None,
    ) -> list[str]:
        """Submit many tasks in few round trips (``chunk`` per script call); returns ids.

        Every request is validated before the first one is written, its dedup key too: a
        key that names a live task with another type, queue or payload, or two requests
        of the call sharing a key with different ones, raise :class:`DedupKeyReused` and
        nothing is written. Should such a task appear while the call runs, the requests
        are submitted and the call raises :class:`DedupKeyReused` at the end. The
        predecessors of successors (``after``) are checked before the first write too
        (:class:`UnknownPredecessor`, :class:`PredecessorRefused`); each successor is one
        script call of its own.

        In a sharded namespace each task is placed as :meth:`enqueue` says (``shard_key``:
        for every task of the call that no other rule places), and the tasks are grouped
        by shard: one single-slot script call per group (and chunk); the ids come back in
        the order of ``requests``.
        """
        reqs = list(requests)
        limit = self.settings.payload_limit
        encoded = [_check_request(r, limit) for r in reqs]
        _check_shard_key(shard_key)
        shards = await self.store.open()
        placed = [self._shard_of(shards, r, shard_key) for r in reqs]
        await self._check_dedup(reqs, encoded, placed)
        await self._check_predecessors(reqs)
        queues = {r.queue for r in reqs}
        await self._remember_queues(reqs)
        attributes: dict[str, Any] = {
            "messaging.system": "rsjobs",
            "messaging.operation.type": "send",
            "messaging.batch.message_count": len(reqs),
            "messaging.destination.name": next(iter(queues)) if len(queues) == 1 else None,
        }
        # one span for the call, its context stored with every task of it
        with enqueue_span("rsjobs.enqueue_many", attributes) as trace:
            return await self._enqueue_checked(reqs, encoded, placed, chunk, trace)

    async def _enqueue_checked(
        self,
        reqs: list[EnqueueRequest],
        encoded: list[bytes],
        placed: list[int],
        chunk: int,
        trace: TraceContext,
    ) -> list[str]:
        """Write the checked requests (:meth:`enqueue_many`), each on its shard
        (``placed``), submitted in ``trace``."""
        # two chunks in flight (on two connections): Python packs the next chunk while
        # Redis runs the previous one
        gate = asyncio.Semaphore(2)
        shards = self.store.shards
        plain = [i for i, r in enumerate(reqs) if not r.after]
        # the plain tasks grouped by shard (one single-slot call per group and chunk)
        groups: dict[int, list[int]] = {}
        for i in plain:
            groups.setdefault(placed[i], []).append(i)
        calls = [
            (shard, where[start : start + chunk])
            for shard, where in groups.items()
            for start in range(0, len(where), chunk)
        ]

        async def send(shard: int, where: list[int]) -> list[EnqueueResult]:
            async with gate:
                store = self.store.shard(shard)
                tasks = []
                for i in where:
                    r, tid = reqs[i], shards.new_id(shard)
                    tasks.append(
                        (
                            store.keys.task_keys(tid, r.queue, r.dedup_key, r.priority),
                            new_task(tid, r, encoded[i], trace),
                        )
                    )
                return await store.tasks.enqueue(self.source, tasks, durable=True)

        async def send_successor(i: int) -> EnqueueResult:
            async with gate:
                store = self.store.shard(placed[i])
                r, tid = reqs[i], shards.new_id(placed[i])
                reply = await store.successors.enqueue(
                    self.source,
                    store.keys.task_keys(tid, r.queue, r.dedup_key, r.priority),
                    new_task(tid, r, encoded[i], trace),
                    r.after or (),
                    durable=True,
                )
                return _after_result(reply)

        parts = await asyncio.gather(*(send(shard, where) for shard, where in calls))
        out: list[EnqueueResult | None] = [None] * len(reqs)
        for (_, where), part in zip(calls, parts, strict=True):
            for i, res in zip(where, part, strict=True):
                out[i] = res
        # the successors after the plain tasks, in their order (their predecessors were
        # checked above: an error now means one was cancelled and expired meanwhile)
        for i, r in enumerate(reqs):
            if r.after:
                out[i] = await send_successor(i)
        results = [res for res in out if res is not None]
        # a task submitted by someone else since the check above: the same rule, after
        dups = [
            (r.dedup_key, r, e, res.id)
            for r, e, res in zip(reqs, encoded, results, strict=True)
            if res.duplicate and r.dedup_key is not None
        ]
        if dups:
            infos = await self.store.tasks.get_many([tid for *_, tid in dups])
            for (key, r, e, _), info in zip(dups, infos, strict=True):
                if info is not None:
                    check_repeat(info, key, r.type, r.queue, decode(e))
        return [res.id for res in results]

    async def _check_dedup(
        self, reqs: list[EnqueueRequest], encoded: list[bytes], placed: list[int]
    ) -> None:
        """:mod:`rsjobs.dedup`'s rule for the keyed requests of one batch, before any
        write: against each other, then against the live tasks their keys name (on the
        shard each request goes to)."""
        keyed: list[tuple[str, Submitted, int]] = [
            (r.dedup_key, (r.type, r.queue, decode(e)), shard)
            for r, e, shard in zip(reqs, encoded, placed, strict=True)
            if r.dedup_key is not None
        ]
        if not keyed:
            return
        check_batch([(key, sub) for key, sub, _ in keyed])
        for shard in sorted({shard for *_, shard in keyed}):
            mine = [(key, sub) for key, sub, at in keyed if at == shard]
            infos = await self.store.shard(shard).tasks.by_dedup_many([key for key, _ in mine])
            for (key, (type_, queue, payload)), info in zip(mine, infos, strict=True):
                if info is not None:
                    check_repeat(info, key, type_, queue, payload)

    def _shard_of(self, shards: Shards, r: EnqueueRequest, shard_key: str | None) -> int:
        """The shard a request goes to (:meth:`Shards.place`)."""
        return shards.place(owner=r.owner, dedup=r.dedup_key, after=r.after, shard_key=shard_key)

    async def _check_predecessors(self, reqs: list[EnqueueRequest]) -> None:
        """The predecessors of the successors of one batch, before any write: each one a
        task of the successor's owner (:class:`UnknownPredecessor` otherwise), not a
        workflow's, and with room for the batch's successors (:class:`PredecessorRefused`;
        after.lua checks the same again)."""
        named = list(dict.fromkeys(p for r in reqs for p in r.after or ()))
        if not named:
            return
        refs = dict(zip(named, await self.store.successors.predecessors(named), strict=True))
        adding: dict[str, int] = {}
        for r in reqs:
            for p in r.after or ():
                ref = refs[p]
                if ref is None or ref.owner != (r.owner or ""):
                    raise UnknownPredecessor(p)
                if ref.wf:
                    raise PredecessorRefused(
                        f"predecessor {p} is a task of workflow {ref.wf}: a workflow orders "
                        "its tasks by its stages"
                    )
                adding[p] = adding.get(p, 0) + 1
                if not is_terminal(ref.state) and ref.successors + adding[p] > SUCCESSORS_MAX:
                    raise PredecessorRefused(
                        f"predecessor {p} would have more than {SUCCESSORS_MAX} successors"
                    )

    def _knows(self, queue: str) -> bool:
        """Whether this client registered ``queue`` in the last :data:`KNOWN_QUEUES_S`."""
        if time.monotonic() - self._known_since > KNOWN_QUEUES_S:
            self._known_queues.clear()
            self._known_since = time.monotonic()
        return queue in self._known_queues

    async def _remember_queues(self, reqs: Sequence[EnqueueRequest]) -> None:
        """Register the queues of ``reqs`` this client has not registered yet, each new
        one counted for the owner of the first request naming it (``Settings.queue_quota``:
        :class:`QueueQuotaExceeded`, checked for every owner of the batch before the
        first name is written)."""
        by_owner: dict[str, set[str]] = {}
        taken: set[str] = set()
        for r in reqs:
            if not self._knows(r.queue) and r.queue not in taken:
                taken.add(r.queue)
                by_owner.setdefault(r.owner or "", set()).add(r.queue)
        if not by_owner:
            return
        # before the first write: a namespace of an earlier layout takes none
        # (checked once; rsjobs.store.marker)
        await self.store.require_layout()
        quota = self.settings.queue_quota
        if len(by_owner) > 1 and quota:
            await self.store.queues.check_quota(by_owner, quota)
        for owner, new in by_owner.items():
            await self.store.tasks.remember_queues(new, owner=owner, quota=quota)
            self._known_queues |= new

    # -- reading -------------------------------------------------------------------------

    async def get(self, task_id: str) -> TaskInfo:
        """The task as stored now. Raises :class:`TaskNotFound`, or
        :class:`rsjobs.CorruptData` when its hash does not read (not written by rsjobs)."""
        info = await self.store.tasks.get(validate_task_id(task_id))
        if info is None:
            raise TaskNotFound(task_id)
        return info

    async def get_many(self, task_ids: Sequence[str]) -> list[TaskInfo | None]:
        """Several tasks in one round trip; ``None`` for ids that name no task."""
        return await self.store.tasks.get_many([validate_task_id(t) for t in task_ids])

    async def history(
        self, task_id: str, *, after: str = "0", count: int | None = None
    ) -> list[HistoryEntry]:
        """The task's history, oldest first; ``after`` is an exclusive entry id (entries
        are numbered ``"1"``, ``"2"``...; ``"0"`` or ``"-"``: from the first).

        A refusal entry carries how many more refusals of its kind it stands for
        (``repeats``, ``last_ts``: repeats are counted on the task hash, not appended).
        Raises :class:`ConfigError` when ``after`` is not an entry id.
        """
        validate_task_id(task_id)
        try:
            start = history_position(after)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        rows = await self.store.tasks.history(task_id, after=start, count=count)
        if rows is None:
            raise TaskNotFound(task_id)
        return rows.entries(task_id)

    async def wait(self, task_id: str, *, timeout_ms: int | None = None) -> TaskInfo:
        """Block until the task is terminal; driven by the namespace's events stream
        (XREAD BLOCK: the task is read again when an entry names it; no busy poll).

        Raises :class:`WaitTimeout` after ``timeout_ms`` (None = wait forever).
        """
        validate_task_id(task_id)
        events = (await self.store.at(task_id)).events  # the events of the task's shard
        # the cursor before the read: a transition after the read is an entry after it
        cursor = await events.last_id()
        info = await self.get(task_id)
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        while not info.terminal:
            block = 5000
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WaitTimeout(f"task {task_id} is still {info.state}")
                block = max(1, min(block, int(left * 1000)))
            try:
                entries = await events.read(cursor, _WAIT_BATCH, block)
            except RedisUnavailable:
                # a failover (UNBLOCKED, READONLY, a dropped connection) ends the read, not
                # the wait: read again once Redis answers, within the caller's timeout
                await asyncio.sleep(min(0.5, block / 1000))
                entries = []
            if entries:
                before, cursor = cursor, entries[-1][0]
                # when trimming overtook this reader, the task's entry may be among those
                # it never saw: read the task then
                mine = any(f.get("id") == task_id for _, f in entries)
                if not mine and not await events.trimmed_past(before):
                    continue
            info = await self.get(task_id)
        return info

    async def stats(self) -> dict[str, dict[str, int]]:
        """Per queue: task counts per state and stream length.

        Counts of non-terminal states are live; terminal counts are totals since the
        namespace was created (finished tasks expire after the retention period).
        """
        return await self.store.tasks.stats()

    async def list_tasks(
        self,
        *,
        state: Names = None,
        queue: Names = None,
        type: str | None = None,
        owner: str | None = None,
        label: Labels = None,
        since: int = 0,
        until: int = 0,
        cursor: str | None = None,
        limit: int = 50,
    ) -> TaskPage:
        """One page of tasks, newest first, from the indexes the scripts keep (no scan):
        ``state`` / ``queue`` (one or several), ``type``, ``owner``, ``label`` (``"key=
        value"``, several, or a mapping: all of them), ``since`` / ``until`` (ms,
        inclusive, on the time the list orders by: see :class:`rsjobs.TaskSummary`),
        ``cursor`` (the page's ``cursor`` gives the next page; None on the last),
        ``limit`` (1-500). Raises :class:`ConfigError` on a bad filter or cursor."""
        q = list_query(
            state=state,
            queue=queue,
            type=type,
            owner=owner,
            label=label,
            since=since,
            until=until,
            cursor=cursor,
            limit=limit,
        )
        return await self.store.index.page(q)

    async def queues(self) -> list[QueueView]:
        """Every queue: its stream's depth, task counts per state, the age of its oldest
        undelivered task, whether it is paused, the live workers serving it."""
        from .overview import queue_views

        return await queue_views(self.store)

    async def queue_series(self, queue: str, *, minutes: int = 60) -> QueueSeries:
        """The queue's per-minute series over the last ``minutes`` (1-1440): tasks
        enqueued, started, succeeded, failed, timed out, cancelled, and its backlog, from
        the counters the reaper samples once a minute. Raises :class:`rsjobs.UnknownQueue`
        for a queue never used, :class:`rsjobs.ConfigError` for bad arguments."""
        from .overview import queue_series

        return await queue_series(self.store, queue, minutes=minutes)

    async def list_workflows(
        self,
        *,
        state: str | None = None,
        name: str | None = None,
        owner: str | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> WorkflowPage:
        """A page of the namespace's workflows, newest first, in ``state``, of definition
        ``name``, of ``owner`` (None: any), after ``cursor`` (a page's). Raises
        :class:`rsjobs.ConfigError` for a bad filter, limit (1-200) or cursor."""
        from .workflows.listing import page

        return await page(
            self.store, state=state, name=name, owner=owner, cursor=cursor, limit=limit
        )

    async def workers(self) -> list[WorkerInfo]:
        """The workers registry: every registered worker, alive, late or dead, and what
        each holds."""
        from .reaper import list_workers

        return await list_workers(self.store)

    async def deadletters(self, *, cursor: str | None = None, limit: int = 50) -> DeadLetterPage:
        """A page of the dead-letter stream, newest first (``cursor``: a page's)."""
        from .overview import deadletter_page

        return await deadletter_page(self.store, cursor=cursor, limit=limit)

    async def counters(self) -> dict[str, int]:
        """Raw counters: transitions per event (``ev:X``) and refusals (``rej:X``)."""
        raw = await self.store.tasks.counters()
        return {k: v for k, v in raw.items() if k.startswith(("ev:", "rej:"))}

    # -- costs (rsjobs.costs, docs/costs.md) ---------------------------------------------

    async def task_cost(self, task_id: str) -> TaskCost:
        """What a task cost: each attempt it ran (its run time, deferred wait, charges and
        category: ok or the waste kind its end makes it) and their sums, from its history.
        Raises :class:`TaskNotFound`."""
        cost = await self.store.costs.task(validate_task_id(task_id))
        if cost is None:
            raise TaskNotFound(task_id)
        return cost

    async def workflow_cost(self, wf_id: str) -> WorkflowCost:
        """What a workflow cost: its tasks of every version and retry, summed in all, per
        stage and per task, with the waste split out (a regenerate's replaced work is
        ``superseded``). Raises :class:`rsjobs.workflows.WorkflowNotFound`."""
        from .workflows.client import validate_workflow_id

        cost = await self.store.costs.workflow(validate_workflow_id(wf_id))
        if cost is None:
            raise WorkflowNotFound(wf_id)
        return cost

    async def costs(self, by: str = "type", *, name: str | None = None) -> CostReport:
        """The namespace's cost totals along one dimension (``by``: queue, type, owner or
        stage), a row per name (``name``: that one only), each split per category. Raises
        :class:`ConfigError` for another dimension."""
        if by not in DIMENSIONS:
            raise ConfigError(f"by: one of {', '.join(DIMENSIONS)}, not {by!r}")
        if name is not None and (not isinstance(name, str) or not 0 < len(name) <= 300):
            raise ConfigError("name: a string of 1-300 characters")
        return await self.store.costs.report(by, name)

    # -- control -------------------------------------------------------------------------

    async def ref(self, task_id: str) -> TaskRef:
        """The task's state, owner, queue and dedup key in one read (what a caller checks
        before acting on it). Raises :class:`TaskNotFound`, and :class:`rsjobs.NotMigrated`
        for a task an earlier rsjobs wrote (``rsjobs migrate`` converts it)."""
        ref = await self.store.tasks.ref(validate_task_id(task_id))
        if ref is None:
            raise TaskNotFound(task_id)
        return ref

    async def control(
        self,
        task_id: str,
        event: str,
        reason: str = "",
        *,
        ref: TaskRef | None = None,
        source: str | None = None,
    ) -> tuple[Code, str]:
        """CANCEL, PAUSE or RESUME; the reply code and the state after the call. ``ref``:
        the task as :meth:`ref` read it (saves that read); ``source``: who acts, as
        history records it (default: the client's ``source``). Raises
        :class:`TaskNotFound` and :class:`InvalidTransition` (a PAUSE or RESUME the table
        refuses)."""
        validate_task_id(task_id)
        _check_reason(reason)
        src = self._source(source)
        if ref is None:
            ref = await self.ref(task_id)
        code, state = await self.store.tasks.control(src, task_id, ref, event, reason, durable=True)
        if code is Code.NOT_FOUND or (code is Code.REFUSED and event != "CANCEL"):
            raise error_of(code, subject=task_id, action=event, state=state)
        return code, state

    # -- recurring tasks -------------------------------------------------------------------

    async def schedule(
        self,
        name: str,
        *,
        type: str,
        payload: Any = None,
        cron: str = "",
        every_ms: int = 0,
        queue: str = "default",
        max_attempts: int = 3,
        timeout_ms: int = 0,
        owner: str | None = None,
        wait_timeout_ms: int = 0,
        labels: Mapping[str, str] | None = None,
        priority: int = 0,
    ) -> int:
        """Add (or replace) the recurring schedule ``name``: a task of ``type`` with
        ``payload`` each tick of ``cron`` (UTC) or every ``every_ms`` from now; fired by the
        reaper, one task per tick however many reapers run (:mod:`rsjobs.schedules` says
        what happens to ticks missed while none ran). Returns the first tick (ms, Redis
        TIME). Raises :class:`ConfigError` or :class:`PayloadError`, writing nothing."""
        req = EnqueueRequest(
            type=type,
            payload=payload,
            queue=queue,
            max_attempts=max_attempts,
            timeout_ms=timeout_ms,
            owner=owner,
            wait_timeout_ms=wait_timeout_ms,
            labels=dict(labels) if labels is not None else None,
            priority=priority,
        )
        _check_request(req, self.settings.payload_limit)
        s = Schedule(name=name, cron=cron, every_ms=every_ms, task=req)
        check_schedule(s)
        await self.store.require_layout()
        now = await self.store.reaper.now_ms()
        return await self.store.schedules.put(msgspec.structs.replace(s, anchor_ms=now), now)

    async def webhook_deliveries(self, task_id: str) -> list[WebhookDelivery]:
        """The task's webhook deliveries, every attempt, newest first (docs/hooks.md)."""
        store = await self.store.at(validate_task_id(task_id))
        return [_delivery.decode(raw) for raw in await store.hooks.deliveries(task_id)]

    async def unschedule(self, name: str) -> bool:
        """Remove the schedule ``name`` (its tasks stay); whether there was one."""
        return await self.store.schedules.remove(name)

    async def schedules(self) -> list[ScheduleInfo]:
        """Every schedule with its next tick and what it fired."""
        return await self.store.schedules.list()

    async def cancel(self, task_id: str, reason: str = "", *, source: str | None = None) -> str:
        """Cancel the task from any non-terminal state; returns the state after the call.

        Idempotent: cancelling a finished (or already cancelled) task changes nothing and
        returns its current state. A running handler is told at once (pub/sub) and at its
        next heartbeat at the latest.
        """
        _, state = await self.control(task_id, "CANCEL", reason, source=source)
        return state

    async def pause(self, task_id: str, reason: str = "", *, source: str | None = None) -> str:
        """Hold the task back (PENDING, SCHEDULED or RUNNING -> PAUSED).

        Raises :class:`InvalidTransition` when the task is terminal.
        """
        _, state = await self.control(task_id, "PAUSE", reason, source=source)
        return state

    async def resume(self, task_id: str, reason: str = "", *, source: str | None = None) -> str:
        """Put a PAUSED task back on its queue. Raises :class:`InvalidTransition` otherwise."""
        _, state = await self.control(task_id, "RESUME", reason, source=source)
        return state

    # -- starting over -------------------------------------------------------------------

    async def retry(
        self,
        task_id: str,
        reason: str = "",
        *,
        ref: TaskRef | None = None,
        source: str | None = None,
    ) -> RetryResult:
        """Start a FAILED, TIMED_OUT or CANCELLED task over as a new task (RETRY): same
        type, queue, payload, options and owner; linked both ways (the new task's
        ``retry_of``, the old one's ``retried_as`` and a RETRY entry in its history). The
        old task stays as it is; its dedup key names the new task from now on.

        A task already started over answers the task it was started over as, while that
        one exists (``created`` False, nothing written): retry *that* task to go on.
        Raises :class:`TaskNotFound`, and :class:`InvalidTransition` (recorded in the
        task's history) for a task that is not finished, a SUCCEEDED one (see
        :meth:`replay`) or a workflow's task (its workflow retries it)."""
        return await self._restart(task_id, "RETRY", reason, ref, source)

    async def replay(
        self,
        task_id: str,
        reason: str = "",
        *,
        ref: TaskRef | None = None,
        source: str | None = None,
    ) -> RetryResult:
        """Start a SUCCEEDED task over as a new task (REPLAY), as :meth:`retry` does for a
        failed one."""
        return await self._restart(task_id, "REPLAY", reason, ref, source)

    async def restart(
        self,
        task_id: str,
        reason: str = "",
        *,
        ref: TaskRef | None = None,
        source: str | None = None,
    ) -> RetryResult:
        """:meth:`replay` for a SUCCEEDED task, :meth:`retry` for any other (what a bulk
        retry of finished tasks does)."""
        if ref is None:
            ref = await self.ref(task_id)
        event = RESTART.get(ref.state, "RETRY")
        return await self._restart(task_id, event, reason, ref, source)

    async def _restart(
        self, task_id: str, event: str, reason: str, ref: TaskRef | None, source: str | None
    ) -> RetryResult:
        validate_task_id(task_id)
        _check_reason(reason)
        src = self._source(source)
        if ref is None:
            ref = await self.ref(task_id)
        replaces = ""
        store = await self.store.at(task_id)
        if ref.retried_as and allowed(ref.state, event, ref.state):
            # started over already: that task answers while it exists (nothing to write;
            # an event the state refuses goes to the script, which records the refusal)
            linked = await self.store.tasks.ref(ref.retried_as)
            if linked is not None:
                return RetryResult(
                    id=task_id, event=event, new_id=ref.retried_as, state=linked.state,
                    created=False,
                )  # fmt: skip
            replaces = ref.retried_as  # gone (retention): a new task may start it over
        # the task started over lives on the shard of the one it starts over
        new_id = store.shards.new_id(store.number)
        reply = await store.tasks.retry(
            src, task_id, ref, event, new_id, reason, replaces=replaces, durable=True
        )
        if reply.code is Code.APPLIED:
            return RetryResult(
                id=task_id, event=event, new_id=reply.id, state=reply.state, created=True
            )
        if reply.code is Code.NOTHING:  # a concurrent call started it over first
            linked = await self.store.tasks.ref(reply.id)
            return RetryResult(
                id=task_id, event=event, new_id=reply.id,
                state=linked.state if linked is not None else "", created=False,
            )  # fmt: skip
        raise error_of(
            reply.code, subject=task_id, action=event, state=reply.state, message=reply.message
        )

    # -- queues --------------------------------------------------------------------------

    async def pause_queue(
        self, queue: str, reason: str = "", *, source: str | None = None
    ) -> QueuePause:
        """Pause a whole queue: workers start nothing of it (they stop reading it, and a
        delivery they read before they heard is handed back); its running tasks go on, and
        tasks submitted to it stay PENDING. Idempotent: a paused queue answers its pause
        record with ``changed`` False."""
        return await self._queue_flag("PAUSE_QUEUE", queue, reason, source)

    async def resume_queue(
        self, queue: str, reason: str = "", *, source: str | None = None
    ) -> QueuePause:
        """Let a paused queue go on: its workers read it again at once."""
        return await self._queue_flag("RESUME_QUEUE", queue, reason, source)

    async def paused_queues(self) -> dict[str, QueuePause]:
        """Every paused queue of the namespace, with who paused it, when and why."""
        return await self.store.tasks.paused_queues()

    async def delete_queue(self, queue: str) -> int:
        """Remove an unused queue: its streams, its counters, its per-minute series, its
        limit bookkeeping, its pause record and its name (its owner's place in
        ``Settings.queue_quota`` is given back); returns how many keys and fields went.
        Raises :class:`QueueInUse` (nothing deleted) while it holds a pending, scheduled,
        running, paused, waiting or deferred task, a registered worker serves it or a
        schedule enqueues to it, and
        :class:`UnknownQueue` when there is no such queue. Its finished tasks stay until
        their retention ends; the costs keep its figures. A client that submitted to it
        registers it again with its next submit after :data:`KNOWN_QUEUES_S`."""
        validate_name("queue", queue)
        gone = await self.store.queues.delete(queue)
        self._known_queues.discard(queue)
        if not gone:
            raise UnknownQueue(queue)
        return gone

    async def _queue_flag(
        self, event: str, queue: str, reason: str, source: str | None
    ) -> QueuePause:
        validate_name("queue", queue)
        _check_reason(reason)
        reply = await self.store.tasks.queue_flag(
            self._source(source), event, queue, reason, durable=True
        )
        self._known_queues.add(queue)
        return msgspec.structs.replace(pause_record(queue, reply.record), changed=reply.changed)

    # -- limits of shared queues (rsjobs.limits) -------------------------------------------

    async def set_limit(self, queue: str, limit: int, *, owner: str | None = None) -> None:
        """At most ``limit`` RUNNING tasks of one owner on ``queue``: of every owner (the
        queue's default), or of ``owner`` (its own, over the default). Workers hold to it
        from their next start. Raises :class:`ConfigError` (nothing written) for a bad
        queue, owner or limit (an integer from 1 to 1,000,000)."""
        queue_name(queue)
        check_owner_limit(limit)
        field = f"c|{queue}|*" if owner is None else f"c|{queue}|{check_owner(owner)}"
        await self.store.require_layout()
        await self.store.limits.put(field, str(limit))

    async def clear_limit(self, queue: str, *, owner: str | None = None) -> bool:
        """Remove the queue's default per-owner limit, or ``owner``'s own (the default
        holds for it again); whether there was one."""
        queue_name(queue)
        field = f"c|{queue}|*" if owner is None else f"c|{queue}|{check_owner(owner)}"
        return await self.store.limits.remove(field)

    async def set_rate(
        self,
        queue: str,
        per_second: float,
        *,
        type: str | None = None,
        burst: int | None = None,
        retries: bool = False,
    ) -> RateLimit:
        """A token bucket of ``per_second`` starts (up to ``burst`` at once; default one
        second's worth) for ``queue``, for tasks of ``type`` on it, or (``retries``) for
        that type's attempts after its first. Replaces the bucket's setting (its state
        stays). Raises :class:`ConfigError` (nothing written) for a bad value."""
        queue_name(queue)
        if type is not None:
            check_type(type)
        if not isinstance(retries, bool):
            raise ConfigError("retries must be True or False")
        per, b = check_rate(per_second, burst)
        field = rate_field(queue, type, retries)
        await self.store.require_layout()
        await self.store.limits.put(field, f"{per:g} {b}")
        return RateLimit(queue=queue, type=type or "", retries=retries, per_second=per, burst=b)

    async def clear_rate(
        self, queue: str, *, type: str | None = None, retries: bool = False
    ) -> bool:
        """Remove a rate limit (and its bucket's state); whether there was one. Tasks it
        held back start at the times reserved for them."""
        queue_name(queue)
        if type is not None:
            check_type(type)
        return await self.store.limits.remove(rate_field(queue, type, retries), bucket=True)

    async def limits(self, queue: str | None = None) -> list[QueueLimits]:
        """The limits of ``queue`` (None: of every queue with a limit or a known name),
        with the RUNNING tasks of each owner and the tasks parked on them."""
        if queue is not None:
            queues = [queue_name(queue)]
        else:
            named = set(await self.store.limits.limited_queues())
            queues = sorted(named | set(await self.store.reaper.queues()))
        return await self.store.limits.of(queues)

    # -- bulk actions ----------------------------------------------------------------------

    async def select(self, where: TaskFilter, *, limit: int = 100) -> tuple[int, list[str]]:
        """How many tasks ``where`` selects, and the ids of the oldest ``limit`` (the first
        step of a bulk action; a plain scan of the namespace's tasks)."""
        check_filter(where)
        check_limit(limit)
        found = await self.store.tasks.select(where, limit=limit)
        return found.matched, [t.id for t in found.tasks]

    async def bulk_cancel(
        self,
        where: TaskFilter,
        *,
        dry_run: bool = False,
        limit: int = 100,
        reason: str = "",
        source: str | None = None,
    ) -> BulkResult:
        """Cancel the unfinished tasks ``where`` selects (at most ``limit``, oldest first),
        each as :meth:`cancel` does; ``dry_run``: only count and list them. A ``state``
        in ``where`` must be an unfinished one."""
        check_filter(where)
        check_limit(limit)
        _check_reason(reason)
        if where.state is not None and is_terminal(where.state):
            raise ConfigError(f"a {where.state} task cannot be cancelled: filter on another state")
        src = self._source(source)
        found = await self.store.tasks.select(
            where, limit=limit, where=lambda t: not is_terminal(t.state)
        )

        async def one(t: Selected) -> BulkItem:
            try:
                code, state = await self.control(t.id, "CANCEL", reason, ref=t.ref, source=src)
            except TaskNotFound:
                return BulkItem(id=t.id, state="", changed=False, detail="no such task")
            changed = code is Code.APPLIED
            detail = "" if changed else f"task is {state}"
            return BulkItem(id=t.id, state=state, changed=changed, detail=detail)

        return await run_bulk("cancel", found, dry_run, one)

    async def bulk_retry(
        self,
        where: TaskFilter,
        *,
        dry_run: bool = False,
        limit: int = 100,
        reason: str = "",
        source: str | None = None,
    ) -> BulkResult:
        """Start over (RETRY) the FAILED, TIMED_OUT and CANCELLED tasks ``where`` selects
        that were not started over yet and belong to no workflow (at most ``limit``,
        oldest first), each as :meth:`retry` does; ``dry_run``: only count and list them.
        A ``state`` in ``where`` must be one of those three (a SUCCEEDED task is replayed
        one by one, :meth:`replay`)."""
        check_filter(where)
        check_limit(limit)
        _check_reason(reason)
        if where.state is not None and where.state not in RETRYABLE:
            raise ConfigError(
                f"bulk retry takes FAILED, TIMED_OUT or CANCELLED tasks, not {where.state}"
                + (" (replay a SUCCEEDED task by its id)" if where.state == "SUCCEEDED" else "")
            )
        src = self._source(source)
        found = await self.store.tasks.select(
            where,
            limit=limit,
            where=lambda t: t.state in RETRYABLE and not t.retried_as and not t.wf,
        )

        async def one(t: Selected) -> BulkItem:
            try:
                r = await self._restart(t.id, "RETRY", reason, t.ref, src)
            except TaskNotFound:
                return BulkItem(id=t.id, state="", changed=False, detail="no such task")
            except InvalidTransition as exc:
                return BulkItem(id=t.id, state=exc.state, changed=False, detail=str(exc))
            detail = "" if r.created else f"already retried as {r.new_id}"
            return BulkItem(
                id=t.id, state=t.state, changed=r.created, new_id=r.new_id, detail=detail
            )

        return await run_bulk("retry", found, dry_run, one)

    # -- deferred attempts ---------------------------------------------------------------

    async def complete_external(
        self,
        task_or_external_id: str,
        result: Any = None,
        *,
        provider: str | None = None,
        source: str | None = None,
        charges: Mapping[str, float] | None = None,
    ) -> str:
        """End the wait of a DEFERRED task with its result (SUCCEEDED); returns the state
        after the call. The task is named by its id, or (with ``provider``, or when the
        value is no task id) by the outside job's id it deferred on. ``charges`` (unit ->
        amount: the provider's bill) are added to the attempt's costs. A repeat of the same
        result answers the same state and writes nothing. Raises :class:`TaskNotFound`,
        :class:`ChargeError` for a bad charge (nothing written), and
        :class:`InvalidTransition` when the task is not waiting on that job (finished,
        timed out past its longest wait, cancelled, another attempt): recorded in its
        history."""
        return await self._external(
            "COMPLETE", task_or_external_id, provider, source, result=result, charges=charges
        )

    async def fail_external(
        self,
        task_or_external_id: str,
        error: str,
        *,
        retryable: bool = True,
        provider: str | None = None,
        source: str | None = None,
        charges: Mapping[str, float] | None = None,
    ) -> str:
        """Fail the wait of a DEFERRED task: its retry policy decides (SCHEDULED for
        another attempt, or FAILED; ``retryable=False``: FAILED at once). As
        :meth:`complete_external` otherwise."""
        _check_reason(error)
        return await self._external(
            "FAIL",
            task_or_external_id,
            provider,
            source,
            error=error,
            retryable=retryable,
            charges=charges,
        )

    async def _external(
        self,
        event: str,
        name: str,
        provider: str | None,
        source: str | None,
        **kw: Any,
    ) -> str:
        from .external import resolve_external
        from .store.deferred import DEFAULT_PROVIDER

        src = self._source(source)
        by_task = provider is None and _is_task_id(name)
        outcome = await resolve_external(
            self.store,
            event=event,
            task_id=name if by_task else None,
            external_id="" if by_task else name,
            provider=provider or DEFAULT_PROVIDER,
            via="api",
            source=src,
            **kw,
        )
        if outcome.code is Code.NOT_FOUND:
            raise TaskNotFound(name)
        if outcome.code in (Code.REFUSED, Code.LEASE_LOST):
            why = "not waiting on that outside job (" + outcome.state + ")"
            raise error_of(
                outcome.code,
                subject=outcome.task_id,
                action=event,
                state=outcome.state,
                message=why,
            )
        return outcome.state

    def _source(self, source: str | None) -> str:
        """Who acts, as history records it: ``source``, or the client's own."""
        if source is None:
            return self.source
        if not isinstance(source, str) or not 0 < len(source) <= 200 or " " in source:
            raise ConfigError("source must be 1-200 characters without spaces")
        return source


def _check_shard_key(shard_key: object) -> None:
    if shard_key is not None and not (isinstance(shard_key, str) and 0 < len(shard_key) <= 200):
        raise ConfigError("shard_key must be a string of 1-200 characters")


def _check_reason(reason: object) -> None:
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise ConfigError(f"reason must be a string of at most {MAX_REASON} characters")
