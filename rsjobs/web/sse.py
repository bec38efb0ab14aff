"""Server-sent events for one task: replay from its history, then live from the hub.

Semantics (the contract documented in ``docs/web.md``):

- Each transition is one SSE event whose ``id`` is the entry's id in the task's history
  (its number: ``1``, ``2``...) and whose ``data`` is the entry as JSON (the shape of
  ``GET /tasks/{id}/history``).
- A client that reconnects with ``Last-Event-ID`` gets exactly the entries after that id:
  the history is replayed from the task hash, then live entries follow as the hub tells of
  them; anything at or before the last id sent is skipped, so nothing is missed or repeated.
- After the entry that puts the task in a terminal state, an ``end`` event (no id) is sent
  and the response ends. Reconnecting to a finished task with nothing left to send answers
  ``204 No Content``, which tells ``EventSource`` to stop reconnecting.
- While nothing happens, a comment line (``: keep-alive``) goes out every ``keepalive_ms``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from ..errors import RedisUnavailable, StoreError
from ..ids import parse_id
from ..model import is_terminal
from ..store.tasks import HistoryRows, Tasks
from .auth import Principal
from .http import ApiError
from .hub import Item, Subscription
from .schemas import StreamEnd, encode

__all__ = ["EventStreamResponse", "Snapshot", "StreamLimiter", "events", "snapshot"]

PAGE = 500
KEEPALIVE = b": keep-alive\n\n"


class StreamLimiter:
    """Counts the open event streams per client key (owner, or IP when anonymous)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: dict[str, int] = {}

    def acquire(self, key: str) -> bool:
        n = self.open.get(key, 0)
        if self.limit and n >= self.limit:
            return False
        self.open[key] = n + 1
        return True

    def release(self, key: str) -> None:
        n = self.open.get(key, 0) - 1
        if n > 0:
            self.open[key] = n
        else:
            self.open.pop(key, None)

    @property
    def total(self) -> int:
        return sum(self.open.values())

    def claim(self, request: Request, who: Principal) -> str:
        """Count one more open stream for the request's client (its owner, or its IP when
        anonymous); returns the key to :meth:`release`. Raises a 429 :class:`ApiError`
        past the limit."""
        key = f"ip:{request.client.host if request.client else '?'}"
        if not who.anonymous:
            key = f"owner:{who.owner}"
        if not self.acquire(key):
            raise ApiError(
                429,
                "too_many_streams",
                f"at most {self.limit} open event streams per client",
                {"Retry-After": "5"},
            )
        return key


class Snapshot:
    """What a new subscriber must send first: entries after its last id, and the state."""

    __slots__ = ("items", "known", "more", "state")

    def __init__(self, state: str | None, items: list[Item], more: bool, known: bool) -> None:
        self.state = state  #: None when the task no longer exists
        self.items = items
        self.more = more  #: the first page was full: read on from the history stream
        self.known = known  #: the client's last id is an entry of this task's history

    @property
    def finished(self) -> bool:
        return self.state is None or is_terminal(self.state)


def _items(task_id: str, page: HistoryRows) -> list[Item]:
    """Replayed entries; refusals carry their repeat counts from the task hash (read with
    the page, only when it holds refusals), as ``GET /tasks/{id}/history`` shows them."""
    repeats = page.repeats or None
    return [Item(task_id, hid, fields, repeats) for hid, fields in page.rows]


def _position(after: str) -> int:
    """The history entry number of a client's last id (``0-0``: before the first)."""
    major, n = parse_id(after)
    return n if major == 0 else -1  # an id of no task history: no entry follows it


async def _page(tasks: Tasks, task_id: str, after: str) -> list[Item]:
    start = _position(after)
    if start < 0:
        return []
    return _items(task_id, await tasks.page(task_id, start, PAGE))


async def snapshot(tasks: Tasks, task_id: str, after: str) -> Snapshot:
    """The task's state and the first page of its history after ``after``, atomically.

    Atomic (one read of the hash) so that when the state is terminal, the terminal entry is
    either in this page, in a later page, or at or before ``after``: the stream can end
    safely. An ``after`` that is no entry number of a task's history is not ``known``.
    """
    start = _position(after)
    snap = await tasks.snapshot(task_id, max(start, 0), PAGE)
    items = _items(task_id, snap.page)
    return Snapshot(snap.state, items, len(items) == PAGE, known=snap.known and start >= 0)


def _end(state: str) -> bytes:
    done = 100.0 if state == "SUCCEEDED" else None
    return b"event: end\ndata: %s\n\n" % encode(StreamEnd(state=state, progress=done))


async def events(
    tasks: Tasks,
    sub: Subscription,
    first: Snapshot,
    after: str,
    *,
    keepalive_ms: int,
    retry_ms: int,
    release: Callable[[], None],
) -> AsyncIterator[bytes]:
    """The SSE byte stream of one connection. ``sub`` must have been subscribed before
    ``first`` was taken, so that the hub holds everything written after the snapshot.

    Cleanup (``release``) is synchronous so it also runs when the generator is closed
    from a cancelled task.
    """
    task_id = sub.task_id
    pos = parse_id(after)
    try:
        yield b"retry: %d\n\n" % retry_ms
        # 1. replay the history stream from the client's last id
        items, more = first.items, first.more
        while True:
            out = []
            for item in items:
                out.append(item.wire)
                pos, after = item.key, item.hid
                if item.terminal:
                    out.append(_end(item.fields.get("to", "")))
                    yield b"".join(out)
                    return
            if out:
                yield b"".join(out)
            if not more:
                break
            items = await _page(tasks, task_id, after)
            more = len(items) == PAGE
        if first.finished:
            # the terminal entry was at or before the client's last id
            yield _end(first.state or "")
            return
        # 2. live: what the hub delivers, deduplicated against what was sent
        while not sub.closed:
            if not sub.items and not sub.resync:
                try:
                    async with asyncio.timeout(keepalive_ms / 1000):
                        await sub.wake.wait()
                except TimeoutError:
                    yield KEEPALIVE
                    continue
            if sub.closed:
                # shutting down: end without `end`; the client resumes with Last-Event-ID
                return
            items, resync = sub.take()
            if resync:
                items = []
                while True:
                    page = await _page(tasks, task_id, after)
                    items += page
                    if len(page) < PAGE:
                        break
                    after = page[-1].hid
            out = []
            for item in items:
                if item.key <= pos:
                    continue
                out.append(item.wire)
                pos, after = item.key, item.hid
                if item.terminal:
                    out.append(_end(item.fields.get("to", "")))
                    yield b"".join(out)
                    return
            if out:
                yield b"".join(out)
    except (RedisUnavailable, StoreError):
        # Redis went away mid-stream: end it; the client reconnects with Last-Event-ID.
        return
    finally:
        release()


class EventStreamResponse(StreamingResponse):
    """A ``text/event-stream`` response that always releases its subscription and slot,
    even when the client disconnects before the body is iterated, and closes its body."""

    media_type = "text/event-stream"

    def __init__(self, content: AsyncIterator[bytes], release: Callable[[], None]) -> None:
        super().__init__(
            content,
            headers={
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",  # nginx: do not buffer the stream
            },
        )
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                await aclose()
            self._release()
