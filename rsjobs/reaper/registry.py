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

from ..codec import decode
from ..store import Store
from ..store.keys import level_name
from ..store.layout import WorkersArgs
from ..store.replies import WorkersSweep
from .config import ReaperConfig

__all__ = ["WorkerInfo", "WorkersSweep", "list_workers", "sweep_workers"]


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


async def sweep_workers(store: Store, queues: list[str], cfg: ReaperConfig) -> WorkersSweep:
    """Mark silent workers dead, forget long-dead ones, delete idle empty consumers."""
    levels = await store.index.levels(queues)
    return await store.reaper.sweep_workers(
        [level_name(q, p) for q in queues for p in levels[q]],
        WorkersArgs(cfg.dead_after_leases, cfg.lease_ms, cfg.forget_ms),
    )


def _json(raw: str | None) -> dict[str, Any]:
    if raw is None:
        return {}
    try:
        value = decode(raw)
    except msgspec.DecodeError:
        return {}
    return value if isinstance(value, dict) else {}


async def list_workers(
    store: Store, *, default_lease_ms: int = 30_000, limit: int = 100
) -> list[WorkerInfo]:
    """Every registered worker (and every consumer holding entries without one)."""
    reg_all = await store.reaper.registry(limit)
    regs, marks, holdings = reg_all.registrations, reg_all.marks, reg_all.holdings
    now = int(time.time() * 1000)
    out: list[WorkerInfo] = []
    for name in sorted(set(regs) | set(holdings)):
        reg = _json(regs.get(name))
        mark = _json(marks.get(name))
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
