"""The workflow branch of the exception tree (all derive from :class:`rsjobs.RsjobsError`)."""

from __future__ import annotations

from ..errors import ConfigError, RsjobsError

__all__ = [
    "ActionRefused",
    "CorruptWorkflow",
    "UnknownDefinition",
    "WorkflowError",
    "WorkflowNotFound",
]


class WorkflowError(RsjobsError):
    """Root of the errors of :mod:`rsjobs.workflows`."""


class WorkflowNotFound(WorkflowError, LookupError):
    """Raised when a workflow id names no workflow (never existed, or expired)."""

    def __init__(self, wf_id: str) -> None:
        super().__init__(f"no such workflow: {wf_id}")
        self.wf_id = wf_id


class ActionRefused(WorkflowError):
    """Raised when the workflow's state machine refuses an action (confirm of a workflow
    that waits for nothing, anything on a PUBLISHED one...). The refusal is recorded in
    the workflow's history; ``status`` is the workflow's status, unchanged."""

    def __init__(self, wf_id: str, action: str, status: str, reason: str) -> None:
        super().__init__(f"{action} refused: workflow {wf_id} is {status}: {reason}")
        self.wf_id, self.action, self.status, self.reason = wf_id, action, status, reason


class UnknownDefinition(WorkflowError, ConfigError):
    """Raised when a workflow is started with a definition name the client does not know."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown workflow definition: {name!r}")
        self.name = name


class CorruptWorkflow(WorkflowError, ValueError):
    """Raised when a workflow's stored hash does not read as a workflow (a field that does
    not parse, a plan that does not decode: written by something else than rsjobs). The
    driver moves such a workflow to FAILED (see :mod:`rsjobs.workflows.abort`)."""

    def __init__(self, wf_id: str, why: str) -> None:
        super().__init__(f"workflow {wf_id} is corrupt: {why}")
        self.wf_id, self.why = wf_id, why
