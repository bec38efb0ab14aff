"""The task lists (``store.index``): pages of tasks, newest first, read from the indexes the
transition scripts keep (``index_move`` in ``fsm.lua``), never from a scan of the keyspace;
and their trim with retention (``trim.lua``, the reaper's).

A list is driven by one kind of index, chosen on its first page and kept in its cursor:

- by state (driver ``s``): the sources of each state asked for: a queue's stream for
  PENDING and RUNNING (RUNNING: its delivered entries), ``waiting`` (by creation time),
  ``scheduled``, ``paused:tasks``,
  ``deadlines`` for DEFERRED (by the end of its longest wait), and a
  ``done:<STATE>`` stream per terminal state; merged by the time each orders a task by;
- by tag (driver ``t<n>``): the tags index's range of the owner or of one label, ordered
  by creation time; chosen when that range holds fewer tasks than the state sources do.
  A list with an owner (every list of an owner's token) is always driven by the owner's
  own range (``t0``): it never reads an index that holds other owners' tasks, so its
  items, cursor and time depend on that owner's tasks alone.

What a page hands out as its cursor is sealed (:mod:`.seal`): opaque, authenticated, and
bound to the list's filters and owner.

Every candidate is checked against its task's hash (the entry may be stale: the task left
that state, or expired) and against the other filters; a page looks at a bounded number of
candidates (:data:`SCAN_MIN`, or 10 per task asked for), so a very selective filter may
give a short page with a cursor to go on. The commands a page sends do not grow with the
number of tasks held.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import AsyncGenerator, Sequence
from typing import Any, NamedTuple

import msgspec

from ..errors import ConfigError, CorruptData
from ..labels import decode_labels
from ..model import TERMINAL, State
from ..schemas import TaskPage, TaskSummary
from . import layout
from .cursor import Cursor, decode_cursor, encode_cursor, fingerprint
from .keys import GROUP, PRIORITIES, TERMINAL_STATES, WAITING_CONSUMER
from .layout import Expect, SummaryArgs, TrimArgs
from .record import decode_task
from .replies import text
from .scripts import Scripts
from .seal import check_form, new_key, open_cursor, seal_cursor
from .sources import (
    NO_UNTIL,
    After,
    Bound,
    Candidate,
    DoneStream,
    QueueStream,
    ScoreZset,
    Source,
    TagRange,
    Upto,
)
from .transient import boundary

__all__ = [
    "MAX_PAGE",
    "SCAN_MIN",
    "STATES",
    "Index",
    "ListQuery",
    "PagePart",
    "TrimReport",
    "label_tag",
    "owner_tag",
]

#: every state, in the order a task passes through them
STATES = tuple(s.value for s in State)
#: the largest page
MAX_PAGE = 500
#: a page looks at no more than this many candidates, or 10 per task asked for
SCAN_MIN = 1000
#: the most candidates one fetch of one source asks for
FETCH_MAX = 500
#: the most candidates one call of summaries.lua reads
BATCH_MAX = 500
#: the task hash fields a list reads (and the history, for a finished task's times)
_FIELDS = (
    "id", "s", "t", "q", "owner", "labels", "e", "a", "f", "ma", "c", "u", "b", "progress",
    "error", "error_type", "due_at", "consumer", "hn", "wf", "pr",
)  # fmt: skip
_FIELD_LIST = " ".join(_FIELDS)
_json = msgspec.json.Encoder()
_ACTIVE = frozenset({"PENDING", "RUNNING"})


def owner_tag(owner: str) -> str:
    """The tags index's tag of an owner (``tags_of`` in fsm.lua)."""
    return f"o{len(owner.encode())}:{owner}"


def label_tag(key: str, value: str) -> str:
    """The tags index's tag of a label (``tags_of`` in fsm.lua)."""
    kv = f"{key}={value}"
    return f"l{len(kv.encode())}:{kv}"


class ListQuery(NamedTuple):
    """What a list asks for (checked by :func:`rsjobs.queries.list_query`): tasks in one of
    ``states`` (empty: any), of one of ``queues`` (empty: any), of ``type``, ``owner``
    and every label of ``labels`` (empty: any), listed at or after ``since`` and at or
    before ``until`` (ms; 0: no bound), ``limit`` of them after ``cursor``."""

    states: tuple[str, ...] = ()
    queues: tuple[str, ...] = ()
    type: str = ""
    owner: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    since: int = 0
    until: int = 0
    cursor: str | None = None
    limit: int = 50

    def tags(self) -> list[str]:
        """The tags it filters by: the owner's, then each label's."""
        out = [owner_tag(self.owner)] if self.owner else []
        return out + [label_tag(k, v) for k, v in self.labels]

    def fingerprint(self) -> str:
        return fingerprint(
            [sorted(self.states), sorted(self.queues), self.type, self.owner,
             sorted(self.labels), self.since, self.until]
        )  # fmt: skip

    def filter_json(self) -> str:
        """The filters as ``summaries.lua`` takes them (a JSON object)."""
        f: dict[str, Any] = {}
        if self.states:
            f["states"] = list(self.states)
        if self.queues:
            f["queues"] = list(self.queues)
        if self.type:
            f["type"] = self.type
        if self.owner:
            f["owner"] = self.owner
        if self.labels:
            f["labels"] = dict(self.labels)
        return _json.encode(f).decode()

    def matches(self, f: dict[str, Any]) -> bool:
        """Whether a task's hash fields pass every filter."""
        if self.states and f.get("s") not in self.states:
            return False
        if self.queues and f.get("q") not in self.queues:
            return False
        if self.type and f.get("t") != self.type:
            return False
        if self.owner and f.get("owner") != self.owner:
            return False
        if self.labels:
            have = decode_labels(f.get("labels") or "")
            return all(have.get(k) == v for k, v in self.labels)
        return True


class PagePart(NamedTuple):
    """One shard's page (:meth:`Index.part`): its tasks and their candidates (list
    positions), the candidate its cursor names (None: nothing is left) and that cursor,
    the query's fingerprint and the index that drives it."""

    items: list[TaskSummary]
    cands: list[Candidate]
    last: Candidate | None
    cursor: str | None
    fingerprint: str
    driver: str

    def cursor_after(self, c: Candidate) -> str:
        """The cursor of a page that starts after candidate ``c`` of this shard."""
        return encode_cursor(Cursor(self.fingerprint, self.driver, *c.cursor_key))


class TrimReport(NamedTuple):
    """What a trim removed: tags:trim entries handled, tags members, done entries."""

    handled: int = 0
    members: int = 0
    done: int = 0


class _Head:
    """A source's next candidate in the merge heap (the largest key comes out first)."""

    __slots__ = ("c", "key")

    def __init__(self, c: Candidate) -> None:
        self.c = c
        self.key = c.key

    def __lt__(self, other: _Head) -> bool:
        return self.key > other.key


def _entry_id(raw: Any) -> tuple[int, int] | None:
    ms, _, seq = text(raw).partition("-")
    return (int(ms), int(seq)) if ms.isdigit() and seq.isdigit() else None


class Index:
    """Task lists of one namespace, and the trim of their indexes."""

    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts
        self.redis = scripts.redis
        self.keys = scripts.keys
        #: the namespace's cursor key (:mod:`.seal`), once read
        self._cursor_key: bytes | None = None

    # -- pages -----------------------------------------------------------------------------

    async def page(self, q: ListQuery) -> TaskPage:
        """One page of the list ``q`` asks for, newest first. Raises
        :class:`rsjobs.ConfigError` for a cursor that is not one this namespace sealed for
        this list (its filters and owner: :mod:`.seal`). A sharded namespace's list merges
        its shards' pages (:mod:`.merged`)."""
        context = "tasks:" + q.fingerprint()
        if q.cursor:
            check_form(q.cursor)  # (before any read: a malformed one costs nothing)
            plain = open_cursor(await self.cursor_key(create=False), context, q.cursor)
            q = q._replace(cursor=plain)
        if (stores := await self.scripts.fan_out()) is not None:
            from .merged import task_page

            page = await task_page(stores, q)
        else:
            part = await self.part(q)
            page = TaskPage(items=part.items, cursor=part.cursor)
        if page.cursor is None:
            return page
        key = await self.cursor_key(create=True)
        assert key is not None
        return TaskPage(items=page.items, cursor=seal_cursor(key, context, page.cursor))

    async def cursor_key(self, *, create: bool) -> bytes | None:
        """The namespace's cursor key (:mod:`.seal`); None when it has none and ``create``
        is false (nothing is written then), else set once with ``SET NX``."""
        if self._cursor_key is not None:
            return self._cursor_key
        name = self.keys.cursor_key
        with boundary("cursor key"):
            raw = await self.redis.get(name)
            if raw is None and create:
                await self.redis.set(name, new_key(), nx=True)
                raw = await self.redis.get(name)
        if raw is None:
            return None
        value = text(raw)
        try:
            key = bytes.fromhex(value)
        except ValueError:
            key = b""
        if len(key) < 16:
            raise CorruptData("key", name, "not a cursor key (hex of 16 bytes or more)")
        self._cursor_key = key
        return key

    async def part(self, q: ListQuery) -> PagePart:
        """:meth:`page` of this shard, with the list position of each task handed out and
        of the last candidate looked at (what a merge of shards' pages needs)."""
        fp = q.fingerprint()
        cursor = decode_cursor(q.cursor) if q.cursor else None
        if cursor is not None and cursor.query != fp:
            raise ConfigError("invalid cursor: it belongs to a list with other filters")
        states = q.states or STATES
        tags = q.tags()
        if q.owner:
            # an owner's list reads the owner's own range of the tags index, never an
            # index other owners' tasks are in: what it answers, and how long it takes,
            # depend on the owner's tasks only (the other filters are checked on each)
            driver = "t0"
            if cursor is not None and cursor.driver != driver:
                raise ConfigError("invalid cursor: pass the cursor a page of this list returned")
            queues: list[str] = []
        else:
            queues = list(q.queues) or await self._queues()
            driver = (
                cursor.driver if cursor is not None else await self._driver(states, queues, tags)
            )
        # RUNNING without PENDING: a queue's stream is read from its last delivered entry
        capped = driver == "s" and "RUNNING" in states and "PENDING" not in states
        levels: dict[str, list[int]] = {}
        if driver == "s" and any(s in _ACTIVE for s in states):
            levels = await self.levels(queues)
        delivered = await self._last_delivered(levels) if capped else {}
        sources = self._sources(q, driver, states, levels, tags, delivered, cursor)
        items, cands, last = await self._collect(q, sources)
        return PagePart(
            items,
            cands,
            last,
            None if last is None else encode_cursor(Cursor(fp, driver, *last.cursor_key)),
            fp,
            driver,
        )

    async def _queues(self) -> list[str]:
        with boundary("SMEMBERS queues"):
            return sorted(text(x) for x in await self.redis.smembers(self.keys.queues))

    async def levels(self, queues: Sequence[str]) -> dict[str, list[int]]:
        """queue -> the priority levels it has a stream of (0 always: its own stream)."""
        k = self.keys
        with boundary("EXISTS levels"):
            async with self.redis.pipeline(transaction=False) as pipe:
                for name in queues:
                    for p in PRIORITIES[1:]:
                        pipe.exists(k.queue(name, p))
                found = await pipe.execute()
        n = len(PRIORITIES) - 1
        return {
            name: [0]
            + [p for p, e in zip(PRIORITIES[1:], found[i * n : (i + 1) * n], strict=True) if e]
            for i, name in enumerate(queues)
        }

    async def _last_delivered(self, levels: dict[str, list[int]]) -> dict[str, tuple[int, int]]:
        """stream -> its group's last delivered entry id ((0, 0): none, or no group), for
        the streams of the queues' levels."""
        streams = [self.keys.queue(q, p) for q, ps in levels.items() for p in ps]
        with boundary("XINFO GROUPS"):
            async with self.redis.pipeline(transaction=False) as pipe:
                for stream in streams:
                    pipe.xinfo_groups(stream)
                replies = await pipe.execute(raise_on_error=False)
        out: dict[str, tuple[int, int]] = {}
        for stream, groups in zip(streams, replies, strict=True):
            out[stream] = (0, 0)
            if isinstance(groups, list):
                for g in groups:
                    if text(g.get("name")) == GROUP:
                        out[stream] = _entry_id(g.get("last-delivered-id")) or (0, 0)
        return out

    async def _driver(self, states: Sequence[str], queues: Sequence[str], tags: list[str]) -> str:
        """``t<n>`` when tag n's range holds fewer tasks than the states' sources, else
        ``s``: read the fewest candidates."""
        if not tags:
            return "s"
        k = self.keys
        live = [f"{qn}:{s}" for qn in queues for s in states if s not in TERMINAL]
        done = [s for s in states if s in TERMINAL]
        with boundary("list sizes"):
            async with self.redis.pipeline(transaction=False) as pipe:
                for tag in tags:
                    pipe.zlexcount(k.tags, f"[{tag}|", f"({tag}}}")
                if live:
                    pipe.hmget(k.stats, live)
                for s in done:
                    pipe.xlen(k.done_stream(s))
                replies = await pipe.execute()
        sizes = [int(n) for n in replies[: len(tags)]]
        rest = replies[len(tags) :]
        by_state = sum(int(v or 0) for v in rest[0]) if live else 0
        by_state += sum(int(n) for n in rest[1 if live else 0 :])
        best = min(range(len(tags)), key=sizes.__getitem__)
        return f"t{best}" if sizes[best] < by_state else "s"

    def _sources(
        self,
        q: ListQuery,
        driver: str,
        states: Sequence[str],
        levels: dict[str, list[int]],
        tags: list[str],
        delivered: dict[str, tuple[int, int]],
        cursor: Cursor | None,
    ) -> list[Source]:
        k = self.keys
        top = Upto(min(q.until or NO_UNTIL, NO_UNTIL), True)
        made: list[Source] = []
        if driver.startswith("t") and driver[1:].isdigit() and int(driver[1:]) < len(tags):
            made.append(TagRange(k.tags, tags[int(driver[1:])], top, q.since))
        elif driver == "s":
            active = [s for s in states if s in _ACTIVE]
            if active:
                for name, ps in levels.items():
                    for p in ps:
                        key = k.queue(name, p)
                        cap = delivered.get(key) if "PENDING" not in active else None
                        made.append(QueueStream(key, name, active, top, q.since, cap, p))
            if "WAITING" in states:
                made.append(ScoreZset(k.waiting, "a", "WAITING", q.queues, top, q.since))
            if "SCHEDULED" in states:
                made.append(ScoreZset(k.scheduled, "s", "SCHEDULED", q.queues, top, q.since))
            if "PAUSED" in states:
                made.append(ScoreZset(k.paused_tasks, "p", "PAUSED", q.queues, top, q.since))
            if "DEFERRED" in states:
                # the deadlines zset holds each DEFERRED task by the end of its longest
                # wait (and other tasks' deadlines, which the state check skips)
                made.append(ScoreZset(k.deadlines, "w", "DEFERRED", q.queues, top, q.since))
            for s in TERMINAL_STATES:
                if s in states:
                    made.append(DoneStream(k.done_stream(s), s, q.queues, top, q.since))
        else:
            raise ConfigError("invalid cursor: pass the cursor a page of this list returned")
        if cursor is not None:
            for src in made:
                src.next = _resume(src, cursor)
        return made

    async def _candidates(
        self, sources: list[Source], want: int
    ) -> AsyncGenerator[Candidate, None]:
        """Every candidate of ``sources``, merged newest first (largest key first). A
        source's first fetch asks for its share of twice ``want``; each next one for twice
        as many as its last (a list of many sources does not read many entries of each)."""
        for s in sources:
            s.batch = min(FETCH_MAX, max(10, -(-2 * want // len(sources))))
        heap: list[_Head] = []
        queued: set[int] = set()
        while True:
            starving = [
                s for s in sources if not s.buffer and not s.exhausted and id(s) not in queued
            ]
            if starving:
                await self._fetch(starving)
            for s in sources:
                if s.buffer and id(s) not in queued:
                    heapq.heappush(heap, _Head(s.buffer[0]))
                    queued.add(id(s))
            if any(not s.buffer and not s.exhausted for s in sources):
                continue  # a source skipped a whole batch of seen members: fetch on
            if not heap:
                return
            head = heapq.heappop(heap)
            src = head.c.source
            src.buffer.popleft()
            queued.discard(id(src))
            yield head.c

    async def _fetch(self, sources: list[Source]) -> None:
        with boundary("list indexes"):
            async with self.redis.pipeline(transaction=False) as pipe:
                for s in sources:
                    s.command(pipe, s.batch)
                replies = await pipe.execute()
        for s, reply in zip(sources, replies, strict=True):
            s.take(reply, s.batch)
            s.batch = min(FETCH_MAX, 2 * s.batch)

    async def _collect(
        self, q: ListQuery, sources: list[Source]
    ) -> tuple[list[TaskSummary], list[Candidate], Candidate | None]:
        """The page's tasks and their candidates, and the candidate the cursor after it
        names (None: nothing is left)."""
        stream = self._candidates(sources, q.limit)
        try:
            return await self._fill(q, stream, sources)
        finally:
            await stream.aclose()

    async def _fill(
        self, q: ListQuery, stream: AsyncGenerator[Candidate, None], sources: list[Source]
    ) -> tuple[list[TaskSummary], list[Candidate], Candidate | None]:
        scan = max(SCAN_MIN, 10 * q.limit)
        items: list[TaskSummary] = []
        cands: list[Candidate] = []
        seen: set[str] = set()
        passed = 0  # candidates the merge passed on (marks included)
        read = 0  # candidates read, for the share that passes the filters

        def looked() -> int:  # the index entries looked at, those dropped at once included
            return passed + sum(s.skipped for s in sources)

        last: Candidate | None = None
        more = True  # the merge may have more candidates
        left = False  # candidates of the last batch were left after the page's last task
        while len(items) < q.limit and more and looked() < scan:
            # a batch of candidates in list order, read in one round trip: as many as the
            # share that passed so far says it takes to fill the page
            batch: list[Candidate] = []
            share = max(len(items) / read, 0.05) if read else 1.0
            size = min(BATCH_MAX, max(20, math.ceil((q.limit - len(items)) / share)))
            more = False
            async for c in stream:
                passed += 1
                last = c
                if c.task_id:  # (a mark only moves the cursor)
                    batch.append(c)
                if len(batch) >= size or looked() >= scan:
                    more = True
                    break
            read += len(batch)
            for n, (c, summary) in enumerate(zip(batch, await self._read(q, batch), strict=True)):
                if summary is None or c.task_id in seen:
                    continue
                seen.add(c.task_id)
                items.append(summary)
                cands.append(c)
                if len(items) == q.limit:
                    last, left = c, n < len(batch) - 1  # the next page starts after it
                    break
        if last is None or not (more or left):
            return items, cands, None  # the merge has nothing after this page
        if len(items) < q.limit and looked() < scan:
            return items, cands, None
        return items, cands, last

    async def _read(self, q: ListQuery, batch: list[Candidate]) -> list[TaskSummary | None]:
        """The summary of each candidate still true and wanted (None for the others)."""
        if not batch:
            return []
        k = self.keys
        call = layout.summaries(
            self.scripts.common,
            "api",
            SummaryArgs(_FIELD_LIST, q.filter_json()),
            [(k.task(c.task_id), Expect(c.source.expect(c))) for c in batch],
        )
        rows = await self.scripts.run(call)
        out: list[TaskSummary | None] = []
        nf = len(_FIELDS)
        for c, row in zip(batch, rows, strict=True):
            if not row:  # skipped by the script: gone, moved on, or filtered out
                out.append(None)
                continue
            # the fields, then (a finished task) its history: its start, end and worker
            # are read from it, its hash drops them
            f = {n: text(v) for n, v in zip(_FIELDS, row[:nf], strict=True) if v is not None}
            ok = c.source.accepts(c, {n: f.get(n) for n in ("s", "e")}) and q.matches(f)
            if not ok:
                out.append(None)
                continue
            f.update({f"h{j}": text(v) for j, v in enumerate(row[nf:], 1) if v is not None})
            out.append(_summary(f, c))
        return out

    # -- what the queues view needs -----------------------------------------------------------

    async def oldest_pending(self, queues: Sequence[str]) -> dict[str, int]:
        """queue -> when its oldest waiting work entry was queued (ms; 0: none, or a queue
        key that is not a stream: one broken queue must not hide the others): the oldest
        undelivered entry of any of its levels, or held for a limit (``~waiting``);
        sharded: the oldest of any shard."""
        if (stores := await self.scripts.fan_out()) is not None:
            out: dict[str, int] = dict.fromkeys(queues, 0)
            for st in stores:
                for name, ms in (await st.index.oldest_here(queues)).items():
                    if ms and (not out[name] or ms < out[name]):
                        out[name] = ms
            return out
        return await self.oldest_here(queues)

    async def oldest_here(self, queues: Sequence[str]) -> dict[str, int]:
        """:meth:`oldest_pending` of this shard alone."""
        levels = await self.levels(queues)
        delivered = await self._last_delivered(levels)
        k = self.keys
        streams = [(name, k.queue(name, p)) for name, ps in levels.items() for p in ps]
        with boundary("oldest pending"):
            async with self.redis.pipeline(transaction=False) as pipe:
                for _, stream in streams:
                    ms, seq = delivered[stream]
                    pipe.xrange(stream, f"{ms}-{seq + 1}", "+", count=1)
                    pipe.xpending_range(stream, GROUP, "-", "+", 1, consumername=WAITING_CONSUMER)
                rows = await pipe.execute(raise_on_error=False)
        out: dict[str, int] = dict.fromkeys(queues, 0)
        for j, (name, _) in enumerate(streams):
            row, held = rows[2 * j], rows[2 * j + 1]
            found = []
            if isinstance(row, list) and row:
                found.append(_entry_id(row[0][0]))
            if isinstance(held, list) and held:
                found.append(_entry_id(held[0]["message_id"]))
            for eid in found:
                if eid and eid[0] and (not out[name] or eid[0] < out[name]):
                    out[name] = eid[0]
        return out

    # -- trim --------------------------------------------------------------------------------

    async def trim(self, source: str, *, count: int = 1000, rounds: int = 10) -> TrimReport:
        """``trim.lua`` until nothing older than the retention period is left (at most
        ``rounds`` calls, each of tags:trim entries until ``count`` tasks were handled)."""
        handled = members = done = 0
        for _ in range(rounds):
            call = layout.trim(self.scripts.common, source, TrimArgs(count))
            h, m, d, more = (int(v) for v in await self.scripts.run(call))
            handled, members, done = handled + h, members + m, done + d
            if not more:
                break
        return TrimReport(handled, members, done)


def _resume(src: Source, c: Cursor) -> Bound:
    """Where ``src`` resumes after the cursor's key (see :mod:`rsjobs.store.cursor`)."""
    if src.ident == c.ident:
        return After(c.ms, src.parse_position(c.position))
    # at the cursor's time, the sources after it in the order come later, the others not
    return Upto(c.ms, src.ident < c.ident)


def _summary(f: dict[str, Any], c: Candidate) -> TaskSummary:
    try:
        return TaskSummary.from_record(decode_task(f), c.ms)
    except CorruptData as exc:
        # one task that does not read must not take the page down: it is shown as such
        return TaskSummary(
            id=c.task_id,
            type=str(f.get("t", "")),
            queue=str(f.get("q", c.queue)),
            state=str(f.get("s", "")),
            error_type="CorruptData",
            error=str(exc)[:200],
            listed_at=c.ms,
        )
