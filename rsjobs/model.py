"""The task state machine as data: states, events and the transition table.

This is the Python mirror of the table in ``fsm.lua`` (a test checks they are equal). The
scripts in Redis are the only writers of task state; this module is what Python code
(the client, the chaos checker, the property tests) reasons with.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "OCCUPYING",
    "RESTART",
    "TERMINAL",
    "TRANSITIONS",
    "Event",
    "State",
    "allowed",
    "is_terminal",
    "running_delta",
]


class State(StrEnum):
    #: a successor waiting for its predecessors (no work entry, lease or deadline): released
    #: onto its queue once they succeeded, cancelled when one does not
    WAITING = "WAITING"
    #: queued on its stream, waiting for a worker
    PENDING = "PENDING"
    #: waiting for a time: a delay, or the backoff before a retry
    SCHEDULED = "SCHEDULED"
    #: a worker holds its lease and runs the handler
    RUNNING = "RUNNING"
    #: held back by a user (or a shutdown); RESUME puts it back on its queue
    PAUSED = "PAUSED"
    #: the attempt waits on an outside service (no worker slot, no lease): a fenced
    #: callback, a client call or a poll completes or fails it, its longest wait times it out
    DEFERRED = "DEFERRED"
    #: the handler returned; the result is stored
    SUCCEEDED = "SUCCEEDED"
    #: the handler failed for good (attempts exhausted, non-retryable, worker lost)
    FAILED = "FAILED"
    #: cancelled by a user or the API
    CANCELLED = "CANCELLED"
    #: the execution (or queue-wait) deadline passed, attempts exhausted
    TIMED_OUT = "TIMED_OUT"


class Event(StrEnum):
    ENQUEUE = "ENQUEUE"
    PROMOTE = "PROMOTE"
    START = "START"
    HEARTBEAT = "HEARTBEAT"
    PROGRESS = "PROGRESS"
    COMPLETE = "COMPLETE"
    FAIL = "FAIL"
    TIMEOUT = "TIMEOUT"
    RECLAIM = "RECLAIM"
    REQUEUE = "REQUEUE"
    CANCEL = "CANCEL"
    PAUSE = "PAUSE"
    RESUME = "RESUME"
    EXPIRE = "EXPIRE"
    DEADLETTER = "DEADLETTER"
    #: an operator starts a FAILED, TIMED_OUT or CANCELLED task over as a new task
    RETRY = "RETRY"
    #: the handler hands its attempt to an outside service (RUNNING -> DEFERRED)
    DEFER = "DEFER"
    #: an operator starts a SUCCEEDED task over as a new task
    REPLAY = "REPLAY"
    #: a successor's predecessors allow it to run (WAITING -> PENDING | SCHEDULED)
    RELEASE = "RELEASE"


TERMINAL: frozenset[str] = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"})

#: TRANSITIONS[from][event] = the states the event may lead to. "" = not yet created.
TRANSITIONS: dict[str, dict[str, frozenset[str]]] = {
    "": {"ENQUEUE": frozenset({"PENDING", "SCHEDULED", "WAITING"})},
    "WAITING": {
        "RELEASE": frozenset({"PENDING", "SCHEDULED"}),
        "CANCEL": frozenset({"CANCELLED"}),
    },
    "PENDING": {
        "START": frozenset({"RUNNING"}),
        "PAUSE": frozenset({"PAUSED"}),
        "CANCEL": frozenset({"CANCELLED"}),
        "EXPIRE": frozenset({"TIMED_OUT"}),
        "DEADLETTER": frozenset({"FAILED"}),
    },
    "SCHEDULED": {
        "PROMOTE": frozenset({"PENDING"}),
        "PAUSE": frozenset({"PAUSED"}),
        "CANCEL": frozenset({"CANCELLED"}),
        "EXPIRE": frozenset({"TIMED_OUT"}),
        "DEADLETTER": frozenset({"FAILED"}),
    },
    "RUNNING": {
        "HEARTBEAT": frozenset({"RUNNING"}),
        "PROGRESS": frozenset({"RUNNING"}),
        "COMPLETE": frozenset({"SUCCEEDED"}),
        "FAIL": frozenset({"SCHEDULED", "FAILED"}),
        "TIMEOUT": frozenset({"SCHEDULED", "TIMED_OUT"}),
        "RECLAIM": frozenset({"PENDING", "FAILED"}),
        "REQUEUE": frozenset({"PENDING"}),
        "PAUSE": frozenset({"PAUSED"}),
        "CANCEL": frozenset({"CANCELLED"}),
        "DEADLETTER": frozenset({"FAILED"}),
        "DEFER": frozenset({"DEFERRED"}),
    },
    "DEFERRED": {
        "COMPLETE": frozenset({"SUCCEEDED"}),
        "FAIL": frozenset({"SCHEDULED", "FAILED"}),
        "TIMEOUT": frozenset({"SCHEDULED", "TIMED_OUT"}),
        "CANCEL": frozenset({"CANCELLED"}),
        "DEADLETTER": frozenset({"FAILED"}),
    },
    "PAUSED": {
        "RESUME": frozenset({"PENDING"}),
        "CANCEL": frozenset({"CANCELLED"}),
    },
    # terminal states are never left: RETRY and REPLAY start the task over as a new task
    # and lead back to the state they found
    "SUCCEEDED": {"REPLAY": frozenset({"SUCCEEDED"})},
    "FAILED": {"RETRY": frozenset({"FAILED"})},
    "CANCELLED": {"RETRY": frozenset({"CANCELLED"})},
    "TIMED_OUT": {"RETRY": frozenset({"TIMED_OUT"})},
}

#: the states in which a task with an owner takes one of its owner's slots on its queue:
#: the per-owner RUNNING counts (``count_running`` in ``fsm.lua``) count the tasks in them,
#: and a START over the owner's limit waits (``rsjobs.limits``)
OCCUPYING: frozenset[str] = frozenset({"RUNNING"})


def running_delta(from_state: str, to_state: str) -> int:
    """How a transition changes its owner's RUNNING count: +1 into RUNNING, -1 out of it
    (every exit: COMPLETE, FAIL, TIMEOUT, RECLAIM, REQUEUE, PAUSE, CANCEL, DEADLETTER,
    DEFER), 0 otherwise."""
    return int(to_state in OCCUPYING) - int(from_state in OCCUPYING)


#: the event that starts a task of each terminal state over (``retry.lua``)
RESTART: dict[str, str] = {
    "SUCCEEDED": "REPLAY",
    "FAILED": "RETRY",
    "CANCELLED": "RETRY",
    "TIMED_OUT": "RETRY",
}


def is_terminal(state: str) -> bool:
    """Whether ``state`` is final: no event ever leaves it (RETRY and REPLAY start the
    task over as a new task and leave it where it is)."""
    return state in TERMINAL


def allowed(from_state: str, event: str, to_state: str) -> bool:
    """Whether the table lets ``event`` lead from ``from_state`` to ``to_state``."""
    return to_state in TRANSITIONS.get(from_state, {}).get(event, frozenset())
