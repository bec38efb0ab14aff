"""Every workflow script call (``scripts/wf_*.lua``) and every read of a workflow's keys:
its hash, history, slots, assets, open set, the index and the active set.

Workflow scripts take the seven workflow keys after their items' keys and the channel and
history bound after the common ARGV (``wf.lua``); replies are :class:`WfReply` (or
:class:`WfFinishReply`). The calls of a client (its starts, actions and the spawns that
follow them) are writes it acknowledges: with ``durable`` they follow durable mode.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from . import layout
from .keys import TaskKeys
from .layout import (
    Ending,
    OpenTask,
    RegenerateTask,
    WfAbortArgs,
    WfCancelArgs,
    WfGateArgs,
    WfReadArgs,
    WfRegenerateArgs,
    WfRetryArgs,
    WfRetryItem,
    WfSpawnArgs,
    WfStartArgs,
    WfSyncArgs,
    WfTask,
)
from .record import WorkflowRecord, decode_workflow, field
from .replies import WfFinishReply, WfReply, WfView, text
from .scripts import Scripts
from .transient import boundary

__all__ = ["HISTORY_MAXLEN", "OpenSet", "WorkflowState", "Workflows"]

#: default approximate bound (MAXLEN ~) of one workflow's history stream
HISTORY_MAXLEN = 10_000

Row = tuple[str, dict[str, str]]


class OpenSet(NamedTuple):
    """A workflow's open task ids, as read, with their keys (a task whose hash is gone or
    unreadable gets placeholder keys, never written)."""

    ids: list[str]
    keys: list[TaskKeys]

    def items(self) -> list[tuple[TaskKeys, OpenTask]]:
        return [(k, OpenTask(i)) for k, i in zip(self.keys, self.ids, strict=True)]


class WorkflowState(NamedTuple):
    """A workflow's hash, slots (``<version>:<stage>:<item>`` -> task id) and assets (slot
    -> asset JSON), read as of one moment (``wf_read.lua``)."""

    record: WorkflowRecord
    slots: dict[str, str]
    assets: dict[str, str]


def _text_map(m: dict[Any, Any]) -> dict[str, str]:
    return {text(k): text(v) for k, v in m.items()}


class Workflows:
    """The workflows' side of the store (``store.workflows``)."""

    def __init__(
        self, scripts: Scripts, *, history_maxlen: int = HISTORY_MAXLEN, durable: bool = False
    ) -> None:
        self.scripts = scripts
        self.redis = scripts.redis
        self.keys = scripts.keys
        self.history_maxlen = history_maxlen
        self.durable = durable

    async def _run(self, call: layout.Packed) -> Any:
        return await self.scripts.run(call, durable=self.durable)

    def _task_keys(self, task_id: str, queue: str, priority: int = 0) -> TaskKeys:
        # workflow tasks have no dedup key; their priority is their stage's
        return self.keys.task_keys(task_id, queue, None, priority)

    # -- the scripts -----------------------------------------------------------------------

    async def start(self, source: str, args: WfStartArgs) -> WfReply:
        c, k = self.scripts.common, self.keys.workflow_keys(args.id)
        return WfReply.of(await self._run(layout.wf_start(c, source, self.history_maxlen, k, args)))

    async def spawn(
        self,
        source: str,
        wf_id: str,
        args: WfSpawnArgs,
        tasks: Sequence[WfTask],
        priority: int = 0,
    ) -> WfReply:
        """``wf_spawn.lua``: the stage's tasks (of the stage's ``priority``)."""
        items = [(self._task_keys(t.id, t.queue, priority), t) for t in tasks]
        call = layout.wf_spawn(
            self.scripts.common, source, self.history_maxlen, self.keys.workflow_keys(wf_id),
            args, items,
        )  # fmt: skip
        return WfReply.of(await self._run(call))

    async def finish(
        self, source: str, wf_id: str, keys: TaskKeys, ending: Ending
    ) -> WfFinishReply:
        call = layout.wf_finish(
            self.scripts.common, source, self.history_maxlen, self.keys.workflow_keys(wf_id),
            keys, ending,
        )  # fmt: skip
        return WfFinishReply.of(await self._run(call))

    async def gate(self, source: str, wf_id: str, args: WfGateArgs) -> WfReply:
        c, k = self.scripts.common, self.keys.workflow_keys(wf_id)
        return WfReply.of(await self._run(layout.wf_gate(c, source, self.history_maxlen, k, args)))

    async def retry(
        self,
        source: str,
        wf_id: str,
        args: WfRetryArgs,
        slots: Sequence[WfRetryItem],
        priority: int = 0,
    ) -> WfReply:
        """``wf_retry.lua``: new tasks for the failed slots (of the stage's ``priority``,
        as the failed tasks were)."""
        items = [
            (
                self._task_keys(s.failed_id, s.queue, priority),
                self._task_keys(s.id, s.queue, priority),
                s,
            )
            for s in slots
        ]
        call = layout.wf_retry(
            self.scripts.common, source, self.history_maxlen, self.keys.workflow_keys(wf_id),
            args, items,
        )  # fmt: skip
        return WfReply.of(await self._run(call))

    async def regenerate(
        self,
        source: str,
        wf_id: str,
        args: WfRegenerateArgs,
        open_set: OpenSet,
        left: OpenSet | None = None,
    ) -> WfReply:
        """REGENERATE: ``open_set`` as read, and ``left`` the tasks of the slots it leaves
        behind (:meth:`left_behind`), whose succeeded attempts it marks superseded."""
        left = left or OpenSet([], [])
        items = [
            (k, RegenerateTask(i, role))
            for role, found in (("open", open_set), ("left", left))
            for k, i in zip(found.keys, found.ids, strict=True)
        ]
        call = layout.wf_regenerate(
            self.scripts.common, source, self.history_maxlen, self.keys.workflow_keys(wf_id),
            args, items,
        )  # fmt: skip
        return WfReply.of(await self._run(call))

    async def cancel(self, source: str, wf_id: str, reason: str, open_set: OpenSet) -> WfReply:
        call = layout.wf_cancel(
            self.scripts.common, source, self.history_maxlen, self.keys.workflow_keys(wf_id),
            WfCancelArgs(reason), open_set.items(),
        )  # fmt: skip
        return WfReply.of(await self._run(call))

    async def sync(self, source: str, wf_id: str, open_set: OpenSet) -> WfReply:
        call = layout.wf_sync(
            self.scripts.common, source, self.history_maxlen, self.keys.workflow_keys(wf_id),
            WfSyncArgs(wf_id), open_set.items(),
        )  # fmt: skip
        return WfReply.of(await self._run(call))

    async def abort(self, source: str, wf_id: str, reason: str, open_set: OpenSet) -> WfReply:
        call = layout.wf_abort(
            self.scripts.common, source, self.history_maxlen, self.keys.workflow_keys(wf_id),
            WfAbortArgs(wf_id, reason), open_set.items(),
        )  # fmt: skip
        return WfReply.of(await self._run(call))

    # -- reads -----------------------------------------------------------------------------

    async def open_tasks(self, wf_id: str) -> OpenSet:
        """The workflow's open task ids (sorted) and their keys, their queues read from the
        tasks."""
        with boundary("open tasks"):
            ids = sorted(text(t) for t in await self.redis.smembers(self.keys.workflow_open(wf_id)))
        return await self._with_keys(ids)

    async def left_behind(self, wf_id: str, version: int, stage: int) -> OpenSet:
        """The tasks of the slots a regenerate of ``version`` from ``stage`` leaves behind:
        those of that version from that stage on (sorted, with their keys)."""
        with boundary("workflow slots"):
            slots = await self.redis.hgetall(self.keys.workflow_tasks(wf_id))
        ids: set[str] = set()
        for name, tid in slots.items():
            v, _, rest = text(name).partition(":")
            st = rest.partition(":")[0]
            if v == str(version) and st.isdigit() and int(st) >= stage:
                ids.add(text(tid))
        return await self._with_keys(sorted(ids))

    async def _with_keys(self, ids: list[str]) -> OpenSet:
        """Task ids with their keys, their queues read from the tasks."""
        if not ids:
            return OpenSet([], [])
        with boundary("task queues"):
            async with self.redis.pipeline(transaction=False) as pipe:
                for tid in ids:
                    pipe.hmget(self.keys.task(tid), [field("queue"), field("priority")])
                rows: list[Any] = await pipe.execute(raise_on_error=False)
        keys = []
        for t, row in zip(ids, rows, strict=True):
            q, pr = row if isinstance(row, list) else (None, None)
            p = int(pr) if isinstance(pr, str) and pr.isdigit() and int(pr) <= 9 else 0
            keys.append(self._task_keys(t, q if isinstance(q, str) and q else "default", p))
        return OpenSet(ids, keys)

    async def record(self, wf_id: str) -> WorkflowRecord | None:
        """The workflow's hash (None: no such workflow). Raises
        :class:`rsjobs.workflows.CorruptWorkflow`."""
        with boundary("HGETALL workflow"):
            h = await self.redis.hgetall(self.keys.workflow(wf_id))
        return decode_workflow(h) if h else None

    async def records(self, wf_ids: Sequence[str]) -> list[WorkflowRecord | None]:
        """Several workflows in one round trip: None for an id that names none, or whose
        hash does not read (one corrupt workflow must not hide the others)."""
        with boundary("HGETALL workflows"):
            async with self.redis.pipeline(transaction=False) as pipe:
                for wf_id in wf_ids:
                    pipe.hgetall(self.keys.workflow(wf_id))
                rows = await pipe.execute(raise_on_error=False)
        out: list[WorkflowRecord | None] = []
        for h in rows:
            record = None
            if isinstance(h, dict) and h:
                try:
                    record = decode_workflow(h)
                except ValueError:  # CorruptWorkflow
                    record = None
            out.append(record)
        return out

    async def _read(self, wf_id: str, view: str) -> WfView:
        """``wf_read.lua`` (read-only): the workflow's keys of ``view`` as of one moment."""
        call = layout.wf_read(
            self.scripts.common, "api", self.history_maxlen, self.keys.workflow_keys(wf_id),
            WfReadArgs(view),
        )  # fmt: skip
        return WfView.of(await self.scripts.run(call, readonly=True))

    async def state(self, wf_id: str) -> WorkflowState | None:
        """The workflow's hash, slots and assets as of one moment, in one read-only script
        call (None: no such workflow)."""
        v = await self._read(wf_id, "state")
        if not v.workflow:
            return None
        return WorkflowState(decode_workflow(v.workflow), v.slots, v.assets)

    async def task_fields(
        self, task_ids: Sequence[str], fields: Sequence[str]
    ) -> list[dict[str, str | None]]:
        """The named fields (by their long names, mapped by :func:`.record.field`) of
        several tasks, one round trip."""
        if not task_ids:
            return []
        with boundary("HMGET tasks"):
            async with self.redis.pipeline(transaction=False) as pipe:
                for tid in task_ids:
                    pipe.hmget(self.keys.task(tid), [field(f) for f in fields])
                rows = await pipe.execute()
        return [
            {f: None if v is None else text(v) for f, v in zip(fields, row, strict=True)}
            for row in rows
        ]

    async def task_states(self, task_ids: Sequence[str]) -> list[str | None]:
        """Each task's state: None when it is gone, '' when its key is not a hash."""
        if not task_ids:
            return []
        with boundary("HGET states"):
            async with self.redis.pipeline(transaction=False) as pipe:
                for tid in task_ids:
                    pipe.hget(self.keys.task(tid), field("state"))
                rows = await pipe.execute(raise_on_error=False)
        return ["" if isinstance(r, Exception) else None if r is None else text(r) for r in rows]

    async def slots_and_open(self, wf_id: str) -> tuple[dict[str, str], set[str]]:
        """The workflow's slots and open set as of one moment, in one read-only script
        call."""
        v = await self._read(wf_id, "open")
        return v.slots, v.open

    async def assets(self, wf_id: str) -> dict[str, str]:
        """Slot -> asset JSON, every version."""
        with boundary("HGETALL assets"):
            return _text_map(await self.redis.hgetall(self.keys.workflow_assets(wf_id)))

    async def asset(self, wf_id: str, slot: str) -> str | None:
        """The asset JSON of one slot ``<version>:<stage>:<item>`` (None: none)."""
        with boundary("HGET asset"):
            raw = await self.redis.hget(self.keys.workflow_assets(wf_id), slot)
        return None if raw is None else text(raw)

    async def visible(self, wf_id: str) -> tuple[str, str, str] | None:
        """Status, owner and plan (JSON) of the workflow in one HMGET (None: no such
        workflow, or one without a plan)."""
        with boundary("HMGET workflow"):
            status, owner, plan = await self.redis.hmget(
                self.keys.workflow(wf_id), ["status", "owner", "plan"]
            )
        if status is None:
            return None
        return text(status), text(owner), text(plan)

    async def status(self, wf_id: str) -> str | None:
        with boundary("HGET status"):
            status = await self.redis.hget(self.keys.workflow(wf_id), "status")
        return None if status is None else text(status)

    async def exists(self, wf_id: str) -> bool:
        with boundary("EXISTS workflow"):
            return bool(await self.redis.exists(self.keys.workflow(wf_id)))

    async def history(self, wf_id: str, start: str, count: int | None = None) -> list[Row] | None:
        """History entries from ``start`` (an XRANGE start); None when there are none and
        no such workflow."""
        with boundary("XRANGE workflow history"):
            rows = await self.redis.xrange(
                self.keys.workflow_history(wf_id), start, "+", count=count
            )
            if not rows and not await self.redis.exists(self.keys.workflow(wf_id)):
                return None
        return [(text(i), _text_map(f)) for i, f in rows]

    async def history_range(self, wf_id: str, start: str, count: int) -> list[Row]:
        with boundary("XRANGE workflow history"):
            rows = await self.redis.xrange(
                self.keys.workflow_history(wf_id), start, "+", count=count
            )
        return [(text(i), _text_map(f)) for i, f in rows]

    async def is_entry(self, wf_id: str, entry_id: str) -> bool:
        """Whether ``entry_id`` (a valid stream id) is an entry of the workflow's history."""
        with boundary("XRANGE workflow entry"):
            rows = await self.redis.xrange(
                self.keys.workflow_history(wf_id), entry_id, entry_id, count=1
            )
        return bool(rows)

    async def last_history_id(self, wf_id: str) -> str:
        with boundary("XREVRANGE workflow history"):
            last = await self.redis.xrevrange(self.keys.workflow_history(wf_id), "+", "-", count=1)
        return text(last[0][0]) if last else "0-0"

    async def read_history(
        self, wf_id: str, after: str, block_ms: int, count: int | None = None
    ) -> list[Row]:
        """Entries after ``after``, waiting up to ``block_ms`` for one (XREAD BLOCK)."""
        hkey = self.keys.workflow_history(wf_id)
        with boundary("XREAD workflow history"):
            rows: Any = await self.redis.xread({hkey: after}, block=block_ms, count=count)
        return [(text(i), _text_map(f)) for _, entries in rows or () for i, f in entries]

    # -- the index and the active set ------------------------------------------------------

    async def recent(self, count: int) -> list[str]:
        """The most recently started workflow ids, newest first."""
        with boundary("ZREVRANGE workflows"):
            ids = await self.redis.zrevrange(self.keys.workflows, 0, count - 1)
        return [text(i) for i in ids]

    async def index_before(
        self, before: tuple[int, str] | None, count: int
    ) -> list[tuple[int, str]]:
        """Up to ``count`` (created ms, id) of the index after ``before`` in newest-first
        order (score, then id, both descending; None: from the newest)."""
        top = "+inf" if before is None else str(before[0])
        out: list[tuple[int, str]] = []
        offset = 0
        with boundary("ZREVRANGEBYSCORE workflows"):
            while len(out) < count:
                rows = await self.redis.zrevrangebyscore(
                    self.keys.workflows, top, "-inf", start=offset, num=count, withscores=True
                )
                for member, score in rows:
                    item = (int(score), text(member))
                    # (a member of the cursor's millisecond at or after it was on a page)
                    if before is None or item < before:
                        out.append(item)
                if len(rows) < count:
                    break
                offset += len(rows)
        return out[:count]

    async def list_fields(
        self, wf_ids: Sequence[str], fields: Sequence[str]
    ) -> list[list[str | None]]:
        """``fields`` of each workflow's hash, one round trip (all None: no such workflow)."""
        with boundary("HMGET workflows"):
            async with self.redis.pipeline(transaction=False) as pipe:
                for wf_id in wf_ids:
                    pipe.hmget(self.keys.workflow(wf_id), list(fields))
                rows = await pipe.execute()
        return [[None if v is None else text(v) for v in row] for row in rows]

    async def active(self, cursor: int, count: int) -> tuple[int, list[str]]:
        """One SSCAN step of the active set."""
        with boundary("SSCAN active"):
            nxt, ids = await self.redis.sscan(self.keys.workflows_active, cursor, count=count)
        return int(nxt), [text(i) for i in ids]

    async def prune_index(self, horizon_ms: int, count: int = 1000) -> int:
        """Drop index entries of workflows created before ``horizon_ms`` that no longer
        exist (they expired); how many."""
        k = self.keys
        with boundary("prune workflows"):
            old = await self.redis.zrangebyscore(
                k.workflows, "-inf", horizon_ms, start=0, num=count
            )
            gone = [text(i) for i in old if not await self.redis.exists(k.workflow(text(i)))]
            if gone:
                await self.redis.zrem(k.workflows, *gone)
        return len(gone)

    async def inspect(self, wf_id: str) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
        """For the defects check: the types of the workflow's keys (``wf``, ``history``,
        ``tasks``, ``assets``, ``open``), its hash and its assets hash (empty when they
        are not hashes)."""
        k = self.keys
        names = {
            "wf": k.workflow(wf_id),
            "history": k.workflow_history(wf_id),
            "tasks": k.workflow_tasks(wf_id),
            "assets": k.workflow_assets(wf_id),
            "open": k.workflow_open(wf_id),
        }
        with boundary("inspect workflow"):
            async with self.redis.pipeline(transaction=False) as pipe:
                for key in names.values():
                    pipe.type(key)
                found = await pipe.execute()
            types = {n: text(t) for n, t in zip(names, found, strict=True)}
            h = await self.redis.hgetall(names["wf"]) if types["wf"] == "hash" else {}
            assets = await self.redis.hgetall(names["assets"]) if types["assets"] == "hash" else {}
        return types, _text_map(h), _text_map(assets)
