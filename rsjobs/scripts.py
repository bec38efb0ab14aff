"""The transition scripts, registered once and called with their KEYS and ARGV packed here.

Each script in ``scripts/`` is shipped as package data and loaded as ``fsm.lua`` (the table
and shared helpers) followed by the script itself. Calls use EVALSHA and fall back to
SCRIPT LOAD on NOSCRIPT (e.g. after a Redis restart or failover), as redis-py's registered
scripts do, without their per-call overhead. They go over the client's :class:`~rsjobs.resp.Lane`
(one pipelined connection) when it has one (clients made by :func:`rsjobs.connect`), else
through redis-py. The reaper's and the workflows' script calls go through :class:`Scripts`
too, with their own keys after the task keys.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import NoScriptError, RedisError

from .errors import NotReplicated
from .keys import GROUP, Keys
from .resp import Lane
from .settings import Settings
from .transient import as_unavailable, is_transient

__all__ = ["SCRIPT_NAMES", "Scripts", "script_source"]

SCRIPT_NAMES = (
    "enqueue",
    "start",
    "finish",
    "heartbeat",
    "control",
    "promote",
    "release",
    # the reaper's (rsjobs/reaper/)
    "reclaim",
    "deadline",
    "workers",
    "link",
    "quarantine",
    # the workflows' (rsjobs/workflows/): fsm.lua + wf.lua + the script
    "wf_start",
    "wf_spawn",
    "wf_finish",
    "wf_gate",
    "wf_retry",
    "wf_regenerate",
    "wf_cancel",
    "wf_sync",
    "wf_abort",
)


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


TaskKeys = tuple[str, str, str, str]


class Scripts:
    """Binds the scripts to one Redis connection pool, namespace and settings."""

    def __init__(self, redis: Redis, settings: Settings) -> None:
        self.redis = redis
        self.settings = settings
        self.keys = Keys(settings.namespace)
        self._common_keys = self.keys.common()
        self._common_argv = [str(settings.events_maxlen), str(settings.retention_ms), GROUP]
        self._sha = {n: hashlib.sha1(script_source(n).encode()).hexdigest() for n in SCRIPT_NAMES}

    @property
    def lane(self) -> Lane | None:
        """The client's lane, when it has one (it is the client's: it closes with it)."""
        lane: Lane | None = getattr(self.redis, "lane", None)
        return lane

    def task_keys(self, task_id: str, queue: str, dedup: str | None = None) -> TaskKeys:
        k = self.keys
        return (
            *k.task_keys(task_id, queue),
            k.dedup(dedup) if dedup else k.nodedup,
        )

    async def call(
        self,
        name: str,
        source: str,
        tasks: Sequence[TaskKeys],
        argv: Sequence[Any],
        *,
        extra_keys: Sequence[str] = (),
        durable: bool = False,
    ) -> Any:
        """Run script ``name``: KEYS = common + the tasks' keys + ``extra_keys`` (the
        reaper's and the workflows' own), ARGV = common + ``argv``.

        EVALSHA over the client's lane when it has one; on NOSCRIPT (a restarted or
        failed-over Redis) the script is loaded and called again. A transient error
        (:mod:`rsjobs.transient`) is raised as :class:`rsjobs.RedisUnavailable`.
        ``durable``: the call is a write a caller acknowledges; in durable mode
        (``Settings.wait_replicas``) it is followed by WAIT on the same connection, and
        :class:`rsjobs.NotReplicated` is raised when too few replicas confirmed it."""
        keys = list(self._common_keys)
        for tk in tasks:
            keys.extend(tk)
        keys.extend(extra_keys)
        cmd = ("EVALSHA", self._sha[name], len(keys), *keys, source, *self._common_argv, *argv)
        try:
            if durable and self.settings.wait_replicas:
                return await self._call_durable(name, cmd)
            lane = self.lane
            send = lane.call if lane is not None else self.redis.execute_command
            try:
                return await send(*cmd)
            except NoScriptError:
                await self.redis.script_load(script_source(name))
                return await send(*cmd)
        except RedisError as exc:
            if is_transient(exc):
                raise as_unavailable(exc, f"redis ({name}.lua)") from exc
            raise

    async def _call_durable(self, name: str, cmd: tuple[Any, ...]) -> Any:
        """EVALSHA then WAIT on one pooled connection (WAIT counts that connection's
        writes; the lane is shared and must not block on it)."""
        s = self.settings
        for attempt in (1, 2):
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.execute_command(*cmd)
                pipe.execute_command("WAIT", s.wait_replicas, s.wait_timeout_ms)
                reply, acked = await pipe.execute(raise_on_error=False)
            if isinstance(reply, NoScriptError) and attempt == 1:
                await self.redis.script_load(script_source(name))
                continue
            if isinstance(reply, BaseException):
                raise reply
            if isinstance(acked, BaseException):
                raise acked
            if int(acked) < s.wait_replicas:
                raise NotReplicated(f"{name}.lua", int(acked), s.wait_replicas, s.wait_timeout_ms)
            return reply
        raise AssertionError("unreachable")  # pragma: no cover
