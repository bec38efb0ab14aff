"""Consumer-group reads of the queue streams.

Each queue is one stream; every worker reads it through the group ``workers`` with its
own consumer name, so an entry is delivered to exactly one consumer and stays in that
consumer's pending list (PEL) until a transition script acks and deletes it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from ..keys import GROUP
from ..transient import as_unavailable, is_transient

__all__ = ["Delivery", "ensure_group", "read_batch", "read_own_pending"]


class Delivery(NamedTuple):
    """One delivered work entry."""

    stream: str  #: the queue stream key
    queue: str  #: the queue name
    entry: str  #: the stream entry id
    task_id: str


async def _read(redis: Redis, *args: Any, **kwargs: Any) -> Any:
    """XREADGROUP; a failover's UNBLOCKED (and every other transient error) is raised as
    :class:`rsjobs.RedisUnavailable`, which the worker's fetch loop retries."""
    try:
        return await redis.xreadgroup(*args, **kwargs)
    except RedisError as exc:
        if is_transient(exc):
            raise as_unavailable(exc, "redis (XREADGROUP)") from exc
        raise


async def ensure_group(redis: Redis, stream: str) -> None:
    """Create the ``workers`` group on ``stream`` (and the stream) if missing.

    The group starts at id 0, so entries added before any worker existed are delivered.
    """
    try:
        await redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


async def read_batch(
    redis: Redis,
    consumer: str,
    streams: dict[str, str],
    count: int,
    block_ms: int,
) -> list[Delivery]:
    """Up to ``count`` new entries per stream, blocking up to ``block_ms`` when idle.

    ``streams`` maps stream key -> queue name.
    """
    reply = await _read(
        redis, GROUP, consumer, dict.fromkeys(streams, ">"), count=count, block=block_ms
    )
    out: list[Delivery] = []
    if not reply:
        return out
    for stream, entries in reply:
        queue = streams[stream]
        for entry_id, fields in entries:
            if fields:  # a deleted entry shows as an empty field map: nothing to run
                out.append(Delivery(stream, queue, entry_id, fields.get("id", "")))
    return out


async def read_own_pending(
    redis: Redis, consumer: str, streams: dict[str, str], count: int = 1000
) -> list[Delivery]:
    """The entries delivered to ``consumer`` and not yet acked (its pending list).

    A worker reads them after a connection error: a batch it read but could not start, or
    a reply lost on the way, is still there. They are listed with XPENDING and read with
    XRANGE, which change nothing: reading them again with ``XREADGROUP ... 0`` would count
    a delivery each time and reset their idle time, so a task whose START reply was lost
    would look poisonous (its delivery count grows) and never idle to the reaper. Entries
    deleted from the stream meanwhile (their task moved on) are acked here, which clears
    them from the pending list.
    """
    out: list[Delivery] = []
    for stream, queue in streams.items():
        try:
            rows = await redis.xpending_range(stream, GROUP, "-", "+", count, consumername=consumer)
            if not rows:
                continue
            async with redis.pipeline(transaction=False) as pipe:
                for r in rows:
                    pipe.xrange(stream, r["message_id"], r["message_id"], count=1)
                found = await pipe.execute()
        except RedisError as exc:
            if is_transient(exc):
                raise as_unavailable(exc, "redis (XPENDING)") from exc
            if "NOGROUP" in str(exc):
                continue
            raise
        gone = []
        for r, entry in zip(rows, found, strict=True):
            entry_id = str(r["message_id"])
            if entry and entry[0][1]:
                out.append(Delivery(stream, queue, entry_id, entry[0][1].get("id", "")))
            else:
                gone.append(entry_id)
        if gone:
            await redis.xack(stream, GROUP, *gone)
    return out
