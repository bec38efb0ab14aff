"""Synchronous access to the transition scripts on fakeredis, for the Lua tier."""

from __future__ import annotations

from typing import Any

import fakeredis

from rsjobs.keys import GROUP, Keys
from rsjobs.schemas import HistoryEntry
from rsjobs.scripts import SCRIPT_NAMES, script_source


class LuaHarness:
    def __init__(self, namespace: str = "t", retention_ms: int = 0) -> None:
        self.r = fakeredis.FakeRedis(decode_responses=True)
        self.k = Keys(namespace)
        self.common_argv = ["1000", str(retention_ms), GROUP]
        self.scripts = {n: self.r.register_script(script_source(n)) for n in SCRIPT_NAMES}

    def tk(self, tid: str, queue: str = "q", dedup: str | None = None) -> list[str]:
        k = self.k
        return [k.task(tid), k.history(tid), k.queue(queue), k.dedup(dedup) if dedup else k.nodedup]

    def call(self, name: str, source: str, tasks: list[list[str]], argv: list[Any]) -> Any:
        keys = self.k.common()
        for t in tasks:
            keys += t
        return self.scripts[name](keys=keys, args=[source, *self.common_argv, *argv])

    def enqueue(
        self,
        tid: str,
        *,
        queue: str = "q",
        delay_ms: int = 0,
        max_attempts: int = 3,
        timeout_ms: int = 0,
        dedup: str | None = None,
        backoff: int = 0,
        wait_timeout_ms: int = 0,
    ) -> Any:
        argv = [
            tid,
            "img",
            queue,
            '{"p":1}',
            max_attempts,
            timeout_ms,
            delay_ms,
            dedup or "",
            "",
            backoff,
            backoff,
            wait_timeout_ms,
        ]
        return self.call("enqueue", "api", [self.tk(tid, queue, dedup)], argv)[0]

    def group(self, queue: str = "q") -> None:
        try:
            self.r.xgroup_create(self.k.queue(queue), GROUP, id="0", mkstream=True)
        except Exception as exc:  # BUSYGROUP
            if "BUSYGROUP" not in str(exc):
                raise

    def deliver(self, consumer: str = "w1", queue: str = "q") -> list[str]:
        rows = self.r.xreadgroup(GROUP, consumer, {self.k.queue(queue): ">"}, count=100)
        return [eid for _, entries in rows for eid, _ in entries]

    def start(
        self, tid: str, entry: str, nonce: str = "n1", queue: str = "q", lease_ms: int = 30_000
    ) -> Any:
        return self.call("start", "worker", [self.tk(tid, queue)], ["w1", lease_ms, nonce, entry])[
            0
        ]

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
        argv = [
            event,
            lease,
            body,
            "E" if event != "COMPLETE" else "",
            "1" if retryable else "0",
            -1,
            0.5,
        ]
        return self.call("finish", "worker", [self.tk(tid, queue, dedup)], argv)[0]

    def heartbeat(
        self, tid: str, lease: str, entry: str, progress: str = "", queue: str = "q"
    ) -> Any:
        return self.call(
            "heartbeat", "worker", [self.tk(tid, queue)], ["w1", 30_000, lease, entry, progress, ""]
        )[0]

    def control(self, tid: str, event: str, queue: str = "q") -> Any:
        return self.call("control", "user", [self.tk(tid, queue)], [event, "", self.k.control])

    def promote(self) -> Any:
        members = self.r.zrange(self.k.scheduled, 0, -1)
        tasks = [self.tk(m.rpartition(":")[2], m.rpartition(":")[0]) for m in members]
        return self.call("promote", "worker", tasks, members)

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
        return self.r.hgetall(self.k.task(tid))

    def history(self, tid: str) -> list[HistoryEntry]:
        """The history as ``Client.history`` reads it (refusals with their repeats)."""
        task = self.task(tid)
        rows = self.r.xrange(self.k.history(tid))
        return [HistoryEntry.from_entry(i, f, tid, task) for i, f in rows]
