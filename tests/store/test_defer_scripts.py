"""defer.lua, resolve.lua, poll.lua and the DEFERRED branch of deadline.lua on fakeredis:
a deferred attempt frees its work entry and lease, an outside result is fenced by attempt
and external id, a repeat of it writes nothing, a late one is refused and recorded, the
longest wait times it out through the retry policy, polls are claimed atomically."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from rsjobs.store import layout
from rsjobs.store.keys import GROUP
from rsjobs.store.layout import DeadlineArgs, DeadlineItem, DeferArgs, PollArgs, ResolveArgs
from tests.support.lua import LuaHarness

A, B = "a" * 32, "b" * 32


def _running(h: LuaHarness, tid: str = A, **kw: Any) -> str:
    h.group()
    h.enqueue(tid, **kw)
    entry = h.deliver()[-1]
    started = h.start(tid, entry)
    assert started[0] == 1
    return str(started[5])


def _defer(
    h: LuaHarness, lease: str, tid: str = A, ext: str = "prov-1", wait: int = 60_000, poll: int = 0
) -> Any:
    args = DeferArgs(lease, ext, "gen", wait, poll, "")
    return h.run(layout.defer(h.c, h.k, "worker", h.tk(tid), h.k.external("gen", ext), args))


def _resolve(
    h: LuaHarness,
    event: str,
    tid: str = A,
    *,
    attempt: int | str = "",
    ext: str = "",
    body: str = '"done"',
    via: str = "callback",
    retryable: bool = True,
) -> Any:
    args = ResolveArgs(event, attempt, ext, body, "ProviderError", int(retryable), 0.5, via)
    xkey = h.k.external("gen", ext or "prov-1")
    return h.run(layout.resolve(h.c, h.k, "api", h.tk(tid), xkey, args))


def _sweep(h: LuaHarness, tid: str = A) -> Any:
    item = DeadlineItem(f"q:{tid}", 0.5)
    return h.run(layout.deadline(h.c, "reaper", DeadlineArgs(0), [(h.tk(tid), item)]))


def test_defer_frees_the_entry_and_the_lease_and_maps_the_external_id() -> None:
    h = LuaHarness()
    lease = _running(h)
    assert _defer(h, lease) == [1, "DEFERRED"]
    t = h.task(A)
    assert t["state"] == "DEFERRED" and t["external_id"] == "prov-1" and t["provider"] == "gen"
    for gone in ("entry", "lease_expires_at", "consumer", "deadline_at"):
        assert gone not in t, gone
    # the work entry is acked and deleted: nothing pending for any reaper to reclaim
    assert h.r.xpending(h.k.queue("q"), GROUP)["pending"] == 0
    assert h.r.xlen(h.k.queue("q")) == 0
    assert h.r.get(h.k.external("gen", "prov-1")) == f"1 q {A}"
    assert h.r.zscore(h.k.deadlines, f"q:{A}") == int(t["wait_until"])
    assert h.r.hget(h.k.stats, "q:DEFERRED") == "1" and h.r.hget(h.k.stats, "q:RUNNING") == "0"
    last = h.history(A)[-1]
    assert (last.event, last.to_state) == ("DEFER", "DEFERRED")
    # a repeat (lost reply) answers the same and writes nothing
    before = h.snapshot()
    assert _defer(h, lease) == [2, "DEFERRED"]
    assert h.snapshot() == before


def test_defer_from_a_lost_lease_is_refused() -> None:
    h = LuaHarness()
    lease = _running(h)
    assert _defer(h, "9:other") == [-3, "RUNNING"]
    assert h.task(A)["state"] == "RUNNING" and h.history(A)[-1].rejected
    assert _defer(h, lease) == [1, "DEFERRED"]


def test_an_external_id_waited_on_by_another_task_is_refused() -> None:
    h = LuaHarness()
    _defer(h, _running(h, A))
    lease_b = _running(h, B)
    assert _defer(h, lease_b, tid=B) == [-6, "RUNNING"]
    assert h.r.get(h.k.external("gen", "prov-1")) == f"1 q {A}"


@pytest.mark.parametrize(
    "bad",
    [
        DeferArgs("1:n", "", "gen", 1000, 0, ""),
        DeferArgs("1:n", "has space", "gen", 1000, 0, ""),
        DeferArgs("1:n", "x" * 201, "gen", 1000, 0, ""),
        DeferArgs("1:n", "ok", "bad/provider", 1000, 0, ""),
        DeferArgs("1:n", "ok", "gen", 0, 0, ""),
        DeferArgs("1:n", "ok", "gen", "-5", 0, ""),
        DeferArgs("1:n", "ok", "gen", 1000, "x", ""),
    ],
)
def test_malformed_defer_writes_nothing(bad: DeferArgs) -> None:
    h = LuaHarness()
    _running(h)
    before = h.snapshot()
    with pytest.raises(redis.ResponseError, match="rsjobs: invalid"):
        h.run(layout.defer(h.c, h.k, "worker", h.tk(A), h.k.external("gen", "ok"), bad))
    assert h.snapshot() == before


def test_a_callback_completes_once_and_a_repeat_writes_nothing() -> None:
    h = LuaHarness()
    _defer(h, _running(h))
    assert _resolve(h, "COMPLETE", attempt=1) == [1, "SUCCEEDED"]
    t = h.task(A)
    assert t["result"] == '"done"' and t["resolved"] == "1C"
    assert "wait_until" not in t and h.r.zscore(h.k.deadlines, f"q:{A}") is None
    assert h.history(A)[-1].event == "COMPLETE"
    before = h.snapshot()
    assert _resolve(h, "COMPLETE", attempt=1) == [2, "SUCCEEDED"]
    assert _resolve(h, "COMPLETE", ext="prov-1") == [2, "SUCCEEDED"]
    assert h.snapshot() == before
    # another result for that attempt is refused and recorded, once (coalesced)
    assert _resolve(h, "FAIL", attempt=1) == [-2, "SUCCEEDED"]
    n = len(h.history(A))
    assert h.history(A)[-1].rejected
    assert _resolve(h, "FAIL", attempt=1) == [-2, "SUCCEEDED"]
    assert len(h.history(A)) == n


def test_a_failure_follows_the_retry_policy_and_the_old_attempt_is_fenced() -> None:
    h = LuaHarness()
    _defer(h, _running(h, max_attempts=2))
    assert _resolve(h, "FAIL", attempt=1, body="provider said no") == [1, "SCHEDULED"]
    t = h.task(A)
    assert t["failures"] == "1" and t["error"] == "provider said no"
    # promoted, started again (attempt 2) and deferred on another outside job
    h.r.zadd(h.k.scheduled, {f"q:{A}": 0})
    h.promote()
    entry = h.deliver()[-1]
    started = h.start(A, entry)
    assert started[4] == 2
    assert _defer(h, str(started[5]), ext="prov-2") == [1, "DEFERRED"]
    # a late result of attempt 1 (by attempt or by its external id) is refused and
    # recorded; attempt 2's wait is untouched
    assert _resolve(h, "COMPLETE", attempt=1) == [-3, "DEFERRED"]
    assert _resolve(h, "COMPLETE", ext="prov-1") == [-3, "DEFERRED"]
    assert h.task(A)["state"] == "DEFERRED" and h.history(A)[-1].rejected
    assert _resolve(h, "COMPLETE", ext="prov-2") == [1, "SUCCEEDED"]


def test_the_longest_wait_times_out_and_a_later_result_is_refused() -> None:
    h = LuaHarness()
    _defer(h, _running(h, max_attempts=1), wait=1)
    h.r.zadd(h.k.deadlines, {f"q:{A}": 0})
    h.advance(10)
    assert _sweep(h) == ["TIMED_OUT"]
    t = h.task(A)
    assert t["state"] == "TIMED_OUT" and t["error_type"] == "DeferTimeout"
    assert "longest wait passed" in t["error"]
    before_len = len(h.history(A))
    assert _resolve(h, "COMPLETE", attempt=1) == [-2, "TIMED_OUT"]
    last = h.history(A)[-1]
    assert last.rejected and "task is TIMED_OUT" in (last.message or "")
    assert len(h.history(A)) == before_len + 1
    assert "result" not in h.task(A)


def test_a_wait_not_over_is_rescored() -> None:
    h = LuaHarness()
    _defer(h, _running(h), wait=60_000)
    h.r.zadd(h.k.deadlines, {f"q:{A}": 0})
    assert _sweep(h) == ["LATER"]
    assert h.r.zscore(h.k.deadlines, f"q:{A}") == int(h.task(A)["wait_until"])


def test_cancel_of_a_deferred_task_and_pause_refused() -> None:
    h = LuaHarness()
    _defer(h, _running(h))
    assert h.control(A, "PAUSE") == [-2, "DEFERRED"]
    assert h.control(A, "CANCEL") == [1, "CANCELLED"]
    assert h.r.zscore(h.k.deadlines, f"q:{A}") is None
    assert _resolve(h, "COMPLETE", attempt=1) == [-2, "CANCELLED"]
    assert "result" not in h.task(A)


def test_polls_are_claimed_once_and_rescheduled() -> None:
    h = LuaHarness()
    _defer(h, _running(h), poll=1)
    m = f"q:{A}"
    h.r.zadd(h.k.polls, {m: 0})

    def claim() -> Any:
        return h.run(
            layout.poll(h.c, h.k, "worker", PollArgs(60_000), [(h.tk(A), layout.Member(m))])
        )

    (first,) = claim()
    assert first[:6] == [1, A, "img", 1, "prov-1", "gen"]
    assert claim() == [[0]]  # claimed: no one else polls it meanwhile
    assert _resolve(h, "AGAIN", attempt=1, via="poll") == [1, "DEFERRED"]
    assert h.r.zscore(h.k.polls, m) is not None
    assert _resolve(h, "COMPLETE", attempt=1, via="poll") == [1, "SUCCEEDED"]
    assert h.r.zscore(h.k.polls, m) is None
    h.r.zadd(h.k.polls, {m: 0})
    assert claim() == [[-1]]
    assert h.r.zscore(h.k.polls, m) is None


def test_malformed_resolve_writes_nothing() -> None:
    h = LuaHarness()
    _defer(h, _running(h))
    before = h.snapshot()
    for bad in (
        ResolveArgs("SUCCEED", "", "", "1", "", 1, 0.5, "api"),
        ResolveArgs("COMPLETE", "x", "", "1", "", 1, 0.5, "api"),
        ResolveArgs("COMPLETE", "", "a b", "1", "", 1, 0.5, "api"),
        ResolveArgs("COMPLETE", "", "", "1", "", 1, 7, "api"),
        ResolveArgs("COMPLETE", "", "", "1", "", 1, 0.5, "mail"),
    ):
        xkey = h.k.external("gen", "prov-1")
        with pytest.raises(redis.ResponseError, match="rsjobs: invalid"):
            h.run(layout.resolve(h.c, h.k, "api", h.tk(A), xkey, bad))
    assert h.snapshot() == before


def test_a_result_past_the_longest_wait_times_out_first_without_a_reaper() -> None:
    h = LuaHarness()
    _defer(h, _running(h, max_attempts=2), wait=1)
    h.advance(10)
    assert _resolve(h, "COMPLETE", attempt=1) == [-2, "SCHEDULED"]
    t = h.task(A)
    assert t["error_type"] == "DeferTimeout" and "result" not in t
    timeout, refused = h.history(A)[-2:]
    assert (timeout.event, timeout.to_state, timeout.rejected) == ("TIMEOUT", "SCHEDULED", False)
    assert refused.event == "COMPLETE" and refused.rejected
    assert "past its longest wait" in refused.message
    assert h.r.zscore(h.k.deadlines, f"q:{A}") is None


def test_a_deferred_task_whose_data_breaks_the_sweep_is_dead_lettered() -> None:
    """quarantine.lua takes a DEFERRED task out of its wait (DEADLETTER -> FAILED): left in
    place it would wait forever, its longest wait never enforced."""
    from rsjobs.store.layout import QuarantineArgs

    h = LuaHarness()
    _defer(h, _running(h))
    args = QuarantineArgs(A, "q", "deadlines", f"q:{A}", "deadlines", "wait_until garbled", 1000)
    reply = h.run(layout.quarantine(h.c, h.k, "reaper", h.tk(A), args))
    assert reply == ["DEADLETTERED", "FAILED"]
    assert h.r.zscore(h.k.deadlines, f"q:{A}") is None
    assert _resolve(h, "COMPLETE", attempt=1) == [-2, "FAILED"]
