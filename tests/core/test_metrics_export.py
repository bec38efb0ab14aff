"""Prometheus metrics per stage and type, exported by workers and reapers too: a worker
with ``metrics_port`` and a reaper with one serve what they read from Redis (attempts per
category, their durations, charges, retries, backlog and oldest pending age, workflow
durations) plus their own counters; ``rsjobs worker|reaper --metrics-port`` serve them on
127.0.0.1; the web app's ``/metrics`` has the same namespace figures."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rsjobs import Client, Settings, Worker
from rsjobs.reaper import Reaper, ReaperConfig
from rsjobs.server import EmbeddedRedis, free_port
from rsjobs.workflows import WorkflowClient
from tests.support.apps import tasks
from tests.support.processes import said, spawn_worker, stop_process
from tests.support.reaper import spawn_reaper
from tests.support.waits import poll_until
from tests.support.web import ROOT, TestClient, make_app
from tests.support.wf_fixtures import NS

pytestmark = pytest.mark.integration

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def get(m: Samples, metric: str, /, **labels: str) -> float:
    return m[(metric, tuple(sorted(labels.items())))]


async def scrape(port: int, path: str = "/metrics") -> Samples:
    async with httpx.AsyncClient() as http:
        r = await http.get(f"http://127.0.0.1:{port}{path}", timeout=10)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return samples(r.text)


@pytest.fixture
async def worker(redis_url: str) -> AsyncIterator[Worker]:
    w = Worker(tasks, url=redis_url, settings=Settings(namespace="t"), handle_signals=False,
               metrics_port=0, promote_ms=20)  # fmt: skip
    run = asyncio.create_task(w.run())
    deadline = time.monotonic() + 10
    while w.metrics_server is None:
        assert time.monotonic() < deadline and not run.done()
        await asyncio.sleep(0.02)
    yield w
    w.stop()
    await asyncio.wait_for(run, 20)
    await w.redis.aclose()


def _port(server: Any) -> int:
    return int(server.sockets[0].getsockname()[1])


async def test_a_worker_serves_the_stage_and_type_metrics_and_its_own(
    worker: Worker, client: Client
) -> None:
    ok = await client.enqueue("charge", {"charges": {"gpu_s": 1.5}})
    retried = await client.enqueue(
        "charge", {"charges": {"gpu_s": 2}, "until": 2}, backoff_base_ms=10, backoff_max_ms=10
    )
    for tid in (ok, retried):
        assert (await client.wait(tid, timeout_ms=15_000)).state == "SUCCEEDED"
    cold = await client.enqueue("noop", None, queue="cold")  # no worker serves "cold"
    await asyncio.sleep(0.3)
    m = await scrape(_port(worker.metrics_server))
    # attempts per category, per queue and per type; the failure rate's parts
    for by, name in (("queue", "default"), ("type", "charge")):
        assert get(m, "rsjobs_attempts_total", by=by, name=name, category="ok") == 2
        assert get(m, "rsjobs_attempts_total", by=by, name=name, category="failed") == 1
        assert get(m, "rsjobs_charges_total", by=by, name=name, unit="gpu_s", category="ok") == 3.5
        assert get(m, "rsjobs_charges_total", by=by, name=name, unit="gpu_s",
                   category="failed") == 2  # fmt: skip
        assert get(m, "rsjobs_retries_total", by=by, name=name) == 1
        assert get(m, "rsjobs_attempt_duration_seconds_count", by=by, name=name) == 3
        assert get(m, "rsjobs_attempt_duration_seconds_bucket", by=by, name=name, le="+Inf") == 3
        run_s = get(m, "rsjobs_attempt_run_seconds_total", by=by, name=name, category="ok")
        assert 0 <= run_s < 5
    # owners are not labels (unbounded): the API has their totals
    assert not [k for k in m if ("by", "owner") in k[1]]
    # the backlog and how long its oldest entry has waited
    assert get(m, "rsjobs_queue_depth", queue="cold") == 1
    assert get(m, "rsjobs_queue_oldest_pending_age_seconds", queue="cold") >= 0.3
    assert get(m, "rsjobs_queue_oldest_pending_age_seconds", queue="default") == 0
    # this worker's own counters
    assert get(m, "rsjobs_worker_attempts_total", type="charge", end="COMPLETE") == 2
    assert get(m, "rsjobs_worker_attempts_total", type="charge", end="FAIL") == 1
    assert get(m, "rsjobs_worker_charges_total", type="charge", unit="gpu_s") == 5.5
    assert get(m, "rsjobs_worker_handler_seconds_count", type="charge") == 3
    assert get(m, "rsjobs_worker_slots") == worker.concurrency
    assert cold  # (left waiting)
    # anything but GET /metrics
    async with httpx.AsyncClient() as http:
        base = f"http://127.0.0.1:{_port(worker.metrics_server)}"
        assert (await http.get(base + "/nope")).status_code == 404
        assert (await http.post(base + "/metrics")).status_code == 405


async def test_a_reaper_serves_the_namespace_and_its_sweeps(
    redis_url: str, client: Client, wf: WorkflowClient
) -> None:
    wid = await wf.start("character", {"name": "Mei"})
    assert await wf.cancel(wid, "changed my mind") == "CANCELLED"
    reaper = Reaper(url=redis_url, settings=Settings(namespace=NS),
                    config=ReaperConfig(interval_ms=50), metrics_port=0)  # fmt: skip
    run = asyncio.create_task(reaper.run())
    try:
        deadline = time.monotonic() + 10
        while reaper.metrics_server is None or reaper.sweeps < 2:
            assert time.monotonic() < deadline and not run.done()
            await asyncio.sleep(0.02)
        m = await scrape(_port(reaper.metrics_server))
    finally:
        reaper.stop()
        await asyncio.wait_for(run, 10)
        await reaper.close()
    assert get(m, "rsjobs_reaper_sweeps_total") >= 2
    assert ("rsjobs_reaper_actions_total", (("action", "promoted"),)) in m
    assert get(m, "rsjobs_redis_up") == 1
    # the workflow's start to finish; its cancelled task is a CANCEL of an unstarted task:
    # no attempt
    assert get(m, "rsjobs_workflow_duration_seconds_count", definition="character",
               status="CANCELLED") == 1  # fmt: skip
    assert get(m, "rsjobs_tasks_finished_total", queue="wf", state="CANCELLED") == 1


async def test_the_cli_processes_serve_metrics_on_loopback(redis_url: str) -> None:
    """Each process is scraped once its log (read as it writes it) says where it serves."""
    wport, rport = free_port(), free_port()
    procs = [
        spawn_worker(redis_url, "t", "--metrics-port", str(wport), stderr=subprocess.PIPE,
                     log_level="INFO"),
        spawn_reaper(redis_url, "t", None, "--interval-ms", "100", "--metrics-port", str(rport)),
    ]  # fmt: skip
    try:
        async with asyncio.timeout(30):
            await said(procs[0], b"metrics at http://127.0.0.1:%d/metrics" % wport)
            await said(procs[1], b'"url":"http://127.0.0.1:%d/metrics"' % rport)
        w = await scrape(wport)
        assert get(w, "rsjobs_redis_up") == 1 and ("rsjobs_worker_slots", ()) in w
        r = await scrape(rport)
        assert get(r, "rsjobs_redis_up") == 1 and ("rsjobs_reaper_sweeps_total", ()) in r
        # the probes beside: live and ready (each has reached Redis by now)
        async with httpx.AsyncClient(timeout=2) as http:
            for port in (wport, rport):
                for probe in ("/livez", "/readyz"):
                    got = await http.get(f"http://127.0.0.1:{port}{probe}")
                    assert got.status_code == 200, (port, probe, got.text)
            # a worker that does not run (SIGSTOP: as hung as a process can be) answers
            # no probe, so its liveness probe fails
            os.kill(procs[0].pid, signal.SIGSTOP)
            try:
                with pytest.raises(httpx.TimeoutException):
                    await http.get(f"http://127.0.0.1:{wport}/livez", timeout=0.5)
            finally:
                os.kill(procs[0].pid, signal.SIGCONT)
    finally:
        for p in procs:
            stop_process(p)
            if p.stderr is not None:
                p.stderr.close()


async def test_a_worker_is_live_but_not_ready_while_redis_is_gone() -> None:
    """Redis stops answering: the worker's loop turns on (live) while its registrations
    fail (not ready, once the probes' slack has passed: an injected clock); Redis back,
    ready again."""
    server = EmbeddedRedis().start()
    w = Worker(tasks, url=server.url, settings=Settings(namespace="pr"), handle_signals=False,
               metrics_port=0, heartbeat_ms=50, lease_ms=2000)  # fmt: skip
    clock = [1000.0]
    w.probes.clock = lambda: clock[0]
    w.probes.beat_at = clock[0]
    run = asyncio.create_task(w.run())
    try:
        await poll_until(lambda: _answered(w, "/readyz", 200), 10, "ready")
        server.stop()
        clock[0] += w.probes.stale_s + 1  # the slack has passed, Redis still gone
        await poll_until(lambda: _answered(w, "/readyz", 503), 10, "not ready")
        assert await _answered(w, "/livez", 200)
        server.start()
        await poll_until(lambda: _answered(w, "/readyz", 200), 20, "ready again")
    finally:
        w.stop()
        await asyncio.wait_for(run, 20)
        await w.redis.aclose()
        server.cleanup()


async def _answered(w: Worker, probe: str, status: int) -> bool:
    if w.metrics_server is None:
        return False
    async with httpx.AsyncClient(timeout=2) as http:
        got = await http.get(f"http://127.0.0.1:{_port(w.metrics_server)}{probe}")
    return got.status_code == status


async def test_the_web_metrics_have_the_same_namespace_figures(
    worker: Worker, client: Client, redis_url: str
) -> None:
    tid = await client.enqueue("charge", {"charges": {"usd": 0.25}})
    await client.wait(tid, timeout_ms=15_000)
    with TestClient(make_app(redis_url)) as tc:
        web = samples(tc.get("/metrics", headers=ROOT).text)
    own = await scrape(_port(worker.metrics_server))
    for key in (
        ("rsjobs_charges_total", {"by": "type", "name": "charge", "unit": "usd", "category": "ok"}),
        ("rsjobs_attempts_total", {"by": "queue", "name": "default", "category": "ok"}),
    ):
        name, labels = key
        assert get(web, name, **labels) == get(own, name, **labels)
    assert get(web, "rsjobs_charges_total", by="type", name="charge", unit="usd",
               category="ok") == 0.25  # fmt: skip


async def test_a_metrics_port_that_cannot_be_used_is_a_config_error(redis_url: str) -> None:
    from rsjobs import ConfigError

    with pytest.raises(ConfigError, match="metrics_port"):
        Worker(tasks, url=redis_url, metrics_port=70_000)
    with pytest.raises(ConfigError, match="metrics_port"):
        Reaper(url=redis_url, metrics_port=-1)
    # a port another process listens on: the worker says so and stops, writing nothing
    # of its tasks
    blocker = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = blocker.sockets[0].getsockname()[1]
    try:
        w = Worker(tasks, url=redis_url, settings=Settings(namespace="t"), handle_signals=False,
                   metrics_port=port)  # fmt: skip
        with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{port}"):
            await asyncio.wait_for(w.run(), 20)
        await w.redis.aclose()
    finally:
        blocker.close()
