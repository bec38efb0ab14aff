"""rsjobs on the session's Redis Cluster (3 masters + 3 replicas): connections, the task
life cycle with a worker, cancel and pause notices, a reaper recovering a SIGKILLed
worker, deadlines, SSE with resume, workflows, health checks and the CLI."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis as sync_redis

from rsjobs import Client, Settings, Worker, connect
from rsjobs.cli import main as cli_main
from rsjobs.store import Store
from rsjobs.store.cluster import ClusterRedis, slot_of
from rsjobs.store.connection import describe
from rsjobs.store.keys import Keys
from rsjobs.workflows import Stage, TaskSpec, WorkflowClient, WorkflowDefinition
from tests.support.apps import tasks
from tests.support.processes import ROOT, stop_process, wait_for_state
from tests.support.reaper import reaper_loop, spawn, terminal_transitions, wait_registered
from tests.support.reference import replay
from tests.support.web import ALICE, SSEEvent, SSEReader, make_app, serve
from tests.support.wf_fixtures import running_driver, wait_status
from tests.support.wf_fixtures import running_worker as wf_worker
from tools.topology import Cluster

NS = "t"


@pytest.fixture
async def client(cluster_url: str) -> AsyncIterator[Client]:
    c = Client.from_url(cluster_url, namespace=NS)
    yield c
    await c.close()


@contextlib.asynccontextmanager
async def running_worker(url: str, **kw: Any) -> AsyncIterator[Worker]:
    opts: dict[str, Any] = {
        "concurrency": 4,
        "lease_ms": 2000,
        "handle_signals": False,
        "promote_ms": 20,
        "settings": Settings(namespace=NS),
    }
    opts.update(kw)
    w = Worker(tasks, url=url, **opts)
    task = asyncio.create_task(w.run())
    try:
        yield w
    finally:
        w.stop()
        await asyncio.wait_for(task, 20)
        await w.redis.aclose()


def owner_and_other(cluster: Cluster, namespace: str = NS) -> tuple[int, int]:
    """The port of the master serving ``namespace``, and of another master."""
    owner = cluster.owner(slot_of(Keys(namespace).layout))
    return owner, next(m for m in cluster.masters() if m != owner)


# -- connections ---------------------------------------------------------------------------


async def test_connect_finds_the_cluster_from_any_node(
    redis_cluster: Cluster, cluster_url: str
) -> None:
    """A ``redis+cluster://`` URL and a plain URL of any node (master or replica) both
    make a cluster client; the namespace's keys all live on the master of its slot."""
    replica = next(r for _, _, _, rs in redis_cluster.view() for r in rs)
    for url in (cluster_url, redis_cluster.node_url(replica)):
        redis = connect(url)
        assert isinstance(redis, ClusterRedis), url
        assert "per master" in describe(redis, url)
        c = Client(redis, Settings(namespace=NS))
        tid = await c.enqueue("noop", {"x": 1})
        assert (await c.get(tid)).state == "PENDING"
        # the script went over the pipelined connection of the namespace's master
        node = await redis.node_for(c.keys.layout)
        assert node.lane is not None and node.lane._proto is not None
        await c.close()
    owner, other = owner_and_other(redis_cluster)
    on_owner = sync_redis.Redis(port=owner, decode_responses=True)
    on_other = sync_redis.Redis(port=other, decode_responses=True)
    try:
        assert any(k.startswith("rsjobs:{t}:") for k in on_owner.keys("*"))
        assert on_other.keys("*") == []
    finally:
        on_owner.close()
        on_other.close()


async def test_read_pipelines_and_multi_run_on_the_owner(client: Client) -> None:
    """The store's read pipelines (GET /tasks/{id}'s, the overview's) and a MULTI work on
    a cluster client; a pipeline across two slots is refused (CROSSSLOT, as Redis refuses
    a MULTI) rather than split."""
    tid = await client.enqueue("noop", {"x": 1}, labels={"a": "b"})
    info, recent = await client.store.tasks.view(tid, 5) or (None, [])
    assert info is not None and info.state == "PENDING" and recent[0].event == "ENQUEUE"
    assert (await client.store.tasks.overview()).queues == ["default"]
    async with client.redis.pipeline(transaction=True) as pipe:
        pipe.hget(client.keys.task(tid), "c")
        pipe.exists(client.keys.layout)
        created, marked = await pipe.execute()
    assert created and marked == 1
    async with client.redis.pipeline(transaction=True) as pipe:
        pipe.get("rsjobs:{a}:x")
        pipe.get("rsjobs:{b}:x")
        with pytest.raises(sync_redis.ResponseError, match="same slot"):
            await pipe.execute()


# -- the life cycle ------------------------------------------------------------------------


async def test_enqueue_with_dedup_and_delay_then_a_worker_runs_them(
    client: Client, cluster_url: str
) -> None:
    first = await client.enqueue("noop", {"x": 1}, dedup_key="same")
    assert await client.enqueue("noop", {"x": 1}, dedup_key="same") == first
    delayed = await client.enqueue("noop", {"x": 3}, delay_ms=300)
    assert (await client.get(delayed)).state == "SCHEDULED"
    async with running_worker(cluster_url):
        for tid in (first, delayed):
            info = await client.wait(tid, timeout_ms=15_000)
            assert info.state == "SUCCEEDED", info
            entries = await client.history(tid)
            assert len(terminal_transitions(entries)) == 1 and replay(entries) == []
    events = [e.event for e in await client.history(delayed)]
    assert events[:2] == ["ENQUEUE", "PROMOTE"]


async def test_cancel_and_pause_reach_the_handler_within_a_second(
    client: Client, cluster_url: str
) -> None:
    """The notices travel over pub/sub on the cluster: with a 30 s lease (a heartbeat
    every 10 s) a cancel stops a running handler well within a second, and so does a
    pause."""
    async with running_worker(cluster_url, lease_ms=30_000, concurrency=2) as w:
        await asyncio.sleep(0.3)  # the control channel is subscribed
        for action, state in (("cancel", "CANCELLED"), ("pause", "PAUSED")):
            tid = await client.enqueue("sleep", {"s": 30})
            await wait_for_state(client, tid, "RUNNING", timeout=15)
            t0 = time.monotonic()
            assert await getattr(client, action)(tid) == state
            while tid in w.jobs:
                await asyncio.sleep(0.005)
                assert time.monotonic() - t0 < 1.0, f"{action} did not reach the handler"
            assert (await client.get(tid)).state == state


async def test_a_sigkilled_workers_task_is_recovered_by_the_reaper(
    client: Client, cluster_url: str
) -> None:
    procs = {n: spawn(cluster_url, NS, n, lease_ms=1000) for n in ("ka", "kb")}
    try:
        await wait_registered(client, list(procs), timeout=30)
        async with reaper_loop(cluster_url, NS, lease_ms=1000):
            tid = await client.enqueue("sleep", {"s": 1.0, "steps": 5})
            running = await wait_for_state(client, tid, "RUNNING", timeout=15)
            victim = procs[running.worker]
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)
            info = await client.wait(tid, timeout_ms=20_000)
        assert info.state == "SUCCEEDED" and info.attempt == 2
        entries = await client.history(tid)
        assert [e.event for e in entries].count("RECLAIM") == 1
        assert len(terminal_transitions(entries)) == 1 and replay(entries) == []
    finally:
        for p in procs.values():
            stop_process(p)


async def test_deadlines_end_work_on_time(client: Client, cluster_url: str) -> None:
    """An execution deadline ends a running attempt (TIMED_OUT); a queue-wait deadline
    expires a task nobody started, by the reaper's sweep."""
    async with running_worker(cluster_url):
        tid = await client.enqueue("sleep", {"s": 5}, timeout_ms=200, max_attempts=1)
        assert (await client.wait(tid, timeout_ms=10_000)).state == "TIMED_OUT"
    expiring = await client.enqueue("noop", {}, queue="nobody", wait_timeout_ms=200)
    async with reaper_loop(cluster_url, NS, lease_ms=1000):
        info = await client.wait(expiring, timeout_ms=10_000)
    assert info.state == "TIMED_OUT"


async def test_sse_resumes_after_disconnects(client: Client, cluster_url: str) -> None:
    """GET /tasks/{id}/events on a cluster: resumed with Last-Event-ID after each
    disconnect, the events are exactly the task's history, then the end."""
    got: list[SSEEvent] = []
    with serve(make_app(cluster_url, keepalive_ms=200)) as web:
        async with (
            httpx.AsyncClient(base_url=web.url, timeout=10) as http,
            running_worker(cluster_url),
        ):
            r = await http.post(
                "/tasks", json={"type": "sleep", "payload": {"s": 0.8, "steps": 8}}, headers=ALICE
            )
            assert r.status_code == 202, r.text
            tid = r.json()["id"]
            assert (await http.get(f"/tasks/{tid}", headers=ALICE)).status_code == 200
            while not got or got[-1].event != "end":
                headers = dict(ALICE)
                if got:
                    headers["Last-Event-ID"] = got[-1].id
                async with http.stream("GET", f"/tasks/{tid}/events", headers=headers) as s:
                    assert s.status_code == 200
                    got += await SSEReader(s).take(3)
    history = await client.history(tid)
    messages = [e for e in got if e.event == "message"]
    assert [e.id for e in messages] == [h.id for h in history]
    assert got[-1].json() == {"state": "SUCCEEDED", "progress": 100.0}


async def test_a_workflow_runs_to_ready(cluster_url: str) -> None:
    d = WorkflowDefinition(
        "two", [Stage("a", [TaskSpec(item="x", type="wf.make")], queue="wf"),
                Stage("b", [TaskSpec(item="y", type="wf.make")], queue="wf")],
    )  # fmt: skip
    wf = WorkflowClient(connect(cluster_url), Settings(namespace=NS), definitions=[d])
    try:
        async with wf_worker(cluster_url), running_driver(cluster_url):
            wid = await wf.start("two", {"name": "Mei"})
            doc = await wait_status(wf, wid, "READY_TO_PUBLISH", timeout=30)
        assert doc.version == 1 and len(doc.completed_assets) == 2
        assert (await wf.publish(wid)) == "PUBLISHED"
    finally:
        await wf.close()


# -- health and the CLI --------------------------------------------------------------------


async def test_healthz_checks_the_node_that_owns_the_namespace(
    redis_cluster: Cluster, cluster_url: str
) -> None:
    """/healthz of a cluster app is ok; a standalone client of a master that does not
    own the namespace's slot is unhealthy (it answers MOVED), not ok."""
    _, other = owner_and_other(redis_cluster)
    with serve(make_app(cluster_url)) as web:
        async with httpx.AsyncClient(timeout=10) as http:
            r = await http.get(f"{web.url}/healthz")
        assert r.status_code == 200 and r.json()["redis"] == "ok"
    wrong = Store(connect(redis_cluster.node_url(other), cluster=False), Settings(namespace=NS))
    try:
        with pytest.raises(OSError, match="MOVED"):
            await wrong.ping()
    finally:
        await wrong.close()


def test_cli_says_what_a_moved_means(
    redis_cluster: Cluster, cluster_url: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """A plain URL whose node is not asked whether it is a cluster node: the CLI explains
    the MOVED it meets in plain words (and the healthcheck too); asked, it just works."""
    from rsjobs.store import connection

    _, other = owner_and_other(redis_cluster)
    url = redis_cluster.node_url(other)
    monkeypatch.setattr(connection, "detect_cluster", lambda *a, **k: None)
    assert cli_main(["--url", url, "--namespace", NS, "enqueue", "noop"]) == 3
    err = capsys.readouterr().err.strip()
    assert err.startswith("rsjobs: this Redis is a cluster node (it answered MOVED")
    assert f"connect with redis+cluster://127.0.0.1:{other}" in err
    assert cli_main(["--url", url, "--namespace", NS, "healthcheck"]) == 3
    assert capsys.readouterr().out.startswith("unhealthy: this Redis is a cluster node")
    monkeypatch.undo()
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run(
        [sys.executable, "-m", "rsjobs", "--url", url, "--namespace", NS, "healthcheck"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out
