"""Typed views of a workflow: its hash, its assets, its history, its status document."""

from __future__ import annotations

from typing import Any

import msgspec

from ..codec import decode
from ..schemas import _int, _text
from .errors import CorruptWorkflow
from .model import is_terminal
from .plan import Plan, decode_plan

__all__ = ["Asset", "WorkflowEvent", "WorkflowInfo", "WorkflowStatus", "WorkflowTask"]


class WorkflowInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A workflow as stored in its hash. Times are Redis TIME in milliseconds."""

    id: str
    definition: str
    owner: str = ""
    status: str
    stage: int
    stage_name: str
    version: int
    spawned: str = ""
    need: int = 0
    done: int = 0
    nfailed: int = 0
    retries: int = 0
    n_stages: int = 0
    input: Any = None
    plan: Plan
    message: str = ""
    reason: str = ""
    published_version: int = 0
    restarted_from: str = ""
    created_at: int = 0
    updated_at: int = 0
    finished_at: int = 0

    @property
    def terminal(self) -> bool:
        return is_terminal(self.status)

    @property
    def needs_spawn(self) -> bool:
        """RUNNING at a stage and version whose tasks do not exist yet."""
        return self.status == "RUNNING" and self.spawned != f"{self.version}:{self.stage}"

    @classmethod
    def from_hash(cls, h: dict[Any, Any]) -> WorkflowInfo:
        """Raises :class:`CorruptWorkflow` when the hash does not read as a workflow."""
        try:
            return cls._from_hash(h)
        except (ValueError, TypeError, msgspec.DecodeError) as exc:
            raise CorruptWorkflow(_text(h.get("id")) or "?", str(exc)) from None

    @classmethod
    def _from_hash(cls, h: dict[Any, Any]) -> WorkflowInfo:
        g = {_text(k): v for k, v in h.items()}
        return cls(
            id=_text(g.get("id")),
            definition=_text(g.get("def")),
            owner=_text(g.get("owner")),
            status=_text(g.get("status")),
            stage=_int(g.get("stage")),
            stage_name=_text(g.get("stage_name")),
            version=_int(g.get("version")),
            spawned=_text(g.get("spawned")),
            need=_int(g.get("need")),
            done=_int(g.get("done")),
            nfailed=_int(g.get("nfailed")),
            retries=_int(g.get("retries")),
            n_stages=_int(g.get("n_stages")),
            input=decode(g.get("input")),
            plan=decode_plan(_text(g.get("plan"))),
            message=_text(g.get("message")),
            reason=_text(g.get("reason")),
            published_version=_int(g.get("published_version")),
            restarted_from=_text(g.get("restarted_from")),
            created_at=_int(g.get("created_at")),
            updated_at=_int(g.get("updated_at")),
            finished_at=_int(g.get("finished_at")),
        )


class Asset(msgspec.Struct, frozen=True, kw_only=True):
    """What one task produced, for one version of the workflow."""

    ref: str  #: a reference: file path, URL, object key...
    kind: str = ""
    version: int  #: the workflow version this asset belongs to
    stage: str
    stage_index: int
    item: str
    task: str  #: the task that made it
    ts: int = 0  #: when it was recorded (Redis TIME, ms)
    #: set when the asset was made by an earlier version and carried into this one by a
    #: regenerate of a later stage
    carried_from: int = 0
    meta: Any = None


_asset_decoder = msgspec.json.Decoder(Asset)


def decode_asset(raw: str | bytes) -> Asset:
    return _asset_decoder.decode(raw)


_CORE = {"ev", "from", "to", "src", "v", "stage", "ts", "msg", "rej"}


class WorkflowEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of a workflow's history: a transition, a note (SPAWN, ASSET) or a refusal."""

    id: str  #: the history stream entry id (also the SSE event id)
    event: str
    from_status: str
    to_status: str
    source: str
    version: int
    stage: str
    ts: int  #: Redis TIME, milliseconds
    message: str = ""
    rejected: bool = False
    extra: dict[str, str] = msgspec.field(default_factory=dict)

    @classmethod
    def from_entry(cls, entry_id: bytes | str, fields: dict[Any, Any]) -> WorkflowEvent:
        f = {_text(k): _text(v) for k, v in fields.items()}
        return cls(
            id=_text(entry_id),
            event=f.get("ev", ""),
            from_status=f.get("from", ""),
            to_status=f.get("to", ""),
            source=f.get("src", ""),
            version=int(f.get("v") or 0),
            stage=f.get("stage", ""),
            ts=int(f.get("ts") or 0),
            message=f.get("msg", ""),
            rejected=f.get("rej") == "1",
            extra={k: v for k, v in f.items() if k not in _CORE},
        )


class WorkflowTask(msgspec.Struct, frozen=True, kw_only=True):
    """A task of the current stage and version, as the status document shows it."""

    item: str
    id: str
    state: str
    progress: float = 0.0
    attempt: int = 0
    error: str = ""


class WorkflowStatus(msgspec.Struct, frozen=True, kw_only=True):
    """The status document a frontend polls (or receives over SSE)."""

    id: str
    definition: str
    owner: str = ""
    status: str
    terminal: bool
    stage: str
    stage_label: str
    stage_index: int
    stages: list[str]
    #: 0-100: finished tasks (plus the progress of running ones) over all tasks of the plan
    progress: int
    version: int
    #: assets of the current version only, in plan order
    completed_assets: list[Asset]
    running_tasks: int
    pending_tasks: int
    failed_tasks: int
    tasks: list[WorkflowTask]
    message: str
    reason: str = ""
    published_version: int = 0
    created_at: int = 0
    updated_at: int = 0
