"""Telling one item's bad data from trouble with Redis itself, and isolating the item.

The shared processes (reaper, workflow driver, worker) handle many tasks or workflows per
call. An error that comes from one item (a script that fails on a corrupt task hash, a plan
that does not decode, a payload over the limit) must stay with that item: the others go on,
and the item is put aside where an operator can see it. An error of Redis itself (not
reachable, loading, out of memory, a replica, busy running a script) says nothing about any
item: the whole pass is retried later, and nothing is put aside because of it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, NamedTuple, TypeVar

from redis.exceptions import (
    AuthenticationError,
    ClusterError,
    ExecAbortError,
    MovedError,
    NoPermissionError,
    NoScriptError,
    OutOfMemoryError,
)

from ..errors import NotMigrated, StoreError
from .transient import TRANSIENT, is_transient

__all__ = ["TRANSIENT", "Isolated", "about_item", "about_server", "each_alone"]

T = TypeVar("T")
R = TypeVar("R")

#: errors Redis answers about its own condition, whatever the call's data, besides the
#: transient ones (rsjobs.store.transient): they are not retried blindly, but blame no item
_SERVER: tuple[type[BaseException], ...] = (
    OutOfMemoryError,
    NoScriptError,
    AuthenticationError,
    NoPermissionError,
    ExecAbortError,
    MovedError,  # AskError too
    ClusterError,
)

#: first words of the error replies of the server's condition that redis-py does not map
#: to a class of their own
_SERVER_WORDS = frozenset({"BUSY", "MISCONF"})


#: the same, as the code words of :class:`rsjobs.StoreError` (the store's errors)
_SERVER_CODES = frozenset(
    {"OOM", "NOSCRIPT", "NOAUTH", "NOPERM", "EXECABORT", "MOVED", "ASK", "CROSSSLOT"}
    | _SERVER_WORDS
)


def about_server(exc: BaseException) -> bool:
    """Whether ``exc`` is about Redis itself (retry the pass later), not about an item:
    redis-py's errors and the store's (:class:`rsjobs.RedisUnavailable` always,
    :class:`rsjobs.StoreError` by its code) alike."""
    if isinstance(exc, StoreError):
        return exc.code in _SERVER_CODES or (
            exc.__cause__ is not None and about_server(exc.__cause__)
        )
    if is_transient(exc) or isinstance(exc, _SERVER):
        return True
    return str(exc).split(" ", 1)[0] in _SERVER_WORDS


def about_item(exc: BaseException) -> bool:
    """Whether ``exc``, raised while handling some items, is to be blamed on their data (or
    on the code that read it): any ordinary exception that is not about Redis itself.
    Cancellation and interpreter exits are never caught. Data of an earlier layout
    (:class:`rsjobs.NotMigrated`) is no item's fault either: it waits for ``rsjobs
    migrate``, and nothing is put aside because of it."""
    return isinstance(exc, Exception) and not about_server(exc) and not isinstance(exc, NotMigrated)


class Isolated(NamedTuple, Generic[T, R]):
    """What :func:`each_alone` did."""

    #: the replies: one (of the whole batch) when it succeeded, else one per item that
    #: succeeded alone, in order
    replies: list[R]
    #: the items that failed alone, with their errors
    failed: list[tuple[T, Exception]]
    #: True when the batch failed and was split into single calls
    split: bool


async def each_alone(
    call: Callable[[Sequence[T]], Awaitable[R]],
    items: Sequence[T],
    log: logging.Logger | None = None,
    what: str = "batch",
) -> Isolated[T, R]:
    """``call(items)``; if that fails on the data, ``call([item])`` for each item.

    Every script re-checks what it changes, so a single call after a failed batch call is
    safe: what the batch had already done before the error is found done. An error about
    Redis itself is raised as it is (the caller's pass fails and is retried).
    """
    try:
        return Isolated([await call(items)], [], False)
    except Exception as exc:
        if not about_item(exc):
            raise
        if len(items) == 1:
            return Isolated([], [(items[0], exc)], False)
        first = exc
    replies: list[R] = []
    failed: list[tuple[T, Exception]] = []
    for item in items:
        try:
            replies.append(await call([item]))
        except Exception as exc:
            if not about_item(exc):
                raise
            failed.append((item, exc))
    if not failed and log is not None:
        log.warning("%s of %d failed (%s), but every item succeeded alone", what, len(items), first)
    return Isolated(replies, failed, True)
