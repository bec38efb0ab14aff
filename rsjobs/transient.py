"""Which Redis errors are passing ones: the one policy every rsjobs process follows.

A passing (transient) error is one that a retry after a short backoff can outlive: the
connection dropped or timed out, the server is loading its data after a restart, or the
node stopped being the primary in a failover (``READONLY`` writes, ``UNBLOCKED`` blocking
reads, ``MASTERDOWN``, ``NOREPLICAS``, and the cluster's ``TRYAGAIN`` / ``CLUSTERDOWN``).
Workers, reapers, drivers and the web app treat them alike: log once, back off, go on. Any
other Redis error is a bug or bad data and is not retried blindly.

redis-py turns most of these replies into exception classes; ``UNBLOCKED`` and
``NOREPLICAS`` arrive as a plain ``ResponseError``. :func:`as_unavailable` gives every
transient error the one type callers catch, :class:`rsjobs.RedisUnavailable` (an
``OSError``, so ``except TRANSIENT`` covers it), with the original chained as its cause.
"""

from __future__ import annotations

from redis.exceptions import ClusterDownError, ReadOnlyError, ResponseError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .errors import RedisUnavailable

__all__ = ["TRANSIENT", "TRANSIENT_REPLIES", "as_unavailable", "is_failover", "is_transient"]

#: Exception types that are always transient (OSError covers RedisUnavailable, socket
#: errors and asyncio's TimeoutError; redis-py's BusyLoadingError is a ConnectionError,
#: its MasterDownError a ClusterDownError).
TRANSIENT: tuple[type[BaseException], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    ReadOnlyError,
    ClusterDownError,
    TryAgainError,
    OSError,
)

#: Error reply codes (the first word of the reply) that mean "try again soon".
TRANSIENT_REPLIES = frozenset(
    {"UNBLOCKED", "READONLY", "LOADING", "MASTERDOWN", "NOREPLICAS", "TRYAGAIN", "CLUSTERDOWN"}
)


def _code(exc: BaseException) -> str:
    return str(exc).split(" ", 1)[0]


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a passing Redis error (see the module docstring)."""
    if isinstance(exc, TRANSIENT):
        return True
    return isinstance(exc, ResponseError) and _code(exc) in TRANSIENT_REPLIES


def is_failover(exc: BaseException) -> bool:
    """Whether ``exc`` (or its cause) says the node is no longer the primary: connections
    to it should be dropped, so that the next ones find the new primary."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ReadOnlyError | ClusterDownError) or (
            isinstance(seen, ResponseError) and _code(seen) in ("READONLY", "UNBLOCKED")
        ):
            return True
        seen = seen.__cause__
    return False


def as_unavailable(exc: BaseException, what: str = "redis") -> RedisUnavailable:
    """A :class:`RedisUnavailable` for the transient ``exc`` (raise it ``from exc``)."""
    if isinstance(exc, RedisUnavailable):
        return exc
    return RedisUnavailable(f"{what} unavailable: {type(exc).__name__}: {exc}")
