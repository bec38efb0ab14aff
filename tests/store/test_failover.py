"""Redis freezes and failovers, with real processes: the web app answers 503 in bounded
time while Redis is frozen; workers, reapers and waiting clients ride through Sentinel
failovers; durable mode acknowledges a write only once a replica has it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import redis as sync_redis

from rsjobs import Client, NotReplicated, Settings, connect
from rsjobs.server import EmbeddedRedis, free_port
from rsjobs.store.record import field
from tests.support.processes import ROOT, said, spawn_worker, stop_process
from tests.support.reaper import spawn_reaper, wait_registered
from tests.support.waits import poll_until
from tools.topology import ReplicaSet

pytestmark = pytest.mark.integration

NS = "fo"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.fixture(scope="module")
def replica_set() -> Iterator[ReplicaSet]:
    with ReplicaSet(replicas=1, sentinels=3, appendonly=False) as rs:
        yield rs


@pytest.fixture
async def sclient(replica_set: ReplicaSet) -> AsyncIterator[Client]:
    c = Client(connect(replica_set.url), Settings(namespace=NS))
    await c.redis.flushall()
    replica_set.wait_synced()
    yield c
    await c.close()


async def blocked_in(client: Client, command: str, timeout: float = 20) -> None:
    """Until a connection of the server is blocked in ``command`` (CLIENT LIST: flag b)."""

    async def blocked() -> bool:
        clients = await client.redis.client_list()
        return any(c["cmd"] == command and "b" in c["flags"] for c in clients)

    await poll_until(blocked, timeout, f"a client blocked in {command}", every=0.01)


def _spawn_web(url: str, port: int) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "rsjobs", "--url", url, "--namespace", NS, "web",
           "--port", str(port), "--dev"]  # fmt: skip
    return subprocess.Popen(
        cmd, env=_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip


async def _web(url: str, port: int) -> subprocess.Popen[bytes]:
    """``rsjobs web`` up: it said it listens (its log, read as it writes it), and answers."""
    proc = _spawn_web(url, port)
    try:
        await asyncio.wait_for(said(proc, b"Uvicorn running on", 1), 60)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as c:
            assert (await c.get("/healthz")).status_code == 200
    except BaseException:
        _stop_web(proc)
        raise
    return proc


def _stop_web(proc: subprocess.Popen[bytes]) -> None:
    stop_process(proc, signal.SIGTERM)
    if proc.stderr is not None:
        proc.stderr.close()


async def test_web_answers_503_in_two_seconds_while_redis_is_frozen() -> None:
    """16 concurrent requests during a SIGSTOP of Redis: each gets 503 within the reply
    bound (2 s), none waits behind another; after SIGCONT the next request is served."""
    with EmbeddedRedis() as server:
        port = free_port()
        web = await _web(server.url, port)
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as c:
                tid = (await c.post("/tasks", json={"type": "x"})).json()["id"]
                assert server.proc is not None
                os.kill(server.proc.pid, signal.SIGSTOP)
                try:
                    t0 = time.monotonic()

                    async def one(i: int) -> tuple[int, float]:
                        path = [f"/tasks/{tid}", f"/tasks/{tid}/history", "/healthz"][i % 3]
                        if i % 4 == 3:
                            r = await c.post(f"/tasks/{tid}/cancel")
                        else:
                            r = await c.get(path)
                        return r.status_code, time.monotonic() - t0

                    answers = await asyncio.gather(*(one(i) for i in range(16)))
                finally:
                    os.kill(server.proc.pid, signal.SIGCONT)
                assert {code for code, _ in answers} == {503}, answers
                assert max(t for _, t in answers) < 3.0, answers
                t1 = time.monotonic()
                assert (await c.get(f"/tasks/{tid}")).status_code == 200
                assert time.monotonic() - t1 < 1.0
        finally:
            _stop_web(web)


async def test_worker_and_reaper_survive_failovers(
    replica_set: ReplicaSet, sclient: Client, tmp_path: object
) -> None:
    """A worker idle in a blocking read gets UNBLOCKED when its primary is demoted, and a
    busy one gets READONLY / dropped connections: both are transient. Two failovers later
    the same worker and reaper processes are alive and every task submitted succeeded."""
    url = replica_set.url
    worker = spawn_worker(url, NS, "--name", "fo-w1", "--lease-ms", "3000", "-c", "4")
    reaper = spawn_reaper(url, NS, str(tmp_path) + "/reaper.log", "--interval-ms", "200",
                          "--lease-ms", "3000")  # fmt: skip
    # submits confirmed by the replica (durable mode): without WAIT, one acknowledged by the
    # old primary just before its demotion is lost lawfully, and the test would wait for it
    durable = Client(sclient.redis, Settings(namespace=NS, wait_replicas=1, wait_timeout_ms=2000))

    async def submit(ttype: str, payload: dict[str, object]) -> str:
        for _ in range(100):
            try:
                return await durable.enqueue(ttype, payload)
            except NotReplicated:  # (WAIT has waited its 2 s: again at once)
                continue
            except OSError:  # while the new primary settles
                await asyncio.sleep(0.1)
        raise AssertionError("no submit confirmed in 100 attempts")

    try:
        await wait_registered(sclient, ["fo-w1"])
        ids = [await submit("noop", {"i": i}) for i in range(5)]
        for tid in ids:
            assert (await sclient.wait(tid, timeout_ms=20_000)).state == "SUCCEEDED"
        await blocked_in(sclient, "xread")  # the worker is idle, blocked in its XREAD
        for _ in range(2):
            busy = [await submit("sleep", {"s": 0.5, "steps": 5}) for _ in range(4)]
            await asyncio.to_thread(replica_set.failover)
            await asyncio.to_thread(replica_set.wait_synced)  # (durable submits need it)
            after = [await submit("noop", {"after": i}) for i in range(5)]
            for tid in busy + after:
                info = await sclient.wait(tid, timeout_ms=30_000)
                assert info.state == "SUCCEEDED", (tid, info.state, info.error)
            assert worker.poll() is None, "the worker exited on a failover"
            assert reaper.poll() is None, "the reaper exited on a failover"
    finally:
        stop_process(worker, signal.SIGTERM)
        stop_process(reaper, signal.SIGTERM)


async def test_wait_rides_through_a_failover(replica_set: ReplicaSet, sclient: Client) -> None:
    tid = await sclient.enqueue("noop", {})
    waiter = asyncio.create_task(sclient.wait(tid, timeout_ms=30_000))
    await blocked_in(sclient, "xread")  # the wait is blocked in XREAD on the events
    await asyncio.to_thread(replica_set.failover)
    assert not waiter.done()
    worker = spawn_worker(replica_set.url, NS, "--name", "fo-w2")
    try:
        assert (await waiter).state == "SUCCEEDED"
    finally:
        stop_process(worker, signal.SIGTERM)


async def test_durable_mode_waits_for_replicas(replica_set: ReplicaSet, sclient: Client) -> None:
    one = Client(connect(replica_set.url), Settings(namespace=NS, wait_replicas=1))
    two = Client(
        connect(replica_set.url), Settings(namespace=NS, wait_replicas=2, wait_timeout_ms=300)
    )
    try:
        tid = await one.enqueue("noop", {}, dedup_key="d1")
        # acknowledged: the replica has it (read it there, not on the primary)
        port = replica_set.primary_port()
        replica = next(n for n in replica_set.nodes if n.port != port)
        r = sync_redis.Redis(port=replica.port, decode_responses=True)
        assert r.hget(one.keys.task(tid), field("state")) == "PENDING"
        r.close()
        assert await one.cancel(tid) == "CANCELLED"
        t0 = time.monotonic()
        with pytest.raises(NotReplicated) as err:
            await two.enqueue("noop", {}, dedup_key="d2")
        assert time.monotonic() - t0 >= 0.3
        assert (err.value.acked, err.value.wanted) == (1, 2)
        # applied on the primary, not undone: a repeat with the key answers the same task
        applied = await sclient.redis.get(sclient.keys.dedup("d2"))
        assert applied is not None
        assert await one.enqueue("noop", {}, dedup_key="d2") == applied
    finally:
        await one.close()
        await two.close()


async def test_durable_mode_without_replicas_refuses_to_acknowledge(redis_url: str) -> None:
    c = Client(connect(redis_url), Settings(namespace=NS, wait_replicas=1, wait_timeout_ms=100))
    try:
        with pytest.raises(NotReplicated):
            await c.enqueue("noop", {})
    finally:
        await c.close()


def test_cli_rejects_bad_durable_settings(redis_url: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rsjobs", "--url", redis_url, "--wait-replicas", "-1",
         "enqueue", "noop"],
        capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip() == "rsjobs: wait_replicas must be between 0 and 100"


async def test_worker_outlives_redis_refusing_writes() -> None:
    """Redis out of memory (maxmemory reached, noeviction) refuses the worker's scripts:
    the worker logs, backs off and goes on; once memory is back the tasks run."""
    with EmbeddedRedis() as server:
        c = Client(connect(server.url), Settings(namespace=NS))
        ids = [await c.enqueue("noop", {"i": i}) for i in range(3)]
        await c.redis.config_set("maxmemory", "1")
        worker = spawn_worker(server.url, NS, "--name", "oom-w", "--lease-ms", "2000",
                              stderr=subprocess.PIPE)  # fmt: skip
        try:
            # its log, read as it writes it: it says Redis refused it, and waits
            await asyncio.wait_for(said(worker, b"when used memory > 'maxmemory'", 1), 30)

            async def refused_again() -> bool:  # and it tried again: OOM replies
                errors = await c.redis.info("errorstats")
                return int(errors.get("errorstat_OOM", {}).get("count", 0)) >= 3

            await poll_until(refused_again, 20, "more OOM replies", every=0.02)
            assert worker.poll() is None, "the worker exited on an OOM reply"
            assert (await c.get(ids[0])).state == "PENDING"
            await c.redis.config_set("maxmemory", "0")
            for tid in ids:
                assert (await c.wait(tid, timeout_ms=20_000)).state == "SUCCEEDED"
            assert worker.poll() is None
        finally:
            stop_process(worker, signal.SIGTERM)
            if worker.stderr is not None:
                worker.stderr.close()
            await c.close()


async def test_durable_mode_covers_workflow_starts(redis_url: str) -> None:
    from rsjobs.workflows import Stage, TaskSpec, WorkflowClient, WorkflowDefinition

    d = WorkflowDefinition("one", [Stage("s", [TaskSpec(item="a", type="noop")])])
    s = Settings(namespace=NS, wait_replicas=1, wait_timeout_ms=100)
    c = WorkflowClient(connect(redis_url), s, definitions=[d])
    try:
        with pytest.raises(NotReplicated):
            await c.start("one", {})
    finally:
        await c.close()
