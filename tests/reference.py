"""A Python reference model of one task's behaviour, written from the transition table.

The property tests drive the Lua scripts and this model with the same random events and
compare every answer; the chaos checker replays histories with :func:`replay`.
"""

from __future__ import annotations

from collections.abc import Iterable

from rsjobs.model import TERMINAL, allowed
from rsjobs.schemas import HistoryEntry


class TaskModel:
    """What one task's state must be after each event, by the rules in DESIGN.md."""

    def __init__(self, max_attempts: int, delayed: bool) -> None:
        self.state = "SCHEDULED" if delayed else "PENDING"
        self.max_attempts = max_attempts
        self.attempt = 0
        self.failures = 0
        self.lease = 0  # attempt number of the current lease (0 = none issued)
        self.success_lease = 0

    def start(self, current_entry: bool) -> int:
        if self.state == "PENDING" and current_entry:
            self.attempt += 1
            self.lease = self.attempt
            self.state = "RUNNING"
            return 1
        return -2

    def finish(self, event: str, lease: int, retryable: bool) -> tuple[int, str]:
        if self.state != "RUNNING" or lease != self.lease:
            if event == "COMPLETE" and self.state == "SUCCEEDED" and lease == self.success_lease:
                return 2, self.state
            return (-3 if self.state == "RUNNING" else -2), self.state
        if event == "COMPLETE":
            self.state = "SUCCEEDED"
            self.success_lease = lease
        elif event == "REQUEUE":
            self.state = "PENDING"
        else:
            self.failures += 1
            retry = (retryable or event == "TIMEOUT") and self.failures < self.max_attempts
            if retry:
                self.state = "SCHEDULED"
            else:
                self.state = "TIMED_OUT" if event == "TIMEOUT" else "FAILED"
        return 1, self.state

    def heartbeat(self, lease: int) -> str:
        if self.state != "RUNNING":
            return self.state
        return "OK" if lease == self.lease else "LOST"

    def control(self, event: str) -> tuple[int, str]:
        target = {"CANCEL": "CANCELLED", "PAUSE": "PAUSED", "RESUME": "PENDING"}[event]
        ok = {
            "CANCEL": self.state not in TERMINAL,
            "PAUSE": self.state in ("PENDING", "SCHEDULED", "RUNNING"),
            "RESUME": self.state == "PAUSED",
        }[event]
        if ok:
            self.state = target
            return 1, target
        if self.state == target and event != "RESUME":
            return 0, self.state
        return -2, self.state

    def promote(self) -> bool:
        if self.state == "SCHEDULED":
            self.state = "PENDING"
            return True
        return False


def replay(entries: Iterable[HistoryEntry]) -> list[str]:
    """Check a history is a valid path through the table; returns the violations found.

    Accepted entries must chain (each ``from`` is the previous ``to``) and be allowed by
    the table; refused entries must leave the state as it was; nothing is accepted after
    a terminal state.
    """
    problems: list[str] = []
    state = ""
    for e in entries:
        if e.rejected:
            if e.from_state != state or e.to_state != state:
                problems.append(
                    f"{e.id}: refused {e.event} records {e.from_state}->"
                    f"{e.to_state} while the task was {state!r}"
                )
            continue
        if state in TERMINAL:
            problems.append(f"{e.id}: {e.event} accepted after terminal state {state}")
        if e.from_state != state:
            problems.append(f"{e.id}: {e.event} from {e.from_state!r}, but task was {state!r}")
        if not allowed(e.from_state, e.event, e.to_state):
            problems.append(f"{e.id}: {e.from_state} -{e.event}-> {e.to_state} not in table")
        state = e.to_state
    return problems
