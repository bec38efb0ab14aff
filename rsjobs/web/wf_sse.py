"""Server-sent events for one workflow: its history replayed from ``Last-Event-ID``, then
live from the hub (``hub.py``), with the status document after every change.

- Each history entry is one event (default type) whose ``id`` is the entry id and whose
  ``data`` is the entry as JSON (the shape of ``GET /workflows/{id}/history``).
- ``event: status`` (no id) carries the status document: first on connect, then with each
  batch of entries, and when one of the workflow's tasks moved or reported progress
  (coalesced: at most one such document every ``status_ms``, and only when it changed).
- After the entry that makes the workflow terminal: a last status, ``event: end``, and the
  response ends. Reconnecting to a finished workflow with nothing left answers 204.
- An idle connection gets a comment line every ``keepalive_ms``.

Live, the stream holds no Redis connection of its own: the hub wakes it, and it reads
the workflow's history after the last id it sent (so neither a gap nor a duplicate,
whatever the hub coalesced or missed: after a Redis error the hub asks for such a read)
and the status document.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec

from ..errors import RedisUnavailable, StoreError
from ..ids import exclusive
from ..store import Store
from ..workflows.model import is_terminal
from ..workflows.schemas import WorkflowEvent
from ..workflows.status import load_status
from .hub import Watch
from .sse import KEEPALIVE

__all__ = ["ended_before", "workflow_events"]

PAGE = 500
_encoder = msgspec.json.Encoder()
_END = b"event: end\ndata: {}\n\n"


def _event(entry_id: str, fields: dict[str, Any]) -> bytes:
    data = _encoder.encode(WorkflowEvent.from_entry(entry_id, fields))
    return b"id: %s\ndata: %s\n\n" % (entry_id.encode(), data)


def _ends(fields: dict[str, Any]) -> bool:
    return (
        fields.get("rej") != "1"
        and is_terminal(fields.get("to", ""))
        and not is_terminal(fields.get("from", ""))
    )


async def ended_before(store: Store, wf_id: str, after: str) -> bool:
    """Whether the workflow is finished and has no history entry after ``after``."""
    status = await store.workflows.status(wf_id)
    if status is None or not is_terminal(status):
        return False
    start = exclusive(after)
    if start is None:
        return True
    return not await store.workflows.history_range(wf_id, start, 1)


class _Replay:
    """The entries after the last one sent, read page by page from the history."""

    def __init__(self, store: Store, wf_id: str, last: str) -> None:
        self.store, self.wf_id, self.last = store, wf_id, last
        self.ended = False

    async def read(self) -> bytes:
        """Every entry after the last one sent, up to and including the one that ends the
        workflow (then ``ended``)."""
        out: list[bytes] = []
        while not self.ended and (start := exclusive(self.last)) is not None:
            rows = await self.store.workflows.history_range(self.wf_id, start, PAGE)
            for entry_id, fields in rows:
                out.append(_event(entry_id, fields))
                self.last = entry_id
                if _ends(fields):
                    self.ended = True
                    break
            if len(rows) < PAGE:
                break
        return b"".join(out)


async def workflow_events(
    store: Store,
    watch: Watch,
    after: str,
    *,
    keepalive_ms: int,
    status_ms: int,
    retry_ms: int,
    release: Callable[[], None],
) -> AsyncIterator[bytes]:
    """The SSE byte stream of one connection. ``watch`` must have been taken from the hub
    (running) before this starts, so that every entry written after the replay's read
    wakes it. ``release`` (synchronous: it also runs when the generator is closed from a
    cancelled task) gives back the watch and the stream's slot."""
    wf_id = watch.wf_id
    loop = asyncio.get_running_loop()
    replay = _Replay(store, wf_id, after or "0-0")

    async def status() -> tuple[bytes, bool | None]:
        """The status event, and whether the workflow is terminal (None: it is gone)."""
        doc = await load_status(store, wf_id)
        if doc is None:
            return b"", None
        return b"event: status\ndata: %s\n\n" % _encoder.encode(doc), doc.terminal

    try:
        yield b"retry: %d\n\n" % retry_ms
        # 1. the status, then the history from the client's last id: read in this order,
        # a terminal status means the terminal entry is in the replay or was sent before
        sent, terminal = await status()
        if terminal is None:
            yield _END
            return
        yield sent
        out = await replay.read()
        if replay.ended:
            doc, _ = await status()
            yield out + doc + _END
            return
        if out:
            yield out
        if terminal:
            yield _END  # the terminal entry was at or before the client's last id
            return
        # 2. live: woken by the hub. A task's move owes a status document, read at most
        # every status_ms (so within status_ms of the move) and sent when it changed.
        read_at = quiet_since = loop.time()
        due = False
        while not watch.closed:
            now = loop.time()
            timeout = keepalive_ms / 1000 - (now - quiet_since)
            if due:
                timeout = min(timeout, status_ms / 1000 - (now - read_at))
            if timeout > 0 and not watch.wake.is_set():
                try:
                    async with asyncio.timeout(timeout):
                        await watch.wake.wait()
                except TimeoutError:
                    pass
            if watch.closed:
                # shutting down: end without `end`; the client resumes with Last-Event-ID
                return
            grew, moved = watch.take()
            due = due or moved
            out = await replay.read() if grew else b""
            now = loop.time()
            if out or (due and (now - read_at) * 1000 >= status_ms):
                doc, terminal = await status()
                read_at, due = now, False
                if out or doc != sent:
                    yield out + doc
                    sent, quiet_since = doc, now
                if replay.ended or terminal is None:
                    yield _END
                    return
            elif (now - quiet_since) * 1000 >= keepalive_ms:
                yield KEEPALIVE
                quiet_since = now
    except (RedisUnavailable, StoreError):
        return  # Redis went away: end; the client reconnects with Last-Event-ID
    finally:
        release()
