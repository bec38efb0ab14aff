"""How the rsjobs processes log: text (the default) or one JSON object per line.

``--log-format json`` (env ``RSJOBS_LOG_FORMAT``) makes every line of the worker, the
reaper, the web app and ``rsjobs dev`` one JSON object a log pipeline parses without
rules: ``ts`` (UTC, ISO 8601, milliseconds), ``level``, ``logger``, ``message`` (and
``exc`` with the traceback when there is one). Lines logged while a task's handler runs
(the worker's and the handler's own, async or in its thread) also carry ``task_id``,
``task_type``, ``queue`` and ``attempt``: the worker binds them with :func:`task_scope`,
a context variable, so no call site has to pass them. A call site may also pass them as
``extra=``. A line whose record carries structured fields (``extra={FIELDS: {...}}``, the
reaper's lines) has them as members, its ``event`` as the message, instead of their text.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import msgspec

__all__ = [
    "FIELDS",
    "FORMATS",
    "JsonFormatter",
    "TaskFields",
    "bind_task",
    "setup_logging",
    "task_scope",
    "uvicorn_log_config",
]

#: the ``extra`` key of a record's structured fields
FIELDS = "rsjobs_fields"
#: the values of ``--log-format``
FORMATS = ("text", "json")
#: the task fields a line may carry, in their order on the line
_TASK_KEYS = ("task_id", "task_type", "queue", "attempt")


class TaskFields(NamedTuple):
    task_id: str
    task_type: str
    queue: str
    attempt: int


_current: contextvars.ContextVar[TaskFields | None] = contextvars.ContextVar(
    "rsjobs_log_task", default=None
)


@contextmanager
def task_scope(fields: TaskFields) -> Iterator[None]:
    """Lines logged in this context (and in threads started with a copy of it) name the
    task."""
    token = _current.set(fields)
    try:
        yield
    finally:
        _current.reset(token)


def bind_task(fields: TaskFields) -> None:
    """:func:`task_scope` for the rest of the current asyncio Task (each Task runs in a
    copy of its creator's context, so the binding ends with it)."""
    _current.set(fields)


def current_task() -> TaskFields | None:
    return _current.get()


_encoder = msgspec.json.Encoder()


class JsonFormatter(logging.Formatter):
    """One JSON object per record; never raises on an odd record (a value JSON cannot
    carry is written as its ``repr``)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": _iso(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, FIELDS, None)
        if isinstance(fields, dict):
            out["message"] = str(fields.get("event", out["message"]))
            out.update((k, v) for k, v in fields.items() if k not in out and k != "event")
        bound = _current.get()
        for i, key in enumerate(_TASK_KEYS):
            value = getattr(record, key, None)
            if value is None and bound is not None:
                value = bound[i]
            if value is not None:
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        try:
            return _encoder.encode(out).decode()
        except (TypeError, msgspec.EncodeError):
            return _encoder.encode({k: _plain(v) for k, v in out.items()}).decode()


def _plain(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool) else repr(value)


def _iso(created: float) -> str:
    whole = int(created)
    ms = int((created - whole) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{ms:03d}Z"


_json = False


def setup_logging(level: str | int, fmt: str, text_format: str) -> None:
    """The root logger's handler (stderr): ``text_format`` for ``text``, JSON lines for
    ``json``. As ``logging.basicConfig``: nothing changes when the root logger already has
    a handler (an application that configured logging itself keeps its own)."""
    global _json
    _json = fmt == "json"
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if _json else logging.Formatter(text_format))
    logging.basicConfig(level=level, handlers=[handler])


def uvicorn_log_config() -> dict[str, Any] | None:
    """What ``uvicorn.Config(log_config=...)`` takes: its own text formatters, or with
    JSON lines none (its loggers then propagate to the root handler)."""
    if _json:
        return None
    from uvicorn.config import LOGGING_CONFIG

    return LOGGING_CONFIG
