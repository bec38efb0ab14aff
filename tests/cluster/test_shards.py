"""A namespace of 8 shards on the session's Redis Cluster (3 masters + 3 replicas): every
script and read pipeline touches one slot (a cluster answers CROSSSLOT otherwise), the
shards spread over the masters, and the life cycle holds: enqueue with dedup and delay,
workers, cancel within a second, a reaper recovering a SIGKILLed worker, deadlines, SSE
with resume, merged lists and health, workflows."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis as sync_redis

from rsjobs import Client, EnqueueRequest, Settings, Worker, connect
from rsjobs.store.cluster import slot_of
from rsjobs.store.shards import shard_of
from rsjobs.workflows import Stage, TaskSpec, WorkflowClient, WorkflowDefinition
from tests.support.apps import tasks
from tests.support.processes import stop_process, wait_for_state
from tests.support.reaper import reaper_loop, spawn, terminal_transitions, wait_registered
from tests.support.reference import replay
from tests.support.web import ALICE, SSEEvent, SSEReader, make_app, serve
from tests.support.wf_fixtures import running_worker as wf_worker
from tools.topology import Cluster

NS = "sh8"
S = 8


@pytest.fixture
async def client(cluster_url: str) -> AsyncIterator[Client]:
    c = Client(connect(cluster_url), Settings(namespace=NS, shards=S))
    await c.store.require_layout()  # creates the namespace's 8 shards
    yield c
    await c.close()


@contextlib.asynccontextmanager
async def running_worker(url: str, **kw: Any) -> AsyncIterator[Worker]:
    opts: dict[str, Any] = {
        "concurrency": 8,
        "lease_ms": 2000,
        "handle_signals": False,
        "promote_ms": 20,
        "settings": Settings(namespace=NS),  # (reads the shard count)
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


async def test_the_shards_spread_over_every_master(redis_cluster: Cluster, client: Client) -> None:
    shards = await client.store.open()
    owners = [redis_cluster.owner(slot_of(f"{{{t}}}")) for t in shards.tags]
    assert sorted(owners.count(m) for m in redis_cluster.masters()) == [2, 3, 3]
    ids = await client.enqueue_many([EnqueueRequest(type="noop", payload=i) for i in range(40)])
    assert {shard_of(t) for t in ids} == set(range(S))
    for m in redis_cluster.masters():
        r = sync_redis.Redis(port=m, decode_responses=True)
        try:
            assert any(k.startswith(f"rsjobs:{{{NS}") for k in r.keys("*")), m
        finally:
            r.close()


async def test_enqueue_with_dedup_and_delay_then_a_worker_runs_them(
    client: Client, cluster_url: str
) -> None:
    first = await client.enqueue("noop", {"x": 1}, dedup_key="same")
    assert await client.enqueue("noop", {"x": 1}, dedup_key="same") == first
    delayed = [await client.enqueue("noop", {"x": i}, delay_ms=300) for i in range(S)]
    bulk = await client.enqueue_many(
        [EnqueueRequest(type="noop", payload=i) for i in range(3 * S)], chunk=5
    )
    assert {shard_of(t) for t in [*delayed, *bulk]} == set(range(S))
    async with running_worker(cluster_url):
        for tid in [first, *delayed, *bulk]:
            info = await client.wait(tid, timeout_ms=15_000)
            assert info.state == "SUCCEEDED", info
            entries = await client.history(tid)
            assert len(terminal_transitions(entries)) == 1 and replay(entries) == []
    assert [e.event for e in await client.history(delayed[0])][:2] == ["ENQUEUE", "PROMOTE"]
    stats = await client.stats()
    assert stats["default"]["SUCCEEDED"] == 1 + 4 * S
    page = await client.list_tasks(state="SUCCEEDED", limit=10)
    assert len(page.items) == 10 and page.cursor is not None


async def test_cancel_reaches_the_handler_within_a_second_on_every_shard(
    client: Client, cluster_url: str
) -> None:
    placed = await client.store.open()
    keys = {}  # a shard key per shard: one task on each shard (S slots: all run at once;
    # tasks of two shards have no order between them, so more would not say which run)
    for i in range(10_000):
        keys.setdefault(placed.place(shard_key=f"k{i}"), f"k{i}")
    async with running_worker(cluster_url, lease_ms=30_000, concurrency=S) as w:
        await asyncio.sleep(0.3)  # the control channels are subscribed
        ids = [await client.enqueue("sleep", {"s": 30}, shard_key=keys[k]) for k in range(S)]
        assert [shard_of(t) for t in ids] == list(range(S))
        for tid in ids:
            await wait_for_state(client, tid, "RUNNING", timeout=15)
        for tid in ids:
            t0 = time.monotonic()
            assert await client.cancel(tid) == "CANCELLED"
            while tid in w.jobs:
                await asyncio.sleep(0.005)
                assert time.monotonic() - t0 < 1.0, f"cancel on shard {shard_of(tid)} was late"


async def test_a_sigkilled_workers_task_is_recovered_by_the_reaper(
    client: Client, cluster_url: str
) -> None:
    procs = {n: spawn(cluster_url, NS, n, lease_ms=1000) for n in ("ka", "kb")}
    try:
        await wait_registered(client, list(procs), timeout=30)
        async with reaper_loop(cluster_url, NS, lease_ms=1000):
            ids = [await client.enqueue("sleep", {"s": 1.0, "steps": 5}) for _ in range(4)]
            running = [await wait_for_state(client, t, "RUNNING", timeout=15) for t in ids]
            victim = procs[running[0].worker]
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)
            infos = [await client.wait(t, timeout_ms=25_000) for t in ids]
        assert all(i.state == "SUCCEEDED" for i in infos), infos
        assert infos[0].attempt == 2
        for t in ids:
            entries = await client.history(t)
            assert len(terminal_transitions(entries)) == 1 and replay(entries) == []
    finally:
        for p in procs.values():
            stop_process(p)


async def test_deadlines_end_work_on_time(client: Client, cluster_url: str) -> None:
    async with running_worker(cluster_url):
        ids = [
            await client.enqueue("sleep", {"s": 5}, timeout_ms=200, max_attempts=1)
            for _ in range(3)
        ]
        for tid in ids:
            assert (await client.wait(tid, timeout_ms=10_000)).state == "TIMED_OUT"
    expiring = [
        await client.enqueue("noop", {}, queue="nobody", wait_timeout_ms=200) for _ in range(S)
    ]
    async with reaper_loop(cluster_url, NS, lease_ms=1000):
        for tid in expiring:
            assert (await client.wait(tid, timeout_ms=10_000)).state == "TIMED_OUT"


async def test_sse_lists_and_health_on_a_sharded_namespace(
    client: Client, cluster_url: str
) -> None:
    got: list[SSEEvent] = []
    with serve(make_app(cluster_url, namespace=NS, keepalive_ms=200)) as web:
        async with (
            httpx.AsyncClient(base_url=web.url, timeout=10) as http,
            running_worker(cluster_url),
        ):
            health = await http.get("/healthz")
            assert health.status_code == 200 and health.json()["redis"] == "ok", health.text
            ids = []
            for i in range(3):
                r = await http.post(
                    "/tasks",
                    json={"type": "sleep", "payload": {"s": 0.6, "steps": 6}, "shard_key": f"{i}"},
                    headers=ALICE,
                )
                assert r.status_code == 202, r.text
                ids.append(r.json()["id"])
            tid = ids[0]
            finished = False  # a resume after the last entry of a finished task: 204
            while not finished and (not got or got[-1].event != "end"):
                headers = dict(ALICE)
                if got:
                    headers["Last-Event-ID"] = got[-1].id
                async with http.stream("GET", f"/tasks/{tid}/events", headers=headers) as s:
                    finished = s.status_code == 204
                    assert finished or s.status_code == 200, s.status_code
                    if not finished:
                        got += await SSEReader(s).take(3)
            for t in ids:
                await client.wait(t, timeout_ms=15_000)
            listed = await http.get("/tasks", params={"limit": 2}, headers=ALICE)
            assert listed.status_code == 200, listed.text
            body = listed.json()
            assert len(body["items"]) == 2 and body["cursor"]
            more = await http.get(
                "/tasks", params={"limit": 10, "cursor": body["cursor"]}, headers=ALICE
            )
            assert {t["id"] for t in body["items"] + more.json()["items"]} == set(ids)
            bad = await http.get("/tasks", params={"cursor": "bm9wZQ"}, headers=ALICE)
            assert bad.status_code == 400, bad.text
    history = await client.history(tid)
    messages = [e for e in got if e.event == "message"]
    assert [e.id for e in messages] == [h.id for h in history]
    if finished:
        assert messages[-1].json()["to_state"] == "SUCCEEDED"
    else:
        assert got[-1].json() == {"state": "SUCCEEDED", "progress": 100.0}


async def test_workflows_run_on_their_shard(client: Client, cluster_url: str) -> None:
    d = WorkflowDefinition(
        "two", [Stage("a", [TaskSpec(item="x", type="wf.make"), TaskSpec(item="y", type="wf.make")],
                      queue="wf"),
                Stage("b", [TaskSpec(item="z", type="wf.make")], queue="wf")],
    )  # fmt: skip
    wf = WorkflowClient(connect(cluster_url), Settings(namespace=NS), definitions=[d])
    major = int(str((await client.redis.info("server"))["redis_version"]).split(".")[0])
    try:
        async with wf_worker(cluster_url, settings=Settings(namespace=NS)):
            wids = [await wf.start("two", {"name": f"n{i}"}) for i in range(4)]
            assert len({shard_of(w) for w in wids}) > 1
            for wid in wids:
                info = await wf.wait(wid, {"READY_TO_PUBLISH"}, timeout_ms=30_000)
                assert info.status == "READY_TO_PUBLISH"
                doc = await wf.status(wid)
                assert len(doc.completed_assets) == 3
                wfs = (await client.store.at(wid)).workflows
                slots = (await wfs.slots_and_open(wid))[0]
                assert {shard_of(t) for t in slots.values()} == {shard_of(wid)}
                # (wf_read.lua, the read behind both: FCALL_RO where the nodes have it)
                assert wfs.scripts.functions is (major >= 7)
            owned = await wf.start("two", {"name": "o"}, owner="alice")
            assert shard_of(owned) == (await client.store.open()).place(owner="alice")
        listed = await client.list_workflows(limit=3)
        assert len(listed.workflows) == 3 and listed.cursor is not None
    finally:
        await wf.close()
