"""The namespace's events stream, as the web app's hub and ``Client.wait`` read it: the
task id and entry number (``id``, ``hid``, and ``wf`` for a workflow's task) of every
history entry of every task but its first, and a note of every workflow history entry
(``wf``, ``hid``, ``ev``), appended by the scripts; readers read the entry from the task
or the workflow's history."""

from __future__ import annotations

from typing import Any

from .replies import text
from .scripts import Scripts
from .transient import boundary

__all__ = ["Events"]

Row = tuple[str, dict[str, str]]


def _order(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


class Events:
    """``store.events``: reads of the events stream (a client of its own for the hub's
    blocking reads, see :class:`rsjobs.store.Store`)."""

    def __init__(self, scripts: Scripts) -> None:
        self.redis = scripts.redis
        self.key = scripts.keys.events

    async def last_id(self) -> str:
        """The id of the stream's last entry (``0-0`` when it is empty)."""
        with boundary("XREVRANGE events"):
            last = await self.redis.xrevrange(self.key, "+", "-", count=1)
        return text(last[0][0]) if last else "0-0"

    async def first_id(self) -> str | None:
        """The id of the stream's first entry (None when it is empty): past it, trimming
        has removed entries."""
        with boundary("XRANGE events"):
            first = await self.redis.xrange(self.key, "-", "+", count=1)
        return text(first[0][0]) if first else None

    async def trimmed_past(self, cursor: str) -> bool:
        """Whether trimming (MAXLEN) has removed entries after ``cursor``: the stream's first
        entry is past it. A reader behind that point may have missed entries."""
        first = await self.first_id()
        return first is not None and _order(first) > _order(cursor)

    async def read(self, after: str, count: int, block_ms: int) -> list[Row]:
        """Up to ``count`` entries after ``after``, waiting up to ``block_ms`` for one."""
        with boundary("XREAD events"):
            reply: Any = await self.redis.xread({self.key: after}, count=count, block=block_ms)
        return list(reply[0][1]) if reply else []

    async def length(self) -> int:
        with boundary("XLEN events"):
            return int(await self.redis.xlen(self.key))
