"""Calls of the workflow scripts (``scripts/wf_*.lua``, each loaded after ``fsm.lua`` and
``wf.lua``): KEYS = common + task keys + the seven workflow keys, ARGV = common + channel +
history bound + the script's own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from redis.asyncio import Redis

from ..schemas import _text
from ..scripts import Scripts, TaskKeys
from ..settings import Settings

__all__ = ["WF_SCRIPTS", "Reply", "WorkflowScripts"]

WF_SCRIPTS = (
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

#: default approximate bound (MAXLEN ~) of one workflow's history stream
HISTORY_MAXLEN = 10_000


class Reply(NamedTuple):
    """What a workflow script answers (see the headers): code, the workflow's status after
    the call, whether the driver has work on it now, and a reason for refusals."""

    code: int
    status: str
    drive: bool
    message: str

    @classmethod
    def of(cls, raw: Sequence[Any]) -> Reply:
        return cls(int(raw[0]), _text(raw[1]), bool(int(raw[2])), _text(raw[3]))


class WorkflowScripts:
    """The workflow scripts bound to one connection pool, namespace and settings."""

    def __init__(
        self,
        redis: Redis,
        settings: Settings,
        *,
        history_maxlen: int = HISTORY_MAXLEN,
        durable: bool = False,
    ) -> None:
        self.redis = redis
        self.settings = settings
        #: every call is a write some caller acknowledges (the client's starts and
        #: actions, and the spawns that follow them): durable mode applies to them
        self.durable = durable
        self.core = Scripts(redis, settings)
        self.keys = self.core.keys
        #: the workflow scripts' ARGV after the common ones (see wf.lua)
        self._wf_argv = [self.keys.control, str(history_maxlen)]

    def task_keys(self, task_id: str, queue: str) -> TaskKeys:
        """The four KEYS of a workflow task (workflow tasks have no dedup key)."""
        return self.core.task_keys(task_id, queue)

    async def raw(
        self,
        name: str,
        source: str,
        wf_id: str,
        tasks: Sequence[TaskKeys],
        argv: Sequence[Any],
    ) -> Any:
        """Run script ``name`` for workflow ``wf_id`` and the given tasks' keys."""
        return await self.core.call(
            name,
            source,
            tasks,
            [*self._wf_argv, *argv],
            extra_keys=self.keys.workflow_keys(wf_id),
            durable=self.durable,
        )

    async def call(
        self,
        name: str,
        source: str,
        wf_id: str,
        tasks: Sequence[TaskKeys],
        argv: Sequence[Any],
    ) -> Reply:
        """:meth:`raw` for the scripts answering ``{code, status, drive, message}``."""
        return Reply.of(await self.raw(name, source, wf_id, tasks, argv))

    async def open_tasks(self, wf_id: str) -> tuple[list[str], list[TaskKeys]]:
        """The workflow's open task ids and their keys (their queues read from the tasks;
        a task whose hash is gone or unreadable gets placeholder keys, never written)."""
        ids = sorted(await self.redis.smembers(self.keys.workflow_open(wf_id)))
        if not ids:
            return [], []
        async with self.redis.pipeline(transaction=False) as pipe:
            for tid in ids:
                pipe.hget(self.keys.task(tid), "queue")
            queues: list[Any] = await pipe.execute(raise_on_error=False)
        return ids, [
            self.task_keys(t, q if isinstance(q, str) and q else "default")
            for t, q in zip(ids, queues, strict=True)
        ]
