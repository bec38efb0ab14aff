"""``store.hooks``: the hook stream, its retries and dead letters, the listeners, the
webhooks' settings and delivery logs (see ``docs/hooks.md``).

The transition scripts append a task's change of state to the hook stream when some
listener (``hooks:on``) wants that state (``note_hook`` in ``fsm.lua``). The hook runner
(:mod:`rsjobs.hooks.runner`) reads it through the consumer group ``hooks``; an entry is
acked and deleted only together with the retries of the listeners that failed on it (one
MULTI), so no delivery is lost between the two, and an entry a dead runner held is taken
over with XAUTOCLAIM. Retries wait in a zset by due time and are claimed by a script
(``hooks_due.lua``) that gives each a claim of its own time, so that one claimed by a runner
that then died comes due again. Consumers of runners that are gone and hold nothing are
removed from the group (``hooks_forget.lua``), so that it does not grow for ever.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import msgspec
from redis.exceptions import ResponseError

from ..errors import StoreError
from .layout import HooksDueArgs, hooks_due, hooks_forget
from .replies import text
from .scripts import Scripts
from .transient import boundary

__all__ = ["HOOK_GROUP", "DeadHook", "HookEntry", "HookRetry", "HookStore"]

#: the consumer group the hook runners read the hook stream through
HOOK_GROUP = "hooks"

#: how many deliveries a task's webhook log keeps (newest first)
LOG_MAX = 100


class HookEntry(NamedTuple):
    """One change of state on the hook stream."""

    #: the stream entry's id (also the delivery's id, the same for every retry of it)
    entry: str
    task_id: str
    queue: str
    state: str
    event: str
    #: the history entry of the change (``GET /tasks/{id}/history``)
    hid: str


class HookRetry(msgspec.Struct, frozen=True, kw_only=True):
    """A listener's pending run on one entry (a member of ``hooks:retry``, as JSON)."""

    #: the listener: ``hook:<name>`` or ``webhook:<name>``
    listener: str
    entry: str
    task_id: str
    queue: str
    state: str
    event: str
    hid: str
    #: the attempts made so far
    attempts: int
    #: the last attempt's error
    error: str = ""

    def of_entry(self) -> HookEntry:
        return HookEntry(self.entry, self.task_id, self.queue, self.state, self.event, self.hid)


class DeadHook(NamedTuple):
    """A hook run that failed every attempt: its dead-letter entry id and the retry."""

    id: str
    retry: HookRetry


_retry_enc = msgspec.json.Encoder()
_retry_dec = msgspec.json.Decoder(HookRetry)


def encode_retry(r: HookRetry) -> str:
    return _retry_enc.encode(r).decode()


def _entry(row: Any) -> HookEntry | None:
    """The hook entry of a stream row (None: not one the scripts wrote)."""
    eid, fields = text(row[0]), row[1] or {}
    f = {text(k): text(v) for k, v in fields.items()}
    if not f.get("id") or not f.get("s"):
        return None
    return HookEntry(eid, f["id"], f.get("q", ""), f["s"], f.get("e", ""), f.get("hid", ""))


class HookStore:
    """The Redis side of hooks and webhooks for one namespace."""

    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts
        self.redis = scripts.redis
        self.keys = scripts.keys

    # -- listeners -------------------------------------------------------------------------

    async def _every(self) -> list[HookStore]:
        """The hook stores of every shard, when this is the namespace's (sharded); else
        this one alone."""
        stores = await self.scripts.fan_out()
        return [st.hooks for st in stores] if stores else [self]

    async def listen(self, listener: str, states: Sequence[str]) -> None:
        """Tell the scripts that ``listener`` wants changes to ``states`` (``*``: all; on
        every shard, in shard order: each shard's scripts read their own)."""
        for hs in await self._every():
            with boundary("HSET hooks:on"):
                await hs.redis.hset(hs.keys.hooks_on, listener, ",".join(states))

    async def unlisten(self, listener: str) -> bool:
        gone = False
        for hs in await self._every():
            with boundary("HDEL hooks:on"):
                gone = bool(await hs.redis.hdel(hs.keys.hooks_on, listener)) or gone
        return gone

    async def listeners(self) -> dict[str, list[str]]:
        with boundary("HGETALL hooks:on"):
            raw = await self.redis.hgetall(self.keys.hooks_on)
        return {text(k): text(v).split(",") for k, v in raw.items()}

    # -- the stream --------------------------------------------------------------------------

    async def ensure_group(self) -> None:
        """Create the group (reading from the stream's start: entries written before the
        first runner started are delivered too)."""
        with boundary("XGROUP CREATE hooks"):
            try:
                await self.redis.xgroup_create(self.keys.hooks, HOOK_GROUP, id="0", mkstream=True)
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    async def read(self, consumer: str, count: int, block_ms: int) -> list[HookEntry]:
        """New entries for ``consumer``, waiting up to ``block_ms`` for one."""
        with boundary("XREADGROUP hooks"):
            reply: Any = await self.redis.xreadgroup(
                HOOK_GROUP, consumer, {self.keys.hooks: ">"}, count=count, block=block_ms
            )
        rows = list(reply[0][1]) if reply else []
        return await self._usable(rows)

    async def pending_of(self, consumer: str, count: int) -> list[HookEntry]:
        """Entries delivered to ``consumer`` and not yet settled (a restart under the same
        name takes up what it held)."""
        with boundary("XREADGROUP hooks 0"):
            reply: Any = await self.redis.xreadgroup(
                HOOK_GROUP, consumer, {self.keys.hooks: "0"}, count=count
            )
        rows = [r for r in (list(reply[0][1]) if reply else []) if r[1]]
        return await self._usable(rows)

    async def reclaim(self, consumer: str, min_idle_ms: int, count: int) -> list[HookEntry]:
        """Entries another runner held for longer than ``min_idle_ms`` without settling them
        (it died): now ``consumer``'s (XAUTOCLAIM, one pass from the start)."""
        with boundary("XAUTOCLAIM hooks"):
            reply: Any = await self.redis.xautoclaim(
                self.keys.hooks, HOOK_GROUP, consumer, min_idle_ms, "0-0", count=count
            )
        return await self._usable(list(reply[1]))

    async def _usable(self, rows: list[Any]) -> list[HookEntry]:
        """The hook entries of ``rows``; a row that is none (written by something else) is
        acked and deleted, so that it cannot come back forever."""
        out, junk = [], []
        for row in rows:
            e = _entry(row)
            if e is None:
                junk.append(text(row[0]))
            else:
                out.append(e)
        if junk:
            await self.settle(junk)
        return out

    async def settle(
        self,
        entries: Sequence[str],
        retries: Sequence[tuple[HookRetry, int]] = (),
        dead: Sequence[HookRetry] = (),
    ) -> None:
        """Ack and delete ``entries`` and add the ``retries`` (each with its due time, ms)
        and the ``dead`` letters in one MULTI: an entry is gone only once its failed runs
        wait as retries or lie in the dead letters."""
        k = self.keys
        with boundary("MULTI settle hooks"):
            async with self.redis.pipeline(transaction=True) as pipe:
                if retries:
                    pipe.zadd(k.hooks_retry, {encode_retry(r): due for r, due in retries})
                for r in dead:
                    pipe.xadd(k.hooks_dead, {"r": encode_retry(r)})
                pipe.xack(k.hooks, HOOK_GROUP, *entries)
                pipe.xdel(k.hooks, *entries)
                await pipe.execute()

    async def forget_idle(self, keep: str, min_idle_ms: int) -> list[str]:
        """Remove from the group the consumers (but ``keep``) that hold nothing and have
        not read for ``min_idle_ms``: runners that are gone (``hooks_forget.lua`` checks
        again that each holds nothing as it removes it). The names removed."""
        try:
            with boundary("XINFO CONSUMERS hooks"):
                rows: Any = await self.redis.xinfo_consumers(self.keys.hooks, HOOK_GROUP)
        except StoreError as exc:
            if exc.code == "NOGROUP" or "no such key" in exc.reply.lower():
                return []  # no runner ever ran: nothing to forget
            raise
        idle = [
            text(r["name"])
            for r in rows
            if int(r.get("pending", 0)) == 0
            and int(r.get("idle", 0)) >= min_idle_ms
            and text(r["name"]) != keep
        ]
        if not idle:
            return []
        call = hooks_forget(self.scripts.common, self.keys, "hooks", HOOK_GROUP, idle)
        replies = await self.scripts.run(call)
        return [name for name, done in zip(idle, replies, strict=True) if int(done) == 1]

    async def backlog(self) -> dict[str, int]:
        """How much waits: entries on the stream (unread or unsettled), retries, dead
        (summed over the shards)."""
        out = {"stream": 0, "retries": 0, "dead": 0}
        for hs in await self._every():
            k = hs.keys
            with boundary("hooks backlog"):
                async with self.redis.pipeline(transaction=False) as pipe:
                    pipe.xlen(k.hooks)
                    pipe.zcard(k.hooks_retry)
                    pipe.xlen(k.hooks_dead)
                    stream, retry, dead = await pipe.execute()
            out["stream"] += int(stream)
            out["retries"] += int(retry)
            out["dead"] += int(dead)
        return out

    # -- retries -----------------------------------------------------------------------------

    async def due(self, count: int, claim_ms: int) -> list[tuple[str, HookRetry | None]]:
        """Claim up to ``count`` due retries for ``claim_ms``: (member, retry) pairs, the
        retry None when the member does not decode (the caller drops it)."""
        c = self.scripts.common
        call = hooks_due(c, self.keys, "hooks", HooksDueArgs(count, claim_ms))
        out: list[tuple[str, HookRetry | None]] = []
        for m in await self.scripts.run(call):
            member = text(m)
            try:
                out.append((member, _retry_dec.decode(member)))
            except msgspec.ValidationError:
                out.append((member, None))
            except msgspec.DecodeError:
                out.append((member, None))
        return out

    async def retry_done(self, member: str) -> None:
        with boundary("ZREM hooks:retry"):
            await self.redis.zrem(self.keys.hooks_retry, member)

    async def retry_again(self, member: str, retry: HookRetry, due_ms: int) -> None:
        """Replace a claimed retry by its next attempt (one MULTI)."""
        with boundary("MULTI hooks retry"):
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.zrem(self.keys.hooks_retry, member)
                pipe.zadd(self.keys.hooks_retry, {encode_retry(retry): due_ms})
                await pipe.execute()

    async def bury(self, member: str | None, retry: HookRetry) -> None:
        """Move a run that failed its last attempt to the dead letters (and remove its
        claimed retry, when it was one; one MULTI)."""
        with boundary("MULTI hooks dead"):
            async with self.redis.pipeline(transaction=True) as pipe:
                if member is not None:
                    pipe.zrem(self.keys.hooks_retry, member)
                pipe.xadd(self.keys.hooks_dead, {"r": encode_retry(retry)})
                await pipe.execute()

    # -- dead letters ------------------------------------------------------------------------

    async def dead(self, count: int = 100) -> list[DeadHook]:
        """The dead letters, oldest first (of every shard, by entry id)."""
        rows = []
        for hs in await self._every():
            with boundary("XRANGE hooks:dead"):
                rows += await self.redis.xrange(hs.keys.hooks_dead, "-", "+", count=count)
        rows.sort(key=lambda r: tuple(int(x) for x in text(r[0]).split("-")))
        out = []
        for rid, fields in rows[:count]:
            raw = text(fields.get("r", ""))
            try:
                out.append(DeadHook(text(rid), _retry_dec.decode(raw)))
            except (msgspec.ValidationError, msgspec.DecodeError):
                continue
        return out

    async def requeue(self, dead_ids: Sequence[str], now_ms: int) -> int:
        """Put dead letters back as retries due now, with their attempts reset (one MULTI
        each: the dead letter goes only with its retry); how many there were (on every
        shard: each shard's dead letters go back to its own retries)."""
        done = 0
        for hs in await self._every():
            done += await hs._requeue(dead_ids, now_ms)
        return done

    async def _requeue(self, dead_ids: Sequence[str], now_ms: int) -> int:
        done = 0
        k = self.keys
        for did in dead_ids:
            with boundary("XRANGE hooks:dead"):
                rows = await self.redis.xrange(k.hooks_dead, did, did)
            if not rows:
                continue
            try:
                r = _retry_dec.decode(text(rows[0][1].get("r", "")))
            except (msgspec.ValidationError, msgspec.DecodeError):
                continue
            fresh = msgspec.structs.replace(r, attempts=0, error="")
            with boundary("MULTI hooks requeue"):
                async with self.redis.pipeline(transaction=True) as pipe:
                    pipe.zadd(k.hooks_retry, {encode_retry(fresh): now_ms})
                    pipe.xdel(k.hooks_dead, did)
                    await pipe.execute()
            done += 1
        return done

    async def now_ms(self) -> int:
        """Redis TIME (ms): due times are Redis time, as the claim script reads them (of
        the node serving the namespace, on a cluster)."""
        with boundary("TIME"):
            s, us = await self.redis.execute_command("TIME", keys=[self.keys.layout])
        return int(s) * 1000 + int(us) // 1000

    # -- webhooks ----------------------------------------------------------------------------

    async def webhooks(self) -> dict[str, bytes]:
        """Webhook name -> its settings (JSON)."""
        with boundary("HGETALL webhooks"):
            raw = await self.redis.hgetall(self.keys.webhooks)
        return {text(k): text(v).encode() for k, v in raw.items()}

    async def put_webhook(self, name: str, settings: bytes, states: Sequence[str]) -> None:
        """Save a webhook and listen for its states (one MULTI; sharded: the settings on
        shard 0 with its own listening, then each other shard's listening)."""
        every = await self._every()
        with boundary("MULTI webhook add"):
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.hset(self.keys.webhooks, name, settings)
                pipe.hset(self.keys.hooks_on, f"webhook:{name}", ",".join(states))
                await pipe.execute()
        for hs in every[1:]:
            with boundary("HSET hooks:on"):
                await self.redis.hset(hs.keys.hooks_on, f"webhook:{name}", ",".join(states))

    async def remove_webhook(self, name: str) -> bool:
        every = await self._every()
        with boundary("MULTI webhook remove"):
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.hdel(self.keys.webhooks, name)
                pipe.hdel(self.keys.hooks_on, f"webhook:{name}")
                gone, _ = await pipe.execute()
        for hs in every[1:]:
            with boundary("HDEL hooks:on"):
                await self.redis.hdel(hs.keys.hooks_on, f"webhook:{name}")
        return bool(gone)

    async def log_delivery(self, task_id: str, record: bytes) -> None:
        """Add a delivery to the task's webhook log (newest first, LOG_MAX kept, expiring
        with the retention period; on the task's shard)."""
        if (other := await self.scripts.elsewhere(task_id)) is not None:
            return await other.hooks.log_delivery(task_id, record)
        key = self.keys.webhook_log(task_id)
        retention = self.scripts.settings.retention_ms
        with boundary("LPUSH webhooks:log"):
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.lpush(key, record)
                pipe.ltrim(key, 0, LOG_MAX - 1)
                if retention > 0:
                    pipe.pexpire(key, retention)
                await pipe.execute()

    async def deliveries(self, task_id: str) -> list[bytes]:
        """The task's webhook deliveries (JSON), newest first."""
        if (other := await self.scripts.elsewhere(task_id)) is not None:
            return await other.hooks.deliveries(task_id)
        with boundary("LRANGE webhooks:log"):
            rows = await self.redis.lrange(self.keys.webhook_log(task_id), 0, -1)
        return [text(r).encode() for r in rows]
