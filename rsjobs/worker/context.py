"""What a handler sees of its task: payload, attempt, deadline, progress, cancellation,
and what it charges to its attempt."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from ..callbacks import TOKEN_TTL_MS, Claims, sign
from ..costs import Charges
from ..errors import ConfigError, LeaseLost
from ..store.deferred import DEFAULT_PROVIDER
from .deferral import Deferral

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
        "_callback_base",
        "_callback_secret",
        "_loop",
        "_namespace",
        "_on_progress",
        "attempt",
        "cancelled",
        "charges",
        "deadline",
        "max_attempts",
        "payload",
        "predecessor_states",
        "predecessors",
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
        namespace: str = "default",
        callback_secret: str | None = None,
        callback_base: str | None = None,
        predecessor_states: dict[str, str] | None = None,
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
        #: a successor's predecessors that SUCCEEDED: id -> its result, decoded (empty for a
        #: task without predecessors; see rsjobs.successors)
        self.predecessors: dict[str, Any] = {}
        #: a successor's predecessors: id -> the state it ended in (SUCCEEDED; under
        #: after_policy "always" also FAILED, TIMED_OUT or CANCELLED)
        self.predecessor_states: dict[str, str] = dict(predecessor_states or {})
        self.cancelled = threading.Event()
        #: why the worker stopped the handler: CANCELLED, PAUSED, LOST, TIMEOUT, SHUTDOWN
        self.stop_reason = ""
        self.progress_value: float | None = None
        self.progress_msg = ""
        #: what the handler charged to this attempt (:meth:`charge`), sent with its end
        self.charges = Charges()
        self._loop = loop
        self._on_progress = on_progress
        self._namespace = namespace
        self._callback_secret = callback_secret
        self._callback_base = callback_base

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

    # -- costs -------------------------------------------------------------------------

    def charge(self, amount: float, *, unit: str) -> None:
        """Charge ``amount`` of ``unit`` to this attempt: ``ctx.charge(1.5, unit="gpu_s")``,
        ``ctx.charge(0.02, unit="usd")``. Charges of one unit add up; they are sent with the
        attempt's end (no round trip here) and summed per task, workflow, queue, type,
        owner and stage, under the category the end gives the attempt (ok, or the waste
        kind: failed, timed out...; see ``docs/costs.md``). Thread-safe enough for a sync
        handler's own thread. Raises :class:`rsjobs.ChargeError` at once, recording none of
        it, for an amount that is not a finite number >= 0 (at most 999,999,999.999999 per
        unit and attempt, kept to the millionth), a unit that is not a lowercase letter and
        up to 15 of a-z, 0-9, '_' (or is a built-in one: attempts, run_ms, wait_ms), or a
        ninth unit. What is charged after the worker stopped the handler (a cancel, a
        pause, a lost lease) is not recorded: its attempt ended without it."""
        self.charges.add(amount, unit)

    # -- deferred completion -----------------------------------------------------------

    def defer(
        self,
        external_id: str,
        *,
        max_wait_ms: int = 600_000,
        poll_every_ms: int = 0,
        provider: str = DEFAULT_PROVIDER,
        message: str = "",
    ) -> Deferral:
        """What a handler returns to hand its attempt to an outside job: ``return
        ctx.defer("prov-123", max_wait_ms=600_000)``. The task becomes DEFERRED and the
        worker's slot is free at once; the provider's callback (:meth:`callback_url`), a
        client's :meth:`rsjobs.Client.complete_external`, or the type's poller (every
        ``poll_every_ms``, see :meth:`rsjobs.Registry.poller`) ends the wait. Past
        ``max_wait_ms`` the attempt times out (the retry policy decides) and a later
        result is refused. Raises :class:`rsjobs.ConfigError` for a malformed value."""
        return Deferral.checked(
            external_id,
            provider=provider,
            max_wait_ms=max_wait_ms,
            poll_every_ms=poll_every_ms,
            message=message,
        )

    def callback_token(self, ttl_ms: int = TOKEN_TTL_MS) -> str:
        """A token that lets an outside service end this attempt's wait (and no other
        attempt's): signed with the worker's callback secret (rsjobs.callbacks). Raises
        :class:`rsjobs.ConfigError` when the worker has none."""
        if not self._callback_secret:
            raise ConfigError(
                "the worker has no callback secret (Worker(callback_secret=...) or "
                "RSJOBS_CALLBACK_SECRET)"
            )
        expires = int(time.time() * 1000) + ttl_ms
        claims = Claims(self._namespace, self.task_id, self.queue, self.attempt, expires)
        return sign(self._callback_secret, claims)

    def callback_url(self, ttl_ms: int = TOKEN_TTL_MS) -> str:
        """The URL a provider POSTs this attempt's result to: ``<base>/callbacks/<token>``
        (the base: Worker(callback_url=...) or RSJOBS_CALLBACK_URL, the web app's)."""
        if not self._callback_base:
            raise ConfigError(
                "the worker has no callback base URL (Worker(callback_url=...) or "
                "RSJOBS_CALLBACK_URL)"
            )
        return f"{self._callback_base.rstrip('/')}/callbacks/{self.callback_token(ttl_ms)}"
