"""The filters of a task list, checked: :func:`list_query` turns what a caller gives
(:meth:`rsjobs.Client.list_tasks`, ``GET /tasks``, ``rsjobs tasks``) into the store's
:class:`rsjobs.store.ListQuery`, or raises :class:`rsjobs.ConfigError` saying what is
wrong, before anything is read."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .errors import ConfigError
from .labels import MAX_LABELS, parse_label, validate_labels
from .names import validate_name
from .store.index import MAX_PAGE, STATES, ListQuery

__all__ = ["MAX_PAGE", "STATES", "list_query"]

#: the latest time a filter may name (ms since the epoch, 13 digits)
MAX_TIME = 10**13 - 1

Names = str | Iterable[str] | None
Labels = str | Iterable[str] | Mapping[str, str] | None


def _many(v: Names) -> tuple[str, ...]:
    if v is None or v == "":
        return ()
    items = (v,) if isinstance(v, str) else tuple(v)
    return tuple(dict.fromkeys(items))


def _state(s: object) -> str:
    if s not in STATES:
        raise ConfigError(f"unknown state {s!r}: one of {', '.join(STATES)}")
    return str(s)


def _labels(v: Labels) -> tuple[tuple[str, str], ...]:
    if v is None or v == "":
        return ()
    if isinstance(v, Mapping):
        pairs = list(validate_labels(v).items())
    else:
        pairs = [parse_label(t) for t in ((v,) if isinstance(v, str) else v)]
    if len(pairs) > MAX_LABELS:
        raise ConfigError(f"at most {MAX_LABELS} label filters")
    return tuple(sorted(set(pairs)))


def _time(name: str, v: object) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= MAX_TIME:
        raise ConfigError(f"{name} must be a time in ms since the epoch (an integer >= 0)")
    return v


def list_query(
    *,
    state: Names = None,
    queue: Names = None,
    type: str | None = None,
    owner: str | None = None,
    label: Labels = None,
    since: int = 0,
    until: int = 0,
    cursor: str | None = None,
    limit: int = 50,
) -> ListQuery:
    """A checked list query. ``state`` / ``queue``: one or several; ``label``: ``"key=
    value"``, several of them, or a mapping (a task must have them all); ``since`` /
    ``until``: ms, inclusive, on the time the list orders by (0: no bound); ``cursor``:
    a page's; ``limit``: 1-500. Raises :class:`rsjobs.ConfigError`."""
    states = tuple(_state(s) for s in _many(state))
    queues = _many(queue)
    for q in queues:
        validate_name("queue", q)
    if type is not None and not (isinstance(type, str) and 0 < len(type) <= 200):
        raise ConfigError("type must be a string of 1-200 characters")
    if owner is not None and not (isinstance(owner, str) and 0 < len(owner) <= 200):
        raise ConfigError("owner must be a string of 1-200 characters")
    since, until = _time("since", since), _time("until", until)
    if until and since > until:
        raise ConfigError("since must not be after until")
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE:
        raise ConfigError(f"limit must be an integer between 1 and {MAX_PAGE}")
    if cursor is not None and not isinstance(cursor, str):
        raise ConfigError("cursor must be the text a page returned")
    return ListQuery(
        states=states,
        queues=queues,
        type=type or "",
        owner=owner or "",
        labels=_labels(label),
        since=since,
        until=until,
        cursor=cursor or None,
        limit=limit,
    )
