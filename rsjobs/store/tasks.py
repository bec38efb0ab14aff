"""The calls about tasks that clients and the web app make: submit, read, wait, control,
count. Every Redis error leaves as rsjobs's (:mod:`rsjobs.store.transient`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from ..model import State, is_terminal
from ..schemas import (
    EnqueueResult,
    HistoryEntry,
    QueuePause,
    TaskFilter,
    TaskInfo,
    repeat_fields,
)
from . import history, layout
from .keys import PRIORITIES, TaskKeys
from .layout import ControlArgs, NewTask, QueueArgs, RetryArgs
from .marker import check_task
from .queues import QueueRegistry
from .record import decode_task, field, text_fields
from .replies import QueueReply, RetryReply, TaskReply, stored_priority, text
from .scripts import Scripts
from .successors import Successors
from .transient import boundary

if TYPE_CHECKING:
    from .selection import Selected, Selection

__all__ = ["HistoryRows", "Overview", "Snapshot", "TaskRef", "Tasks", "pause_record"]

#: the states whose "<queue>:<STATE>" counts the stats hash holds
_STATE_NAMES = frozenset(s.value for s in State)

Row = tuple[str, dict[str, str]]


class TaskRef(NamedTuple):
    """What a route needs of a task before acting on it, in one read: its state and owner
    (who may see it), its queue and dedup key (its script keys), and the task it was
    started over as (a RETRY / REPLAY answers that one)."""

    state: str
    owner: str
    queue: str
    dedup: str
    retried_as: str = ""
    #: its priority (its queue key is that level's stream)
    priority: int = 0


class HistoryRows(NamedTuple):
    """History entries as stored (id, fields), with the repeat counters of the refusals
    among them (the task hash's ``rep:<id>`` / ``rep_ts:<id>`` fields)."""

    rows: list[Row]
    repeats: dict[str, str]

    def entries(self, task_id: str) -> list[HistoryEntry]:
        return [HistoryEntry.from_entry(i, f, task_id, self.repeats) for i, f in self.rows]


class Snapshot(NamedTuple):
    """A task's state (None: no such task) and the first page of its history after an
    entry, read atomically; ``known``: that entry is of this history (or the start)."""

    state: str | None
    page: HistoryRows
    known: bool


def _rows(task_id: str, f: dict[str, str], after: int, count: int | None) -> HistoryRows:
    rows = history.entries(f, task_id, after)
    if count is not None:
        rows = rows[:count]
    names = [n for i, e in rows if e.get("rej") == "1" for n in repeat_fields(i)]
    return HistoryRows(rows, {n: f[n] for n in names if n in f})


class Tasks:
    """Task reads and writes of one namespace (``store.tasks``)."""

    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts
        self.redis = scripts.redis
        self.keys = scripts.keys
        self.successors = Successors(scripts)
        self.queues = QueueRegistry(scripts)

    # -- writes ----------------------------------------------------------------------------

    async def remember_queues(
        self, queues: Iterable[str], *, owner: str = "", quota: int = 0
    ) -> None:
        """Add queue names to the namespace's set of queues (what ``stats`` lists; every
        shard's, sharded: the reaper sweeps the queues of each shard), the new ones counted
        for ``owner`` against its ``quota`` (:class:`rsjobs.QueueQuotaExceeded`, nothing
        written, past it; :mod:`rsjobs.store.queues`)."""
        await self.queues.add(queues, owner=owner, quota=quota)

    async def enqueue(
        self, source: str, tasks: Sequence[tuple[TaskKeys, NewTask]], *, durable: bool = False
    ) -> list[EnqueueResult]:
        """``enqueue.lua`` for a batch of new tasks (keys: ``keys.task_keys(id, queue,
        dedup)``); what happened to each."""
        call = layout.enqueue(self.scripts.common, source, tasks)
        replies = await self.scripts.run(call, durable=durable)
        return [
            EnqueueResult(id=text(r[0]), state=text(r[1]), duplicate=bool(int(r[2])))
            for r in replies
        ]

    async def control(
        self,
        source: str,
        task_id: str,
        ref: TaskRef,
        event: str,
        reason: str,
        *,
        durable: bool = False,
    ) -> TaskReply:
        """``control.lua``: CANCEL, PAUSE or RESUME of one task (``ref`` from
        :meth:`ref`). A cancel of a task with successors runs the release step at once
        (they are cancelled, or released under the policy "always"; the reaper's next
        sweep does it when this cannot)."""
        if (other := await self.scripts.elsewhere(task_id)) is not None:
            return await other.tasks.control(source, task_id, ref, event, reason, durable=durable)
        k = self.keys
        keys = k.task_keys(task_id, ref.queue, ref.dedup or None, ref.priority)
        call = layout.control(
            self.scripts.common, k, source, keys, ControlArgs(event, reason, k.control)
        )
        reply = TaskReply.of(await self.scripts.run(call, durable=durable))
        if reply.released:
            await self.successors.release_soon(source)
        return reply

    async def retry(
        self,
        source: str,
        task_id: str,
        ref: TaskRef,
        event: str,
        new_id: str,
        reason: str,
        *,
        replaces: str = "",
        durable: bool = False,
    ) -> RetryReply:
        """``retry.lua``: RETRY or REPLAY of the finished task ``task_id`` (``ref`` from
        :meth:`ref`) as the new task ``new_id`` (an id of the same shard), on its queue
        and with its dedup key."""
        if (other := await self.scripts.elsewhere(task_id)) is not None:
            return await other.tasks.retry(
                source, task_id, ref, event, new_id, reason, replaces=replaces, durable=durable
            )
        k = self.keys
        old = k.task_keys(task_id, ref.queue, ref.dedup or None, ref.priority)
        new = k.task_keys(new_id, ref.queue, ref.dedup or None, ref.priority)
        call = layout.retry(
            self.scripts.common, source, old, new, RetryArgs(event, new_id, reason, replaces)
        )
        return RetryReply.of(await self.scripts.run(call, durable=durable))

    async def queue_flag(
        self, source: str, event: str, queue: str, reason: str, *, durable: bool = False
    ) -> QueueReply:
        """``queue.lua``: PAUSE_QUEUE or RESUME_QUEUE of ``queue``; on every shard of a
        sharded namespace, in shard order (each shard's scripts read their own flag): the
        reply is the last shard's, ``changed`` when any shard changed (a repeat completes
        what a failed call left half done)."""
        if (stores := await self.scripts.fan_out()) is not None:
            replies = [
                await s.tasks._queue_flag(source, event, queue, reason, durable) for s in stores
            ]
            return QueueReply(any(r.changed for r in replies), replies[-1].record)
        return await self._queue_flag(source, event, queue, reason, durable)

    async def _queue_flag(
        self, source: str, event: str, queue: str, reason: str, durable: bool
    ) -> QueueReply:
        k = self.keys
        call = layout.queue(
            self.scripts.common, k, source, QueueArgs(event, queue, reason, k.control)
        )
        return QueueReply.of(await self.scripts.run(call, durable=durable))

    async def paused_queues(self) -> dict[str, QueuePause]:
        """Every paused queue of the namespace, with its pause record (sharded: a queue
        paused on some shards only says so in ``shards``, e.g. ``"3 of 8"``)."""
        if (stores := await self.scripts.fan_out()) is not None:
            per = [await s.tasks._paused_here() for s in stores]
            out: dict[str, QueuePause] = {}
            for flags in per:
                for q, p in flags.items():
                    out.setdefault(q, p)
            for q, p in out.items():
                on = sum(q in flags for flags in per)
                if on < len(stores):
                    out[q] = msgspec.structs.replace(p, shards=f"{on} of {len(stores)}")
            return out
        return await self._paused_here()

    async def _paused_here(self) -> dict[str, QueuePause]:
        with boundary("HGETALL paused"):
            raw: dict[Any, Any] = await self.redis.hgetall(self.keys.paused)
        return {text(q): pause_record(text(q), text(v)) for q, v in raw.items()}

    # -- reads -----------------------------------------------------------------------------

    async def select(
        self,
        f: TaskFilter,
        *,
        limit: int,
        where: Callable[[Selected], bool] | None = None,
    ) -> Selection:
        """The tasks ``f`` (and ``where``) select: how many, and the oldest ``limit``
        (:func:`rsjobs.store.selection.select`)."""
        from .index import Index
        from .selection import select

        return await select(Index(self.scripts), f, limit=limit, where=where)

    async def get(self, task_id: str) -> TaskInfo | None:
        """The task as stored (None: no such task), and whether it waits on a paused queue.
        Raises :class:`rsjobs.CorruptData`."""
        return (await self.get_many([task_id]))[0]

    async def get_many(self, task_ids: Sequence[str]) -> list[TaskInfo | None]:
        """Several tasks in one round trip per shard; None for ids that name no task."""
        groups: dict[Tasks, list[int]] = {}
        for i, tid in enumerate(task_ids):
            other = await self.scripts.elsewhere(tid)
            groups.setdefault(other.tasks if other is not None else self, []).append(i)
        if len(groups) > 1 or (groups and self not in groups):
            out: list[TaskInfo | None] = [None] * len(task_ids)
            for part, where in groups.items():
                found = await part._get_here([task_ids[i] for i in where])
                for i, info in zip(where, found, strict=True):
                    out[i] = info
            return out
        return await self._get_here(task_ids)

    async def _get_here(self, task_ids: Sequence[str]) -> list[TaskInfo | None]:
        """:meth:`get_many` of ids on this shard."""
        with boundary("HGETALL tasks"):
            async with self.redis.pipeline(transaction=False) as pipe:
                for tid in task_ids:
                    pipe.hgetall(self.keys.task(tid))
                pipe.hkeys(self.keys.paused)
                *rows, paused = _raised(await pipe.execute(raise_on_error=False))
        held = {text(q) for q in paused}
        return [_info(h, held) if h else None for h in rows]

    async def ref(self, task_id: str) -> TaskRef | None:
        """State, owner, queue, dedup key and ``retried_as`` of the task in one HMGET
        (None: no such task). Raises :class:`rsjobs.NotMigrated` for a task hash of layout
        1 (its ``state`` is the long name's: see :mod:`.marker`)."""
        if (other := await self.scripts.elsewhere(task_id)) is not None:
            return await other.tasks.ref(task_id)
        names = [field("state"), "owner", field("queue"), "dedup", "retried_as", "state"]
        names.append(field("priority"))
        with boundary("HMGET task"):
            state, owner, queue, dedup, retried_as, layout1, pr = await self.redis.hmget(
                self.keys.task(task_id), names
            )
        if state is None:
            if layout1 is not None:
                check_task({"state": layout1}, task_id)
            return None
        return TaskRef(
            text(state),
            text(owner),
            text(queue),
            text(dedup),
            text(retried_as),
            stored_priority(pr),
        )

    async def by_dedup(self, dedup: str) -> TaskInfo | None:
        """The live task a dedup key names (None when it names none)."""
        with boundary("GET dedup"):
            tid = await self.redis.get(self.keys.dedup(dedup))
        return await self.get(text(tid)) if tid is not None else None

    async def by_dedup_many(self, dedups: Sequence[str]) -> list[TaskInfo | None]:
        """:meth:`by_dedup` of several keys in two round trips."""
        with boundary("MGET dedup"):
            tids = await self.redis.mget([self.keys.dedup(d) for d in dedups]) if dedups else []
        found = [(i, text(t)) for i, t in enumerate(tids) if t is not None]
        infos = await self.get_many([t for _, t in found]) if found else []
        out: list[TaskInfo | None] = [None] * len(dedups)
        for (i, _), info in zip(found, infos, strict=True):
            out[i] = info
        return out

    async def history(
        self, task_id: str, *, after: int = 0, count: int | None = None
    ) -> HistoryRows | None:
        """History entries after entry number ``after`` (at most ``count``), with the
        repeat counters of its refusals; None when there is no such task."""
        if (other := await self.scripts.elsewhere(task_id)) is not None:
            return await other.tasks.history(task_id, after=after, count=count)
        with boundary("HGETALL task history"):
            h = await self.redis.hgetall(self.keys.task(task_id))
        if not h:
            return None
        return _rows(task_id, text_fields(h), after, count)

    async def page(self, task_id: str, after: int, count: int) -> HistoryRows:
        """As :meth:`history`, empty when there is no such task."""
        return await self.history(task_id, after=after, count=count) or HistoryRows([], {})

    async def snapshot(self, task_id: str, after: int, count: int) -> Snapshot:
        """The task's state and the first page of its history after entry ``after``, in
        one read (the hash holds both): when the state is terminal, the terminal entry is
        in this page, a later one, or at or before ``after``. ``known``: ``after`` is an
        entry of this history (or its start)."""
        if (other := await self.scripts.elsewhere(task_id)) is not None:
            return await other.tasks.snapshot(task_id, after, count)
        with boundary("HGETALL task snapshot"):
            h = await self.redis.hgetall(self.keys.task(task_id))
        if not h:
            return Snapshot(None, HistoryRows([], {}), after == 0)
        f = text_fields(h)
        known = after <= int(f.get(history.COUNT) or 0)
        return Snapshot(f.get(field("state"), ""), _rows(task_id, f, after, count), known)

    async def view(self, task_id: str, recent: int) -> tuple[TaskInfo, list[HistoryEntry]] | None:
        """The task and its last ``recent`` history entries (oldest first), one read
        (None: no such task)."""
        if (other := await self.scripts.elsewhere(task_id)) is not None:
            return await other.tasks.view(task_id, recent)
        with boundary("HGETALL task view"):
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hgetall(self.keys.task(task_id))
                pipe.hkeys(self.keys.paused)
                h, paused = _raised(await pipe.execute(raise_on_error=False))
        if not h:
            return None
        f = text_fields(h)
        info = _info(h, {text(q) for q in paused})
        rows = history.entries(f, task_id)[-recent:] if recent else []
        return info, [HistoryEntry.from_entry(i, e, task_id, f) for i, e in rows]

    async def stats(self) -> dict[str, dict[str, int]]:
        """Per queue: task counts per state, stream length (of every priority level;
        sharded: summed over the shards, each read apart: not one atomic view)."""
        if (stores := await self.scripts.fan_out()) is not None:
            out: dict[str, dict[str, int]] = {}
            for part in [await s.tasks._stats_here() for s in stores]:
                for q, counts in part.items():
                    into = out.setdefault(q, {})
                    for name, n in counts.items():
                        into[name] = into.get(name, 0) + n
            return dict(sorted(out.items()))
        return await self._stats_here()

    async def _stats_here(self) -> dict[str, dict[str, int]]:
        k = self.keys
        with boundary("stats"):
            queues = sorted(text(q) for q in await self.redis.smembers(k.queues))
            raw: dict[str, str] = await self.redis.hgetall(k.stats)
            lengths = await self._lengths(queues)
        out: dict[str, dict[str, int]] = {q: {} for q in queues}
        for name, value in raw.items():
            q, _, state = text(name).rpartition(":")
            if q in out and state in _STATE_NAMES:
                out[q][state] = int(value)
        for q in queues:
            out[q]["stream_length"] = lengths[q]
        return out

    async def _lengths(self, queues: Sequence[str]) -> dict[str, int]:
        """queue -> the length of its streams, every priority level's (one round trip)."""
        k = self.keys
        if not queues:
            return {}
        async with self.redis.pipeline(transaction=False) as pipe:
            for q in queues:
                for stream in k.queue_streams(q):
                    pipe.xlen(stream)
            found = await pipe.execute()
        n = len(PRIORITIES)
        return {q: sum(int(x) for x in found[i * n : (i + 1) * n]) for i, q in enumerate(queues)}

    async def counters(self) -> dict[str, int]:
        """The namespace's counters (the ``stats`` hash): ``<queue>:<STATE>`` counts,
        ``ev:<EVENT>`` transitions, ``rej:<EVENT>`` refusals... (sharded: summed)."""
        if (stores := await self.scripts.fan_out()) is not None:
            out: dict[str, int] = {}
            for s in stores:
                for name, n in (await s.tasks._counters_here()).items():
                    out[name] = out.get(name, 0) + n
            return out
        return await self._counters_here()

    async def _counters_here(self) -> dict[str, int]:
        with boundary("HGETALL stats"):
            raw: dict[str, str] = await self.redis.hgetall(self.keys.stats)
        return {text(k): int(v) for k, v in raw.items()}

    async def overview(self) -> Overview:
        """What a metrics scrape reads, in two round trips: the counters, the queues and
        their stream lengths, the registered workers, the events stream's length, the
        paused queues (sharded: summed over the shards; the workers are shard 0's)."""
        if (stores := await self.scripts.fan_out()) is not None:
            parts = [await s.tasks._overview_here() for s in stores]
            counters: dict[str, int] = {}
            lengths: dict[str, int] = {}
            for p in parts:
                for name, n in p.counters.items():
                    counters[name] = counters.get(name, 0) + n
                for q, n in p.lengths.items():
                    lengths[q] = lengths.get(q, 0) + n
            return Overview(
                counters,
                sorted(lengths),
                dict(sorted(lengths.items())),
                parts[0].workers,
                sum(p.events for p in parts),
                set().union(*(p.paused for p in parts)),
            )
        return await self._overview_here()

    async def _overview_here(self) -> Overview:
        k = self.keys
        with boundary("overview"):
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hgetall(k.stats)
                pipe.smembers(k.queues)
                pipe.hlen(k.workers)
                pipe.xlen(k.events)
                pipe.hkeys(k.paused)
                raw, queues, workers, events, paused = await pipe.execute()
            names = sorted(text(q) for q in queues)
            lengths = await self._lengths(names)
        return Overview(
            {text(f): int(v) for f, v in raw.items()},
            names,
            lengths,
            int(workers),
            int(events),
            {text(q) for q in paused},
        )


class Overview(NamedTuple):
    """The namespace at a glance (:meth:`Tasks.overview`)."""

    counters: dict[str, int]
    queues: list[str]
    lengths: dict[str, int]
    workers: int
    events: int
    #: the paused queues
    paused: set[str] = set()


def _raised(replies: list[Any]) -> list[Any]:
    """A pipeline's replies, raising the first error as Redis answered it (the pipeline's
    own raise rewords it, which hides its code from :mod:`.transient`)."""
    for r in replies:
        if isinstance(r, Exception):
            raise r
    return replies


def _info(h: Any, paused: set[str]) -> TaskInfo:
    """The task of hash ``h``, marked when it waits on one of the ``paused`` queues."""
    info = TaskInfo.from_record(decode_task(h))
    if info.queue in paused and not is_terminal(info.state):
        return msgspec.structs.replace(info, queue_paused=True)
    return info


def pause_record(queue: str, raw: str) -> QueuePause:
    """A queue's pause flag from its record in the ``paused`` hash (queue.lua's JSON;
    ''  = not paused). A record that does not read still means paused."""
    if not raw:
        return QueuePause(queue=queue, paused=False)
    try:
        rec = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        rec = {}
    if not isinstance(rec, dict):
        rec = {}
    at, by, reason = rec.get("at"), rec.get("by"), rec.get("reason")
    return QueuePause(
        queue=queue,
        paused=True,
        since=int(at) if isinstance(at, int | float) else 0,
        by=by if isinstance(by, str) else "",
        reason=reason if isinstance(reason, str) else "",
    )
