"""take.lua against a Python model of what a take hands out, on a real Redis (hypothesis).

The model: a take of ``count`` hands out the PENDING tasks of the queue by priority
(highest first), oldest first within a level, passing over those whose owner has as many
tasks RUNNING as its limit allows, until it has ``count``. Programs of enqueues (owners with
and without limits, priorities 0, 4 and 9), takes (each start at once, as a worker does),
completions and limit changes at run time are run twice: taking from the queue alone (the
short way, which hands out parked tasks before their level's new entries) and from it and a
second, empty queue (the long way, which merges every source by effective priority); both
must hand out exactly the model's tasks, highest level first, and keep the RUNNING counts,
the parked list and the entries held for it true.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis as sync_redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rsjobs.server import EmbeddedRedis
from rsjobs.store import layout
from rsjobs.store.keys import GROUP, WAITING_CONSUMER
from rsjobs.store.layout import Entry, StartArgs, TakeArgs
from tests.support.lua import LuaHarness

pytestmark = pytest.mark.integration

OWNERS = ("alice", "bob", "carol", "")  # ("": a task without an owner has no limit)
LEVELS = (0, 4, 9)

steps = st.lists(
    st.one_of(
        st.tuples(st.just("enqueue"), st.sampled_from(OWNERS), st.sampled_from(LEVELS)),
        st.tuples(st.just("take"), st.integers(1, 6)),
        st.tuples(st.just("complete"), st.integers(0, 50)),
        st.tuples(st.just("limit"), st.sampled_from(OWNERS[:3]), st.sampled_from((None, 1, 2, 3))),
    ),
    min_size=5,
    max_size=40,
)


@dataclass
class Model:
    default_limit: int
    limits: dict[str, int | None] = field(default_factory=dict)
    #: PENDING tasks: id -> (priority, enqueue order, owner)
    pending: dict[str, tuple[int, int, str]] = field(default_factory=dict)
    #: RUNNING tasks: id -> owner
    running: dict[str, str] = field(default_factory=dict)

    def limit(self, owner: str) -> int | None:
        if owner == "":
            return None
        return self.limits.get(owner, self.default_limit)

    def running_of(self, owner: str) -> int:
        return sum(1 for o in self.running.values() if o == owner)

    def take(self, count: int) -> list[str]:
        room: dict[str, float] = {}
        out: list[str] = []
        for tid, (_, _, owner) in sorted(
            self.pending.items(), key=lambda kv: (-kv[1][0], kv[1][1])
        ):
            if len(out) == count:
                break
            if owner not in room:
                limit = self.limit(owner)
                room[owner] = float("inf") if limit is None else limit - self.running_of(owner)
            if room[owner] > 0:
                room[owner] -= 1
                out.append(tid)
        return out


def _take(h: LuaHarness, count: int, queues: list[str]) -> tuple[list[tuple[int, str, str]], Any]:
    reply = h.run(layout.take(h.c, h.k, "worker", TakeArgs("w1", count, 0, 256), queues))
    flat = reply[0]
    return [(int(flat[j + 1]), flat[j + 2], flat[j + 3]) for j in range(0, len(flat), 4)], reply


def _check_keys(h: LuaHarness, m: Model) -> None:
    """The RUNNING counts, the parked list and the entries held for it are true."""
    want = {}
    for owner in OWNERS[:3]:
        n = m.running_of(owner)
        if n:
            want[f"q|{owner}"] = str(n)
    assert h.r.hgetall(h.k.running) == want
    parked = h.r.zrange(h.k.parked("q"), 0, -1)
    ids = [p.rsplit("|", 1)[1] for p in parked]
    assert set(ids) <= set(m.pending), "a parked member of a task that is not PENDING"
    held = 0
    for p in LEVELS:
        stream = h.k.queue("q", p)
        groups = [g["name"] for g in h.r.xinfo_groups(stream)] if h.r.exists(stream) else []
        if GROUP in groups:  # (take.lua makes the group of a stream it reads first)
            consumers = h.r.xpending(stream, GROUP)["consumers"]
            held += sum(c["pending"] for c in consumers if c["name"] == WAITING_CONSUMER)
    assert held == len(ids)
    assert h.r.hgetall(h.k.claims("q")) == {}  # every take's tasks were started


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(program=steps, default_limit=st.integers(1, 3), two_queues=st.booleans())
# a parked task handed out once its owner has room again
@example(
    program=[("enqueue", "alice", 0)] * 2 + [("take", 2), ("complete", 0), ("take", 1)],
    default_limit=1,
    two_queues=False,
)
# ... but not when a newer task of a higher level of the same owner took that room
@example(
    program=[("enqueue", "alice", 0)] * 2
    + [("take", 2), ("complete", 0), ("enqueue", "alice", 9), ("take", 2)],
    default_limit=1,
    two_queues=False,
)
def test_take_hands_out_what_the_model_says(
    redis_server: EmbeddedRedis,
    program: list[tuple[Any, ...]],
    default_limit: int,
    two_queues: bool,
) -> None:
    r = sync_redis.Redis.from_url(redis_server.url, decode_responses=True)
    r.flushall()
    h = LuaHarness(redis=r)
    h.group()
    h.r.hset(h.k.limits, "c|q|*", default_limit)
    m = Model(default_limit)
    queues = ["q", "q2"] if two_queues else ["q"]
    ids = (f"{n:032x}" for n in itertools.count(1))
    order = itertools.count()
    leases: dict[str, str] = {}
    try:
        for step in program:
            if step[0] == "enqueue":
                _, owner, p = step
                tid = next(ids)
                assert h.enqueue(tid, owner=owner or None, priority=p)[2] == 0
                m.pending[tid] = (p, next(order), owner)
            elif step[0] == "take":
                count = step[1]
                expected = m.take(count)
                got, reply = _take(h, count, queues)
                handed = [t for _, _, t in got]
                assert sorted(handed) == sorted(expected), (handed, expected)
                levels = [p for p, _, _ in got]
                assert levels == sorted(levels, reverse=True)
                assert reply[3] == 0  # nothing stale, no bound reached: no `more`
                if got:
                    items = [(h.tk(t), Entry(e)) for _, e, t in got]
                    started = h.run(
                        layout.start(h.c, h.k, "worker", StartArgs("w1", 30_000, "n1", "q"), items)
                    )
                    assert [s[0] for s in started] == [1] * len(got)
                    for s in started:
                        leases[s[1]] = s[5]
                        m.running[s[1]] = m.pending.pop(s[1])[2]
            elif step[0] == "complete":
                if m.running:
                    tid = sorted(m.running)[step[1] % len(m.running)]
                    assert h.finish(tid, "COMPLETE", leases[tid], '"ok"') == [1, "SUCCEEDED"]
                    del m.running[tid]
            else:
                _, owner, limit = step
                if limit is None:
                    h.r.hdel(h.k.limits, f"c|q|{owner}")
                    m.limits.pop(owner, None)
                else:
                    h.r.hset(h.k.limits, f"c|q|{owner}", limit)
                    m.limits[owner] = limit
            _check_keys(h, m)
        # in the end, taking enough drains every PENDING task the limits allow
        while True:
            expected = m.take(50)
            got, _ = _take(h, 50, queues)
            assert sorted(t for _, _, t in got) == sorted(expected)
            if not got:
                break
            items = [(h.tk(t), Entry(e)) for _, e, t in got]
            h.run(layout.start(h.c, h.k, "worker", StartArgs("w1", 30_000, "n1", "q"), items))
            for _, _, t in got:
                m.running[t] = m.pending.pop(t)[2]
        _check_keys(h, m)
    finally:
        r.close()
