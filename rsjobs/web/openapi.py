"""The OpenAPI 3.1 document of the HTTP API (``GET /openapi.json``).

Paths are written by hand; every body schema is generated from the msgspec Structs the
handlers decode and encode (``schemas.py``; for workflows ``bodies.py`` and
``rsjobs.workflows.schemas``), so the document cannot drift from the
code. Two fields the Structs type as ``Any`` (the status document in ``ActionResult``, the
entries of ``EventsPage``) are narrowed here to the Structs the handlers put in them.
Tests check that the documented paths and methods are exactly the routes of the app, and
that real answers decode into the documented Structs.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import msgspec

from .. import __version__
from ..costs import DIMENSIONS, CostReport, TaskCost, WorkflowCost
from ..limits import QueueLimits, RateLimit
from ..model import State
from ..names import NAME_SCHEMA, TYPE_RULE, TYPE_SCHEMA
from ..overview import DeadLetterPage, QueueSeries
from ..scaling import ScaleSignal
from ..schemas import (
    BulkResult,
    HistoryEntry,
    NamespaceEvent,
    QueuePause,
    RetryResult,
    TaskPage,
    WebhookDelivery,
)
from ..workflows.listing import WorkflowPage
from ..workflows.model import WfStatus
from ..workflows.schemas import WorkflowEvent, WorkflowStatus
from .assets import MEDIA_TYPES
from .bodies import (
    ACTION_BODIES,
    ActionResult,
    CancelBody,
    ConfirmBody,
    EventsPage,
    PublishBody,
    RegenerateBody,
    RetryBody,
    StartBody,
    WorkflowPlan,
)
from .dashboard import FsmGraph
from .schemas import (
    ActionRequest,
    BulkRequest,
    CallbackRequest,
    CallbackResult,
    CancelRequest,
    CancelResult,
    ControlResult,
    ErrorBody,
    Health,
    HistoryPage,
    LimitList,
    LimitRequest,
    QueueDeleted,
    QueueList,
    RateRequest,
    RequeueResult,
    StreamEnd,
    SubmitRequest,
    SubmitResult,
    TaskView,
    WebhookLog,
    WorkerList,
)

__all__ = ["ACTION_BODIES", "openapi_document", "openapi_for"]

_REF = "#/components/schemas/{name}"
_STRUCTS = (
    FsmGraph,
    SubmitRequest,
    SubmitResult,
    CancelRequest,
    CancelResult,
    TaskView,
    HistoryEntry,
    HistoryPage,
    WebhookLog,
    WebhookDelivery,
    StreamEnd,
    Health,
    TaskPage,
    QueueList,
    WorkerList,
    LimitRequest,
    RateRequest,
    LimitList,
    QueueLimits,
    RateLimit,
    DeadLetterPage,
    QueueSeries,
    ScaleSignal,
    WorkflowPage,
    NamespaceEvent,
    ErrorBody,
    ActionRequest,
    ControlResult,
    RetryResult,
    QueuePause,
    QueueDeleted,
    BulkRequest,
    BulkResult,
    RequeueResult,
    StartBody,
    ConfirmBody,
    RegenerateBody,
    RetryBody,
    PublishBody,
    CancelBody,
    ActionResult,
    EventsPage,
    WorkflowStatus,
    WorkflowEvent,
    WorkflowPlan,
    CallbackRequest,
    CallbackResult,
    TaskCost,
    WorkflowCost,
    CostReport,
)


#: fields typed ``Any`` in their Struct, and what the handlers put in them
_NARROWED = {
    ("ActionResult", "workflow"): {"$ref": _REF.format(name="WorkflowStatus")},
    ("EventsPage", "entries"): {
        "type": "array",
        "items": {"$ref": _REF.format(name="WorkflowEvent")},
    },
}


def _json(name: str) -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": _REF.format(name=name)}}}


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {
            "application/problem+json": {"schema": {"$ref": _REF.format(name="ErrorBody")}}
        },
    }


# GET routes answered with an ETag: If-None-Match, 304, and the ETag header on 200
_IF_NONE_MATCH = {
    "name": "If-None-Match", "in": "header", "required": False,
    "description": "an ETag this route sent: 304 with no body while the document is unchanged",
    "schema": {"type": "string"},
}  # fmt: skip
_ETAG_HEADERS = {
    "ETag": {"description": "the document's entity tag", "schema": {"type": "string"}},
    "Cache-Control": {"description": "private, no-cache: revalidate with If-None-Match",
                      "schema": {"type": "string"}},
}  # fmt: skip


def _cached(description: str, schema: str) -> dict[str, Any]:
    """The 200 and 304 answers of a route with an ETag."""
    return {
        "200": {"description": description, "content": _json(schema), "headers": _ETAG_HEADERS},
        "304": {"description": "unchanged since the ETag named by If-None-Match",
                "headers": _ETAG_HEADERS},
    }  # fmt: skip


_TASK_ID = {
    "name": "task_id",
    "in": "path",
    "required": True,
    "description": "the task id: 32 lowercase hexadecimal characters",
    "schema": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
}
_AUTH_ERRORS = {"401": _error("no token, or an unknown token")}
# every route that reads or writes Redis: error redis_unavailable
_UNAVAILABLE = {"503": _error("Redis cannot be reached (redis_unavailable); retry later")}
_TASK_ERRORS = {
    **_AUTH_ERRORS,
    **_UNAVAILABLE,
    "400": _error("malformed task id or parameter"),
    "404": _error("no such task, or a task of another owner"),
}
# a history entry id: a task's entry number (1, 2...), a workflow's stream id
_STREAM_ID = {"type": "string", "pattern": "^([0-9]{1,18}|[0-9]{1,20}-[0-9]{1,20})$",
              "description": "a history entry id: a task's entry number (1, 2...), or a "
                             "workflow's stream id <ms>-<seq>, each part below 2^64"}  # fmt: skip
# (empty: from the start, as EventSource sends no id before its first event)
_RESUME_ID = {"type": "string", "pattern": "^([0-9]{1,18}|[0-9]{1,20}-[0-9]{1,20})?$",
              "description": "the last event's id; empty: from the start"}  # fmt: skip
# ?after= & ?limit= of the history pages (task and workflow)
_PAGE_PARAMS = [
    {"name": "after", "in": "query", "required": False,
     "description": "exclusive entry id to start after (a page's next)", "schema": _STREAM_ID},
    {"name": "limit", "in": "query", "required": False,
     "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}},
]  # fmt: skip
# where an event stream resumes (task and workflow)
_RESUME_PARAMS = [
    {"name": "Last-Event-ID", "in": "header", "required": False, "schema": _RESUME_ID},
    {"name": "last_event_id", "in": "query", "required": False,
     "description": "same as the Last-Event-ID header", "schema": _RESUME_ID},
]  # fmt: skip


def _access_token(why: str) -> dict[str, Any]:
    """The ``?access_token=`` parameter of routes a browser calls without headers."""
    return {"name": "access_token", "in": "query", "required": False,
            "description": f"the bearer token, for {why} (no headers)",
            "schema": {"type": "string"}}  # fmt: skip


def _sse_event(event: str, data: dict[str, Any], *, with_id: bool) -> dict[str, Any]:
    """One kind of event of an event stream, as a parsed event (``event``, ``data``,
    ``id``): the schema OpenAPI documents per event for ``text/event-stream``."""
    props: dict[str, Any] = {
        "event": {"const": event},
        "data": {"type": "string", "contentMediaType": "application/json", "contentSchema": data},
        # (an event without an id line keeps the stream's last id, as EventSource does)
        "id": _STREAM_ID,
    }
    return {"type": "object", "properties": props,
            "required": ["event", "data", *(["id"] if with_id else [])]}  # fmt: skip


def _event_stream(
    what: str, errors: dict[str, Any], events: list[dict[str, Any]]
) -> dict[str, Any]:
    """The responses of an event-stream route; ``events``: the schema of each kind."""
    return {
        "200": {"description": "an event stream (each event as parsed: event, data, id)",
                "content": {"text/event-stream": {"schema": {"anyOf": events}}}},
        "204": {"description": f"the {what} is finished and nothing was missed"},
        **errors,
        "429": _error("too many open event streams for this client"),
    }  # fmt: skip


_TASK_EVENTS = [
    _sse_event("message", {"$ref": _REF.format(name="HistoryEntry")}, with_id=True),
    _sse_event("end", {"$ref": _REF.format(name="StreamEnd")}, with_id=False),
]
_WORKFLOW_EVENTS = [
    _sse_event("message", {"$ref": _REF.format(name="WorkflowEvent")}, with_id=True),
    _sse_event("status", {"$ref": _REF.format(name="WorkflowStatus")}, with_id=False),
    _sse_event("end", {"type": "object"}, with_id=False),
]


_NS_STREAM_ID = {"type": "string", "pattern": "^[0-9]{1,20}-[0-9]{1,20}$",
                 "description": "an events stream entry id <ms>-<seq>"}  # fmt: skip
_NS_RESUME_ID = {"type": "string", "pattern": "^([0-9]{1,20}-[0-9]{1,20})?$",
                 "description": "the last event's id; empty: from now"}  # fmt: skip
_NS_EVENTS = [
    {**_sse_event("message", {"$ref": _REF.format(name="NamespaceEvent")}, with_id=True),
     "properties": {"event": {"const": "message"}, "id": _NS_STREAM_ID, "data": {
         "type": "string", "contentMediaType": "application/json",
         "contentSchema": {"$ref": _REF.format(name="NamespaceEvent")}}}},
    _sse_event("gap", {"type": "object", "properties": {"after": _NS_STREAM_ID}},
               with_id=False),
]  # fmt: skip


def _query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": description,
            "schema": schema}  # fmt: skip


_MS = {"type": "integer", "minimum": 0, "maximum": 10**13 - 1}
_WF_STATES = [s.value for s in WfStatus]
_STATES = [s.value for s in State]  # the table's states (rsjobs.model mirrors fsm.lua)
# the filters of GET /tasks and GET /tasks/export
_FILTERS = [
    _query("state", "only tasks in these states (repeated or comma-separated)",
           {"type": "string", "pattern": f"^({'|'.join(_STATES)})(,({'|'.join(_STATES)}))*$"}),
    _query("queue", "only tasks of these queues (repeated or comma-separated)",
           {"type": "string"}),
    _query("type", "only tasks of this type", {"type": "string", "maxLength": 200}),
    _query("owner", "only this owner's tasks (an owner's token: its own only, 403 for "
           "another)", {"type": "string"}),
    _query("label", "only tasks with this label, key=value (repeated: all of them)",
           {"type": "string"}),
    _query("since", "listed at or after this time (ms; see TaskSummary.listed_at)", _MS),
    _query("until", "listed at or before this time (ms)", _MS),
]  # fmt: skip
_LIST_ERRORS = {
    **_AUTH_ERRORS,
    **_UNAVAILABLE,
    "400": _error("a bad filter (invalid_filter), cursor (invalid_cursor) or limit, or an "
                  "unknown parameter"),
    "403": _error("an owner's token naming another owner"),
}  # fmt: skip
_ADMIN_LIST_ERRORS = {
    **_AUTH_ERRORS,
    **_UNAVAILABLE,
    "400": _error("a bad cursor or limit, or an unknown parameter"),
    "403": _error("not an admin token"),
}


def _list_paths() -> dict[str, Any]:
    return {
        "/tasks/export": {
            "get": {
                "summary": "Every task of a filtered list, as JSON lines (newest first)",
                "description": "The filters of GET /tasks; one TaskSummary per line.",
                "operationId": "exportTasks",
                "parameters": _FILTERS,
                "responses": {
                    "200": {"description": "one TaskSummary (JSON) per line",
                            "content": {"application/x-ndjson": {"schema": {
                                "$ref": _REF.format(name="TaskSummary")}}}},
                    **_LIST_ERRORS,
                },
            }
        },
        "/queues": {
            "get": {
                "summary": "Queues: depth, counts per state, oldest pending, workers",
                "operationId": "listQueues",
                "responses": {"200": {"description": "the queues", "content": _json(
                    "QueueList")}, **_ADMIN_LIST_ERRORS},
            }
        },
        "/queues/{queue}/series": {
            "get": {
                "summary": "A queue's per-minute series: tasks enqueued, started, finished "
                           "per state, and its backlog",
                "description": "From the counters the reaper samples once a minute (the "
                    "last 24 h are kept), oldest first. A point's counts are what moved since "
                    "the sample before it: one minute, or the whole gap when no reaper sampled "
                    "in between; pending and oldest_pending_ms are as they were at its sample. "
                    "Minutes without a sample have no point.",
                "operationId": "queueSeries",
                "parameters": [
                    {"name": "queue", "in": "path", "required": True,
                     "schema": {"type": "string", "pattern": _NAME_PATTERN}},
                    _query("minutes", "how many minutes back", {"type": "integer",
                           "minimum": 1, "maximum": 1440, "default": 60}),
                ],
                "responses": {
                    "200": {"description": "the series", "content": _json("QueueSeries")},
                    **_AUTH_ERRORS, **_UNAVAILABLE,
                    "400": _error("a malformed queue name (invalid_queue), minutes outside "
                                  "1-1440 (invalid_minutes), or an unknown parameter"),
                    "403": _error("not an admin token"),
                    "404": _error("no task was ever submitted to this queue (unknown_queue)"),
                },
            }
        },
        "/queues/{queue}/scale": {
            "get": {
                "summary": "The autoscaling signal: the workers a queue wants now",
                "description": "Its waiting and running tasks, its oldest wait, the mean run "
                    "time of its succeeded attempts, the live workers serving it and their "
                    "slots, and the slots and workers it wants: every running task's, and for "
                    "the waiting ones enough to start each within target_wait_ms (0: a slot "
                    "each); 0 when nothing waits or runs (see rsjobs/scaling.py). For KEDA's "
                    "metrics-api scaler (valueLocation wanted_workers).",
                "operationId": "queueScale",
                "parameters": [
                    {"name": "queue", "in": "path", "required": True,
                     "schema": {"type": "string", "pattern": _NAME_PATTERN}},
                    _query("target_wait_ms", "the longest a waiting task should wait",
                           {"type": "integer", "minimum": 0, "maximum": 9999999999,
                            "default": 0}),
                    _query("slots_per_worker", "a worker's concurrency (default: the mean "
                           "of the live workers serving the queue, 1 when none does)",
                           {"type": "integer", "minimum": 1, "maximum": 999999}),
                ],
                "responses": {
                    "200": {"description": "the figures", "content": _json("ScaleSignal")},
                    **_AUTH_ERRORS, **_UNAVAILABLE,
                    "400": _error("a malformed queue name or number (invalid_scale), or an "
                                  "unknown parameter"),
                    "403": _error("not an admin token"),
                    "404": _error("no task was ever submitted to this queue (unknown_queue)"),
                },
            }
        },
        "/workers": {
            "get": {
                "summary": "The workers registry: alive, late and dead workers",
                "operationId": "listWorkers",
                "responses": {"200": {"description": "the workers", "content": _json(
                    "WorkerList")}, **_ADMIN_LIST_ERRORS},
            }
        },
        "/deadletters": {
            "get": {
                "summary": "The dead-letter stream, newest first, paged",
                "operationId": "listDeadletters",
                "parameters": [
                    _query("cursor", "a page's cursor", {"type": "string",
                           "pattern": "^[0-9]{1,20}-[0-9]{1,20}$"}),
                    _query("limit", "dead letters per page", {"type": "integer",
                           "minimum": 1, "maximum": 1000, "default": 50}),
                ],
                "responses": {"200": {"description": "a page of dead letters",
                                      "content": _json("DeadLetterPage")}, **_ADMIN_LIST_ERRORS},
            }
        },
    }  # fmt: skip


_LIST_TASKS = {
    "summary": "List tasks, newest first, with cursor pagination",
    "description": "Read from the indexes the transition scripts keep (no scan). An "
    "owner's token lists its own tasks only. A page may hold fewer than limit tasks and "
    "still have a cursor (a page looks at a bounded number of index entries).",
    "operationId": "listTasks",
    "parameters": [
        *_FILTERS,
        _query("cursor", "the cursor of the previous page", {"type": "string"}),
        _query("limit", "tasks per page",
               {"type": "integer", "minimum": 1, "maximum": 500, "default": 50}),
    ],
    "responses": {"200": {"description": "a page of tasks", "content": _json("TaskPage")},
                  **_LIST_ERRORS},
}  # fmt: skip


def _paths() -> dict[str, Any]:
    return {
        "/tasks": {
            "get": _LIST_TASKS,
            "post": {
                "summary": "Submit a task",
                "operationId": "submitTask",
                "parameters": [
                    {
                        "name": "Idempotency-Key",
                        "in": "header",
                        "required": False,
                        "description": "a repeat with the same key (per owner) returns the "
                        "first task and writes nothing; same as the body field dedup_key",
                        "schema": {"type": "string", "pattern": "^[\\x21-\\x7e]{1,128}$"},
                    }
                ],
                "requestBody": {"required": True, "content": _json("SubmitRequest")},
                "responses": {
                    "202": {"description": "accepted (or a duplicate)", "content": _json(
                        "SubmitResult"), "headers": {"Location": {
                            "description": "the task's URL", "schema": {"type": "string"}}}},
                    **_AUTH_ERRORS,
                    **_UNAVAILABLE,
                    "400": _error("malformed JSON or Idempotency-Key"),
                    "403": _error("owner set by a non-admin token"),
                    "413": _error("body or payload over the size limit"),
                    "415": _error("body is not application/json"),
                    "422": _error("unknown field, wrong type, value out of range "
                                  "(invalid_body: after names 1-32 distinct task ids), an "
                                  "idempotency key reused with a different request "
                                  "(idempotency_key_reused), a predecessor that is no task "
                                  "of this owner (unknown_predecessor: none and another "
                                  "owner's are answered alike), or one that cannot take "
                                  "another successor: a workflow's task, or one with 1000 "
                                  "successors (predecessor_refused), or a new queue past "
                                  "the owner's quota of queues (queue_quota_exceeded)"),
                },
            }
        },
        "/tasks/{task_id}": {
            "get": {
                "summary": "A task: state, progress, result or error, recent history",
                "operationId": "getTask",
                "parameters": [_TASK_ID, _IF_NONE_MATCH],
                "responses": {**_cached("the task", "TaskView"), **_TASK_ERRORS},
            }
        },
        "/tasks/{task_id}/history": {
            "get": {
                "summary": "The task's history, oldest first, paged",
                "operationId": "getTaskHistory",
                "parameters": [_TASK_ID, *_PAGE_PARAMS],
                "responses": {"200": {"description": "a page of history",
                                      "content": _json("HistoryPage")}, **_TASK_ERRORS},
            }
        },
        "/tasks/{task_id}/webhooks": {
            "get": {
                "summary": "The task's webhook deliveries, every attempt, newest first",
                "operationId": "getTaskWebhooks",
                "parameters": [_TASK_ID],
                "responses": {"200": {"description": "the delivery log",
                                      "content": _json("WebhookLog")}, **_TASK_ERRORS},
            }
        },
        "/tasks/{task_id}/cancel": {
            "post": {
                "summary": "Cancel a task (idempotent)",
                "description": "Cancelling a finished or already cancelled task answers "
                "with its current state and changed=false; the state does not change.",
                "operationId": "cancelTask",
                "parameters": [_TASK_ID],
                "requestBody": {"required": False, "content": _json("CancelRequest")},
                "responses": {
                    "200": {"description": "the state after the call",
                            "content": _json("CancelResult")},
                    **_TASK_ERRORS,
                    "413": _error("body over the size limit"),
                    "415": _error("body is not application/json"),
                    "422": _error("unknown field or wrong type"),
                },
            }
        },
        "/tasks/{task_id}/events": {
            "get": {
                "summary": "Server-sent events: the task's transitions, live",
                "description": "Each event's id is its history entry id and its data a "
                "HistoryEntry; reconnecting with Last-Event-ID resumes exactly after it. "
                "After a terminal state an `end` event is sent and the stream closes; a "
                "reconnect to a finished task with nothing missed answers 204.",
                "operationId": "taskEvents",
                "parameters": [_TASK_ID, *_RESUME_PARAMS, _access_token("EventSource")],
                "responses": _event_stream("task", _TASK_ERRORS, _TASK_EVENTS),
            }
        },
        "/events": {
            "get": {
                "summary": "Server-sent events: every task and workflow event of the "
                           "namespace, live (admin)",
                "description": "Each event's id is the namespace events stream's entry id "
                "and its data a NamespaceEvent. Without Last-Event-ID the stream starts at "
                "its end; with it, it resumes exactly after that entry. When entries after "
                "it were trimmed away, a `gap` event comes first.",
                "operationId": "namespaceEvents",
                "parameters": [
                    {"name": "Last-Event-ID", "in": "header", "required": False,
                     "schema": _NS_RESUME_ID},
                    {"name": "last_event_id", "in": "query", "required": False,
                     "description": "same as the Last-Event-ID header",
                     "schema": _NS_RESUME_ID},
                    _access_token("EventSource"),
                ],
                "responses": {
                    "200": {"description": "an event stream (each event as parsed: event, "
                            "data, id)", "content": {"text/event-stream": {"schema": {
                                "anyOf": _NS_EVENTS}}}},
                    **_AUTH_ERRORS, **_UNAVAILABLE,
                    "400": _error("a malformed Last-Event-ID, or one after the stream's last "
                                  "event (invalid_last_event_id), or an unknown parameter"),
                    "403": _error("not an admin token"),
                    "429": _error("too many open event streams for this client"),
                },
            }
        },
        "/healthz": {
            "get": {
                "summary": "Liveness and Redis reachability (no token needed)",
                "operationId": "healthz",
                "security": [],
                "description": "Reads one key of the namespace (its layout marker) from the "
                "Redis node that serves it: on a Redis Cluster, a node that does not own the "
                "namespace's slot answers MOVED and the app is unavailable, not ok.",
                "responses": {"200": {"description": "Redis answers", "content": _json("Health")},
                              "503": {"description": "Redis does not answer",
                                      "content": _json("Health")}},
            }
        },
        "/livez": {
            "get": {
                "summary": "Liveness: the process answers (no token needed, no Redis read)",
                "operationId": "livez",
                "security": [],
                "description": "For a liveness probe: a Redis outage does not fail it (that "
                "is readiness, /readyz), a process whose event loop is stuck does not answer.",
                "responses": {"200": {"description": "the process answers", "content": {
                    "application/json": {"schema": {"type": "object", "properties": {
                        "status": {"type": "string", "const": "ok"}}, "required": ["status"]}}}}},
            }
        },
        "/readyz": {
            "get": {
                "summary": "Readiness: Redis reachable (no token needed); as /healthz",
                "operationId": "readyz",
                "security": [],
                "responses": {"200": {"description": "Redis answers", "content": _json("Health")},
                              "503": {"description": "Redis does not answer",
                                      "content": _json("Health")}},
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics (admin token unless metrics are public)",
                "operationId": "metrics",
                "responses": {
                    "200": {"description": "Prometheus text format",
                            "content": {"text/plain": {"schema": {"type": "string"}}}},
                    **_AUTH_ERRORS,
                    "403": _error("not an admin token"),
                },
            }
        },
        "/openapi.json": {
            "get": {
                "summary": "This document",
                "operationId": "openapi",
                "security": [],
                "responses": {"200": {"description": "OpenAPI 3.1", "content": {
                    "application/json": {"schema": {"type": "object"}}}}},
            }
        },
        "/dashboard/fsm.json": {
            "get": {
                "summary": "The task state machine as a graph (the dashboard draws it; no token "
                           "needed): every state, one edge per pair of states with the events "
                           "that lead along it",
                "operationId": "fsmGraph",
                "security": [],
                "responses": {"200": {"description": "the graph", "content": _json("FsmGraph")}},
            }
        },
    }  # fmt: skip


_BODY_REFUSALS = {
    "413": _error("body over the size limit"),
    "415": _error("body is not application/json"),
    "422": _error("unknown field, wrong type or value out of range"),
}
_ADMIN_ERRORS = {**_AUTH_ERRORS, **_UNAVAILABLE, "403": _error("not an admin token")}
_LOCATION = {"Location": {"description": "the new task's URL", "schema": {"type": "string"}}}


def _reason_body() -> dict[str, Any]:
    return {"required": False, "content": _json("ActionRequest")}


def _task_action(summary: str, description: str, op: str) -> dict[str, Any]:
    """A task's pause or resume."""
    return {"post": {
        "summary": summary, "description": description, "operationId": op,
        "parameters": [_TASK_ID], "requestBody": _reason_body(),
        "responses": {
            "200": {"description": "the state after the call; changed=false when the task "
                    "already was there", "content": _json("ControlResult")},
            **_TASK_ERRORS, **_BODY_REFUSALS,
            "409": _error("the task's state refuses it (recorded in its history)"),
        },
    }}  # fmt: skip


def _restart(summary: str, description: str, op: str) -> dict[str, Any]:
    """A task's retry or replay."""
    return {"post": {
        "summary": summary, "description": description, "operationId": op,
        "parameters": [_TASK_ID], "requestBody": _reason_body(),
        "responses": {
            "202": {"description": "started over: the new task", "headers": _LOCATION,
                    "content": _json("RetryResult")},
            "200": {"description": "already started over: the task it was started over as "
                    "(created=false; nothing written)", "headers": _LOCATION,
                    "content": _json("RetryResult")},
            **_TASK_ERRORS, **_BODY_REFUSALS,
            "409": _error("refused (recorded in the task's history): the task is not "
                          "finished, not of this action's states, or a workflow's task"),
        },
    }}  # fmt: skip


def _queue_action(summary: str, op: str) -> dict[str, Any]:
    return {"post": {
        "summary": summary, "operationId": op,
        "parameters": [{"name": "queue", "in": "path", "required": True,
                        "schema": {"type": "string", "pattern": _NAME_PATTERN}}],
        "requestBody": _reason_body(),
        "responses": {
            "200": {"description": "the queue's pause flag after the call; changed=false "
                    "for a repeat", "content": _json("QueuePause")},
            **_ADMIN_ERRORS, **_BODY_REFUSALS,
            "400": _error("malformed queue name"),
        },
    }}  # fmt: skip


def _bulk(summary: str, description: str, op: str) -> dict[str, Any]:
    return {"post": {
        "summary": summary, "description": description, "operationId": op,
        "requestBody": {"required": True, "content": _json("BulkRequest")},
        "responses": {
            "200": {"description": "what was done (or, dry_run, would be done)",
                    "content": _json("BulkResult")},
            **_ADMIN_ERRORS, **_BODY_REFUSALS,
            "400": _error("malformed or empty JSON"),
            "422": _error("unknown field, wrong type, value out of range, an empty filter, "
                          "or a state the action does not take"),
        },
    }}  # fmt: skip


_NAME_PATTERN_EARLY = NAME_SCHEMA.removesuffix("\\Z") + "$"  # ECMA-262 spelling
_QUEUE_PARAM = {"name": "queue", "in": "path", "required": True,
                "schema": {"type": "string", "pattern": _NAME_PATTERN_EARLY}}  # fmt: skip
_OWNER_PARAM = {"name": "owner", "in": "path", "required": True,
                "schema": {"type": "string"},
                "description": "1-128 letters, digits or '_.@-'"}  # fmt: skip
_TYPE_PATTERN = TYPE_SCHEMA.removesuffix("\\Z") + "$"  # ECMA-262 spelling
_TYPE_PARAM = {"name": "type", "in": "path", "required": True,
               "schema": {"type": "string", "pattern": _TYPE_PATTERN},
               "description": "the task type: " + TYPE_RULE}  # fmt: skip
_LIMIT_ERRORS = {
    **_ADMIN_ERRORS,
    "400": _error("a malformed queue (invalid_queue), owner (invalid_owner) or type "
                  "(invalid_type), or malformed JSON"),
}  # fmt: skip


def _limit_ops(what: str, params: list[dict[str, Any]], body: str, op: str) -> dict[str, Any]:
    """PUT and DELETE of one limit setting (``what``), answering the queue's limits."""
    answer = {"200": {"description": "the queue's limits after the call",
                      "content": _json("QueueLimits")}}  # fmt: skip
    return {
        "put": {
            "summary": f"Set {what} (admin); workers hold to it from their next start",
            "operationId": f"set{op}", "parameters": params,
            "requestBody": {"required": True, "content": _json(body)},
            "responses": {**answer, **_LIMIT_ERRORS, **_BODY_REFUSALS,
                          "422": _error("unknown field, wrong type, a negative, zero or huge "
                                        "value (nothing written)")},
        },
        "delete": {
            "summary": f"Remove {what} (admin)",
            "operationId": f"clear{op}", "parameters": params,
            "responses": {**answer, **_LIMIT_ERRORS,
                          "404": _error("there is no such setting (no_limit)")},
        },
    }  # fmt: skip


def _limit_paths() -> dict[str, Any]:
    q, o, t = _QUEUE_PARAM, _OWNER_PARAM, _TYPE_PARAM
    owner_limits = _limit_ops("an owner's own concurrency limit on the queue", [q, o],
                              "LimitRequest", "OwnerLimit")  # fmt: skip
    owner_limits["get"] = {
        "summary": "A queue's limits (admin)", "operationId": "getOwnerLimits",
        "parameters": [q, o],
        "responses": {"200": {"description": "the queue's limits",
                              "content": _json("QueueLimits")}, **_LIMIT_ERRORS},
    }  # fmt: skip
    queue_limits = _limit_ops("the queue's default per-owner concurrency limit", [q],
                              "LimitRequest", "QueueLimit")  # fmt: skip
    queue_limits["get"] = {
        "summary": "A queue's limits (admin): per-owner concurrency (the default and the "
                   "owners' own), rates, RUNNING tasks per owner, tasks held back",
        "operationId": "getQueueLimits", "parameters": [q],
        "responses": {"200": {"description": "the queue's limits",
                              "content": _json("QueueLimits")}, **_LIMIT_ERRORS},
    }  # fmt: skip
    return {
        "/limits": {"get": {
            "summary": "The limits of every queue that has one (admin)",
            "operationId": "listLimits",
            "responses": {"200": {"description": "the queues' limits",
                                  "content": _json("LimitList")}, **_ADMIN_ERRORS},
        }},
        "/queues/{queue}/limits": queue_limits,
        "/queues/{queue}/limits/{owner}": owner_limits,
        "/queues/{queue}/rate": _limit_ops("the queue's rate limit", [q], "RateRequest",
                                           "QueueRate"),
        "/queues/{queue}/rate/{type}": _limit_ops("a task type's rate limit on the queue",
                                                  [q, t], "RateRequest", "TypeRate"),
        "/queues/{queue}/rate/{type}/retries": _limit_ops(
            "the rate limit of a task type's retries on the queue", [q, t], "RateRequest",
            "RetryRate"),
    }  # fmt: skip


def _action_paths() -> dict[str, Any]:
    return {
        "/tasks/{task_id}/pause": _task_action(
            "Pause a task (PENDING, SCHEDULED or RUNNING -> PAUSED)",
            "A running handler is told at once. Pausing a PAUSED task changes nothing "
            "(changed=false); a finished task refuses it (409).", "pauseTask"),
        "/tasks/{task_id}/resume": _task_action(
            "Resume a PAUSED task (back on its queue, PENDING)",
            "A task that is not PAUSED refuses it (409).", "resumeTask"),
        "/tasks/{task_id}/retry": _restart(
            "Start a FAILED, TIMED_OUT or CANCELLED task over as a new task",
            "The new task has the old one's type, queue, payload, options and owner; the "
            "two are linked (retry_of, retried_as) and the old one's dedup key names the "
            "new one. The old task stays as it is. A second retry answers the same new "
            "task while it exists.", "retryTask"),
        "/tasks/{task_id}/replay": _restart(
            "Start a SUCCEEDED task over as a new task",
            "As retry, for a task that succeeded.", "replayTask"),
        "/queues/{queue}/pause": _queue_action(
            "Pause a whole queue (admin): workers start nothing of it; running tasks go "
            "on, new ones wait PENDING", "pauseQueue"),
        "/queues/{queue}/resume": _queue_action(
            "Resume a paused queue (admin): its workers read it again at once",
            "resumeQueue"),
        "/queues/{queue}": {"delete": {
            "summary": "Delete an unused queue (admin)",
            "description": "As `rsjobs queue delete`: its streams, counters, per-minute "
            "series, limit bookkeeping, pause record and name go; its finished tasks stay "
            "until their retention ends. Refused (409, nothing deleted) while it holds a "
            "pending, scheduled, running, paused, waiting or deferred task, a registered "
            "worker serves it or a schedule enqueues to it.",
            "operationId": "deleteQueue",
            "parameters": [{"name": "queue", "in": "path", "required": True,
                            "schema": {"type": "string", "pattern": _NAME_PATTERN}}],
            "responses": {
                "200": {"description": "deleted", "content": _json("QueueDeleted")},
                **_ADMIN_ERRORS,
                "400": _error("malformed queue name (invalid_queue)"),
                "404": _error("no such queue (unknown_queue)"),
                "409": _error("the queue is in use (queue_in_use): the detail says how"),
            },
        }},
        "/tasks/bulk/cancel": _bulk(
            "Cancel the unfinished tasks a filter selects (admin)",
            "At most `limit` tasks, the oldest first, each cancelled as by its own cancel; "
            "`dry_run` counts and lists them and changes nothing. Selection scans the "
            "namespace's tasks.", "bulkCancel"),
        "/tasks/bulk/retry": _bulk(
            "Retry the FAILED, TIMED_OUT and CANCELLED tasks a filter selects (admin)",
            "Tasks already retried and workflows' tasks are left out; at most `limit`, the "
            "oldest first, each retried as by its own retry; `dry_run` counts and lists "
            "them.", "bulkRetry"),
        "/deadletters/{task_id}/requeue": {"post": {
            "summary": "Requeue a dead-lettered task as a new task (its clone)",
            "description": "As `rsjobs deadletter requeue`: a second requeue answers the "
            "same clone while it exists.",
            "operationId": "requeueDeadLetter",
            "parameters": [_TASK_ID], "requestBody": _reason_body(),
            "responses": {
                "202": {"description": "requeued: the clone", "headers": _LOCATION,
                        "content": _json("RequeueResult")},
                "200": {"description": "already requeued: that clone (created=false)",
                        "headers": _LOCATION, "content": _json("RequeueResult")},
                **_TASK_ERRORS, **_BODY_REFUSALS,
                "409": _error("the task was not dead-lettered, or its data is too damaged "
                              "to clone"),
            },
        }},
    }  # fmt: skip


_WF_ID = {
    "name": "wf_id",
    "in": "path",
    "required": True,
    "description": "the workflow id: 32 lowercase hexadecimal characters",
    "schema": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
}
_WF_ERRORS = {
    **_AUTH_ERRORS,
    **_UNAVAILABLE,
    "400": _error("malformed workflow id or parameter"),
    "404": _error("no such workflow, or a workflow of another owner"),
}
_BODY_ERRORS = {
    "413": _error("body over the size limit"),
    "415": _error("body is not application/json"),
}
_FILE_MEDIA = [*sorted(set(MEDIA_TYPES.values())), "application/octet-stream"]
_NAME_PATTERN = NAME_SCHEMA.removesuffix("\\Z") + "$"  # ECMA-262 spelling


def _action_body_description() -> str:
    pairs = ", ".join(f"{a}: {k.__name__}" for a, k in ACTION_BODIES.items())
    return (
        "The body depends on the action (" + pairs + "); it is optional except for "
        "regenerate. Unknown fields are refused. confirm, regenerate and publish accept the "
        "version (and confirm the stage) the user was looking at: a decision about a "
        "version or stage the workflow has left is refused (409)."
    )


def _workflow_paths() -> dict[str, Any]:
    return {
        "/workflows": {
            "post": {
                "summary": "Start a workflow of a definition the server knows",
                "operationId": "startWorkflow",
                "parameters": [
                    {
                        "name": "Idempotency-Key",
                        "in": "header",
                        "required": False,
                        "description": "names one workflow per owner: a repeat with the "
                        "same key answers 200 with that workflow and changed=false",
                        "schema": {"type": "string", "pattern": "^[\\x21-\\x7e]{1,128}$"},
                    }
                ],
                "requestBody": {"required": True, "content": _json("StartBody")},
                "responses": {
                    "202": {"description": "started", "content": _json("ActionResult"),
                            "headers": {"Location": {"description": "the workflow's URL",
                                                     "schema": {"type": "string"}}}},
                    "200": {"description": "the Idempotency-Key names an existing workflow "
                            "(changed=false)", "content": _json("ActionResult")},
                    **_AUTH_ERRORS,
                    **_UNAVAILABLE,
                    "400": _error("malformed JSON, empty body or bad Idempotency-Key"),
                    "403": _error("owner set by a non-admin token"),
                    **_BODY_ERRORS,
                    "413": _error("body or input over the size limit"),
                    "422": _error("unknown field or wrong type (invalid_body), unknown "
                                  "definition (unknown_definition), input the definition "
                                  "refuses (invalid_input), or an idempotency key reused "
                                  "with another definition or input"),
                },
            },
            "get": {
                "summary": "List workflows, newest first, with cursor pagination",
                "description": "Read from the workflow index (every workflow id by creation "
                "time; no scan). An owner's token lists its own workflows only. A page may "
                "hold fewer than limit workflows and still have a cursor (a page looks at a "
                "bounded number of index entries).",
                "operationId": "listWorkflows",
                "parameters": [
                    _query("state", "only workflows in this state", {"type": "string",
                           "enum": _WF_STATES}),
                    _query("name", "only workflows of this definition", {"type": "string",
                           "pattern": _NAME_PATTERN}),
                    _query("owner", "only this owner's workflows (an owner's token: its own "
                           "only, 403 for another)", {"type": "string"}),
                    _query("cursor", "the cursor of the previous page", {"type": "string"}),
                    _query("limit", "workflows per page", {"type": "integer", "minimum": 1,
                           "maximum": 200, "default": 50}),
                ],
                "responses": {
                    "200": {"description": "a page of workflows",
                            "content": _json("WorkflowPage")},
                    **_LIST_ERRORS,
                },
            },
        },
        "/workflows/{wf_id}": {
            "get": {
                "summary": "The workflow's status document",
                "description": "Status, stage, progress, version, the current version's "
                "assets, the current stage's tasks and a sentence for people.",
                "operationId": "getWorkflow",
                "parameters": [_WF_ID, _IF_NONE_MATCH],
                "responses": {**_cached("the status document", "WorkflowStatus"),
                              **_WF_ERRORS},
            }
        },
        "/workflows/{wf_id}/history": {
            "get": {
                "summary": "The workflow's history, oldest first, paged",
                "description": "Transitions, SPAWN and ASSET notes, and refused actions "
                "(rejected=true).",
                "operationId": "getWorkflowHistory",
                "parameters": [_WF_ID, *_PAGE_PARAMS],
                "responses": {"200": {"description": "a page of history",
                                      "content": _json("EventsPage")}, **_WF_ERRORS},
            }
        },
        "/workflows/{wf_id}/events": {
            "get": {
                "summary": "Server-sent events: the workflow's history and status, live",
                "description": "Each history entry is one event whose id is its entry id "
                "and whose data is a WorkflowEvent; reconnecting with Last-Event-ID resumes "
                "exactly after it. `event: status` events (no id) carry the WorkflowStatus "
                "document: on connect, after each batch of entries and when progress moves. "
                "After the entry that makes the workflow terminal, a last status and an "
                "`end` event are sent and the stream closes; a reconnect to a finished "
                "workflow with nothing missed answers 204.",
                "operationId": "workflowEvents",
                "parameters": [_WF_ID, *_RESUME_PARAMS, _access_token("EventSource")],
                "responses": _event_stream("workflow", _WF_ERRORS, _WORKFLOW_EVENTS),
            }
        },
        "/workflows/{wf_id}/{action}": {
            "post": {
                "summary": "Act on a workflow: confirm, regenerate, retry, publish, cancel",
                "description": _action_body_description(),
                "operationId": "actOnWorkflow",
                "parameters": [
                    _WF_ID,
                    {"name": "action", "in": "path", "required": True,
                     "schema": {"type": "string", "enum": list(ACTION_BODIES)}},
                ],
                "requestBody": {
                    "required": False,
                    "content": {"application/json": {"schema": {"anyOf": [
                        {"$ref": _REF.format(name=k.__name__)}
                        for k in ACTION_BODIES.values()]}}},
                    "x-rsjobs-action-bodies": {
                        a: _REF.format(name=k.__name__) for a, k in ACTION_BODIES.items()},
                },
                "responses": {
                    "200": {"description": "the status after the action; changed=false when "
                            "a repeated publish or cancel changed nothing",
                            "content": _json("ActionResult")},
                    **_WF_ERRORS,
                    "400": _error("malformed workflow id or JSON"),
                    "404": _error("no such workflow (or another owner's), or no such action"),
                    "409": _error("the workflow's state refuses the action (recorded in its "
                                  "history); the detail says why"),
                    **_BODY_ERRORS,
                    "422": _error("unknown field, wrong type, or a stage the plan does not "
                                  "have"),
                },
            }
        },
        "/workflows/{wf_id}/plan": {
            "get": {
                "summary": "The stages the workflow was started with: labels, gates, items",
                "operationId": "getWorkflowPlan",
                "parameters": [_WF_ID],
                "responses": {"200": {"description": "the plan",
                                      "content": _json("WorkflowPlan")}, **_WF_ERRORS},
            }
        },
        "/workflows/{wf_id}/assets/{version}/{stage}/{item}": {
            "get": {
                "summary": "The file of one recorded asset (when an asset root is configured)",
                "description": "Serves the file an asset of the workflow refers to, looked "
                "up by its slot (version, stage, item; no path comes from the client), and "
                "only if that file, resolved, is a regular file under the server's asset "
                "root. Sent with X-Content-Type-Options: nosniff and a sandboxing "
                "Content-Security-Policy; types other than images, video, audio, JSON and "
                "text are sent as attachments.",
                "operationId": "getWorkflowAsset",
                "parameters": [
                    _WF_ID,
                    {"name": "version", "in": "path", "required": True,
                     "schema": {"type": "integer", "minimum": 1}},
                    {"name": "stage", "in": "path", "required": True,
                     "schema": {"type": "string", "pattern": _NAME_PATTERN}},
                    {"name": "item", "in": "path", "required": True,
                     "schema": {"type": "string", "pattern": _NAME_PATTERN}},
                    _access_token("<img src>"),
                ],
                "responses": {
                    "200": {"description": "the file",
                            "content": {m: {"schema": {} if m == "application/json" else
                                            {"type": "string", "format": "binary"}}
                                        for m in _FILE_MEDIA}},
                    **_WF_ERRORS,
                    "400": _error("malformed workflow id, version, stage or item"),
                    "403": _error("the asset's file is outside the asset root"),
                    "404": _error("no such workflow (or another owner's), no such asset, no "
                                  "such file, or no asset root configured"),
                },
            }
        },
    }  # fmt: skip


_CALLBACK_ERRORS = {
    **_UNAVAILABLE,
    **_BODY_REFUSALS,
    "400": _error("malformed or empty JSON, an unknown parameter, or a malformed provider "
                  "or external id"),
    "401": _error("a forged, altered, expired or missing signature (bad_signature): "
                  "nothing is written"),
    "404": _error("no task waits on that token or outside job, or callbacks are not "
                  "enabled (no callback secret)"),
    "409": _error("refused (recorded in the task's history): the attempt is not waiting "
                  "any more (finished, timed out past its longest wait, cancelled, "
                  "superseded by a regenerate) or is not the current one"),
    "422": _error("unknown field, wrong type or value out of range, or a charge that "
                  "cannot be recorded (invalid_charges): nothing is written"),
}  # fmt: skip


def _callback(summary: str, description: str, op: str, params: list[Any]) -> dict[str, Any]:
    return {"post": {
        "summary": summary, "description": description, "operationId": op,
        "security": [], "parameters": params,
        "requestBody": {"required": True, "content": _json("CallbackRequest")},
        "responses": {
            "200": {"description": "the task after the result (changed=false: a repeat of "
                    "the result that ended the wait; nothing written)",
                    "content": _json("CallbackResult")},
            **_CALLBACK_ERRORS,
        },
    }}  # fmt: skip


def _callback_paths() -> dict[str, Any]:
    return {
        "/callbacks/{token}": _callback(
            "A provider's result for a deferred attempt, by its callback token",
            "The token (ctx.callback_url() in the handler) names the task and attempt, "
            "signed by the worker with the callback secret; no bearer token.",
            "callbackByToken",
            [{"name": "token", "in": "path", "required": True,
              "schema": {"type": "string", "maxLength": 1024}}]),
        "/callbacks/external/{provider}/{external_id}": _callback(
            "A provider's result for a deferred attempt, by the outside job's id",
            "The request is signed under the callback secret: X-Rsjobs-Signature: "
            "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, \"<t>.<provider>/<external_id>."
            "<body>\")> (several v1 values allowed while a secret rotates); no bearer token. "
            "A signature for another job, a timestamp further than the server's tolerance "
            "(default 300 s) either way, or the old sha256=<hex> form is a 401, nothing "
            "written.",
            "callbackByExternalId",
            [{"name": "provider", "in": "path", "required": True,
              "schema": {"type": "string", "pattern": _NAME_PATTERN}},
             {"name": "external_id", "in": "path", "required": True,
              "schema": {"type": "string", "pattern": "^[A-Za-z0-9_.:/-]{1,200}$"}},
             {"name": "X-Rsjobs-Signature", "in": "header", "required": True,
              "schema": {"type": "string", "maxLength": 512,
                         "pattern": "^t=[0-9]{1,12}(,v1=[0-9a-f]{64}){1,4}$"}}]),
    }  # fmt: skip


_DIMENSION = {"type": "string", "enum": list(DIMENSIONS)}


def _cost_paths() -> dict[str, Any]:
    totals = (
        "Totals are per category (ok, and the waste kinds failed, reclaimed, "
        "timed_out, cancelled, superseded), in all and of the waste; each maps a unit to "
        "its sum: attempts, run_ms (worker time), wait_ms (deferred wait) and each "
        "charge unit (a number of the unit, exact to the millionth). See docs/costs.md."
    )
    return {
        "/tasks/{task_id}/cost": {
            "get": {
                "summary": "What a task cost: each attempt and their sums",
                "description": "Each attempt's run time, deferred wait, charges and category, "
                "read from the task's history. " + totals,
                "operationId": "getTaskCost",
                "parameters": [_TASK_ID],
                "responses": {"200": {"description": "the task's costs",
                                      "content": _json("TaskCost")}, **_TASK_ERRORS},
            }
        },
        "/workflows/{wf_id}/cost": {
            "get": {
                "summary": "What a workflow cost: its tasks of every version and retry",
                "description": "Summed in all, per stage and per task; a regenerate's "
                "replaced work counts as superseded. " + totals,
                "operationId": "getWorkflowCost",
                "parameters": [_WF_ID],
                "responses": {"200": {"description": "the workflow's costs",
                                      "content": _json("WorkflowCost")}, **_WF_ERRORS},
            }
        },
        "/costs": {
            "get": {
                "summary": "The namespace's cost totals along one dimension",
                "description": "A row per queue, type, owner or stage (\"<definition>/"
                "<stage>\"), from the costs hash (cumulative since it was last reset). An "
                "owner's token reads its own owner's totals only (by=owner). " + totals,
                "operationId": "getCosts",
                "parameters": [
                    _query("by", "the dimension (default owner)", _DIMENSION),
                    _query("name", "one name of the dimension only",
                           {"type": "string", "minLength": 1, "maxLength": 300}),
                ],
                "responses": {
                    "200": {"description": "the totals", "content": _json("CostReport")},
                    **_AUTH_ERRORS,
                    **_UNAVAILABLE,
                    "400": _error("an unknown dimension, a bad name or an unknown parameter"),
                    "403": _error("an owner's token asking for another dimension or owner"),
                },
            }
        },
    }  # fmt: skip


def _narrow(components: dict[str, Any]) -> dict[str, Any]:
    for (struct, field), schema in _NARROWED.items():
        props = components[struct]["properties"]
        # only ever narrows an untyped field: a Struct that types it itself wins
        if props[field] not in ({}, {"type": "array"}):
            raise AssertionError(f"{struct}.{field} is typed now; drop it from _NARROWED")
        props[field] = schema
    return components


def _ecma(node: Any) -> Any:
    """``node`` with the Structs' Python patterns in ECMA-262, JSON Schema's dialect: the
    closing ``\\Z`` (the end of the string) is spelled ``$``, which is the end of the
    string there (Python's ``$`` also matches before a final newline)."""
    if isinstance(node, dict):
        out = {k: _ecma(v) for k, v in node.items()}
        pattern = out.get("pattern")
        if isinstance(pattern, str) and pattern.endswith("\\Z"):
            out["pattern"] = pattern[:-2] + "$"
        return out
    if isinstance(node, list):
        return [_ecma(v) for v in node]
    return node


def openapi_for(root_path: str) -> dict[str, Any]:
    """The document as served by an app mounted at ``root_path`` (ASGI's: where a proxy
    or a parent app put it): ``servers`` names that prefix, so the paths resolve under
    it; at the root the document has no ``servers`` (the default is ``/``)."""
    root = root_path.rstrip("/")
    doc = openapi_document()
    return {**doc, "servers": [{"url": root}]} if root else doc


@cache
def openapi_document() -> dict[str, Any]:
    _, components = msgspec.json.schema_components(_STRUCTS, ref_template=_REF)
    components = _ecma(components)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "rsjobs",
            "version": __version__,
            "description": "Submit, follow and cancel rsjobs tasks; start, follow and act "
            "on workflows. See docs/web.md and docs/workflows.md.",
        },
        "paths": {
            **_paths(),
            **_list_paths(),
            **_action_paths(),
            **_limit_paths(),
            **_workflow_paths(),
            **_callback_paths(),
            **_cost_paths(),
        },
        "components": {
            "schemas": _narrow(components),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }
