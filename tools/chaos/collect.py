"""Read back what Redis holds after a run: every task of the namespace (hash + history),
every workflow (hash, history, slots, assets, open tasks), the handlers' execution
records, the dedup keys and the shared-queue keys (running counts, parked and throttled
tasks, workers' claims). Pipelined, in chunks.

Test-harness code: it uses SCAN to find tasks nobody acknowledged (rsjobs itself never
scans).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import msgspec
from redis.asyncio import Redis

from rsjobs.errors import CorruptData
from rsjobs.schemas import HistoryEntry
from rsjobs.store.history import entries
from rsjobs.store.keys import Keys
from rsjobs.store.record import TASK_FIELDS, decode_task, text_fields
from rsjobs.store.shards import shard_of
from rsjobs.workflows import WorkflowEvent

from .handlers import exec_key
from .records import Execution, HostileTraces, PoolState, TaskRecord, WorkflowRecord

__all__ = [
    "member_id",
    "read_dedup",
    "read_events",
    "read_executions",
    "read_hostile",
    "read_pools",
    "read_stats",
    "read_tasks",
    "read_workflows",
    "sample_held",
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


#: the worker's line before the traceback of a handler's exception (rsjobs.worker.failures):
#: a failure the workload plans, logged on purpose, not a fault of a process
HANDLER_TRACEBACK = ": traceback of task "


def tracebacks(run_dir: Path) -> list[str]:
    """``"<log>: <exception line>"`` for every traceback in the processes' logs, except the
    tracebacks of handlers' exceptions that a worker logs after ``traceback of task``."""
    out: list[str] = []
    for log in sorted(run_dir.glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()
        in_tb = handler = False
        for i, line in enumerate(lines):
            if line.startswith("Traceback (most recent call last)"):
                in_tb = True
                handler = i > 0 and HANDLER_TRACEBACK in lines[i - 1]
            elif in_tb and line and not line.startswith((" ", "\t", "During handling")):
                in_tb = False
                if not handler:
                    out.append(f"{log.name}:{i + 1}: {line[:300]}")
    return out


def member_id(member: str) -> str:
    """The task id of a ``parked:<queue>`` or ``throttled:<queue>`` member (its last
    ``|`` field: ``<owner>|<9-priority><entry>|<id>``, ``<priority><entry>|<id>``)."""
    return member.rpartition("|")[2]


async def sample_held(redis: Redis, keys: Keys, queue: str) -> tuple[set[str], dict[str, int]]:
    """The ids of the tasks of ``queue`` parked on their owner's limit now, and those held
    back by a rate limit with the start time reserved for each (ms)."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.zrange(keys.parked(queue), 0, -1)
        pipe.zrange(keys.throttled(queue), 0, -1, withscores=True)
        parked, throttled = await pipe.execute()
    return (
        {member_id(str(m)) for m in parked},
        {member_id(str(m)): int(score) for m, score in throttled},
    )


async def read_pools(redis: Redis, shards: Shards, state: PoolState) -> PoolState:
    """``state`` with what the shared-queue keys hold now, over every shard: the
    ``running`` hashes (summed), and per queue ever used its ``parked``, ``throttled`` and
    ``claims`` keys (a worker's claims on shard k > 0 under ``<worker>@<k>``), and Redis
    TIME (shard 0's node). One pipeline per shard (a cluster refuses one across slots)."""
    read_ms = 0
    running: dict[str, int] = {}
    parked: dict[str, list[str]] = {}
    throttled: dict[str, list[str]] = {}
    claims: dict[str, dict[str, str]] = {}
    for k, keys in enumerate(_all(shards)):
        queues = sorted(str(q) for q in await redis.smembers(keys.queues))
        async with redis.pipeline(transaction=False) as pipe:
            pipe.time()
            pipe.hgetall(keys.running)
            for q in queues:
                pipe.zrange(keys.parked(q), 0, -1)
                pipe.zrange(keys.throttled(q), 0, -1)
                pipe.hgetall(keys.claims(q))
            rows = await pipe.execute()
        if k == 0:
            secs, micros = rows[0]
            read_ms = int(secs) * 1000 + int(micros) // 1000
        for field, n in rows[1].items():
            running[str(field)] = running.get(str(field), 0) + int(n)
        for i, q in enumerate(queues):
            pk, th, cl = rows[2 + 3 * i : 5 + 3 * i]
            parked.setdefault(q, []).extend(str(m) for m in pk)
            throttled.setdefault(q, []).extend(str(m) for m in th)
            for worker, raw in cl.items():
                name = str(worker) if k == 0 else f"{worker}@{k}"
                claims.setdefault(q, {})[name] = str(raw)
    return msgspec.structs.replace(
        state,
        read_ms=read_ms,
        running=running,
        parked={q: m for q, m in parked.items() if m},
        throttled={q: m for q, m in throttled.items() if m},
        claims={q: c for q, c in claims.items() if c},
    )


async def read_hostile(
    redis: Redis,
    shards: Shards,
    storm_ids: Iterable[str],
    names: Sequence[str],
    owners: Iterable[str],
) -> HostileTraces:
    """What the hostile mix left: the size of each storm task's hash, every key, queue
    registry entry, owner entry and stats field naming one of the flooded queue ``names``
    (none may name a refused one), and the queues counted for each flooding owner."""
    sizes: dict[str, int] = {}
    for keys, part in _by_shard(shards, storm_ids):
        for tid in part:
            sizes[tid] = int(await redis.memory_usage(keys.task(tid)) or 0)
    traces: dict[str, list[str]] = {n: [] for n in names}

    def note(text: str, what: str) -> None:
        for n in names:
            if n in text:
                traces[n].append(what)

    counts: dict[str, int] = {}
    for keys in _all(shards):
        if names:
            async for key in redis.scan_iter(match=keys.prefix + "*", count=1000):
                note(str(key), f"key {key}")
        for m in await redis.smembers(keys.queues):
            note(str(m), f"registry entry {m}")
        for f in await redis.hkeys(keys.queue_owners):
            note(str(f), f"queues:owners {f}")
        for f in await redis.hkeys(keys.stats):
            note(str(f), f"stats field {f}")
        for o in owners:
            counts[o] = counts.get(o, 0) + int(await redis.hget(keys.queue_owners, f"o|{o}") or 0)
    return HostileTraces(sizes=sizes, queue_traces=traces, owner_counts=counts)
