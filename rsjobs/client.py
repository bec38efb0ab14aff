"""The asyncio client: submit tasks, read them, control them, wait for them.

Every state change goes through a transition script (``fsm.lua``); this module only packs
arguments, reads hashes and streams, and turns reply codes into results or exceptions.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from .codec import encode_payload
from .connection import connect
from .errors import ConfigError, InvalidTransition, TaskNotFound, WaitTimeout
from .keys import validate_name
from .schemas import EnqueueRequest, EnqueueResult, HistoryEntry, TaskInfo, repeat_fields
from .scripts import Scripts
from .settings import Settings
from .transient import is_transient

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
    try:
        validate_name("queue", r.queue)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
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


def _enqueue_argv(tid: str, r: EnqueueRequest, payload: bytes) -> list[Any]:
    """The 12 per-task ARGV of enqueue.lua, in its header's order."""
    return [
        tid,
        r.type,
        r.queue,
        payload,
        r.max_attempts,
        r.timeout_ms,
        r.delay_ms,
        r.dedup_key or "",
        r.owner or "",
        r.backoff_base_ms,
        r.backoff_max_ms,
        r.wait_timeout_ms,
    ]


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
        self.scripts = Scripts(redis, self.settings)
        self.keys = self.scripts.keys
        self._known_queues: set[str] = set()

    @classmethod
    def from_url(cls, url: str, *, source: str = "api", **settings: Any) -> Client:
        return cls(connect(url), Settings(**settings), source=source)

    async def close(self) -> None:
        await self.redis.aclose()

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
        task exists) returns the first task's id and writes nothing; ``owner`` is recorded
        for access control; ``wait_timeout_ms`` expires it if no worker starts it in time.
        Raises :class:`ConfigError` or :class:`PayloadError` on bad input, before any write.
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
        replies = await self.scripts.call(
            "enqueue",
            self.source,
            [self.scripts.task_keys(tid, req.queue, req.dedup_key)],
            _enqueue_argv(tid, req, encoded),
            durable=True,
        )
        rid, state, dup = replies[0]
        return EnqueueResult(id=str(rid), state=str(state), duplicate=bool(dup))

    async def enqueue_many(
        self, requests: Iterable[EnqueueRequest], *, chunk: int = 250
    ) -> list[str]:
        """Submit many tasks in few round trips (``chunk`` per script call); returns ids.

        Every request is validated before the first one is written.
        """
        reqs = list(requests)
        limit = self.settings.payload_limit
        encoded = [_check_request(r, limit) for r in reqs]
        await self._remember_queues({r.queue for r in reqs})
        # two chunks in flight (on two connections): Python packs the next chunk while
        # Redis runs the previous one
        gate = asyncio.Semaphore(2)

        async def send(start: int) -> list[str]:
            async with gate:
                tasks = []
                argv: list[Any] = []
                for r, payload in zip(
                    reqs[start : start + chunk], encoded[start : start + chunk], strict=True
                ):
                    tid = new_task_id()
                    tasks.append(self.scripts.task_keys(tid, r.queue, r.dedup_key))
                    argv += _enqueue_argv(tid, r, payload)
                replies = await self.scripts.call("enqueue", self.source, tasks, argv, durable=True)
                return [str(reply[0]) for reply in replies]

        parts = await asyncio.gather(*(send(i) for i in range(0, len(reqs), chunk)))
        return [tid for part in parts for tid in part]

    async def _remember_queues(self, queues: set[str]) -> None:
        new = queues - self._known_queues
        if new:
            await self.redis.sadd(self.keys.queues, *new)
            self._known_queues |= new

    # -- reading -------------------------------------------------------------------------

    async def get(self, task_id: str) -> TaskInfo:
        """The task as stored now. Raises :class:`TaskNotFound`."""
        validate_task_id(task_id)
        h = await self.redis.hgetall(self.keys.task(task_id))
        if not h:
            raise TaskNotFound(task_id)
        return TaskInfo.from_hash(h)

    async def get_many(self, task_ids: Sequence[str]) -> list[TaskInfo | None]:
        """Several tasks in one round trip; ``None`` for ids that name no task."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for tid in task_ids:
                pipe.hgetall(self.keys.task(validate_task_id(tid)))
            rows = await pipe.execute()
        return [TaskInfo.from_hash(h) if h else None for h in rows]

    async def history(
        self, task_id: str, *, after: str = "-", count: int | None = None
    ) -> list[HistoryEntry]:
        """The task's history, oldest first; ``after`` is an exclusive stream id.

        A refusal entry carries how many more refusals of its kind it stands for
        (``repeats``, ``last_ts``: repeats are counted on the task hash, not appended).
        """
        validate_task_id(task_id)
        start = "-" if after in ("-", "0", "") else f"({after}"
        rows = await self.redis.xrange(self.keys.history(task_id), start, "+", count=count)
        if not rows and not await self.redis.exists(self.keys.task(task_id)):
            raise TaskNotFound(task_id)
        names = [n for i, f in rows if f.get("rej") == "1" for n in repeat_fields(i)]
        task: dict[str, Any] = {}
        if names:
            values = await self.redis.hmget(self.keys.task(task_id), names)
            task = dict(zip(names, values, strict=True))
        return [HistoryEntry.from_entry(i, f, task_id, task) for i, f in rows]

    async def wait(self, task_id: str, *, timeout_ms: int | None = None) -> TaskInfo:
        """Block until the task is terminal; driven by its history stream (XREAD BLOCK).

        Raises :class:`WaitTimeout` after ``timeout_ms`` (None = wait forever).
        """
        validate_task_id(task_id)
        hkey = self.keys.history(task_id)
        last = await self.redis.xrevrange(hkey, "+", "-", count=1)
        last_id = last[0][0] if last else "0-0"
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
                rows = await self.redis.xread({hkey: last_id}, block=block)
            except RedisError as exc:
                # a failover (UNBLOCKED, READONLY, a dropped connection) ends the read, not
                # the wait: read again once Redis answers, within the caller's timeout
                if not is_transient(exc):
                    raise
                await asyncio.sleep(min(0.5, block / 1000))
                rows = None
            if rows:
                entries = rows[0][1]
                last_id = entries[-1][0]
                if not any(f.get("to") != f.get("from") for _, f in entries):
                    continue
            info = await self.get(task_id)
        return info

    async def stats(self) -> dict[str, dict[str, int]]:
        """Per queue: task counts per state, stream length and pending deliveries.

        Counts of non-terminal states are live; terminal counts are totals since the
        namespace was created (finished tasks expire after the retention period).
        """
        queues = sorted(await self.redis.smembers(self.keys.queues))
        raw = await self.redis.hgetall(self.keys.stats)
        out: dict[str, dict[str, int]] = {q: {} for q in queues}
        for field, value in raw.items():
            q, _, state = field.rpartition(":")
            if q in out and state.isupper():
                out[q][state] = int(value)
        async with self.redis.pipeline(transaction=False) as pipe:
            for q in queues:
                pipe.xlen(self.keys.queue(q))
            lengths = await pipe.execute()
        for q, n in zip(queues, lengths, strict=True):
            out[q]["stream_length"] = int(n)
        return out

    async def counters(self) -> dict[str, int]:
        """Raw counters: transitions per event (``ev:X``) and refusals (``rej:X``)."""
        raw = await self.redis.hgetall(self.keys.stats)
        return {k: int(v) for k, v in raw.items() if k.startswith(("ev:", "rej:"))}

    # -- control -------------------------------------------------------------------------

    async def _control(self, task_id: str, event: str, reason: str) -> tuple[int, str]:
        validate_task_id(task_id)
        if not isinstance(reason, str) or len(reason) > MAX_REASON:
            raise ConfigError(f"reason must be a string of at most {MAX_REASON} characters")
        queue, dedup = await self.redis.hmget(self.keys.task(task_id), ["queue", "dedup"])
        if queue is None:
            raise TaskNotFound(task_id)
        code, state = await self.scripts.call(
            "control",
            self.source,
            [self.scripts.task_keys(task_id, queue, dedup)],
            [event, reason, self.keys.control],
            durable=True,
        )
        if code == -1:
            raise TaskNotFound(task_id)
        return int(code), str(state)

    async def cancel(self, task_id: str, reason: str = "") -> str:
        """Cancel the task from any non-terminal state; returns the state after the call.

        Idempotent: cancelling a finished (or already cancelled) task changes nothing and
        returns its current state. A running handler is told at once (pub/sub) and at its
        next heartbeat at the latest.
        """
        _, state = await self._control(task_id, "CANCEL", reason)
        return state

    async def pause(self, task_id: str, reason: str = "") -> str:
        """Hold the task back (PENDING, SCHEDULED or RUNNING -> PAUSED).

        Raises :class:`InvalidTransition` when the task is terminal.
        """
        code, state = await self._control(task_id, "PAUSE", reason)
        if code == -2:
            raise InvalidTransition(task_id, "PAUSE", state)
        return state

    async def resume(self, task_id: str, reason: str = "") -> str:
        """Put a PAUSED task back on its queue. Raises :class:`InvalidTransition` otherwise."""
        code, state = await self._control(task_id, "RESUME", reason)
        if code == -2:
            raise InvalidTransition(task_id, "RESUME", state)
        return state
