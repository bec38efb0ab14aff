"""The scripts: their sources, registered once, and the one call every script goes through.

Each script in ``scripts/`` is shipped as package data and loaded as ``fsm.lua`` (the table
and shared helpers; workflow scripts also ``wf.lua``) followed by the script itself. A call
(:meth:`Scripts.run`, packed by :mod:`rsjobs.store.layout`) is an EVALSHA, loading the
script on NOSCRIPT (a restarted or failed-over Redis) as redis-py's registered scripts do,
without their per-call overhead. A read-only call (``readonly``: a script that writes
nothing, such as ``wf_read.lua``) is an EVALSHA_RO where the server has it (Redis >= 7.0,
which then refuses any write from the script), a plain EVALSHA where it has not (6.2: told
once by its "unknown command" reply, see :meth:`Scripts.run`). It goes over the client's
:class:`~rsjobs.store.lane.Lane` (one pipelined connection) when it has one (clients made
by :func:`rsjobs.connect`), else through redis-py. Durable mode (``Settings.wait_replicas``)
follows a write with WAIT. Errors leave as rsjobs's (:mod:`rsjobs.store.transient`).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis
from redis.exceptions import NoScriptError, RedisError, ResponseError

from ..errors import NotReplicated
from ..settings import Settings
from . import marker
from .keys import Keys
from .lane import Lane
from .layout import Common, Packed
from .layout import marker as marker_call
from .transient import translate

if TYPE_CHECKING:
    from . import Store

__all__ = ["SCRIPT_NAMES", "UNGATED", "Scripts", "script_sha", "script_source"]

SCRIPT_NAMES = (
    "enqueue",
    # successors: the enqueue of one, and the release step (rsjobs.store.successors)
    "after",
    "successors",
    "take",
    "start",
    "finish",
    "heartbeat",
    "control",
    "retry",
    "queue",
    "queue_add",
    "queue_delete",
    "promote",
    "release",
    # deferred attempts: hand-off, outside results, polls
    "defer",
    "resolve",
    "poll",
    # the reaper's
    "reclaim",
    "recount",
    "deadline",
    "workers",
    "link",
    "quarantine",
    # the namespace's layout: its marker, and the conversion from the previous one
    "marker",
    "shards",
    "migrate",
    "trim",
    "summaries",
    "series",
    # the hook runner's (rsjobs.hooks)
    "hooks_due",
    "hooks_forget",
    # the reaper's, for recurring tasks (rsjobs.schedules)
    "schedule",
    # the workflows': fsm.lua + wf.lua + the script
    "wf_start",
    "wf_spawn",
    "wf_finish",
    "wf_gate",
    "wf_retry",
    "wf_regenerate",
    "wf_cancel",
    "wf_sync",
    "wf_abort",
    # the workflows' consistent reads (read-only: see Scripts.run)
    "wf_read",
)


#: the scripts a store runs before it knows the namespace's layout: the check itself, the
#: namespace's shards (:mod:`.shards`), and the conversion of a namespace that is not in
#: this one (see :mod:`.marker`)
UNGATED = frozenset({"marker", "shards", "migrate"})


@cache
def script_source(name: str) -> str:
    """The full text of a transition script: ``fsm.lua``, then ``scripts/<name>.lua`` as the
    body of a function that ``fsm.lua``'s ``finish_call`` runs.

    Workflow scripts (``wf_*``) also get ``wf.lua``, the workflow state machine, between the
    two (see ``rsjobs.workflows``).
    """
    pkg = resources.files("rsjobs")
    fsm = (pkg / "fsm.lua").read_text(encoding="utf-8")
    body = (pkg / "scripts" / f"{name}.lua").read_text(encoding="utf-8")
    if name.startswith("wf_"):
        fsm += "\n" + (pkg / "wf.lua").read_text(encoding="utf-8")
    # the body runs as a function, so that fsm.lua's finish_call can write the counters
    # it summed after the body returns (or raises)
    return f"{fsm}\nlocal function main()\n{body}\nend\nreturn finish_call(main)\n"


@cache
def script_sha(name: str) -> str:
    return hashlib.sha1(script_source(name).encode()).hexdigest()


class Scripts:
    """The scripts bound to one Redis client, namespace (or shard of it: ``tag``, and
    ``root``, the scripts of shard 0, which check the layout for every shard) and
    settings."""

    def __init__(
        self,
        redis: Redis,
        settings: Settings,
        *,
        tag: str | None = None,
        root: Scripts | None = None,
    ) -> None:
        self.redis = redis
        self.settings = settings
        self.keys = Keys(settings.namespace, tag=tag)
        self.root = root or self
        #: what every call starts with (see rsjobs.store.layout)
        self.common = Common.of(self.keys, settings.events_maxlen, settings.retention_ms)
        #: the namespace's layout was found to be this one (see require_layout)
        self.layout_ok = False
        #: the store these scripts serve (set by it): parts route an id to its shard's
        self.store: Store | None = None
        #: read-only calls are sent as EVALSHA_RO (False once the server answered that it
        #: has no such command: Redis < 7.0; see run)
        self.read_only_calls = True

    async def elsewhere(self, an_id: str) -> Store | None:
        """The store of the shard of task or workflow id ``an_id``, when that is not the
        shard of these scripts (None: it is, or they serve no store)."""
        if self.store is None:
            return None
        target = await self.store.at(an_id)
        return None if target is self.store else target

    async def fan_out(self) -> list[Store] | None:
        """Every shard's store, when these scripts serve the namespace's store (shard 0's,
        which answers for the namespace) and it has more than one shard; else None (a read
        answers for this shard alone)."""
        store = self.store
        if store is None or store.root is not store:
            return None
        stores = await store.each()
        return stores if len(stores) > 1 else None

    @property
    def lane(self) -> Lane | None:
        """The client's lane, when it has one (it is the client's: it closes with it)."""
        lane: Lane | None = getattr(self.redis, "lane", None)
        return lane

    async def run(self, call: Packed, *, durable: bool = False, readonly: bool = False) -> Any:
        """Run one packed script call; its raw reply.

        ``durable``: the call is a write a caller acknowledges; in durable mode it is
        followed by WAIT on the same connection, and :class:`rsjobs.NotReplicated` is raised
        when too few replicas confirmed it. ``readonly``: the script writes nothing; it is
        sent as EVALSHA_RO (EVAL_RO on NOSCRIPT), which Redis >= 7.0 runs refusing any
        write; a server without the command (Redis 6.2) answers "unknown command", and the
        call is sent again as EVALSHA, as every later read-only call of these scripts is
        (``read_only_calls``). Raises :class:`rsjobs.RedisUnavailable` on a
        passing error, :class:`rsjobs.StoreError` on any other error reply, and
        :class:`rsjobs.NotMigrated` (nothing run) while the namespace is not in this layout
        (checked before the first call, see :meth:`require_layout`)."""
        name = call.script
        if not self.layout_ok and name not in UNGATED:
            await self.require_layout()
        cmd = ("EVALSHA", script_sha(name), len(call.keys), *call.keys, *call.argv)
        try:
            if durable and self.settings.wait_replicas and not readonly:
                return await self._run_durable(name, cmd)
            lane = self.lane
            send = lane.call if lane is not None else self.redis.execute_command
            if readonly and self.read_only_calls:
                try:
                    return await _send(send, ("EVALSHA_RO", *cmd[1:]), name)
                except ResponseError as exc:
                    if not _no_read_only_command(exc):
                        raise
                    # Redis < 7.0: the command did not run; a plain EVALSHA from now on
                    # (the script writes nothing either way)
                    self.read_only_calls = False
            try:  # (inline, not _send: the hot path)
                return await send(*cmd)
            except NoScriptError:
                return await send(*_as_eval(cmd, name))
        except (RedisError, OSError) as exc:
            raise translate(exc, f"{name}.lua") from exc

    async def preload(self, names: Sequence[str]) -> None:
        """Load these scripts into Redis now (SCRIPT LOAD), so that their first calls find
        them: a first call that meets NOSCRIPT is sent again as EVAL, after calls sent
        behind it on the lane have run (a worker relies on its ends running before its
        next take). Best effort: a failure here only costs that EVAL later."""
        with contextlib.suppress(RedisError, OSError):
            for name in names:
                await self.redis.script_load(script_source(name))

    async def require_layout(self) -> marker.LayoutState:
        """Check that the namespace is in this layout (``marker.lua``: a namespace that
        holds no data is marked now); once that passed, later calls answer at once.
        Raises :class:`rsjobs.NotMigrated` when it holds data of an earlier layout or is
        marked with another one."""
        if self.layout_ok:
            return marker.LayoutState(str(marker.LAYOUT), False)
        if self.root is not self:
            # the marker is shard 0's: one check for every shard
            state = await self.root.require_layout()
            self.layout_ok = True
            return state
        if self.store is not None:
            # the shards first: a namespace given a shard count is created with it
            await self.store.open()
        call = marker_call(self.common, self.keys, "api", marker.LAYOUT)
        state = marker.read_reply(await self.run(call))
        refused = marker.refusal(self.keys.namespace, state)
        if refused is not None:
            raise refused
        self.layout_ok = True
        return state

    async def _run_durable(self, name: str, cmd: tuple[Any, ...]) -> Any:
        """EVALSHA then WAIT on one pooled connection (WAIT counts that connection's
        writes; the lane is shared and must not block on it)."""
        s = self.settings
        for attempt in (1, 2):
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.execute_command(*cmd)
                pipe.execute_command("WAIT", s.wait_replicas, s.wait_timeout_ms)
                reply, acked = await pipe.execute(raise_on_error=False)
            if isinstance(reply, NoScriptError) and attempt == 1:
                cmd = _as_eval(cmd, name)  # on the same connection as the WAIT (see run)
                continue
            if isinstance(reply, BaseException):
                raise reply
            if isinstance(acked, BaseException):
                raise acked
            if int(acked) < s.wait_replicas:
                raise NotReplicated(f"{name}.lua", int(acked), s.wait_replicas, s.wait_timeout_ms)
            return reply
        raise AssertionError("unreachable")  # pragma: no cover


async def _send(send: Any, cmd: tuple[Any, ...], name: str) -> Any:
    """Send the EVALSHA (or EVALSHA_RO) ``cmd``; on NOSCRIPT, as an EVAL of the source."""
    try:
        return await send(*cmd)
    except NoScriptError:
        # EVAL over the same path, not SCRIPT LOAD then EVALSHA: after a failover the load
        # could reach the new primary while the call's connection still reaches the old
        # node (then NOSCRIPT again, forever); EVAL runs where the call goes and caches the
        # script there (a replica answers READONLY, a failover error the caller handles)
        return await send(*_as_eval(cmd, name))


def _as_eval(cmd: tuple[Any, ...], name: str) -> tuple[Any, ...]:
    """The EVALSHA (EVALSHA_RO) call ``cmd`` as an EVAL (EVAL_RO) of the script's source
    (same keys and args)."""
    return ("EVAL_RO" if cmd[0] == "EVALSHA_RO" else "EVAL", script_source(name), *cmd[2:])


#: the reply of a server without the read-only script commands (Redis < 7.0; fakeredis):
#: "unknown command `EVALSHA_RO`, with args beginning with: ..." (quotes vary by version)
_NO_RO = re.compile(r"^(?:ERR )?unknown command\W+eval(?:sha)?_ro\b", re.IGNORECASE)


def _no_read_only_command(exc: ResponseError) -> bool:
    """Whether ``exc`` is the server's "unknown command" reply to EVALSHA_RO / EVAL_RO (the
    command did not run), not an error of the script."""
    return _NO_RO.match(str(exc)) is not None
