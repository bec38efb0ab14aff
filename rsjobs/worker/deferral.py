"""What a handler returns to hand its attempt to an outside service, and what a poller
answers.

``return ctx.defer("prov-123", max_wait_ms=600_000)``: the worker ends its part of the
attempt (``defer.lua``: RUNNING -> DEFERRED) and frees the slot at once; the provider's
callback, a client call or a poller ends the wait. A poller is registered with
:meth:`rsjobs.Registry.poller` and answers :meth:`PollResult.pending`,
:meth:`PollResult.done` or :meth:`PollResult.failed`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..errors import ConfigError
from ..store.deferred import DEFAULT_PROVIDER, check_external

__all__ = ["Deferral", "PollContext", "PollResult"]


class Deferral(NamedTuple):
    """The attempt waits on the outside job ``external_id`` of ``provider``."""

    external_id: str
    provider: str = DEFAULT_PROVIDER
    #: the longest wait: past it the reaper times the attempt out (retry policy)
    max_wait_ms: int = 600_000
    #: 0: a callback or a client call ends the wait; else the type's poller runs this often
    poll_every_ms: int = 0
    message: str = ""

    @classmethod
    def checked(
        cls,
        external_id: str,
        *,
        provider: str = DEFAULT_PROVIDER,
        max_wait_ms: int = 600_000,
        poll_every_ms: int = 0,
        message: str = "",
    ) -> Deferral:
        """Raise :class:`rsjobs.ConfigError` for a value defer.lua would refuse."""
        check_external(external_id, provider)
        if not isinstance(max_wait_ms, int) or max_wait_ms < 1:
            raise ConfigError("max_wait_ms must be a positive integer (milliseconds)")
        if not isinstance(poll_every_ms, int) or poll_every_ms < 0:
            raise ConfigError("poll_every_ms must be an integer >= 0 (milliseconds)")
        if poll_every_ms and poll_every_ms < 10:
            raise ConfigError("poll_every_ms must be at least 10 (or 0: no polls)")
        return cls(external_id, provider, max_wait_ms, poll_every_ms, message[:500])


class PollContext(NamedTuple):
    """What a poller sees of the task it polls."""

    task_id: str
    type: str
    attempt: int
    external_id: str
    provider: str
    payload: Any


class PollResult(NamedTuple):
    """A poller's answer: not yet, a result, or a failure."""

    #: PENDING | DONE | FAILED
    kind: str
    result: Any = None
    error: str = ""
    retryable: bool = True

    @classmethod
    def pending(cls) -> PollResult:
        """The outside job still runs: poll again after ``poll_every_ms``."""
        return cls("PENDING")

    @classmethod
    def done(cls, result: Any = None) -> PollResult:
        """The outside job finished: ``result`` is the task's result."""
        return cls("DONE", result)

    @classmethod
    def failed(cls, error: str, *, retryable: bool = True) -> PollResult:
        """The outside job failed: the task's retry policy decides."""
        return cls("FAILED", error=error, retryable=retryable)
