"""The worker against a real Redis: cancel, timeout, retries, dedup, fencing, shutdown,
and what a SIGKILL leaves behind."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest

from rsjobs import Client, Settings, Worker
from rsjobs.console.views import error_text
from rsjobs.model import TERMINAL
from rsjobs.server import EmbeddedRedis
from rsjobs.store.layout import Ending
from rsjobs.store.record import field
from tests.support.apps import GATES, tasks
from tests.support.processes import spawn_worker, start_as, stop_process, wait_for_state
from tests.support.reference import replay
from tests.support.waits import on_events, poll_until

pytestmark = pytest.mark.integration


@contextlib.asynccontextmanager
async def running_worker(url: str, **kw: object) -> AsyncIterator[Worker]:
    opts: dict[str, object] = {
        "concurrency": 8,
        "lease_ms": 2000,
        "handle_signals": False,
        "promote_ms": 20,
        "settings": Settings(namespace="t"),
    }
    opts.update(kw)
    w = Worker(tasks, url=url, **opts)  # type: ignore[arg-type]
    task = asyncio.create_task(w.run())
    try:
        yield w
    finally:
        w.stop()
        await asyncio.wait_for(task, 20)
        await w.redis.aclose()


async def assert_valid_history(client: Client, tid: str) -> None:
    entries = await client.history(tid)
    assert replay(entries) == []
    terminal = [
        e
        for e in entries
        if not e.rejected and e.to_state in TERMINAL and e.from_state not in TERMINAL
    ]
    assert len(terminal) == 1


async def test_runs_a_task_with_progress_and_result(client: Client, redis_url: str) -> None:
    async with running_worker(redis_url):
        tid = await client.enqueue("sleep", {"s": 0.3, "steps": 3})
        info = await client.wait(tid, timeout_ms=10_000)
    assert info.state == "SUCCEEDED" and info.result["attempt"] == 1
    events = [e.event for e in await client.history(tid)]
    assert events[:2] == ["ENQUEUE", "START"] and events[-1] == "COMPLETE"
    assert "PROGRESS" in events
    await assert_valid_history(client, tid)


async def test_cancel_of_running_task_stops_the_handler_and_frees_the_slot(
    client: Client, redis_url: str
) -> None:
    async with running_worker(redis_url, concurrency=1) as w:
        tid = await client.enqueue("sleep", {"s": 30})
        await wait_for_state(client, tid, "RUNNING")
        t0 = time.monotonic()
        assert await client.cancel(tid, "user clicked cancel") == "CANCELLED"
        while w.jobs:
            await asyncio.sleep(0.01)
            assert time.monotonic() - t0 < 2.0, "handler not stopped"
        # the freed slot takes the next task at once
        nxt = await client.enqueue("noop", {"x": 1})
        assert (await client.wait(nxt, timeout_ms=5000)).state == "SUCCEEDED"
        # a repeated cancel answers the same and changes nothing
        assert await client.cancel(tid) == "CANCELLED"
    info = await client.get(tid)
    assert info.state == "CANCELLED" and info.result is None
    await assert_valid_history(client, tid)


async def test_cancel_reaches_a_sync_handler(client: Client, redis_url: str) -> None:
    async with running_worker(redis_url) as w:
        tid = await client.enqueue("sync_sleep", {"s": 30})
        await wait_for_state(client, tid, "RUNNING")
        await client.cancel(tid)
        t0 = time.monotonic()
        while w.jobs:
            await asyncio.sleep(0.01)
            assert time.monotonic() - t0 < 2.0
    assert (await client.get(tid)).state == "CANCELLED"


async def test_timeout_retries_then_timed_out(client: Client, redis_url: str) -> None:
    async with running_worker(redis_url):
        tid = await client.enqueue(
            "sleep", {"s": 5}, timeout_ms=200, max_attempts=2, backoff_base_ms=10, backoff_max_ms=20
        )
        info = await client.wait(tid, timeout_ms=10_000)
    assert info.state == "TIMED_OUT" and info.attempt == 2 and info.failures == 2
    events = [(e.event, e.to_state) for e in await client.history(tid) if not e.rejected]
    assert ("TIMEOUT", "SCHEDULED") in events and events[-1] == ("TIMEOUT", "TIMED_OUT")
    await assert_valid_history(client, tid)


async def test_retries_with_backoff_then_failed(client: Client, redis_url: str) -> None:
    async with running_worker(redis_url):
        tid = await client.enqueue(
            "fail", {}, max_attempts=3, backoff_base_ms=100, backoff_max_ms=1000
        )
        info = await client.wait(tid, timeout_ms=10_000)
        ok = await client.enqueue("fail", {"until": 2}, max_attempts=3, backoff_base_ms=10)
        assert (await client.wait(ok, timeout_ms=10_000)).state == "SUCCEEDED"
    assert info.state == "FAILED" and info.attempt == 3 and info.failures == 3
    hist = await client.history(tid)
    delays = [int(e.extra["retry_in_ms"]) for e in hist if "retry_in_ms" in e.extra]
    assert len(delays) == 2
    assert 50 <= delays[0] <= 100 and 100 <= delays[1] <= 200  # equal jitter around 2^n
    starts = [e.ts for e in hist if e.event == "START"]
    assert starts[1] - starts[0] >= delays[0] and starts[2] - starts[1] >= delays[1]
    assert "attempts exhausted (3/3)" in hist[-1].message
    await assert_valid_history(client, tid)


async def test_non_retryable_and_unknown_types_fail_once(client: Client, redis_url: str) -> None:
    async with running_worker(redis_url):
        fatal = await client.enqueue("fatal", {}, max_attempts=5)
        verr = await client.enqueue("value_error", {}, max_attempts=5)
        unknown = await client.enqueue("no.such.type", {}, max_attempts=5)
        infos = [await client.wait(t, timeout_ms=5000) for t in (fatal, verr, unknown)]
    for info in infos:
        assert info.state == "FAILED" and info.attempt == 1, info
    assert infos[2].error_type == "NoHandler" and "no handler" in infos[2].error
    # each says what it is once: NonRetryable's message after "non-retryable: ", another
    # exception with its type (ValueError here, declared non-retryable by its handler)
    assert infos[0].error == "non-retryable: bad input, retrying cannot help"
    assert infos[0].error_type == "NonRetryable"
    assert infos[1].error.startswith("non-retryable: ValueError: ")
    assert error_text(infos[0].error_type, infos[0].error) == infos[0].error
    assert error_text("TimeoutError", "execution exceeded 2s") == (
        "TimeoutError: execution exceeded 2s"
    )


async def test_dedup_returns_the_first_task(client: Client) -> None:
    a = await client.enqueue("noop", {"n": 1}, dedup_key="render-42")
    b = await client.enqueue("noop", {"n": 1}, dedup_key="render-42")
    assert a == b
    assert (await client.get(a)).payload == {"n": 1}
    assert (await client.stats())["default"]["stream_length"] == 1


async def test_fencing_rejects_a_late_result_from_a_lost_lease(
    client: Client, redis_url: str
) -> None:
    """A zombie started the task, lost it (pause/resume gives it to a new owner); its late
    completion is refused and recorded, and the result is the new owner's."""
    tid = await client.enqueue("noop", {"who": "owner"})
    (started,) = await start_as(client, "zombie", nonce="z")
    zombie_lease = started.lease
    keys = client.keys.task_keys(tid, "default")
    await client.pause(tid)
    await client.resume(tid)
    async with running_worker(redis_url):
        info = await client.wait(tid, timeout_ms=5000)
    assert info.state == "SUCCEEDED" and info.result == {"who": "owner"}
    ending = Ending("COMPLETE", zombie_lease, '{"who":"zombie"}', "", 1, -1, 0.1)
    late = await client.store.work.finish([(keys, ending)])
    assert list(late[0]) == [-2, "SUCCEEDED"]
    info = await client.get(tid)
    assert info.result == {"who": "owner"} and info.attempt == 2
    refused = [e for e in await client.history(tid) if e.rejected]
    assert refused and refused[-1].event == "COMPLETE" and "1:z" in refused[-1].message
    await assert_valid_history(client, tid)


async def test_graceful_shutdown_hands_back_in_flight_work(client: Client, redis_url: str) -> None:
    proc = spawn_worker(redis_url, "t", "--grace-ms", "1000", "--lease-ms", "3000")
    try:
        short = await client.enqueue("sleep", {"s": 0.5, "steps": 2})
        long = await client.enqueue("sleep", {"s": 60})
        await wait_for_state(client, short, "RUNNING", timeout=15)
        await wait_for_state(client, long, "RUNNING", timeout=15)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(40) == 0  # generous: the suite shares 2 cores
    finally:
        stop_process(proc)
    assert (await client.get(short)).state == "SUCCEEDED"
    handed = await client.get(long)
    assert handed.state == "PENDING" and handed.failures == 0
    assert [e.event for e in await client.history(long)][-1] == "REQUEUE"
    # nothing lost: a new worker picks the handed-back task up (short run this time)
    await client.redis.hset(client.keys.task(long), field("payload"), '{"s": 0.1}')
    async with running_worker(redis_url):
        info = await client.wait(long, timeout_ms=5000)
    assert info.state == "SUCCEEDED" and info.attempt == 2
    await assert_valid_history(client, long)


async def test_sigkilled_worker_leaves_task_running_with_an_expiring_lease(
    client: Client, redis_url: str
) -> None:
    proc = spawn_worker(redis_url, "t", "--lease-ms", "300")
    try:
        tid = await client.enqueue("sleep", {"s": 60})
        info = await wait_for_state(client, tid, "RUNNING", timeout=15)
    finally:
        stop_process(proc, signal.SIGKILL)
    assert info.lease_expires_at > 0
    now_ms = await client.store.reaper.now_ms()
    # past the lease (300 ms from the last heartbeat): it expired, and nothing moved the task
    await asyncio.sleep(max(0, info.lease_expires_at - now_ms + 20) / 1000)
    info = await client.get(tid)
    now_ms = await client.store.reaper.now_ms()
    assert info.state == "RUNNING" and info.lease_expires_at < now_ms
    pending = await client.redis.xpending(client.keys.queue("default"), "workers")
    assert pending["pending"] == 1 and pending["consumers"][0]["name"] == info.worker
    # the history says who had it and when; recovery is the reaper's job
    events = [e.event for e in await client.history(tid) if e.event != "PROGRESS"]
    assert events == ["ENQUEUE", "START"]


async def test_a_worker_that_restarts_a_task_it_lost_keeps_the_new_attempt_alive(
    client: Client, redis_url: str
) -> None:
    """Heartbeats cannot get through (as during a Redis outage), the reaper takes the task
    back, and the same worker starts it again: the stale attempt is stopped at once and the
    new one is heartbeated like any other (found by the chaos harness: the stale attempt's
    end used to drop the new attempt from the worker's table, so it was reclaimed again)."""
    from rsjobs.reaper import Reaper
    from rsjobs.reaper.config import ReaperConfig

    lease_ms = 300
    reaper = Reaper(
        url=redis_url,
        settings=Settings(namespace="t"),
        config=ReaperConfig(lease_ms=lease_ms, interval_ms=50, guard=False, log_idle=False),
    )
    # the reaper sweeps in the background (every 50 ms); a sweep done by a given Redis
    # time is an event the test waits for, and the handler runs until the test opens its
    # gate: the test waits on the system, never on a timer of its own
    swept_past = {"at": 2**62}
    swept = asyncio.Event()
    real_sweep = reaper.sweep_once

    async def sweep() -> Any:
        report = await real_sweep()
        if await client.store.reaper.now_ms() >= swept_past["at"]:
            swept.set()
        return report

    reaper.sweep_once = sweep  # type: ignore[method-assign]
    gate = f"restart-{uuid.uuid4().hex}"
    async with running_worker(redis_url, lease_ms=lease_ms, heartbeat_ms=60) as w:
        real_beat = w._beat
        blocked = True

        async def beat(jobs: list[object]) -> None:
            if not blocked:
                await real_beat(jobs)  # type: ignore[arg-type]

        w._beat = beat  # type: ignore[method-assign]
        tid = await client.enqueue("gated", {"gate": gate}, max_attempts=5)
        await wait_for_state(client, tid, "RUNNING")
        sweeping = asyncio.create_task(reaper.run())
        try:

            async def taken_back() -> bool:
                info = await client.get(tid)
                return info.attempt >= 2 or info.state != "RUNNING"

            # the lease runs out without heartbeats: the reaper takes it back (and the
            # same worker starts it again, heartbeated from then on)
            await on_events(client.store.events, taken_back, 15, "the reaper took it back")
            blocked = False
            info = await wait_for_state(client, tid, "RUNNING")
            assert info.attempt == 2
            # the new attempt lives on through the sweeps of two more leases
            swept_past["at"] = await client.store.reaper.now_ms() + 2 * lease_ms
            await asyncio.wait_for(swept.wait(), 15)
            assert (info := await client.get(tid)).state == "RUNNING" and info.attempt == 2
            GATES.setdefault(gate, asyncio.Event()).set()
            info = await client.wait(tid, timeout_ms=15_000)
        finally:
            GATES.pop(gate, None)
            reaper.stop()
            await asyncio.wait_for(sweeping, 10)
    await reaper.close()
    assert info.state == "SUCCEEDED" and info.attempt == 2, info
    events = [e.event for e in await client.history(tid) if not e.rejected]
    assert events.count("RECLAIM") == 1
    await assert_valid_history(client, tid)


async def test_worker_started_before_redis_waits_for_it(tmp_path: Path) -> None:
    """A worker whose Redis is not up yet waits for it (backoff), then serves; SIGTERM
    while it waits ends it cleanly."""
    late = EmbeddedRedis(appendonly=False)  # a port nobody listens on yet
    waiting = spawn_worker(late.url, stderr=subprocess.PIPE)
    idle = spawn_worker(late.url, stderr=subprocess.PIPE)
    try:
        # both reached their wait (signal handlers installed), however loaded the machine:
        # their logs are read as they write them (a blocking read of the pipe)
        for proc in (waiting, idle):
            assert proc.stderr is not None
            line = b""
            while b"waiting for it" not in line:
                line = await asyncio.wait_for(asyncio.to_thread(proc.stderr.readline), 60)
                assert line, "the worker exited without saying it waits"
        await asyncio.sleep(0.2)
        assert waiting.poll() is None and idle.poll() is None  # still waiting, not exited
        idle.send_signal(signal.SIGTERM)
        assert idle.wait(10) == 0
        late.start()
        c = Client.from_url(late.url, namespace="t")
        try:
            tid = await c.enqueue("noop", {"x": 1})
            info = await c.wait(tid, timeout_ms=15_000)
            assert info.state == "SUCCEEDED"
        finally:
            await c.close()
        waiting.send_signal(signal.SIGTERM)
        assert waiting.wait(15) == 0
    finally:
        for proc in (waiting, idle):
            stop_process(proc)
            if proc.stderr is not None:
                proc.stderr.close()
        late.cleanup()


ENDS = ("START", "COMPLETE")


async def test_concurrency_bounds_started_tasks_while_starts_are_in_flight(
    client: Client, redis_url: str
) -> None:
    """The worker reads the next batch while a start is in flight; deliveries being started
    hold their slots, so no more than ``concurrency`` tasks are ever RUNNING for it."""
    ids = [await client.enqueue("sleep", {"s": 0.02, "steps": 1}) for _ in range(24)]
    most = 0
    async with running_worker(redis_url, concurrency=3):

        async def all_done() -> bool:  # sampled at each START and finish (an event each)
            nonlocal most
            stats = (await client.stats())["default"]
            most = max(most, stats.get("RUNNING", 0))
            return stats.get("SUCCEEDED", 0) == len(ids)

        await on_events(client.store.events, all_done, 30, "the 24 tasks ran")
    assert 1 <= most <= 3
    # exactly: the most [START, COMPLETE) spans of the histories open at once
    edges = []
    for tid in ids:
        hist = [e for e in await client.history(tid) if not e.rejected]
        edges += [(e.ts, 1 if e.event == "START" else -1) for e in hist if e.event in ENDS]
    at_once = peak = 0
    for _, d in sorted(edges):  # (an end at the same ms as a start comes first)
        at_once += d
        peak = max(peak, at_once)
    assert peak == 3


async def test_a_sync_handler_that_ignores_its_timeout_keeps_its_slot(
    client: Client, redis_url: str
) -> None:
    """``-c 1``: a sync handler that sleeps past its timeout still holds the only thread.
    Its task ends TIMED_OUT at once, but the next task is not STARTed until that thread
    returns (it used to be started, time out without its handler ever running, and a
    third be started and requeued); the worker reports the stuck thread meanwhile."""
    proc = spawn_worker(redis_url, "t", "-c", "1", "--lease-ms", "600")
    try:
        stuck = await client.enqueue("sync_stubborn", {"s": 1.5}, timeout_ms=300, max_attempts=1)
        await wait_for_state(client, stuck, "RUNNING", timeout=15)
        nxt = await client.enqueue("sync_stubborn", {"s": 0.05}, timeout_ms=1000, max_attempts=1)
        third = await client.enqueue("sync_stubborn", {"s": 0.05}, timeout_ms=1000, max_attempts=1)
        info = await client.wait(stuck, timeout_ms=5000)
        assert info.state == "TIMED_OUT", info

        async def reported() -> bool:  # at its next heartbeat (a third of the lease)
            for raw in (await client.redis.hgetall(client.keys.workers)).values():
                held = json.loads(raw)["stuck"]
                if held:
                    assert held == [
                        {"task": stuck, "attempt": 1, "reason": "TIMEOUT", "since": ANY}
                    ]
                    return True
            return False

        await poll_until(reported, 5, "the registration names the stuck thread", every=0.05)
        # the thread still sleeps (about 1 s more): the others still wait
        assert (await client.get(nxt)).state == "PENDING"
        assert (await client.get(third)).state == "PENDING"
        for tid in (nxt, third):
            done = await client.wait(tid, timeout_ms=15_000)
            assert done.state == "SUCCEEDED" and done.result["slept"] == 0.05, done
            events = [e.event for e in await client.history(tid)]
            assert events == ["ENQUEUE", "START", "COMPLETE"], events
        starts = {
            tid: next(e.ts for e in await client.history(tid) if e.event == "START")
            for tid in (stuck, nxt, third)
        }
        # the next START waited for the stuck thread (1.5 s), not for the timeout (0.3 s)
        assert starts[nxt] - starts[stuck] >= 1400, starts
        assert starts[third] > starts[nxt]
    finally:
        stop_process(proc, signal.SIGTERM)
    assert proc.returncode == 0


async def test_a_handler_thread_that_never_returns_does_not_block_shutdown(
    client: Client, redis_url: str
) -> None:
    """SIGTERM ends the worker within its grace even while a sync handler that ignored
    its timeout still sleeps (its thread used to keep the process alive until it woke)."""
    proc = spawn_worker(redis_url, "t", "-c", "1", "--grace-ms", "500")
    try:
        tid = await client.enqueue("sync_stubborn", {"s": 120}, timeout_ms=200, max_attempts=1)
        assert (await client.wait(tid, timeout_ms=10_000)).state == "TIMED_OUT"
        await asyncio.sleep(0.2)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        assert time.monotonic() - t0 < 15
    finally:
        stop_process(proc)
    assert await client.redis.hlen(client.keys.workers) == 0  # unregistered on the way out


async def test_queue_wait_deadlines_hold_without_a_reaper(client: Client, redis_url: str) -> None:
    """No reaper runs: a delayed task whose queue-wait deadline passes before it is due is
    expired when it would be promoted, and a queued one when a worker would start it
    (both used to run and succeed). Neither is STARTed; nothing is left on the queue."""
    queued = await client.enqueue("noop", {"x": 1}, wait_timeout_ms=100)
    await asyncio.sleep(0.15)  # no worker yet: the deadline passes while it waits
    async with running_worker(redis_url):
        delayed = await client.enqueue("noop", {"x": 2}, delay_ms=500, wait_timeout_ms=200)
        fresh = await client.enqueue("noop", {"x": 3}, wait_timeout_ms=5000)
        infos = [await client.wait(t, timeout_ms=10_000) for t in (queued, delayed, fresh)]
    assert [i.state for i in infos] == ["TIMED_OUT", "TIMED_OUT", "SUCCEEDED"]
    for tid, where in ((queued, "at START by "), (delayed, "at PROMOTE")):
        info = await client.get(tid)
        assert info.error_type == "WaitTimeout" and info.attempt == 0
        hist = await client.history(tid)
        assert [e.event for e in hist] == ["ENQUEUE", "EXPIRE"]
        assert where in hist[-1].message and "queue-wait deadline" in hist[-1].message
        await assert_valid_history(client, tid)
    q = client.keys.queue("default")
    assert await client.redis.xlen(q) == 0
    assert (await client.redis.xpending(q, "workers"))["pending"] == 0
    assert await client.redis.zcard(client.keys.deadlines) == 0
    assert await client.redis.zcard(client.keys.scheduled) == 0


async def test_worker_cli_keeps_finished_tasks_for_its_retention(
    client: Client, redis_url: str
) -> None:
    """`rsjobs worker --retention-ms` (or RSJOBS_RETENTION_MS) sets how long the tasks it
    finishes are kept, as the reaper's option does."""
    proc = spawn_worker(redis_url, "t", "--retention-ms", "60000")
    try:
        tid = await client.enqueue("noop", {})
        assert (await client.wait(tid, timeout_ms=20_000)).state == "SUCCEEDED"
        ttl = await client.redis.pttl(client.keys.task(tid))
        assert 0 < ttl <= 60_000
    finally:
        stop_process(proc, signal.SIGTERM)
