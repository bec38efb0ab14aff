"""The operator's views of a namespace, beside the task lists: its queues (depth, counts per
state, the age of the oldest waiting task, paused or not, live workers) and pages of its
dead-letter stream. :class:`rsjobs.Client` (``queues``, ``deadletters``), the web app
(``GET /queues``, ``GET /deadletters``) and the CLI show them; all of it is read from what
the store keeps per queue and per namespace, never from a scan of the keyspace."""

from __future__ import annotations

import re

import msgspec

from .errors import ConfigError, UnknownQueue
from .ids import parse_entry_id
from .names import is_name
from .reaper.deadletter import DeadLetter
from .store import Store
from .store.series import MAX_MINUTES, STEP_MS

__all__ = [
    "DeadLetterPage",
    "QueuePoint",
    "QueueSeries",
    "QueueView",
    "deadletter_page",
    "queue_series",
    "queue_views",
]

#: the states of a queue's counts, in the order a task passes through them
_STATES = ("WAITING", "PENDING", "SCHEDULED", "RUNNING", "DEFERRED", "PAUSED", "SUCCEEDED",
           "FAILED", "CANCELLED", "TIMED_OUT")  # fmt: skip
_WAITING = ("PENDING", "SCHEDULED", "RUNNING")
_SHARD = re.compile(r"[0-9]{1,3}")


class QueueView(msgspec.Struct, frozen=True, kw_only=True):
    """One queue of a namespace."""

    name: str
    #: work entries on its stream (waiting or delivered)
    depth: int
    #: tasks per state (the terminal states' counts are totals since the namespace began:
    #: finished tasks expire after the retention period)
    counts: dict[str, int]
    #: tasks that still need a worker (PENDING, SCHEDULED, RUNNING; a WAITING successor
    #: needs one only once its predecessors release it)
    waiting: int
    #: ms since the oldest undelivered task was queued (0: none waits)
    oldest_pending_ms: int
    #: whether the queue is paused (``Client.pause_queue``: no worker starts its tasks)
    paused: bool = False
    #: a sharded namespace whose shards do not all hold the pause (one did not get it, or
    #: kept it: repeat the pause or resume): on how many, e.g. ``"3 of 8"``; '' otherwise
    paused_shards: str = ""
    #: live workers serving it
    workers: int
    #: work waits and no live worker serves the queue
    unserved: bool
    #: tasks a limit set aside (rsjobs.limits): parked until their owner is under its
    #: concurrency limit, or until the start time a rate limit gave them (PENDING, counted
    #: in ``counts``; tasks of an owner at its limit still on the stream are not)
    held: int = 0


class QueuePoint(msgspec.Struct, frozen=True, kw_only=True):
    """One minute of a queue's series: what moved since the sample before it (one minute;
    the whole gap when no reaper sampled in between), and its backlog at the sample."""

    #: the minute's start (ms, Redis TIME)
    t: int
    enqueued: int = 0
    started: int = 0
    succeeded: int = 0
    failed: int = 0
    timed_out: int = 0
    cancelled: int = 0
    #: PENDING tasks at the sample
    pending: int = 0
    #: ms since the oldest undelivered task was queued, at the sample (0: none waited)
    oldest_pending_ms: int = 0


class QueueSeries(msgspec.Struct, frozen=True, kw_only=True):
    """A queue's per-minute series, oldest first; a minute without a sample (no reaper
    ran) has no point."""

    queue: str
    step_ms: int = STEP_MS
    points: list[QueuePoint]


class DeadLetterPage(msgspec.Struct, frozen=True, kw_only=True):
    """A page of the dead-letter stream, newest first; ``cursor`` asks for the next page
    (None: this is the last)."""

    items: list[DeadLetter]
    cursor: str | None = None


async def queue_views(store: Store) -> list[QueueView]:
    """Every queue of the namespace, by name."""
    from .console.views import live_workers_by_queue
    from .reaper.registry import list_workers

    stats = await store.tasks.stats()
    names = list(stats)
    live = live_workers_by_queue(await list_workers(store))
    oldest = await store.index.oldest_pending(names)
    paused = await store.tasks.paused_queues()
    held = {q.queue: q.waiting + q.throttled for q in await store.limits.of(names)}
    now = await store.reaper.now_ms()
    out = []
    for name in names:
        counts = {s: stats[name].get(s, 0) for s in _STATES}
        waiting = sum(counts[s] for s in _WAITING)
        since = oldest.get(name, 0)
        out.append(
            QueueView(
                name=name,
                depth=stats[name].get("stream_length", 0),
                counts=counts,
                waiting=waiting,
                oldest_pending_ms=max(0, now - since) if since else 0,
                paused=name in paused,
                paused_shards=paused[name].shards if name in paused else "",
                workers=live.get(name, 0),
                unserved=bool(waiting) and not live.get(name),
                held=held.get(name, 0),
            )
        )
    return out


async def deadletter_page(
    store: Store, *, cursor: str | None = None, limit: int = 50
) -> DeadLetterPage:
    """Dead letters after ``cursor`` (a page's: an entry id of the stream), newest first.
    Raises :class:`rsjobs.ConfigError` for a bad cursor or a limit outside 1-1000."""
    from .reaper.deadletter import list_deadletters

    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 1000:
        raise ConfigError("limit must be an integer between 1 and 1000")
    stores = await store.each()
    if len(stores) > 1:
        return await _sharded_deadletters(stores, cursor, limit)
    if cursor is not None:
        parse_entry_id(cursor)
    items = await list_deadletters(store, count=limit, before=cursor)
    last = items[-1].entry if len(items) == limit else None
    return DeadLetterPage(items=items, cursor=last)


async def _sharded_deadletters(
    stores: list[Store], cursor: str | None, limit: int
) -> DeadLetterPage:
    """A page of the dead letters of every shard, newest first by (entry id, shard); the
    cursor is the last one's ``<entry id>.<shard>`` (not one atomic view)."""
    from .reaper.deadletter import list_deadletters

    at: tuple[str, int] | None = None
    if cursor is not None:
        entry, _, shard = cursor.rpartition(".") if isinstance(cursor, str) else ("", "", "")
        if not _SHARD.fullmatch(shard) or int(shard) >= len(stores):
            raise ConfigError("invalid cursor: pass the cursor a page of dead letters returned")
        at = (parse_entry_id(entry), int(shard))
    rows = []
    for store in stores:
        k = store.number
        # after (id, shard) in (id, shard) order: the same id on a lower shard comes after
        items = await list_deadletters(
            store,
            count=limit,
            before=at[0] if at else None,
            inclusive=at is not None and k < at[1],
        )
        rows += [((_entry_key(d.entry), k), d) for d in items]
    rows.sort(key=lambda r: r[0], reverse=True)
    page = rows[:limit]
    last = page[-1][0] if len(page) == limit else None
    return DeadLetterPage(
        items=[d for _, d in page],
        cursor=f"{page[-1][1].entry}.{last[1]}" if last is not None else None,
    )


def _entry_key(entry: str) -> tuple[int, int]:
    ms, _, seq = entry.partition("-")
    return int(ms or 0), int(seq or 0)


async def queue_series(store: Store, queue: str, *, minutes: int = 60) -> QueueSeries:
    """The last ``minutes`` minutes (1-1440) of ``queue``'s series, from the samples the
    reaper takes once a minute. Raises :class:`rsjobs.ConfigError` for a bad name or
    number of minutes, :class:`rsjobs.UnknownQueue` for a queue the namespace never had."""
    if not is_name(queue):
        raise ConfigError("queue: 1-64 letters, digits, '_', '.', '-'")
    if not isinstance(minutes, int) or isinstance(minutes, bool) or not 1 <= minutes <= MAX_MINUTES:
        raise ConfigError(f"minutes must be an integer between 1 and {MAX_MINUTES}")
    if not await store.series.known(queue):
        raise UnknownQueue(queue)
    now = await store.reaper.now_ms()
    points = await store.series.points(queue, minutes, now)
    return QueueSeries(queue=queue, points=[QueuePoint(**p._asdict()) for p in points])
