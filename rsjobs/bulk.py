"""Bulk actions: the checks of a filter, and running one task's action on each task a
selection names (:meth:`rsjobs.Client.bulk_cancel`, :meth:`rsjobs.Client.bulk_retry`).

The selection itself is the store's (:func:`rsjobs.store.selection.select`); what each
task gets is its own action, whose script checks the task again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from .errors import ConfigError
from .labels import validate_labels
from .model import State
from .names import is_owner, validate_name, validate_type
from .schemas import BulkItem, BulkResult, TaskFilter
from .store.selection import Selected, Selection

__all__ = ["MAX_BULK", "RETRYABLE", "check_filter", "check_limit", "run_bulk"]


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


#: the states a bulk retry takes
RETRYABLE = frozenset({"FAILED", "TIMED_OUT", "CANCELLED"})
#: the most tasks one bulk action acts on, and how many it runs at once
MAX_BULK = 1000
_BULK_AT_ONCE = 32


def check_limit(limit: object) -> None:
    """Raise :class:`ConfigError` unless ``limit`` is an integer from 1 to
    :data:`MAX_BULK`."""
    if not _is_int(limit) or not 1 <= limit <= MAX_BULK:  # type: ignore[operator]
        raise ConfigError(f"limit must be an integer from 1 to {MAX_BULK}")


def check_filter(f: TaskFilter) -> None:
    """Raise :class:`ConfigError` unless ``f`` names at least one field and each is
    well formed (a bulk action over every task of the namespace must say so)."""
    if not isinstance(f, TaskFilter):
        raise ConfigError("the filter must be a TaskFilter")
    if all(getattr(f, n) is None for n in f.__struct_fields__):
        raise ConfigError(
            "an empty filter would select every task: name a queue, state, type, owner, "
            "labels, since or until"
        )
    if f.labels is not None:
        if not f.labels:
            raise ConfigError("labels must name at least one key: value (or be left out)")
        validate_labels(f.labels)
    if f.queue is not None:
        validate_name("queue", f.queue)
    if f.state is not None and f.state not in {s.value for s in State}:
        raise ConfigError(f"unknown state {f.state!r}: one of {', '.join(s.value for s in State)}")
    if f.type is not None:
        validate_type(f.type, "type")
    if f.owner is not None and not is_owner(f.owner):
        raise ConfigError(f"invalid owner {f.owner!r}")
    for name in ("since", "until"):
        v = getattr(f, name)
        if v is not None and (not _is_int(v) or not 0 <= v < 10**15):
            raise ConfigError(f"{name} must be a Redis TIME in milliseconds (an integer >= 0)")
    if f.since is not None and f.until is not None and f.since >= f.until:
        raise ConfigError("since must be before until")


async def run_bulk(
    action: str,
    found: Selection,
    dry_run: bool,
    one: Callable[[Selected], Awaitable[BulkItem]],
) -> BulkResult:
    """Run ``one`` on each selected task (a few at once), unless ``dry_run``."""
    ids = [t.id for t in found.tasks]
    if dry_run:
        return BulkResult(action=action, dry_run=True, matched=found.matched, ids=ids)
    gate = asyncio.Semaphore(_BULK_AT_ONCE)

    async def gated(t: Selected) -> BulkItem:
        async with gate:
            return await one(t)

    items = await asyncio.gather(*(gated(t) for t in found.tasks))
    return BulkResult(
        action=action,
        dry_run=False,
        matched=found.matched,
        ids=ids,
        changed=sum(1 for i in items if i.changed),
        items=list(items),
    )
