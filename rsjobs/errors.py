"""The exception tree: every error rsjobs raises derives from :class:`RsjobsError`."""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "InvalidTransition",
    "LeaseLost",
    "NonRetryable",
    "NotReplicated",
    "PayloadError",
    "RedisUnavailable",
    "RsjobsError",
    "TaskNotFound",
    "WaitTimeout",
]


class RsjobsError(Exception):
    """Root of every exception raised by rsjobs."""


class ConfigError(RsjobsError, ValueError):
    """Raised when a setting or argument is invalid (bad queue name, negative timeout...)."""


class PayloadError(RsjobsError, ValueError):
    """Raised when a payload or result cannot be encoded, or exceeds the size limit."""


class TaskNotFound(RsjobsError, LookupError):
    """Raised when a task id names no task (never existed, or expired after retention)."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"no such task: {task_id}")
        self.task_id = task_id


class InvalidTransition(RsjobsError):
    """Raised when the state machine refuses an event (e.g. RESUME of a task not PAUSED).

    The refusal is also recorded in the task's history.
    """

    def __init__(self, task_id: str, event: str, state: str) -> None:
        super().__init__(f"{event} refused: task {task_id} is {state}")
        self.task_id, self.event, self.state = task_id, event, state


class LeaseLost(RsjobsError):
    """Raised inside a worker when it no longer holds the lease of the task it runs."""


class WaitTimeout(RsjobsError, TimeoutError):
    """Raised when :meth:`Client.wait` gives up before the task reached a terminal state."""


class RedisUnavailable(RsjobsError, ConnectionError):
    """Raised when Redis cannot be reached (after the retries the caller allowed)."""


class NotReplicated(RsjobsError):
    """Raised in durable mode (``Settings.wait_replicas``) when a write was applied on the
    primary but fewer replicas than asked confirmed it within ``Settings.wait_timeout_ms``:
    it may be lost if the primary fails now. The write is not undone; repeating it is safe
    (a submit with the same dedup key answers the same task, a repeated cancel changes
    nothing)."""

    def __init__(self, what: str, acked: int, wanted: int, timeout_ms: int) -> None:
        super().__init__(
            f"{what}: applied on the primary, but {acked} of {wanted} replicas confirmed it "
            f"within {timeout_ms} ms"
        )
        self.acked, self.wanted = acked, wanted


class NonRetryable(RsjobsError):
    """Raised by a handler to fail its task at once, skipping the remaining attempts."""
