"""The reaper's scripts on fakeredis: reclaim.lua, deadline.lua, workers.lua, link.lua."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from rsjobs.model import TERMINAL, allowed
from rsjobs.store import layout
from rsjobs.store.keys import GROUP
from rsjobs.store.layout import DeadlineArgs, DeadlineItem, Entry, ReclaimArgs, WorkersArgs
from tests.support.lua import LuaHarness


class Reaper(LuaHarness):
    """The harness plus the reaper's calls (which add keys after the task keys)."""

    def reclaim(
        self,
        entries: list[tuple[str, str]],
        *,
        min_idle: int = 0,
        max_deliveries: int = 5,
        queue: str = "q",
        dedup: str | None = None,
    ) -> list[str]:
        """``entries``: (task id, entry id) pairs."""
        items = [(self.tk(tid, queue, dedup), Entry(e)) for tid, e in entries]
        args = ReclaimArgs(min_idle, max_deliveries, 3, 1000, 100)
        return list(self.run(layout.reclaim(self.c, self.k, "reaper", args, items)))

    def deadline(self, members: list[str], grace: int = 0) -> list[str]:
        items = [
            (self.tk(m.rpartition(":")[2], m.rpartition(":")[0]), DeadlineItem(m, 0.5))
            for m in members
        ]
        return list(self.run(layout.deadline(self.c, "reaper", DeadlineArgs(grace), items)))

    def workers(self, forget_ms: int = 60_000, queues: tuple[str, ...] = ("q",)) -> Any:
        args = WorkersArgs(3, 1000, forget_ms)
        return self.run(layout.workers(self.c, self.k, "reaper", args, queues))

    def register(self, name: str, beat_ms: int, lease_ms: int = 1000) -> None:
        reg = {"pid": 1, "queues": ["q"], "beat_at": beat_ms, "lease_ms": lease_ms}
        self.r.hset(self.k.workers, name, json.dumps(reg))

    def running(self, tid: str, lease_ms: int = 1, **kw: Any) -> tuple[str, str]:
        """Enqueue, deliver and start ``tid``; returns (entry, lease)."""
        self.enqueue(tid, **kw)
        self.group()
        entry = self.deliver()[-1]
        reply = self.start(tid, entry, lease_ms=lease_ms)
        assert reply[0] == 1
        return entry, reply[5]

    def pel(self, queue: str = "q") -> list[str]:
        rows = self.r.xpending_range(self.k.queue(queue), GROUP, "-", "+", 100)
        return [r["message_id"] for r in rows]

    def events(self, tid: str) -> list[str]:
        return [e.event for e in self.history(tid) if not e.rejected]


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture
def h() -> Reaper:
    return Reaper(retention_ms=60_000)


def assert_table_only(h: Reaper, tid: str) -> None:
    """Every recorded transition is one the table allows; at most one reaches terminal."""
    entries = h.history(tid)
    for e in entries:
        if not e.rejected and e.from_state != e.to_state:
            assert allowed(e.from_state, e.event, e.to_state), e
    assert sum(1 for e in entries if not e.rejected and e.to_state in TERMINAL) <= 1


# -- reclaim.lua ---------------------------------------------------------------------------


def test_expired_lease_is_reclaimed_once_with_the_lost_worker_in_history(h: Reaper) -> None:
    entry, _ = h.running("a" * 32)
    h.advance(5)
    assert h.reclaim([("a" * 32, entry)]) == ["RETRIED"]
    t = h.task("a" * 32)
    assert t["state"] == "PENDING" and t["failures"] == "1" and t["deliveries"] == "1"
    assert t["entry"] != entry and entry not in h.pel()
    assert h.r.xrange(h.k.queue("q"), entry, entry) == []  # acked AND deleted
    last = h.history("a" * 32)[-1]
    assert (last.event, last.from_state, last.to_state, last.source) == (
        "RECLAIM",
        "RUNNING",
        "PENDING",
        "reaper",
    )
    assert last.extra["worker"] == "w1" and "lease expired" in last.message
    # a second reaper with the same candidate finds nothing to do
    assert h.reclaim([("a" * 32, entry)]) == ["BUSY"]
    assert h.events("a" * 32) == ["ENQUEUE", "START", "RECLAIM"]
    assert_table_only(h, "a" * 32)


def test_live_lease_is_never_reclaimed_however_idle(h: Reaper) -> None:
    entry, _ = h.running("b" * 32, lease_ms=60_000)
    h.advance(5)
    assert h.reclaim([("b" * 32, entry)]) == ["ALIVE"]
    assert h.task("b" * 32)["state"] == "RUNNING" and entry in h.pel()
    assert h.events("b" * 32) == ["ENQUEUE", "START"]


def test_entry_not_idle_enough_is_left_alone(h: Reaper) -> None:
    entry, _ = h.running("c" * 32)
    h.advance(5)
    assert h.reclaim([("c" * 32, entry)], min_idle=60_000) == ["BUSY"]
    assert h.task("c" * 32)["state"] == "RUNNING"


def test_exhausted_attempts_fail_and_expire(h: Reaper) -> None:
    tid = "d" * 32
    entry, _ = h.running(tid, max_attempts=1, dedup="k1")
    h.advance(5)
    assert h.reclaim([(tid, entry)], dedup="k1") == ["FAILED"]
    t = h.task(tid)
    assert t["state"] == "FAILED" and t["error_type"] == "WorkerLost"
    assert "attempts exhausted (1/1)" in t["error"]
    for key in (h.k.task(tid), h.k.dedup("k1")):  # the hash holds the history
        assert 0 < h.r.pttl(key) <= 60_000
    assert entry not in h.pel()
    assert_table_only(h, tid)


def test_late_completion_after_reclaim_is_refused_and_recorded(h: Reaper) -> None:
    tid = "e" * 32
    entry, lease = h.running(tid)
    h.advance(5)
    assert h.reclaim([(tid, entry)]) == ["RETRIED"]
    code, state = h.finish(tid, "COMPLETE", lease, '"late"')
    assert (code, state) == (-2, "PENDING")
    assert h.history(tid)[-1].rejected and h.task(tid).get("result") is None


def test_unstarted_delivery_of_a_dead_consumer_is_put_back(h: Reaper) -> None:
    tid = "f" * 32
    h.enqueue(tid)
    h.group()
    entry = h.deliver()[-1]
    h.advance(5)
    # w1 is not registered: gone
    assert h.reclaim([(tid, entry)]) == ["REDELIVERED"]
    t = h.task(tid)
    assert t["state"] == "PENDING" and t["entry"] != entry and t["deliveries"] == "1"
    assert entry not in h.pel() and h.events(tid) == ["ENQUEUE"]
    # the new entry is delivered and started normally
    new = h.deliver("w2")[-1]
    assert new == t["entry"] and h.start(tid, new)[0] == 1


def test_unstarted_delivery_of_a_live_consumer_is_kept(h: Reaper) -> None:
    tid = "1" * 32
    h.enqueue(tid)
    h.group()
    entry = h.deliver()[-1]
    h.register("w1", now_ms())
    h.advance(5)
    assert h.reclaim([(tid, entry)]) == ["ALIVE"]
    assert h.task(tid)["entry"] == entry and entry in h.pel()
    # ... until its beat is older than 3 leases
    h.register("w1", now_ms() - 3_500)
    assert h.reclaim([(tid, entry)]) == ["REDELIVERED"]


def test_poison_task_is_deadlettered_after_max_deliveries(h: Reaper) -> None:
    tid = "2" * 32
    h.enqueue(tid, max_attempts=10)
    h.group()
    outcomes = []
    for _ in range(3):
        entry = h.deliver()[-1]
        assert h.start(tid, entry, lease_ms=1)[0] == 1
        h.advance(5)
        outcomes += h.reclaim([(tid, entry)], max_deliveries=3)
    assert outcomes == ["RETRIED", "RETRIED", "DEADLETTERED"]
    t = h.task(tid)
    assert t["state"] == "FAILED" and t["error_type"] == "DeadLetter"
    assert "poison: delivered 3 times" in t["error"]
    ((dl_id, dl),) = h.r.xrange(h.k.deadletter)
    assert dl["id"] == tid and dl["deliveries"] == "3" and dl["reason"] == t["error"]
    assert t["deadletter"] == dl_id
    assert h.events(tid)[-1] == "DEADLETTER" and h.pel() == []
    assert_table_only(h, tid)


def test_unstarted_poison_is_deadlettered_from_pending(h: Reaper) -> None:
    tid = "3" * 32
    h.enqueue(tid)
    h.group()
    for expected in ("REDELIVERED", "DEADLETTERED"):
        entry = h.deliver()[-1]
        h.advance(2)
        assert h.reclaim([(tid, entry)], max_deliveries=2) == [expected]
    last = h.history(tid)[-1]
    assert (last.from_state, last.event, last.to_state) == ("PENDING", "DEADLETTER", "FAILED")


def test_garbage_entries_are_acked_and_deleted(h: Reaper) -> None:
    h.group()
    stray = h.r.xadd(h.k.queue("q"), {"id": "9" * 32})  # names no task
    h.deliver()
    tid = "4" * 32
    entry, lease = h.running(tid)
    h.finish(tid, "COMPLETE", lease, "1")
    h.advance(2)
    assert h.reclaim([("9" * 32, stray)]) == ["STALE"]
    assert h.pel() == [] and h.r.xlen(h.k.queue("q")) == 0
    assert entry not in h.pel()


# -- deadline.lua --------------------------------------------------------------------------


def test_running_past_deadline_times_out_with_the_retry_policy(h: Reaper) -> None:
    tid = "5" * 32
    entry, lease = h.running(tid, lease_ms=60_000, timeout_ms=1, max_attempts=2)
    m = f"q:{tid}"
    h.advance(5)
    assert h.deadline([m], grace=60_000) == ["LATER"]  # the worker's own timer goes first
    assert h.deadline([m]) == ["RETRY"]
    t = h.task(tid)
    assert t["state"] == "SCHEDULED" and t["error_type"] == "TimeoutError"
    assert h.r.zscore(h.k.scheduled, m) is not None and h.r.zscore(h.k.deadlines, m) is None
    assert entry not in h.pel()
    assert h.finish(tid, "COMPLETE", lease, "1")[0] == -2  # the hung worker's late result
    # second attempt times out too: attempts exhausted
    h.r.hset(h.k.task(tid), "due_at", 0)
    h.r.zadd(h.k.scheduled, {m: 0})
    h.promote()
    entry2 = h.deliver()[-1]
    assert h.start(tid, entry2, lease_ms=60_000)[0] == 1
    h.advance(5)
    assert h.deadline([m]) == ["TIMED_OUT"]
    assert (
        h.task(tid)["state"] == "TIMED_OUT" and "attempts exhausted (2/2)" in h.task(tid)["error"]
    )
    assert_table_only(h, tid)


def test_queue_wait_deadline_expires_unstarted_tasks(h: Reaper) -> None:
    pending, scheduled = "6" * 32, "7" * 32
    tasks = [
        (h.tk(pending), h.new_task(pending, payload="{}", wait_timeout_ms=1)),
        (h.tk(scheduled), h.new_task(scheduled, payload="{}", delay_ms=60_000, wait_timeout_ms=1)),
    ]
    h.run(layout.enqueue(h.c, "api", tasks))
    members = h.r.zrange(h.k.deadlines, 0, -1)
    assert sorted(members) == sorted([f"q:{pending}", f"q:{scheduled}"])
    h.advance(5)
    assert h.deadline(members) == ["EXPIRED", "EXPIRED"]
    for tid in (pending, scheduled):
        t = h.task(tid)
        assert t["state"] == "TIMED_OUT" and t["error_type"] == "WaitTimeout"
        assert "queue-wait deadline" in t["error"]
        assert_table_only(h, tid)
    assert h.r.zcard(h.k.deadlines) == 0 and h.r.zcard(h.k.scheduled) == 0
    assert h.r.xlen(h.k.queue("q")) == 0


def test_wait_deadline_does_not_apply_once_started(h: Reaper) -> None:
    tid = "8" * 32
    h.enqueue(tid, payload="{}", wait_timeout_ms=60_000)
    h.group()
    entry = h.deliver()[-1]
    assert h.start(tid, entry)[0] == 1  # in time
    assert h.r.zscore(h.k.deadlines, f"q:{tid}") is None  # started without a deadline
    h.r.hset(h.k.task(tid), "expires_at", 1)  # the wait deadline passes after the start
    assert h.deadline([f"q:{tid}"]) == ["STALE"]
    assert h.task(tid)["state"] == "RUNNING"


def test_not_yet_due_member_is_rescored(h: Reaper) -> None:
    tid = "a1" + "0" * 30
    h.enqueue(tid, payload="{}", wait_timeout_ms=60_000)
    m = f"q:{tid}"
    h.r.zadd(h.k.deadlines, {m: 0})  # an early score
    assert h.deadline([m]) == ["LATER"]
    assert h.r.zscore(h.k.deadlines, m) == float(h.task(tid)["expires_at"])
    assert h.deadline(["q:" + "f0" * 16]) == ["STALE"]


# -- workers.lua ---------------------------------------------------------------------------


def test_workers_are_marked_dead_revived_and_forgotten(h: Reaper) -> None:
    h.register("alive", now_ms())
    h.register("silent", now_ms() - 10_000)
    dead, forgotten, _ = h.workers()
    assert dead == ["silent"] and forgotten == []
    mark = json.loads(h.r.hget(h.k.workers_dead, "silent"))
    assert mark["beat_at"] > 0 and mark["since"] > 0
    assert h.workers()[0] == []  # marked once
    # it beats again: alive, mark removed
    h.register("silent", now_ms())
    h.workers()
    assert not h.r.hexists(h.k.workers_dead, "silent")
    # silent again, then dead for longer than forget_ms: forgotten
    h.register("silent", now_ms() - 10_000)
    h.workers(forget_ms=1)
    h.advance(5)
    assert h.workers(forget_ms=1)[1] == ["silent"]
    assert not h.r.hexists(h.k.workers, "silent") and h.r.hlen(h.k.workers_dead) == 0
    assert h.r.hexists(h.k.workers, "alive")


def test_dead_worker_holding_entries_is_kept_until_they_are_recovered(h: Reaper) -> None:
    tid = "b1" + "0" * 30
    entry, _ = h.running(tid)  # consumer w1 holds it
    h.register("w1", now_ms() - 10_000)
    h.workers(forget_ms=1)
    h.advance(5)
    assert h.workers(forget_ms=1)[1] == []  # still holds an entry
    assert h.reclaim([(tid, entry)]) == ["RETRIED"]
    _, forgotten, _ = h.workers(forget_ms=1)
    assert forgotten == ["w1"]


# -- link.lua ------------------------------------------------------------------------------


def test_link_sets_both_ids_once(h: Reaper) -> None:
    a, b = "c1" + "0" * 30, "c2" + "0" * 30
    h.enqueue(a)
    h.enqueue(b)
    assert list(h.run(layout.link(h.c, "user", h.tk(a), h.tk(b)))) == [1, b]
    assert list(h.run(layout.link(h.c, "user", h.tk(a), h.tk(b)))) == [0, b]
    assert h.task(a)["requeued_as"] == b and h.task(b)["requeued_from"] == a
    gone = "c3" + "0" * 30
    assert list(h.run(layout.link(h.c, "user", h.tk(gone), h.tk(b)))) == [-1, ""]
    assert not h.r.exists(h.k.task(gone))
