"""The status document: what a frontend polls, built from one consistent read."""

from __future__ import annotations

from typing import Any

from ..schemas import _text
from ..store import Store
from .schemas import Asset, WorkflowInfo, WorkflowStatus, WorkflowTask, decode_asset

__all__ = ["build_status", "load_status", "progress_of", "status_message"]

_WAITING = frozenset({"PENDING", "SCHEDULED", "PAUSED"})


def status_message(info: WorkflowInfo, label: str, running: int) -> str:
    """One sentence for people about where the workflow is."""
    s = info.status
    if s == "RUNNING":
        if info.needs_spawn:
            return f"{label}: starting"
        return f"{label}: {info.done} of {info.need} done, {running} running"
    if s == "WAITING_CONFIRMATION":
        return f"{label}: complete, waiting for your confirmation"
    if s == "PARTIALLY_FAILED":
        return (
            f"{label}: {info.nfailed} of {info.need} failed; retry to re-run only the failed "
            f"ones ({info.done} done)"
        )
    if s == "READY_TO_PUBLISH":
        return "all stages complete: ready to publish"
    if s == "PUBLISHED":
        return f"published (version {info.published_version or info.version})"
    if s == "FAILED":
        return f"failed: {info.reason}"
    if s == "CANCELLED":
        return f"cancelled: {info.reason}"
    return s


def progress_of(info: WorkflowInfo, assets: int, running_progress: float) -> int:
    """0-100: finished tasks of the current version, plus the progress of running ones,
    over every task of the plan. 100 once every stage is complete."""
    if info.status in ("READY_TO_PUBLISH", "PUBLISHED"):
        return 100
    total = info.plan.total_tasks
    value = 100 * (assets + running_progress / 100) / total if total else 0
    return max(0, min(99, int(value)))


def build_status(
    info: WorkflowInfo,
    slots: dict[str, str],
    raw_assets: dict[str, str],
    tasks: list[tuple[str, str, dict[str, Any]]],
) -> WorkflowStatus:
    """The document from the workflow, its slot and asset hashes, and the current stage's
    tasks as ``(item, task id, task hash fields)``."""
    plan = info.plan
    prefix = f"{info.version}:"
    order = {(i, t.item): n for i, s in enumerate(plan.stages) for n, t in enumerate(s.tasks)}
    assets: list[Asset] = sorted(
        (decode_asset(v) for f, v in raw_assets.items() if f.startswith(prefix)),
        key=lambda a: (a.stage_index, order.get((a.stage_index, a.item), 0)),
    )
    views, running, pending, moving = [], 0, 0, 0.0
    for item, tid, h in tasks:
        state = _text(h.get("state")) or "GONE"
        # (a SUCCEEDED task's hash leaves its progress, 100, out)
        progress = float(h.get("progress") or (100 if state == "SUCCEEDED" else 0))
        if state in ("RUNNING", "DEFERRED"):  # (DEFERRED: its outside job runs)
            running += 1
            moving += progress
        elif state in _WAITING:
            pending += 1
        views.append(
            WorkflowTask(
                item=item,
                id=tid,
                state=state,
                progress=progress,
                attempt=int(h.get("attempt") or 0),
                error=_text(h.get("error")),
            )
        )
    stage = plan.stages[info.stage]
    return WorkflowStatus(
        id=info.id,
        definition=info.definition,
        owner=info.owner,
        status=info.status,
        terminal=info.terminal,
        stage=stage.name,
        stage_label=stage.label or stage.name,
        stage_index=info.stage,
        stages=[s.name for s in plan.stages],
        progress=progress_of(info, len(assets), moving),
        version=info.version,
        completed_assets=assets,
        running_tasks=running,
        pending_tasks=pending,
        failed_tasks=info.nfailed,
        tasks=views,
        message=status_message(info, stage.label or stage.name, running),
        reason=info.reason,
        published_version=info.published_version,
        created_at=info.created_at,
        updated_at=info.updated_at,
    )


_TASK_FIELDS = ("state", "progress", "attempt", "error")


async def load_status(store: Store, wf_id: str) -> WorkflowStatus | None:
    """The status document of ``wf_id`` (None when it does not exist)."""
    store = await store.at(wf_id)
    state = await store.workflows.state(wf_id)
    if state is None:
        return None
    info = WorkflowInfo.from_record(state.record)
    stage = info.plan.stages[info.stage]
    slots = state.slots
    current = [
        (t.item, slots[key])
        for t in stage.tasks
        if (key := f"{info.version}:{info.stage}:{t.item}") in slots
    ]
    rows = await store.workflows.task_fields([tid for _, tid in current], _TASK_FIELDS)
    tasks = [(item, tid, row) for (item, tid), row in zip(current, rows, strict=True)]
    return build_status(info, slots, state.assets, tasks)
