"""Deferred attempts: a handler hands its attempt to an outside job (``defer.lua``), an
outside result ends the wait (``resolve.lua``: a provider's callback, a client call, a
poller's answer), and workers claim due polls (``poll.lua``). The longest wait is the
reaper's (``deadline.lua``, :mod:`rsjobs.reaper.deadlines`).

Every outside job is named by its provider and its id; the ``external:<provider>:<id>``
key maps it to its task (``<attempt> <queue> <task id>``), so that a result naming only
the provider's id finds the task. Results are fenced by the attempt (and the external id
when the caller names one): a result for an attempt that is over is refused and recorded.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

from ..errors import ConfigError
from ..names import is_external, is_name
from . import layout
from .keys import TaskKeys, split_member
from .layout import DeferArgs, Member, PollArgs, ResolveArgs
from .record import field
from .replies import PollClaim, TaskReply, text
from .scripts import Scripts
from .successors import Successors
from .transient import boundary

__all__ = ["DEFAULT_PROVIDER", "Deferred", "External", "WaitRef", "check_external"]

#: the provider of an outside job deferred without one
DEFAULT_PROVIDER = "default"


def check_external(external_id: str, provider: str) -> None:
    """Raise :class:`rsjobs.ConfigError` unless both follow their rules (an external id:
    1-200 letters, digits or ``._:/-``; a provider: a name)."""
    if not is_external(external_id):
        raise ConfigError(f"external id {external_id!r}: 1-200 letters, digits or '._:/-' expected")
    if not is_name(provider):
        raise ConfigError(f"provider {provider!r}: 1-64 letters, digits or '._-' expected")


class External(NamedTuple):
    """What an external key says: the task waiting on the outside job, and its attempt."""

    attempt: int
    queue: str
    task_id: str


class WaitRef(NamedTuple):
    """What a result's caller needs of a task before resolving it, in one read."""

    state: str
    queue: str
    dedup: str
    attempt: int
    external_id: str
    provider: str
    wf: str
    wf_version: int
    owner: str
    priority: int = 0


_REF_FIELDS = (
    field("state"),
    field("queue"),
    "dedup",
    field("attempt"),
    field("external_id"),
    field("provider"),
    "wf",
    "wf_version",
    "owner",
    field("priority"),
)


def _int(v: Any) -> int:
    try:
        return int(text(v) or 0)
    except ValueError:
        return 0


class Deferred:
    """The deferred attempts' side of the store (``store.deferred``)."""

    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts
        self.redis = scripts.redis
        self.keys = scripts.keys

    async def defer(
        self,
        keys: TaskKeys,
        lease: str,
        external_id: str,
        provider: str,
        max_wait_ms: int,
        poll_every_ms: int = 0,
        message: str = "",
        charges: str = "",
    ) -> TaskReply:
        """``defer.lua``: the lease holder's RUNNING -> DEFERRED, with what the handler
        charged so far (:func:`rsjobs.costs.format_charges`)."""
        check_external(external_id, provider)
        call = layout.defer(
            self.scripts.common,
            self.keys,
            "worker",
            keys,
            self.keys.external(provider, external_id),
            DeferArgs(lease, external_id, provider, max_wait_ms, poll_every_ms, message, charges),
        )
        return TaskReply.of(await self.scripts.run(call))

    async def lookup(self, provider: str, external_id: str) -> External | None:
        """The task waiting (or that waited) on an outside job; None when no key names it
        (never deferred on, or expired with its task)."""
        check_external(external_id, provider)
        with boundary("GET external"):
            raw = await self.redis.get(self.keys.external(provider, external_id))
        if not raw:
            return None
        parts = text(raw).split(" ", 2)
        if len(parts) != 3 or not parts[0].isdigit():
            return None
        return External(int(parts[0]), parts[1], parts[2])

    async def ref(self, task_id: str) -> WaitRef | None:
        """The task's state, queue, dedup key, attempt and wait (None when gone)."""
        with boundary("HMGET wait"):
            v = await self.redis.hmget(self.keys.task(task_id), list(_REF_FIELDS))
        if not v[0] or not v[1]:
            return None
        return WaitRef(
            text(v[0]),
            text(v[1]),
            text(v[2]),
            _int(v[3]),
            text(v[4]),
            text(v[5]),
            text(v[6]),
            _int(v[7]),
            text(v[8]),
            _int(v[9]),
        )

    async def resolve(
        self,
        source: str,
        task_id: str,
        ref: WaitRef,
        event: str,
        *,
        attempt: int | None,
        external_id: str = "",
        body: str | bytes = "null",
        error_type: str = "",
        retryable: bool = True,
        via: str = "api",
        durable: bool = True,
        charges: str = "",
    ) -> TaskReply:
        """``resolve.lua``: COMPLETE or FAIL of the wait (or AGAIN: the next poll) for
        ``attempt`` (None: the current one) and ``external_id`` ('' = any), with what the
        outside job cost (``charges``, :func:`rsjobs.costs.format_charges`; COMPLETE and
        FAIL only). ``durable``: an outside result is a write its sender is answered for
        (durable mode: WAIT for the replicas before answering); a poll's AGAIN need not
        be."""
        keys = self.keys.task_keys(task_id, ref.queue, ref.dedup or None, ref.priority)
        # the key of the wait the task is in (as read): the script expires it with the task
        ext_key = self.keys.external(
            ref.provider or DEFAULT_PROVIDER, ref.external_id or external_id or "-"
        )
        args = ResolveArgs(
            event,
            "" if attempt is None else attempt,
            external_id,
            body,
            error_type,
            int(retryable),
            random.random(),
            via,
            charges,
        )
        call = layout.resolve(self.scripts.common, self.keys, source, keys, ext_key, args)
        reply = TaskReply.of(await self.scripts.run(call, durable=durable and event != "AGAIN"))
        if reply.released:
            # the task had successors: they are released (or cancelled) now, not at the
            # reaper's next sweep
            await Successors(self.scripts).release_soon(source)
        return reply

    async def due_polls(self, count: int) -> list[str]:
        """Members of the polls zset due now by the local clock (with 1 s of slack: the
        script decides by Redis TIME), earliest first."""
        with boundary("ZRANGEBYSCORE polls"):
            members: list[Any] = await self.redis.zrangebyscore(
                self.keys.polls, "-inf", int(time.time() * 1000) + 1000, start=0, num=count
            )
        return [text(m) for m in members]

    async def claim_polls(self, members: Sequence[str], claim_ms: int) -> list[PollClaim]:
        """``poll.lua``: claim due polls (one reply each, in order)."""
        if not members:
            return []
        items = []
        for m in members:
            queue, tid = split_member(m)
            items.append((self.keys.task_keys(tid, queue), Member(m)))
        call = layout.poll(self.scripts.common, self.keys, "worker", PollArgs(claim_ms), items)
        return [PollClaim.of(r) for r in await self.scripts.run(call)]
