"""The asyncio client: submit tasks, read them, control them, wait for them.

Every state change goes through a transition script (``fsm.lua``); this module checks
arguments and turns the store's typed replies into results or exceptions. It speaks to
Redis only through :class:`rsjobs.store.Store`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from redis.asyncio import Redis

from .codec import decode, encode_payload
from .dedup import Submitted, check_batch, check_repeat
from .errors import ConfigError, RedisUnavailable, TaskNotFound, WaitTimeout
from .names import validate_name
from .schemas import EnqueueRequest, EnqueueResult, HistoryEntry, TaskInfo
from .settings import Settings
from .store import Code, Store, TaskRef, error_of
from .store.connection import connect
from .store.history import position as history_position
from .store.layout import NewTask, task_options

#: events read per XREAD of Client.wait
_WAIT_BATCH = 1000

__all__ = ["Client", "connect", "validate_task_id"]

_ID_CHARS = frozenset("0123456789abcdef")


def validate_task_id(task_id: str) -> str:
    """Return ``task_id`` if it has the shape of an rsjobs id (32 lowercase hex), else raise."""
    if not isinstance(task_id, str) or len(task_id) != 32 or not set(task_id) <= _ID_CHARS:
        raise ConfigError(f"invalid task id {task_id!r}: expected 32 lowercase hex characters")
    return task_id


def new_task_id() -> str:
    return uuid.uuid4().hex


#: the longest time a request may name (delays, deadlines, backoff): one year
MAX_MS = 365 * 24 * 3600 * 1000
#: the longest reason a cancel / pause / resume may carry (control.lua takes 4096 bytes)
MAX_REASON = 1000
_MS_FIELDS = ("timeout_ms", "delay_ms", "wait_timeout_ms", "backoff_base_ms", "backoff_max_ms")


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_request(r: EnqueueRequest, limit: int) -> bytes:
    """Validate one request before anything is written; returns its encoded payload."""
    if not isinstance(r.type, str) or not r.type or len(r.type) > 200:
        raise ConfigError("task type must be a non-empty string of at most 200 characters")
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
    return encode_payload(r.payload, limit)


def new_task(tid: str, r: EnqueueRequest, payload: bytes) -> NewTask:
    """What ``enqueue.lua`` takes for one checked request."""
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
        ),
    )


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
        self._known_queues: set[str] = set()

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
    ) -> str:
        """Submit one task; returns its id.

        ``max_attempts`` bounds failed executions (failures, timeouts, lost workers);
        ``timeout_ms`` is the execution deadline of one attempt (0 = none); ``delay_ms``
        schedules it for later; a second submit with the same ``dedup_key`` (while the first
        task exists) and the same type, queue and payload returns the first task's id and
        writes nothing, one with another type, queue or payload raises
        :class:`DedupKeyReused` (see :mod:`rsjobs.dedup`); ``owner`` is recorded for access
        control; ``wait_timeout_ms`` expires it if no worker starts it in time. Raises
        :class:`ConfigError` or :class:`PayloadError` on bad input, before any write.
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
            )
        )
        return result.id

    async def submit(self, req: EnqueueRequest) -> EnqueueResult:
        """Submit one task and say what happened (id, state, duplicate); see :meth:`enqueue`."""
        encoded = _check_request(req, self.settings.payload_limit)
        if req.queue not in self._known_queues:
            await self._remember_queues({req.queue})
        tid = new_task_id()
        keys = self.keys.task_keys(tid, req.queue, req.dedup_key)
        (result,) = await self.store.tasks.enqueue(
            self.source, [(keys, new_task(tid, req, encoded))], durable=True
        )
        if result.duplicate and req.dedup_key is not None:
            # enqueue.lua wrote nothing; the task the key names must be this request
            info = await self.store.tasks.get(result.id)
            if info is not None:  # expired since: nothing left to disagree with
                check_repeat(info, req.dedup_key, req.type, req.queue, decode(encoded))
        return result

    async def enqueue_many(
        self, requests: Iterable[EnqueueRequest], *, chunk: int = 250
    ) -> list[str]:
        """Submit many tasks in few round trips (``chunk`` per script call); returns ids.

        Every request is validated before the first one is written, its dedup key too: a
        key that names a live task with another type, queue or payload, or two requests
        of the call sharing a key with different ones, raise :class:`DedupKeyReused` and
        nothing is written. Should such a task appear while the call runs, the requests
        are submitted and the call raises :class:`DedupKeyReused` at the end.
        """
        reqs = list(requests)
        limit = self.settings.payload_limit
        encoded = [_check_request(r, limit) for r in reqs]
        await self._check_dedup(reqs, encoded)
        await self._remember_queues({r.queue for r in reqs})
        # two chunks in flight (on two connections): Python packs the next chunk while
        # Redis runs the previous one
        gate = asyncio.Semaphore(2)
        k = self.keys

        async def send(start: int) -> list[EnqueueResult]:
            async with gate:
                tasks = []
                for r, payload in zip(
                    reqs[start : start + chunk], encoded[start : start + chunk], strict=True
                ):
                    tid = new_task_id()
                    tasks.append(
                        (k.task_keys(tid, r.queue, r.dedup_key), new_task(tid, r, payload))
                    )
                return await self.store.tasks.enqueue(self.source, tasks, durable=True)

        parts = await asyncio.gather(*(send(i) for i in range(0, len(reqs), chunk)))
        results = [r for part in parts for r in part]
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

    async def _check_dedup(self, reqs: list[EnqueueRequest], encoded: list[bytes]) -> None:
        """:mod:`rsjobs.dedup`'s rule for the keyed requests of one batch, before any
        write: against each other, then against the live tasks their keys name."""
        keyed: list[tuple[str, Submitted]] = [
            (r.dedup_key, (r.type, r.queue, decode(e)))
            for r, e in zip(reqs, encoded, strict=True)
            if r.dedup_key is not None
        ]
        if not keyed:
            return
        check_batch(keyed)
        infos = await self.store.tasks.by_dedup_many([key for key, _ in keyed])
        for (key, (type_, queue, payload)), info in zip(keyed, infos, strict=True):
            if info is not None:
                check_repeat(info, key, type_, queue, payload)

    async def _remember_queues(self, queues: set[str]) -> None:
        new = queues - self._known_queues
        if new:
            await self.store.tasks.remember_queues(new)
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
        events = self.store.events
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

    async def counters(self) -> dict[str, int]:
        """Raw counters: transitions per event (``ev:X``) and refusals (``rej:X``)."""
        raw = await self.store.tasks.counters()
        return {k: v for k, v in raw.items() if k.startswith(("ev:", "rej:"))}

    # -- control -------------------------------------------------------------------------

    async def ref(self, task_id: str) -> TaskRef:
        """The task's state, owner, queue and dedup key in one read (what a caller checks
        before acting on it). Raises :class:`TaskNotFound`."""
        ref = await self.store.tasks.ref(validate_task_id(task_id))
        if ref is None:
            raise TaskNotFound(task_id)
        return ref

    async def control(
        self, task_id: str, event: str, reason: str = "", *, ref: TaskRef | None = None
    ) -> tuple[Code, str]:
        """CANCEL, PAUSE or RESUME; the reply code and the state after the call. ``ref``:
        the task as :meth:`ref` read it (saves that read). Raises :class:`TaskNotFound`
        and :class:`InvalidTransition` (a PAUSE or RESUME the table refuses)."""
        validate_task_id(task_id)
        if not isinstance(reason, str) or len(reason) > MAX_REASON:
            raise ConfigError(f"reason must be a string of at most {MAX_REASON} characters")
        if ref is None:
            ref = await self.ref(task_id)
        code, state = await self.store.tasks.control(
            self.source, task_id, ref, event, reason, durable=True
        )
        if code is Code.NOT_FOUND or (code is Code.REFUSED and event != "CANCEL"):
            raise error_of(code, subject=task_id, action=event, state=state)
        return code, state

    async def cancel(self, task_id: str, reason: str = "") -> str:
        """Cancel the task from any non-terminal state; returns the state after the call.

        Idempotent: cancelling a finished (or already cancelled) task changes nothing and
        returns its current state. A running handler is told at once (pub/sub) and at its
        next heartbeat at the latest.
        """
        _, state = await self.control(task_id, "CANCEL", reason)
        return state

    async def pause(self, task_id: str, reason: str = "") -> str:
        """Hold the task back (PENDING, SCHEDULED or RUNNING -> PAUSED).

        Raises :class:`InvalidTransition` when the task is terminal.
        """
        _, state = await self.control(task_id, "PAUSE", reason)
        return state

    async def resume(self, task_id: str, reason: str = "") -> str:
        """Put a PAUSED task back on its queue. Raises :class:`InvalidTransition` otherwise."""
        _, state = await self.control(task_id, "RESUME", reason)
        return state
