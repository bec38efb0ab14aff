"""Typed views of what lives in Redis: a task, one history entry, an enqueue request."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from .codec import decode

__all__ = ["EnqueueRequest", "EnqueueResult", "HistoryEntry", "TaskInfo", "repeat_fields"]


def _text(v: bytes | str | None) -> str:
    if v is None:
        return ""
    return v.decode() if isinstance(v, bytes) else v


def _int(v: bytes | str | None) -> int:
    return int(v) if v else 0


class TaskInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A task as stored in its hash. Times are Redis TIME in milliseconds (0 = not yet)."""

    id: str
    type: str
    queue: str
    state: str
    attempt: int = 0
    failures: int = 0
    max_attempts: int = 1
    progress: float = 0.0
    progress_msg: str = ""
    payload: Any = None
    result: Any = None
    error: str = ""
    error_type: str = ""
    owner: str = ""
    dedup: str = ""
    timeout_ms: int = 0
    worker: str = ""
    created_at: int = 0
    updated_at: int = 0
    started_at: int = 0
    finished_at: int = 0
    due_at: int = 0
    deadline_at: int = 0
    expires_at: int = 0
    lease_expires_at: int = 0

    @property
    def terminal(self) -> bool:
        from .model import is_terminal

        return is_terminal(self.state)

    @classmethod
    def from_hash(cls, h: dict[Any, Any]) -> TaskInfo:
        g = {_text(k): v for k, v in h.items()}
        return cls(
            id=_text(g.get("id")),
            type=_text(g.get("type")),
            queue=_text(g.get("queue")),
            state=_text(g.get("state")),
            attempt=_int(g.get("attempt")),
            failures=_int(g.get("failures")),
            max_attempts=_int(g.get("max_attempts")) or 1,
            progress=float(g.get("progress") or 0),
            progress_msg=_text(g.get("progress_msg")),
            payload=decode(g.get("payload")),
            result=decode(g.get("result")),
            error=_text(g.get("error")),
            error_type=_text(g.get("error_type")),
            owner=_text(g.get("owner")),
            dedup=_text(g.get("dedup")),
            timeout_ms=_int(g.get("timeout_ms")),
            worker=_text(g.get("consumer")),
            created_at=_int(g.get("created_at")),
            updated_at=_int(g.get("updated_at")),
            started_at=_int(g.get("started_at")),
            finished_at=_int(g.get("finished_at")),
            due_at=_int(g.get("due_at")),
            deadline_at=_int(g.get("deadline_at")),
            expires_at=_int(g.get("expires_at")),
            lease_expires_at=_int(g.get("lease_expires_at")),
        )


_CORE = {"ev", "from", "to", "src", "att", "ts", "msg", "rej", "id", "q", "hid"}


def repeat_fields(entry_id: str) -> tuple[str, str]:
    """The task hash fields that count the repeats of a refusal entry (see ``reject`` in
    ``fsm.lua``): how many more refusals it stands for, and the time of the last one."""
    return f"rep:{entry_id}", f"rep_ts:{entry_id}"


class HistoryEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of a task's history stream: a transition, a progress note or a refusal.

    A refusal entry stands for the first refusal of its event (and attempt) while the task
    was in one state; ``repeats`` more were refused there after it (the last at
    ``last_ts``), counted on the task hash instead of appended.
    """

    id: str  #: the history stream entry id (also the SSE event id)
    task_id: str = ""
    event: str
    from_state: str
    to_state: str
    source: str
    attempt: int
    ts: int  #: Redis TIME, milliseconds
    message: str = ""
    rejected: bool = False
    extra: dict[str, str] = msgspec.field(default_factory=dict)
    #: refusals of the same event and attempt, in the same state, after this one
    repeats: int = 0
    #: Redis TIME (ms) of the last of those repeats; 0 when there were none
    last_ts: int = 0

    @property
    def count(self) -> int:
        """How many refused calls this entry accounts for (0 for a transition or note)."""
        return 1 + self.repeats if self.rejected else 0

    @classmethod
    def from_entry(
        cls,
        entry_id: bytes | str,
        fields: dict[Any, Any],
        task_id: str = "",
        task: Mapping[Any, Any] | None = None,
    ) -> HistoryEntry:
        """Build from a stream entry; ``task`` (the task hash, or any mapping holding its
        ``rep:<id>`` / ``rep_ts:<id>`` fields) supplies a refusal's repeat count."""
        f = {_text(k): _text(v) for k, v in fields.items()}
        eid = _text(entry_id)
        repeats = last_ts = 0
        if task and f.get("rej") == "1":
            n, ts = repeat_fields(eid)
            repeats, last_ts = _int(task.get(n)), _int(task.get(ts))
        return cls(
            id=eid,
            task_id=task_id or f.get("id", ""),
            event=f.get("ev", ""),
            from_state=f.get("from", ""),
            to_state=f.get("to", ""),
            source=f.get("src", ""),
            attempt=int(f.get("att") or 0),
            ts=int(f.get("ts") or 0),
            message=f.get("msg", ""),
            rejected=f.get("rej") == "1",
            extra={k: v for k, v in f.items() if k not in _CORE},
            repeats=repeats,
            last_ts=last_ts,
        )


class EnqueueRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One task to submit; see :meth:`rsjobs.Client.enqueue` for the meaning of each field."""

    type: str
    payload: Any = None
    queue: str = "default"
    max_attempts: int = 3
    timeout_ms: int = 0
    delay_ms: int = 0
    dedup_key: str | None = None
    owner: str | None = None
    backoff_base_ms: int = 1000
    backoff_max_ms: int = 300_000
    wait_timeout_ms: int = 0


class EnqueueResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a submit did: the task's id, its state after the call ('' when unknown), and
    whether the dedup key (or id) already named a live task, in which case nothing was
    written."""

    id: str
    state: str
    duplicate: bool
