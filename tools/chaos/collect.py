"""Read back what Redis holds after a run: every task of the namespace (hash + history),
every workflow (hash, history, slots, assets, open tasks), the handlers' execution
records and the dedup keys. Pipelined, in chunks.

Test-harness code: it uses SCAN to find tasks nobody acknowledged (rsjobs itself never
scans).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from redis.asyncio import Redis

from rsjobs.errors import CorruptData
from rsjobs.keys import Keys
from rsjobs.schemas import HistoryEntry
from rsjobs.store.history import entries
from rsjobs.store.record import TASK_FIELDS, decode_task, text_fields
from rsjobs.store.shards import shard_of
from rsjobs.workflows import WorkflowEvent

from .handlers import exec_key
from .records import Execution, TaskRecord, WorkflowRecord

__all__ = [
    "read_dedup",
    "read_events",
    "read_executions",
    "read_stats",
    "read_tasks",
    "read_workflows",
    "scan_task_ids",
    "scan_workflow_ids",
    "tracebacks",
]

CHUNK = 200

#: the keys of a namespace: its one shard's, or every shard's in shard order
Shards = Keys | Sequence[Keys]


def _all(keys: Shards) -> Sequence[Keys]:
    return [keys] if isinstance(keys, Keys) else keys


def _by_shard(keys: Shards, ids: Iterable[str]) -> list[tuple[Keys, list[str]]]:
    """The ids grouped by the shard each names (its keys), sorted: a pipeline per shard
    (a cluster refuses one across slots)."""
    every = _all(keys)
    groups: dict[int, list[str]] = {}
    for i in sorted(set(ids)):
        k = shard_of(i)
        groups.setdefault(k if k < len(every) else 0, []).append(i)
    return [(every[k], part) for k, part in sorted(groups.items())]


async def scan_task_ids(redis: Redis, keys: Shards) -> set[str]:
    """Ids of every task hash or history in the namespace (every shard's)."""
    ids: set[str] = set()
    for k in _all(keys):
        prefix = k.prefix + "task:"
        async for key in redis.scan_iter(match=prefix + "*", count=1000):
            rest = str(key)[len(prefix) :]
            ids.add(rest.removesuffix(":history"))
    return ids


async def scan_workflow_ids(redis: Redis, keys: Shards) -> set[str]:
    """Ids of every workflow with any key in the namespace (every shard's)."""
    ids: set[str] = set()
    for k in _all(keys):
        prefix = k.prefix + "wf:"
        async for key in redis.scan_iter(match=prefix + "*", count=1000):
            ids.add(str(key)[len(prefix) :].split(":", 1)[0])
    return ids


async def read_workflows(
    redis: Redis, shards: Shards, ids: Iterable[str]
) -> dict[str, WorkflowRecord]:
    out: dict[str, WorkflowRecord] = {}
    for keys, part in _by_shard(shards, ids):
        out |= await _read_workflows(redis, keys, part)
    return out


async def _read_workflows(
    redis: Redis, keys: Keys, ids: Iterable[str]
) -> dict[str, WorkflowRecord]:
    out: dict[str, WorkflowRecord] = {}
    todo = sorted(set(ids))
    for i in range(0, len(todo), CHUNK):
        part = todo[i : i + CHUNK]
        async with redis.pipeline(transaction=False) as pipe:
            for wid in part:
                pipe.hgetall(keys.workflow(wid))
                pipe.xrange(keys.workflow_history(wid), "-", "+")
                pipe.hgetall(keys.workflow_tasks(wid))
                pipe.hgetall(keys.workflow_assets(wid))
                pipe.smembers(keys.workflow_open(wid))
            rows = await pipe.execute()
        for j, wid in enumerate(part):
            fields, hist, slots, assets, open_ = rows[5 * j : 5 * j + 5]
            out[wid] = WorkflowRecord(
                wf_id=wid,
                fields={str(k): str(v) for k, v in fields.items()},
                history=[WorkflowEvent.from_entry(eid, f) for eid, f in hist],
                slots={str(k): str(v) for k, v in slots.items()},
                assets={str(k): str(v) for k, v in assets.items()},
                open=sorted(str(t) for t in open_),
            )
    return out


async def read_tasks(redis: Redis, shards: Shards, ids: Iterable[str]) -> dict[str, TaskRecord]:
    out: dict[str, TaskRecord] = {}
    for keys, part in _by_shard(shards, ids):
        out |= await _read_tasks(redis, keys, part)
    return out


async def _read_tasks(redis: Redis, keys: Keys, ids: Iterable[str]) -> dict[str, TaskRecord]:
    out: dict[str, TaskRecord] = {}
    todo = sorted(set(ids))
    for i in range(0, len(todo), CHUNK):
        part = todo[i : i + CHUNK]
        async with redis.pipeline(transaction=False) as pipe:
            for tid in part:
                pipe.hgetall(keys.task(tid))
            rows = await pipe.execute()
        for tid, fields in zip(part, rows, strict=True):
            raw = {str(k): str(v) for k, v in fields.items()}
            try:
                hist = entries(text_fields(raw), tid)
            except CorruptData:  # a poisoned hash: its history does not read
                hist = []
            out[tid] = TaskRecord(
                task_id=tid,
                fields=_long_fields(raw, tid),
                # the hash carries the repeat counts of coalesced refusals
                history=[HistoryEntry.from_entry(eid, f, tid, raw) for eid, f in hist],
            )
    return out


_LONG = {short: long for long, short in TASK_FIELDS.items()}


def _long_fields(raw: dict[str, str], tid: str) -> dict[str, str]:
    """A task hash's fields by their long names, with what the store reads into a task
    where the hash leaves it out (defaults; a terminal task's consumer, from its history)."""
    named = {_LONG.get(k, k): v for k, v in raw.items()}
    if not raw:
        return named
    try:
        r = decode_task(raw)
    except CorruptData:  # a poisoned hash: as stored
        return named
    for name in ("attempt", "failures", "max_attempts"):
        named.setdefault(name, str(getattr(r, name)))
    if r.consumer:
        named.setdefault("consumer", r.consumer)
    return named


async def read_executions(redis: Redis, namespace: str) -> list[Execution]:
    key = exec_key(namespace)
    out: list[Execution] = []
    start = "-"
    while True:
        rows = await redis.xrange(key, start, "+", count=5000)
        for eid, f in rows:
            out.append(
                Execution(
                    exec_id=f.get("x", ""),
                    task_id=f.get("t", ""),
                    attempt=int(f.get("a") or 0),
                    worker=f.get("w", ""),
                    pid=int(f.get("pid") or 0),
                    ev=f.get("ev", ""),
                    ts=int(str(eid).split("-")[0]),
                    outcome=f.get("o", ""),
                    began_ms=int(f.get("b") or 0),
                )
            )
        if len(rows) < 5000:
            return out
        start = "(" + str(rows[-1][0])


async def read_dedup(redis: Redis, shards: Shards, dedup_keys: Iterable[str]) -> dict[str, str]:
    """Each dedup key's task id, from the shard that holds it ('' on none)."""
    names = sorted(set(dedup_keys))
    if not names:
        return {}
    out = dict.fromkeys(names, "")
    for keys in _all(shards):
        async with redis.pipeline(transaction=False) as pipe:
            for k in names:
                pipe.get(keys.dedup(k))
            rows = await pipe.execute()
        for k, v in zip(names, rows, strict=True):
            out[k] = out[k] or str(v or "")
    return out


async def read_stats(redis: Redis, shards: Shards) -> dict[str, int]:
    """The stats hash (every shard's, summed)."""
    out: dict[str, int] = {}
    for keys in _all(shards):
        for k, v in (await redis.hgetall(keys.stats)).items():
            out[str(k)] = out.get(str(k), 0) + int(v)
    return out


async def read_events(redis: Redis, shards: Shards) -> tuple[dict[str, list[str]], int]:
    """task id -> history ids named by the events stream (in order; every shard's: a
    task's entries are all on its shard's), and the count of those entries (a workflow's
    notes, ``wf`` and ``hid`` without ``id``, are left out: they name its history
    entries, not a task's)."""
    out: dict[str, list[str]] = {}
    n = 0
    for keys in _all(shards):
        start = "-"
        while True:
            rows = await redis.xrange(keys.events, start, "+", count=5000)
            for _, f in rows:
                if "id" not in f and "wf" in f:
                    continue
                n += 1
                out.setdefault(str(f.get("id", "")), []).append(str(f.get("hid", "")))
            if len(rows) < 5000:
                break
            start = "(" + str(rows[-1][0])
    return out, n


def tracebacks(run_dir: Path) -> list[str]:
    """``"<log>: <exception line>"`` for every traceback in the processes' logs."""
    out: list[str] = []
    for log in sorted(run_dir.glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()
        in_tb = False
        for i, line in enumerate(lines):
            if line.startswith("Traceback (most recent call last)"):
                in_tb = True
            elif in_tb and line and not line.startswith((" ", "\t", "During handling")):
                in_tb = False
                out.append(f"{log.name}:{i + 1}: {line[:300]}")
    return out
