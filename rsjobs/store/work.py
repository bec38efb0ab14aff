"""The worker's calls: taking work from the queue streams (``take.lua``), START, the
batched ends of attempts and heartbeats, hand-backs, promotion of due work, registration,
the control channel.

Each queue is one stream per priority level it uses; every worker reads them through the
group ``workers`` with its own consumer name, so an entry is delivered to exactly one
consumer and stays in that consumer's pending list (PEL) until a transition script acks
and deletes it. ``take.lua`` picks what a worker gets (highest priority first, within
the queues' limits); an idle worker waits for new entries with XREAD BLOCK, which claims
nothing. The hot path (take, start, finish, heartbeat) is one round trip per batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any, NamedTuple

from ..errors import StoreError
from . import layout
from .keys import GROUP, TaskKeys, split_level, split_member
from .layout import BeatArgs, BeatItem, Ending, Entry, Member, StartArgs, TakeArgs
from .replies import Beat, Promoted, Started, TaskReply, text
from .scripts import Scripts
from .transient import boundary

__all__ = ["Delivery", "Taken", "Work"]


class Delivery(NamedTuple):
    """One delivered work entry."""

    stream: str  #: the queue stream key (its priority level's)
    queue: str  #: the queue name
    entry: str  #: the stream entry id
    task_id: str
    priority: int = 0


class Taken(NamedTuple):
    """What ``take.lua`` handed out, and where to wait when it handed out nothing."""

    deliveries: list[Delivery]
    #: stream key -> the entry id after which new entries wake the worker (empty when
    #: something was handed out)
    cursors: dict[str, str]
    #: the earliest time (ms, Redis TIME) a held-back task may start (0: none)
    next_due: int
    #: stopped at its parking bound with entries left: take again at once
    more: bool
    #: an owner's limit held some task back
    held: bool = False


class Work:
    """The worker's side of the store (``store.work``)."""

    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts
        self.redis = scripts.redis
        self.keys = scripts.keys

    # -- set-up and registration -----------------------------------------------------------

    async def ensure_groups(self, streams: Iterable[str]) -> None:
        """Create the ``workers`` group on each stream (and the stream) if missing. The
        group starts at id 0, so entries added before any worker existed are delivered."""
        for stream in streams:
            try:
                with boundary("XGROUP CREATE"):
                    await self.redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
            except StoreError as exc:
                if exc.code != "BUSYGROUP":
                    raise

    async def register(self, name: str, registration: bytes) -> None:
        """Write the worker's registration (JSON) into the workers hash."""
        with boundary("HSET workers"):
            await self.redis.hset(self.keys.workers, name, registration)

    async def unregister(self, name: str) -> None:
        with boundary("HDEL workers"):
            await self.redis.hdel(self.keys.workers, name)

    # -- deliveries ------------------------------------------------------------------------

    async def read(
        self, consumer: str, streams: dict[str, str], count: int, block_ms: int | None
    ) -> list[Delivery]:
        """Up to ``count`` new entries per stream (``streams``: stream key -> queue name),
        blocking up to ``block_ms`` when idle (0: until one comes; None: not at all). A
        stream whose group is gone (the stream was deleted) gets its group again and
        delivers nothing this time."""
        try:
            with boundary("XREADGROUP"):
                reply = await self.redis.xreadgroup(
                    GROUP, consumer, dict.fromkeys(streams, ">"), count=count, block=block_ms
                )
        except StoreError as exc:
            if exc.code != "NOGROUP":
                raise
            await self.ensure_groups(streams)
            return []
        out: list[Delivery] = []
        for stream, entries in reply or ():
            queue, priority = split_level(streams[text(stream)])
            for entry_id, fields in entries:
                if fields:  # a deleted entry shows as an empty field map: nothing to run
                    out.append(
                        Delivery(
                            text(stream), queue, text(entry_id), fields.get("id", ""), priority
                        )
                    )
        return out

    async def take(
        self,
        consumer: str,
        queues: Sequence[str],
        count: int,
        *,
        age_ms: int = 30_000,
        park_max: int = 256,
    ) -> Taken:
        """``take.lua``: up to ``count`` entries of ``queues``, highest (effective)
        priority first, within the queues' limits (see the script)."""
        k = self.keys
        call = layout.take(
            self.scripts.common, k, "worker", TakeArgs(consumer, count, age_ms, park_max), queues
        )
        taken, cursors, next_due, more, wake, held = await self.scripts.run(call)
        out: list[Delivery] = []
        for j in range(0, len(taken), 4):
            queue = queues[int(taken[j]) - 1]
            priority = int(taken[j + 1])
            out.append(
                Delivery(
                    k.queue(queue, priority),
                    queue,
                    text(taken[j + 2]),
                    text(taken[j + 3]),
                    priority,
                )
            )
        where: dict[str, str] = {}
        if not out:
            # (the cursors to wait from: only when nothing was handed out, see take.lua)
            for i, q in enumerate(queues):
                streams = k.queue_streams(q)
                for p, stream in enumerate(streams):
                    where[stream] = text(cursors[i * len(streams) + p])
            # (an attempt ending whose owner has a limit adds an entry: a held task may
            # start)
            where[k.wake] = text(wake)
        return Taken(out, where, int(next_due or 0), bool(int(more)), bool(int(held)))

    async def wait(self, cursors: dict[str, str], block_ms: int) -> bool:
        """Block up to ``block_ms`` until one of the streams gets an entry after its
        cursor (XREAD: claims nothing; a stream that does not exist yet wakes the worker
        when it is made). Whether one came."""
        if not cursors:
            return False
        with boundary("XREAD BLOCK"):
            reply = await self.redis.xread(cursors, count=1, block=max(1, block_ms))
        return bool(reply)

    async def own_pending(
        self, consumer: str, streams: dict[str, str], count: int = 1000
    ) -> list[Delivery]:
        """The entries delivered to ``consumer`` and not yet acked (its pending list).

        A worker reads them after a connection error: a batch it read but could not
        start, or a START whose reply was lost (start.lua answers a repeat of it alike),
        is still there. They are listed with XPENDING and read with XRANGE, which change
        nothing: reading them again with ``XREADGROUP ... 0`` would count a delivery each
        time and reset their idle time. Entries deleted from the stream meanwhile (their
        task moved on) are acked here, which clears them from the pending list."""
        out: list[Delivery] = []
        for stream, level in streams.items():
            queue, priority = split_level(level)
            try:
                with boundary("XPENDING own"):
                    rows = await self.redis.xpending_range(
                        stream, GROUP, "-", "+", count, consumername=consumer
                    )
                    if not rows:
                        continue
                    async with self.redis.pipeline(transaction=False) as pipe:
                        for r in rows:
                            pipe.xrange(stream, r["message_id"], r["message_id"], count=1)
                        found = await pipe.execute()
            except StoreError as exc:
                if exc.code == "NOGROUP":
                    continue
                raise
            gone = []
            for r, entry in zip(rows, found, strict=True):
                entry_id = text(r["message_id"])
                if entry and entry[0][1]:
                    out.append(
                        Delivery(stream, queue, entry_id, entry[0][1].get("id", ""), priority)
                    )
                else:
                    gone.append(entry_id)
            if gone:
                with boundary("XACK gone"):
                    await self.redis.xack(stream, GROUP, *gone)
        return out

    # -- the scripts -----------------------------------------------------------------------

    async def start(
        self, consumer: str, lease_ms: int, nonce: str, deliveries: Sequence[Delivery]
    ) -> list[Started]:
        """``start.lua`` for a batch of deliveries; one reply each, in order (one call per
        queue of the batch, sent together)."""
        k = self.keys
        by_queue: dict[str, list[int]] = {}
        for i, d in enumerate(deliveries):
            by_queue.setdefault(d.queue, []).append(i)

        async def one(queue: str, idx: list[int]) -> list[Started]:
            call = layout.start(
                self.scripts.common,
                k,
                "worker",
                StartArgs(consumer, lease_ms, nonce, queue),
                [
                    (k.task_keys(d.task_id, d.queue, None, d.priority), Entry(d.entry))
                    for d in (deliveries[i] for i in idx)
                ],
            )
            return [Started.of(r) for r in await self.scripts.run(call)]

        if len(by_queue) == 1:
            ((queue, idx),) = by_queue.items()
            return await one(queue, idx)
        parts = await asyncio.gather(*(one(q, idx) for q, idx in by_queue.items()))
        out: list[Started | None] = [None] * len(deliveries)
        for idx, replies in zip(by_queue.values(), parts, strict=True):
            for i, r in zip(idx, replies, strict=True):
                out[i] = r
        return [r for r in out if r is not None]

    async def finish(self, items: Sequence[tuple[TaskKeys, Ending]]) -> list[TaskReply]:
        """``finish.lua`` for a batch of ended attempts; ``{code, state}`` each."""
        call = layout.finish(self.scripts.common, self.keys, "worker", items)
        return [TaskReply.of(r) for r in await self.scripts.run(call)]

    async def heartbeat(
        self, consumer: str, lease_ms: int, items: Sequence[tuple[TaskKeys, BeatItem]]
    ) -> list[Beat]:
        """``heartbeat.lua`` for a batch of running tasks; the word each answers."""
        call = layout.heartbeat(self.scripts.common, "worker", BeatArgs(consumer, lease_ms), items)
        return [Beat.of(w) for w in await self.scripts.run(call)]

    async def release(self, deliveries: Sequence[Delivery]) -> list[bool]:
        """``release.lua``: hand back deliveries never started; True for each re-queued."""
        k = self.keys
        call = layout.release(
            self.scripts.common,
            "worker",
            [
                (k.task_keys(d.task_id, d.queue, None, d.priority), Entry(d.entry))
                for d in deliveries
            ],
        )
        return [int(r) == 1 for r in await self.scripts.run(call)]

    # -- promotion (the worker's and the reaper's) -----------------------------------------

    async def due_scheduled(self, horizon_ms: int, count: int) -> list[str]:
        """Members of the scheduled zset due by ``horizon_ms`` (a local clock: the script
        decides by Redis TIME), earliest first."""
        with boundary("ZRANGEBYSCORE scheduled"):
            members: list[Any] = await self.redis.zrangebyscore(
                self.keys.scheduled, "-inf", horizon_ms, start=0, num=count
            )
        return [text(m) for m in members]

    async def promote(self, source: str, members: Sequence[str]) -> Promoted:
        """``promote.lua`` for scheduled members ``<queue>:<id>``."""
        k = self.keys
        items = []
        for m in members:
            queue, tid = split_member(m)
            items.append((k.task_keys(tid, queue), Member(m)))
        return Promoted.of(
            await self.scripts.run(layout.promote(self.scripts.common, source, items))
        )

    async def promote_due(self, source: str, limit: int = 200) -> int:
        """Promote due SCHEDULED tasks; returns how many. Candidates come from the zset by
        the local clock (with 1 s of slack); the script decides by Redis TIME."""
        members = await self.due_scheduled(int(time.time() * 1000) + 1000, limit)
        if not members:
            return 0
        return (await self.promote(source, members)).promoted

    # -- paused queues ---------------------------------------------------------------------

    async def paused(self, queues: Sequence[str]) -> set[str]:
        """Which of ``queues`` are paused (queue.lua's flags)."""
        if not queues:
            return set()
        with boundary("HMGET paused"):
            flags = await self.redis.hmget(self.keys.paused, list(queues))
        return {q for q, v in zip(queues, flags, strict=True) if v is not None}

    # -- the control channel ---------------------------------------------------------------

    #: the notice :meth:`control_notices` yields first, once subscribed (anything published
    #: before may have been missed: a caller reads again what notices would have told it)
    SUBSCRIBED = ("SUBSCRIBED", "")

    async def control_notices(self) -> AsyncIterator[tuple[str, str]]:
        """``(event, subject)`` of every notice published from now on: CANCEL / PAUSE of a
        task (its id), PAUSE_QUEUE / RESUME_QUEUE of a queue (its name); first
        :attr:`SUBSCRIBED`. Until the connection fails (:class:`rsjobs.RedisUnavailable`)
        or the caller stops."""
        pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        try:
            with boundary("SUBSCRIBE control"):
                await pubsub.subscribe(self.keys.control)
                yield self.SUBSCRIBED
                async for msg in pubsub.listen():
                    if msg.get("type") == "message":
                        event, _, tid = text(msg["data"]).partition(" ")
                        yield event, tid
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()
