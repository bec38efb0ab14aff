"""take.lua, start.lua, finish.lua and recount.lua on fakeredis: priorities (a stream per
level, highest first, aging), per-owner limits (held back without blocking the others,
parked, handed out when the owner has room, claims), rate limits (reserved times), the
RUNNING counts and their repair, and refusals that write nothing."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from rsjobs.store import layout
from rsjobs.store.keys import WAITING_CONSUMER, member
from rsjobs.store.layout import Ending, Entry, StartArgs, TakeArgs
from tests.support.lua import LuaHarness


def tid(n: int) -> str:
    return f"{n:032x}"


class Pool:
    """A queue ``q`` and one worker's calls on it."""

    def add(self, n: int, *, owner: str | None = None, priority: int = 0, **kw: Any) -> str:
        t = tid(n)
        assert self.h.enqueue(t, owner=owner, priority=priority, **kw)[2] == 0
        return t

    def __init__(self, queues: tuple[str, ...] = ("q",), **limits: Any) -> None:
        self.h = LuaHarness()
        self.h.group()
        #: the queues each take reads ("q" alone: the short way; with another, the long way)
        self.queues = list(queues)
        for field, value in limits.items():
            self.h.r.hset(self.h.k.limits, field.replace("__", "|"), value)

    def take(self, count: int = 10, consumer: str = "w1", age_ms: int = 0, park_max: int = 256
             ) -> tuple[list[tuple[int, str, str]], Any]:  # fmt: skip
        h = self.h
        args = TakeArgs(consumer, count, age_ms, park_max)
        reply = h.run(layout.take(h.c, h.k, "worker", args, self.queues))
        flat = reply[0]
        got = [(int(flat[j + 1]), flat[j + 2], flat[j + 3]) for j in range(0, len(flat), 4)]
        return got, reply

    def start(self, got: list[tuple[int, str, str]], consumer: str = "w1") -> list[Any]:
        h = self.h
        items = [(h.tk(t, priority=p), Entry(e)) for p, e, t in got]
        args = StartArgs(consumer, 30_000, "n1", "q")
        out: list[Any] = h.run(layout.start(h.c, h.k, "worker", args, items))
        return out

    def complete(self, t: str, lease: str) -> Any:
        return self.h.finish(t, "COMPLETE", lease, '"ok"')

    def running(self) -> dict[str, str]:
        return self.h.r.hgetall(self.h.k.running)

    def waiting(self) -> list[str]:
        return self.h.r.zrange(self.h.k.parked("q"), 0, -1)


def test_a_priority_task_waits_on_its_levels_stream_and_is_taken_first() -> None:
    p = Pool()
    low = [p.add(n) for n in range(3)]
    high = p.add(9, priority=9)
    h = p.h
    assert h.r.xlen(h.k.queue("q")) == 3 and h.r.xlen(h.k.queue("q", 9)) == 1
    assert h.task(high)["priority"] == "9" and "priority" not in h.task(low[0])
    # (the ENQUEUE entry says so; a priority-0 task's says nothing)
    assert h.history(high)[0].extra == {"pr": "9"} and h.history(low[0])[0].extra == {}
    got, _ = p.take(2)
    assert [t for _, _, t in got] == [high, low[0]]
    started = p.start(got)
    assert [s[0] for s in started] == [1, 1]
    # the queue keys of another level are refused, for the whole batch, writing nothing
    before = h.snapshot()
    items = [(h.tk(low[1]), Entry("1-1")), (h.tk(high, priority=0), Entry("1-2"))]
    with pytest.raises(redis.ResponseError, match="not the stream of"):
        h.run(layout.start(h.c, h.k, "worker", StartArgs("w1", 30_000, "n1", "q"), items))
    assert h.snapshot() == before


def test_aging_takes_an_old_low_priority_task_before_newer_high_ones() -> None:
    """Effective priority = level + one per age_ms waited: a priority-0 task queued 30 ms
    before a priority-5 one goes first with 1 ms periods (0 + 30 > 5 + 0), second
    without aging."""

    for age_ms, first in ((1, "old"), (0, "new")):
        p = Pool()
        old = p.add(1)
        p.h.advance(30)
        new = p.add(2, priority=5)
        got, _ = p.take(1, age_ms=age_ms)
        assert [t for _, _, t in got] == [old if first == "old" else new]


@pytest.mark.parametrize("queues", [("q",), ("q", "q2")], ids=["short way", "long way"])
def test_a_parked_task_that_waited_long_goes_before_newer_higher_ones(
    queues: tuple[str, ...],
) -> None:
    """Aging counts for parked tasks too: alice's priority-0 task, parked on her limit 30 ms
    before bob's priority-5 task was queued, goes first with 1 ms periods once she has room
    (its entry stays on its stream, whose oldest entry the short way checks: the call
    goes the long way, which orders by effective priority), second without aging."""

    for age_ms, first in ((1, "alice"), (0, "bob")):
        p = Pool(queues)
        p.h.r.hset(p.h.k.limits, "c|q|alice", 1)
        alice = [p.add(n, owner="alice") for n in range(2)]
        got, _ = p.take(2)
        assert [t for _, _, t in got] == [alice[0]] and len(p.waiting()) == 1
        started = p.start(got)
        assert p.complete(alice[0], started[0][5]) == [1, "SUCCEEDED"]
        p.h.advance(30)
        bob = p.add(10, priority=5, owner="bob")
        got, _ = p.take(1, age_ms=age_ms)
        assert [t for _, _, t in got] == [alice[1] if first == "alice" else bob]


def test_an_owner_at_its_limit_is_passed_over_and_its_tasks_parked() -> None:
    p = Pool(c__q__X="2")  # c|q|*: 2 running tasks of each owner
    p.h.r.hdel(p.h.k.limits, "c|q|X")
    p.h.r.hset(p.h.k.limits, "c|q|*", 2)
    alice = [p.add(n, owner="alice") for n in range(6)]
    bob = [p.add(10 + n, owner="bob") for n in range(2)]
    got, reply = p.take(4)
    # two of alice's, then past her others to bob's: no head-of-line blocking
    assert [t for _, _, t in got] == [alice[0], alice[1], bob[0], bob[1]]
    assert reply[5] == 1  # an owner's limit held something back
    # alice's four passed over before bob's are parked, held by ~waiting, PENDING
    parked = p.waiting()
    assert len(parked) == 4 and all(m.startswith("alice|") for m in parked)
    pend = p.h.r.xpending_range(p.h.k.queue("q"), "workers", "-", "+", 100)
    held = [r for r in pend if r["consumer"] == WAITING_CONSUMER]
    assert len(held) == 4
    assert all(p.h.task(t)["state"] == "PENDING" for t in alice[2:])
    assert all(len(p.h.history(t)) == 1 for t in alice[2:])  # nothing recorded
    # taken ones count as claims until started: a second worker gets nothing of theirs
    got2, _ = p.take(4, consumer="w2")
    assert got2 == []
    started = p.start(got)
    assert [s[0] for s in started] == [1, 1, 1, 1]
    assert p.running() == {"q|alice": "2", "q|bob": "2"}
    assert p.h.r.hgetall(p.h.k.claims("q")) == {}
    # alice's slot frees: her oldest parked task is handed out next
    lease = started[0][5]
    assert p.complete(alice[0], lease) == [1, "SUCCEEDED"]
    assert p.running() == {"q|alice": "1", "q|bob": "2"}
    assert p.h.r.xlen(p.h.k.wake) == 1  # idle workers hear of it
    got3, _ = p.take(4)
    assert [t for _, _, t in got3] == [alice[2]]
    assert len(p.waiting()) == 3
    assert p.start(got3)[0][0] == 1


def test_start_parks_a_task_over_its_owners_limit_and_records_nothing() -> None:
    p = Pool()
    a, b = p.add(1, owner="alice"), p.add(2, owner="alice")
    (e1, e2) = p.h.deliver()  # (delivered without take.lua: start.lua decides alone)
    p.h.r.hset(p.h.k.limits, "c|q|alice", 1)
    out = p.start([(0, e1, a), (0, e2, b)])
    assert out[0][0] == 1 and out[1] == [-7, "PENDING"]
    assert p.waiting() == [f"alice|9{int(e2.split('-')[0]):013d}-{int(e2.split('-')[1]):010d}|{b}"]
    assert len(p.h.history(b)) == 1
    # a larger limit at run time: handed out by the next take
    p.h.r.hset(p.h.k.limits, "c|q|alice", 5)
    got, _ = p.take(4)
    assert [t for _, _, t in got] == [b]


def test_a_rate_limit_reserves_start_times_one_interval_apart() -> None:
    p = Pool()
    p.h.r.hset(p.h.k.limits, "r|q|img", "10 1")  # 10/s, burst 1: 100 ms apart
    ts = [p.add(n) for n in range(4)]
    entries = p.h.deliver()
    out = p.start([(0, e, t) for e, t in zip(entries, ts, strict=True)])
    assert out[0][0] == 1 and [o[0] for o in out[1:]] == [-8, -8, -8]
    due = [int(p.h.task(t)["rt"]) for t in ts[1:]]
    assert due[1] - due[0] == 100 and due[2] - due[1] == 100
    zs = p.h.r.zrange(p.h.k.throttled("q"), 0, -1, withscores=True)
    assert [int(s) for _, s in zs] == due
    # nothing is due yet: the next take says when
    got, reply = p.take(4)
    assert got == [] and reply[2] == due[0]
    # its time come, it starts on its reservation (no second token drawn)
    p.h.r.zadd(p.h.k.throttled("q"), {zs[0][0]: 0})
    p.h.r.hset(p.h.k.task(ts[1]), "rt", 1)
    got, _ = p.take(4)
    assert [t for _, _, t in got] == [ts[1]]
    assert p.start(got)[0][0] == 1 and "rt" not in p.h.task(ts[1])


def test_the_running_counts_follow_every_exit_and_the_recount_repairs_them() -> None:
    p = Pool()
    a, b = p.add(1, owner="alice"), p.add(2, owner="alice")
    got, _ = p.take(2)
    started = p.start(got)
    assert p.running() == {"q|alice": "2"}
    assert p.h.control(a, "CANCEL")[0] == 1
    assert p.running() == {"q|alice": "1"}
    # a count left wrong (a RUNNING task's hash deleted by hand): the recount heals it
    p.h.r.delete(p.h.k.task(b))
    assert p.running() == {"q|alice": "1"}
    h = p.h
    pend = h.r.xpending_range(h.k.queue("q"), "workers", "-", "+", 100)
    items = [(h.tk(tid(2)), Entry(r["message_id"])) for r in pend]
    assert h.run(layout.recount(h.c, h.k, "reaper", "q", items)) == [1, 1]
    assert p.running() == {}
    # a recount that does not name every pending entry writes nothing
    c = p.add(3, owner="alice")
    got, _ = p.take(1)
    p.start(got)
    h.r.hset(h.k.running, "q|alice", 7)
    before = h.snapshot()
    assert h.run(layout.recount(h.c, h.k, "reaper", "q", [])) == [0, 0]
    assert h.snapshot() == before
    pend = h.r.xpending_range(h.k.queue("q"), "workers", "-", "+", 100)
    items = [(h.tk(c if r["message_id"] == got[0][1] else tid(2)), Entry(r["message_id"]))
             for r in pend]  # fmt: skip
    assert h.run(layout.recount(h.c, h.k, "reaper", "q", items)) == [1, 1]
    assert p.running() == {"q|alice": "1"}
    assert started  # (the first two started)


@pytest.mark.parametrize(
    "options",
    [{"priority": -1}, {"priority": 10}, {"priority": 1.5}, {"priority": "3"}, {"priority": True}],
)
def test_enqueue_refuses_a_bad_priority_mid_batch_and_writes_nothing(
    options: dict[str, Any],
) -> None:
    import msgspec

    from rsjobs.store.layout import NewTask, task_options

    h = LuaHarness()
    h.enqueue(tid(1))
    before = h.snapshot()
    good = NewTask(tid(2), "img", "q", "{}", task_options(max_attempts=3, backoff_base_ms=0,
                                                          backoff_max_ms=0))  # fmt: skip
    raw = msgspec.json.decode(good.options)
    raw.update(options)
    bad = good._replace(id=tid(3), options=msgspec.json.encode(raw))
    call = layout.enqueue(h.c, "api", [(h.tk(tid(2)), good), (h.tk(tid(3)), bad)])
    with pytest.raises(redis.ResponseError, match="priority"):
        h.run(call)
    assert h.snapshot() == before


def test_take_refuses_bad_arguments_and_the_waiting_consumers_name() -> None:
    h = LuaHarness()
    h.enqueue(tid(1))
    before = h.snapshot()
    for args in (TakeArgs(WAITING_CONSUMER, 1, 0, 1), TakeArgs("w1", 0, 0, 1),
                 TakeArgs("w1", 1, -1, 1), TakeArgs("w1", 1, 0, 0), TakeArgs("", 1, 0, 1)):  # fmt: skip
        with pytest.raises(redis.ResponseError, match="invalid"):
            h.run(layout.take(h.c, h.k, "worker", args, ["q"]))
    assert h.snapshot() == before
    with pytest.raises(redis.ResponseError, match="consumer"):
        h.run(layout.start(h.c, h.k, "worker", StartArgs(WAITING_CONSUMER, 1000, "n", "q"), []))


def test_members_name_the_tasks_level() -> None:
    h = LuaHarness()
    h.enqueue(tid(1), priority=4, delay_ms=60_000)
    assert h.r.zrange(h.k.scheduled, 0, -1) == [member("q", tid(1), 4)] == [f"q|p4:{tid(1)}"]
    assert h.control(tid(1), "PAUSE")[0] == 1
    assert h.r.zrange(h.k.paused_tasks, 0, -1) == [f"q|p4:{tid(1)}"]
    assert h.control(tid(1), "RESUME")[0] == 1
    # back on its level's stream, with its owner-less entry
    assert h.r.xlen(h.k.queue("q", 4)) == 1 and h.r.xlen(h.k.queue("q")) == 0


def test_an_ended_attempts_entry_of_another_level_is_refused() -> None:
    p = Pool()
    t = p.add(1, priority=3)
    got, _ = p.take(1)
    lease = p.start(got)[0][5]
    h = p.h
    before = h.snapshot()
    end = Ending("COMPLETE", lease, '"x"', "", 0, -1, 0.5)
    with pytest.raises(redis.ResponseError, match="not the stream of"):
        h.run(layout.finish(h.c, h.k, "worker", [(h.tk(t, priority=0), end)]))
    assert h.snapshot() == before
    assert h.run(layout.finish(h.c, h.k, "worker", [(h.tk(t), end)]))[0][0] == 1


def test_levels_are_taken_highest_first_in_one_call_and_blocked_entries_parked() -> None:
    """Fresh entries on several levels (no aging due yet): one call takes the highest
    level's run, then the next level's, delivering each straight; an owner at its limit
    has its entries parked on the way, in their order."""
    p = Pool()
    p.h.r.hset(p.h.k.limits, "c|q|alice", 1)
    low = [p.add(n) for n in range(2)]
    mid = [p.add(10 + n, priority=4, owner="alice") for n in range(3)]
    top = [p.add(20 + n, priority=8) for n in range(2)]
    got, reply = p.take(5, age_ms=60_000)
    assert [(pr, t) for pr, _, t in got] == [
        (8, top[0]), (8, top[1]), (4, mid[0]), (0, low[0]), (0, low[1])
    ]  # fmt: skip
    assert reply[5] == 1  # alice's limit held her others back
    assert len(p.waiting()) == 2 and all(m.startswith("alice|5") for m in p.waiting())
    assert all(len(p.h.history(t)) == 1 for t in mid[1:])
    # nothing left on the streams; alice's parked ones wait for her slot
    got2, _ = p.take(5, age_ms=60_000)
    assert got2 == []


@pytest.mark.parametrize("queues", [("q",), ("q", "q2")], ids=["short way", "long way"])
def test_a_parked_task_that_moved_on_is_passed_over_and_its_member_dropped(
    queues: tuple[str, ...],
) -> None:
    """A waiting member whose entry is no longer held (its task was cancelled meanwhile)
    is not handed out: the call hands out the owner's next parked task instead, and the
    stale member leaves the zset; the same whichever way take.lua goes."""
    p = Pool(queues)
    p.h.r.hset(p.h.k.limits, "c|q|alice", 1)
    alice = [p.add(n, owner="alice") for n in range(3)]
    p.add(9, priority=2)  # (a second level)
    got, _ = p.take(4)
    assert [t for _, _, t in got][:2] == [tid(9), alice[0]]
    assert len(p.waiting()) == 2
    started = p.start(got)
    assert p.h.control(alice[1], "CANCEL")[0] == 1  # parked, then cancelled
    assert p.complete(alice[0], started[1][5]) == [1, "SUCCEEDED"]
    # (alice's room went to the stale member: nothing handed out, and `more`)
    got2, reply = p.take(4)
    assert got2 == [] and reply[3] == 1
    assert len(p.waiting()) == 1 and p.h.r.hgetall(p.h.k.claims("q")) == {}
    got3, _ = p.take(4)
    assert [t for _, _, t in got3] == [alice[2]]
    assert p.waiting() == []
    assert p.start(got3)[0][0] == 1


def _claims(p: Pool, consumer: str = "w1") -> dict[str, tuple[int, int]]:
    """A worker's claims on queue q: owner -> (count, expiry ms)."""
    raw = p.h.r.hget(p.h.k.claims("q"), consumer) or ""
    out = {}
    for part in raw.split()[1:]:
        owner, _, rest = part.partition("=")
        n, _, exp = rest.partition(":")
        out[owner] = (int(n), int(exp))
    return out


def test_a_claim_is_not_kept_alive_by_later_takes() -> None:
    """A task handed out and never started (its take's reply lost, then it was cancelled:
    no START comes for it) keeps its owner's claim only until the claim expires: later
    takes of the same worker hand out other owners' tasks without moving that expiry on
    (they used to rewrite it, holding the owner's slot for as long as the worker took)."""
    p = Pool()
    p.h.r.hset(p.h.k.limits, "c|q|*", 1)
    bob = p.add(1, owner="bob")
    got, _ = p.take(1)
    assert [t for _, _, t in got] == [bob]
    ((count, first_exp),) = _claims(p).values()
    assert count == 1
    assert p.h.control(bob, "CANCEL")[:2] == [1, "CANCELLED"]  # (its entry is dropped)
    p.add(2, owner="bob")
    alice = p.add(3, owner="alice")
    got2, _ = p.take(2)
    # bob's claim still counts (it has not expired): only alice's task is handed out
    assert [t for _, _, t in got2] == [alice]
    claims = _claims(p)
    assert claims["bob"] == (1, first_exp)  # not moved on
    assert claims["alice"][0] == 1 and claims["alice"][1] >= first_exp
    # once it has expired, the next take drops it and bob's task goes
    raw = p.h.r.hget(p.h.k.claims("q"), "w1")
    p.h.r.hset(p.h.k.claims("q"), "w1", raw.replace(f"bob=1:{first_exp}", "bob=1:1"))
    got3, _ = p.take(2)
    assert [t for _, _, t in got3] == [tid(2)]
    assert _claims(p)["bob"][0] == 1


def test_start_of_a_task_gone_since_its_take_ends_its_owners_claim() -> None:
    """A task handed out whose hash is gone by its START (answered -1): the claim of its
    owner ends there too (start.lua reads the owner from the work entry)."""
    p = Pool()
    p.h.r.hset(p.h.k.limits, "c|q|*", 1)
    bob = p.add(1, owner="bob")
    got, _ = p.take(1)
    assert _claims(p)["bob"][0] == 1
    p.h.r.delete(p.h.k.task(bob))
    assert p.start(got) == [[-1]]
    assert p.h.r.hgetall(p.h.k.claims("q")) == {}
    p.add(2, owner="bob")
    got2, _ = p.take(1)
    assert [t for _, _, t in got2] == [tid(2)]
