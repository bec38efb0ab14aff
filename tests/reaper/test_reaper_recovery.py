"""Recovery from dead, frozen and healthy workers, with real worker processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from rsjobs import Client, Settings
from rsjobs.reaper import Reaper, ReaperConfig, list_workers
from rsjobs.store.record import field
from tests.support.processes import stop_process, wait_for_state
from tests.support.reaper import (
    reaper_loop,
    spawn,
    spawn_reaper,
    terminal_transitions,
    wait_history,
    wait_registered,
)
from tests.support.reference import replay

pytestmark = pytest.mark.integration

LEASE_MS = 1000


def json_lines(path: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in Path(path).read_text().splitlines() if x.startswith("{")]


@pytest.fixture
async def rclient(redis_url: str) -> AsyncIterator[Client]:
    c = Client.from_url(redis_url, namespace="rk")
    yield c
    await c.close()


@pytest.fixture
def procs() -> list[subprocess.Popen[bytes]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started  # type: ignore[misc]
    for p in started:
        stop_process(p)


async def test_sigkilled_worker_task_is_recovered_and_finished_elsewhere(
    rclient: Client, redis_url: str, procs: list[subprocess.Popen[bytes]], tmp_path: object
) -> None:
    workers = {n: spawn(redis_url, "rk", n, lease_ms=LEASE_MS) for n in ("wa", "wb")}
    procs.extend(workers.values())
    log_path = os.path.join(str(tmp_path), "reaper.log")
    reaper = spawn_reaper(redis_url, "rk", log_path, "--interval-ms", "200",
                          "--lease-ms", str(LEASE_MS), "--dead-after-leases", "2")  # fmt: skip
    procs.append(reaper)
    await wait_registered(rclient, list(workers))

    tid = await rclient.enqueue("sleep", {"s": 1.0, "steps": 5})
    running = await wait_for_state(rclient, tid, "RUNNING")
    victim = running.worker
    workers[victim].send_signal(signal.SIGKILL)
    workers[victim].wait(10)
    lease_end = (await rclient.get(tid)).lease_expires_at  # no beat renews it any more

    info = await rclient.wait(tid, timeout_ms=15_000)
    assert info.state == "SUCCEEDED"
    assert info.result["worker"] != victim and info.result["attempt"] == 2
    entries = await rclient.history(tid)
    reclaims = [e for e in entries if e.event == "RECLAIM"]
    assert len(reclaims) == 1
    rec = reclaims[0]
    assert (rec.source, rec.from_state, rec.to_state) == ("reaper", "RUNNING", "PENDING")
    assert rec.extra["worker"] == victim and "lost" in rec.message
    # never before the lease ran out; within one sweep (plus a loaded machine's slack) after
    assert lease_end <= rec.ts <= lease_end + 200 + 800
    assert len(terminal_transitions(entries)) == 1 and replay(entries) == []

    # the registry marks the dead worker; `rsjobs workers` lists it beside the live one
    deadline = time.monotonic() + 10
    while True:
        status = {w.name: w.status for w in await list_workers(rclient.store)}
        if status.get(victim) == "dead":
            break
        assert time.monotonic() < deadline, status
        await asyncio.sleep(0.1)
    survivor = next(n for n in workers if n != victim)
    assert status[survivor] == "alive"

    reaper.send_signal(signal.SIGTERM)
    assert reaper.wait(10) == 0
    lines = json_lines(log_path)
    sweeps = [x for x in lines if x["event"] == "sweep"]
    assert sum(x["retried"] for x in sweeps) == 1
    assert any(victim in x["workers_dead"] for x in sweeps)
    assert lines[-1]["event"] == "stop"


async def test_frozen_worker_late_completion_is_refused_and_recorded(
    rclient: Client, redis_url: str, procs: list[subprocess.Popen[bytes]]
) -> None:
    workers = {n: spawn(redis_url, "rk", n, lease_ms=LEASE_MS) for n in ("sa", "sb")}
    procs.extend(workers.values())
    await wait_registered(rclient, list(workers))
    async with reaper_loop(redis_url, "rk", lease_ms=LEASE_MS):
        # one step: once thawed, the handler's sleep is already over and it completes at once
        tid = await rclient.enqueue("sleep", {"s": 2.0, "steps": 1})
        running = await wait_for_state(rclient, tid, "RUNNING")
        victim, old_lease = (
            running.worker,
            (await rclient.redis.hget(rclient.keys.task(tid), field("lease"))),
        )
        workers[victim].send_signal(signal.SIGSTOP)
        try:
            info = await rclient.wait(tid, timeout_ms=15_000)
            assert info.state == "SUCCEEDED" and info.result["worker"] != victim
        finally:
            workers[victim].send_signal(signal.SIGCONT)
        # once thawed, the zombie's first word is refused and recorded: usually its late
        # COMPLETE; when its overdue heartbeat gets there first, the refusal stops the
        # handler before it can complete (both are the fence at work)
        late = await wait_history(
            rclient,
            tid,
            lambda e: e.rejected and e.event in ("COMPLETE", "HEARTBEAT", "PROGRESS"),
            timeout=10,
        )
    assert late.source == "worker" and late.to_state == "SUCCEEDED"
    assert old_lease in late.message  # the refusal names the zombie's lease
    after = await rclient.get(tid)
    assert after.result == info.result and after.state == "SUCCEEDED"
    entries = await rclient.history(tid)
    rec = next(e for e in entries if e.event == "RECLAIM")
    assert rec.extra["worker"] == victim
    assert len(terminal_transitions(entries)) == 1 and replay(entries) == []


async def test_long_task_of_a_live_worker_is_never_recovered(
    rclient: Client, redis_url: str, procs: list[subprocess.Popen[bytes]]
) -> None:
    procs.append(spawn(redis_url, "rk", "long", lease_ms=LEASE_MS))
    await wait_registered(rclient, ["long"])
    # one reaper as configured, one that examines every delivery (min idle 1 ms): the script's
    # own lease check must keep both away from the healthy task
    async with (
        reaper_loop(redis_url, "rk", lease_ms=LEASE_MS, interval_ms=100) as normal,
        reaper_loop(redis_url, "rk", lease_ms=LEASE_MS, interval_ms=100, min_idle_ms=1,
                    guard=False) as eager,
    ):  # fmt: skip
        tid = await rclient.enqueue("sleep", {"s": 5 * LEASE_MS / 1000, "steps": 10})
        info = await rclient.wait(tid, timeout_ms=20_000)
    assert info.state == "SUCCEEDED" and info.result["attempt"] == 1
    assert info.result["worker"] == "long"
    events = [e.event for e in await rclient.history(tid) if not e.rejected]
    assert "RECLAIM" not in events and events[:2] == ["ENQUEUE", "START"]
    for r in (normal, eager):
        assert r.totals["retried"] == 0 and r.totals["failed"] == 0
    assert eager.totals["alive"] > 0  # it did look, and left it alone


async def test_two_reapers_sweeping_at_once_recover_each_task_once(
    rclient: Client, redis_url: str, procs: list[subprocess.Popen[bytes]]
) -> None:
    w = spawn(redis_url, "rk", "doomed", lease_ms=LEASE_MS, conc=6)
    procs.append(w)
    await wait_registered(rclient, ["doomed"])
    ids = [await rclient.enqueue("sleep", {"s": 60}) for _ in range(6)]
    for tid in ids:
        await wait_for_state(rclient, tid, "RUNNING")
    w.send_signal(signal.SIGKILL)
    w.wait(10)
    settings = Settings(namespace="rk", retention_ms=60_000)
    config = ReaperConfig(lease_ms=LEASE_MS, guard=False)
    reapers = [Reaper(url=redis_url, settings=settings, config=config) for _ in range(3)]
    try:
        deadline = time.monotonic() + 10
        while sum(r.totals["retried"] for r in reapers) < len(ids):
            assert time.monotonic() < deadline
            await asyncio.gather(*(r.sweep_once() for r in reapers))
            await asyncio.sleep(0.05)
        # and a few more rounds: nothing more to recover
        for _ in range(3):
            await asyncio.gather(*(r.sweep_once() for r in reapers))
    finally:
        for r in reapers:
            await r.close()
    assert sum(r.totals["retried"] for r in reapers) == len(ids)
    for tid in ids:
        entries = await rclient.history(tid)
        assert [e.event for e in entries if e.event == "RECLAIM"] == ["RECLAIM"]
        info = await rclient.get(tid)
        assert info.state == "PENDING" and info.failures == 1
    # the queue holds exactly one live entry per task, none delivered
    assert await rclient.redis.xlen(rclient.keys.queue("default")) == len(ids)


async def test_guard_key_lets_one_reaper_do_a_sweep(rclient: Client, redis_url: str) -> None:
    settings = Settings(namespace="rk")
    config = ReaperConfig(interval_ms=5000)
    a = Reaper(url=redis_url, settings=settings, config=config, name="ra")
    b = Reaper(url=redis_url, settings=settings, config=config, name="rb")
    try:
        ra, rb = await asyncio.gather(a.sweep_once(), b.sweep_once())
        assert sorted([ra.skipped, rb.skipped]) == [False, True]
        skipped = ra if ra.skipped else rb
        assert skipped.guard_holder in ("ra", "rb") and skipped.guard_holder != skipped.reaper
        # the holder may sweep again within its own guard
        holder = a if skipped is rb else b
        assert not (await holder.sweep_once()).skipped
    finally:
        await a.close()
        await b.close()
