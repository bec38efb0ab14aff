"""The workers registry as the reaper sees it: who is alive, who is dead, what they hold.

Workers write their registration (JSON: host, pid, queues, lease_ms, beat_at, running...)
into the ``workers`` hash at every heartbeat. ``workers.lua`` marks the silent ones dead in
``workers:dead``, forgets them after a while, and deletes idle, empty consumers that no
registered worker owns. :func:`list_workers` joins all that with the queues' pending lists
for ``rsjobs workers``.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from ..codec import decode
from ..store.keys import GROUP, Keys
from .calls import ReaperScripts
from .config import ReaperConfig

__all__ = ["WorkerInfo", "WorkersSweep", "list_workers", "sweep_workers"]


class WorkersSweep(msgspec.Struct, frozen=True, kw_only=True):
    """What one pass over the registry did."""

    newly_dead: list[str] = msgspec.field(default_factory=list)
    forgotten: list[str] = msgspec.field(default_factory=list)
    consumers_deleted: int = 0


class WorkerInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One registered worker, with the deliveries its consumer holds."""

    name: str
    #: ``alive``, ``late`` (silent past a lease, not yet marked) or ``dead`` (marked)
    status: str
    host: str = ""
    pid: int = 0
    queues: list[str] = msgspec.field(default_factory=list)
    concurrency: int = 0
    lease_ms: int = 0
    beat_at: int = 0
    #: ms since its last beat (by this machine's clock; the worker wrote beat_at by its own)
    silent_ms: int = 0
    dead_since: int = 0
    processed: int = 0
    #: tasks it reported running at its last beat
    running: list[str] = msgspec.field(default_factory=list)
    #: tasks whose delivery its consumer still holds (the queues' pending lists)
    holding: list[str] = msgspec.field(default_factory=list)


async def sweep_workers(rs: ReaperScripts, queues: list[str], cfg: ReaperConfig) -> WorkersSweep:
    """Mark silent workers dead, forget long-dead ones, delete idle empty consumers."""
    keys = rs.keys
    dead, forgotten, deleted = await rs.call(
        "workers",
        [],
        [cfg.dead_after_leases, cfg.lease_ms, cfg.forget_ms],
        extra_keys=[keys.workers, keys.workers_dead, *(keys.queue(q) for q in queues)],
    )
    return WorkersSweep(
        newly_dead=list(dead), forgotten=list(forgotten), consumers_deleted=int(deleted)
    )


async def _holdings(
    redis: Redis, keys: Keys, queues: list[str], limit: int
) -> dict[str, list[str]]:
    """consumer -> task ids of the entries it holds (at most ``limit`` per queue)."""
    out: dict[str, list[str]] = {}
    for q in queues:
        qkey = keys.queue(q)
        try:
            summary = await redis.xpending(qkey, GROUP)
        except ResponseError:
            continue  # no group yet
        for c in summary.get("consumers") or []:
            name = str(c["name"])
            rows = await redis.xpending_range(qkey, GROUP, "-", "+", limit, consumername=name)
            async with redis.pipeline(transaction=False) as pipe:
                for r in rows:
                    pipe.xrange(qkey, r["message_id"], r["message_id"], count=1)
                found = await pipe.execute()
            ids = [f[0][1].get("id", "?") if f else "?" for f in found]
            out.setdefault(name, []).extend(ids)
    return out


async def list_workers(
    redis: Redis, keys: Keys, *, default_lease_ms: int = 30_000, limit: int = 100
) -> list[WorkerInfo]:
    """Every registered worker (and every consumer holding entries without one)."""
    regs: dict[str, str] = await redis.hgetall(keys.workers)
    marks: dict[str, str] = await redis.hgetall(keys.workers_dead)
    queues = sorted(await redis.smembers(keys.queues))
    holdings = await _holdings(redis, keys, queues, limit)
    now = int(time.time() * 1000)
    out: list[WorkerInfo] = []
    for name in sorted(set(regs) | set(holdings)):
        reg: dict[str, Any] = {}
        if name in regs:
            try:
                reg = decode(regs[name]) or {}
            except msgspec.DecodeError:
                reg = {}
        mark: dict[str, Any] = {}
        if name in marks:
            try:
                mark = decode(marks[name]) or {}
            except msgspec.DecodeError:
                mark = {}
        beat = int(reg.get("beat_at") or 0)
        lease = int(reg.get("lease_ms") or default_lease_ms)
        if not reg or (mark and int(mark.get("beat_at") or -1) == beat):
            status = "dead"
        elif now - beat > lease:
            status = "late"
        else:
            status = "alive"
        out.append(
            WorkerInfo(
                name=name,
                status=status,
                host=str(reg.get("host", "")),
                pid=int(reg.get("pid") or 0),
                queues=[str(q) for q in reg.get("queues") or []],
                concurrency=int(reg.get("concurrency") or 0),
                lease_ms=lease if reg else 0,
                beat_at=beat,
                silent_ms=max(0, now - beat) if beat else 0,
                dead_since=int(mark.get("since") or 0),
                processed=int(reg.get("processed") or 0),
                running=[str(t) for t in reg.get("running") or []],
                holding=holdings.get(name, []),
            )
        )
    return out
