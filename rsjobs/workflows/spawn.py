"""Creating a stage's tasks exactly once, and re-driving a workflow from persisted state.

Both are idempotent and safe to run from any number of processes at once: a worker that
just finished a stage's last task, the client after a confirm or regenerate, and the
driver's sweep all call them; the scripts decide (``wf_spawn.lua``'s guard,
``wf_sync.lua``'s accounting), so a crash between two steps leaves nothing stuck.
"""

from __future__ import annotations

import uuid
from typing import Any

import msgspec

from ..codec import encode_payload
from ..labels import encode_labels
from ..settings import Settings
from ..store import Store, WfCode
from ..store.layout import WfSpawnArgs, WfTask, task_options
from ..tracing import NO_TRACE, TraceContext, enqueue_span
from .plan import StagePlan, TaskPlan
from .schemas import Asset, WorkflowInfo, decode_asset

__all__ = [
    "ATTEMPTS",
    "DriveResult",
    "check_stage",
    "current_assets",
    "encoded_payload",
    "load_info",
    "new_id",
    "redrive",
    "spawn",
    "task_id",
    "task_payload",
    "wf_task",
]

#: how often a call that raced a concurrent change (reply STALE) is prepared again
ATTEMPTS = 8


def new_id() -> str:
    """A workflow or task id of a namespace of one shard (a sharded namespace's come from
    ``store.shards``, :mod:`rsjobs.store.shards`)."""
    return uuid.uuid4().hex


def task_id(store: Store) -> str:
    """A new id for a task of a workflow whose shard's store is ``store``."""
    return new_id() if store.shards.count == 1 else store.shards.new_id(store.number)


async def current_assets(store: Store, wf_id: str, version: int) -> list[Asset]:
    """The assets of ``version``, unordered."""
    store = await store.at(wf_id)
    raw = await store.workflows.assets(wf_id)
    prefix = f"{version}:"
    return [decode_asset(v) for f, v in raw.items() if f.startswith(prefix)]


def task_payload(
    info: WorkflowInfo, stage: StagePlan, spec: TaskPlan, assets: list[Asset], retry: int = 0
) -> Any:
    """What a workflow task's handler receives: its item and params, the workflow input,
    the references of the current version's assets of the earlier stages, and ``retry``:
    how many user retries of this stage came before this task (0 = its first run)."""
    earlier: dict[str, dict[str, str]] = {}
    for a in assets:
        if a.stage_index < info.stage:
            earlier.setdefault(a.stage, {})[a.item] = a.ref
    return {
        "workflow": info.id,
        "version": info.version,
        "stage": stage.name,
        "item": spec.item,
        "retry": retry,
        "params": spec.params,
        "input": info.input,
        "assets": earlier,
    }


def encoded_payload(settings: Settings, stage: StagePlan, spec: TaskPlan, payload: Any) -> bytes:
    """``payload`` encoded; :class:`rsjobs.PayloadError` (naming the task and its stage)
    when it is over the limit."""
    what = f"the payload of task {spec.item!r} of stage {stage.name!r}"
    return encode_payload(payload, settings.payload_limit, what)


def check_stage(
    settings: Settings, info: WorkflowInfo, assets: list[Asset], retry: int = 0
) -> None:
    """Raise :class:`rsjobs.PayloadError` when a task of the current stage of ``info`` (the
    workflow as an action would leave it) would get a payload over the limit. Actions
    that open a stage call this before their first write, so a refused request changes
    nothing."""
    stage = info.plan.stages[info.stage]
    for spec in stage.tasks:
        encoded_payload(settings, stage, spec, task_payload(info, stage, spec, assets, retry))


def wf_task(
    settings: Settings,
    tid: str,
    stage: StagePlan,
    spec: TaskPlan,
    payload: Any,
    trace: TraceContext = NO_TRACE,
) -> WfTask:
    """One task to create (``create_task`` in wf.lua), spawned in ``trace``."""
    return WfTask(
        tid,
        spec.type,
        stage.queue,
        encoded_payload(settings, stage, spec, payload),
        task_options(
            max_attempts=spec.max_attempts,
            timeout_ms=spec.timeout_ms,
            backoff_base_ms=spec.backoff_base_ms,
            backoff_max_ms=spec.backoff_max_ms,
            labels=encode_labels(spec.labels),
            traceparent=trace.traceparent,
            tracestate=trace.tracestate,
            priority=stage.priority,
        ),
        spec.item,
        spec.kind,
    )


async def load_info(store: Store, wf_id: str) -> WorkflowInfo | None:
    store = await store.at(wf_id)
    record = await store.workflows.record(wf_id)
    return WorkflowInfo.from_record(record) if record is not None else None


async def spawn(store: Store, wf_id: str, source: str) -> int:
    """Create the current stage's tasks if they do not exist yet; returns how many.

    Raises :class:`rsjobs.PayloadError` when a task's payload would be over the limit
    (nothing is written then; the driver moves such a workflow to FAILED). The tasks are
    created on the workflow's shard."""
    store = await store.at(wf_id)
    for _ in range(ATTEMPTS):
        info = await load_info(store, wf_id)
        if info is None or not info.needs_spawn:
            return 0
        stage = info.plan.stages[info.stage]
        assets = await current_assets(store, wf_id, info.version)
        attributes = {
            "messaging.system": "rsjobs",
            "messaging.operation.type": "send",
            "messaging.destination.name": stage.queue,
            "messaging.batch.message_count": len(stage.tasks),
            "rsjobs.workflow.id": wf_id,
            "rsjobs.workflow.stage": stage.name,
        }
        with enqueue_span(f"rsjobs.spawn {stage.name}", attributes) as trace:
            tasks = [
                wf_task(
                    store.settings,
                    task_id(store),
                    stage,
                    spec,
                    task_payload(info, stage, spec, assets),
                    trace,
                )
                for spec in stage.tasks
            ]
            await store.tasks.remember_queues([stage.queue])
            reply = await store.workflows.spawn(
                source, wf_id, WfSpawnArgs(info.version, info.stage), tasks, stage.priority
            )
        if reply.code is WfCode.APPLIED:
            return len(tasks)
        if reply.code is not WfCode.STALE:
            return 0
    return 0


class DriveResult(msgspec.Struct, kw_only=True):
    """What one :func:`redrive` of a workflow did."""

    id: str
    status: str = ""
    #: False when the workflow no longer exists
    found: bool = True
    #: tasks created (a stage spawned)
    spawned: int = 0
    #: open tasks the call had to look at
    open: int = 0


async def redrive(store: Store, wf_id: str, source: str = "driver") -> DriveResult:
    """Bring one workflow up to date with its tasks: account for task ends that did not
    pass through the workflow (reaper, task API), cancel tasks no longer current, spawn a
    stage whose tasks are missing. Idempotent."""
    store = await store.at(wf_id)
    result = DriveResult(id=wf_id)
    reply = None
    for _ in range(ATTEMPTS):
        open_set = await store.workflows.open_tasks(wf_id)
        result.open = len(open_set.ids)
        reply = await store.workflows.sync(source, wf_id, open_set)
        if reply.code is not WfCode.STALE:
            break
    if reply is None or reply.code is WfCode.NOT_FOUND:
        result.found = False
        return result
    result.status = reply.status
    if reply.drive:
        result.spawned = await spawn(store, wf_id, source)
        if result.spawned:
            info = await load_info(store, wf_id)
            result.status = info.status if info is not None else result.status
    return result
