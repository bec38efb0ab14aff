"""Request and response bodies of the workflow routes (``workflows.py``, ``assets.py``);
the task routes' are in ``schemas.py``.

Request bodies forbid unknown fields and carry their limits, so a bad body is refused
while it is decoded, before anything touches Redis.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta

from ..names import NAME_SCHEMA, OWNER_SCHEMA

__all__ = [
    "ACTION_BODIES",
    "ActionResult",
    "CancelBody",
    "ConfirmBody",
    "EventsPage",
    "PlanItem",
    "PlanStage",
    "PublishBody",
    "RegenerateBody",
    "RetryBody",
    "StartBody",
    "WorkflowPlan",
]

# the name rules of rsjobs.names (the OpenAPI document spells their \Z as $)
Name = Annotated[str, Meta(pattern=NAME_SCHEMA)]
OwnerName = Annotated[str, Meta(pattern=OWNER_SCHEMA)]
Note = Annotated[str, Meta(max_length=500)]
Version = Annotated[int, Meta(ge=1, le=1_000_000)]


class StartBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /workflows``."""

    definition: Name
    input: Any = None
    #: start on behalf of this owner: admin tokens only
    owner: OwnerName | None = None


class ConfirmBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /workflows/{id}/confirm``: ``version`` / ``stage`` = what the user saw."""

    version: Version | None = None
    stage: Name | None = None
    note: Note = ""


class RegenerateBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /workflows/{id}/regenerate``."""

    stage: Name
    reason: Note = ""
    version: Version | None = None


class RetryBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    note: Note = ""


class PublishBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    version: Version | None = None
    note: Note = ""


class CancelBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    reason: Note = ""


#: ``POST /workflows/{wf_id}/{action}``: the body each action decodes
ACTION_BODIES: dict[str, type[msgspec.Struct]] = {
    "confirm": ConfirmBody,
    "regenerate": RegenerateBody,
    "retry": RetryBody,
    "publish": PublishBody,
    "cancel": CancelBody,
}


class ActionResult(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to an action: the status after it, and the status document."""

    id: str
    action: str
    status: str
    #: false when the action changed nothing (a repeated publish or cancel, a start with an
    #: idempotency key that named an existing workflow)
    changed: bool
    workflow: Any


class EventsPage(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /workflows/{id}/history``: entries oldest first; pass ``next`` as ``after``."""

    id: str
    entries: list[Any]
    next: str | None


class PlanItem(msgspec.Struct, frozen=True, kw_only=True):
    """One task of a stage: its item name and the kind of asset it makes."""

    item: str
    kind: str = ""


class PlanStage(msgspec.Struct, frozen=True, kw_only=True):
    """One stage: ``gate`` = the user confirms it before the next stage starts."""

    name: str
    label: str
    queue: str
    gate: bool
    max_retries: int
    items: list[PlanItem]


class WorkflowPlan(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /workflows/{id}/plan``: the stages the workflow was started with, in order."""

    id: str
    definition: str
    revision: int
    max_versions: int
    stages: list[PlanStage]
