"""The reads of cost accounting (``store.costs``): the namespace's costs hash along one
dimension, and a task's or a workflow's costs derived from their histories
(:mod:`rsjobs.costs` has the rules; ``account_attempt`` in ``fsm.lua`` writes the hash).

Nothing here writes. The costs hash is read with HSCAN (``MATCH <dim>|...``), so that a
large one (many owners) never blocks Redis; a task's figures come from its hash alone, a
workflow's from its tasks of every version and retry (its slots, and the retry links
from there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from ..costs import (
    DIMENSIONS,
    NO_OWNER,
    CostReport,
    CostRow,
    Tally,
    TaskCost,
    WorkflowCost,
    WorkflowTaskCost,
    attempt_costs,
    split_field,
)
from ..errors import CorruptData
from . import history
from .record import decode_task, decode_workflow, text_fields
from .replies import text
from .scripts import Scripts
from .transient import boundary

__all__ = ["Costs", "escape_glob"]


def escape_glob(s: str) -> str:
    """``s`` with the characters a Redis MATCH pattern reads escaped."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in s)


def _slot_version(slot: str) -> int:
    v = slot.partition(":")[0]
    return int(v) if v.isdigit() else -1


class Costs:
    """The reads of the costs hash and of a task's or workflow's costs."""

    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts
        self.redis = scripts.redis
        self.keys = scripts.keys

    async def _hashes(self) -> list[str]:
        """The costs hash of each shard (sharded: summed, not one atomic view)."""
        stores = await self.scripts.fan_out()
        return [st.keys.costs for st in stores] if stores else [self.keys.costs]

    async def report(self, by: str, name: str | None = None) -> CostReport:
        """The sums of dimension ``by`` (queue, type, owner or stage) per name, from the
        costs hash; ``name``: that one name only."""
        if by not in DIMENSIONS:
            raise ValueError(f"no cost dimension {by!r} (one of {', '.join(DIMENSIONS)})")
        rows = await self._rows(by, name)
        total = Tally()
        for t in rows.values():
            total.merge(t)
        if by == "owner" and name is None:
            # tasks without an owner are counted per queue (as every task is) and under no
            # owner: their row is what the queues hold beyond the owners' (the scripts
            # write nothing more for a task without one)
            unowned = Tally()
            for t in (await self._rows("queue", None)).values():
                unowned.merge(t)
            unowned.merge(total, -1)
            if unowned:
                rows[NO_OWNER] = unowned
                total.merge(unowned)
        return CostReport(
            by=by,
            rows=[CostRow(name=n, totals=rows[n].totals()) for n in sorted(rows)],
            total=total.totals(),
        )

    async def _rows(self, by: str, name: str | None) -> dict[str, Tally]:
        match = f"{by}|{escape_glob(name)}|*" if name is not None else f"{by}|*"
        rows: dict[str, Tally] = {}
        for costs in await self._hashes():
            with boundary("HSCAN costs"):
                async for field, value in self.redis.hscan_iter(costs, match, count=1000):
                    parts = split_field(text(field))
                    if parts is None or (name is not None and parts[1] != name):
                        continue
                    _, label, unit, category = parts
                    try:
                        n = int(text(value))
                    except ValueError:
                        raise CorruptData("costs", text(field), "not an integer") from None
                    rows.setdefault(label, Tally()).add(category, unit, n)
        return rows

    async def sums(self, fields: Sequence[str]) -> dict[str, int]:
        """These fields of the costs hash, summed over the shards (one HMGET each; a
        missing or unreadable field counts 0)."""
        out = dict.fromkeys(fields, 0)
        for costs in await self._hashes():
            with boundary("HMGET costs"):
                values = await self.redis.hmget(costs, list(fields))
            for f, v in zip(fields, values, strict=True):
                if v is not None and text(v).lstrip("-").isdigit():
                    out[f] += int(text(v))
        return out

    async def raw(self) -> dict[str, int]:
        """The whole costs hash, field -> value (for the metrics and the tests)."""
        out: dict[str, int] = {}
        for costs in await self._hashes():
            with boundary("HSCAN costs"):
                async for field, value in self.redis.hscan_iter(costs, count=1000):
                    try:
                        out[text(field)] = out.get(text(field), 0) + int(text(value))
                    except ValueError:
                        continue
        return out

    async def task(self, task_id: str) -> TaskCost | None:
        """A task's attempts and their sums (None: no such task). Raises
        :class:`rsjobs.CorruptData` when its hash or history does not read."""
        if (other := await self.scripts.elsewhere(task_id)) is not None:
            return await other.costs.task(task_id)
        with boundary("HGETALL task"):
            h = await self.redis.hgetall(self.keys.task(task_id))
        if not h:
            return None
        f = text_fields(h)
        superseded = False
        wf = f.get("wf", "")
        if wf and f.get("s") == "SUCCEEDED":
            current = await self._current_slots(wf)
            superseded = current is not None and task_id not in current
        return _task_cost(task_id, f, superseded)

    async def _current_slots(self, wf_id: str) -> set[str] | None:
        """The task ids of the slots of the workflow's current version (None: no such
        workflow)."""
        with boundary("workflow slots"):
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hget(self.keys.workflow(wf_id), "version")
                pipe.hgetall(self.keys.workflow_tasks(wf_id))
                version, slots = await pipe.execute()
        if version is None:
            return None
        v = int(text(version)) if text(version).isdigit() else -1
        return {text(t) for s, t in slots.items() if _slot_version(text(s)) == v}

    async def workflow(self, wf_id: str) -> WorkflowCost | None:
        """A workflow's costs: its tasks of every version and retry, summed in all and per
        stage (None: no such workflow). A task whose hash expired is left out."""
        if (other := await self.scripts.elsewhere(wf_id)) is not None:
            return await other.costs.workflow(wf_id)
        with boundary("HGETALL workflow"):
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hgetall(self.keys.workflow(wf_id))
                pipe.hgetall(self.keys.workflow_tasks(wf_id))
                h, slots = await pipe.execute()
        if not h:
            return None
        rec = decode_workflow(h)
        slot_map = {text(s): text(t) for s, t in slots.items()}
        current = {t for s, t in slot_map.items() if _slot_version(s) == rec.version}
        found: dict[str, dict[str, str]] = {}
        todo = sorted(set(slot_map.values()))
        while todo:  # the slots' tasks, then the tasks they were retried from
            with boundary("HGETALL tasks"):
                async with self.redis.pipeline(transaction=False) as pipe:
                    for tid in todo:
                        pipe.hgetall(self.keys.task(tid))
                    hashes: list[Any] = await pipe.execute()
            more: set[str] = set()
            for tid, th in zip(todo, hashes, strict=True):
                if not th:
                    continue
                tf = text_fields(th)
                found[tid] = tf
                prev = tf.get("wf_retry_of", "")
                if prev and prev not in found:
                    more.add(prev)
            todo = sorted(more - set(found))
        total = Tally()
        stages: dict[str, Tally] = {}  # stage -> its sums
        tasks: list[WorkflowTaskCost] = []
        for tid in sorted(found, key=lambda t: (int(found[t].get("c") or 0), t)):
            tf = found[tid]
            superseded = tf.get("s") == "SUCCEEDED" and tid not in current
            cost = _task_cost(tid, tf, superseded)
            tally = Tally()
            for a in cost.attempts:
                tally.add_attempt(a)
            total.merge(tally)
            stage = cost.stage or _plan_stage(rec.definition, rec.plan, tf.get("wf_stage", ""))
            stages.setdefault(stage, Tally()).merge(tally)
            tasks.append(
                WorkflowTaskCost(
                    id=tid,
                    stage=stage,
                    item=tf.get("wf_item", ""),
                    version=int(tf.get("wf_version") or 0),
                    state=cost.state,
                    superseded=superseded,
                    totals=cost.totals,
                )
            )
        return WorkflowCost(
            id=rec.id or wf_id,
            definition=rec.definition,
            owner=rec.owner,
            status=rec.status,
            version=rec.version,
            totals=total.totals(),
            stages={s: stages[s].totals() for s in sorted(stages)},
            tasks=tasks,
        )


def _task_cost(task_id: str, f: Mapping[str, str], superseded: bool) -> TaskCost:
    rec = decode_task(f)
    attempts = attempt_costs(history.entries(f, task_id), superseded=superseded)
    tally = Tally()
    for a in attempts:
        tally.add_attempt(a)
    return TaskCost(
        id=task_id,
        type=rec.type,
        queue=rec.queue,
        state=rec.state,
        owner=rec.owner,
        workflow=rec.wf,
        stage=f.get("wf_stage_name", ""),
        superseded=superseded and any(a.category == "superseded" for a in attempts),
        attempts=attempts,
        totals=tally.totals(),
    )


def _plan_stage(definition: str, plan: str, index: str) -> str:
    """The qualified name of stage ``index`` from the plan (a task made before tasks kept
    their stage's name)."""
    try:
        name = msgspec.json.decode(plan)["stages"][int(index)]["name"]
    except (msgspec.DecodeError, ValueError, LookupError, TypeError):
        name = index or "?"
    return f"{definition}/{name}"
