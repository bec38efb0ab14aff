"""The Lua tier (fakeredis, through the store's packers): what the transition scripts write
to the hook stream, the claim of due hook retries, and the firing of a schedule's tick."""

from __future__ import annotations

import msgspec
import pytest
from redis.exceptions import ResponseError

from rsjobs.schedules import Schedule
from rsjobs.schemas import EnqueueRequest
from rsjobs.store import layout
from rsjobs.store.layout import HooksDueArgs, NewTask, ScheduleArgs, task_options
from tests.support.lua import LuaHarness


def _hook_rows(h: LuaHarness) -> list[dict[str, str]]:
    return [f for _, f in h.r.xrange(h.k.hooks)]


def test_no_listener_no_hook_entry() -> None:
    h = LuaHarness()
    h.enqueue("a")
    h.control("a", "CANCEL")
    assert not h.r.exists(h.k.hooks)


def test_a_listener_gets_the_changes_to_its_states_only() -> None:
    h = LuaHarness()
    h.r.hset(h.k.hooks_on, "hook:x", "PENDING,CANCELLED")
    h.r.hset(h.k.hooks_on, "webhook:y", "PAUSED")
    h.enqueue("a")
    h.control("a", "PAUSE")
    h.control("a", "PAUSE")  # a refusal: no change of state, no entry
    h.control("a", "RESUME")
    h.control("a", "CANCEL")
    rows = _hook_rows(h)
    assert [(r["id"], r["s"], r["e"]) for r in rows] == [
        ("a", "PENDING", "ENQUEUE"),
        ("a", "PAUSED", "PAUSE"),
        ("a", "PENDING", "RESUME"),
        ("a", "CANCELLED", "CANCEL"),
    ]
    # each names the history entry of its change
    hist = h.history("a")
    by_id = {e.id: e for e in hist}
    for r in rows:
        assert by_id[r["hid"]].to_state == r["s"]


def test_the_wildcard_listens_for_every_state() -> None:
    h = LuaHarness()
    h.r.hset(h.k.hooks_on, "hook:all", "*")
    h.enqueue("a")
    h.control("a", "CANCEL")
    assert [r["s"] for r in _hook_rows(h)] == ["PENDING", "CANCELLED"]


def test_due_retries_are_claimed_once_until_the_claim_ends() -> None:
    h = LuaHarness()
    now = int(h.r.time()[0]) * 1000
    h.r.zadd(h.k.hooks_retry, {"due1": now - 10, "due2": now - 5, "later": now + 60_000})
    call = layout.hooks_due(h.c, h.k, "hooks", HooksDueArgs(10, 30_000))
    assert h.run(call) == ["due1", "due2"]
    assert h.run(call) == []  # claimed: no other runner takes them
    assert h.r.zscore(h.k.hooks_retry, "due1") >= now + 29_000
    with pytest.raises(ResponseError, match="invalid most"):
        h.run(layout.hooks_due(h.c, h.k, "hooks", HooksDueArgs(0, 30_000)))


def _tick(
    h: LuaHarness, settings: str, due: int, nxt: int, tid: str, skipped: int = 0
) -> list[object]:
    task = NewTask(
        tid,
        "tick",
        "q",
        "null",
        task_options(max_attempts=3, backoff_base_ms=1000, backoff_max_ms=300_000),
    )
    call = layout.schedule(
        h.c, h.k, "reaper", ScheduleArgs("s", settings, due, nxt, skipped), h.tk(tid), task
    )
    result: list[object] = h.run(call)
    return result


def test_a_tick_fires_once_and_moves_the_schedule() -> None:
    h = LuaHarness()
    s = msgspec.json.encode(
        Schedule(name="s", every_ms=1000, task=EnqueueRequest(type="tick"))
    ).decode()
    h.r.hset(h.k.schedules, "s", s)
    h.r.zadd(h.k.schedules_due, {"s": 5000})
    assert _tick(h, s, 5000, 6000, "t1", skipped=2) == [1, "t1"]
    assert _tick(h, s, 5000, 6000, "t2") == [0, ""]  # the same tick again: nothing
    assert not h.r.exists(h.k.task("t2"))
    assert h.r.zscore(h.k.schedules_due, "s") == 6000
    assert h.record("t1").state == "PENDING"
    assert h.history("t1")[0].message == "schedule s tick 5000"
    assert h.r.hget(h.k.schedules_log, "s:fired") == "1"
    assert h.r.hget(h.k.schedules_log, "s:skipped") == "2"
    # settings replaced since they were read: not this caller's tick
    assert _tick(h, s.replace("1000", "2000"), 6000, 7000, "t3") == [0, ""]
    assert not h.r.exists(h.k.task("t3"))


def test_a_malformed_tick_is_refused_before_any_write() -> None:
    h = LuaHarness()
    s = '{"x":1}'
    h.r.hset(h.k.schedules, "s", s)
    h.r.zadd(h.k.schedules_due, {"s": 5000})
    before = h.snapshot()
    with pytest.raises(ResponseError, match="invalid next"):
        _tick(h, s, 5000, 5000, "t1")
    assert h.snapshot() == before
