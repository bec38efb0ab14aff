"""One sync handler call in a thread of its own, and whether that thread has returned.

A thread cannot be stopped from outside: a sync handler that ignores ``ctx.cancelled``
keeps running after its task was cancelled or timed out. The worker therefore keeps the
call's slot taken until :attr:`HandlerThread.returned` is set (see ``Worker._hold``), so
it never starts work it has no thread for. The thread is a daemon: a handler that never
returns cannot keep the worker process from exiting once its tasks are handed back.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["HandlerThread"]


class HandlerThread:
    """Runs ``fn(*args)`` in a new daemon thread; :attr:`result` is its outcome."""

    __slots__ = ("_loop", "_on_return", "_settled", "result", "returned")

    def __init__(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        *,
        name: str,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._loop = loop
        #: the handler's return value or exception (cancelling it does not stop the thread)
        self.result: asyncio.Future[Any] = loop.create_future()
        #: set in the thread once the handler has returned or raised
        self.returned = threading.Event()
        self._on_return: Callable[[], None] | None = None
        self._settled = False
        # the handler's thread sees the worker's context (its log lines name the task)
        context = contextvars.copy_context()
        threading.Thread(
            target=context.run, args=(self._main, fn, args), name=name, daemon=True
        ).start()

    def _main(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        value: Any = None
        error: BaseException | None = None
        try:
            value = fn(*args)
        except BaseException as exc:  # handed to the awaiting side, as an executor does
            error = exc
        self.returned.set()
        # the loop may be closed by now (the worker stopped): then nobody waits for it
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._settle, value, error)

    def _settle(self, value: Any, error: BaseException | None) -> None:
        self._settled = True
        if not self.result.done():  # not cancelled by the waiting side
            if error is not None:
                self.result.set_exception(error)
            else:
                self.result.set_result(value)
        if self._on_return is not None:
            self._on_return()

    def when_returned(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (on the event loop) once the thread has returned; at once
        (soon) if it already has. Only one callback is kept."""
        if self._settled:
            self._loop.call_soon(callback)
        else:
            self._on_return = callback
