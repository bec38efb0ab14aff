"""Calls of the reaper's scripts (``scripts/reclaim.lua`` and friends).

They share the transition scripts' layout (common KEYS and ARGV, four keys per task; see
``fsm.lua``) and may add keys of their own after the task keys, which ``Scripts.call``
has no place for; hence this small twin of :class:`rsjobs.scripts.Scripts`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis

from ..keys import GROUP, Keys
from ..scripts import TaskKeys, script_source
from ..settings import Settings

__all__ = ["REAPER_SCRIPTS", "ReaperScripts"]

#: the scripts this package calls (all listed in ``rsjobs.scripts.SCRIPT_NAMES``)
REAPER_SCRIPTS = ("reclaim", "deadline", "workers", "link")

#: what history records as the actor of the reaper's transitions
SOURCE = "reaper"


class ReaperScripts:
    """The reaper's scripts bound to one connection pool, namespace and settings."""

    def __init__(self, redis: Redis, settings: Settings) -> None:
        self.redis = redis
        self.settings = settings
        self.keys = Keys(settings.namespace)
        self._common_argv = [str(settings.events_maxlen), str(settings.retention_ms), GROUP]
        self._scripts = {n: redis.register_script(script_source(n)) for n in REAPER_SCRIPTS}

    def task_keys(self, task_id: str, queue: str, dedup: str | None) -> TaskKeys:
        k = self.keys
        return (*k.task_keys(task_id, queue), k.dedup(dedup) if dedup else k.nodedup)

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
        keys = self.keys.common()
        for tk in tasks:
            keys.extend(tk)
        keys.extend(extra_keys)
        args: list[Any] = [source, *self._common_argv, *argv]
        return await self._scripts[name](keys=keys, args=args)

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
