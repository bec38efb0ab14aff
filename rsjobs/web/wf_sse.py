"""Server-sent events for one workflow: its history replayed from ``Last-Event-ID``, then
live (a blocking XREAD on the workflow's history stream), with the status document after
every change and every ``status_ms`` while tasks report progress.

- Each history entry is one event (default type) whose ``id`` is the entry id and whose
  ``data`` is the entry as JSON (the shape of ``GET /workflows/{id}/history``).
- ``event: status`` (no id) carries the status document: first on connect, then after
  each batch of entries and whenever it changed (progress) in between.
- After the entry that makes the workflow terminal: a last status, ``event: end``, and the
  response ends. Reconnecting to a finished workflow with nothing left answers 204.
- An idle connection gets a comment line every ``keepalive_ms``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from ..errors import RedisUnavailable, StoreError
from ..store import Store
from ..workflows.model import is_terminal
from ..workflows.schemas import WorkflowEvent
from ..workflows.status import load_status
from .hub import exclusive

__all__ = ["ended_before", "is_entry", "workflow_events"]

PAGE = 500
_encoder = msgspec.json.Encoder()


def _event(entry_id: str, fields: dict[str, Any]) -> bytes:
    data = _encoder.encode(WorkflowEvent.from_entry(entry_id, fields))
    return b"id: %s\ndata: %s\n\n" % (entry_id.encode(), data)


def _ends(fields: dict[str, Any]) -> bool:
    return (
        fields.get("rej") != "1"
        and is_terminal(fields.get("to", ""))
        and not is_terminal(fields.get("from", ""))
    )


async def is_entry(store: Store, wf_id: str, entry_id: str) -> bool:
    """Whether ``entry_id`` (a valid stream id) is an entry of the workflow's history."""
    return await store.workflows.is_entry(wf_id, entry_id)


async def ended_before(store: Store, wf_id: str, after: str) -> bool:
    """Whether the workflow is finished and has no history entry after ``after``."""
    status = await store.workflows.status(wf_id)
    if status is None or not is_terminal(status):
        return False
    start = exclusive(after)
    if start is None:
        return True
    return not await store.workflows.history_range(wf_id, start, 1)


async def workflow_events(
    ws: Store,
    wf_id: str,
    after: str,
    *,
    keepalive_ms: int = 15_000,
    status_ms: int = 1_000,
    retry_ms: int = 2_000,
) -> AsyncIterator[bytes]:
    """The SSE byte stream of one connection."""
    last = after or "0-0"

    async def status() -> tuple[bytes, str]:
        """The status event, and "terminal", "gone" (no such workflow) or ""."""
        doc = await load_status(ws, wf_id)
        if doc is None:
            return b"", "gone"
        return b"event: status\ndata: %s\n\n" % _encoder.encode(doc), (
            "terminal" if doc.terminal else ""
        )

    try:
        yield b"retry: %d\n\n" % retry_ms
        sent, state = await status()
        if state == "gone":
            yield b"event: end\ndata: {}\n\n"
            return
        yield sent
        # 1. replay from the client's last id
        while (start := exclusive(last)) is not None:
            rows = await ws.workflows.history_range(wf_id, start, PAGE)
            out = []
            for entry_id, fields in rows:
                out.append(_event(entry_id, fields))
                last = entry_id
                if _ends(fields):
                    doc, _ = await status()
                    yield b"".join(out) + doc + b"event: end\ndata: {}\n\n"
                    return
            if out:
                yield b"".join(out)
            if len(rows) < PAGE:
                break
        if state == "terminal":
            # the terminal entry was at or before the client's last id
            yield b"event: end\ndata: {}\n\n"
            return
        # 2. live
        quiet_since = time.monotonic()
        while True:
            rows = await ws.workflows.read_history(wf_id, last, status_ms, PAGE)
            out = []
            ended = False
            for entry_id, fields in rows:
                out.append(_event(entry_id, fields))
                last = entry_id
                ended = ended or _ends(fields)
            doc, state = await status()
            if out or doc != sent:
                yield b"".join(out) + doc
                sent = doc
                quiet_since = time.monotonic()
            elif (time.monotonic() - quiet_since) * 1000 >= keepalive_ms:
                yield b": keep-alive\n\n"
                quiet_since = time.monotonic()
            # (a terminal status whose entry this read missed: the next read has it)
            if ended or state == "gone":
                yield b"event: end\ndata: {}\n\n"
                return
    except (RedisUnavailable, StoreError):
        return  # Redis went away: end; the client reconnects with Last-Event-ID
