"""The task hash and the workflow hash, declared once for Python: their fields, types and
defaults, and their decoding from what ``HGETALL`` answers.

The scripts write them (a task's fields in ``new_task`` in ``fsm.lua``, a workflow's in
``wf_start.lua``); :class:`rsjobs.TaskInfo` and :class:`rsjobs.workflows.WorkflowInfo` are
built from these records. Payloads, results, inputs and plans stay JSON text here: they
are decoded where they are used. A hash that does not read as its record (a number field
that does not parse: written by something else) raises :class:`rsjobs.CorruptData`
(:class:`rsjobs.workflows.CorruptWorkflow` for a workflow). Empty values read as missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ..errors import CorruptData, CorruptWorkflow

__all__ = ["TaskRecord", "WorkflowRecord", "decode_task", "decode_workflow"]


class TaskRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A task hash (``rsjobs:{ns}:task:<id>``; the README's layout table says what each
    field means). Times are Redis TIME in milliseconds (0 = not yet)."""

    id: str = ""
    type: str = ""
    queue: str = ""
    state: str = ""
    #: JSON text
    payload: str = ""
    attempt: int = 0
    failures: int = 0
    max_attempts: int = 0
    timeout_ms: int = 0
    backoff_base_ms: int = 0
    backoff_max_ms: int = 0
    lease: str = ""
    #: the worker (consumer) holding or last holding the lease
    consumer: str = ""
    lease_expires_at: int = 0
    deadline_at: int = 0
    #: the queue-wait deadline
    expires_at: int = 0
    progress: float = 0.0
    progress_msg: str = ""
    #: JSON text
    result: str = ""
    error: str = ""
    error_type: str = ""
    owner: str = ""
    dedup: str = ""
    #: its current stream entry
    entry: str = ""
    created_at: int = 0
    updated_at: int = 0
    started_at: int = 0
    finished_at: int = 0
    due_at: int = 0
    #: deliveries lost with their consumer (reclaim.lua)
    deliveries: int = 0
    #: its entry on the dead-letter stream, and the links of a re-queued dead letter
    deadletter: str = ""
    requeued_as: str = ""
    requeued_from: str = ""
    #: the refusal entries of the current state (see ``reject`` in fsm.lua); the repeats
    #: of each are the fields ``rep:<entry id>`` and ``rep_ts:<entry id>``
    #: (:func:`rsjobs.schemas.repeat_fields`), not declared here
    refusals: str = ""
    #: a workflow's task: the workflow, its version, stage, item and asset kind, and the
    #: links of a retried task
    wf: str = ""
    wf_version: int = 0
    wf_stage: int = 0
    wf_item: str = ""
    wf_kind: str = ""
    wf_retry_of: str = ""
    wf_retried_as: str = ""


class WorkflowRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A workflow hash (``rsjobs:{ns}:wf:<id>``; see ``wf.lua``)."""

    id: str = ""
    definition: str = msgspec.field(default="", name="def")
    owner: str = ""
    status: str = ""
    stage: int = 0
    stage_name: str = ""
    version: int = 0
    spawned: str = ""
    need: int = 0
    done: int = 0
    nfailed: int = 0
    retries: int = 0
    n_stages: int = 0
    #: JSON text
    input: str = ""
    #: JSON text: the definition's snapshot (rsjobs.workflows.plan)
    plan: str = ""
    message: str = ""
    reason: str = ""
    published_version: int = 0
    restarted_from: str = ""
    created_at: int = 0
    updated_at: int = 0
    finished_at: int = 0
    published_at: int = 0


def _fields(h: Mapping[Any, Any]) -> dict[str, Any]:
    return {
        (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
        for k, v in h.items()
        if v not in ("", b"")
    }


def decode_task(h: Mapping[Any, Any]) -> TaskRecord:
    """The task of hash ``h`` (an ``HGETALL`` reply). Raises :class:`CorruptData`."""
    try:
        return msgspec.convert(_fields(h), TaskRecord, strict=False)
    except msgspec.ValidationError as exc:
        raise CorruptData("task", _id(h), str(exc)) from None


def decode_workflow(h: Mapping[Any, Any]) -> WorkflowRecord:
    """The workflow of hash ``h``. Raises :class:`CorruptWorkflow`."""
    try:
        return msgspec.convert(_fields(h), WorkflowRecord, strict=False)
    except msgspec.ValidationError as exc:
        raise CorruptWorkflow(_id(h), str(exc)) from None


def _id(h: Mapping[Any, Any]) -> str:
    v = h.get("id", h.get(b"id")) or "?"
    return v.decode() if isinstance(v, bytes) else str(v)
