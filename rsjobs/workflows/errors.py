"""The workflow branch of the exception tree (all derive from :class:`rsjobs.RsjobsError`;
defined with the rest of the tree in :mod:`rsjobs.errors`)."""

from __future__ import annotations

from ..errors import (
    ActionRefused,
    CorruptWorkflow,
    UnknownDefinition,
    WorkflowError,
    WorkflowNotFound,
)

__all__ = [
    "ActionRefused",
    "CorruptWorkflow",
    "UnknownDefinition",
    "WorkflowError",
    "WorkflowNotFound",
]
