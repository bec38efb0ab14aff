"""The dead-letter stream: tasks whose deliveries kept killing their consumers.

``reclaim.lua`` moves such a task to FAILED (event DEADLETTER) and adds an entry to the
namespace's ``deadletter`` stream (trimmed with MAXLEN ~). An operator lists them and
re-queues one as a new task: a clone submitted through the normal enqueue path, linked to
the original by ``requeued_as`` / ``requeued_from`` (``link.lua``). Re-queueing twice
answers with the same clone.

The quarantine (:mod:`rsjobs.reaper.quarantine`) adds entries too, for tasks whose data
made a script fail: ``step`` names what failed, ``action`` what was done (DEADLETTER, or
REMOVED: the task was only taken out of an index).
"""

from __future__ import annotations

import msgspec

from ..client import Client, validate_task_id
from ..codec import decode
from ..errors import CorruptData, RsjobsError, TaskNotFound
from ..store import LinkCode, Store

__all__ = ["CannotRequeue", "DeadLetter", "NotDeadLettered", "list_deadletters", "requeue"]


class NotDeadLettered(RsjobsError, LookupError):
    """Raised when ``deadletter requeue`` names a task that was never dead-lettered."""

    def __init__(self, task_id: str, state: str) -> None:
        super().__init__(f"task {task_id} was not dead-lettered (it is {state})")
        self.task_id, self.state = task_id, state


class CannotRequeue(RsjobsError, ValueError):
    """Raised when a dead-lettered task's stored data is too damaged to clone (a field
    missing, a payload that does not decode); nothing is written."""

    def __init__(self, task_id: str, why: str) -> None:
        super().__init__(f"task {task_id} cannot be requeued: {why}")
        self.task_id, self.why = task_id, why


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
    #: for an entry of the quarantine: the reaper step that failed on the task, and what
    #: was done (DEADLETTER, or REMOVED: only taken out of an index); '' for poison tasks
    step: str = ""
    action: str = ""


async def list_deadletters(
    store: Store, *, count: int = 50, before: str | None = None, inclusive: bool = False
) -> list[DeadLetter]:
    """The newest ``count`` dead letters (older than entry ``before``; ``inclusive``: or
    that one), newest first (of ``store``'s shard)."""
    out = []
    for row in await store.reaper.deadletters(count, before, inclusive=inclusive):
        f = row.fields
        out.append(
            DeadLetter(
                entry=row.entry,
                task_id=f.get("id", ""),
                queue=f.get("q", ""),
                type=f.get("type", ""),
                reason=f.get("reason", ""),
                worker=f.get("worker", ""),
                deliveries=int(f.get("deliveries") or 0),
                attempt=int(f.get("att") or 0),
                ts=int(f.get("ts") or 0),
                exists=row.state is not None,
                requeued_as=row.requeued_as,
                step=f.get("step", ""),
                action=f.get("action", ""),
            )
        )
    return out


async def requeue(client: Client, task_id: str, *, source: str | None = None) -> tuple[str, bool]:
    """Re-queue a dead-lettered task as a new task; returns ``(clone id, created)``.

    ``created`` is False when the task had already been re-queued (the existing clone is
    returned). ``source``: who acts, as the clone's history records it (default: the
    client's). Raises :class:`TaskNotFound` (never existed, or expired after retention),
    :class:`NotDeadLettered`, :class:`CannotRequeue` (its data is too damaged to clone), or
    the enqueue's :class:`rsjobs.ConfigError` / :class:`rsjobs.PayloadError`; all before
    anything is written.
    """
    validate_task_id(task_id)
    if source is not None and source != client.source:
        # the same connections, another actor
        client = Client(client.redis, client.settings, source=source)
    reaper = client.store.reaper
    try:
        t = await reaper.task_record(task_id)
    except CorruptData as exc:
        raise CannotRequeue(task_id, f"a number field does not parse ({exc.why})") from None
    if t is None:
        raise TaskNotFound(task_id)
    if not t.deadletter:
        raise NotDeadLettered(task_id, t.state or "?")
    if t.requeued_as and await reaper.exists(t.requeued_as):
        return t.requeued_as, False
    # everything the clone takes from the original is checked before anything is written
    for name in ("type", "queue"):
        if not getattr(t, name):
            raise CannotRequeue(task_id, f"it has no {name} field")
    try:
        payload = decode(t.payload)
    except msgspec.DecodeError as exc:
        raise CannotRequeue(task_id, f"its payload does not decode ({exc})") from None
    dedup = f"requeue:{task_id}"
    clone = await client.enqueue(
        t.type,
        payload,
        queue=t.queue,
        owner=t.owner or None,
        # a second requeue while the clone lives answers with the same clone
        dedup_key=dedup,
        max_attempts=t.max_attempts or 1,
        timeout_ms=t.timeout_ms,
        backoff_base_ms=t.backoff_base_ms or 1000,
        backoff_max_ms=t.backoff_max_ms or 300_000,
        priority=t.priority,
    )
    k = client.keys
    code = await reaper.link(
        client.source,
        k.task_keys(task_id, t.queue, t.dedup or None, t.priority),
        k.task_keys(clone, t.queue, dedup, t.priority),
    )
    return clone, code is not LinkCode.ALREADY
