"""The OpenAPI 3.1 document of the HTTP API (``GET /openapi.json``).

Paths are written by hand; every body schema is generated from the msgspec Structs the
handlers decode and encode (``schemas.py``), so the document cannot drift from the code.
A test checks that the documented paths and methods are exactly the routes of the app.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import msgspec

from .. import __version__
from ..schemas import HistoryEntry
from .schemas import (
    CancelRequest,
    CancelResult,
    ErrorBody,
    HistoryPage,
    SubmitRequest,
    SubmitResult,
    TaskView,
)

__all__ = ["openapi_document"]

_REF = "#/components/schemas/{name}"
_STRUCTS = (
    SubmitRequest,
    SubmitResult,
    CancelRequest,
    CancelResult,
    TaskView,
    HistoryEntry,
    HistoryPage,
    ErrorBody,
)


def _json(name: str) -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": _REF.format(name=name)}}}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": _json("ErrorBody")}


_TASK_ID = {
    "name": "task_id",
    "in": "path",
    "required": True,
    "description": "the task id: 32 lowercase hexadecimal characters",
    "schema": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
}
_AUTH_ERRORS = {"401": _error("no token, or an unknown token")}
_TASK_ERRORS = {
    **_AUTH_ERRORS,
    "400": _error("malformed task id or parameter"),
    "404": _error("no such task, or a task of another owner"),
}


def _paths() -> dict[str, Any]:
    return {
        "/tasks": {
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
                    "400": _error("malformed JSON or Idempotency-Key"),
                    "403": _error("owner set by a non-admin token"),
                    "413": _error("body or payload over the size limit"),
                    "415": _error("body is not application/json"),
                    "422": _error("unknown field, wrong type, value out of range, or an "
                                  "idempotency key reused with a different request"),
                },
            }
        },
        "/tasks/{task_id}": {
            "get": {
                "summary": "A task: state, progress, result or error, recent history",
                "operationId": "getTask",
                "parameters": [_TASK_ID],
                "responses": {"200": {"description": "the task", "content": _json("TaskView")},
                              **_TASK_ERRORS},
            }
        },
        "/tasks/{task_id}/history": {
            "get": {
                "summary": "The task's history, oldest first, paged",
                "operationId": "getTaskHistory",
                "parameters": [
                    _TASK_ID,
                    {"name": "after", "in": "query", "required": False,
                     "description": "exclusive history id to start after (a page's next)",
                     "schema": {"type": "string", "pattern": "^[0-9]+-[0-9]+$"}},
                    {"name": "limit", "in": "query", "required": False,
                     "schema": {"type": "integer", "minimum": 1, "maximum": 1000,
                                "default": 100}},
                ],
                "responses": {"200": {"description": "a page of history",
                                      "content": _json("HistoryPage")}, **_TASK_ERRORS},
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
                "parameters": [
                    _TASK_ID,
                    {"name": "Last-Event-ID", "in": "header", "required": False,
                     "schema": {"type": "string", "pattern": "^[0-9]+-[0-9]+$"}},
                    {"name": "last_event_id", "in": "query", "required": False,
                     "description": "same as the Last-Event-ID header",
                     "schema": {"type": "string", "pattern": "^[0-9]+-[0-9]+$"}},
                    {"name": "access_token", "in": "query", "required": False,
                     "description": "the bearer token, for EventSource (no headers)",
                     "schema": {"type": "string"}},
                ],
                "responses": {
                    "200": {"description": "an event stream",
                            "content": {"text/event-stream": {"schema": {"type": "string"}}}},
                    "204": {"description": "the task is finished and nothing was missed"},
                    **_TASK_ERRORS,
                    "429": _error("too many open event streams for this client"),
                },
            }
        },
        "/healthz": {
            "get": {
                "summary": "Liveness and Redis reachability (no token needed)",
                "operationId": "healthz",
                "security": [],
                "responses": {"200": {"description": "Redis answers"},
                              "503": {"description": "Redis does not answer"}},
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
                "responses": {"200": {"description": "OpenAPI 3.1"}},
            }
        },
    }  # fmt: skip


@cache
def openapi_document() -> dict[str, Any]:
    _, components = msgspec.json.schema_components(_STRUCTS, ref_template=_REF)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "rsjobs",
            "version": __version__,
            "description": "Submit, follow and cancel rsjobs tasks. See docs/web.md.",
        },
        "paths": _paths(),
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }
