"""Request and response bodies of the workflow HTTP routes (``http.py``).

Request bodies forbid unknown fields and carry their limits, so a bad body is refused
while it is decoded, before anything touches Redis.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta

__all__ = [
    "ActionResult",
    "CancelBody",
    "ConfirmBody",
    "EventsPage",
    "PublishBody",
    "RegenerateBody",
    "RetryBody",
    "StartBody",
]

# \Z, not $ (which also matches before a final newline); the OpenAPI document spells it $
Name = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_.\-]{1,64}\Z")]
OwnerName = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_.@\-]{1,128}\Z")]
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
