"""The namespace's events stream, as the web app's hub and ``Client.wait`` read it: the
task id and entry number (``id``, ``hid``, and ``wf`` for a workflow's task) of every
history entry of every task but its first, and a note of every workflow history entry
(``wf``, ``hid``, ``ev``), appended by the scripts; readers read the entry from the task
or the workflow's history."""

from __future__ import annotations

import re
from typing import Any

import msgspec
from redis.exceptions import ResponseError

from ..errors import CorruptData
from ..schemas import NamespaceEvent
from . import history
from .replies import text
from .scripts import Scripts
from .transient import boundary

__all__ = ["Events", "MergedEvents", "order"]

Row = tuple[str, dict[str, str]]


def order(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


class Events:
    """``store.events``: reads of the events stream (a client of its own for the hub's
    blocking reads, see :class:`rsjobs.store.Store`)."""

    def __init__(self, scripts: Scripts) -> None:
        self.redis = scripts.redis
        self.key = scripts.keys.events
        self.task_prefix = scripts.keys.task("")

    async def last_id(self) -> str:
        """The id of the stream's last entry (``0-0`` when it is empty)."""
        with boundary("XREVRANGE events"):
            last = await self.redis.xrevrange(self.key, "+", "-", count=1)
        return text(last[0][0]) if last else "0-0"

    async def last_generated(self) -> str:
        """The id of the last entry ever added (``0-0``: none; the stream keeps it when
        trimming removed that entry)."""
        with boundary("XINFO STREAM events"):
            try:
                info: Any = await self.redis.xinfo_stream(self.key)
            except ResponseError:  # no such key: nothing was ever added
                return "0-0"
        return text(info.get("last-generated-id") or "0-0")

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
        return first is not None and order(first) > order(cursor)

    async def read(self, after: str, count: int, block_ms: int) -> list[Row]:
        """Up to ``count`` entries after ``after``, waiting up to ``block_ms`` for one."""
        with boundary("XREAD events"):
            reply: Any = await self.redis.xread({self.key: after}, count=count, block=block_ms)
        return list(reply[0][1]) if reply else []

    async def length(self) -> int:
        with boundary("XLEN events"):
            return int(await self.redis.xlen(self.key))

    async def after(self, after: str, count: int) -> list[Row]:
        """Up to ``count`` entries after ``after`` (a stream id), oldest first."""
        if order(after) >= (2**64 - 1, 2**64 - 1):
            return []
        with boundary("XRANGE events"):
            rows: Any = await self.redis.xrange(self.key, f"({after}", "+", count=count)
        return [(text(i), {text(k): text(v) for k, v in f.items()}) for i, f in rows]

    async def describe(self, rows: list[Row]) -> list[NamespaceEvent]:
        """Each entry as a :class:`NamespaceEvent`: a task's entry read from its hash (its
        event, state, queue and time; one round trip for the batch), a workflow's note as
        the stream holds it."""
        tasks = [(i, f) for i, f in rows if f.get("id") and f.get("hid", "").isdigit()]
        with boundary("HMGET events' tasks"):
            async with self.redis.pipeline(transaction=False) as pipe:
                for _, f in tasks:
                    pipe.hmget(self.task_prefix + f["id"], f"h{f['hid']}", "c", "q")
                read = await pipe.execute() if tasks else []
        found = {i: row for (i, _), row in zip(tasks, read, strict=True)}
        out: list[NamespaceEvent] = []
        for i, f in rows:
            ms = order(i)[0]
            task_id, wf_id = f.get("id", ""), f.get("wf", "")
            if not task_id:
                out.append(NamespaceEvent(id=i, workflow_id=wf_id, event=f.get("ev", ""), ts=ms))
                continue
            value, created, queue = (
                text(v) if v is not None else None for v in found.get(i) or (None, None, None)
            )
            e: dict[str, str] = {}
            if value is not None and created is not None and created.isdigit():
                try:
                    e = history.one(task_id, int(f["hid"]), value, int(created))
                except CorruptData:
                    e = {}
            out.append(
                NamespaceEvent(
                    id=i,
                    task_id=task_id,
                    workflow_id=wf_id,
                    event=e.get("ev", ""),
                    state=e.get("to", ""),
                    queue=queue or "",
                    rejected=e.get("rej") == "1",
                    ts=int(e["ts"]) if e.get("ts", "").lstrip("-").isdigit() else ms,
                )
            )
        return out


_PART = re.compile(r"(?:([0-9]{1,15})-([0-9]{1,20}))?")
_BASE = re.compile(r"([0-9]{1,15}):(.*)")


class MergedEvents:
    """The events streams of a sharded namespace read as one (``GET /events``): a position
    is where each shard's stream was read up to, written as one text
    (``<base ms>:<ms - base>-<seq>.<...>`` per shard, '' for a stream not read yet), so
    that a client resuming with it misses nothing of any shard. Entries come in the order
    of (ms, seq, shard); the shards are read one after the other (not one atomic view)."""

    def __init__(self, parts: list[Events]) -> None:
        self.parts = parts

    def parse(self, position: str) -> list[str]:
        """Each shard's stream id of a position; ValueError when it is not one of this
        namespace's."""
        m = _BASE.fullmatch(position) if isinstance(position, str) else None
        if m is None:
            raise ValueError(f"invalid position {position!r}")
        base, pieces = int(m[1]), m[2].split(".")
        if len(pieces) != len(self.parts):
            raise ValueError(f"invalid position {position!r}: not of {len(self.parts)} shards")
        out = []
        for piece in pieces:
            p = _PART.fullmatch(piece)
            if p is None:
                raise ValueError(f"invalid position {position!r}")
            out.append(f"{base + int(p[1])}-{p[2]}" if p[1] is not None else "0-0")
        for i in out:
            if order(i)[1] >= 2**64:
                raise ValueError(f"invalid position {position!r}")
        return out

    @staticmethod
    def position(ids: list[str]) -> str:
        """The position text of each shard's stream id."""
        keys = [order(i) for i in ids]
        base = min((ms for ms, seq in keys if (ms, seq) != (0, 0)), default=0)
        return f"{base}:" + ".".join(
            "" if (ms, seq) == (0, 0) else f"{ms - base}-{seq}" for ms, seq in keys
        )

    async def last_generated(self) -> str:
        return self.position([await e.last_generated() for e in self.parts])

    async def trimmed_past(self, position: str) -> bool:
        """Whether trimming removed entries after ``position`` on some shard (a shard not
        read yet, ``0-0``, was empty when the reader began: what it holds is new)."""
        ids = self.parse(position)
        for e, i in zip(self.parts, ids, strict=True):
            if i != "0-0" and await e.trimmed_past(i):
                return True
        return False

    def after_last(self, position: str, newest: str) -> bool:
        """Whether ``position`` is past ``newest`` on some shard."""
        return any(
            order(a) > order(b)
            for a, b in zip(self.parse(position), self.parse(newest), strict=True)
        )

    async def after(self, position: str, count: int) -> list[tuple[str, int, Row]]:
        """Up to ``count`` entries after ``position``, in (ms, seq, shard) order: each with
        the position after it, its shard, and the entry as its shard's stream holds it."""
        ids = self.parse(position)
        rows: list[tuple[tuple[int, int, int], int, Row]] = []
        for k, (e, after) in enumerate(zip(self.parts, ids, strict=True)):
            for row in await e.after(after, count):
                rows.append(((*order(row[0]), k), k, row))
        rows.sort(key=lambda r: r[0])
        out = []
        for _, k, row in rows[:count]:
            ids[k] = row[0]
            out.append((self.position(ids), k, row))
        return out

    async def describe(self, rows: list[tuple[str, int, Row]]) -> list[NamespaceEvent]:
        """Each entry as a :class:`NamespaceEvent` whose id is the position after it (its
        task read on its shard)."""
        out: list[NamespaceEvent | None] = [None] * len(rows)
        for k, e in enumerate(self.parts):
            mine = [i for i, (_, shard, _) in enumerate(rows) if shard == k]
            if not mine:
                continue
            for i, ev in zip(mine, await e.describe([rows[i][2] for i in mine]), strict=True):
                out[i] = msgspec.structs.replace(ev, id=rows[i][0])
        return [ev for ev in out if ev is not None]
