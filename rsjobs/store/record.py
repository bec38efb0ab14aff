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
from ..model import TERMINAL
from .marker import check_task

__all__ = [
    "TASK_FIELDS",
    "TaskRecord",
    "WorkflowRecord",
    "decode_task",
    "decode_workflow",
    "field",
    "text_fields",
]


#: The short names of the task hash's common fields (``FIELD`` in ``fsm.lua``, the
#: README's glossary): long name -> the field's name in Redis. Other fields keep their name.
TASK_FIELDS = {
    "state": "s",
    "type": "t",
    "queue": "q",
    "payload": "p",
    "attempt": "a",
    "max_attempts": "ma",
    "failures": "f",
    "created_at": "c",
    "started_at": "b",
    "updated_at": "u",
    "lease": "l",
    "result": "r",
    "entry": "e",
    # only on a task submitted in a trace (rsjobs.tracing): short, so that a traceparent
    # (55 B) keeps the hash within a listpack's 64 B value
    "traceparent": "tp",
    "tracestate": "ts",
    "external_id": "x",
    "provider": "xp",
    "wait_until": "xu",
    "poll_ms": "xo",
    "resolved": "xd",
    # successors (after.lua): only on a task that has predecessors or successors
    "after": "af",
    "after_policy": "ap",
    "predecessors": "pd",
    "successors": "sc",
    "release_delay_ms": "rd",
    "release_wait_ms": "rw",
    # only on a task of priority > 0 (rsjobs.limits)
    "priority": "pr",
}


def field(name: str) -> str:
    """The name in Redis of the task hash field ``name``."""
    return TASK_FIELDS.get(name, name)


def _short(name: str) -> Any:
    return msgspec.field(default="", name=TASK_FIELDS[name])


def _short_int(name: str) -> Any:
    return msgspec.field(default=0, name=TASK_FIELDS[name])


class TaskRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A task hash (``rsjobs:{ns}:task:<id>``; the README's layout table says what each
    field means, and its glossary the short names). Times are Redis TIME in milliseconds
    (0 = not yet). Fields at their defaults are not stored: those below are the defaults
    the scripts apply. A terminal task's ``finished_at`` is its last update, a SUCCEEDED
    one's progress 100, and its ``consumer`` the worker its history's last START names
    (the hash drops what means nothing once terminal)."""

    id: str = ""
    type: str = _short("type")
    queue: str = _short("queue")
    state: str = _short("state")
    #: JSON text
    payload: str = _short("payload")
    attempt: int = _short_int("attempt")
    failures: int = _short_int("failures")
    max_attempts: int = msgspec.field(default=3, name="ma")
    timeout_ms: int = 0
    backoff_base_ms: int = 1000
    backoff_max_ms: int = 300_000
    lease: str = _short("lease")
    #: the worker (consumer) holding or last holding the lease
    consumer: str = ""
    lease_expires_at: int = 0
    deadline_at: int = 0
    #: the queue-wait deadline
    expires_at: int = 0
    progress: float = 0.0
    progress_msg: str = ""
    #: JSON text (a null result is no field)
    result: str = _short("result")
    error: str = ""
    error_type: str = ""
    owner: str = ""
    #: its labels, a JSON text (rsjobs.labels)
    labels: str = ""
    dedup: str = ""
    #: its current stream entry
    entry: str = _short("entry")
    created_at: int = _short_int("created_at")
    updated_at: int = _short_int("updated_at")
    started_at: int = _short_int("started_at")
    finished_at: int = 0
    due_at: int = 0
    #: deliveries lost with their consumer (reclaim.lua)
    deliveries: int = 0
    #: 0-9 (rsjobs.limits; not stored for 0)
    priority: int = _short_int("priority")
    #: its entry on the dead-letter stream, and the links of a re-queued dead letter
    deadletter: str = ""
    requeued_as: str = ""
    requeued_from: str = ""
    #: the links of a task started over (retry.lua): the task it starts over, and the task
    #: that started it over
    retry_of: str = ""
    retried_as: str = ""
    #: not a hash field: the traceback of the last failed attempt while its error stands
    #: (read from that attempt's FAIL history entry, see :func:`decode_task`)
    traceback: str = ""
    #: a deferred attempt (DEFERRED, scripts/defer.lua): the outside job's id and its
    #: provider (kept once the wait is over), the end of its longest wait and its poll
    #: period (while DEFERRED), and "<attempt><C|F>" (COMPLETE, FAIL) of the outside result
    #: that ended it (while DEFERRED the hash also keeps ``xh``, the number of its DEFER
    #: history entry, for the attempt's costs: rsjobs.costs)
    external_id: str = _short("external_id")
    provider: str = _short("provider")
    wait_until: int = _short_int("wait_until")
    poll_ms: int = _short_int("poll_ms")
    resolved: str = _short("resolved")
    #: the refusal entries of the current state (see ``reject`` in fsm.lua); the repeats
    #: of each are the fields ``rep:<entry id>`` and ``rep_ts:<entry id>``
    #: (:func:`rsjobs.schemas.repeat_fields`), not declared here
    refusals: str = ""
    #: a workflow's task: the workflow, its version, stage (index, and its qualified name
    #: "<definition>/<stage>": its stage in the costs hash), item and asset kind, and the
    #: links of a retried task
    wf: str = ""
    wf_version: int = 0
    wf_stage: int = 0
    wf_stage_name: str = ""
    wf_item: str = ""
    wf_kind: str = ""
    wf_retry_of: str = ""
    wf_retried_as: str = ""
    #: the W3C trace context the task was submitted in (rsjobs.tracing; '' = none)
    traceparent: str = _short("traceparent")
    tracestate: str = _short("tracestate")
    #: a successor (after.lua): its predecessors, "<id>" while awaited and "<id>:<STATE>"
    #: once counted, comma-separated; "always" when that is its policy; the results of
    #: those that SUCCEEDED (a JSON object, id -> result); its delay and queue-wait
    #: deadline, which start at its release. A predecessor: its successors' ids.
    after: str = _short("after")
    after_policy: str = _short("after_policy")
    predecessors: str = _short("predecessors")
    successors: str = _short("successors")
    release_delay_ms: int = _short_int("release_delay_ms")
    release_wait_ms: int = _short_int("release_wait_ms")
    #: the number of history entries (fields ``h1``... ``h<hn>``, :mod:`.history`)
    hn: int = 0


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


def text_fields(h: Mapping[Any, Any]) -> dict[str, str]:
    """The fields of a hash (an ``HGETALL`` reply) as text, empty values left out."""
    return _fields(h)


def decode_task(h: Mapping[Any, Any]) -> TaskRecord:
    """The task of hash ``h`` (an ``HGETALL`` reply). Raises :class:`CorruptData`, or
    :class:`rsjobs.NotMigrated` for a hash still in layout 1 (see :mod:`.marker`)."""
    f = _fields(h)
    check_task(f, _id(h))
    f.pop("traceback", None)  # derived, never stored
    try:
        r = msgspec.convert(f, TaskRecord, strict=False)
    except msgspec.ValidationError as exc:
        raise CorruptData("task", _id(h), _long_path(str(exc))) from None
    if r.failures and r.error:
        from .history import last_traceback

        r = msgspec.structs.replace(r, traceback=last_traceback(f))
    if r.state not in TERMINAL:
        return r
    progress = 100.0 if r.state == "SUCCEEDED" and "progress" not in f else r.progress
    started, finished, worker = _from_history(f, r.id)
    return msgspec.structs.replace(
        r,
        result=r.result or "null",
        progress=progress,
        consumer=r.consumer or worker,
        started_at=r.started_at or started,
        updated_at=r.updated_at or finished,
        finished_at=r.finished_at or r.updated_at or finished,
    )


def _long_path(why: str) -> str:
    """msgspec's message with a short field name (``$.a``) given its long name too."""
    for long, short in TASK_FIELDS.items():
        why = why.replace(f"`$.{short}`", f"`$.{short}` ({long})")
    return why


def _from_history(f: Mapping[str, str], task_id: str) -> tuple[int, int, str]:
    """A terminal task's last START time and worker, and the time it ended, from its
    history (its hash drops them)."""
    from .history import span

    return span(f, task_id)


def decode_workflow(h: Mapping[Any, Any]) -> WorkflowRecord:
    """The workflow of hash ``h``. Raises :class:`CorruptWorkflow`."""
    try:
        return msgspec.convert(_fields(h), WorkflowRecord, strict=False)
    except msgspec.ValidationError as exc:
        raise CorruptWorkflow(_id(h), str(exc)) from None


def _id(h: Mapping[Any, Any]) -> str:
    v = h.get("id", h.get(b"id")) or "?"
    return v.decode() if isinstance(v, bytes) else str(v)
