"""The worker's shard lanes: what it reads, holds and hears per shard of its namespace.

A namespace of S shards (:mod:`rsjobs.store.shards`) has each queue once per shard, on
that shard's keys (in a cluster, on that shard's node). A worker keeps one
:class:`ShardLane` per shard: the shard's store, its queue streams, the deliveries read
from them and not started yet, whether its own pending list must be read again, the
queues paused on that shard (the pause flags are written to every shard, and start.lua
checks its own shard's), and whether its last read found work. Each lane has its own
fetch loop, reading through its shard's store (on a connection of its own while it
blocks) and starting what it read with one single-slot start call; the worker's ends,
heartbeats, deferrals and releases are grouped per shard by the task ids
(:func:`group_by_shard`).

The lanes share the worker's concurrency by turns: a lane with work ("hot") reads without
blocking, for the free slots, which it holds while it reads; the other lanes then wait
for a slot, and are woken in the order they began to wait, so the lanes with work take
turns (round-robin) and none starves while another has a backlog. A turn takes every free
slot, so a shard's start and finish calls carry batches as large as an unsharded
worker's (what a script call costs Redis is mostly per call: smaller batches, one per
shard, would cost more Redis time per task). A lane whose read found nothing ("cold")
waits on a blocking read of its own (on a connection of its own: in a cluster, to its
shard's node) for a part of the free slots, holding none; what it gets beyond the free
slots waits in its buffer, started at its next turn. A namespace of one shard has one
lane that reads exactly as the worker always did: one blocking read for every free slot.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

from ..store.keys import PRIORITIES, level_name

if TYPE_CHECKING:
    from ..store import Delivery, Store
    from ..store.work import Taken

__all__ = ["ShardLane", "group_by_shard"]

T = TypeVar("T")


class ShardLane:
    """One shard's reading state in a worker (see the module)."""

    __slots__ = (
        "buffer",
        "held",
        "hot",
        "keys",
        "level_streams",
        "number",
        "paused",
        "recheck",
        "resumes",
        "start_error",
        "store",
        "streams",
        "taken",
    )

    def __init__(self, store: Store, queues: Iterable[str]) -> None:
        self.store = store
        #: the shard's number (0: the namespace's own, the only one when unsharded)
        self.number = store.number
        self.keys = store.keys
        queues = list(queues)
        #: the shard's priority-0 queue streams (stream key -> queue name), and the
        #: streams of every level (stream key -> level name)
        self.streams = {self.keys.queue(q): q for q in queues}
        self.level_streams = {
            self.keys.queue(q, p): level_name(q, p) for q in queues for p in PRIORITIES
        }
        #: deliveries read from this shard and not started yet
        self.buffer: deque[Delivery] = deque()
        #: read this consumer's own pending list of this shard before the next fetch (at
        #: start, after a connection error, once a lease)
        self.recheck = True
        #: queues whose pause flag is set on this shard (queue.lua): not read here until a
        #: RESUME_QUEUE notice on this shard's channel (or a read of its flags) says so
        self.paused: set[str] = set()
        #: how often each queue was seen going on this shard (see Worker._resumed)
        self.resumes: dict[str, int] = {}
        #: a start call of this lane failed: its fetch loop handles the error
        self.start_error: BaseException | None = None
        #: whether the last read found work (a sharded worker reads a hot lane without
        #: blocking, a cold one with a blocking read; see the module)
        self.hot = True
        #: the last take on this shard found owners at their limits (see Worker._take)
        self.held = False
        #: what the last take on this shard answered (where to wait when it gave nothing)
        self.taken: Taken | None = None

    def __repr__(self) -> str:
        return f"ShardLane({self.number}, hot={self.hot}, buffered={len(self.buffer)})"

    def streams_to_read(self) -> dict[str, str]:
        """The streams of the queues not paused on this shard (stream key -> queue)."""
        if not self.paused:
            return self.streams
        return {k: q for k, q in self.streams.items() if q not in self.paused}


def group_by_shard(
    items: Iterable[T], shard_of: Callable[[T], int], count: int
) -> dict[int, list[T]]:
    """``items`` grouped by their shard, each group in the items' order, the shards in
    order of first appearance (one group, the items as a list, when ``count`` is 1)."""
    if count == 1:
        return {0: list(items)}
    groups: dict[int, list[T]] = {}
    for item in items:
        groups.setdefault(shard_of(item), []).append(item)
    return groups
