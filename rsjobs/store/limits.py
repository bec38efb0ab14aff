"""The limits of shared queues as stored (:mod:`rsjobs.limits` checks the values): the
``limits`` hash (settings), the ``rates`` hash (the buckets' state), the ``running`` hash
(per-owner RUNNING counts, kept by ``fsm.lua``) and the queues' ``waiting`` and
``throttled`` zsets (tasks parked by ``start.lua`` and ``take.lua``).

A setting is one field, written with one HSET or HDEL: a worker reads it at its next
``take.lua`` / ``start.lua`` call.
"""

from __future__ import annotations

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
        with boundary("HSET limits"):
            await self.redis.hset(self.keys.limits, field, value)

    async def remove(self, field: str, *, bucket: bool = False) -> bool:
        """Remove a setting (and, for a rate, its bucket's state); whether it was set."""
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
        """Each queue's limits, and how they hold now."""
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
