"""Shared queues with real worker processes (``rsjobs.limits``): an owner at its limit does
not hold up another owner's tasks, a high priority starts next, aging keeps a low priority
from starving, a rate limit holds its rate, tasks waiting on a limit cost no busy loop and
survive their worker's death; bad priorities and limits change nothing."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence

import psutil
import pytest
import redis as sync_redis

from rsjobs import Client, ConfigError, EnqueueRequest, HistoryEntry
from tests.support.processes import spawn_worker, stop_process
from tests.support.reaper import reaper_loop
from tests.support.waits import on_events, poll_until, wait_for_state
from tests.support.web import redis_state

pytestmark = pytest.mark.timeout(180)


def _requests(
    n: int, *, owner: str | None = None, priority: int = 0, **payload: object
) -> list[EnqueueRequest]:
    kind = str(payload.pop("type", "sleep"))
    return [
        EnqueueRequest(
            type=kind, payload=dict(payload), queue="gpu", owner=owner, priority=priority
        )
        for _ in range(n)
    ]


async def _histories(client: Client, ids: Sequence[str]) -> dict[str, list[HistoryEntry]]:
    out = {}
    for tid in ids:
        out[tid] = await client.history(tid)
    return out


def _starts(entries: Iterable[HistoryEntry]) -> list[int]:
    return [e.ts for e in entries if e.event == "START" and not e.rejected]


def _intervals(entries: list[HistoryEntry]) -> list[tuple[int, int]]:
    """Each attempt's [START, end) in Redis TIME (an attempt still running ends at +inf)."""
    out: list[tuple[int, int]] = []
    start: int | None = None
    for e in entries:
        if e.rejected:
            continue
        if e.event == "START":
            start = e.ts
        elif start is not None and e.from_state == "RUNNING" and e.to_state != "RUNNING":
            out.append((start, e.ts))
            start = None
    if start is not None:
        out.append((start, 2**62))
    return out


def _most_at_once(intervals: Iterable[tuple[int, int]]) -> int:
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    most = now = 0
    for _, d in edges:  # (an end at the same ms as a start comes first: -1 < 1)
        now += d
        most = max(most, now)
    return most


async def _now(client: Client) -> int:
    return await client.store.reaper.now_ms()


async def _running(client: Client, owner: str) -> int:
    page = await client.list_tasks(state="RUNNING", queue="gpu", owner=owner, limit=500)
    return len(page.items)


async def test_an_owner_at_its_limit_does_not_hold_up_another(
    client: Client, redis_url: str
) -> None:
    """Queue gpu, worker concurrency 4, per-owner limit 2: alice submits 200 tasks, then bob
    5: bob's first task starts within one task duration of his submit, alice keeps her 2
    slots busy and never has more than 2 running (from the START/end intervals of her
    histories), and her others wait parked."""
    duration_ms = 500
    await client.set_limit("gpu", 2)
    alice = await client.enqueue_many(_requests(200, owner="alice", s=duration_ms / 1000, steps=1))
    worker = spawn_worker(redis_url, "t", "-q", "gpu", "-c", "4", "--lease-ms", "3000")
    events = client.store.events
    try:

        async def alice_at_two() -> bool:
            return await _running(client, "alice") >= 2

        await on_events(events, alice_at_two, 20, "alice's first tasks started")
        submitted = await _now(client)
        bob = await client.enqueue_many(_requests(5, owner="bob", s=duration_ms / 1000, steps=1))

        async def bob_started() -> int | None:
            starts = [s for h in (await _histories(client, bob)).values() for s in _starts(h)]
            return min(starts) if starts else None

        first_bob = await on_events(events, bob_started, 10, "bob's first task started")
        print(f"fairness: bob's first START {first_bob - submitted} ms after his submit")
        assert first_bob - submitted <= duration_ms, first_bob - submitted
        limits = (await client.limits("gpu"))[0]
        assert limits.default == 2 and limits.running.get("alice", 0) <= 2
        assert limits.waiting > 150  # alice's others wait, parked: no one re-reads them
        bob_done = 0
        for tid in bob:  # bob's five run (two at a time) while alice keeps her two
            info = await client.wait(tid, timeout_ms=20_000)
            assert info.state == "SUCCEEDED"
            bob_done = max(bob_done, info.finished_at)
    finally:
        stop_process(worker)
    histories = await _histories(client, alice)
    ran = [iv for h in histories.values() for iv in _intervals(h)]
    assert _most_at_once(ran) == 2  # never more, and her two slots were used
    # while bob's five ran (about 3 task durations), alice's two slots kept working
    during = [iv for iv in ran if first_bob <= iv[0] < bob_done]
    assert len(during) >= 3, (len(during), ran)
    bob_ran = [iv for h in (await _histories(client, bob)).values() for iv in _intervals(h)]
    assert 1 <= _most_at_once(bob_ran) <= 2


async def test_a_priority_9_task_behind_1000_priority_0_tasks_starts_next(
    client: Client, redis_url: str
) -> None:
    """One slot, busy; 1,000 priority-0 tasks queue behind it, then one of priority 9: the
    next START is the priority-9 task's."""
    (busy,) = await client.enqueue_many(_requests(1, s=1.5, steps=1))
    worker = spawn_worker(redis_url, "t", "-q", "gpu", "-c", "1")
    try:
        await wait_for_state(client, busy, "RUNNING", timeout=20)
        low = await client.enqueue_many(_requests(1000, type="noop"))
        (high,) = await client.enqueue_many(_requests(1, type="noop", priority=9))
        info = await client.wait(high, timeout_ms=30_000)
        assert info.state == "SUCCEEDED" and info.priority == 9
        assert info.started_at >= (await client.get(busy)).finished_at
        # nothing of the low ones started before it (they may have started after)
        started = [s for h in (await _histories(client, low)).values() for s in _starts(h)]
        assert all(s >= info.started_at for s in started)
        hist = await client.history(high)
        assert hist[0].event == "ENQUEUE" and hist[0].extra.get("pr") == "9"
    finally:
        stop_process(worker)


async def test_aging_lets_a_low_priority_task_through_a_flood_of_high_priority_work(
    client: Client, redis_url: str
) -> None:
    """A steady flood of priority-9 tasks (a few always queued): a priority-0 task starts
    within the aging bound, (9 - 0) periods of priority_age_ms, plus the wait of the tasks
    queued before it, plus a margin; priority-9 tasks queued after it start before it
    meanwhile (the flood does have priority). The flood is topped up each time the events
    stream moves (a start, a finish), not on a timer."""
    age_ms = 100
    worker = spawn_worker(redis_url, "t", "-q", "gpu", "-c", "2", "--priority-age-ms", str(age_ms))
    events = client.store.events
    flood: list[str] = []
    try:
        flood += await client.enqueue_many(_requests(10, type="sleep", s=0.05, steps=1, priority=9))

        async def flood_runs() -> bool:
            return (await client.stats())["gpu"].get("SUCCEEDED", 0) >= 2

        await on_events(events, flood_runs, 20, "the flood runs")
        submitted = await _now(client)
        (low,) = await client.enqueue_many(_requests(1, type="noop", priority=0))
        started = 0
        cursor = await events.last_id()
        end = time.monotonic() + 30
        while time.monotonic() < end:
            # keep about ten priority-9 tasks queued
            info = await client.get(low)
            if info.started_at:
                started = info.started_at
                break
            pending = (await client.stats())["gpu"].get("PENDING", 0)
            if pending < 12:
                flood += await client.enqueue_many(
                    _requests(5, type="sleep", s=0.05, steps=1, priority=9)
                )
            rows = await events.read(cursor, 1000, 1000)  # the next start or finish
            if rows:
                cursor = rows[-1][0]
        assert started, "the low priority task starved"
        waited = started - submitted
        bound = 9 * age_ms + 10 * 50 // 2 + 2000  # aging + the queued work + a margin
        assert waited <= bound, waited
        later_high = [
            s
            for tid, h in (await _histories(client, flood)).items()
            for s in _starts(h)
            if h[0].ts > submitted
        ]
        assert sum(1 for s in later_high if s < started) >= 5, "the flood had no priority"
    finally:
        stop_process(worker)


RATE = 50  # starts per second
WINDOW_S = 2


async def test_a_rate_limit_holds_its_rate(client: Client, redis_url: str) -> None:
    """50 starts per second (burst 5) on the queue, 200 tasks and 8 slots: the STARTs
    (read from the histories) over 2 s are 100 within 10% (the burst, then the refill);
    no second holds more than the burst and its refill. (The wait is on the tasks'
    finishes, not a timer.)"""
    await client.set_rate("gpu", RATE, burst=5)
    ids = await client.enqueue_many(_requests(200, type="noop"))
    worker = spawn_worker(redis_url, "t", "-q", "gpu", "-c", "8")
    try:

        async def past_the_window() -> bool:
            done = (await client.stats())["gpu"].get("SUCCEEDED", 0)
            return done >= RATE * WINDOW_S + RATE // 2  # past t0 + WINDOW_S, by half a second

        await on_events(client.store.events, past_the_window, 60, "the rated tasks ran")
    finally:
        stop_process(worker)
    starts = sorted(s for h in (await _histories(client, ids)).values() for s in _starts(h))
    assert starts, "nothing started"
    t0 = starts[0]
    in_window = [s for s in starts if t0 <= s < t0 + WINDOW_S * 1000]
    print(f"rate {RATE}/s: {len(in_window)} STARTs in the first {WINDOW_S} s (100 +- 10)")
    assert 90 <= len(in_window) <= 110, len(in_window)
    # no second holds more than the bucket's burst (5) and its refill (RATE). A token is
    # taken by the take call and the START written by the next call, a round trip later:
    # a second of STARTs spans the tokens of a second plus that lag (bounded here at
    # 100 ms, RATE / 10 more tokens; a limiter that did not hold would let the 8 slots
    # run several hundred a second)
    per_second = [sum(1 for s in starts if t <= s < t + 1000) for t in starts]
    assert max(per_second) <= 5 + RATE + RATE // 10, max(per_second)
    (limits,) = await client.limits("gpu")
    assert [(r.per_second, r.burst) for r in limits.rates] == [(float(RATE), 5)]


IDLE_S = 0.8


def _cpu_seconds(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def _redis_cpu(r: sync_redis.Redis) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


async def test_a_thousand_tasks_waiting_on_a_limit_cost_no_busy_loop_and_survive_a_kill(
    client: Client, redis_url: str
) -> None:
    """1,000 tasks of one owner wait on its limit of 1 while its first runs (its first
    attempt holds on): over 0.8 s, Redis and the worker use next to no CPU (nothing re-reads
    or re-queues them; a busy loop would cost most of a core). Then the worker is killed (SIGKILL): the reaper takes its attempt
    back, the owner's count clears, and a new worker finishes all 1,000."""
    r = sync_redis.Redis.from_url(redis_url)
    await client.set_limit("gpu", 1)
    (first,) = await client.enqueue_many(_requests(1, type="hold", owner="alice", s=60))
    rest = await client.enqueue_many(_requests(999, type="noop", owner="alice"))
    worker = spawn_worker(redis_url, "t", "-q", "gpu", "-c", "8", "--lease-ms", "1000")
    replacement: subprocess.Popen[bytes] | None = None
    try:
        await wait_for_state(client, first, "RUNNING", timeout=20)

        async def parked() -> bool:  # its first takes have parked the others
            return (await client.limits("gpu"))[0].waiting > 0

        await poll_until(parked, 20, "the others parked", every=0.02)
        cpu0, redis0 = _cpu_seconds(worker.pid), _redis_cpu(r)
        await asyncio.sleep(IDLE_S)  # the one fixed wait: CPU is measured over a span
        worker_cpu = _cpu_seconds(worker.pid) - cpu0
        redis_cpu = _redis_cpu(r) - redis0
        print(
            f"{IDLE_S} s, 999 tasks waiting: worker CPU {worker_cpu:.3f} s,"
            f" Redis CPU {redis_cpu:.3f} s"
        )
        # a busy loop costs most of a core (0.8 s); heartbeats and idle waits a few ms
        assert worker_cpu < 0.15, worker_cpu
        assert redis_cpu < 0.1, redis_cpu
        (limits,) = await client.limits("gpu")
        # (parked in waiting, or blocked at the end of the stream: no one reads them)
        assert limits.running == {"alice": 1} and limits.waiting > 0, limits
        assert (await client.stats())["gpu"]["PENDING"] == 999
        assert (await client.get(first)).state == "RUNNING"

        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(10)
        async with reaper_loop(redis_url, "t"):
            info = await wait_for_state(client, first, "PENDING", timeout=20)
            assert info.attempt == 1
            (limits,) = await client.limits("gpu")
            assert limits.running == {}, limits
            replacement = spawn_worker(redis_url, "t", "-q", "gpu", "-c", "8", "--lease-ms", "1000")
            for tid in [first, *rest]:
                assert (await client.wait(tid, timeout_ms=120_000)).state == "SUCCEEDED"
        (limits,) = await client.limits("gpu")
        assert limits.running == {} and limits.waiting == 0
    finally:
        stop_process(worker)
        if replacement is not None:
            stop_process(replacement)
        r.close()


async def test_bad_priorities_and_limits_are_refused_and_write_nothing(
    client: Client, redis_url: str
) -> None:
    await client.enqueue("noop", queue="gpu")  # (a namespace with something in it)
    await client.set_limit("gpu", 3)
    r = sync_redis.Redis.from_url(redis_url)
    before = redis_state(r)
    for bad in (-1, 10, 2**40, "5", 2.0, True, None):
        reqs = _requests(3, type="noop")
        reqs[1] = EnqueueRequest(type="noop", queue="gpu", priority=bad)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="priority"):
            await client.enqueue_many(reqs)
        with pytest.raises(ConfigError, match="priority"):
            await client.enqueue("noop", queue="gpu", priority=bad)  # type: ignore[arg-type]
    for bad_limit in (0, -3, 10**7, "2", 1.5, True, None):
        with pytest.raises(ConfigError, match="limit"):
            await client.set_limit("gpu", bad_limit)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="limit"):
            await client.set_limit("gpu", bad_limit, owner="alice")  # type: ignore[arg-type]
    for per, burst in ((0, None), (-1, None), (float("nan"), None), (1e9, None), ("5", None),
                       (5, 0), (5, -2), (5, 1.5), (5, 10**9)):  # fmt: skip
        with pytest.raises(ConfigError):
            await client.set_rate("gpu", per, burst=burst)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        await client.set_limit("gpu", 2, owner="not an owner")
    with pytest.raises(ConfigError):
        await client.set_limit("bad queue", 2)
    with pytest.raises(ConfigError):
        await client.set_rate("gpu", 5, retries=True)  # a retries rate names its type
    assert redis_state(r) == before
    r.close()
