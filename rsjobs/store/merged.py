"""Lists of a sharded namespace: the shards' pages merged, newest first.

Each shard keeps its own indexes (:mod:`.index`), so a list of the namespace asks every
shard for a page and merges them by list position (the time a list orders a task by, then
the source and the position there, then the shard: each shard's own order, made total).
The page's cursor carries each shard's own cursor: where that shard's next page starts,
"done" for a shard that has nothing left. It is opaque text (URL-safe base64 of a JSON
array), checked when read: a cursor of another list, of another shard count, or not a
cursor at all is :class:`rsjobs.ConfigError`.

A shard's page looks at a bounded number of candidates and may stop before it found a
page's worth: the tasks it has not looked at yet may come before other shards' tasks. So a
merged page hands out nothing past the point where such a shard stopped; its cursor goes
on from there. The shards are read one after the other, not at one instant: the merge is
not one atomic view of the namespace (nor is a single shard's list one).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from ..errors import ConfigError
from ..schemas import TaskPage, TaskSummary
from .cursor import MAX_CURSOR
from .index import ListQuery, PagePart
from .sources import Candidate

if TYPE_CHECKING:
    from . import Store

__all__ = ["decode_shard_cursor", "encode_shard_cursor", "task_page"]

#: the first element of a sharded list's cursor
_MARK = "S"
#: a shard with nothing left
_DONE = ""
_encode = msgspec.json.Encoder()
_decode = msgspec.json.Decoder(tuple[str, list[str | None]])
_BAD = "invalid cursor: pass the cursor a page of this list returned"


def encode_shard_cursor(parts: Sequence[str | None]) -> str:
    """The cursor of a merged page: per shard, its own cursor, ``""`` (done) or None (not
    started)."""
    raw = _encode.encode([_MARK, list(parts)])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_shard_cursor(text: str, count: int) -> list[str | None]:
    """Each shard's part of a merged page's cursor; :class:`rsjobs.ConfigError` for text
    that is not the cursor of a list of ``count`` shards."""
    if not isinstance(text, str) or not 0 < len(text) <= MAX_CURSOR * count or not text.isascii():
        raise ConfigError(_BAD)
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        mark, parts = _decode.decode(raw)
    except (binascii.Error, ValueError, msgspec.DecodeError):
        raise ConfigError(_BAD) from None
    if mark != _MARK or len(parts) != count:
        raise ConfigError(f"{_BAD} (a list of a namespace of {count} shards)")
    return parts


def _order(c: Candidate, shard: int) -> tuple[Any, ...]:
    return (*c.key, shard)


async def task_page(stores: Sequence[Store], q: ListQuery) -> TaskPage:
    """One page of the list ``q`` of a sharded namespace (``stores``: its shards' stores,
    in shard order), newest first."""
    count = len(stores)
    starts: list[str | None] = decode_shard_cursor(q.cursor, count) if q.cursor else [None] * count
    parts: list[PagePart | None] = []
    for store, start in zip(stores, starts, strict=True):
        if start == _DONE:
            parts.append(None)
            continue
        parts.append(await store.index.part(q._replace(cursor=start)))
    # the last candidate each shard that has more looked at: nothing past the latest of
    # them is handed out (that shard has not looked past it)
    floors = [
        _order(p.last, k) for k, p in enumerate(parts) if p is not None and p.last is not None
    ]
    floor = max(floors) if floors else None
    merged = sorted(
        (
            (_order(c, k), k, i)
            for k, p in enumerate(parts)
            if p is not None
            for i, c in enumerate(p.cands)
        ),
        reverse=True,
    )
    items: list[TaskSummary] = []
    taken: dict[int, int] = {}  # shard -> how many of its tasks the page hands out
    for order, k, i in merged:
        if len(items) == q.limit or (floor is not None and order < floor):
            break
        part = parts[k]
        assert part is not None
        items.append(part.items[i])
        taken[k] = i + 1
    cursor: list[str | None] = []
    for k, (p, start) in enumerate(zip(parts, starts, strict=True)):
        if p is None:
            cursor.append(_DONE)
        elif taken.get(k, 0) == len(p.cands):
            cursor.append(p.cursor if p.cursor is not None else _DONE)
        elif taken.get(k, 0):
            cursor.append(p.cursor_after(p.cands[taken[k] - 1]))
        else:
            cursor.append(start)
    more = any(c != _DONE for c in cursor)
    return TaskPage(items=items, cursor=encode_shard_cursor(cursor) if more else None)
