"""The calls about tasks that clients and the web app make: submit, read, wait, control,
count. Every Redis error leaves as rsjobs's (:mod:`rsjobs.store.transient`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from ..schemas import EnqueueResult, HistoryEntry, TaskInfo, repeat_fields
from . import history, layout
from .keys import TaskKeys
from .layout import ControlArgs, NewTask
from .record import decode_task, field, text_fields
from .replies import TaskReply, text
from .scripts import Scripts
from .transient import boundary

__all__ = ["HistoryRows", "Overview", "Snapshot", "TaskRef", "Tasks"]

Row = tuple[str, dict[str, str]]


class TaskRef(NamedTuple):
    """What a route needs of a task before acting on it, in one read: its state and owner
    (who may see it) and its queue and dedup key (its script keys)."""

    state: str
    owner: str
    queue: str
    dedup: str


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

    # -- writes ----------------------------------------------------------------------------

    async def remember_queues(self, queues: Iterable[str]) -> None:
        """Add queue names to the namespace's set of queues (what ``stats`` lists)."""
        names = list(queues)
        if names:
            with boundary("SADD queues"):
                await self.redis.sadd(self.keys.queues, *names)

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
        :meth:`ref`)."""
        keys = self.keys.task_keys(task_id, ref.queue, ref.dedup or None)
        call = layout.control(
            self.scripts.common, source, keys, ControlArgs(event, reason, self.keys.control)
        )
        return TaskReply.of(await self.scripts.run(call, durable=durable))

    # -- reads -----------------------------------------------------------------------------

    async def get(self, task_id: str) -> TaskInfo | None:
        """The task as stored (None: no such task). Raises :class:`rsjobs.CorruptData`."""
        with boundary("HGETALL task"):
            h = await self.redis.hgetall(self.keys.task(task_id))
        return TaskInfo.from_record(decode_task(h)) if h else None

    async def get_many(self, task_ids: Sequence[str]) -> list[TaskInfo | None]:
        """Several tasks in one round trip; None for ids that name no task."""
        with boundary("HGETALL tasks"):
            async with self.redis.pipeline(transaction=False) as pipe:
                for tid in task_ids:
                    pipe.hgetall(self.keys.task(tid))
                rows = await pipe.execute()
        return [TaskInfo.from_record(decode_task(h)) if h else None for h in rows]

    async def ref(self, task_id: str) -> TaskRef | None:
        """State, owner, queue and dedup key of the task in one HMGET (None: no such
        task)."""
        with boundary("HMGET task"):
            state, owner, queue, dedup = await self.redis.hmget(
                self.keys.task(task_id), [field("state"), "owner", field("queue"), "dedup"]
            )
        if state is None:
            return None
        return TaskRef(text(state), text(owner), text(queue), text(dedup))

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
        with boundary("HGETALL task view"):
            h = await self.redis.hgetall(self.keys.task(task_id))
        if not h:
            return None
        f = text_fields(h)
        info = TaskInfo.from_record(decode_task(h))
        rows = history.entries(f, task_id)[-recent:] if recent else []
        return info, [HistoryEntry.from_entry(i, e, task_id, f) for i, e in rows]

    async def stats(self) -> dict[str, dict[str, int]]:
        """Per queue: task counts per state, stream length."""
        k = self.keys
        with boundary("stats"):
            queues = sorted(text(q) for q in await self.redis.smembers(k.queues))
            raw: dict[str, str] = await self.redis.hgetall(k.stats)
            async with self.redis.pipeline(transaction=False) as pipe:
                for q in queues:
                    pipe.xlen(k.queue(q))
                lengths = await pipe.execute()
        out: dict[str, dict[str, int]] = {q: {} for q in queues}
        for name, value in raw.items():
            q, _, state = text(name).rpartition(":")
            if q in out and state.isupper():
                out[q][state] = int(value)
        for q, n in zip(queues, lengths, strict=True):
            out[q]["stream_length"] = int(n)
        return out

    async def counters(self) -> dict[str, int]:
        """The namespace's counters (the ``stats`` hash): ``<queue>:<STATE>`` counts,
        ``ev:<EVENT>`` transitions, ``rej:<EVENT>`` refusals..."""
        with boundary("HGETALL stats"):
            raw: dict[str, str] = await self.redis.hgetall(self.keys.stats)
        return {text(k): int(v) for k, v in raw.items()}

    async def overview(self) -> Overview:
        """What a metrics scrape reads, in two round trips: the counters, the queues and
        their stream lengths, the registered workers, the events stream's length."""
        k = self.keys
        with boundary("overview"):
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hgetall(k.stats)
                pipe.smembers(k.queues)
                pipe.hlen(k.workers)
                pipe.xlen(k.events)
                raw, queues, workers, events = await pipe.execute()
            names = sorted(text(q) for q in queues)
            lengths: list[Any] = []
            if names:
                async with self.redis.pipeline(transaction=False) as pipe:
                    for q in names:
                        pipe.xlen(k.queue(q))
                    lengths = await pipe.execute()
        return Overview(
            {text(f): int(v) for f, v in raw.items()},
            names,
            dict(zip(names, (int(n) for n in lengths), strict=True)),
            int(workers),
            int(events),
        )


class Overview(NamedTuple):
    """The namespace at a glance (:meth:`Tasks.overview`)."""

    counters: dict[str, int]
    queues: list[str]
    lengths: dict[str, int]
    workers: int
    events: int
