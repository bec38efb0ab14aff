"""The limits of shared queues as stored (:mod:`rsjobs.limits` checks the values): the
``limits`` hash (settings), the ``rates`` hash (the buckets' state), the ``running`` hash
(per-owner RUNNING counts, kept by ``fsm.lua``) and the queues' ``waiting`` and
``throttled`` zsets (tasks parked by ``start.lua`` and ``take.lua``).

A setting is one field, written with one HSET or HDEL: a worker reads it at its next
``take.lua`` / ``start.lua`` call.

A sharded namespace (:mod:`.shards`) has these keys on every shard, and the scripts of a
shard read its own: a setting is written to every shard, in shard order (a retry of a
call that failed half-way completes it). A per-owner limit is the same on each shard (an
owner's tasks all live on one shard, so it holds exactly); a rate of R starts per second
with a burst of B is split: each shard's bucket gets R/S per second and a burst of
ceil(B/S). The reads merge the shards: rates summed back, RUNNING and parked tasks
summed (not one atomic view).
"""

from __future__ import annotations

import math
from typing import Any

from ..limits import QueueLimits, RateLimit
from .replies import text
from .scripts import Scripts
from .transient import boundary

__all__ = ["Limits"]


class Limits:
    """Limits of one namespace (``store.limits``)."""

    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts
        self.redis = scripts.redis
        self.keys = scripts.keys

    async def put(self, field: str, value: str) -> None:
        """Write a setting (sharded: on every shard, a rate split between them)."""
        if (stores := await self.scripts.fan_out()) is not None:
            for st in stores:
                await st.limits._put_here(field, _share(field, value, len(stores)))
            return
        await self._put_here(field, value)

    async def _put_here(self, field: str, value: str) -> None:
        with boundary("HSET limits"):
            await self.redis.hset(self.keys.limits, field, value)

    async def remove(self, field: str, *, bucket: bool = False) -> bool:
        """Remove a setting (and, for a rate, its bucket's state); whether it was set
        (sharded: on any shard, removed from every one)."""
        if (stores := await self.scripts.fan_out()) is not None:
            gone = [await st.limits._remove_here(field, bucket) for st in stores]
            return any(gone)
        return await self._remove_here(field, bucket)

    async def _remove_here(self, field: str, bucket: bool) -> bool:
        with boundary("HDEL limits"):
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.hdel(self.keys.limits, field)
                if bucket:
                    pipe.hdel(self.keys.rates, field)
                gone, *_ = await pipe.execute()
        return bool(gone)

    async def settings(self) -> dict[str, str]:
        with boundary("HGETALL limits"):
            raw: dict[Any, Any] = await self.redis.hgetall(self.keys.limits)
        return {text(k): text(v) for k, v in raw.items()}

    async def of(self, queues: list[str]) -> list[QueueLimits]:
        """Each queue's limits, and how they hold now (sharded: shard 0's settings with
        the rates summed over the shards, the RUNNING and parked tasks of every shard)."""
        if (stores := await self.scripts.fan_out()) is not None:
            parts = [await st.limits.of_here(queues) for st in stores]
            return [_merged([p[i] for p in parts]) for i in range(len(queues))]
        return await self.of_here(queues)

    async def of_here(self, queues: list[str]) -> list[QueueLimits]:
        """:meth:`of` of this shard alone."""
        k = self.keys
        with boundary("limits"):
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hgetall(k.limits)
                pipe.hgetall(k.running)
                for q in queues:
                    pipe.zcard(k.parked(q))
                    pipe.zcard(k.throttled(q))
                settings, running, *counts = await pipe.execute()
        return [
            _queue_limits(
                q,
                {text(a): text(b) for a, b in settings.items()},
                {text(a): text(b) for a, b in running.items()},
                int(counts[2 * i]),
                int(counts[2 * i + 1]),
            )
            for i, q in enumerate(queues)
        ]

    async def limited_queues(self) -> list[str]:
        """The queues with a setting."""
        names = set()
        for f in await self.settings():
            kind, _, rest = f.partition("|")
            if kind in ("c", "r", "rr"):
                names.add(rest.partition("|")[0])
        return sorted(n for n in names if n)


def _share(field: str, value: str, shards: int) -> str:
    """A setting's value on one of ``shards`` shards: a rate's split, else as given."""
    if not field.startswith(("r|", "rr|")):
        return value
    per, _, burst = value.partition(" ")
    try:
        return f"{float(per) / shards:g} {max(1, math.ceil(int(burst) / shards))}"
    except ValueError:
        return value


def _merged(parts: list[QueueLimits]) -> QueueLimits:
    """One queue's limits over the shards (shard 0's first)."""
    first = parts[0]
    rates: dict[tuple[str, bool], RateLimit] = {}
    for part in parts:
        for r in part.rates:
            had = rates.get((r.type, r.retries))
            if had is None:
                rates[(r.type, r.retries)] = r
            else:
                per = float(f"{had.per_second + r.per_second:.6g}")
                rates[(r.type, r.retries)] = RateLimit(
                    queue=r.queue,
                    type=r.type,
                    retries=r.retries,
                    per_second=per,
                    burst=had.burst + r.burst,
                )
    running: dict[str, int] = {}
    for part in parts:
        for owner, n in part.running.items():
            running[owner] = running.get(owner, 0) + n
    return QueueLimits(
        queue=first.queue,
        default=first.default,
        owners=first.owners,
        rates=sorted(rates.values(), key=lambda r: (r.type, r.retries)),
        running=dict(sorted(running.items())),
        waiting=sum(p.waiting for p in parts),
        throttled=sum(p.throttled for p in parts),
    )


def _queue_limits(
    queue: str, settings: dict[str, str], running: dict[str, str], waiting: int, throttled: int
) -> QueueLimits:
    default: int | None = None
    owners: dict[str, int] = {}
    rates: list[RateLimit] = []
    for f, v in sorted(settings.items()):
        kind, _, rest = f.partition("|")
        q, _, name = rest.partition("|")
        if q != queue:
            continue
        if kind == "c":
            if not v.isdigit():
                continue
            if name == "*":
                default = int(v)
            elif name:
                owners[name] = int(v)
        elif kind in ("r", "rr"):
            per, _, burst = v.partition(" ")
            try:
                rates.append(
                    RateLimit(
                        queue=queue,
                        type=name,
                        retries=kind == "rr",
                        per_second=float(per),
                        burst=int(burst),
                    )
                )
            except ValueError:
                continue
    busy = {}
    for f, v in running.items():
        q, _, owner = f.partition("|")
        if q == queue and owner and v.lstrip("-").isdigit() and int(v) > 0:
            busy[owner] = int(v)
    return QueueLimits(
        queue=queue,
        default=default,
        owners=owners,
        rates=sorted(rates, key=lambda r: (r.type, r.retries)),
        running=dict(sorted(busy.items())),
        waiting=waiting,
        throttled=throttled,
    )
