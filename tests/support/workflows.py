"""Helpers for the workflow tests: a test definition, a hand-driven worker that claims and
ends workflow tasks through the real scripts, and checks of a workflow's invariants."""

from __future__ import annotations

import os
import uuid
from typing import Any, NamedTuple

from redis.asyncio import Redis

from rsjobs.codec import decode, encode
from rsjobs.model import TERMINAL as TASK_TERMINAL
from rsjobs.settings import Settings
from rsjobs.store import Beat, Code, Store, TaskKeys
from rsjobs.store.layout import BeatItem, Ending, WfStartArgs
from rsjobs.workflows import Stage, WorkflowClient, WorkflowDefinition, fan_out
from rsjobs.workflows.finish import WorkflowFinisher
from rsjobs.workflows.model import NOTES, TERMINAL, allowed
from rsjobs.workflows.plan import encode_plan
from rsjobs.workflows.schemas import WorkflowEvent, WorkflowInfo, decode_asset

EMOTIONS = ["happy", "sad", "angry", "surprised", "afraid", "disgusted", "calm", "shy"]


def character(queue: str = "wf", *, max_retries: int = 3, flags: str = "") -> WorkflowDefinition:
    """The seed's pipeline with the handlers of tests.support.wf_apps: params (gate),
    images (gate), actions, 8 emotions. ``flags``: a directory of fail / hold flag files."""

    def params(item: str) -> dict[str, Any]:
        p: dict[str, Any] = {"item": item}
        if flags:
            p["fail_flag"] = os.path.join(flags, f"fail-{item}")
            p["hold_flag"] = os.path.join(flags, f"hold-{item}")
        return p

    return WorkflowDefinition(
        "character",
        [
            Stage("params", fan_out("wf.make", ["params"], kind="json", params=params), gate=True,
                  queue=queue, max_retries=max_retries),
            Stage("images", fan_out("wf.make", ["front", "side"], kind="image", params=params),
                  gate=True, queue=queue, max_retries=max_retries),
            Stage("actions", fan_out("wf.make", ["enter", "leave"], kind="video", params=params),
                  queue=queue, max_retries=max_retries),
            Stage("emotions", fan_out("wf.make", EMOTIONS, kind="video", params=params),
                  queue=queue, max_retries=max_retries),
        ],
    )  # fmt: skip


class Claimed(NamedTuple):
    id: str
    lease: str
    keys: TaskKeys
    wf: str
    payload: Any
    entry: str = ""  #: its work entry (for heartbeats)

    @property
    def item(self) -> str:
        return str(self.payload["item"])

    @property
    def version(self) -> int:
        return int(self.payload["version"])


class Hand:
    """A worker driven by hand: claims workflow tasks (start.lua, through the store) and
    ends them through the same call the worker makes (wf_finish.lua via WorkflowFinisher)."""

    def __init__(self, redis: Redis, settings: Settings, name: str = "hand") -> None:
        self.redis = redis
        self.store = Store(redis, settings)
        self.finisher = WorkflowFinisher(self.store, name)
        self.name = name

    async def claim(self, queue: str = "wf", count: int = 100) -> list[Claimed]:
        stream = self.store.keys.queue(queue)
        work = self.store.work
        await work.ensure_groups([stream])
        deliveries = await work.read(self.name, {stream: queue}, count, None)
        if not deliveries:
            return []
        replies = await work.start(self.name, 60_000, self.name, deliveries)
        entries = {d.task_id: d.entry for d in deliveries}
        out = []
        for r in replies:
            if r.code is Code.APPLIED:
                keys = self.store.keys.task_keys(r.id, queue)
                out.append(Claimed(r.id, r.lease, keys, r.wf, decode(r.payload), entries[r.id]))
        return out

    async def progress(self, c: Claimed, percent: float, message: str = "") -> Beat:
        """Report progress as the worker does (heartbeat.lua: a PROGRESS entry)."""
        item = BeatItem(c.lease, c.entry, str(percent), message)
        (word,) = await self.store.work.heartbeat(self.name, 60_000, [(c.keys, item)])
        return word

    async def end(
        self, c: Claimed, event: str, body: Any = None, *, retryable: bool = False
    ) -> int:
        if event == "COMPLETE":
            text = encode(body if body is not None else {"ref": ref_of(c)}).decode()
            ending = Ending(event, c.lease, text, "", 1, -1, 0.5)
        else:
            ending = Ending(event, c.lease, str(body or "planned failure"), "Planned",
                            int(retryable), -1, 0.5)  # fmt: skip
        return await self.finisher.finish(c.wf, c.id, c.keys, ending, give_up_s=5)

    async def complete(self, c: Claimed, body: Any = None) -> int:
        return await self.end(c, "COMPLETE", body)

    async def fail(self, c: Claimed, why: str = "planned failure") -> int:
        return await self.end(c, "FAIL", why)


def ref_of(c: Claimed) -> str:
    return f"mem://{c.wf}/v{c.version}/{c.payload['stage']}/{c.item}/{c.id}"


# -- invariants ------------------------------------------------------------------------------


def replay(entries: list[WorkflowEvent]) -> list[str]:
    """A workflow history must be a path through the table: accepted transitions chain and
    are allowed, notes and refusals leave the status as it was, nothing is accepted after a
    terminal status, and the version never goes down."""
    problems: list[str] = []
    status, version = "", 0
    for e in entries:
        if e.version < version:
            problems.append(f"{e.id}: version went down {version} -> {e.version}")
        version = max(version, e.version)
        if e.rejected or e.event in NOTES:
            if e.from_status != status or e.to_status != status:
                problems.append(f"{e.id}: {e.event} note/refusal {e.from_status}->{e.to_status} "
                                f"while the workflow was {status!r}")  # fmt: skip
            if e.event in NOTES and status in TERMINAL:
                problems.append(f"{e.id}: {e.event} after terminal {status}")
            continue
        if status in TERMINAL:
            problems.append(f"{e.id}: {e.event} accepted after terminal status {status}")
        if e.from_status != status:
            problems.append(f"{e.id}: {e.event} from {e.from_status!r}, but it was {status!r}")
        if not allowed(e.from_status, e.event, e.to_status):
            problems.append(f"{e.id}: {e.from_status} -{e.event}-> {e.to_status} not in table")
        status = e.to_status
    return problems


async def invariants(c: WorkflowClient, wf_id: str, *, quiet: bool = False) -> list[str]:
    """Everything that must hold of a workflow at any moment; with ``quiet`` (no task
    running or waiting and the driver has passed), also that it is not stuck."""
    r, k = c.redis, c.keys
    problems: list[str] = []
    info = await c.get(wf_id)
    history = await c.history(wf_id)
    problems += replay(history)
    transitions = [e for e in history if not e.rejected and e.event not in NOTES]
    if not transitions or transitions[-1].to_status != info.status:
        problems.append(f"status {info.status} is not the last transition's target")
    slots: dict[str, str] = await r.hgetall(k.workflow_tasks(wf_id))
    raw_assets: dict[str, str] = await r.hgetall(k.workflow_assets(wf_id))
    open_ids: set[str] = await r.smembers(k.workflow_open(wf_id))
    v, s = info.version, info.stage
    plan = info.plan
    # assets: one per slot, of their own version; the current set complete for the stages
    # behind the current one (and the current one, once it completed)
    for field, raw in raw_assets.items():
        a = decode_asset(raw)
        fv, fs, item = field.split(":", 2)
        if (a.version, a.stage_index, a.item) != (int(fv), int(fs), item):
            problems.append(f"asset {field} says version {a.version} stage {a.stage_index}")
        if int(fv) == v and not a.carried_from and slots.get(field) != a.task:
            problems.append(f"asset {field} was made by {a.task}, not the slot's task")
        if int(fv) == v and int(fs) > s:
            problems.append(f"asset {field} of a stage not reached yet")
    complete_upto = (
        s if info.status in ("RUNNING", "PARTIALLY_FAILED", "FAILED", "CANCELLED") else s + 1
    )
    for i in range(complete_upto):
        for t in plan.stages[i].tasks:
            if f"{v}:{i}:{t.item}" not in raw_assets:
                problems.append(f"stage {i} is behind, but {t.item} has no asset at v{v}")
    current_assets = [f for f in raw_assets if f.startswith(f"{v}:{s}:")]
    if len(current_assets) != info.done:
        problems.append(f"done={info.done} but {len(current_assets)} assets at v{v} stage {s}")
    # tasks: slot tasks agree with assets; open tasks are current; old versions are over
    task_states: dict[str, str | None] = {}
    for tid in slots.values():
        task_states[tid] = await r.hget(k.task(tid), "state")
    for field, tid in slots.items():
        fv, fs, _ = field.split(":", 2)
        state = task_states[tid]
        if field in raw_assets and state not in (None, "SUCCEEDED"):
            problems.append(f"slot {field} has an asset but its task {tid} is {state}")
        if state == "SUCCEEDED" and field not in raw_assets and tid not in open_ids:
            problems.append(f"slot {field}: task {tid} SUCCEEDED, not open, but no asset")
        if int(fv) < v and tid in open_ids and quiet:
            problems.append(f"task {tid} of old version {fv} still open")
    for tid in open_ids:
        h = await r.hmget(k.task(tid), ["wf_version", "wf_stage", "state"])
        if h[0] is not None and (int(h[0]), int(h[1])) != (v, s) and quiet:
            problems.append(f"open task {tid} is of v{h[0]} stage {h[1]}, not current")
        if quiet and h[2] in TASK_TERMINAL:
            problems.append(f"open task {tid} is {h[2]} after the driver passed")
    if info.terminal:
        if quiet and open_ids:
            problems.append(f"{info.status} workflow still has open tasks {open_ids}")
        if quiet and await r.sismember(k.workflows_active, wf_id):
            problems.append(f"{info.status} workflow still active")
        if info.status == "PUBLISHED" and info.published_version != v:
            problems.append("published version is not the current version")
    else:
        if not await r.sismember(k.workflows_active, wf_id):
            problems.append(f"{info.status} workflow is not in the active set")
    if info.status == "PARTIALLY_FAILED" and info.nfailed < 1:
        problems.append("PARTIALLY_FAILED without a failed task")
    if info.status == "RUNNING" and info.nfailed:
        problems.append(f"RUNNING with {info.nfailed} failed tasks")
    if not info.needs_spawn and info.status in ("RUNNING", "PARTIALLY_FAILED"):
        live = sum(1 for t in open_ids if task_states.get(t) not in TASK_TERMINAL)
        if info.done + info.nfailed + len(open_ids) != info.need and quiet:
            problems.append(
                f"done {info.done} + failed {info.nfailed} + open {len(open_ids)} != "
                f"need {info.need}"
            )
        if quiet and info.status == "RUNNING" and live == 0:
            problems.append("stuck: RUNNING with no live task")
    if quiet and info.needs_spawn:
        problems.append("stuck: a stage waits to be spawned after the driver passed")
    return problems


async def wf_keys_dump(c: WorkflowClient, wf_id: str) -> dict[str, Any]:
    """The workflow's own state (not its history): equal before and after = unchanged."""
    r, k = c.redis, c.keys
    return {
        "wf": await r.hgetall(k.workflow(wf_id)),
        "tasks": await r.hgetall(k.workflow_tasks(wf_id)),
        "assets": await r.hgetall(k.workflow_assets(wf_id)),
        "open": await r.smembers(k.workflow_open(wf_id)),
    }


def info_of(h: dict[str, str]) -> WorkflowInfo:
    return WorkflowInfo.from_hash(h)


async def raw_start(
    c: WorkflowClient, definition: WorkflowDefinition, value: Any, *, plan: bytes | None = None
) -> str:
    """What :meth:`WorkflowClient.start` writes before it spawns the first stage, as if its
    process died right then (or as a client with a larger payload limit leaves it for the
    driver): the workflow RUNNING at stage 0, no task yet. No check of the payloads."""
    p = definition.plan(value)
    wf_id = uuid.uuid4().hex
    args = WfStartArgs(wf_id, definition.name, "", encode(value),
                       plan if plan is not None else encode_plan(p), len(p.stages),
                       p.stages[0].name, len(p.stages[0].tasks), "")  # fmt: skip
    reply = await c.store.workflows.start("api", args)
    assert reply.code == 1 and reply.drive
    return wf_id


async def key_content(r: Redis, key: Any) -> Any:
    """What a key holds, comparable before and after: hashes and sets by content (a
    hashtable-encoded one DUMPs differently with the same content), the rest by DUMP."""
    kind = await r.type(key)
    if kind in (b"hash", "hash"):
        return ("hash", sorted((await r.hgetall(key)).items()))
    if kind in (b"set", "set"):
        return ("set", sorted(await r.smembers(key)))
    return ("dump", await r.dump(key))


async def redis_dump(r: Redis) -> dict[str, Any]:
    """Every key with its content: equal before and after = nothing written."""
    return {k: await key_content(r, k) for k in sorted(await r.keys("*"))}
