"""The one parser of the ids and positions a caller gives: task and workflow ids, stream
ids (a history page's ``after``, an event stream's ``Last-Event-ID``) and stream entry ids
(a dead-letter page's cursor).

Every route, Client call and CLI command that takes one checks it here, before anything
is read: a malformed one is :class:`rsjobs.ConfigError` (HTTP 400, the CLI's exit 2),
never a Redis error reported as an outage. A stream id is ``<ms>-<seq>``, two ASCII-digit
parts each below 2^64 (what Redis accepts); a task's history entry id is ``<n>`` (read as
``0-<n>``). An *entry* id names an entry a stream held: above ``0-0``, which no entry is.
(A task list's cursor is sealed text: :mod:`rsjobs.store.seal`.)
"""

from __future__ import annotations

import re

from .errors import ConfigError

__all__ = [
    "exclusive",
    "parse_entry_id",
    "parse_id",
    "validate_task_id",
    "validate_workflow_id",
]

_ID = re.compile(r"([0-9]{1,20})-([0-9]{1,20})")  # [0-9], not \d: ASCII digits only
_NUMBER = re.compile(r"[0-9]{1,18}")  # a task's history entry: its number
_HEX = frozenset("0123456789abcdef")
#: each part of a stream id is an unsigned 64-bit integer
ID_LIMIT = 1 << 64
_LAST = (ID_LIMIT - 1, ID_LIMIT - 1)


def parse_id(stream_id: str) -> tuple[int, int]:
    """A stream id ``<ms>-<seq>`` (two ASCII-digit parts, each below 2^64, as Redis
    requires), or a task's history entry id ``<n>`` (as ``0-<n>``), as a sortable pair;
    raises ValueError if malformed."""
    if not isinstance(stream_id, str):
        raise ValueError(f"invalid stream id {stream_id!r}")
    if _NUMBER.fullmatch(stream_id):
        return 0, int(stream_id)
    m = _ID.fullmatch(stream_id)
    if m is None or int(m[1]) >= ID_LIMIT or int(m[2]) >= ID_LIMIT:
        raise ValueError(f"invalid stream id {stream_id!r}")
    return int(m[1]), int(m[2])


def parse_entry_id(value: object, what: str = "cursor") -> str:
    """``value`` if it is the id of a stream entry (``<ms>-<seq>``, each part below 2^64,
    above ``0-0``), else :class:`rsjobs.ConfigError` naming ``what``."""
    m = _ID.fullmatch(value) if isinstance(value, str) else None
    pair = (int(m[1]), int(m[2])) if m is not None else (0, 0)
    if pair == (0, 0) or pair[0] >= ID_LIMIT or pair[1] >= ID_LIMIT:
        raise ConfigError(
            f"invalid {what}: an entry id a page returned (<ms>-<seq>, each below 2^64)"
        )
    assert isinstance(value, str)
    return value


def exclusive(stream_id: str) -> str | None:
    """The XRANGE start of the entries after ``stream_id`` (a valid id), or None when no
    entry can follow it: Redis refuses an exclusive start at the largest id."""
    return None if parse_id(stream_id) == _LAST else f"({stream_id}"


def _hex_id(value: object, what: str) -> str:
    if not isinstance(value, str) or len(value) != 32 or not set(value) <= _HEX:
        raise ConfigError(f"invalid {what} {value!r}: expected 32 lowercase hex characters")
    return value


def validate_task_id(task_id: str) -> str:
    """Return ``task_id`` if it has the shape of an rsjobs id (32 lowercase hex), else raise
    :class:`rsjobs.ConfigError`."""
    return _hex_id(task_id, "task id")


def validate_workflow_id(wf_id: str) -> str:
    """Return ``wf_id`` if it has the shape of a workflow id (32 lowercase hex), else raise
    :class:`rsjobs.ConfigError`."""
    return _hex_id(wf_id, "workflow id")
