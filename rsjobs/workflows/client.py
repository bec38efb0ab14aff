"""The workflow client: start workflows, read their status and history, and act on them
(confirm, regenerate, retry, publish, cancel).

Every change is one workflow script (``scripts/wf_*.lua``); this module reads, packs
arguments and turns replies into results or exceptions. Actions that open a stage
(confirm, regenerate, start) spawn its tasks right after; if this process dies in between,
the driver does it (see :mod:`rsjobs.workflows.spawn`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec
from redis.asyncio import Redis

from ..codec import encode
from ..errors import ConfigError, WaitTimeout
from ..settings import Settings
from .calls import HISTORY_MAXLEN, Reply, WorkflowScripts
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
    task_argv,
)
from .spawn import current_assets as _current_assets
from .spawn import task_payload as _task_payload
from .status import load_status

__all__ = ["WorkflowClient", "validate_workflow_id"]

_HEX = frozenset("0123456789abcdef")


def validate_workflow_id(wf_id: str) -> str:
    """Return ``wf_id`` if it has the shape of a workflow id (32 lowercase hex), else raise."""
    if not isinstance(wf_id, str) or len(wf_id) != 32 or not set(wf_id) <= _HEX:
        raise ConfigError(f"invalid workflow id {wf_id!r}: expected 32 lowercase hex characters")
    return wf_id


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
        self.scripts = WorkflowScripts(
            redis, self.settings, history_maxlen=history_maxlen, durable=True
        )
        self.keys = self.scripts.keys
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
        await self.redis.aclose()

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
        wf_id = validate_workflow_id(workflow_id) if workflow_id else new_id()
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
        check_stage(self.scripts, first, [])
        await self.redis.sadd(self.keys.queues, *{s.queue for s in plan.stages})
        reply = await self.scripts.call(
            "wf_start",
            self.source,
            wf_id,
            [],
            [
                wf_id,
                d.name,
                owner or "",
                encode(value),
                encode_plan(plan),
                len(plan.stages),
                plan.stages[0].name,
                len(plan.stages[0].tasks),
                restarted_from or "",
            ],
        )
        if reply.drive:
            await spawn(self.scripts, wf_id, self.source)
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
        info = await load_info(self.scripts, validate_workflow_id(wf_id))
        if info is None:
            raise WorkflowNotFound(wf_id)
        return info

    async def status(self, wf_id: str) -> WorkflowStatus:
        """The status document. Raises :class:`WorkflowNotFound`."""
        doc = await load_status(self.scripts, validate_workflow_id(wf_id))
        if doc is None:
            raise WorkflowNotFound(wf_id)
        return doc

    async def history(
        self, wf_id: str, *, after: str = "-", count: int | None = None
    ) -> list[WorkflowEvent]:
        """The workflow's history, oldest first; ``after`` is an exclusive stream id."""
        validate_workflow_id(wf_id)
        start = "-" if after in ("-", "0", "0-0", "") else f"({after}"
        rows = await self.redis.xrange(self.keys.workflow_history(wf_id), start, "+", count=count)
        if not rows and not await self.redis.exists(self.keys.workflow(wf_id)):
            raise WorkflowNotFound(wf_id)
        return [WorkflowEvent.from_entry(i, f) for i, f in rows]

    async def assets(self, wf_id: str, version: int | None = None) -> list[Asset]:
        """The assets of ``version`` (default: the current one), in stage order."""
        info = await self.get(wf_id)
        found = await _current_assets(self.scripts, wf_id, version or info.version)
        return sorted(found, key=lambda a: (a.stage_index, a.item))

    async def all_assets(self, wf_id: str) -> list[Asset]:
        """Every asset of every version (regenerated ones included), by version and stage."""
        validate_workflow_id(wf_id)
        raw: Mapping[str, str] = await self.redis.hgetall(self.keys.workflow_assets(wf_id))
        found = [decode_asset(v) for v in raw.values()]
        return sorted(found, key=lambda a: (a.version, a.stage_index, a.item))

    async def list(self, *, limit: int = 50, owner: str | None = None) -> list[WorkflowInfo]:
        """The most recently started workflows (that still exist), newest first."""
        ids = await self.redis.zrevrange(self.keys.workflows, 0, max(limit * 4, limit) - 1)
        out: list[WorkflowInfo] = []
        if not ids:
            return out
        async with self.redis.pipeline(transaction=False) as pipe:
            for wf_id in ids:
                pipe.hgetall(self.keys.workflow(wf_id))
            rows = await pipe.execute(raise_on_error=False)
        for h in rows:
            if isinstance(h, dict) and h and (owner is None or h.get("owner", "") == owner):
                # one corrupt workflow must not hide all the others: it is left out here
                # (its history still reads; the driver moves it to FAILED)
                with contextlib.suppress(CorruptWorkflow):
                    out.append(WorkflowInfo.from_hash(h))
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
        hkey = self.keys.workflow_history(wf_id)
        last = await self.redis.xrevrange(hkey, "+", "-", count=1)
        last_id = last[0][0] if last else "0-0"
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
            rows = await self.redis.xread({hkey: last_id}, block=block)
            if rows:
                last_id = rows[0][1][-1][0]

    # -- acting ----------------------------------------------------------------------------

    def _result(self, wf_id: str, action: str, reply: Reply) -> str:
        if reply.code == -1:
            raise WorkflowNotFound(wf_id)
        if reply.code == -2:
            raise ActionRefused(wf_id, action, reply.status, reply.message)
        if reply.code == -5:
            raise ActionRefused(
                wf_id, action, reply.status, "the workflow kept changing; try again"
            )
        return reply.status

    async def _after(self, wf_id: str, reply: Reply) -> None:
        if reply.code >= 0 and reply.drive:
            await spawn(self.scripts, wf_id, self.source)

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
        reply = await self.scripts.call(
            "wf_gate", self.source, wf_id, [], [event, version_arg, stage_arg, note[:500]]
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
        assets = await _current_assets(self.scripts, info.id, info.version)
        nxt = msgspec.structs.replace(info, status="RUNNING", stage=info.stage + 1)
        check_stage(self.scripts, nxt, assets)
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
            assets = await _current_assets(self.scripts, wf_id, info.version)
            nxt = msgspec.structs.replace(
                info, status="RUNNING", version=info.version + 1, stage=target
            )
            check_stage(self.scripts, nxt, assets)
            expect = str(info.version)
        reply = None
        for _ in range(ATTEMPTS):
            ids, tkeys = await self.scripts.open_tasks(wf_id)
            argv = [target, reason[:500], info.plan.max_versions, expect, *ids]
            reply = await self.scripts.call("wf_regenerate", self.source, wf_id, tkeys, argv)
            if reply.code != -5:
                break
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
            ids, tkeys = await self.scripts.open_tasks(wf_id)
            reply = await self.scripts.call(
                "wf_cancel", self.source, wf_id, tkeys, [reason[:500], *ids]
            )
            if reply.code != -5:
                break
        assert reply is not None
        return self._result(wf_id, "CANCEL", reply)

    async def retry(self, wf_id: str, *, note: str = "") -> str:
        """Re-run only the failed tasks of the current stage (PARTIALLY_FAILED -> RUNNING);
        the tasks that succeeded keep their assets. Raises :class:`rsjobs.PayloadError`,
        writing nothing, when a new task would be over the payload limit. Returns the new
        status."""
        reply = None
        for _ in range(ATTEMPTS):
            info = await self.get(wf_id)
            if info.status != "PARTIALLY_FAILED":
                reply = await self.scripts.call(
                    "wf_retry", self.source, wf_id, [], [info.version, info.stage, note[:500]]
                )
                if reply.code != -5:
                    break
                continue
            stage = info.plan.stages[info.stage]
            k = self.keys
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.hgetall(k.workflow_tasks(wf_id))
                pipe.smembers(k.workflow_open(wf_id))
                slots, open_ids = await pipe.execute()
            ended = []
            for spec in stage.tasks:
                tid = slots.get(f"{info.version}:{info.stage}:{spec.item}")
                if tid is not None and tid not in open_ids:
                    ended.append((spec, tid))
            async with self.redis.pipeline(transaction=False) as pipe:
                for _, tid in ended:
                    pipe.hget(k.task(tid), "state")
                # a task hash that is not a hash any more answers an error: failed too
                states = await pipe.execute(raise_on_error=False) if ended else []
            failed = [e for e, st in zip(ended, states, strict=True) if st != "SUCCEEDED"]
            assets = await _current_assets(self.scripts, wf_id, info.version)
            tasks, argv = [], [info.version, info.stage, note[:500]]
            for spec, old in failed:
                new = new_id()
                tasks += [self.scripts.task_keys(old, stage.queue)]
                tasks += [self.scripts.task_keys(new, stage.queue)]
                payload = _task_payload(info, stage, spec, assets, info.retries + 1)
                argv += [old, *task_argv(self.scripts, new, stage, spec, payload)]
            reply = await self.scripts.call("wf_retry", self.source, wf_id, tasks, argv)
            if reply.code != -5:
                break
        assert reply is not None
        return self._result(wf_id, "RETRY", reply)

    async def redrive(self, wf_id: str) -> DriveResult:
        """Bring the workflow up to date with its tasks now (what the driver does)."""
        return await redrive(self.scripts, validate_workflow_id(wf_id), self.source)
