"""From a filter to the tasks it selects: the one step every bulk action takes first.

The candidates come from the namespace's list indexes (:class:`rsjobs.store.index.Index`:
the ``done:<STATE>`` streams, the queue streams, the schedule and the owner and label
tags), the same ones ``GET /tasks`` reads, page after page: the work is proportional to
the tasks the filter's states, queues, owner and labels name, never a scan of the
keyspace. Each candidate's fields are read again (one pipelined HMGET per page) and the
whole filter applied here, so what a selection answers is a snapshot; each action checks
its task once more in its own script.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import NamedTuple

from ..schemas import TaskFilter
from .index import MAX_PAGE, Index, ListQuery
from .keys import Keys
from .record import field
from .replies import text
from .tasks import TaskRef
from .transient import boundary

__all__ = ["Selected", "Selection", "select"]

#: the task hash fields a selection reads, in the order of :class:`Selected`
_FIELDS = [
    "id",
    field("state"),
    field("queue"),
    field("type"),
    "owner",
    field("created_at"),
    "dedup",
    "retried_as",
    "wf",
    field("priority"),
]
_ID_CHARS = frozenset("0123456789abcdef")


class Selected(NamedTuple):
    """One selected task, with what an action needs to call its script."""

    id: str
    state: str
    queue: str
    type: str
    owner: str
    created_at: int
    dedup: str
    retried_as: str
    wf: str
    priority: int = 0

    @property
    def ref(self) -> TaskRef:
        return TaskRef(
            self.state, self.owner, self.queue, self.dedup, self.retried_as, self.priority
        )


class Selection(NamedTuple):
    """``matched`` tasks match; ``tasks`` are the oldest ``limit`` of them (by creation),
    oldest first."""

    matched: int
    tasks: list[Selected]


def matches(f: TaskFilter, t: Selected) -> bool:
    """Whether the task ``t`` matches every field ``f`` names."""
    return (
        (f.queue is None or t.queue == f.queue)
        and (f.state is None or t.state == f.state)
        and (f.type is None or t.type == f.type)
        and (f.owner is None or t.owner == f.owner)
        and (f.since is None or t.created_at >= f.since)
        and (f.until is None or t.created_at < f.until)
    )  # labels: the index answers only tasks that have them all


async def select(
    index: Index,
    f: TaskFilter,
    *,
    limit: int,
    where: Callable[[Selected], bool] | None = None,
    page: int = MAX_PAGE,
) -> Selection:
    """The tasks of the namespace that match ``f`` (and ``where``, the action's own
    condition: e.g. a retry takes finished tasks only): how many, and the oldest
    ``limit``."""
    keys, redis = index.keys, index.redis
    q = ListQuery(
        states=(f.state,) if f.state else (),
        queues=(f.queue,) if f.queue else (),
        type=f.type or "",
        owner=f.owner or "",
        labels=tuple(sorted((f.labels or {}).items())),
        limit=page,
    )
    # the oldest `limit` matches: a heap whose top is the youngest kept (creation time and
    # id negated: ids are 32 hex digits)
    oldest: list[tuple[int, int, Selected]] = []
    matched = 0
    seen: set[str] = set()  # a task moving between indexes while they are read
    while True:
        found = await index.page(q)
        ids = [t.id for t in found.items if t.id not in seen]
        seen.update(ids)
        # each task's keys are its shard's (one read per shard of a sharded namespace)
        shard_keys = [await _keys_of(index, keys, tid) for tid in ids]
        rows: list[list[object]] = [[] for _ in ids]
        for k in {id(k): k for k in shard_keys}.values():
            mine = [i for i, sk in enumerate(shard_keys) if sk is k]
            with boundary("HMGET tasks"):
                async with redis.pipeline(transaction=False) as pipe:
                    for i in mine:
                        pipe.hmget(k.task(ids[i]), _FIELDS)
                    for i, row in zip(mine, await pipe.execute(), strict=True):
                        rows[i] = row
        for tid, row, k in zip(ids, rows, shard_keys, strict=True):
            t = _selected(k, k.task(tid), row)
            if t is None or not matches(f, t) or (where is not None and not where(t)):
                continue
            matched += 1
            item = (-t.created_at, -int(t.id, 16), t)
            if len(oldest) < limit:
                heapq.heappush(oldest, item)
            elif limit and item > oldest[0]:
                heapq.heapreplace(oldest, item)
        if found.cursor is None:
            break
        q = q._replace(cursor=found.cursor)
    tasks = sorted((t for _, _, t in oldest), key=lambda t: (t.created_at, t.id))
    return Selection(matched, tasks)


async def _keys_of(index: Index, keys: Keys, task_id: str) -> Keys:
    """The keys of the shard of ``task_id`` (``keys``: the index's own)."""
    other = await index.scripts.elsewhere(task_id)
    return other.keys if other is not None else keys


def _selected(keys: Keys, name: str, row: Iterable[object]) -> Selected | None:
    """The selected task of hash ``name``; None for a hash that is no task of this
    namespace's scripts (no state, an id that is not the key's)."""
    tid, state, queue, typ, owner, created, dedup, retried_as, wf, pr = (text(v) for v in row)
    if not state or len(tid) != 32 or not set(tid) <= _ID_CHARS or name != keys.task(tid):
        return None
    return Selected(
        tid,
        state,
        queue,
        typ,
        owner,
        int(created) if created.isdigit() else 0,
        dedup,
        retried_as,
        wf,
        int(pr) if pr.isdigit() and len(pr) < 3 else 0,
    )
