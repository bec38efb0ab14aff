"""What a handler sees of its task: payload, attempt, deadline, progress, cancellation."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import ConfigError, LeaseLost

__all__ = ["Context"]


class Context:
    """Handed to every handler call as its first argument.

    ``cancelled`` is set when the task is cancelled, paused, timed out or its lease lost;
    async handlers are also cancelled (``asyncio.CancelledError``), sync handlers running
    in a thread should poll :attr:`is_cancelled` (or ``cancelled.wait(...)``) and return.
    From then on :meth:`progress` and :meth:`report` raise :class:`rsjobs.LeaseLost`: what
    the handler reports is no longer recorded, and a sync handler that ignores
    ``cancelled`` but reports progress ends at its next report.
    """

    __slots__ = (
        "_loop",
        "_on_progress",
        "attempt",
        "cancelled",
        "deadline",
        "max_attempts",
        "payload",
        "progress_msg",
        "progress_value",
        "queue",
        "stop_reason",
        "task_id",
        "type",
        "worker",
    )

    def __init__(
        self,
        *,
        task_id: str,
        type: str,
        queue: str,
        payload: Any,
        attempt: int,
        deadline: float | None,
        worker: str,
        loop: asyncio.AbstractEventLoop,
        on_progress: Callable[[], None],
    ) -> None:
        self.task_id = task_id
        self.type = type
        self.queue = queue
        self.payload = payload
        #: 1 for the first execution, 2 for the next...
        self.attempt = attempt
        #: time.monotonic() value of the execution deadline, or None
        self.deadline = deadline
        self.worker = worker
        self.cancelled = threading.Event()
        #: why the worker stopped the handler: CANCELLED, PAUSED, LOST, TIMEOUT, SHUTDOWN
        self.stop_reason = ""
        self.progress_value: float | None = None
        self.progress_msg = ""
        self._loop = loop
        self._on_progress = on_progress

    @property
    def is_cancelled(self) -> bool:
        return self.cancelled.is_set()

    def time_left(self) -> float | None:
        """Seconds until the execution deadline (None when the task has none)."""
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def _set_progress(self, value: float, message: str) -> None:
        if self.stop_reason:
            raise LeaseLost(self.task_id, self.stop_reason)
        if not 0 <= value <= 100:
            raise ConfigError("progress must be between 0 and 100")
        self.progress_value = float(value)
        self.progress_msg = message[:500]

    async def progress(self, value: float, message: str = "") -> None:
        """Report progress (0-100) and a short message; written to Redis coalesced (the
        latest value wins) within the worker's progress interval, and pushed to watchers.
        Raises :class:`rsjobs.LeaseLost` once the worker stopped the handler."""
        self._set_progress(value, message)
        self._on_progress()

    def report(self, value: float, message: str = "") -> None:
        """Thread-safe :meth:`progress` for sync handlers (raises :class:`rsjobs.LeaseLost`
        alike)."""
        self._set_progress(value, message)
        self._loop.call_soon_threadsafe(self._on_progress)
