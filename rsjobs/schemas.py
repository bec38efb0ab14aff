"""Typed views of what lives in Redis: a task, one history entry, an enqueue request."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from .codec import decode
from .errors import CorruptData, PayloadError

if TYPE_CHECKING:
    from .store.record import TaskRecord

__all__ = [
    "BulkItem",
    "BulkResult",
    "EnqueueRequest",
    "EnqueueResult",
    "HistoryEntry",
    "NamespaceEvent",
    "QueuePause",
    "RetryResult",
    "TaskFilter",
    "TaskInfo",
    "TaskPage",
    "TaskSummary",
    "WebhookDelivery",
    "repeat_fields",
]


def _text(v: bytes | str | None) -> str:
    if v is None:
        return ""
    return v.decode() if isinstance(v, bytes) else v


def _int(v: bytes | str | None) -> int:
    return int(v) if v else 0


class TaskInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A task as stored in its hash (:class:`rsjobs.store.record.TaskRecord`), its payload
    and result decoded. Times are Redis TIME in milliseconds (0 = not yet)."""

    id: str
    type: str
    queue: str
    state: str
    attempt: int = 0
    failures: int = 0
    max_attempts: int = 1
    progress: float = 0.0
    progress_msg: str = ""
    payload: Any = None
    result: Any = None
    error: str = ""
    error_type: str = ""
    owner: str = ""
    #: its labels (rsjobs.labels)
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    dedup: str = ""
    timeout_ms: int = 0
    worker: str = ""
    created_at: int = 0
    updated_at: int = 0
    started_at: int = 0
    finished_at: int = 0
    due_at: int = 0
    deadline_at: int = 0
    expires_at: int = 0
    lease_expires_at: int = 0
    #: the task this one starts over (RETRY / REPLAY), and the task that started it over
    retry_of: str = ""
    retried_as: str = ""
    #: the bounded traceback of the last failed attempt, while its error stands (every
    #: attempt's is in its FAIL history entry, ``extra["traceback"]``)
    traceback: str = ""
    #: the task waits on a paused queue (read with the task; False once it is finished)
    queue_paused: bool = False
    #: a deferred attempt's outside job (Context.defer): its id and provider (kept once
    #: the wait is over), and the end of its longest wait while DEFERRED (ms)
    external_id: str = ""
    provider: str = ""
    wait_until: int = 0
    #: a successor (``Client.enqueue(after=...)``): its predecessors in the order it named
    #: them, its policy ("succeeded" or "always"; '' for a task without predecessors), the
    #: state of each predecessor whose end it counted, and the results of those that
    #: SUCCEEDED (what its handler gets as ``ctx.predecessors``)
    after: list[str] = msgspec.field(default_factory=list)
    after_policy: str = ""
    predecessor_states: dict[str, str] = msgspec.field(default_factory=dict)
    predecessor_results: dict[str, Any] = msgspec.field(default_factory=dict)
    #: the tasks that wait (or waited) for this one
    successors: list[str] = msgspec.field(default_factory=list)
    #: 0 (the default) to 9, higher first (rsjobs.limits)
    priority: int = 0

    @property
    def terminal(self) -> bool:
        from .model import is_terminal

        return is_terminal(self.state)

    @classmethod
    def from_record(cls, r: TaskRecord) -> TaskInfo:
        """The task of a decoded task hash (:func:`rsjobs.store.record.decode_task`).
        Raises :class:`rsjobs.CorruptData` when its payload or result does not decode."""
        from .labels import decode_labels
        from .successors import decode_predecessors, parse_after

        try:
            payload, result = decode(r.payload), decode(r.result)
            results = decode_predecessors(r.predecessors)
        except (msgspec.DecodeError, PayloadError) as exc:
            raise CorruptData("task", r.id or "?", f"its payload or result: {exc}") from None
        after = parse_after(r.after)
        return cls(
            id=r.id,
            type=r.type,
            queue=r.queue,
            state=r.state,
            attempt=r.attempt,
            failures=r.failures,
            max_attempts=r.max_attempts or 1,
            progress=r.progress,
            progress_msg=r.progress_msg,
            payload=payload,
            result=result,
            error=r.error,
            error_type=r.error_type,
            owner=r.owner,
            labels=decode_labels(r.labels),
            dedup=r.dedup,
            timeout_ms=r.timeout_ms,
            worker=r.consumer,
            created_at=r.created_at,
            updated_at=r.updated_at,
            started_at=r.started_at,
            finished_at=r.finished_at,
            due_at=r.due_at,
            deadline_at=r.deadline_at,
            expires_at=r.expires_at,
            lease_expires_at=r.lease_expires_at,
            retry_of=r.retry_of,
            retried_as=r.retried_as,
            traceback=r.traceback,
            external_id=r.external_id,
            provider=r.provider,
            wait_until=r.wait_until,
            after=[tid for tid, _ in after],
            after_policy=(r.after_policy or "succeeded") if after else "",
            predecessor_states={tid: s for tid, s in after if s},
            predecessor_results=results,
            successors=[s for s in r.successors.split(",") if s],
            priority=r.priority,
        )

    @classmethod
    def from_hash(cls, h: Mapping[Any, Any]) -> TaskInfo:
        """The task of an ``HGETALL`` reply. Raises :class:`rsjobs.CorruptData`."""
        from .store.record import decode_task

        return cls.from_record(decode_task(h))


#: the longest error text a list shows of a task (its whole error: Client.get)
SUMMARY_ERROR = 200


class TaskSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One task of a list (:meth:`rsjobs.Client.list_tasks`, ``GET /tasks``): what a row
    of a table shows. Its payload and result are not read (:meth:`rsjobs.Client.get` has
    them), its error is cut to its first 200 characters. Times are Redis TIME in ms."""

    id: str
    type: str
    queue: str
    state: str
    owner: str = ""
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    attempt: int = 0
    max_attempts: int = 1
    failures: int = 0
    progress: float = 0.0
    error_type: str = ""
    error: str = ""
    #: the worker holding (or, once finished, last holding) its lease
    worker: str = ""
    #: the workflow it is a task of ('' = none)
    workflow: str = ""
    #: 0 (the default) to 9, higher first
    priority: int = 0
    created_at: int = 0
    updated_at: int = 0
    started_at: int = 0
    finished_at: int = 0
    due_at: int = 0
    #: the time the list orders it by: for a list read by state, when it entered that
    #: state (PENDING and RUNNING: when its work entry was queued; SCHEDULED: when it is
    #: due; WAITING: when it was created); for a list read by owner or label, when it
    #: was created
    listed_at: int = 0

    @classmethod
    def from_record(cls, r: TaskRecord, listed_at: int) -> TaskSummary:
        from .labels import decode_labels

        return cls(
            id=r.id,
            type=r.type,
            queue=r.queue,
            state=r.state,
            owner=r.owner,
            labels=decode_labels(r.labels),
            attempt=r.attempt,
            max_attempts=r.max_attempts or 1,
            failures=r.failures,
            progress=r.progress,
            error_type=r.error_type,
            error=r.error[:SUMMARY_ERROR],
            worker=r.consumer,
            workflow=r.wf,
            priority=r.priority,
            created_at=r.created_at,
            updated_at=r.updated_at,
            started_at=r.started_at,
            finished_at=r.finished_at,
            due_at=r.due_at,
            listed_at=listed_at,
        )


class TaskPage(msgspec.Struct, frozen=True, kw_only=True):
    """A page of a task list, newest first; ``cursor`` asks for the next page (None: this
    is the last). A page may hold fewer than its limit and still have a next one: a page
    stops after looking at a bounded number of index entries."""

    items: list[TaskSummary]
    cursor: str | None = None


_CORE = {"ev", "from", "to", "src", "att", "ts", "msg", "rej", "id", "q", "hid"}


def repeat_fields(entry_id: str) -> tuple[str, str]:
    """The task hash fields that count the repeats of a refusal entry (see ``reject`` in
    ``fsm.lua``): how many more refusals it stands for, and the time of the last one."""
    return f"rep:{entry_id}", f"rep_ts:{entry_id}"


def _float(v: str | None) -> float | None:
    try:
        return float(v) if v else None
    except ValueError:
        return None


class HistoryEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of a task's history stream: a transition, a progress note or a refusal.

    A refusal entry stands for the first refusal of its event (and attempt) while the task
    was in one state; ``repeats`` more were refused there after it (the last at
    ``last_ts``), counted on the task hash instead of appended.
    """

    id: str  #: the history stream entry id (also the SSE event id)
    task_id: str = ""
    event: str
    from_state: str
    to_state: str
    source: str
    attempt: int
    ts: int  #: Redis TIME, milliseconds
    message: str = ""
    rejected: bool = False
    extra: dict[str, str] = msgspec.field(default_factory=dict)
    #: refusals of the same event and attempt, in the same state, after this one
    repeats: int = 0
    #: Redis TIME (ms) of the last of those repeats; 0 when there were none
    last_ts: int = 0
    #: the percent the entry says the task is at, as a number: a PROGRESS note's (its
    #: ``extra["p"]``), 100 for the entry that made the task SUCCEEDED; null for the others
    progress: float | None = None

    @property
    def count(self) -> int:
        """How many refused calls this entry accounts for (0 for a transition or note)."""
        return 1 + self.repeats if self.rejected else 0

    @classmethod
    def from_entry(
        cls,
        entry_id: bytes | str,
        fields: dict[Any, Any],
        task_id: str = "",
        task: Mapping[Any, Any] | None = None,
    ) -> HistoryEntry:
        """Build from a stream entry; ``task`` (the task hash, or any mapping holding its
        ``rep:<id>`` / ``rep_ts:<id>`` fields) supplies a refusal's repeat count."""
        f = {_text(k): _text(v) for k, v in fields.items()}
        eid = _text(entry_id)
        repeats = last_ts = 0
        if task and f.get("rej") == "1":
            n, ts = repeat_fields(eid)
            repeats, last_ts = _int(task.get(n)), _int(task.get(ts))
        event, to = f.get("ev", ""), f.get("to", "")
        progress = None
        if f.get("rej") != "1":
            if event == "PROGRESS":
                progress = _float(f.get("p"))
            elif to == "SUCCEEDED" and f.get("from") != "SUCCEEDED":
                progress = 100.0
        return cls(
            id=eid,
            task_id=task_id or f.get("id", ""),
            event=f.get("ev", ""),
            from_state=f.get("from", ""),
            to_state=f.get("to", ""),
            source=f.get("src", ""),
            attempt=int(f.get("att") or 0),
            ts=int(f.get("ts") or 0),
            message=f.get("msg", ""),
            rejected=f.get("rej") == "1",
            extra={k: v for k, v in f.items() if k not in _CORE},
            repeats=repeats,
            last_ts=last_ts,
            progress=progress,
        )


class NamespaceEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of the namespace's events stream, described: a task's history entry
    (``task_id`` set) or a workflow's (``task_id`` empty, ``workflow_id`` set). A task
    that expired since has an empty ``event`` and ``state``."""

    #: the events stream entry id ``<ms>-<seq>`` (the SSE id: resume after it)
    id: str
    task_id: str = ""
    #: the workflow of a workflow's task, or the workflow whose history grew
    workflow_id: str = ""
    #: the task's or workflow's event (START, COMPLETE, CANCEL, ADVANCE...)
    event: str = ""
    #: a task's state after the entry (as before it, for a refusal)
    state: str = ""
    queue: str = ""
    #: a refused event (the state did not change)
    rejected: bool = False
    #: when it happened (ms, Redis TIME)
    ts: int = 0


class EnqueueRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One task to submit; see :meth:`rsjobs.Client.enqueue` for the meaning of each field."""

    type: str
    payload: Any = None
    queue: str = "default"
    max_attempts: int = 3
    timeout_ms: int = 0
    delay_ms: int = 0
    dedup_key: str | None = None
    owner: str | None = None
    backoff_base_ms: int = 1000
    backoff_max_ms: int = 300_000
    wait_timeout_ms: int = 0
    #: a few ``key: value`` texts to list it by (rsjobs.labels)
    labels: dict[str, str] | None = None
    #: the tasks it waits for (a successor: rsjobs.successors), and what it waits for:
    #: "succeeded" (every one SUCCEEDED) or "always" (every one finished)
    after: list[str] | None = None
    after_policy: str = "succeeded"
    #: 0 (the default) to 9, higher first (rsjobs.limits)
    priority: int = 0


class EnqueueResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a submit did: the task's id, its state after the call ('' when unknown), and
    whether the dedup key (or id) already named a live task, in which case nothing was
    written."""

    id: str
    state: str
    duplicate: bool


class RetryResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a RETRY or REPLAY did: the old task, the task that starts it over and that
    task's state now, and whether this call made it (False: the old task had already been
    started over as ``new_id``; nothing was written)."""

    id: str
    event: str
    new_id: str
    state: str
    created: bool


class QueuePause(msgspec.Struct, frozen=True, kw_only=True):
    """A queue's pause flag: paused or not and, while paused, since when (Redis TIME, ms),
    by whom (the source of the pause) and why. ``changed``: the call that answered it
    changed the flag (False for a repeat, or a read)."""

    queue: str
    paused: bool
    since: int = 0
    by: str = ""
    reason: str = ""
    changed: bool = False
    #: a sharded namespace whose shards do not all hold the flag (a pause or resume that
    #: did not reach every shard: a repeat completes it): on how many, e.g. ``"3 of 8"``;
    #: '' when every shard agrees
    shards: str = ""


class TaskFilter(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Which tasks a bulk action selects: every field given must match (``since`` /
    ``until``: created at or after / before, Redis TIME in ms). See
    :func:`rsjobs.store.selection.select`."""

    queue: str | None = None
    state: str | None = None
    type: str | None = None
    owner: str | None = None
    since: int | None = None
    until: int | None = None
    #: tasks that have every one of these labels
    labels: dict[str, str] | None = None


class BulkItem(msgspec.Struct, frozen=True, kw_only=True):
    """One selected task of a bulk action: its state after the action, whether the action
    changed it, the task that starts it over (retry), or why it was refused."""

    id: str
    state: str
    changed: bool
    new_id: str = ""
    detail: str = ""


class BulkResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a bulk action did, or would do (``dry_run``): ``matched`` tasks match the
    filter; the first ``limit`` of them (``ids``) are acted on, one by one, each as its
    own action would be (a task that moved on meanwhile is refused and listed so)."""

    action: str
    dry_run: bool
    matched: int
    ids: list[str]
    changed: int = 0
    items: list[BulkItem] = msgspec.field(default_factory=list)


class WebhookDelivery(msgspec.Struct, frozen=True, kw_only=True):
    """One attempt of one webhook delivery, as the task's webhook log keeps it."""

    webhook: str
    delivery: str
    state: str
    attempt: int
    #: Unix time (ms) the attempt started
    at: int
    ms: int
    #: the HTTP status (0: no answer)
    status: int = 0
    ok: bool = False
    error: str = ""
