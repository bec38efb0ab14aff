"""The indexes a task list reads (:mod:`rsjobs.store.index`), each as a *source* of
candidates, newest first: a queue's stream (its PENDING and RUNNING tasks), the scheduled
and paused zsets, a ``done:<STATE>`` stream, a range of the tags index (``index_move`` in
``fsm.lua`` says what each holds).

A source fetches a batch at a time (one command, queued on a pipeline by the caller) below
its bound, and says which of its candidates are still true once their task's hash is read
(:meth:`Source.accepts`): an entry whose task left that state, or expired, is skipped.
Candidates are ordered by ``(ms, ident, pos)`` (see :mod:`rsjobs.store.cursor`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Mapping
from typing import Any, NamedTuple

from ..errors import ConfigError
from .replies import text

__all__ = [
    "NO_UNTIL",
    "After",
    "Candidate",
    "DoneStream",
    "QueueStream",
    "ScoreZset",
    "Source",
    "TagRange",
    "Upto",
]

#: the largest sequence number of a stream entry id
_MAX_SEQ = 2**64 - 1
#: the latest time a list bound names (13 digits: the tags index's members spell times so)
NO_UNTIL = 10**13 - 1

Fields = Mapping[str, str | None]


class Upto(NamedTuple):
    """Candidates at or before (``inclusive``) or before ``ms``."""

    ms: int
    inclusive: bool


class After(NamedTuple):
    """Candidates after position ``pos`` of this source (at time ``ms``), exclusive."""

    ms: int
    pos: Any


Bound = Upto | After


class Candidate(NamedTuple):
    """A task a source names: its list time, the source's ident and the task's position
    there (``pos`` compares within its source; ``position`` is its text for a cursor)."""

    ms: int
    ident: str
    pos: Any
    position: str
    task_id: str
    #: the task's queue when the source names it ('' when it does not)
    queue: str
    source: Source

    @property
    def key(self) -> tuple[int, str, Any]:
        return (self.ms, self.ident, self.pos)

    @property
    def cursor_key(self) -> tuple[int, str, str]:
        """The key a list cursor stores (:mod:`rsjobs.store.cursor`)."""
        return (self.ms, self.ident, self.position)


class Source:
    """The base: a buffer of fetched candidates, the bound of the next fetch, and whether
    the index has nothing more below it."""

    ident = ""

    def __init__(self, bound: Bound, since: int) -> None:
        self.next: Bound = bound
        self.since = since
        self.buffer: deque[Candidate] = deque()
        self.exhausted = False
        #: how many candidates the next fetch asks for (set by the reader)
        self.batch = 20
        #: entries fetched and dropped at once, by what the index says of them (their
        #: queue): they count among the entries a page looks at. When a fetch ends with
        #: such entries, its last one stays in the buffer as a *mark* (a candidate without
        #: a task id): the merge passes it on, so that a page's cursor moves past them
        self.skipped = 0
        #: the queues wanted (empty: any), for sources that name a task's queue
        self.queues: frozenset[str] = frozenset()

    def command(self, pipe: Any, count: int) -> None:
        """Queue the fetch of at most ``count`` candidates below :attr:`next`."""
        raise NotImplementedError

    def take(self, reply: Any, count: int) -> None:
        """Add a fetch's reply to the buffer; move :attr:`next` past it."""
        raise NotImplementedError

    def parse_position(self, position: str) -> Any:
        """A cursor's position text as this source's ``pos``; ConfigError if malformed."""
        return position

    def keep(self, queue: str) -> bool:
        """Whether the list wants a task of ``queue``, as far as this index says (before
        any hash is read): an entry that names another queue is dropped at once."""
        return not self.queues or queue in self.queues

    def accepts(self, c: Candidate, f: Fields) -> bool:
        """Whether the task's hash fields ``f`` (None: no such field; all None: no such
        task) still agree with this index's entry."""
        raise NotImplementedError

    def expect(self, c: Candidate) -> str:
        """What :meth:`accepts` checks, for ``summaries.lua``: ``"<states>|<entry>"``."""
        return "|"

    def _done(self, got: int, count: int) -> None:
        if got < count:
            self.exhausted = True


def _bad_position() -> ConfigError:
    return ConfigError("invalid cursor: pass the cursor a page of this list returned")


# -- streams -------------------------------------------------------------------------------


def _entry_id(eid: str) -> tuple[int, int]:
    ms, sep, seq = eid.partition("-")
    if not sep or not ms.isdigit() or not seq.isdigit():
        raise _bad_position()
    return int(ms), int(seq)


class _Stream(Source):
    """A stream read newest first with XREVRANGE; ``pos`` is the entry id as ``(ms, seq)``."""

    def __init__(
        self, key: str, bound: Bound, since: int, cap: tuple[int, int] | None = None
    ) -> None:
        super().__init__(bound, since)
        self.key = key
        #: the newest entry this source may name (a queue's last delivered entry)
        self.cap = cap

    def _end(self) -> tuple[int, int] | None:
        """The newest entry id to read (inclusive), None when nothing is left below."""
        b = self.next
        if isinstance(b, Upto):
            end = (b.ms, _MAX_SEQ) if b.inclusive else (b.ms - 1, _MAX_SEQ)
        else:
            ms, seq = b.pos
            end = (ms, seq - 1) if seq > 0 else (ms - 1, _MAX_SEQ)
        if self.cap is not None and self.cap < end:
            end = self.cap
        return end if end[0] >= max(self.since, 0) else None

    def command(self, pipe: Any, count: int) -> None:
        end = self._end()
        if end is None:
            pipe.execute_command("ECHO", "")  # keeps the pipeline's replies in step
            return
        start = f"{self.since}-0" if self.since else "-"
        pipe.execute_command("XREVRANGE", self.key, f"{end[0]}-{end[1]}", start, "COUNT", count)

    def take(self, reply: Any, count: int) -> None:
        if not isinstance(reply, list):  # the ECHO of an empty range
            self.exhausted = True
            return
        pos = None
        dropped = ""
        for eid_raw, fields in reply:
            eid = eid_raw if isinstance(eid_raw, str) else text(eid_raw)
            ms, _, seq = eid.partition("-")
            pos = (int(ms), int(seq))
            tid, queue = self.task_of(fields)
            if tid and self.keep(queue):
                self.buffer.append(Candidate(pos[0], self.ident, pos, eid, tid, queue, self))
                dropped = ""
            else:
                self.skipped += 1
                dropped = eid
        if pos is not None:
            if dropped:
                self.buffer.append(Candidate(pos[0], self.ident, pos, dropped, "", "", self))
            self.next = After(pos[0], pos)
        self._done(len(reply), count)

    def task_of(self, fields: Any) -> tuple[str, str]:
        raise NotImplementedError

    def parse_position(self, position: str) -> Any:
        return _entry_id(position)


def _pairs(fields: Any) -> list[tuple[str, str]]:
    """A stream entry's fields as (name, value) pairs (redis-py answers a dict, or a flat
    list on RESP3's raw paths)."""
    if isinstance(fields, dict):
        return [(text(k), text(v)) for k, v in fields.items()]
    flat = [text(v) for v in fields]
    return list(zip(flat[::2], flat[1::2], strict=False))


class QueueStream(_Stream):
    """A queue's stream: its PENDING and RUNNING tasks (RUNNING: its delivered entries,
    up to the group's last delivered one, ``cap``), listed by when the entry was queued."""

    def __init__(
        self,
        key: str,
        queue: str,
        states: Collection[str],
        bound: Bound,
        since: int,
        cap: tuple[int, int] | None = None,
        priority: int = 0,
    ) -> None:
        super().__init__(key, bound, since, cap)
        # (one source per priority level of the queue: level 0 keeps the queue's name)
        self.ident = f"q:{queue}" if not priority else f"q:{queue}|p{priority}"
        self.queue = queue
        self.states = frozenset(states)

    def task_of(self, fields: Any) -> tuple[str, str]:
        if isinstance(fields, dict) and "id" in fields:
            return text(fields["id"]), self.queue
        for name, value in _pairs(fields):
            if name == "id":
                return value, self.queue
        return "", self.queue

    def accepts(self, c: Candidate, f: Fields) -> bool:
        # an entry the task no longer has (a stale delivery) does not stand for it
        return f.get("s") in self.states and f.get("e") == c.position

    def expect(self, c: Candidate) -> str:
        return " ".join(sorted(self.states)) + "|" + c.position


class DoneStream(_Stream):
    """A ``done:<STATE>`` stream: an entry ``<queue> <id>`` per task that reached the
    state, listed by when it did; ``queues`` (empty: all) filters by the entry's queue."""

    def __init__(
        self, key: str, state: str, queues: Collection[str], bound: Bound, since: int
    ) -> None:
        super().__init__(key, bound, since)
        self.ident = f"d:{state}"
        self.state = state
        self.queues = frozenset(queues)

    def task_of(self, fields: Any) -> tuple[str, str]:
        if isinstance(fields, dict) and len(fields) == 1:
            ((queue, tid),) = fields.items()
            return text(tid), text(queue)
        pairs = _pairs(fields)
        if not pairs:
            return "", ""
        queue, tid = pairs[0]
        return tid, queue

    def accepts(self, c: Candidate, f: Fields) -> bool:
        return f.get("s") == self.state

    def expect(self, c: Candidate) -> str:
        return self.state + "|"


# -- zsets ---------------------------------------------------------------------------------


class ScoreZset(Source):
    """A zset of ``<queue>:<id>`` members scored by a time (scheduled: the due time;
    paused: when it was paused), read newest first; ``pos`` is the member."""

    def __init__(
        self,
        key: str,
        ident: str,
        state: str,
        queues: Collection[str],
        bound: Bound,
        since: int,
    ) -> None:
        super().__init__(bound, since)
        self.key = key
        self.ident = ident
        self.state = state
        self.queues = frozenset(queues)
        #: members of the bound's score already seen, skipped by the next fetch
        self.offset = 0

    def command(self, pipe: Any, count: int) -> None:
        b = self.next
        # (After: the members at b.ms that are not after b.pos are dropped by take())
        top = f"({b.ms}" if isinstance(b, Upto) and not b.inclusive else str(b.ms)
        low = str(self.since) if self.since else "-inf"
        pipe.execute_command(
            "ZRANGE", self.key, top, low, "BYSCORE", "REV", "LIMIT", self.offset, count,
            "WITHSCORES",
        )  # fmt: skip

    def take(self, reply: Any, count: int) -> None:
        rows = _scored(reply)
        b = self.next
        last: tuple[int, str] | None = None
        dropped = False
        for member, score in rows:
            ms = int(score)
            if isinstance(b, After) and ms == b.ms and member >= b.pos:
                continue  # at the bound's time and not after its member: seen already
            last = (ms, member)
            queue, _, tid = member.rpartition(":")
            queue = queue.partition("|")[0]  # (the member names the task's level)
            dropped = not self.keep(queue)
            if dropped:
                self.skipped += 1
            else:
                self.buffer.append(Candidate(ms, self.ident, member, member, tid, queue, self))
        if last is not None and dropped:  # a mark (see Source.skipped)
            self.buffer.append(Candidate(last[0], self.ident, last[1], last[1], "", "", self))
        if rows and last is None and len(rows) == count:
            # a whole batch of one time, all seen: read further into that time
            self.offset += count
            return
        self.offset = 0
        if last is not None:
            self.next = After(*last)
        self._done(len(rows), count)

    def accepts(self, c: Candidate, f: Fields) -> bool:
        return f.get("s") == self.state

    def expect(self, c: Candidate) -> str:
        return self.state + "|"


def _scored(reply: Any) -> list[tuple[str, float]]:
    """ZRANGE ... WITHSCORES as (member, score) pairs (RESP2: a flat list; RESP3: pairs)."""
    if not reply:
        return []
    if isinstance(reply[0], list | tuple):
        return [(text(m), float(s)) for m, s in reply]
    flat = list(reply)
    return [(text(m), float(s)) for m, s in zip(flat[::2], flat[1::2], strict=True)]


class TagRange(Source):
    """The members of one tag in the tags index, ``<tag>|<created ms>|<id>``, read newest
    first (by creation time); ``pos`` is the member."""

    ident = "t"

    def __init__(self, key: str, tag: str, bound: Bound, since: int) -> None:
        super().__init__(bound, since)
        self.key = key
        self.prefix = tag + "|"

    def command(self, pipe: Any, count: int) -> None:
        b, p = self.next, self.prefix
        if isinstance(b, Upto):
            end = min(b.ms + 1 if b.inclusive else b.ms, NO_UNTIL + 1)
            # (past the last 13-digit time: '~' sorts after every digit)
            top = f"({p}~" if end > NO_UNTIL else f"({p}{end:013d}"
        else:
            top = f"({b.pos}"
        low = f"[{p}{self.since:013d}" if self.since else f"[{p}"
        pipe.execute_command("ZRANGE", self.key, top, low, "BYLEX", "REV", "LIMIT", 0, count)

    def take(self, reply: Any, count: int) -> None:
        n = len(self.prefix)
        for raw in reply:
            member = text(raw)
            at, _, tid = member[n:].partition("|")
            ms = int(at) if at.isdigit() else 0
            self.buffer.append(Candidate(ms, self.ident, member, member, tid, "", self))
            self.next = After(ms, member)
        self._done(len(reply), count)

    def parse_position(self, position: str) -> Any:
        if not position.startswith(self.prefix):
            raise _bad_position()
        return position

    def accepts(self, c: Candidate, f: Fields) -> bool:
        return f.get("s") is not None
