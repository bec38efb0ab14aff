"""The request and response bodies of the HTTP API, as msgspec Structs.

Request bodies forbid unknown fields and carry their limits as ``Meta`` constraints, so a
bad body is refused while it is decoded, before anything touches Redis. The same Structs
produce the JSON Schemas of the OpenAPI document (``openapi.py``), so the two cannot drift.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

import msgspec
from msgspec import Meta

from ..labels import MAX_LABELS, MAX_VALUE
from ..limits import (
    BURST_MAX,
    LIMIT_MAX,
    MAX_PRIORITY,
    PER_SECOND_MAX,
    PER_SECOND_MIN,
    QueueLimits,
)
from ..names import NAME_SCHEMA, OWNER_SCHEMA, TYPE_SCHEMA
from ..overview import QueueView
from ..reaper.registry import WorkerInfo
from ..schemas import HistoryEntry, TaskInfo, WebhookDelivery

__all__ = [
    "ActionRequest",
    "BulkFilter",
    "BulkRequest",
    "CancelRequest",
    "CancelResult",
    "ControlResult",
    "ErrorBody",
    "Health",
    "HistoryPage",
    "LimitList",
    "LimitRequest",
    "QueueList",
    "RateRequest",
    "RequeueResult",
    "StreamEnd",
    "SubmitRequest",
    "SubmitResult",
    "TaskView",
    "WebhookLog",
    "WorkerList",
    "decode_body",
    "encode",
]

# The name rules are rsjobs.names's (patterns end with \Z, see there).
QueueName = Annotated[str, Meta(pattern=NAME_SCHEMA, description="queue name")]
OwnerName = Annotated[str, Meta(pattern=OWNER_SCHEMA)]
TypeName = Annotated[str, Meta(pattern=TYPE_SCHEMA, description="task type")]
#: The ``Idempotency-Key`` rule: 1-128 printable ASCII characters, no space.
DedupKey = Annotated[str, Meta(pattern=r"^[\x21-\x7e]{1,128}\Z")]
Millis = Annotated[int, Meta(ge=0, le=30 * 24 * 3600 * 1000, description="milliseconds")]
#: The label rules (rsjobs.labels; a value must also be printable, checked on submit).
LabelKey = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_./\-]{1,32}\Z")]
LabelValue = Annotated[str, Meta(min_length=1, max_length=MAX_VALUE)]
Labels = Annotated[dict[LabelKey, LabelValue], Meta(max_length=MAX_LABELS)]
FilterLabels = Annotated[dict[LabelKey, LabelValue], Meta(min_length=1, max_length=MAX_LABELS)]
#: A task id: 32 lowercase hex characters.
TaskId = Annotated[str, Meta(pattern=r"^[0-9a-f]{32}\Z", description="task id")]
Priority = Annotated[int, Meta(ge=0, le=MAX_PRIORITY, description="0 (default) to 9, higher first")]


class SubmitRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Body of ``POST /tasks``; the fields mean what they mean in ``Client.enqueue``."""

    type: TypeName
    payload: Any = None
    queue: QueueName = "default"
    max_attempts: Annotated[int, Meta(ge=1, le=1000)] = 3
    timeout_ms: Millis = 0
    delay_ms: Millis = 0
    wait_timeout_ms: Millis = 0
    backoff_base_ms: Millis = 1000
    backoff_max_ms: Millis = 300_000
    #: idempotency key (the ``Idempotency-Key`` header is the same thing); scoped per owner
    dedup_key: DedupKey | None = None
    #: submit on behalf of this owner: admin tokens only
    owner: OwnerName | None = None
    #: a few key: value texts to list it by (GET /tasks?label=key=value)
    labels: Labels | None = None
    #: its predecessors (1-32 distinct tasks of the same owner): it waits (WAITING) until
    #: they succeeded, then runs with their results; one that fails, times out or is
    #: cancelled cancels it (docs/successors.md)
    after: Annotated[list[TaskId], Meta(min_length=1, max_length=32)] | None = None
    #: succeeded: run once every predecessor SUCCEEDED; always: once every one finished
    after_policy: Literal["succeeded", "always"] = "succeeded"
    #: a sharded namespace: tasks given the same key share a shard (when no owner, dedup
    #: key or predecessor places them); not stored
    shard_key: Annotated[str, Meta(min_length=1, max_length=200)] | None = None
    #: 0 (the default) to 9: higher starts first on its queue
    priority: Priority = 0


class LimitRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Body of ``PUT /queues/{queue}/limits[/{owner}]``: at most ``limit`` RUNNING tasks of
    each owner (or of that owner) on the queue."""

    limit: Annotated[int, Meta(ge=1, le=LIMIT_MAX)]


class RateRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Body of ``PUT /queues/{queue}/rate[/{type}[/retries]]``: a token bucket of
    ``per_second`` starts, up to ``burst`` at once (default one second's worth)."""

    per_second: Annotated[float, Meta(ge=PER_SECOND_MIN, le=PER_SECOND_MAX)]
    burst: Annotated[int, Meta(ge=1, le=BURST_MAX)] | None = None


class CancelRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Optional body of ``POST /tasks/{id}/cancel``."""

    reason: Annotated[str, Meta(max_length=500)] = ""


class ActionRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Optional body of the task and queue actions (pause, resume, retry, replay, a
    queue's pause and resume, a dead letter's requeue)."""

    reason: Annotated[str, Meta(max_length=500)] = ""


StateName = Literal[
    "WAITING",
    "PENDING",
    "SCHEDULED",
    "RUNNING",
    "DEFERRED",
    "PAUSED",
    "SUCCEEDED",
    "FAILED",
    "CANCELLED",
    "TIMED_OUT",
]
Time = Annotated[int, Meta(ge=0, le=10**15 - 1, description="Redis TIME, milliseconds")]


class BulkFilter(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Which tasks a bulk action selects: every field given must match; at least one is
    needed. ``since`` / ``until``: created at or after / before."""

    queue: QueueName | None = None
    state: StateName | None = None
    type: TypeName | None = None
    owner: OwnerName | None = None
    since: Time | None = None
    until: Time | None = None
    #: tasks with every one of these labels
    labels: (
        Annotated[dict[LabelKey, LabelValue], Meta(min_length=1, max_length=MAX_LABELS)] | None
    ) = None


class BulkRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Body of ``POST /tasks/bulk/cancel`` and ``/tasks/bulk/retry``."""

    filter: BulkFilter
    #: count and list the tasks it would act on; change nothing
    dry_run: bool = False
    #: act on at most this many (the oldest first)
    limit: Annotated[int, Meta(ge=1, le=1000)] = 100
    reason: Annotated[str, Meta(max_length=500)] = ""


class QueueDeleted(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to ``DELETE /queues/{queue}``."""

    queue: str
    #: how many keys and fields went (its streams, counters, series, name...)
    deleted: int


class ControlResult(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to a task's pause or resume."""

    id: str
    state: str  #: the state after the call
    #: false when the task already was there (a repeated pause): nothing changed
    changed: bool


class RequeueResult(msgspec.Struct, frozen=True, kw_only=True):
    """``POST /deadletters/{id}/requeue``: the dead-lettered task and its clone."""

    id: str
    requeued_as: str
    #: false when the task had already been requeued (that clone is answered)
    created: bool


class SubmitResult(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    state: str
    #: true when the idempotency key named an existing task (nothing was written)
    duplicate: bool


class CallbackRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A provider's result for a deferred attempt (``POST /callbacks/...``)."""

    #: succeeded: ``result`` is the task's result; failed: the retry policy decides
    status: Literal["succeeded", "failed"]
    result: Any = None
    error: Annotated[str, Meta(max_length=2000)] = ""
    #: failed only: false fails the task at once
    retryable: bool = True
    #: what the outside job cost: unit -> amount (rsjobs.costs: a unit is a lowercase
    #: letter and up to 15 of a-z, 0-9, '_'; an amount a number >= 0), added to the
    #: attempt's costs
    charges: Annotated[dict[str, float], Meta(max_length=8)] = msgspec.field(default_factory=dict)


class CallbackResult(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to a callback: the task and its state after it."""

    id: str
    state: str
    #: false for a repeat of the result that ended the wait: nothing was written
    changed: bool


class CancelResult(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    state: str  #: the state after the call
    #: false when the task was already finished (or cancelled): nothing changed
    changed: bool


class TaskView(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /tasks/{id}``: the task as stored now, plus its most recent history."""

    id: str
    type: str
    queue: str
    state: str
    terminal: bool
    progress: float
    progress_msg: str
    attempt: int
    failures: int
    max_attempts: int
    owner: str
    labels: dict[str, str]
    payload: Any
    result: Any
    error: str
    error_type: str
    #: Redis TIME in milliseconds; 0 = not yet
    created_at: int
    updated_at: int
    started_at: int
    finished_at: int
    due_at: int
    expires_at: int
    #: the task this one starts over (retry, replay), and the task that started it over
    retry_of: str = ""
    retried_as: str = ""
    #: the bounded traceback of the last failed attempt while its error stands (each
    #: attempt's is in its FAIL history entry's extra.traceback)
    traceback: str = ""
    #: the task waits on a paused queue: no worker starts it until the queue is resumed
    queue_paused: bool = False
    #: the worker holding (or, once finished, last holding) its lease
    worker: str = ""
    #: the execution deadline of an attempt (0: none)
    timeout_ms: int = 0
    #: a successor: the tasks it waits for (in its order), its policy ("succeeded",
    #: "always"; '' for a task without predecessors) and the state of each predecessor
    #: whose end it counted; the tasks that wait (or waited) for this one
    after: list[str] = msgspec.field(default_factory=list)
    after_policy: str = ""
    predecessor_states: dict[str, str] = msgspec.field(default_factory=dict)
    successors: list[str] = msgspec.field(default_factory=list)
    #: 0 (the default) to 9: higher starts first
    priority: int = 0
    #: the last entries of the task's history, oldest first
    recent: list[HistoryEntry] = msgspec.field(default_factory=list)

    @classmethod
    def build(cls, info: TaskInfo, recent: list[HistoryEntry]) -> TaskView:
        return cls(
            id=info.id,
            type=info.type,
            queue=info.queue,
            state=info.state,
            terminal=info.terminal,
            progress=info.progress,
            progress_msg=info.progress_msg,
            attempt=info.attempt,
            failures=info.failures,
            max_attempts=info.max_attempts,
            owner=info.owner,
            labels=info.labels,
            payload=info.payload,
            result=info.result,
            error=info.error,
            error_type=info.error_type,
            created_at=info.created_at,
            updated_at=info.updated_at,
            started_at=info.started_at,
            finished_at=info.finished_at,
            due_at=info.due_at,
            expires_at=info.expires_at,
            retry_of=info.retry_of,
            retried_as=info.retried_as,
            traceback=info.traceback,
            queue_paused=info.queue_paused,
            worker=info.worker,
            timeout_ms=info.timeout_ms,
            after=info.after,
            after_policy=info.after_policy,
            predecessor_states=info.predecessor_states,
            successors=info.successors,
            priority=info.priority,
            recent=recent,
        )


class QueueList(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /queues``: every queue of the namespace, by name."""

    queues: list[QueueView]


class LimitList(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /limits``: the limits of every queue that has one, or tasks held by one."""

    queues: list[QueueLimits]


class WorkerList(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /workers``: the workers registry (alive, late and dead workers)."""

    workers: list[WorkerInfo]


class HistoryPage(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /tasks/{id}/history``: entries oldest first; pass ``next`` as ``after``."""

    id: str
    entries: list[HistoryEntry]
    #: the id of the last entry, or null when this page is empty
    next: str | None


class WebhookLog(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /tasks/{id}/webhooks``: every webhook delivery attempt for it, newest first."""

    id: str
    deliveries: list[WebhookDelivery]


class Health(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /healthz``."""

    #: "ok", or "unavailable" (with 503) when Redis does not answer
    status: str
    #: "ok" or "unreachable"
    redis: str
    #: "ok", "retrying" (after a Redis error) or "not started"
    events_reader: str
    #: open SSE connections of this process
    event_streams: int


class StreamEnd(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The data of a task event stream's ``end`` event."""

    #: the task's final state
    state: str
    #: 100 when it SUCCEEDED (null otherwise: as far as its last progress note said)
    progress: float | None = None


class ErrorBody(msgspec.Struct, frozen=True, kw_only=True):
    """Every 4xx / 5xx answer: an RFC 9457 problem document (``application/problem+json``)
    whose ``error`` extension member is the short machine code clients match on."""

    #: the problem type: always ``about:blank`` (the HTTP status says what kind it is;
    #: ``error`` says which)
    type: str = "about:blank"
    #: the HTTP status phrase ("Not Found"), as RFC 9457 asks of ``about:blank``
    title: str
    #: the HTTP status code, repeated
    status: int
    #: a sentence for people about this occurrence
    detail: str
    #: the machine code (``not_found``, ``idempotency_key_reused``...)
    error: str


_encoder = msgspec.json.Encoder()
T = TypeVar("T")


def encode(value: Any) -> bytes:
    return _encoder.encode(value)


#: one decoder per request body type, built on first use
_decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}


def decode_body(body: bytes, kind: type[T]) -> T:
    """Decode a request body; raises ``msgspec.DecodeError`` (or ValidationError)."""
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.json.Decoder(kind)
    result: T = decoder.decode(body)
    return result
