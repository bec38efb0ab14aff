"""Every passing reply a cluster, a failover or a restart answers (MOVED, ASK, TRYAGAIN,
CLUSTERDOWN, LOADING, READONLY, MASTERDOWN, UNBLOCKED) is passing for the clients, a
worker, a reaper and the web app: injected into every call of a client of the session's
Redis (pool, lane, pipelines, pub/sub), classed as redis-py 8 raises them and plain as
5.2 does. Each process logs, backs off and goes on, and works again once Redis does."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from rsjobs import Client, RedisUnavailable, Settings, Worker
from rsjobs.reaper import Reaper, ReaperConfig
from rsjobs.store.transient import is_transient, translate
from rsjobs.web import create_app
from rsjobs.workflows import WorkflowClient
from tests.support.apps import GATES, tasks
from tests.support.faults import PASSING_REPLIES, FaultyRedis, error_for
from tests.support.waits import wait_for_state
from tests.support.web import ADMIN, ALICE, TOKENS

NS = "t"
#: calls of the code under test that meet each fault before it is lifted
MET = 4
FAULTS = [(code, classed) for code in PASSING_REPLIES for classed in (True, False)]


def _id(f: tuple[str, bool]) -> str:
    return f"{f[0]}-{'classed' if f[1] else 'plain'}"


@pytest.mark.parametrize("fault", FAULTS, ids=_id)
def test_the_policy_calls_each_one_passing(fault: tuple[str, bool]) -> None:
    err = error_for(PASSING_REPLIES[fault[0]], fault[1])
    assert is_transient(err)
    out = translate(err, "x.lua")
    assert isinstance(out, RedisUnavailable) and fault[0] in str(out)


@pytest.fixture
async def faulty(redis_url: str) -> AsyncIterator[FaultyRedis]:
    r = FaultyRedis.from_url(
        redis_url, decode_responses=True, socket_timeout=5, retry=Retry(NoBackoff(), 0)
    )
    assert r.lane is not None
    yield r
    await r.aclose()


@pytest.fixture
async def healthy(client: Client) -> Client:
    return client


async def test_clients_raise_redis_unavailable_then_work_again(
    faulty: FaultyRedis, healthy: Client
) -> None:
    c = Client(faulty, Settings(namespace=NS))
    wf = WorkflowClient(faulty, Settings(namespace=NS))
    tid = await healthy.enqueue("noop", {})
    for code, classed in FAULTS:
        faulty.fault = error_for(PASSING_REPLIES[code], classed)
        for call in (lambda: c.enqueue("noop", {}), lambda: c.get(tid),
                     lambda: c.cancel(tid), wf.list):  # fmt: skip
            with pytest.raises(RedisUnavailable, match=code):
                await call()
        faulty.fault = None
        assert (await c.get(tid)).state == "PENDING"


async def test_a_worker_rides_through_each_one(
    faulty: FaultyRedis, healthy: Client, caplog: pytest.LogCaptureFixture
) -> None:
    """Each reply in turn, until the worker's calls met it several times (reads, starts,
    heartbeats, the control channel): the worker is still running, logged nothing but
    warnings about it, and runs the task submitted after each one."""
    w = Worker(tasks, redis=faulty, settings=Settings(namespace=NS), lease_ms=1000,
               heartbeat_ms=50, block_ms=100, promote_ms=50, handle_signals=False)  # fmt: skip
    run = asyncio.create_task(w.run())
    caplog.set_level(logging.WARNING, logger="rsjobs")
    gate = f"passing-{uuid.uuid4().hex}"
    try:
        # held until cancelled: its heartbeats meet them all
        running = await healthy.enqueue("gated", {"gate": gate})
        await wait_for_state(healthy, running, "RUNNING")
        for code, classed in FAULTS:
            faulty.fault = error_for(PASSING_REPLIES[code], classed)
            await faulty.met(faulty.raised + MET)
            faulty.fault = None
            assert not run.done(), f"the worker stopped on {code}"
            tid = await healthy.enqueue("noop", {"code": code})
            assert (await healthy.wait(tid, timeout_ms=15_000)).state == "SUCCEEDED"
        t0 = time.monotonic()
        await healthy.cancel(running)
        while running in w.jobs:  # the control channel listens again
            await asyncio.sleep(0.01)
            assert time.monotonic() - t0 < 2.0
    finally:
        GATES.pop(gate, None)
        w.stop()
        await asyncio.wait_for(run, 20)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    # a result whose write met the fault is dropped for the reaper: said, not raised
    assert all("dropping" in r.getMessage() for r in errors), [r.getMessage() for r in errors]


async def test_a_reaper_rides_through_each_one(faulty: FaultyRedis) -> None:
    config = ReaperConfig(interval_ms=50, lease_ms=1000)
    reaper = Reaper(redis=faulty, settings=Settings(namespace=NS), config=config)
    swept = asyncio.Event()
    real_sweep = reaper.sweep_once

    async def sweep() -> Any:
        report = await real_sweep()  # (raises while the fault is on: no event then)
        swept.set()
        return report

    reaper.sweep_once = sweep  # type: ignore[method-assign]
    run = asyncio.create_task(reaper.run())
    try:
        for code, classed in FAULTS:
            faulty.fault = error_for(PASSING_REPLIES[code], classed)
            with pytest.raises(RedisUnavailable, match=code):
                await reaper.sweep_once()
            await faulty.met(faulty.raised + 1)  # its loop's next sweep meets it too
            faulty.fault = None
            swept.clear()
            await asyncio.wait_for(swept.wait(), 10)  # a whole sweep after it, in its loop
            assert not faulty.fault
            assert not run.done()
        assert reaper.totals["sweep_errors"] == 0
    finally:
        reaper.stop()
        await asyncio.wait_for(run, 10)
        await reaper.close()


async def test_the_web_app_answers_503_then_200(faulty: FaultyRedis, healthy: Client) -> None:
    tid = await healthy.enqueue("noop", {}, owner="alice")
    app = create_app(redis=faulty, namespace=NS, tokens=TOKENS, admin_token=ADMIN, env={})
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://rsjobs.test") as http:
        for code, classed in FAULTS:
            faulty.fault = error_for(PASSING_REPLIES[code], classed)
            assert (await http.get(f"/tasks/{tid}", headers=ALICE)).status_code == 503, code
            r = await http.post("/tasks", json={"type": "noop"}, headers=ALICE)
            assert r.status_code == 503 and r.json()["error"] == "redis_unavailable", code
            assert (await http.get("/healthz")).status_code == 503, code
            faulty.fault = None
            assert (await http.get(f"/tasks/{tid}", headers=ALICE)).status_code == 200
            assert (await http.get("/healthz")).status_code == 200
    await app.state.rsjobs.aclose()
