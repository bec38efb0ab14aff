"""``store.schedules``: recurring schedules, their next ticks, and the firing of a tick
(``schedule.lua``; see :mod:`rsjobs.schedules`)."""

from __future__ import annotations

import logging
import uuid

import msgspec

from ..codec import encode_payload
from ..extras import MissingExtra
from ..schedules import Schedule, ScheduleInfo, missed_ticks, next_tick
from . import layout
from .layout import NewTask, ScheduleArgs, task_options
from .replies import text
from .scripts import Scripts
from .transient import boundary

__all__ = ["Schedules"]

log = logging.getLogger("rsjobs.schedules")

_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder(Schedule)


class Schedules:
    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts
        self.redis = scripts.redis
        self.keys = scripts.keys

    async def put(self, s: Schedule, now_ms: int) -> int:
        """Save ``s`` (replacing one of its name) due at its first tick after ``now_ms``
        (one MULTI); that tick."""
        first = next_tick(s, now_ms)
        k = self.keys
        with boundary("MULTI schedule add"):
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.hset(k.schedules, s.name, _enc.encode(s))
                pipe.zadd(k.schedules_due, {s.name: first})
                pipe.sadd(k.queues, s.task.queue)
                await pipe.execute()
        return first

    async def remove(self, name: str) -> bool:
        k = self.keys
        with boundary("MULTI schedule remove"):
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.hdel(k.schedules, name)
                pipe.zrem(k.schedules_due, name)
                pipe.hdel(
                    k.schedules_log,
                    f"{name}:fired",
                    f"{name}:skipped",
                    f"{name}:last",
                    f"{name}:last_at",
                )
                gone, *_ = await pipe.execute()
        return bool(gone)

    async def list(self) -> list[ScheduleInfo]:
        k = self.keys
        with boundary("schedules"):
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hgetall(k.schedules)
                pipe.zrange(k.schedules_due, 0, -1, withscores=True)
                pipe.hgetall(k.schedules_log)
                raw, due, logs = await pipe.execute()
        nexts = {text(n): int(score) for n, score in due}
        lg = {text(a): text(b) for a, b in logs.items()}
        out = []
        for name, settings in sorted(raw.items()):
            try:
                s = _dec.decode(text(settings))
            except (msgspec.ValidationError, msgspec.DecodeError):
                continue
            n = text(name)
            out.append(
                ScheduleInfo(
                    schedule=s,
                    next_at=nexts.get(n, 0),
                    fired=int(lg.get(f"{n}:fired", 0)),
                    skipped=int(lg.get(f"{n}:skipped", 0)),
                    last_task=lg.get(f"{n}:last", ""),
                    last_at=int(lg.get(f"{n}:last_at", 0)),
                )
            )
        return out

    async def fire_due(self, source: str, now_ms: int, most: int = 100) -> int:
        """Fire the ticks due by ``now_ms`` (at most ``most``); how many this call fired
        (a tick another reaper fired first is not counted)."""
        k = self.keys
        with boundary("ZRANGEBYSCORE schedules:due"):
            due = await self.redis.zrangebyscore(
                k.schedules_due, "-inf", now_ms, start=0, num=most, withscores=True
            )
        fired = 0
        for name, score in due:
            n, at = text(name), int(score)
            with boundary("HGET schedules"):
                raw = await self.redis.hget(k.schedules, n)
            if raw is None:
                continue  # removed since: the next call of remove cleans the zset
            settings = text(raw)
            try:
                s = _dec.decode(settings)
                payload = encode_payload(s.task.payload, self.scripts.settings.payload_limit)
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                log.warning("schedule %s: unreadable settings, not fired: %s", n, exc)
                continue
            r = s.task
            tid = uuid.uuid4().hex
            task = NewTask(
                tid,
                r.type,
                r.queue,
                payload,
                task_options(
                    max_attempts=r.max_attempts,
                    timeout_ms=r.timeout_ms,
                    wait_timeout_ms=r.wait_timeout_ms,
                    backoff_base_ms=r.backoff_base_ms,
                    backoff_max_ms=r.backoff_max_ms,
                    owner=r.owner,
                    labels=_labels(r.labels),
                    priority=r.priority,
                ),
            )
            try:
                nxt = next_tick(s, max(now_ms, at))
                missed = missed_ticks(s, at, now_ms)
            except MissingExtra as exc:
                # (a cron schedule added where croniter is, swept where it is not: it
                # waits for a reaper that has it; the others fire; told once per schedule)
                if n not in _UNFIRED:
                    _UNFIRED.add(n)
                    log.error("schedule %s: not fired: %s", n, exc)
                continue
            args = ScheduleArgs(n, settings, at, nxt, missed)
            call = layout.schedule(
                self.scripts.common,
                k,
                source,
                args,
                k.task_keys(tid, r.queue, None, r.priority),
                task,
            )
            reply = await self.scripts.run(call)
            fired += int(reply[0])
        return fired


#: schedules this process could not fire for want of an extra (logged once each)
_UNFIRED: set[str] = set()


def _labels(labels: dict[str, str] | None) -> str | None:
    from ..labels import encode_labels

    return encode_labels(labels)
