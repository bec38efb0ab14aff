"""Versioned multi-stage workflows on top of tasks.

Three layers: the **workflow** (definition, stage, status, current version, terminated
reason), its **tasks** (ordinary rsjobs tasks, one per item of a stage), and **asset
versions** (what each task produced, for which version). Stages are declared in Python
(:class:`WorkflowDefinition`, :class:`Stage`, :class:`TaskSpec`); advancing is decided
inside Redis by the ``wf_*`` scripts; :class:`WorkflowClient` starts and acts;
:class:`WorkflowDriver` re-drives from persisted state. See ``docs/workflows.md``.

Importable without the web parts (``rsjobs.workflows.http`` needs Starlette).
"""

from .client import WorkflowClient, validate_workflow_id
from .definition import Stage, TaskSpec, WorkflowDefinition, fan_out
from .driver import DriveReport, WorkflowDriver
from .errors import (
    ActionRefused,
    CorruptWorkflow,
    UnknownDefinition,
    WorkflowError,
    WorkflowNotFound,
)
from .model import TERMINAL, WfEvent, WfStatus
from .schemas import Asset, WorkflowEvent, WorkflowInfo, WorkflowStatus, WorkflowTask
from .spawn import DriveResult, redrive

__all__ = [
    "TERMINAL",
    "ActionRefused",
    "Asset",
    "CorruptWorkflow",
    "DriveReport",
    "DriveResult",
    "Stage",
    "TaskSpec",
    "UnknownDefinition",
    "WfEvent",
    "WfStatus",
    "WorkflowClient",
    "WorkflowDefinition",
    "WorkflowDriver",
    "WorkflowError",
    "WorkflowEvent",
    "WorkflowInfo",
    "WorkflowNotFound",
    "WorkflowStatus",
    "WorkflowTask",
    "fan_out",
    "redrive",
    "validate_workflow_id",
]
