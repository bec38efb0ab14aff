"""Errors after which the same call may get another answer: the harness retries them.

A restart, a broken connection, a frozen server, or (durable mode) an enqueue Redis took
but could not confirm on a replica in time (``rsjobs.NotReplicated``): its outcome is
unknown, exactly like a reply lost in a restart.
"""

from __future__ import annotations

import httpx
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

import rsjobs

__all__ = ["TRANSIENT", "UNKNOWN_OUTCOME"]


def _not_replicated() -> tuple[type[BaseException], ...]:
    found = getattr(rsjobs, "NotReplicated", None)
    if isinstance(found, type) and issubclass(found, BaseException):
        return (found,)
    return ()


#: the outcome of the call is unknown; it may be retried
UNKNOWN_OUTCOME: tuple[type[BaseException], ...] = _not_replicated()
TRANSIENT: tuple[type[BaseException], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    OSError,
    httpx.TransportError,
    *UNKNOWN_OUTCOME,
)
