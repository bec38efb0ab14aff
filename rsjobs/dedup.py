"""When a repeated submit with a dedup key is the same request: the one rule the client,
the bulk submit and the HTTP API (``Idempotency-Key``) share.

A repeat names the same work when its type, queue and payload are those of the task the
key names; the options (attempts, timeouts, delays) are not compared, so a retrying
caller that recomputes a delay still gets its task back. Payloads are compared decoded,
as stored: JSON has no tuples, so ``(1, 2)`` and ``[1, 2]`` are the same payload.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .errors import DedupKeyReused
from .schemas import TaskInfo

__all__ = ["Submitted", "check_batch", "check_repeat", "same_request"]

#: what a repeat must share with the first submit: type, queue, decoded payload
Submitted = tuple[str, str, Any]


def same_request(info: TaskInfo, type: str, queue: str, payload: Any) -> bool:
    """Whether a submit of ``type``/``queue``/``payload`` (decoded JSON) repeats ``info``."""
    return (info.type, info.queue, info.payload) == (type, queue, payload)


def check_repeat(info: TaskInfo, dedup_key: str, type: str, queue: str, payload: Any) -> None:
    """Raise :class:`DedupKeyReused` unless the submit repeats ``info``."""
    if not same_request(info, type, queue, payload):
        raise DedupKeyReused(dedup_key, info.id)


def check_batch(requests: Sequence[tuple[str, Submitted]]) -> None:
    """Raise :class:`DedupKeyReused` when two requests of one batch (``(dedup key,
    submitted)``) share a key but are not the same request."""
    first: dict[str, Submitted] = {}
    for key, submitted in requests:
        if first.setdefault(key, submitted) != submitted:
            raise DedupKeyReused(key, None)
