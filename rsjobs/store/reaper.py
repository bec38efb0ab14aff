"""The reaper's calls: idle deliveries and their recovery, due deadlines, the workers
registry, the dead-letter stream, the sweep guard, and the reads of the memory report.

Promotion is the worker's call too (:mod:`rsjobs.store.work`); quarantine is in
:mod:`rsjobs.store.quarantine`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, NamedTuple

from ..errors import StoreError
from ..schemas import TaskInfo
from . import layout
from .keys import GROUP, PRIORITIES, WAITING_CONSUMER, TaskKeys, split_member
from .layout import DeadlineArgs, DeadlineItem, Entry, ReclaimArgs, WorkersArgs
from .record import TaskRecord, decode_task, field
from .replies import DeadlineOutcome, LinkCode, Recovery, WorkersSweep, text
from .scripts import Scripts
from .transient import boundary

__all__ = ["Candidate", "DeadLetterRow", "Reaping", "Registry", "Screened"]

SOURCE = "reaper"


class Screened(NamedTuple):
    """A task before a batch call: its dedup key (None when it has none or is gone), and
    whether fsm.lua's ``load`` takes its hash (gone, or with its id and queue)."""

    dedup: str | None
    intact: bool


class Candidate(NamedTuple):
    """A due member of the deadlines or scheduled zset, with the task it names."""

    member: str
    queue: str
    task_id: str


class Registry(NamedTuple):
    """The workers registry as stored: registrations and dead marks (JSON text by worker
    name), the queues, and per consumer the task ids of the deliveries it holds."""

    registrations: dict[str, str]
    marks: dict[str, str]
    queues: list[str]
    holdings: dict[str, list[str]]


class DeadLetterRow(NamedTuple):
    """A dead-letter stream entry, with what its task says now (state None: expired)."""

    entry: str
    fields: dict[str, str]
    state: str | None
    requeued_as: str


class Reaping:
    """The reaper's side of the store (``store.reaper``)."""

    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts
        self.redis = scripts.redis
        self.keys = scripts.keys

    # -- the sweep -------------------------------------------------------------------------

    async def take_guard(self, name: str, ms: int) -> str:
        """'' when reaper ``name`` may sweep now (it holds the guard key for ``ms``), else
        the name of the reaper that does."""
        g = self.keys.reaper_guard
        with boundary("SET reaper guard"):
            if await self.redis.set(g, name, nx=True, px=ms):
                return ""
            holder = await self.redis.get(g)
        return "" if holder is None or text(holder) == name else text(holder)

    async def queues(self) -> list[str]:
        with boundary("SMEMBERS queues"):
            return sorted(text(q) for q in await self.redis.smembers(self.keys.queues))

    async def now_ms(self) -> int:
        """Redis TIME in milliseconds (of the node serving the namespace, on a cluster)."""
        with boundary("TIME"):
            secs, micros = await self.redis.execute_command("TIME", keys=[self.keys.layout])
        return int(secs) * 1000 + int(micros) // 1000

    async def trim_events(self, before_ms: int) -> int:
        """Drop the events stream's entries older than ``before_ms`` (Redis time, ms): they
        name tasks past their retention, which no reader can read any more, and a namespace
        gone quiet would otherwise keep up to ``events_maxlen`` of them for ever. ``MINID
        ~``: whole stream nodes only, so cheap; returns how many entries went."""
        if before_ms <= 0:
            return 0
        with boundary("XTRIM events"):
            return int(
                await self.redis.xtrim(self.keys.events, minid=f"{before_ms}-0", approximate=True)
            )

    async def screen(self, task_ids: Sequence[str]) -> list[Screened]:
        """Each task's dedup key and whether ``load`` takes its hash, one round trip. A
        batch is sent without the tasks it would refuse: a script that raises half-way
        keeps the writes it made for the tasks before, but its reply, which counts them,
        is lost. Scripts that may finish a task need its real dedup key, so that it
        expires with the task (``retain`` in fsm.lua)."""
        if not task_ids:
            return []
        # ("state": a hash of layout 1, which load refuses too: see rsjobs.store.marker)
        names = ["dedup", field("state"), "id", field("queue"), "state"]
        with boundary("HMGET screen"):
            async with self.redis.pipeline(transaction=False) as pipe:
                for tid in task_ids:
                    pipe.hmget(self.keys.task(tid), names)
                rows: list[Any] = await pipe.execute(raise_on_error=False)
        out: list[Screened] = []
        for r in rows:
            if isinstance(r, Exception):  # e.g. the key is not a hash
                out.append(Screened(None, False))
            else:
                dedup, state, tid, queue, layout1 = r
                intact = (not state and not layout1) or bool(state and tid and queue)
                out.append(Screened(text(dedup) or None, intact))
        return out

    # -- recovery (reclaim.lua) ------------------------------------------------------------

    async def idle_deliveries(
        self, queue: str, start: str, count: int, idle_ms: int
    ) -> list[str] | None:
        """Entry ids of the queue's pending list idle for ``idle_ms`` at least, from
        ``start`` (XPENDING IDLE, which changes nothing); None when the queue has no
        group (no worker ever read it). ``queue`` may be a priority level's name
        (:func:`level_name`). Those held for a limit (``~waiting``: no worker holds them)
        are named with a ``~`` before their id: the caller pages past them."""
        qkey = self.keys.queue(queue)
        try:
            with boundary("XPENDING IDLE"):
                rows = await self.redis.xpending_range(
                    qkey, GROUP, min=start, max="+", count=count, idle=idle_ms
                )
        except StoreError as exc:
            if exc.code == "NOGROUP":
                return None
            raise
        return [
            ("~" if text(r["consumer"]) == WAITING_CONSUMER else "") + text(r["message_id"])
            for r in rows
        ]

    async def entry_tasks(self, queue: str, entries: Sequence[str]) -> list[str]:
        """The task id each entry carries ('' when the entry is gone from the stream)."""
        qkey = self.keys.queue(queue)
        with boundary("XRANGE entries"):
            async with self.redis.pipeline(transaction=False) as pipe:
                for e in entries:
                    pipe.xrange(qkey, e, e, count=1)
                rows = await pipe.execute()
        return [text(r[0][1].get("id", "")) if r else "" for r in rows]

    async def reclaim(
        self, queue: str, args: ReclaimArgs, items: Sequence[tuple[str, str, str | None]]
    ) -> list[Recovery]:
        """``reclaim.lua`` for idle entries ``(entry, task id, dedup)`` of one queue."""
        k = self.keys
        call = layout.reclaim(
            self.scripts.common,
            k,
            SOURCE,
            args,
            [(k.task_keys(tid, queue, d), Entry(e)) for e, tid, d in items],
        )
        return [Recovery(text(w)) for w in await self.scripts.run(call)]

    # -- per-owner RUNNING counts (recount.lua) ---------------------------------------------

    async def recount(self, queue: str, most: int = 2000) -> int | None:
        """Repair the queue's per-owner RUNNING counts from its pending lists
        (``recount.lua``): how many owners' counts were wrong; None when the queue moved
        while it was read (try again later) or holds more than ``most`` deliveries."""
        k = self.keys
        items: list[tuple[TaskKeys, Entry]] = []
        for p, stream in enumerate(k.queue_streams(queue)):
            try:
                with boundary("XPENDING recount"):
                    rows = await self.redis.xpending_range(stream, GROUP, "-", "+", most + 1)
            except StoreError as exc:
                if exc.code == "NOGROUP":
                    continue
                raise
            rows = [r for r in rows if text(r["consumer"]) != WAITING_CONSUMER]
            if len(items) + len(rows) > most:
                return None
            if not rows:
                continue
            ids = [text(r["message_id"]) for r in rows]
            with boundary("XRANGE recount"):
                async with self.redis.pipeline(transaction=False) as pipe:
                    for e in ids:
                        pipe.xrange(stream, e, e, count=1)
                    found = await pipe.execute()
            for e, f in zip(ids, found, strict=True):
                tid = text(f[0][1].get("id", "")) if f else ""
                items.append((k.task_keys(tid or "-", queue, None, p), Entry(e)))
        call = layout.recount(self.scripts.common, k, SOURCE, queue, items)
        code, fixed = await self.scripts.run(call)
        return int(fixed) if int(code) == 1 else None

    # -- deadlines (deadline.lua) ----------------------------------------------------------

    async def due_deadlines(self, now_ms: int, count: int) -> list[Candidate]:
        """Members of the deadlines zset due by ``now_ms`` (Redis TIME), earliest first."""
        with boundary("ZRANGEBYSCORE deadlines"):
            members = await self.redis.zrangebyscore(
                self.keys.deadlines, "-inf", now_ms, start=0, num=count
            )
        return [Candidate(text(m), *split_member(text(m))) for m in members]

    async def deadline(
        self, grace_ms: int, items: Sequence[tuple[Candidate, str | None]]
    ) -> list[DeadlineOutcome]:
        """``deadline.lua`` for due members ``(candidate, dedup)``; a random jitter each."""
        k = self.keys
        call = layout.deadline(
            self.scripts.common,
            SOURCE,
            DeadlineArgs(grace_ms),
            [
                (k.task_keys(c.task_id, c.queue, d), DeadlineItem(c.member, random.random()))
                for c, d in items
            ],
        )
        return [DeadlineOutcome(text(w)) for w in await self.scripts.run(call)]

    # -- the workers registry (workers.lua) ------------------------------------------------

    async def sweep_workers(self, queues: Sequence[str], args: WorkersArgs) -> WorkersSweep:
        """Mark silent workers dead, forget long-dead ones, delete idle empty consumers."""
        call = layout.workers(self.scripts.common, self.keys, SOURCE, args, queues)
        return WorkersSweep.of(await self.scripts.run(call))

    async def registry(self, limit: int = 100) -> Registry:
        """What ``rsjobs workers`` shows: registrations, dead marks and the deliveries each
        consumer holds (at most ``limit`` per queue). Sharded: the registrations and
        marks of every shard (workers register on each: the scripts of each read it),
        shard 0's first, and the deliveries held on every shard."""
        if (stores := await self.scripts.fan_out()) is not None:
            parts = [await st.reaper._registry_here(limit) for st in stores]
            regs: dict[str, str] = {}
            marks: dict[str, str] = {}
            holdings: dict[str, list[str]] = {}
            for part in parts:
                for n, v in part.registrations.items():
                    regs.setdefault(n, v)
                for n, v in part.marks.items():
                    marks.setdefault(n, v)
                for n, ids in part.holdings.items():
                    holdings.setdefault(n, []).extend(ids)
            queues = sorted({q for part in parts for q in part.queues})
            return Registry(regs, marks, queues, holdings)
        return await self._registry_here(limit)

    async def registrations(self) -> list[str]:
        """The registrations (JSON) of the workers not marked dead, in two reads (shard 0's:
        a worker registers on every shard)."""
        k = self.keys
        with boundary("workers registry"):
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hgetall(k.workers)
                pipe.hkeys(k.workers_dead)
                regs, dead = await pipe.execute()
        gone = {text(n) for n in dead}
        return [text(v) for n, v in regs.items() if text(n) not in gone]

    async def _registry_here(self, limit: int) -> Registry:
        k = self.keys
        holdings: dict[str, list[str]] = {}
        with boundary("workers registry"):
            regs = await self.redis.hgetall(k.workers)
            marks = await self.redis.hgetall(k.workers_dead)
            queues = sorted(text(q) for q in await self.redis.smembers(k.queues))
        streams = [k.queue(q, p) for q in queues for p in PRIORITIES]
        with boundary("EXISTS levels"):
            async with self.redis.pipeline(transaction=False) as pipe:
                for s in streams:
                    pipe.exists(s)
                there = await pipe.execute()
        for qkey, e in zip(streams, there, strict=True):
            if not e:
                continue
            try:
                with boundary("XPENDING summary"):
                    summary = await self.redis.xpending(qkey, GROUP)
            except StoreError:
                continue  # no group yet
            for c in summary.get("consumers") or []:
                name = text(c["name"])
                if name == WAITING_CONSUMER:
                    continue  # (no worker: it holds the entries of tasks held for a limit)
                with boundary("XPENDING consumer"):
                    rows = await self.redis.xpending_range(
                        qkey, GROUP, "-", "+", limit, consumername=name
                    )
                    async with self.redis.pipeline(transaction=False) as pipe:
                        for r in rows:
                            pipe.xrange(qkey, r["message_id"], r["message_id"], count=1)
                        found = await pipe.execute()
                ids = [text(f[0][1].get("id", "?")) if f else "?" for f in found]
                holdings.setdefault(name, []).extend(ids)
        return Registry(
            {text(n): text(v) for n, v in regs.items()},
            {text(n): text(v) for n, v in marks.items()},
            queues,
            holdings,
        )

    # -- dead letters ----------------------------------------------------------------------

    async def deadletters(
        self, count: int, before: str | None = None, *, inclusive: bool = False
    ) -> list[DeadLetterRow]:
        """The newest ``count`` dead-letter entries (older than entry ``before``, when
        given; ``inclusive``: or that entry), newest first, each with its task's state and
        ``requeued_as`` link now."""
        k = self.keys
        top = "+" if before is None else (before if inclusive else f"({before}")
        with boundary("dead letters"):
            rows = await self.redis.xrevrange(k.deadletter, top, "-", count=count)
            async with self.redis.pipeline(transaction=False) as pipe:
                for _, f in rows:
                    pipe.hmget(k.task(f.get("id", "")), [field("state"), "requeued_as"])
                tasks = await pipe.execute()
        return [
            DeadLetterRow(text(eid), dict(f), None if st is None else text(st), text(req))
            for (eid, f), (st, req) in zip(rows, tasks, strict=True)
        ]

    async def task_record(self, task_id: str) -> TaskRecord | None:
        """The task's hash as stored (None: no such task). Raises
        :class:`rsjobs.CorruptData`."""
        with boundary("HGETALL task"):
            h = await self.redis.hgetall(self.keys.task(task_id))
        return decode_task(h) if h else None

    async def task(self, task_id: str) -> TaskInfo | None:
        record = await self.task_record(task_id)
        return TaskInfo.from_record(record) if record is not None else None

    async def exists(self, task_id: str) -> bool:
        with boundary("EXISTS task"):
            return bool(await self.redis.exists(self.keys.task(task_id)))

    async def link(self, source: str, original: TaskKeys, clone: TaskKeys) -> LinkCode:
        """``link.lua``: link a re-queued dead letter and its clone, both ways."""
        call = layout.link(self.scripts.common, source, original, clone)
        code, _clone = await self.scripts.run(call)
        return LinkCode(int(code))

    # -- the memory report -----------------------------------------------------------------

    async def memory_usage(self, keys: Sequence[str]) -> list[int]:
        """MEMORY USAGE of each key (0 when it does not exist), one round trip."""
        with boundary("MEMORY USAGE"):
            async with self.redis.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.memory_usage(key)
                rows = await pipe.execute()
        return [int(r or 0) for r in rows]

    async def queue_sizes(self, queue: str) -> tuple[int, int]:
        """The length of the queue's streams (every priority level's) and their group's
        pending count (0 without a group)."""
        length = pending = 0
        for qkey in self.keys.queue_streams(queue):
            with boundary("XLEN queue"):
                n = int(await self.redis.xlen(qkey))
            if not n:
                continue
            length += n
            try:
                with boundary("XPENDING summary"):
                    pending += int((await self.redis.xpending(qkey, GROUP))["pending"])
            except StoreError:
                pass
        return length, pending

    async def sample_tasks(self, queue: str, sample: int) -> list[str]:
        """Ids of up to ``sample`` tasks of the queue: those on its stream, then recent
        ones from the events stream (finished or not)."""
        k = self.keys
        ids: list[str] = []
        with boundary("sample tasks"):
            for _, f in await self.redis.xrange(k.queue(queue), "-", "+", count=sample):
                if f.get("id"):
                    ids.append(text(f["id"]))
            if len(ids) < sample:
                for _, f in await self.redis.xrevrange(k.events, "+", "-", count=sample * 20):
                    if f.get("q") == queue and f.get("id") and f["id"] not in ids:
                        ids.append(text(f["id"]))
                        if len(ids) >= sample:
                            break
        return ids

    async def memory_info(self) -> dict[str, Any]:
        """INFO memory."""
        with boundary("INFO memory"):
            info: dict[str, Any] = await self.redis.info("memory")
        return info
