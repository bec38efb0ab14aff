"""Calls of the reaper's scripts (``scripts/reclaim.lua`` and friends).

They share the transition scripts' layout (common KEYS and ARGV, four keys per task; see
``fsm.lua``) and may add keys of their own after the task keys (``extra_keys``); calls go
through :class:`rsjobs.scripts.Scripts`, with the reaper as their source.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis

from ..scripts import Scripts, TaskKeys
from ..settings import Settings

__all__ = ["REAPER_SCRIPTS", "ReaperScripts"]

#: the scripts this package calls (all listed in ``rsjobs.scripts.SCRIPT_NAMES``)
REAPER_SCRIPTS = ("reclaim", "deadline", "workers", "link", "quarantine")

#: what history records as the actor of the reaper's transitions
SOURCE = "reaper"


class ReaperScripts:
    """The reaper's scripts bound to one connection pool, namespace and settings."""

    def __init__(self, redis: Redis, settings: Settings) -> None:
        self.redis = redis
        self.settings = settings
        #: the transition scripts on the same client (also promote.lua, which the reaper runs)
        self.core = Scripts(redis, settings)
        self.keys = self.core.keys
        self.task_keys = self.core.task_keys

    async def call(
        self,
        name: str,
        tasks: Sequence[TaskKeys],
        argv: Sequence[Any],
        *,
        extra_keys: Sequence[str] = (),
        source: str = SOURCE,
    ) -> Any:
        """Run script ``name``: KEYS = common + the tasks' keys + ``extra_keys``."""
        return await self.core.call(name, source, tasks, argv, extra_keys=extra_keys)

    async def dedup_keys(self, task_ids: Sequence[str]) -> list[str | None]:
        """Each task's dedup key name (None when it has none or is gone), one round trip.

        Scripts that may finish a task need its real dedup key, so that it expires with
        the task (``retain`` in fsm.lua)."""
        if not task_ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for tid in task_ids:
                pipe.hget(self.keys.task(tid), "dedup")
            rows: list[str | None] = await pipe.execute()
        return [r or None for r in rows]

    async def screen(self, task_ids: Sequence[str]) -> list[tuple[str | None, bool]]:
        """Each task's dedup key name (as :meth:`dedup_keys`) and whether fsm.lua's ``load``
        takes its hash (gone, or with its id and queue), one round trip. A batch is sent
        without the tasks it would refuse: a script that raises half-way keeps the writes
        it made for the tasks before, but its reply, which counts them, is lost."""
        if not task_ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for tid in task_ids:
                pipe.hmget(self.keys.task(tid), ["dedup", "state", "id", "queue"])
            rows: list[Any] = await pipe.execute(raise_on_error=False)
        out: list[tuple[str | None, bool]] = []
        for r in rows:
            if isinstance(r, Exception):  # e.g. the key is not a hash
                out.append((None, False))
            else:
                dedup, state, tid, queue = r
                out.append((dedup or None, not state or bool(tid and queue)))
        return out
