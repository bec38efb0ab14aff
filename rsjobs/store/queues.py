"""The namespace's queue registry: names registered before a task names them, held to a
per-owner quota (``scripts/queue_add.lua``), and removed with what an unused queue leaves
behind (``scripts/queue_delete.lua``). Every Redis error leaves as rsjobs's."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from ..errors import QueueInUse, QueueQuotaExceeded, StoreError
from . import layout
from .layout import QueueAddArgs
from .replies import text
from .scripts import Scripts
from .transient import boundary

__all__ = ["QueueRegistry"]


class QueueRegistry:
    """Queue names of one namespace (``store.queues``)."""

    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts
        self.redis = scripts.redis
        self.keys = scripts.keys

    async def add(self, queues: Iterable[str], *, owner: str = "", quota: int = 0) -> int:
        """Register queue names for ``owner`` ('' = none) on shard 0, which counts each new
        one against the owner's ``quota`` (0 = none): :class:`rsjobs.QueueQuotaExceeded`
        and nothing written when it would pass it; then on every other shard (the reaper
        sweeps each shard's). Returns how many names were new."""
        names = sorted(set(queues))
        if not names:
            return 0
        args = QueueAddArgs(owner, quota, msgspec.json.encode(names).decode())
        call = layout.queue_add(self.scripts.common, self.keys, "api", args)
        code, _ = (int(v) for v in await self.scripts.run(call))
        if code < 0:
            with boundary("SMISMEMBER queues"):
                there = await self.redis.smismember(self.keys.queues, names)
            new = [q for q, t in zip(names, there, strict=True) if not t]
            raise QueueQuotaExceeded(owner, quota, new[0] if new else names[0])
        stores = await self.scripts.fan_out()
        for st in (stores or [])[1:]:
            with boundary("SADD queues"):
                await self.redis.sadd(st.keys.queues, *names)
        return code

    async def check_quota(self, by_owner: Mapping[str, Iterable[str]], quota: int) -> None:
        """Raise :class:`rsjobs.QueueQuotaExceeded` when registering ``by_owner``'s names
        (owner -> queue names) would take some owner past ``quota``: the check of a batch
        of several owners before the first of them is registered (:meth:`add` checks each
        again, atomically)."""
        owners = [o for o in by_owner if o]
        names = [q for o in owners for q in by_owner[o]]
        if not owners or not names:
            return
        k = self.keys
        with boundary("queue quota"):
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hmget(k.queue_owners, [f"o|{o}" for o in owners])
                pipe.smismember(k.queues, names)
                counts, there = await pipe.execute()
        known = {q for q, t in zip(names, there, strict=True) if t}
        for o, made in zip(owners, counts, strict=True):
            new = sorted(set(by_owner[o]) - known)
            if new and int(made or 0) + len(new) > quota:
                raise QueueQuotaExceeded(o, quota, new[0])

    async def delete(self, queue: str) -> int:
        """``queue_delete.lua`` on every shard, after checking every shard first: its
        streams, counters, series, limit bookkeeping, pause record and name go.
        :class:`rsjobs.QueueInUse` (nothing deleted) while it holds a live task, a
        registered worker serves it or a schedule enqueues to it; returns how many keys
        and fields went (0: no such queue)."""
        with boundary("HGETALL schedules"):
            schedules = await self.redis.hgetall(self.keys.schedules)
        for name, raw in schedules.items():
            try:
                target = msgspec.json.decode(raw).get("task", {}).get("queue")
            except (msgspec.DecodeError, AttributeError):
                continue  # (one that does not read is not this queue's to judge)
            if target == queue:
                raise QueueInUse(queue, f"schedule {text(name)} enqueues to it (remove it first)")
        stores = await self.scripts.fan_out()
        scripts = [st.scripts for st in stores] if stores else [self.scripts]
        # shard 0 last: its registry entry goes once the others' data has gone
        order = scripts[1:] + scripts[:1]
        for s in order:  # every shard's checks before the first write
            _check(queue, await _run(s, queue, dry=True))
        gone = 0
        for s in order:
            code, detail = await _run(s, queue, dry=False)
            _check(queue, (code, detail))
            gone += int(detail) if code == 1 else 0
        return gone


async def _run(scripts: Scripts, queue: str, *, dry: bool) -> tuple[int, str]:
    call = layout.queue_delete(scripts.common, scripts.keys, "api", queue, dry=dry)
    code, detail = await scripts.run(call)
    return int(code), text(detail)


def _check(queue: str, reply: tuple[int, str]) -> None:
    code, detail = reply
    if code == -1:
        raise QueueInUse(queue, f"it holds live tasks ({detail})")
    if code == -2:
        raise QueueInUse(queue, f"worker {detail} serves it (stop it first)")
    if code < -2:
        raise StoreError("queue_delete.lua", "ERR", f"unknown answer {code} {detail}")
