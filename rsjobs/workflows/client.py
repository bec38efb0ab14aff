"""The workflow client: start workflows, read their status and history, and act on them
(confirm, regenerate, retry, publish, cancel).

Every change is one workflow script (``scripts/wf_*.lua``); this module reads, packs
arguments and turns replies into results or exceptions. Actions that open a stage
(confirm, regenerate, start) spawn its tasks right after; if this process dies in between,
the driver does it (see :mod:`rsjobs.workflows.spawn`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec
from redis.asyncio import Redis

from ..codec import encode
from ..errors import ConfigError, PayloadError, RedisUnavailable, WaitTimeout
from ..ids import validate_workflow_id
from ..settings import Settings
from ..store import Store, WfCode, WfReply, error_of
from ..store.layout import WfGateArgs, WfRegenerateArgs, WfRetryArgs, WfRetryItem, WfStartArgs
from ..store.workflows import HISTORY_MAXLEN
from .definition import WorkflowDefinition
from .errors import ActionRefused, CorruptWorkflow, UnknownDefinition, WorkflowNotFound
from .model import allowed, is_terminal
from .plan import encode_plan
from .schemas import Asset, WorkflowEvent, WorkflowInfo, WorkflowStatus, decode_asset
from .spawn import (
    ATTEMPTS,
    DriveResult,
    check_stage,
    load_info,
    new_id,
    redrive,
    spawn,
    wf_task,
)
from .spawn import current_assets as _current_assets
from .spawn import task_payload as _task_payload
from .status import load_status

__all__ = ["WorkflowClient", "validate_workflow_id"]

log = logging.getLogger("rsjobs.workflows")


class WorkflowClient:
    """Start and drive the workflows of one namespace.

    ``redis`` must be a ``redis.asyncio.Redis`` created with ``decode_responses=True``
    (see :func:`rsjobs.connect`). ``definitions`` are the workflows :meth:`start` knows by
    name; ``source`` is what history records as the actor (``api``, ``user``...).
    """

    def __init__(
        self,
        redis: Redis,
        settings: Settings | None = None,
        *,
        definitions: Iterable[WorkflowDefinition] = (),
        source: str = "api",
        history_maxlen: int = HISTORY_MAXLEN,
    ) -> None:
        self.redis = redis
        self.settings = settings or Settings()
        self.source = source
        # every call is a write this client acknowledges (its starts and actions, and the
        # spawns that follow them): durable mode applies to them
        self.store = Store(
            redis, self.settings, wf_history_maxlen=history_maxlen, durable_workflows=True
        )
        self.keys = self.store.keys
        self.definitions: dict[str, WorkflowDefinition] = {}
        for d in definitions:
            self.register(d)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        definitions: Iterable[WorkflowDefinition] = (),
        source: str = "api",
        **settings: Any,
    ) -> WorkflowClient:
        from ..client import connect

        return cls(connect(url), Settings(**settings), definitions=definitions, source=source)

    def register(self, definition: WorkflowDefinition) -> WorkflowDefinition:
        """Make ``definition`` startable by name."""
        known = self.definitions.get(definition.name)
        if known is not None and known is not definition:
            raise ConfigError(f"a definition named {definition.name!r} is registered already")
        self.definitions[definition.name] = definition
        return definition

    async def close(self) -> None:
        await self.store.close()

    async def _at(self, wf_id: str) -> Store:
        """The store of the workflow's shard (its tasks live there too)."""
        return await self.store.at(wf_id)

    async def _new_task_id(self, wf_id: str) -> str:
        """A new id for a task of the workflow: on its shard."""
        store = await self._at(wf_id)
        return new_id() if store.shards.count == 1 else store.shards.new_id(store.number)

    async def __aenter__(self) -> WorkflowClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- starting --------------------------------------------------------------------------

    def definition(self, definition: WorkflowDefinition | str) -> WorkflowDefinition:
        if isinstance(definition, WorkflowDefinition):
            return definition
        found = self.definitions.get(definition)
        if found is None:
            raise UnknownDefinition(definition)
        return found

    async def start(
        self,
        definition: WorkflowDefinition | str,
        input: Any = None,
        *,
        owner: str | None = None,
        workflow_id: str | None = None,
        restarted_from: str | None = None,
    ) -> str:
        """Start a workflow at its first stage; returns its id.

        ``workflow_id`` makes the start idempotent: a second start with the same id
        returns it and writes nothing. Bad input raises :class:`rsjobs.ConfigError`, and a
        first-stage task payload over the limit :class:`rsjobs.PayloadError`, before
        anything is written.
        """
        d = self.definition(definition)
        value = d.check_input(input)
        plan = d.plan(value)
        if owner is not None and not (0 < len(owner) <= 200):
            raise ConfigError("owner must be 1-200 characters")
        if workflow_id:
            wf_id = validate_workflow_id(workflow_id)  # its id places it
        else:
            shards = await self.store.open()
            wf_id = new_id() if shards.count == 1 else shards.new_id(shards.place(owner=owner))
        # every task payload of the first stage fits, or nothing is written
        first = WorkflowInfo(
            id=wf_id,
            definition=d.name,
            status="RUNNING",
            stage=0,
            stage_name=plan.stages[0].name,
            version=1,
            input=value,
            plan=plan,
        )
        check_stage(self.settings, first, [])
        reply = await (await self._at(wf_id)).workflows.start(
            self.source,
            WfStartArgs(
                wf_id,
                d.name,
                owner or "",
                encode(value),
                encode_plan(plan),
                len(plan.stages),
                plan.stages[0].name,
                len(plan.stages[0].tasks),
                restarted_from or "",
            ),
        )
        if reply.code is WfCode.APPLIED:
            # its stages' queues, listed from its start (each stage's spawn registers its
            # own again): once the start was accepted, as a refused call writes nothing
            await self.store.tasks.remember_queues({s.queue for s in plan.stages})
        if reply.drive:
            try:
                await spawn(self.store, wf_id, self.source)
            except (PayloadError, CorruptWorkflow) as exc:
                # a repeated start of a workflow that has moved on (its first reply was
                # lost) drives it too; a later stage that cannot be spawned is the
                # workflow's failure, which the driver records (ABORT), not this start's:
                # the start was accepted, and its caller gets the id
                log.warning("workflow %s: its next tasks cannot be spawned (%s)", wf_id, exc)
        return wf_id

    async def restart(
        self, wf_id: str, *, definition: WorkflowDefinition | str | None = None
    ) -> str:
        """Start over a finished workflow as a new workflow (same definition, input and
        owner; ``restarted_from`` links it to the old one, which does not change)."""
        info = await self.get(wf_id)
        if not info.terminal:
            raise ActionRefused(wf_id, "RESTART", info.status, "the workflow is not finished")
        d = self.definition(definition or info.definition)
        return await self.start(d, info.input, owner=info.owner or None, restarted_from=info.id)

    # -- reading ---------------------------------------------------------------------------

    async def get(self, wf_id: str) -> WorkflowInfo:
        """The workflow as stored. Raises :class:`WorkflowNotFound`."""
        info = await load_info(self.store, validate_workflow_id(wf_id))
        if info is None:
            raise WorkflowNotFound(wf_id)
        return info

    async def status(self, wf_id: str) -> WorkflowStatus:
        """The status document. Raises :class:`WorkflowNotFound`."""
        doc = await load_status(self.store, validate_workflow_id(wf_id))
        if doc is None:
            raise WorkflowNotFound(wf_id)
        return doc

    async def history(
        self, wf_id: str, *, after: str = "-", count: int | None = None
    ) -> list[WorkflowEvent]:
        """The workflow's history, oldest first; ``after`` is an exclusive stream id."""
        validate_workflow_id(wf_id)
        start = "-" if after in ("-", "0", "0-0", "") else f"({after}"
        rows = await (await self._at(wf_id)).workflows.history(wf_id, start, count)
        if rows is None:
            raise WorkflowNotFound(wf_id)
        return [WorkflowEvent.from_entry(i, f) for i, f in rows]

    async def assets(self, wf_id: str, version: int | None = None) -> list[Asset]:
        """The assets of ``version`` (default: the current one), in stage order."""
        info = await self.get(wf_id)
        found = await _current_assets(self.store, wf_id, version or info.version)
        return sorted(found, key=lambda a: (a.stage_index, a.item))

    async def all_assets(self, wf_id: str) -> list[Asset]:
        """Every asset of every version (regenerated ones included), by version and stage."""
        validate_workflow_id(wf_id)
        raw: Mapping[str, str] = await (await self._at(wf_id)).workflows.assets(wf_id)
        found = [decode_asset(v) for v in raw.values()]
        return sorted(found, key=lambda a: (a.version, a.stage_index, a.item))

    async def list(self, *, limit: int = 50, owner: str | None = None) -> list[WorkflowInfo]:
        """The most recently started workflows (that still exist), newest first."""
        records = []
        for store in await self.store.each():  # each shard's newest, merged by start time
            ids = await store.workflows.recent(max(limit * 4, limit))
            if ids:
                records += [r for r in await store.workflows.records(ids) if r is not None]
        records.sort(key=lambda r: (r.created_at, r.id), reverse=True)
        out: list[WorkflowInfo] = []
        for record in records:
            if owner is None or record.owner == owner:
                # one corrupt workflow must not hide all the others: it is left out here
                # (its history still reads; the driver moves it to FAILED)
                with contextlib.suppress(CorruptWorkflow):
                    out.append(WorkflowInfo.from_record(record))
            if len(out) >= limit:
                break
        return out

    async def wait(
        self,
        wf_id: str,
        statuses: Iterable[str] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> WorkflowInfo:
        """Block until the workflow's status is one of ``statuses`` (default: a terminal
        one), driven by its history stream. Raises :class:`rsjobs.WaitTimeout`."""
        wanted = set(statuses) if statuses is not None else None
        last_id = await (await self._at(wf_id)).workflows.last_history_id(wf_id)
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        while True:
            info = await self.get(wf_id)
            if (wanted is None and is_terminal(info.status)) or (
                wanted is not None and info.status in wanted
            ):
                return info
            block = 2000
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WaitTimeout(f"workflow {wf_id} is still {info.status}")
                block = max(1, min(block, int(left * 1000)))
            try:
                rows = await (await self._at(wf_id)).workflows.read_history(wf_id, last_id, block)
            except RedisUnavailable:  # a failover ends the read, not the wait
                await asyncio.sleep(min(0.5, block / 1000))
                rows = []
            if rows:
                last_id = rows[-1][0]

    # -- acting ----------------------------------------------------------------------------

    def _result(self, wf_id: str, action: str, reply: WfReply) -> str:
        if reply.code in (WfCode.NOT_FOUND, WfCode.REFUSED, WfCode.STALE):
            raise error_of(
                reply.code, subject=wf_id, action=action, state=reply.status, message=reply.message
            )
        return reply.status

    async def _after(self, wf_id: str, reply: WfReply) -> None:
        if reply.code >= 0 and reply.drive:
            await spawn(self.store, wf_id, self.source)

    async def confirm(
        self,
        wf_id: str,
        *,
        version: int | None = None,
        stage: str | int | None = None,
        note: str = "",
    ) -> str:
        """Confirm the stage waiting at its gate: the next stage starts (or the workflow is
        ready to publish). ``version`` / ``stage``: what the user saw; a confirmation
        for a version or stage the workflow has left is refused. Raises
        :class:`rsjobs.PayloadError`, writing nothing, when a task of the next stage would
        be over the payload limit. Returns the new status."""
        return await self._gate(wf_id, "CONFIRM", version, stage, note)

    async def publish(self, wf_id: str, *, version: int | None = None, note: str = "") -> str:
        """Publish the current version (READY_TO_PUBLISH -> PUBLISHED). A repeated publish
        returns PUBLISHED and changes nothing."""
        return await self._gate(wf_id, "PUBLISH", version, None, note)

    async def _gate(
        self,
        wf_id: str,
        event: str,
        version: int | None,
        stage: str | int | None,
        note: str,
    ) -> str:
        validate_workflow_id(wf_id)
        stage_arg = ""
        version_arg = "" if version is None else str(version)
        if stage is not None or event == "CONFIRM":
            info = await self.get(wf_id)
            if stage is not None:
                try:
                    stage_arg = str(info.plan.stage_index(stage))
                except ValueError as exc:
                    raise ConfigError(str(exc)) from None
            if event == "CONFIRM" and await self._check_confirm(info, version_arg, stage_arg):
                # checked for what was read: a confirm of anything else is refused as stale
                version_arg, stage_arg = str(info.version), str(info.stage)
        reply = await (await self._at(wf_id)).workflows.gate(
            self.source, wf_id, WfGateArgs(event, version_arg, stage_arg, note[:500])
        )
        status = self._result(wf_id, event, reply)
        await self._after(wf_id, reply)
        return status

    async def _check_confirm(self, info: WorkflowInfo, version: str, stage: str) -> bool:
        """Whether the confirm would open a next stage whose payloads were checked here
        (raises :class:`rsjobs.PayloadError` when one is over the limit)."""
        if info.status != "WAITING_CONFIRMATION" or info.stage + 1 >= len(info.plan.stages):
            return False
        if version not in ("", str(info.version)) or stage not in ("", str(info.stage)):
            return False  # refused as stale by the script
        assets = await _current_assets(self.store, info.id, info.version)
        nxt = msgspec.structs.replace(info, status="RUNNING", stage=info.stage + 1)
        check_stage(self.settings, nxt, assets)
        return True

    async def regenerate(
        self,
        wf_id: str,
        stage: str | int,
        *,
        reason: str = "",
        version: int | None = None,
    ) -> str:
        """Open a new version from ``stage`` (one already reached): unfinished tasks of the
        older version are cancelled, their late results refused; earlier stages' assets
        are carried over; the stage's tasks are created anew. Raises
        :class:`rsjobs.PayloadError`, writing nothing, when one of them would be over the
        payload limit. Returns the new status."""
        info = await self.get(wf_id)
        try:
            target = info.plan.stage_index(stage)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        expect = "" if version is None else str(version)
        if (
            allowed(info.status, "REGENERATE", "RUNNING")
            and 0 <= target <= info.stage
            and expect in ("", str(info.version))
            and info.version < info.plan.max_versions
        ):
            # the new version's tasks fit, or nothing is written; checked for the version
            # read, so a regenerate of another one is refused as stale
            assets = await _current_assets(self.store, wf_id, info.version)
            nxt = msgspec.structs.replace(
                info, status="RUNNING", version=info.version + 1, stage=target
            )
            check_stage(self.settings, nxt, assets)
            expect = str(info.version)
        reply = None
        args = WfRegenerateArgs(target, reason[:500], info.plan.max_versions, expect)
        current = info.version
        for _ in range(ATTEMPTS):
            open_set = await (await self._at(wf_id)).workflows.open_tasks(wf_id)
            # the slots it leaves behind: their succeeded tasks are superseded (costs)
            left = await (await self._at(wf_id)).workflows.left_behind(wf_id, current, target)
            reply = await (await self._at(wf_id)).workflows.regenerate(
                self.source, wf_id, args, open_set, left
            )
            if reply.code is not WfCode.STALE:
                break
            current = (await self.get(wf_id)).version
        assert reply is not None
        status = self._result(wf_id, "REGENERATE", reply)
        await self._after(wf_id, reply)
        return status

    async def cancel(self, wf_id: str, reason: str = "") -> str:
        """Cancel the workflow and every unfinished task of it. Idempotent: cancelling a
        CANCELLED workflow returns CANCELLED; a PUBLISHED or FAILED one is refused."""
        validate_workflow_id(wf_id)
        reply = None
        for _ in range(ATTEMPTS):
            open_set = await (await self._at(wf_id)).workflows.open_tasks(wf_id)
            reply = await (await self._at(wf_id)).workflows.cancel(
                self.source, wf_id, reason[:500], open_set
            )
            if reply.code is not WfCode.STALE:
                break
        assert reply is not None
        return self._result(wf_id, "CANCEL", reply)

    async def retry(self, wf_id: str, *, note: str = "") -> str:
        """Re-run only the failed tasks of the current stage (PARTIALLY_FAILED -> RUNNING);
        the tasks that succeeded keep their assets. Raises :class:`rsjobs.PayloadError`,
        writing nothing, when a new task would be over the payload limit. Returns the new
        status."""
        reply = None
        wf = (await self._at(wf_id)).workflows
        for _ in range(ATTEMPTS):
            info = await self.get(wf_id)
            args = WfRetryArgs(info.version, info.stage, note[:500])
            if info.status != "PARTIALLY_FAILED":
                reply = await wf.retry(self.source, wf_id, args, [])
                if reply.code is not WfCode.STALE:
                    break
                continue
            stage = info.plan.stages[info.stage]
            slots, open_ids = await wf.slots_and_open(wf_id)
            ended = []
            for spec in stage.tasks:
                tid = slots.get(f"{info.version}:{info.stage}:{spec.item}")
                if tid is not None and tid not in open_ids:
                    ended.append((spec, tid))
            # a task hash that is not a hash any more reads '': failed too
            states = await wf.task_states([tid for _, tid in ended])
            failed = [e for e, st in zip(ended, states, strict=True) if st != "SUCCEEDED"]
            assets = await _current_assets(self.store, wf_id, info.version)
            retries = []
            for spec, old in failed:
                payload = _task_payload(info, stage, spec, assets, info.retries + 1)
                task = wf_task(self.settings, await self._new_task_id(wf_id), stage, spec, payload)
                retries.append(WfRetryItem(old, *task))
            reply = await wf.retry(self.source, wf_id, args, retries, stage.priority)
            if reply.code is not WfCode.STALE:
                break
        assert reply is not None
        return self._result(wf_id, "RETRY", reply)

    async def redrive(self, wf_id: str) -> DriveResult:
        """Bring the workflow up to date with its tasks now (what the driver does)."""
        return await redrive(self.store, validate_workflow_id(wf_id), self.source)
