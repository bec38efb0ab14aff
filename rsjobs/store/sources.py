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

    def command(self, pipe: Any, count: int) -> None:
        """Queue the fetch of at most ``count`` candidates below :attr:`next`."""
        raise NotImplementedError

    def take(self, reply: Any, count: int) -> None:
        """Add a fetch's reply to the buffer; move :attr:`next` past it."""
        raise NotImplementedError

    def parse_position(self, position: str) -> Any:
        """A cursor's position text as this source's ``pos``; ConfigError if malformed."""
        return position

    def wants(self, c: Candidate) -> bool:
        """Whether the list wants the candidate, by what the index says of it (its
        queue), before its hash is read."""
        return True

    def accepts(self, c: Candidate, f: Fields) -> bool:
        """Whether the task's hash fields ``f`` (None: no such field; all None: no such
        task) still agree with this index's entry."""
        raise NotImplementedError

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
        for eid_raw, fields in reply:
            eid = text(eid_raw)
            pos = _entry_id(eid)
            tid, queue = self.task_of(fields)
            self.buffer.append(Candidate(pos[0], self.ident, pos, eid, tid, queue, self))
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
    ) -> None:
        super().__init__(key, bound, since, cap)
        self.ident = f"q:{queue}"
        self.queue = queue
        self.states = frozenset(states)

    def task_of(self, fields: Any) -> tuple[str, str]:
        for name, value in _pairs(fields):
            if name == "id":
                return value, self.queue
        return "", self.queue

    def accepts(self, c: Candidate, f: Fields) -> bool:
        # an entry the task no longer has (a stale delivery) does not stand for it
        return f.get("s") in self.states and f.get("e") == c.position


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
        pairs = _pairs(fields)
        if not pairs:
            return "", ""
        queue, tid = pairs[0]
        return tid, queue

    def wants(self, c: Candidate) -> bool:
        return not self.queues or c.queue in self.queues

    def accepts(self, c: Candidate, f: Fields) -> bool:
        return f.get("s") == self.state


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
        kept = 0
        for member, score in rows:
            ms = int(score)
            if isinstance(b, After) and ms == b.ms and member >= b.pos:
                continue  # at the bound's time and not after its member: seen already
            queue, _, tid = member.rpartition(":")
            self.buffer.append(Candidate(ms, self.ident, member, member, tid, queue, self))
            kept += 1
        if rows and kept == 0 and len(rows) == count:
            # a whole batch of one time, all seen: read further into that time
            self.offset += count
            return
        self.offset = 0
        if kept:
            last = self.buffer[-1]
            self.next = After(last.ms, last.pos)
        self._done(len(rows), count)

    def wants(self, c: Candidate) -> bool:
        return not self.queues or c.queue in self.queues

    def accepts(self, c: Candidate, f: Fields) -> bool:
        return f.get("s") == self.state


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
