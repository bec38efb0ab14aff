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
from redis.exceptions import RedisError

from ..web.hub import exclusive
from .calls import WorkflowScripts
from .model import is_terminal
from .schemas import WorkflowEvent
from .status import load_status

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


async def is_entry(ws: WorkflowScripts, wf_id: str, entry_id: str) -> bool:
    """Whether ``entry_id`` (a valid stream id) is an entry of the workflow's history."""
    rows = await ws.redis.xrange(ws.keys.workflow_history(wf_id), entry_id, entry_id, count=1)
    return bool(rows)


async def ended_before(ws: WorkflowScripts, wf_id: str, after: str) -> bool:
    """Whether the workflow is finished and has no history entry after ``after``."""
    status = await ws.redis.hget(ws.keys.workflow(wf_id), "status")
    if status is None or not is_terminal(status):
        return False
    start = exclusive(after)
    if start is None:
        return True
    rows = await ws.redis.xrange(ws.keys.workflow_history(wf_id), start, "+", count=1)
    return not rows


async def workflow_events(
    ws: WorkflowScripts,
    wf_id: str,
    after: str,
    *,
    keepalive_ms: int = 15_000,
    status_ms: int = 1_000,
    retry_ms: int = 2_000,
) -> AsyncIterator[bytes]:
    """The SSE byte stream of one connection."""
    hkey = ws.keys.workflow_history(wf_id)
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
            rows = await ws.redis.xrange(hkey, start, "+", count=PAGE)
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
            rows = await ws.redis.xread({hkey: last}, block=status_ms, count=PAGE)
            out = []
            ended = False
            for _, entries in rows or []:
                for entry_id, fields in entries:
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
    except RedisError:
        return  # Redis went away: end; the client reconnects with Last-Event-ID
