"""The dead-letter stream: tasks whose deliveries kept killing their consumers.

``reclaim.lua`` moves such a task to FAILED (event DEADLETTER) and adds an entry to the
namespace's ``deadletter`` stream (trimmed with MAXLEN ~). An operator lists them and
re-queues one as a new task: a clone submitted through the normal enqueue path, linked to
the original by ``requeued_as`` / ``requeued_from`` (``link.lua``). Re-queueing twice
answers with the same clone.
"""

from __future__ import annotations

import msgspec
from redis.asyncio import Redis

from ..client import Client, validate_task_id
from ..codec import decode
from ..errors import RsjobsError, TaskNotFound
from ..keys import Keys
from .calls import ReaperScripts

__all__ = ["DeadLetter", "NotDeadLettered", "list_deadletters", "requeue"]


class NotDeadLettered(RsjobsError, LookupError):
    """Raised when ``deadletter requeue`` names a task that was never dead-lettered."""

    def __init__(self, task_id: str, state: str) -> None:
        super().__init__(f"task {task_id} was not dead-lettered (it is {state})")
        self.task_id, self.state = task_id, state


class DeadLetter(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of the dead-letter stream, joined with what its task says now."""

    entry: str  #: the dead-letter stream entry id
    task_id: str
    queue: str
    type: str
    reason: str
    worker: str  #: the consumer lost with the last delivery
    deliveries: int
    attempt: int
    ts: int  #: Redis TIME ms of the dead-lettering
    #: the task's hash still exists (False once it expired after the retention period)
    exists: bool = True
    requeued_as: str = ""


async def list_deadletters(redis: Redis, keys: Keys, *, count: int = 50) -> list[DeadLetter]:
    """The newest ``count`` dead letters, newest first."""
    rows = await redis.xrevrange(keys.deadletter, "+", "-", count=count)
    async with redis.pipeline(transaction=False) as pipe:
        for _, f in rows:
            pipe.hmget(keys.task(f.get("id", "")), ["state", "requeued_as"])
        tasks = await pipe.execute()
    out = []
    for (eid, f), (state, requeued_as) in zip(rows, tasks, strict=True):
        out.append(
            DeadLetter(
                entry=eid,
                task_id=f.get("id", ""),
                queue=f.get("q", ""),
                type=f.get("type", ""),
                reason=f.get("reason", ""),
                worker=f.get("worker", ""),
                deliveries=int(f.get("deliveries") or 0),
                attempt=int(f.get("att") or 0),
                ts=int(f.get("ts") or 0),
                exists=state is not None,
                requeued_as=requeued_as or "",
            )
        )
    return out


async def requeue(client: Client, task_id: str) -> tuple[str, bool]:
    """Re-queue a dead-lettered task as a new task; returns ``(clone id, created)``.

    ``created`` is False when the task had already been re-queued (the existing clone is
    returned). Raises :class:`TaskNotFound` (never existed, or expired after retention)
    or :class:`NotDeadLettered`.
    """
    validate_task_id(task_id)
    keys = client.keys
    h: dict[str, str] = await client.redis.hgetall(keys.task(task_id))
    if not h:
        raise TaskNotFound(task_id)
    if not h.get("deadletter"):
        raise NotDeadLettered(task_id, h.get("state", "?"))
    prev = h.get("requeued_as")
    if prev and await client.redis.exists(keys.task(prev)):
        return prev, False
    clone = await client.enqueue(
        h["type"],
        decode(h.get("payload")),
        queue=h["queue"],
        max_attempts=int(h.get("max_attempts") or 1),
        timeout_ms=int(h.get("timeout_ms") or 0),
        owner=h.get("owner") or None,
        backoff_base_ms=int(h.get("backoff_base_ms") or 1000),
        backoff_max_ms=int(h.get("backoff_max_ms") or 300_000),
        # a second requeue while the clone lives answers with the same clone
        dedup_key=f"requeue:{task_id}",
    )
    rs = ReaperScripts(client.redis, client.settings)
    code, _ = await rs.call(
        "link",
        [
            rs.task_keys(task_id, h["queue"], h.get("dedup")),
            rs.task_keys(clone, h["queue"], f"requeue:{task_id}"),
        ],
        [],
        source=client.source,
    )
    return clone, int(code) != 0
