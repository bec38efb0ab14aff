"""The workflow state machine as data: statuses, events and the transition table.

The Python mirror of the table in ``wf.lua`` (a test checks they are equal). Workflow
status is written only by the ``wf_*`` scripts; this module is what Python code (the
client, the status document, the tests) reasons with.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["TERMINAL", "TRANSITIONS", "WfEvent", "WfStatus", "allowed", "is_terminal"]


class WfStatus(StrEnum):
    #: the current stage's tasks are queued or running (or about to be created)
    RUNNING = "RUNNING"
    #: the current stage is complete and its gate waits for the user's CONFIRM
    WAITING_CONFIRMATION = "WAITING_CONFIRMATION"
    #: some tasks of the current stage failed; the others keep their results; RETRY
    #: re-runs only the failed ones
    PARTIALLY_FAILED = "PARTIALLY_FAILED"
    #: every stage is complete; PUBLISH makes the current version final
    READY_TO_PUBLISH = "READY_TO_PUBLISH"
    #: published: its current version's assets are final
    PUBLISHED = "PUBLISHED"
    #: cannot go on at its version (a task failed with no retries left), or at all (ABORT)
    FAILED = "FAILED"
    #: stopped by the user
    CANCELLED = "CANCELLED"


class WfEvent(StrEnum):
    START = "START"
    #: the last asset of a stage without a gate arrived: the next stage opens
    ADVANCE = "ADVANCE"
    #: the last asset of a stage with a gate arrived
    GATE = "GATE"
    #: the last asset of the last stage arrived
    READY = "READY"
    TASK_FAILED = "TASK_FAILED"
    CONFIRM = "CONFIRM"
    RETRY = "RETRY"
    REGENERATE = "REGENERATE"
    PUBLISH = "PUBLISH"
    CANCEL = "CANCEL"
    #: the driver cannot go on with the workflow (a stage whose task payloads are over the
    #: limit, stored data that does not decode): FAILED, with the reason
    ABORT = "ABORT"


#: Entries of a workflow's history that change nothing: a stage's tasks were created
#: (SPAWN), an asset was recorded (ASSET). Refused results are recorded as RESULT.
NOTES: frozenset[str] = frozenset({"SPAWN", "ASSET"})

TERMINAL: frozenset[str] = frozenset({"PUBLISHED", "FAILED", "CANCELLED"})

_RUN = frozenset({"RUNNING"})
_FAILED = frozenset({"FAILED"})

#: TRANSITIONS[from][event] = the statuses the event may lead to. "" = not yet created.
TRANSITIONS: dict[str, dict[str, frozenset[str]]] = {
    "": {"START": _RUN},
    "RUNNING": {
        "ADVANCE": _RUN,
        "GATE": frozenset({"WAITING_CONFIRMATION"}),
        "READY": frozenset({"READY_TO_PUBLISH"}),
        "TASK_FAILED": frozenset({"PARTIALLY_FAILED", "FAILED"}),
        "REGENERATE": _RUN,
        "CANCEL": frozenset({"CANCELLED"}),
        "ABORT": _FAILED,
    },
    "PARTIALLY_FAILED": {
        "TASK_FAILED": frozenset({"PARTIALLY_FAILED", "FAILED"}),
        "RETRY": _RUN,
        "REGENERATE": _RUN,
        "CANCEL": frozenset({"CANCELLED"}),
        "ABORT": _FAILED,
    },
    "WAITING_CONFIRMATION": {
        "CONFIRM": frozenset({"RUNNING", "READY_TO_PUBLISH"}),
        "REGENERATE": _RUN,
        "CANCEL": frozenset({"CANCELLED"}),
        "ABORT": _FAILED,
    },
    "READY_TO_PUBLISH": {
        "PUBLISH": frozenset({"PUBLISHED"}),
        "REGENERATE": _RUN,
        "CANCEL": frozenset({"CANCELLED"}),
        "ABORT": _FAILED,
    },
    "PUBLISHED": {},
    "FAILED": {},
    "CANCELLED": {},
}


def is_terminal(status: str) -> bool:
    """Whether ``status`` is final: the workflow accepts no change, task or result."""
    return status in TERMINAL


def allowed(from_status: str, event: str, to_status: str) -> bool:
    """Whether the table lets ``event`` lead from ``from_status`` to ``to_status``."""
    return to_status in TRANSITIONS.get(from_status, {}).get(event, frozenset())
