"""What the driver does with a workflow it cannot drive: find what is wrong, then ABORT it.

Driving a workflow (:func:`rsjobs.workflows.spawn.redrive`) can fail on that workflow's
data alone: its next stage's task payloads are over the limit (the input plus the
references of earlier assets grew too big), its plan or input does not decode, its hash
misses a field, one of its keys has the wrong type. The driver then checks the stored
workflow (:func:`workflow_defects`):

* a payload over the limit, or a defect found: ``wf_abort.lua`` moves the workflow to
  FAILED (event ABORT, the reason in its history and as its terminated reason) and cancels
  its open tasks; when the table has no move for it (no status, an unknown one), it is
  dropped from the active set with a refused ABORT in its history (quarantined).
* nothing found: the failure is not the workflow's fault (a bug, or something this check
  does not know): nothing is changed, it is logged with its traceback and counted as an
  error, and the next pass tries again. A workflow is never failed on a guess.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..codec import decode
from ..errors import PayloadError, StoreError
from ..schemas import _text
from ..store import OpenSet, Store, WfCode, WfReply
from .errors import CorruptWorkflow
from .model import WfStatus
from .plan import decode_plan
from .schemas import WorkflowInfo, decode_asset

__all__ = ["abort", "defects_of", "reason_of", "workflow_defects"]

#: workflow hash fields that hold integers
_COUNTERS = ("stage", "version", "need", "done", "nfailed", "retries", "n_stages")

_STATUSES = frozenset(s.value for s in WfStatus)


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def defects_of(
    wf_id: str, types: dict[str, str], h: dict[str, Any], assets: dict[str, Any]
) -> list[str]:
    """What is wrong with a stored workflow: the types of its keys (``wf``, ``history``,
    ``tasks``, ``assets``, ``open``), its hash ``h`` and its assets hash."""
    expected = {"wf": "hash", "history": "stream", "tasks": "hash", "assets": "hash", "open": "set"}
    found = [
        f"its {name} key is a {types[name]}, not a {want}"
        for name, want in expected.items()
        if types.get(name, "none") not in (want, "none")
    ]
    if types.get("wf") != "hash":
        return found
    g = {_text(k): _text(v) for k, v in h.items()}
    status = g.get("status", "")
    if not status:
        found.append("no status field")
    elif status not in _STATUSES:
        found.append(f"unknown status {status[:64]!r}")
    if g.get("id") != wf_id:
        found.append("no id field" if not g.get("id") else f"its id field says {g['id'][:64]!r}")
    if not g.get("stage_name"):
        found.append("no stage_name field")
    for name in _COUNTERS:
        if _int(g.get(name)) is None:
            found.append(f"{name} is {'missing' if name not in g else 'not a number'}")
    try:
        plan = decode_plan(g.get("plan", ""))
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        found.append(f"its plan does not decode ({exc})")
    else:
        stage, n_stages, need = _int(g.get("stage")), _int(g.get("n_stages")), _int(g.get("need"))
        if n_stages is not None and n_stages != len(plan.stages):
            found.append(f"n_stages is {n_stages}, its plan has {len(plan.stages)} stages")
        if stage is not None and not 0 <= stage < len(plan.stages):
            found.append(f"stage {stage} is not a stage of its plan")
        elif stage is not None and need is not None and need != len(plan.stages[stage].tasks):
            found.append(f"need is {need}, stage {stage} has {len(plan.stages[stage].tasks)} tasks")
    try:
        decode(g.get("input"))
    except msgspec.DecodeError as exc:
        found.append(f"its input does not decode ({exc})")
    for field, raw in assets.items():
        try:
            decode_asset(raw)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            found.append(f"asset {_text(field)[:80]} does not decode ({exc})")
            break
    if not found:
        try:
            WorkflowInfo.from_hash(h)
        except CorruptWorkflow as exc:
            found.append(f"it does not read as a workflow ({exc.why})")
    return found


async def workflow_defects(store: Store, wf_id: str) -> list[str]:
    """What is wrong with the stored workflow ``wf_id`` ([] when nothing is found)."""
    types, h, assets = await store.workflows.inspect(wf_id)
    return defects_of(wf_id, types, h, assets)


async def reason_of(store: Store, wf_id: str, exc: BaseException) -> str:
    """Why the workflow cannot go on after ``exc`` ('' when nothing wrong is found)."""
    if isinstance(exc, PayloadError):
        return f"its next tasks cannot be created: {exc}"
    defects = await workflow_defects(await store.at(wf_id), wf_id)
    if not defects:
        return ""
    return f"its stored data is corrupt: {'; '.join(defects)} ({type(exc).__name__}: {exc})"


async def abort(store: Store, wf_id: str, reason: str, source: str) -> WfReply:
    """Run ``wf_abort.lua`` (see its header for the reply codes)."""
    store = await store.at(wf_id)
    reply = None
    for _ in range(8):
        open_set = OpenSet([], [])
        try:
            open_set = await store.workflows.open_tasks(wf_id)
        except StoreError as exc:  # the open set is not a set: named tasks stay as they are
            if exc.code != "WRONGTYPE":
                raise
        reply = await store.workflows.abort(source, wf_id, reason[:1000], open_set)
        if reply.code is not WfCode.STALE:
            break
    assert reply is not None
    return reply
