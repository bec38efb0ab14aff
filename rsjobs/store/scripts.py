"""The scripts: their sources, loaded once, and the one call every script goes through.

Each script in ``scripts/`` is shipped as package data. Together with ``fsm.lua`` (the
table and the shared helpers) and ``wf.lua`` (the workflows') they form one function
library (:func:`library`): ``FUNCTION LOAD`` defines the state machine once, and each call
is an ``FCALL`` of one script's function (``FCALL_RO`` for a script that writes nothing,
such as ``wf_read.lua``) that begins with ``fsm.lua``'s ``begin_call``: nothing is defined
again per call. Redis >= 7.0 and Valkey have functions, persist them and replicate them
(on a cluster the library is loaded into every master). On a server without them (Redis
6.2) each script is ``fsm.lua`` (and ``wf.lua``) followed by the script
(:func:`script_source`), run by EVALSHA (EVAL on NOSCRIPT, as redis-py's registered
scripts do, without their per-call overhead). A call goes over the client's
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

__all__ = [
    "READ_ONLY",
    "SCRIPT_NAMES",
    "UNGATED",
    "Scripts",
    "function_name",
    "library",
    "script_sha",
    "script_source",
]

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
def _text(path: str) -> str:
    return (resources.files("rsjobs") / path).read_text(encoding="utf-8")


def _prelude(name: str) -> str:
    """``fsm.lua``, and ``wf.lua`` after it for a workflow script (``wf_*``)."""
    fsm = _text("fsm.lua")
    return f"{fsm}\n{_text('wf.lua')}" if name.startswith("wf_") else fsm


def _begin(name: str, keys: str, argv: str) -> str:
    """The statements that begin a call of ``name`` with these KEYS and ARGV."""
    wf = "begin_wf()\n" if name.startswith("wf_") else ""
    return f"begin_call({keys}, {argv})\n{wf}"


@cache
def script_source(name: str) -> str:
    """The full text of transition script ``name`` as one script (EVAL): ``fsm.lua`` (and
    ``wf.lua`` for a workflow script), then ``scripts/<name>.lua`` as the body of a function
    that ``fsm.lua``'s ``finish_call`` runs after ``begin_call`` took the call's KEYS and
    ARGV. What a server without functions runs (Redis 6.2), and the fallback on any server
    (see :meth:`Scripts.run`)."""
    body = _text(f"scripts/{name}.lua")
    # fsm.lua declares its own KEYS and ARGV (set by begin_call): the script's are kept first
    return (
        f"local CALL_KEYS, CALL_ARGV = KEYS, ARGV\n{_prelude(name)}\n"
        f"{_begin(name, 'CALL_KEYS', 'CALL_ARGV')}"
        # the body runs as a function, so that finish_call can write the counters it
        # summed after the body returns (or raises)
        f"return finish_call(function()\n{body}\nend)\n"
    )


@cache
def script_sha(name: str) -> str:
    return hashlib.sha1(script_source(name).encode()).hexdigest()


#: scripts that write nothing: registered with the ``no-writes`` flag (FCALL_RO runs them)
READ_ONLY = frozenset({"wf_read"})


@cache
def library() -> tuple[str, str]:
    """The function library: its name and its text (``FUNCTION LOAD``). ``fsm.lua`` and
    ``wf.lua`` once, then each script registered as a function ``<library>_<script>`` whose
    body runs as in :func:`script_source`. The name carries a digest of the text, so that
    two versions of rsjobs on one Redis (a rolling deploy) each call their own."""
    parts = [f"{_prelude('wf_')}\n"]
    for name in SCRIPT_NAMES:
        body = _text(f"scripts/{name}.lua")
        flags = ", flags = {'no-writes'}" if name in READ_ONLY else ""
        parts.append(
            f"redis.register_function{{function_name = '@_{name}'{flags}, callback = (function()\n"
            f"local function main()\n{body}\nend\n"
            f"return function(keys, argv)\n{_begin(name, 'keys', 'argv')}"
            f"return finish_call(main)\nend\nend)()}}\n"
        )
    text = "".join(parts)
    lib = "rsjobs_" + hashlib.sha1(text.encode()).hexdigest()[:16]
    return lib, f"#!lua name={lib}\n" + text.replace("'@_", f"'{lib}_")


@cache
def function_name(name: str) -> str:
    """The name of script ``name``'s function in :func:`library`."""
    return f"{library()[0]}_{name}"


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
        #: calls are sent as FCALL of the library (False once the server answered that it
        #: has no functions: Redis < 7.0; see run)
        self.functions = True

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

        The call is an FCALL of the script's function in :func:`library` (FCALL_RO for a
        ``readonly`` one: a script that writes nothing, which the server then runs refusing
        any write); when the server holds no such function (a new server, or one emptied)
        the library is loaded and the call sent again. On a server without functions
        (Redis 6.2: "unknown command") it is an EVALSHA of :func:`script_source` (EVAL on
        NOSCRIPT), as every later call of these scripts is (``functions``).

        ``durable``: the call is a write a caller acknowledges; in durable mode it is
        followed by WAIT on the same connection, and :class:`rsjobs.NotReplicated` is raised
        when too few replicas confirmed it. Raises :class:`rsjobs.RedisUnavailable` on a
        passing error, :class:`rsjobs.StoreError` on any other error reply, and
        :class:`rsjobs.NotMigrated` (nothing run) while the namespace is not in this layout
        (checked before the first call, see :meth:`require_layout`)."""
        name = call.script
        if not self.layout_ok and name not in UNGATED:
            await self.require_layout()
        wait = durable and not readonly and bool(self.settings.wait_replicas)
        try:
            if self.functions:
                fcall = "FCALL_RO" if readonly else "FCALL"
                cmd = (fcall, function_name(name), len(call.keys), *call.keys, *call.argv)
                try:
                    if wait:
                        return await self._run_durable(name, cmd)
                    lane = self.lane
                    if lane is not None:  # (inline: the hot path)
                        return await lane.call(*cmd)
                    return await self.redis.execute_command(*cmd)
                except ResponseError as exc:
                    if _no_function(exc):
                        # not run: load the library, then send the call again
                        await self.load_library()
                        return await self._send(name, cmd, wait)
                    if not _no_functions(exc):
                        raise
                    # Redis < 7.0: the command did not run; EVALSHA from now on
                    self.functions = False
            cmd = ("EVALSHA", script_sha(name), len(call.keys), *call.keys, *call.argv)
            return await self._send(name, cmd, wait)
        except (RedisError, OSError) as exc:
            raise translate(exc, f"{name}.lua") from exc

    async def _send(self, name: str, cmd: tuple[Any, ...], wait: bool) -> Any:
        """Send ``cmd`` (an FCALL, or an EVALSHA and then an EVAL on NOSCRIPT) over the
        lane, or with WAIT after it (``wait``)."""
        if wait:
            return await self._run_durable(name, cmd)
        lane = self.lane
        send = lane.call if lane is not None else self.redis.execute_command
        try:
            return await send(*cmd)
        except NoScriptError:
            # EVAL over the same path, not SCRIPT LOAD then EVALSHA: after a failover the
            # load could reach the new primary while the call's connection still reaches
            # the old node (then NOSCRIPT again, forever); EVAL runs where the call goes
            # and caches the script there (a replica answers READONLY, a failover error
            # the caller handles)
            return await send(*_as_eval(cmd, name))

    async def load_library(self) -> None:
        """FUNCTION LOAD the library (REPLACE: another client may have loaded the same
        text meanwhile; on a cluster, into every master)."""
        await self.redis.execute_command("FUNCTION", "LOAD", "REPLACE", library()[1])

    async def preload(self, names: Sequence[str]) -> None:
        """Load the library now (or, on a server without functions, these scripts: SCRIPT
        LOAD), so that the first calls find it: a first call that finds no function (or
        NOSCRIPT) is sent again after calls sent behind it on the lane have run (a worker
        relies on its ends running before its next take). Best effort: a failure here
        only costs that later load."""
        with contextlib.suppress(RedisError, OSError):
            if self.functions:
                try:
                    await self.load_library()
                    return
                except ResponseError as exc:
                    if not _no_functions(exc):
                        raise
                    self.functions = False
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
        """``cmd`` then WAIT on one pooled connection (WAIT counts that connection's
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


def _as_eval(cmd: tuple[Any, ...], name: str) -> tuple[Any, ...]:
    """The EVALSHA call ``cmd`` as an EVAL of the script's source (same keys and args)."""
    return ("EVAL", script_source(name), *cmd[2:])


#: the reply of a server without functions (Redis < 7.0; a fakeredis without them) to
#: FCALL, FCALL_RO or FUNCTION: "unknown command `FCALL`, with args beginning with: ..."
#: (quotes vary by version)
_NO_FUNCTIONS = re.compile(r"^(?:ERR )?unknown command\W+(?:fcall(?:_ro)?|function)\b", re.I)


def _no_functions(exc: ResponseError) -> bool:
    """Whether ``exc`` is the server's "unknown command" reply to FCALL / FCALL_RO /
    FUNCTION (the command did not run), not an error of the script."""
    return _NO_FUNCTIONS.match(str(exc)) is not None


#: FCALL's reply when the server holds no such function (the library not loaded: the
#: call did not run)
_NO_FUNCTION = re.compile(r"^(?:ERR )?function not found", re.I)


def _no_function(exc: ResponseError) -> bool:
    return _NO_FUNCTION.match(str(exc)) is not None
