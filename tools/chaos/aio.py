"""Ending the harness's own asyncio tasks within a bound.

Awaiting a task after ``cancel()`` can hang: a cancellation that arrives while an inner
``asyncio.wait_for`` completes is swallowed on Python 3.11, and a retry loop that then
goes on never ends. And ``await task`` inside ``suppress(CancelledError)`` swallows the
*caller's* cancellation too (Ctrl-C, SIGTERM). So the harness cancels, waits with a bound
(``asyncio.wait``, which never raises for the awaited tasks), cancels again what is left,
and reports what would not stop instead of waiting for it forever.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

__all__ = ["stop_tasks"]


async def stop_tasks(tasks: Iterable[asyncio.Task[Any]], timeout_s: float = 10.0) -> int:
    """Cancel ``tasks`` and wait for them, at most ``timeout_s`` in all; returns how many
    were still running at the bound (they are left cancelled, not awaited)."""
    left = {t for t in tasks if not t.done()}
    for _ in range(2):
        if not left:
            break
        for t in left:
            t.cancel()
        _, pending = await asyncio.wait(left, timeout=timeout_s / 2)
        left = set(pending)
    for t in tasks:
        if t.done() and not t.cancelled():
            t.exception()  # retrieved: no "exception was never retrieved" at exit
    return len(left)
