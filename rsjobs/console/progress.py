"""``rsjobs enqueue --wait``: follow one task to its end, showing what happens to it.

The end is decided by :meth:`rsjobs.Client.wait` (a blocking read of the task's history,
no polling); meanwhile the new history entries are read a few times a second and shown:
on a terminal as a progress bar with the latest message under the transitions (with the
``rich`` extra installed: ``pip install 'rsjobs[rich]'``), anywhere else (or without it) as
one plain line per transition and per progress note. Everything goes to stderr,
so that stdout keeps only the task id and its final state for scripts.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Iterator
from typing import IO, Protocol

from ..client import Client
from ..schemas import HistoryEntry, TaskInfo
from .tables import STATE_STYLES, is_terminal

try:  # the rich extra: the progress bar
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
except ImportError:  # pragma: no cover - installed without it: plain lines
    Console = None  # type: ignore[assignment,misc]

__all__ = ["Display", "follow"]

#: how often new history entries are read for the display (seconds)
POLL_S = 0.25


class Display(Protocol):
    def entry(self, e: HistoryEntry) -> None: ...
    def done(self, info: TaskInfo) -> None: ...


def describe(e: HistoryEntry) -> str:
    """One history entry as a short line (transitions and refusals)."""
    if e.rejected:
        return f"refused {e.event} ({e.to_state}): {e.message}".rstrip(": ")
    text = f"{e.event:<9} {e.from_state or '-':>9} -> {e.to_state}"
    if e.attempt:
        text += f"  attempt {e.attempt}"
    worker = e.extra.get("worker")
    if worker and e.event == "START":
        text += f"  on {worker}"
    if e.message:
        text += f"  ({' '.join(e.message.split())[:120]})"
    return text


class PlainDisplay:
    """One line per entry, with the seconds since the wait began."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.t0 = time.monotonic()

    def _line(self, text: str) -> None:
        self.out.write(f"{time.monotonic() - self.t0:7.2f}s  {text}\n")
        self.out.flush()

    def entry(self, e: HistoryEntry) -> None:
        if e.event == "PROGRESS" and not e.rejected:
            pct = float(e.extra.get("p") or 0)
            self._line(f"{pct:5.1f}%  {e.message}".rstrip())
        elif e.event != "HEARTBEAT":
            self._line(describe(e))

    def done(self, info: TaskInfo) -> None:
        self._line(f"{info.state} after {info.attempt} attempt(s)")


class BarDisplay:
    """A rich progress bar: state, bar, percentage, latest message, time elapsed; the
    transitions are printed above it as they happen."""

    def __init__(self, out: IO[str], label: str) -> None:
        self.console = Console(file=out, highlight=False)
        self.progress = Progress(
            TextColumn("{task.fields[state]}"),
            BarColumn(),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=self.console,
            transient=False,
        )
        self.task = self.progress.add_task(label, total=100, state=self._state("PENDING"))

    @staticmethod
    def _state(state: str) -> str:
        style = STATE_STYLES.get(state, "")
        return f"[{style}]{state}[/]" if style else state

    @contextlib.contextmanager
    def shown(self) -> Iterator[BarDisplay]:
        with self.progress:
            yield self

    def entry(self, e: HistoryEntry) -> None:
        if e.event == "PROGRESS" and not e.rejected:
            pct = float(e.extra.get("p") or 0)
            self.progress.update(self.task, completed=pct, description=e.message)
        elif e.event != "HEARTBEAT":
            self.progress.console.print(describe(e), markup=False)
            if not e.rejected and e.to_state:
                self.progress.update(self.task, state=self._state(e.to_state))
                if e.to_state == "PENDING":  # a retry or a hand-back starts afresh
                    self.progress.update(self.task, completed=0)

    def done(self, info: TaskInfo) -> None:
        completed = 100.0 if info.state == "SUCCEEDED" else info.progress
        self.progress.update(self.task, completed=completed, state=self._state(info.state))


async def _show_new(client: Client, tid: str, after: str, display: Display) -> str:
    for e in await client.history(tid, after=after):
        display.entry(e)
        after = e.id
    return after


async def _follow(client: Client, tid: str, timeout_ms: int | None, display: Display) -> TaskInfo:
    waiter = asyncio.ensure_future(client.wait(tid, timeout_ms=timeout_ms))
    after = "-"
    try:
        while not waiter.done():
            after = await _show_new(client, tid, after, display)
            await asyncio.wait([waiter], timeout=POLL_S)
        info = waiter.result()  # WaitTimeout (or a Redis error) goes to the caller
        await _show_new(client, tid, after, display)
    finally:
        if not waiter.done():
            waiter.cancel()
            with contextlib.suppress(BaseException):
                await waiter
    display.done(info)
    return info


async def follow(
    client: Client,
    tid: str,
    *,
    timeout_ms: int | None = None,
    out: IO[str] | None = None,
    bar: bool | None = None,
) -> TaskInfo:
    """Show the task's way to a terminal state on ``out`` (stderr) and return it there.

    ``bar``: a progress bar (default: when ``out`` is a terminal; plain lines without the
    rich extra) or plain lines. Raises
    :class:`rsjobs.WaitTimeout` after ``timeout_ms``; the task itself goes on.
    """
    stream = out if out is not None else sys.stderr
    if Console is not None and (bar if bar is not None else is_terminal(stream)):
        display = BarDisplay(stream, f"task {tid}")
        with display.shown():
            return await _follow(client, tid, timeout_ms, display)
    return await _follow(client, tid, timeout_ms, PlainDisplay(stream))
