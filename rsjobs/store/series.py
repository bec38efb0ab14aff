"""The per-minute queue series (``store.series``): the reaper samples each queue's counters
once a minute (``scripts/series.lua``, one stream entry per queue and minute, the last
24 hours), and a series is the differences between consecutive samples. Nothing is read
per task: a sample and a read cost the same whatever the number of tasks.

A point at minute ``t`` carries what moved between the sample before it and the sample of
minute ``t`` (one minute; more when no reaper sampled in between: then the point covers
the whole gap), and the backlog (``pending``) and the age of the oldest waiting task as
they were at the sample. Minutes without a sample have no point.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any, NamedTuple

from . import layout
from .layout import SeriesArgs, SeriesQueue
from .replies import text
from .scripts import Scripts
from .transient import boundary

__all__ = ["KEEP_MS", "MAX_MINUTES", "STEP_MS", "Point", "Series"]

#: one sample per minute
STEP_MS = 60_000
#: the most minutes a series shows (24 h)
MAX_MINUTES = 1440
#: how long samples are kept: 24 h, and the sample before the first minute shown
KEEP_MS = (MAX_MINUTES + 1) * STEP_MS

#: sample field -> point field (the counters, whose differences a point shows)
_COUNTERS = {
    "n": "enqueued",
    "st": "started",
    "ok": "succeeded",
    "f": "failed",
    "to": "timed_out",
    "c": "cancelled",
}


class Point(NamedTuple):
    """One minute of a queue's series."""

    #: the minute's start (ms, Redis TIME)
    t: int
    enqueued: int
    started: int
    succeeded: int
    failed: int
    timed_out: int
    cancelled: int
    #: PENDING tasks at the sample
    pending: int
    #: ms since the oldest undelivered task was queued, at the sample (0: none waited)
    oldest_pending_ms: int


def _entry_ms(entry_id: Any) -> int:
    ms, _, _ = text(entry_id).partition("-")
    return int(ms) if ms.isdigit() else -1


def _add(a: Point, b: Point) -> Point:
    """Two shards' points of one minute as one."""
    sums = [x + y for x, y in zip(a[1:-1], b[1:-1], strict=True)]
    return Point._make([a.t, *sums, max(a.oldest_pending_ms, b.oldest_pending_ms)])


def _count(fields: Mapping[str, str], name: str) -> int:
    v = fields.get(name, "0")
    return int(v) if v.lstrip("-").isdigit() else 0


class Series:
    """Samples and series of the namespace's queues."""

    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts
        self.redis = scripts.redis
        self.keys = scripts.keys

    async def sample(self, source: str, oldest: Mapping[str, int]) -> tuple[int, int]:
        """Sample every queue of ``oldest`` (queue -> when its oldest undelivered work
        entry was queued, ms; 0: none) unless this minute's sample exists already (any
        number of reapers may call this: each minute gets one). Returns how many queues
        were sampled now, and the minute (ms)."""
        if not oldest:
            return 0, 0
        k = self.keys
        call = layout.series(
            self.scripts.common,
            source,
            SeriesArgs(KEEP_MS),
            [(k.series(q), SeriesQueue(q, ms)) for q, ms in sorted(oldest.items())],
        )
        done, minute = await self.scripts.run(call)
        return int(done), int(minute)

    async def points(self, queue: str, minutes: int, now_ms: int) -> list[Point]:
        """The points of the last ``minutes`` minutes up to ``now_ms``, oldest first
        (sharded: each shard's series, summed per minute; the oldest wait is the longest
        of any shard)."""
        if (stores := await self.scripts.fan_out()) is not None:
            by_minute: dict[int, Point] = {}
            for st in stores:
                for p in await st.series._points_here(queue, minutes, now_ms):
                    q = by_minute.get(p.t)
                    by_minute[p.t] = p if q is None else _add(q, p)
            return [by_minute[t] for t in sorted(by_minute)]
        return await self._points_here(queue, minutes, now_ms)

    async def _points_here(self, queue: str, minutes: int, now_ms: int) -> list[Point]:
        first = now_ms - now_ms % STEP_MS - (minutes - 1) * STEP_MS
        with boundary("XREVRANGE series"):
            rows: list[Any] = await self.redis.xrevrange(
                self.keys.series(queue), "+", f"{max(0, first - STEP_MS)}-0", count=minutes + 1
            )
        samples = [(_entry_ms(i), {text(a): text(b) for a, b in f.items()}) for i, f in rows]
        samples.reverse()
        out: list[Point] = []
        for (_, before), (t, now) in itertools.pairwise(samples):
            if t < first:
                continue
            moved = {p: max(0, _count(now, s) - _count(before, s)) for s, p in _COUNTERS.items()}
            out.append(
                Point(
                    t=t,
                    pending=max(0, _count(now, "p")),
                    oldest_pending_ms=max(0, _count(now, "age")),
                    **moved,
                )
            )
        return out

    async def known(self, queue: str) -> bool:
        """Whether ``queue`` is one of the namespace's queues."""
        with boundary("SISMEMBER queues"):
            return bool(await self.redis.sismember(self.keys.queues, queue))
