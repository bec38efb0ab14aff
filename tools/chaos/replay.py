"""Replay a task's history through the transition table (``rsjobs.model``).

The same rules as ``tests/support/reference.py``'s ``replay``, kept beside the harness so that
the chaos checker can run anywhere, and with a code per problem so reports can count them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from rsjobs.model import TERMINAL, allowed
from rsjobs.schemas import HistoryEntry

__all__ = ["ELIDED", "Problem", "final_state", "replay"]

#: the event of the one entry that stands for a history's elided entries
ELIDED = "ELIDED"


class Problem(NamedTuple):
    #: AFTER_TERMINAL, BROKEN_CHAIN, ILLEGAL_TRANSITION or BAD_REFUSAL
    code: str
    entry_id: str
    detail: str


def replay(entries: Iterable[HistoryEntry]) -> list[Problem]:
    """Check a history is a valid path through the table; returns the problems found.

    Accepted entries must chain (each ``from`` is the previous ``to``) and be allowed by
    the table (an ELIDED entry, standing for entries a long history elided, must chain);
    refused entries must leave the state as it was; nothing is accepted after a terminal
    state but what the table allows there (RETRY / REPLAY, back to it).
    """
    problems: list[Problem] = []
    state = ""
    for e in entries:
        if e.event == ELIDED:
            # entries a long history elided (docs/task-size.md): they stand in their place
            # as one, from the state before them to the state after them
            if e.from_state != state:
                problems.append(
                    Problem("BROKEN_CHAIN", e.id, f"ELIDED from {e.from_state!r}, task {state!r}")
                )
            state = e.to_state
            continue
        if e.rejected:
            if e.from_state != state or e.to_state != state:
                problems.append(
                    Problem(
                        "BAD_REFUSAL",
                        e.id,
                        f"refused {e.event} records {e.from_state}->{e.to_state} "
                        f"while the task was {state!r}",
                    )
                )
            continue
        if state in TERMINAL and not allowed(state, e.event, e.to_state):
            # (the table's RETRY / REPLAY of a terminal state lead back to it)
            problems.append(
                Problem("AFTER_TERMINAL", e.id, f"{e.event} accepted after terminal {state}")
            )
        if e.from_state != state:
            problems.append(
                Problem(
                    "BROKEN_CHAIN", e.id, f"{e.event} from {e.from_state!r}, but task was {state!r}"
                )
            )
        if not allowed(e.from_state, e.event, e.to_state):
            problems.append(
                Problem(
                    "ILLEGAL_TRANSITION",
                    e.id,
                    f"{e.from_state or '-'} -{e.event}-> {e.to_state} is not in the table",
                )
            )
        state = e.to_state
    return problems


def final_state(entries: Iterable[HistoryEntry]) -> str:
    """The state the accepted entries lead to ('' for an empty history)."""
    state = ""
    for e in entries:
        if not e.rejected:
            state = e.to_state
    return state
