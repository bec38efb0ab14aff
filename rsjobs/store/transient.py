"""Which Redis errors are passing ones, and the one place where Redis errors become
rsjobs's: the policy every rsjobs process follows.

A passing (transient) error is one that a retry after a short backoff can outlive: the
connection dropped or timed out, the server is loading its data after a restart, or the
node stopped being the primary in a failover (``READONLY`` writes, ``UNBLOCKED`` blocking
reads, ``MASTERDOWN``, ``NOREPLICAS``), or a Redis Cluster moved the slot or is settling
(``MOVED`` / ``ASK`` still answered after the cluster client followed one,
``TRYAGAIN``, ``CLUSTERDOWN``; redis-py's own cluster errors too). Workers, reapers,
drivers, hook runners, the web app and the clients treat them alike: log once, back off,
go on. Any other Redis error is a bug or bad data and is not retried blindly.

A ``MOVED`` met by a client that is not a cluster client (a plain URL of a cluster node
whose "are you a cluster node?" question went unanswered) is passing too: the CLI says in
plain words what to do about it (:func:`rsjobs.store.connection.moved_hint`).

Every Redis call of the store runs inside :class:`boundary` (the scripts' calls inside
:class:`rsjobs.store.scripts.Scripts`, which uses it too): a passing error leaves it as
:class:`rsjobs.RedisUnavailable` (an ``OSError``, so ``except TRANSIENT`` covers it), any
other Redis error as :class:`rsjobs.StoreError` with the reply in its message, the
redis-py error chained as the cause. Nothing outside the store sees redis-py's errors.
redis-py turns most of the passing replies into exception classes; ``UNBLOCKED`` and
``NOREPLICAS`` arrive as a plain ``ResponseError``.
"""

from __future__ import annotations

from types import TracebackType
from typing import Literal

from redis import exceptions as rx
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    ReadOnlyError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..errors import RedisUnavailable, RsjobsError, StoreError

__all__ = [
    "TRANSIENT",
    "TRANSIENT_REPLIES",
    "as_unavailable",
    "boundary",
    "is_failover",
    "is_transient",
    "reply_code",
    "translate",
]

#: Exception types that are always transient (OSError covers RedisUnavailable, socket
#: errors and asyncio's TimeoutError; redis-py's BusyLoadingError is a ConnectionError,
#: its MasterDownError a ClusterDownError, its MovedError an AskError; ClusterError and
#: SlotNotCoveredError are what redis-py's own cluster client raises while a cluster
#: settles). redis-py before 6 gives the cluster's replies no class: see
#: TRANSIENT_REPLIES.
TRANSIENT: tuple[type[BaseException], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    ReadOnlyError,
    ClusterDownError,
    ClusterError,
    SlotNotCoveredError,
    TryAgainError,
    AskError,
    OSError,
)

#: Error reply codes (the first word of the reply) that mean "try again soon".
TRANSIENT_REPLIES = frozenset(
    {
        "UNBLOCKED",
        "READONLY",
        "LOADING",
        "MASTERDOWN",
        "NOREPLICAS",
        "TRYAGAIN",
        "CLUSTERDOWN",
        "MOVED",
        "ASK",
    }
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
    text = str(exc)
    for cls, code in _CODES:
        if isinstance(exc, cls):  # its class took the code off the message: say it again
            if not text.startswith(code):
                text = f"{code} {text}".rstrip()
            break
    return RedisUnavailable(f"{what} unavailable: {type(exc).__name__}: {text}")


#: the code words redis-py takes off the messages of the errors it gives a class of their
#: own (see rsjobs.store.lane.classify); any other reply keeps its first word
_CODES: tuple[tuple[type[BaseException], str], ...] = (
    (rx.NoScriptError, "NOSCRIPT"),
    (rx.OutOfMemoryError, "OOM"),
    (rx.NoPermissionError, "NOPERM"),
    (rx.AuthenticationError, "NOAUTH"),
    (rx.ExecAbortError, "EXECABORT"),
    (rx.MovedError, "MOVED"),  # an AskError too: before it
    (rx.AskError, "ASK"),
    (rx.ClusterCrossSlotError, "CROSSSLOT"),
    (rx.MasterDownError, "MASTERDOWN"),
    (rx.ClusterDownError, "CLUSTERDOWN"),
    (rx.TryAgainError, "TRYAGAIN"),
    (rx.ReadOnlyError, "READONLY"),
    (rx.BusyLoadingError, "LOADING"),
)


def reply_code(exc: BaseException) -> str:
    """The first word of the error reply behind ``exc`` (``ERR`` when it has none)."""
    if isinstance(exc, StoreError):
        return exc.code
    for cls, code in _CODES:
        if isinstance(exc, cls):
            return code
    word = _code(exc)
    return word if word.isalpha() and word.isupper() else "ERR"


def translate(exc: BaseException, what: str) -> RsjobsError:
    """The rsjobs error for the Redis error ``exc`` of the call ``what`` (raise it ``from
    exc``): :class:`RedisUnavailable` when it is passing, else :class:`StoreError`."""
    if isinstance(exc, RsjobsError):
        return exc
    if is_transient(exc):
        return as_unavailable(exc, what)
    return StoreError(what, reply_code(exc), str(exc))


class boundary:  # a statement more than a class: ``with boundary("HGETALL task"):``
    """Around the Redis calls of one store method: redis-py's errors (and the socket's)
    leave it as rsjobs's (:func:`translate`); everything else passes unchanged."""

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        if exc is None or isinstance(exc, RsjobsError):
            return False
        if isinstance(exc, rx.RedisError | OSError):
            raise translate(exc, self.what) from exc
        return False
