"""Synchronous access to the transition scripts on fakeredis, for the Lua tier.

Every call is packed by the store's own packers (``rsjobs.store.layout``) and only run
here: a packing mistake shows in this tier as in production. ``run`` takes any packed call
(tests build malformed ones through the packers, or cut one's ARGV).
"""

from __future__ import annotations

import sys
import time
import types
from typing import Any

import fakeredis

from rsjobs.schemas import HistoryEntry
from rsjobs.store import layout
from rsjobs.store.history import entries
from rsjobs.store.keys import GROUP, Keys, TaskKeys
from rsjobs.store.layout import (
    BeatArgs,
    BeatItem,
    Common,
    ControlArgs,
    Ending,
    Entry,
    Member,
    NewTask,
    Packed,
    QueueArgs,
    RetryArgs,
    StartArgs,
    SuccessorItem,
    task_options,
)
from rsjobs.store.record import TASK_FIELDS, TaskRecord, decode_task
from rsjobs.store.replies import stored_priority
from rsjobs.store.scripts import SCRIPT_NAMES, script_source


def long_names(h: dict[str, str]) -> dict[str, str]:
    """A task hash's fields by their long names."""
    back = {v: k for k, v in TASK_FIELDS.items()}
    return {back.get(k, k): v for k, v in h.items()}


class FakeClock(types.ModuleType):
    """fakeredis's clock (``TIME``, which the scripts read into ``NOW``; key expiry; stream
    ids), moved on by the test instead of waited for: the real time plus an offset.
    Installed once for the process in fakeredis's modules that read ``time.time``; every
    other ``time`` function is the real one."""

    def __init__(self) -> None:
        super().__init__("time")
        self.offset_s = 0.0

    def time(self) -> float:
        return time.time() + self.offset_s

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


CLOCK = FakeClock()
#: fakeredis's modules that read the clock (``import time``: TIME, expiry, stream ids)
CLOCKED = [
    m
    for name, m in list(sys.modules.items())
    if name.startswith("fakeredis") and getattr(m, "time", None) is time
]
assert CLOCKED, "fakeredis reads no clock through `import time`: LuaHarness.advance needs a look"
for _module in CLOCKED:
    _module.time = CLOCK  # type: ignore[attr-defined]


class LuaHarness:
    """The scripts on fakeredis, or on the Redis client ``redis`` (sync, text replies).
    On fakeredis the scripts' clock is the test's: :meth:`advance` moves it on."""

    def __init__(self, namespace: str = "t", retention_ms: int = 0, redis: Any = None) -> None:
        self.fake = redis is None
        if self.fake:
            CLOCK.offset_s = 0.0
        self.r = redis if redis is not None else fakeredis.FakeRedis(decode_responses=True)
        self.k = Keys(namespace)
        self.c = Common.of(self.k, 1000, retention_ms)
        self.sha = {n: self.r.script_load(script_source(n)) for n in SCRIPT_NAMES}
        #: the priority of each task enqueued here (its keys name its level's stream)
        self.priorities: dict[str, int] = {}

    def advance(self, ms: int) -> None:
        """Move the scripts' clock on by ``ms`` (fakeredis only: a real server's is its own)."""
        assert self.fake, "a real Redis keeps its own time"
        CLOCK.offset_s += ms / 1000

    def run(self, call: Packed) -> Any:
        """Run one packed call, as the store does (EVALSHA)."""
        return self.r.evalsha(self.sha[call.script], len(call.keys), *call.keys, *call.argv)

    def tk(
        self, tid: str, queue: str = "q", dedup: str | None = None, priority: int | None = None
    ) -> TaskKeys:
        """The task's keys (of the priority it was enqueued with here, unless given)."""
        p = self.priorities.get(tid, 0) if priority is None else priority
        return self.k.task_keys(tid, queue, dedup, p)

    def new_task(
        self,
        tid: str,
        *,
        queue: str = "q",
        delay_ms: int = 0,
        max_attempts: int = 3,
        timeout_ms: int = 0,
        dedup: str | None = None,
        backoff: int = 0,
        backoff_max: int | None = None,
        wait_timeout_ms: int = 0,
        payload: str = '{"p":1}',
        owner: str | None = None,
        labels: str | None = None,
        after_policy: str = "",
        priority: int = 0,
    ) -> NewTask:
        options = task_options(
            max_attempts=max_attempts,
            timeout_ms=timeout_ms,
            delay_ms=delay_ms,
            wait_timeout_ms=wait_timeout_ms,
            backoff_base_ms=backoff,
            backoff_max_ms=backoff if backoff_max is None else backoff_max,
            dedup=dedup,
            owner=owner,
            labels=labels,
            after_policy=after_policy,
            priority=priority,
        )
        return NewTask(tid, "img", queue, payload, options)

    def enqueue(
        self,
        tid: str,
        *,
        queue: str = "q",
        dedup: str | None = None,
        priority: int = 0,
        **kw: Any,
    ) -> Any:
        task = self.new_task(tid, queue=queue, dedup=dedup, priority=priority, **kw)
        keys = self.tk(tid, queue, dedup, priority)
        self.priorities[tid] = priority
        return self.run(layout.enqueue(self.c, "api", [(keys, task)]))[0]

    def after(
        self,
        tid: str,
        predecessors: list[str],
        *,
        queue: str = "q",
        dedup: str | None = None,
        source: str = "api",
        priority: int = 0,
        **kw: Any,
    ) -> Any:
        """``after.lua``: the successor ``tid`` of ``predecessors``; its reply."""
        task = self.new_task(tid, queue=queue, dedup=dedup, priority=priority, **kw)
        self.priorities[tid] = priority
        keys = self.tk(tid, queue, dedup, priority)
        return self.run(layout.after(self.c, self.k, source, keys, task, predecessors))

    def release_items(self) -> list[tuple[TaskKeys, SuccessorItem]]:
        """The items of a release step over the whole release stream, as the store builds
        them (each successor's keys from its hash)."""
        items = []
        for eid, f in self.r.xrange(self.k.release):
            for sid in f["sc"].split(","):
                q, dedup, pr = self.r.hmget(self.k.task(sid), ["q", "dedup", "pr"])
                keys = self.tk(sid, q or f["q"], dedup or None, stored_priority(pr))
                items.append((keys, SuccessorItem(eid, sid)))
        return items

    def release(self, source: str = "worker") -> Any:
        """``successors.lua`` over the whole release stream (one call; nothing when it is
        empty): its reply, or None."""
        items = self.release_items()
        if not items:
            return None
        return self.run(layout.successors(self.c, self.k, source, items))

    def release_all(self, source: str = "worker") -> list[str]:
        """Release steps until the release stream is empty: the words of every call."""
        words: list[str] = []
        for _ in range(100):
            reply = self.release(source)
            if reply is None:
                return words
            words += reply[0]
        raise AssertionError("the release stream does not drain")

    def group(self, queue: str = "q", priority: int = 0) -> None:
        try:
            self.r.xgroup_create(self.k.queue(queue, priority), GROUP, id="0", mkstream=True)
        except Exception as exc:  # BUSYGROUP
            if "BUSYGROUP" not in str(exc):
                raise

    def deliver(self, consumer: str = "w1", queue: str = "q", priority: int = 0) -> list[str]:
        stream = self.k.queue(queue, priority)
        rows = self.r.xreadgroup(GROUP, consumer, {stream: ">"}, count=100)
        return [eid for _, entries in rows for eid, _ in entries]

    def start(
        self,
        tid: str,
        entry: str,
        nonce: str = "n1",
        queue: str = "q",
        lease_ms: int = 30_000,
        consumer: str = "w1",
    ) -> Any:
        args = StartArgs(consumer, lease_ms, nonce, queue)
        return self.run(
            layout.start(self.c, self.k, "worker", args, [(self.tk(tid, queue), Entry(entry))])
        )[0]

    def ending(self, event: str, lease: str, body: str = "", retryable: bool = True) -> Ending:
        return Ending(
            event, lease, body, "E" if event != "COMPLETE" else "", int(retryable), -1, 0.5
        )

    def finish(
        self,
        tid: str,
        event: str,
        lease: str,
        body: str = "",
        retryable: bool = True,
        queue: str = "q",
        dedup: str | None = None,
    ) -> Any:
        ending = self.ending(event, lease, body, retryable)
        return self.run(
            layout.finish(self.c, self.k, "worker", [(self.tk(tid, queue, dedup), ending)])
        )[0]

    def heartbeat(
        self, tid: str, lease: str, entry: str, progress: str = "", queue: str = "q"
    ) -> Any:
        call = layout.heartbeat(
            self.c,
            "worker",
            BeatArgs("w1", 30_000),
            [(self.tk(tid, queue), BeatItem(lease, entry, progress, ""))],
        )
        return self.run(call)[0]

    def control(self, tid: str, event: str, queue: str = "q", message: str = "") -> Any:
        args = ControlArgs(event, message, self.k.control)
        return self.run(layout.control(self.c, self.k, "user", self.tk(tid, queue), args))

    def retry(
        self,
        old: str,
        new: str,
        event: str = "RETRY",
        *,
        message: str = "",
        replaces: str = "",
        queue: str = "q",
        dedup: str | None = None,
        source: str = "admin:ops",
    ) -> Any:
        """``retry.lua``: RETRY (or REPLAY) of task ``old`` as the new task ``new``."""
        args = RetryArgs(event, new, message, replaces)
        self.priorities[new] = self.priorities.get(old, 0)  # (a restart keeps it)
        call = layout.retry(
            self.c, source, self.tk(old, queue, dedup), self.tk(new, queue, dedup), args
        )
        return self.run(call)

    def queue_flag(self, event: str, queue: str = "q", reason: str = "") -> Any:
        """``queue.lua``: PAUSE_QUEUE or RESUME_QUEUE."""
        args = QueueArgs(event, queue, reason, self.k.control)
        return self.run(layout.queue(self.c, self.k, "admin:ops", args))

    def promote(self) -> Any:
        members = self.r.zrange(self.k.scheduled, 0, -1)
        items = []
        for m in members:
            queue, _, tid = m.rpartition(":")
            items.append((self.tk(tid, queue), Member(m)))
        return self.run(layout.promote(self.c, "worker", items))

    def snapshot(self) -> dict[str, Any]:
        """Every key and its content (streams by entries): to show a call wrote nothing."""
        out: dict[str, Any] = {}
        for key in sorted(self.r.keys("*")):
            kind = self.r.type(key)
            if kind == "hash":
                out[key] = self.r.hgetall(key)
            elif kind == "stream":
                out[key] = self.r.xrange(key)
            elif kind == "zset":
                out[key] = self.r.zrange(key, 0, -1, withscores=True)
            elif kind == "string":
                out[key] = self.r.get(key)
            else:
                out[key] = kind
        return out

    def task(self, tid: str) -> dict[str, str]:
        """The task hash with its fields by their long names (the glossary of
        ``rsjobs.store.record.TASK_FIELDS``)."""
        return long_names(self.r.hgetall(self.k.task(tid)))

    def record(self, tid: str) -> TaskRecord:
        """The task as the store reads it (defaults filled in, see ``decode_task``)."""
        return decode_task(self.r.hgetall(self.k.task(tid)))

    def history(self, tid: str) -> list[HistoryEntry]:
        """The history as ``Client.history`` reads it (refusals with their repeats)."""
        raw = self.r.hgetall(self.k.task(tid))
        return [HistoryEntry.from_entry(i, f, tid, raw) for i, f in entries(raw, tid)]
