"""One reader of the namespace ``events`` stream per process (one per shard of a sharded
namespace), fanned out to subscribers.

The transition scripts keep every entry of a task's history in its hash and append to the
``events`` stream the task id and the entry's number (``id``, ``hid``). The hub runs a
single ``XREAD BLOCK`` loop on the events stream and tells the subscribers of each entry's
task, so a thousand open SSE connections cost one blocking read, not a thousand polls.

An events entry is one of two kinds (``_dispatch``):

- without the entry's fields (a task's: ``id``, ``hid`` only): every subscriber of that
  id is asked to *read on* (:meth:`Subscription.request_resync`): its stream reads the
  history after the last id it sent, from the hash. This is the same path as a resync
  after an overflow or a Redis loss, so there is one way to catch up, not two.
- with the entry's fields (``ev``, ``to``...): pushed as it is, as an :class:`Item`, to
  the subscribers of that id, who skip what they already have by entry id.

A subscriber never relies on the hub alone: it first replays the task's history after its
Last-Event-ID, then follows the hub, and reads on from its last id whenever the hub says
it may have missed something (``resync``). Entries are deduplicated by history id, which
orders a task's entries, so replay and live delivery join without a gap or a duplicate.

Workflow streams ride the same reader. The workflow scripts note each workflow history
entry on the events stream (``wf`` and ``hid``, no copy of the entry), and the entries of a
workflow's tasks carry ``wf`` too. The hub wakes a workflow's watchers (:class:`Watch`):
"its history grew" (the watcher reads its history after the last id it sent) or "one of
its tasks moved" (the watcher sends the status document again, coalesced). An open
workflow stream thus holds no Redis connection and costs no command while nothing happens.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Mapping

from ..errors import RedisUnavailable, StoreError
from ..ids import parse_id
from ..model import TERMINAL
from ..schemas import HistoryEntry
from ..store import Store
from ..store.events import Events
from .schemas import encode

__all__ = ["Hub", "Item", "Subscription", "Tail", "Watch"]

log = logging.getLogger("rsjobs.web")


class Item:
    """One history entry of one task, with its SSE encoding computed once for all readers."""

    __slots__ = ("_wire", "fields", "hid", "key", "repeats", "task_id")

    def __init__(
        self,
        task_id: str,
        hid: str,
        fields: dict[str, str],
        repeats: Mapping[str, str] | None = None,
    ) -> None:
        self.task_id = task_id
        self.hid = hid
        self.key = parse_id(hid)
        self.fields = fields
        #: a replayed refusal's repeat counters (task hash fields ``rep:<id>``...)
        self.repeats = repeats
        self._wire: bytes | None = None

    @property
    def terminal(self) -> bool:
        """Whether the task is in a terminal state after this entry."""
        return self.fields.get("to", "") in TERMINAL

    def entry(self) -> HistoryEntry:
        return HistoryEntry.from_entry(self.hid, self.fields, self.task_id, self.repeats)

    @property
    def wire(self) -> bytes:
        """The SSE event: ``id`` is the history entry id, ``data`` the entry as JSON."""
        if self._wire is None:
            self._wire = b"id: %s\ndata: %s\n\n" % (self.hid.encode(), encode(self.entry()))
        return self._wire


class Subscription:
    """The buffer between the hub and one connection watching one task."""

    __slots__ = ("closed", "items", "maxlen", "resync", "task_id", "wake")

    def __init__(self, task_id: str, maxlen: int) -> None:
        self.task_id = task_id
        self.maxlen = maxlen
        self.items: deque[Item] = deque()
        self.resync = False
        #: the server is shutting down: end the stream (the client resumes elsewhere)
        self.closed = False
        self.wake = asyncio.Event()

    def push(self, item: Item) -> None:
        if len(self.items) >= self.maxlen:
            # a reader this slow gets the rest from the history stream instead
            self.items.clear()
            self.resync = True
        else:
            self.items.append(item)
        self.wake.set()

    def request_resync(self) -> None:
        self.resync = True
        self.wake.set()

    def close(self) -> None:
        self.closed = True
        self.wake.set()

    def take(self) -> tuple[list[Item], bool]:
        """Everything buffered, and whether a replay from history is needed first."""
        items, resync = list(self.items), self.resync
        self.items.clear()
        self.resync = False
        self.wake.clear()
        return items, resync


class Watch:
    """What the hub tells one connection watching one workflow: flags, not entries (the
    watcher reads them from the workflow's history, the source of truth)."""

    __slots__ = ("closed", "grew", "moved", "resync", "wake", "wf_id")

    def __init__(self, wf_id: str) -> None:
        self.wf_id = wf_id
        #: a workflow history entry was written
        self.grew = False
        #: one of its tasks moved or reported progress
        self.moved = False
        self.resync = False
        #: the server is shutting down, or Redis stayed away: end the stream
        self.closed = False
        self.wake = asyncio.Event()

    def notify(self, *, task: bool) -> None:
        if task:
            self.moved = True
        else:
            self.grew = True
        self.wake.set()

    def request_resync(self) -> None:
        self.resync = True
        self.wake.set()

    def close(self) -> None:
        self.closed = True
        self.wake.set()

    def take(self) -> tuple[bool, bool]:
        """Whether to read the history (it grew, or the hub may have missed entries), and
        whether a task moved since the last call."""
        read, moved = self.grew or self.resync, self.moved or self.resync
        self.grew = self.moved = self.resync = False
        self.wake.clear()
        return read, moved


class Tail:
    """What the hub tells one connection following the whole events stream
    (``GET /events``): a flag, not entries (it reads them from the stream after the last
    id it sent), so a slow or idle follower holds nothing in memory."""

    __slots__ = ("closed", "grew", "wake")

    def __init__(self) -> None:
        #: entries were appended (or the hub may have missed some: read on either way)
        self.grew = False
        #: the server is shutting down, or Redis stayed away: end the stream
        self.closed = False
        self.wake = asyncio.Event()

    def notify(self) -> None:
        self.grew = True
        self.wake.set()

    request_resync = notify

    def close(self) -> None:
        self.closed = True
        self.wake.set()

    def take(self) -> bool:
        grew, self.grew = self.grew, False
        self.wake.clear()
        return grew


class _Reader:
    """One blocking reader of one events stream (a shard's, in a sharded namespace)."""

    __slots__ = ("cursor", "events", "healthy", "task")

    def __init__(self, events: Events) -> None:
        self.events = events
        self.cursor = "0-0"
        self.healthy = False
        self.task: asyncio.Task[None] | None = None


class Hub:
    """The per-process reader of the events stream (``events``: the store's, on a client
    of its own for the blocking reads; or a :class:`rsjobs.store.Store`, whose shards'
    events streams it reads, one reader each); start it with :meth:`start`."""

    def __init__(
        self,
        events: Events | Store,
        *,
        block_ms: int = 5000,
        count: int = 1000,
        buffer: int = 1000,
        retry_ms: int = 500,
        outage_ms: int = 5000,
    ) -> None:
        self._source = events
        self._readers: list[_Reader] = [_Reader(events)] if isinstance(events, Events) else []
        self.block_ms = block_ms
        self.count = count
        self.buffer = buffer
        self.retry_ms = retry_ms
        #: open streams end once reads have failed for this long (clients resume later)
        self.outage_ms = outage_ms
        #: called with every entry read (task id, history id, fields): metrics use it
        self.observers: list[Callable[[str, str, dict[str, str]], None]] = []
        self.entries_read = 0
        self._subs: dict[str, set[Subscription]] = {}
        self._watches: dict[str, set[Watch]] = {}
        self._tails: set[Tail] = set()
        self._starting: asyncio.Lock | None = None
        self._closing = False
        self._closing_streams = False

    @property
    def events(self) -> Events:
        """The (first) events stream read."""
        return self._readers[0].events

    @property
    def cursor(self) -> str:
        """The (first) reader's position."""
        return self._readers[0].cursor if self._readers else "0-0"

    @cursor.setter
    def cursor(self, value: str) -> None:
        self._readers[0].cursor = value

    @property
    def healthy(self) -> bool:
        """Whether every reader's last read went through."""
        return bool(self._readers) and all(r.healthy for r in self._readers)

    @property
    def running(self) -> bool:
        return bool(self._readers) and all(
            r.task is not None and not r.task.done() for r in self._readers
        )

    @property
    def subscribers(self) -> int:
        """Open task, workflow and namespace streams."""
        return (
            sum(len(s) for s in self._subs.values())
            + sum(len(w) for w in self._watches.values())
            + len(self._tails)
        )

    def _listeners(self) -> list[Subscription | Watch | Tail]:
        out: list[Subscription | Watch | Tail] = [s for subs in self._subs.values() for s in subs]
        out += [w for watches in self._watches.values() for w in watches]
        return out + list(self._tails)

    async def start(self) -> None:
        """Start reading (idempotent). Returns once the read position is fixed, so every
        entry written after this returns is delivered to the subscribers of its task."""
        if self.running:
            return
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self.running:
                return
            if not self._readers:
                assert not isinstance(self._source, Events)
                self._readers = [_Reader(s.events) for s in await self._source.each()]
            for r in self._readers:
                # The current end of the stream, not '$': entries written between this
                # call and the first XREAD must not fall in between.
                if r.task is None or r.task.done():
                    r.cursor = await r.events.last_id()
            self._closing = False
            for n, r in enumerate(self._readers):
                if r.task is None or r.task.done():
                    r.healthy = True
                    r.task = asyncio.create_task(self._run(r), name=f"rsjobs-web-hub-{n}")
            # a restart (after aclose, or after the reader died) may have skipped entries
            self._resync_all()

    def _resync_all(self) -> None:
        for s in self._listeners():
            s.request_resync()

    async def aclose(self) -> None:
        tasks = [r.task for r in self._readers if r.task is not None]
        for r in self._readers:
            r.task = None
        if tasks:
            self._closing = True
        for task in tasks:
            # redis-py may absorb a cancellation that lands in its socket timeout or its
            # retry logic; cancel again until the reader is gone (bounded)
            for _ in range(50):
                task.cancel()
                await asyncio.wait({task}, timeout=0.1)
                if task.done():
                    break
            else:
                log.warning("events reader did not stop")
        self._resync_all()

    def subscribe(self, task_id: str) -> Subscription:
        sub = Subscription(task_id, self.buffer)
        if self._closing_streams:
            sub.close()
        self._subs.setdefault(task_id, set()).add(sub)
        return sub

    def watch(self, wf_id: str) -> Watch:
        """Watch a workflow (:meth:`unwatch` when done)."""
        w = Watch(wf_id)
        if self._closing_streams:
            w.close()
        self._watches.setdefault(wf_id, set()).add(w)
        return w

    def tail(self) -> Tail:
        """Follow the whole events stream (:meth:`untail` when done)."""
        t = Tail()
        if self._closing_streams:
            t.close()
        self._tails.add(t)
        return t

    def untail(self, t: Tail) -> None:
        self._tails.discard(t)

    def unwatch(self, w: Watch) -> None:
        watches = self._watches.get(w.wf_id)
        if watches is not None:
            watches.discard(w)
            if not watches:
                del self._watches[w.wf_id]

    def end_streams(self) -> None:
        """End every open stream now (without ``end``: clients reconnect with
        Last-Event-ID); later subscriptions are served as usual."""
        for s in self._listeners():
            s.close()

    def close_subscriptions(self) -> None:
        """End every open stream (server shutdown); later subscriptions end at once."""
        self._closing_streams = True
        self.end_streams()

    def unsubscribe(self, sub: Subscription) -> None:
        subs = self._subs.get(sub.task_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[sub.task_id]

    async def _run(self, reader: _Reader) -> None:
        failed = False
        loop = asyncio.get_running_loop()
        down_since = 0.0  # when the current run of failed reads began
        while not self._closing:
            started = loop.time()
            try:
                entries = await reader.events.read(reader.cursor, self.count, self.block_ms)
            except asyncio.CancelledError:
                raise
            except (RedisUnavailable, StoreError, OSError) as exc:
                task = asyncio.current_task()
                if self._closing or (task is not None and task.cancelling()):
                    # redis-py can turn a cancellation into "connection closed": honour it
                    raise asyncio.CancelledError from exc
                if not failed:
                    log.warning("events reader: %s; retrying every %d ms", exc, self.retry_ms)
                    # a read failing past its block time went unanswered from then on
                    down_since = min(loop.time(), started + self.block_ms / 1000)
                failed, reader.healthy = True, False
                if (loop.time() - down_since) * 1000 >= self.outage_ms and self.subscribers:
                    # Past a blip (a restart is ridden out, the history fills the gap):
                    # streams that would stay silent end, and EventSource reconnects.
                    log.warning("redis unreachable: ending %d event streams", self.subscribers)
                    self.end_streams()
                await asyncio.sleep(self.retry_ms / 1000)
                continue
            if failed:
                # Entries may have been trimmed, or Redis restarted: every subscriber
                # catches up from its task's history stream.
                log.info("events reader: redis is back")
                failed, reader.healthy = False, True
                self._resync_all()
            if entries:
                if len(entries) == self.count:
                    await self._check_trimmed(reader)
                reader.cursor = entries[-1][0]
                self._dispatch(entries)

    async def _check_trimmed(self, reader: _Reader | None = None) -> None:
        """A full batch means this reader lags; if MAXLEN trimming overtook it, entries
        were lost to it: every subscriber catches up from its task's history."""
        reader = reader or self._readers[0]
        try:
            first = await reader.events.first_id()
        except (RedisUnavailable, StoreError, OSError):
            return
        if first is not None and parse_id(first) > parse_id(reader.cursor):
            log.warning("events reader fell behind the stream's trimming; resyncing")
            self._resync_all()

    def _dispatch(self, entries: list[tuple[str, dict[str, str]]]) -> None:
        for t in self._tails:
            t.notify()
        for _, fields in entries:
            self.entries_read += 1
            task_id, hid = fields.get("id", ""), fields.get("hid", "")
            if not hid:
                continue
            wf_id = fields.get("wf")
            if wf_id:
                for w in self._watches.get(wf_id, ()):
                    w.notify(task=bool(task_id))
                if not task_id:  # a workflow's note: no task to hand it to
                    continue
            for observe in self.observers:
                try:
                    observe(task_id, hid, fields)
                except Exception:  # an observer bug must not stop the fan-out
                    log.exception("events observer failed")
            subs = self._subs.get(task_id)
            if subs and "ev" not in fields:
                # the entry is in the task's hash: each subscriber reads what follows its
                # last entry (one read per entry, deduplicated by entry id)
                for s in subs:
                    s.request_resync()
            elif subs:
                try:
                    item = Item(task_id, hid, fields)
                except ValueError:  # not written by a transition script
                    continue
                for s in subs:
                    s.push(item)
