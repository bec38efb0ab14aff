"""A Python reference model of one task's behaviour, written from the transition table.

The property tests drive the Lua scripts and this model with the same random events and
compare every answer; the chaos checker replays histories with :func:`replay`.
"""

from __future__ import annotations

from collections.abc import Iterable

from rsjobs.model import TERMINAL, allowed
from rsjobs.schemas import HistoryEntry


class TaskModel:
    """What one task's state, and its history, must be after each event, by the rules in
    DESIGN.md and the refusal coalescing of ``fsm.lua`` (``reject``)."""

    def __init__(
        self, max_attempts: int, delayed: bool, *, waiting: bool = False, always: bool = False
    ) -> None:
        self.state = "WAITING" if waiting else "SCHEDULED" if delayed else "PENDING"
        self.delayed = delayed
        #: a successor (after.lua) of one predecessor, and its policy; released: its
        #: predecessor let it run (a successor never released is not started over)
        self.successor = waiting
        self.always = always
        self.released = not waiting
        self.max_attempts = max_attempts
        self.attempt = 0
        self.failures = 0
        self.lease = 0  # attempt number of the current lease (0 = none issued)
        self.success_lease = 0
        #: the history as it must read: (event, from, to, rejected, attempt, repeats)
        self.history: list[list[object]] = [["ENQUEUE", "", self.state, False, 0, 0]]
        #: refusals recorded while in the current state: (event, attempt key) -> entry index
        self.refused: dict[tuple[str, str], int] = {}
        #: every refused call (what the rej: counters add up to)
        self.refusals = 0
        #: tasks RETRY / REPLAY made of this one (a repeat makes none)
        self.restarts = 0
        #: (attempt, event) of the outside result that ended the current wait, if any
        self.resolved: tuple[int, str] | None = None

    # -- history -------------------------------------------------------------------------

    def _moved(self, event: str, from_state: str) -> None:
        """An accepted transition: one entry; refusals in the new state are new entries."""
        self.history.append([event, from_state, self.state, False, self.attempt, 0])
        self.refused = {}

    def _refuse(self, event: str, attempt: int | None = None) -> None:
        """A refused call naming ``attempt`` (None = the current one): the first of its
        event and attempt in this state is an entry, later ones count on that entry."""
        att = self.attempt if attempt is None else attempt
        key = (event, str(att) if 0 <= att <= self.attempt else "?")
        self.refusals += 1
        if key in self.refused:
            self.history[self.refused[key]][5] += 1  # type: ignore[operator]
            return
        self.refused[key] = len(self.history)
        self.history.append([event, self.state, self.state, True, att, 0])

    # -- events --------------------------------------------------------------------------

    def start(self, current_entry: bool) -> int:
        if self.state == "PENDING" and current_entry:
            self.attempt += 1
            self.lease = self.attempt
            self.state = "RUNNING"
            self._moved("START", "PENDING")
            return 1
        self._refuse("START")
        return -2

    def finish(
        self, event: str, lease: int, retryable: bool, named: int | None = None
    ) -> tuple[int, str]:
        """``lease``: the attempt whose issued lease is presented (-1 = none issued);
        ``named``: the attempt the token names (recorded on a refusal)."""
        if self.state != "RUNNING" or lease != self.lease:
            if event == "COMPLETE" and self.state == "SUCCEEDED" and lease == self.success_lease:
                return 2, self.state
            self._refuse(event, lease if named is None else named)
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
        self._moved(event, "RUNNING")
        return 1, self.state

    def defer(self, lease: int, named: int | None = None) -> tuple[int, str]:
        """DEFER (defer.lua) with the lease of attempt ``lease`` (-1 = none issued); the
        same outside job every time."""
        if self.state == "DEFERRED" and lease == self.lease:
            return 2, self.state  # a repeat of the lease holder's DEFER
        if self.state != "RUNNING" or lease != self.lease:
            self._refuse("DEFER", lease if named is None else named)
            return (-3 if self.state == "RUNNING" else -2), self.state
        self.state = "DEFERRED"
        self.resolved = None
        self._moved("DEFER", "RUNNING")
        return 1, self.state

    def resolve(self, event: str, attempt: int, retryable: bool) -> tuple[int, str]:
        """An outside result (resolve.lua) for ``attempt``: COMPLETE or FAIL."""
        if self.resolved == (attempt, event):
            return 2, self.state
        if self.state != "DEFERRED" or attempt != self.attempt:
            self._refuse(event, attempt)
            return (-2 if self.state != "DEFERRED" else -3), self.state
        self.resolved = (attempt, event)
        if event == "COMPLETE":
            self.state = "SUCCEEDED"
            # (the lease stays on the hash: its holder's repeated COMPLETE answers 2)
            self.success_lease = self.lease
        else:
            self.failures += 1
            retry = retryable and self.failures < self.max_attempts
            self.state = "SCHEDULED" if retry else "FAILED"
        self._moved(event, "DEFERRED")
        return 1, self.state

    def wait_passes(self) -> None:
        """The reaper finds a DEFERRED task past its longest wait: TIMEOUT."""
        assert self.state == "DEFERRED"
        self.failures += 1
        self.state = "SCHEDULED" if self.failures < self.max_attempts else "TIMED_OUT"
        self._moved("TIMEOUT", "DEFERRED")

    def heartbeat(self, lease: int, progress: bool = False, named: int | None = None) -> str:
        event = "PROGRESS" if progress else "HEARTBEAT"
        if self.state != "RUNNING" or lease != self.lease:
            self._refuse(event, lease if named is None else named)
            return self.state if self.state != "RUNNING" else "LOST"
        if progress:  # a note, not a transition: refusals in this state stay coalesced
            self.history.append(["PROGRESS", "RUNNING", "RUNNING", False, self.attempt, 0])
        return "OK"

    def control(self, event: str) -> tuple[int, str]:
        target = {"CANCEL": "CANCELLED", "PAUSE": "PAUSED", "RESUME": "PENDING"}[event]
        ok = {
            "CANCEL": self.state not in TERMINAL,
            "PAUSE": self.state in ("PENDING", "SCHEDULED", "RUNNING"),
            "RESUME": self.state == "PAUSED",
        }[event]
        if ok:
            before, self.state = self.state, target
            self._moved(event, before)
            return 1, target
        self._refuse(event)
        if self.state == target and event != "RESUME":
            return 0, self.state
        return -2, self.state

    def restart(self, event: str) -> int:
        """RETRY / REPLAY (retry.lua): in a terminal state that takes ``event``, a note
        that leaves the state as it is (refusals stay coalesced, as after a PROGRESS), the
        first time; a repeat answers the first one's task (0, nothing written)."""
        if not allowed(self.state, event, self.state) or not self.released:
            self._refuse(event)
            return -2
        if self.restarts:
            return 0
        self.restarts += 1
        self.history.append([event, self.state, self.state, False, self.attempt, 0])
        return 1

    def predecessor_ends(self, state: str) -> str:
        """Its predecessor ended in ``state`` and the release step ran (successors.lua):
        the word it answers for this task."""
        if self.state != "WAITING":
            return "STALE"
        if state == "SUCCEEDED" or self.always:
            self.state = "SCHEDULED" if self.delayed else "PENDING"
            self.released = True
            self._moved("RELEASE", "WAITING")
            return "RELEASED"
        self.state = "CANCELLED"
        self._moved("CANCEL", "WAITING")
        return "CANCELLED"

    def promote(self) -> bool:
        if self.state == "SCHEDULED":
            self.state = "PENDING"
            self._moved("PROMOTE", "SCHEDULED")
            return True
        return False


def replay(entries: Iterable[HistoryEntry]) -> list[str]:
    """Check a history is a valid path through the table; returns the violations found.

    Accepted entries must chain (each ``from`` is the previous ``to``) and be allowed by
    the table; refused entries must leave the state as it was; nothing is accepted after
    a terminal state but what the table allows there (RETRY / REPLAY, back to it).
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
        if state in TERMINAL and not allowed(state, e.event, e.to_state):
            # (the table's RETRY / REPLAY of a terminal state lead back to it)
            problems.append(f"{e.id}: {e.event} accepted after terminal state {state}")
        if e.from_state != state:
            problems.append(f"{e.id}: {e.event} from {e.from_state!r}, but task was {state!r}")
        if not allowed(e.from_state, e.event, e.to_state):
            problems.append(f"{e.id}: {e.from_state} -{e.event}-> {e.to_state} not in table")
        state = e.to_state
    return problems
