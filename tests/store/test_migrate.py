"""Migrating a namespace of layout 1 on a real Redis: tasks in every state, workflow tasks
among them, written by the scripts of the previous release (``tests.support.layout1``),
converted by ``rsjobs migrate``, then used by this release: each reads back as it was
(``Client.get``, ``Client.history``, ``rsjobs history``), the running one completes with
its lease, the waiting ones are run by a real worker, the workflow goes on, a finished one
expires with its TTL, and nothing else in the namespace changed. A second run is a no-op;
a run killed with SIGKILL leaves every task in one layout or the other, and a second run
finishes it without losing anything."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from typing import Any

import msgspec
import psutil
import pytest
from redis.asyncio import Redis

from rsjobs import Client, EnqueueRequest, NotMigrated, Settings, TaskNotFound, connect
from rsjobs.console.tables import render_table
from rsjobs.console.views import history_table
from rsjobs.model import TERMINAL
from rsjobs.reaper import Reaper, ReaperConfig
from rsjobs.schemas import HistoryEntry, TaskInfo
from rsjobs.store import Store, TaskRef
from rsjobs.store.layout import Ending
from rsjobs.workflows import Stage, WorkflowClient, WorkflowDefinition, fan_out
from tests.cli.support import env, rsjobs
from tests.support.layout1 import old_history, old_info, writing_layout1
from tests.support.processes import ROOT, spawn_worker, start_as, stop_process
from tests.support.waits import keyspace, notified, poll_until
from tests.support.wf_fixtures import NS, running_driver, wait_status
from tests.support.workflows import Hand

PIPELINE = WorkflowDefinition(
    "upgrade",
    [
        Stage("draft", fan_out("wf.make", ["a", "b"], kind="json"), queue="wf"),
        Stage("final", fan_out("wf.make", ["c"], kind="json"), queue="wf"),
    ],
)


def as_numbered(history: list[HistoryEntry]) -> list[HistoryEntry]:
    """A history of layout 1 with its entry ids as this layout numbers them."""
    return [msgspec.structs.replace(e, id=str(n)) for n, e in enumerate(history, 1)]


def as_migrated(info: TaskInfo) -> TaskInfo:
    """What a terminal task's info keeps (its lease expiry and execution deadline mean
    nothing once it ended: this layout drops them)."""
    if info.state not in TERMINAL:
        return info
    return msgspec.structs.replace(info, lease_expires_at=0, deadline_at=0)


async def read_layout1(r: Redis, k: Any, tid: str) -> tuple[TaskInfo, list[HistoryEntry]]:
    """The task as the previous release read it."""
    h = await r.hgetall(k.task(tid))
    return old_info(h), old_history(await r.xrange(k.history(tid)), h)


async def others(r: Redis) -> dict[str, Any]:
    """Every key but the task hashes and history streams, with its content (and whether it
    has a TTL): what the migration must not touch."""
    out: dict[str, Any] = {}
    async for key in r.scan_iter(count=1000):
        if ":task:" in key:
            continue
        kind = await r.type(key)
        if kind == "hash":
            value: Any = await r.hgetall(key)
        elif kind == "stream":
            groups = await r.xinfo_groups(key)
            pel = [await r.xpending_range(key, g["name"], "-", "+", 1000) for g in groups]
            value = (await r.xrange(key), [[p["message_id"] for p in x] for x in pel])
        elif kind == "zset":
            value = await r.zrange(key, 0, -1, withscores=True)
        elif kind == "set":
            value = sorted(await r.smembers(key))
        else:
            value = await r.get(key)
        out[key] = (kind, value, await r.pttl(key) > 0)
    return out


async def tasks_of_layout1(url: str) -> dict[str, Any]:
    """A namespace written by the previous release: a task in every state, refusals,
    a workflow with a task running; returns the ids and the leases by name."""
    ids: dict[str, Any] = {}
    with writing_layout1():
        c = Client.from_url(url, namespace=NS)
        wf = WorkflowClient(connect(url), Settings(namespace=NS), definitions=[PIPELINE])
        st = c.store
        try:
            ids["pending"] = await c.enqueue("echo", {"n": 1}, queue="jobs", owner="alice")
            ids["dedup"] = await c.enqueue("echo", {"n": 2}, queue="jobs", dedup_key="d1")
            ids["scheduled"] = await c.enqueue("echo", {"n": 3}, queue="jobs", delay_ms=4_000)
            ids["running"] = await c.enqueue("echo", {"n": 4}, queue="held", timeout_ms=120_000)
            (run,) = await start_as(c, "old-worker", queue="held")
            ids["running_lease"] = run.lease
            # RUNNING on a worker that died (a short lease): the reaper's to take back
            ids["orphaned"] = await c.enqueue("echo", {"n": 7}, queue="jobs2")
            (lost,) = await start_as(c, "dead-worker", queue="jobs2", lease_ms=300)
            assert lost.id == ids["orphaned"]
            ids["paused"] = await c.enqueue("echo", {"n": 5}, queue="side")
            ref = TaskRef("PENDING", "", "side", "")
            await st.tasks.control("user", ids["paused"], ref, "PAUSE", "wait | for % me")
            ids["succeeded"] = await c.enqueue("echo", {"n": 6}, queue="done")
            (done,) = await start_as(c, "old-worker", queue="done")
            keys = c.keys.task_keys(ids["succeeded"], "done")
            await st.work.finish(
                [(keys, Ending("COMPLETE", done.lease, '{"n": 6}', "", 1, -1, 0.5))]
            )
            for _ in range(3):  # a late result of a lost attempt: one refusal, two repeats
                await st.work.finish([(keys, Ending("COMPLETE", "1:gone", "null", "", 1, -1, 0.5))])
            ids["failed"] = await c.enqueue(
                "echo", None, queue="bad", max_attempts=2, backoff_base_ms=0, backoff_max_ms=0
            )
            keys = c.keys.task_keys(ids["failed"], "bad")
            for attempt in (1, 2):
                if attempt == 2:
                    promoted = await st.work.promote("worker", [f"bad:{ids['failed']}"])
                    assert promoted.promoted == 1
                (s,) = await start_as(c, f"old-{attempt}", queue="bad", nonce=f"n{attempt}")
                why = f"CUDA out of memory on attempt {attempt}"
                await st.work.finish(
                    [(keys, Ending("FAIL", s.lease, why, "RuntimeError", 1, 0, 0.5))]
                )
            ids["cancelled"] = await c.enqueue("echo", None, queue="side")
            ref = TaskRef("PENDING", "", "side", "")
            for event in ("CANCEL", "CANCEL", "CANCEL", "RESUME"):
                await st.tasks.control("user", ids["cancelled"], ref, event, "user asked")
            ids["workflow"] = await wf.start(PIPELINE, {"x": 1})
            hand = Hand(c.redis, Settings(namespace=NS), name="old-hand")
            (claimed,) = await hand.claim("wf", count=1)
            ids["wf_running"] = claimed
        finally:
            await c.close()
            await wf.close()
    return ids


def task_ids(ids: dict[str, Any], wf_tasks: list[str]) -> list[str]:
    plain = [
        v for k, v in ids.items() if isinstance(v, str) and k not in ("workflow", "running_lease")
    ]
    return plain + wf_tasks


def migrate(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return rsjobs(url, "--namespace", NS, "migrate", *args)


def start_migrate(url: str, *args: str) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "rsjobs", "--url", url, "--namespace", NS, "migrate", *args]
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env(), stdout=subprocess.DEVNULL, start_new_session=True
    )


def counts(out: str) -> dict[str, int]:
    found = {}
    for line in out.splitlines():
        for name in ("converted", "already new", "skipped", "gone"):
            if line.startswith(name):
                found[name] = int(line[len(name) :].split()[0])
    return found


async def test_a_namespace_of_layout_1_is_migrated_and_used_by_this_release(
    redis_url: str,
) -> None:
    ids = await tasks_of_layout1(redis_url)
    async with Client.from_url(redis_url, namespace=NS) as client:
        await _migrate_and_use(redis_url, client, ids)


async def _migrate_and_use(redis_url: str, client: Client, ids: dict[str, Any]) -> None:
    r, k = client.redis, client.keys
    wf_tasks = list((await r.hgetall(k.workflow_tasks(ids["workflow"]))).values())
    assert len(wf_tasks) == 2
    every = task_ids(ids, wf_tasks)
    before = {tid: await read_layout1(r, k, tid) for tid in every}
    untouched = await others(r)
    # this release refuses the namespace until it is migrated
    with pytest.raises(NotMigrated, match="rsjobs --namespace t migrate"):
        await client.enqueue("echo", None, queue="fresh")
    with pytest.raises(NotMigrated, match="run `rsjobs migrate`"):
        await client.get(ids["pending"])
    assert await others(r) == untouched

    done = migrate(redis_url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert counts(done.stdout) == {
        "converted": len(every),
        "already new": 0,
        "skipped": 0,
        "gone": 0,
    }
    assert "the namespace is migrated" in done.stdout
    assert await r.get(k.layout) == "2"
    assert await others(r) == {**untouched, k.layout: ("string", "2", False)}

    # each task reads back as it was, with this release's readers
    for tid in every:
        info, history = before[tid]
        assert await client.get(tid) == as_migrated(info)
        assert await client.history(tid) == as_numbered(history)
        assert not await r.exists(k.history(tid))
    for name in ("succeeded", "failed", "cancelled"):
        shown = rsjobs(redis_url, "--namespace", NS, "history", ids[name])
        assert shown.stdout == render_table(*history_table(before[ids[name]][1]))
    assert [e.repeats for e in await client.history(ids["succeeded"]) if e.rejected] == [2]
    assert [e.repeats for e in await client.history(ids["cancelled"]) if e.rejected] == [1, 0]

    # a second run is a no-op
    hashes = {tid: await r.hgetall(k.task(tid)) for tid in every}
    again = migrate(redis_url)
    assert again.returncode == 0 and counts(again.stdout)["already new"] == len(every)
    assert {tid: await r.hgetall(k.task(tid)) for tid in every} == hashes

    # the running one completes with the lease its attempt got in layout 1
    keys = k.task_keys(ids["running"], "held")
    lease = ids["running_lease"]
    (reply,) = await client.store.work.finish(
        [(keys, Ending("COMPLETE", lease, '"ok"', "", 1, -1, 0.5))]
    )
    assert (reply.code, reply.state) == (1, "SUCCEEDED")
    assert (await client.get(ids["running"])).result == "ok"
    # the dedup key still names its task
    assert await client.enqueue("echo", {"n": 2}, queue="jobs", dedup_key="d1") == ids["dedup"]
    await client.resume(ids["paused"])
    # the reaper of this release takes back the one its dead worker held
    await asyncio.sleep(0.5)
    config = ReaperConfig(lease_ms=300, min_idle_ms=300, guard=False)
    reaper = Reaper(url=redis_url, settings=Settings(namespace=NS), config=config)
    try:
        swept = await reaper.sweep_once()
    finally:
        await reaper.close()
    assert (swept.retried, swept.errors, swept.quarantined) == (1, 0, 0)
    assert (await client.get(ids["orphaned"])).state == "PENDING"

    wf = WorkflowClient(connect(redis_url), Settings(namespace=NS), definitions=[PIPELINE])
    hand = Hand(client.redis, Settings(namespace=NS), name="new-hand")
    claimed = ids["wf_running"]
    queues = ("-q", "jobs", "-q", "jobs2", "-q", "side", "-q", "wf")
    worker = spawn_worker(redis_url, NS, *queues, app="tests.support.wf_apps:tasks")
    try:
        assert await hand.complete(claimed) == 1  # the workflow task started in layout 1
        for name, value in (
            ("pending", {"n": 1}),
            ("dedup", {"n": 2}),
            ("scheduled", {"n": 3}),
            ("paused", {"n": 5}),
            ("orphaned", {"n": 7}),
        ):
            info = await client.wait(ids[name], timeout_ms=20_000)
            assert (info.state, info.result) == ("SUCCEEDED", value), name
        async with running_driver(redis_url):
            doc = await wait_status(wf, ids["workflow"], "READY_TO_PUBLISH", timeout=30)
        assert doc.version == 1 and len(doc.completed_assets) == 3
    finally:
        stop_process(worker, signal.SIGTERM)
        await wf.close()


RETENTION_MS = 1000


async def test_a_finished_task_expires_with_its_ttl_after_the_migration(redis_url: str) -> None:
    with writing_layout1():
        async with Client.from_url(redis_url, namespace=NS, retention_ms=RETENTION_MS) as old:
            tid = await old.enqueue("echo", None, dedup_key="once")
            ref = TaskRef("PENDING", "", "default", "once")
            await old.store.tasks.control("user", tid, ref, "CANCEL", "")
    async with Client.from_url(redis_url, namespace=NS) as client:
        r, k = client.redis, client.keys
        # Redis says when it expires them (keyspace notifications), as it happens
        gone = {k.task(tid), k.dedup("once")}
        async with keyspace(r, "Exg", "__keyevent@0__:expired", "__keyevent@0__:del") as told:
            ttl = await r.pttl(k.task(tid))
            assert 0 < ttl <= RETENTION_MS and await r.pttl(k.history(tid)) > 0
            report = await client.store.migration.run()
            assert (report.converted, report.marked) == (1, True)
            assert 0 < await r.pttl(k.task(tid)) <= ttl
            assert 0 < await r.pttl(k.dedup("once")) <= RETENTION_MS
            assert (await client.get(tid)).state == "CANCELLED"
            await notified(told, lambda key: key in gone, len(gone), 15)
        assert not await r.exists(*gone)
        with pytest.raises(TaskNotFound):
            await client.get(tid)


# -- a run killed half-way ------------------------------------------------------------------


async def test_a_migration_killed_half_way_loses_nothing(redis_url: str) -> None:
    n = 3000
    with writing_layout1():
        c = Client.from_url(redis_url, namespace=NS)
        reqs = [EnqueueRequest(type="echo", payload={"i": i}, queue="jobs") for i in range(n)]
        every = await c.enqueue_many(reqs, chunk=500)
        ref = TaskRef("PENDING", "", "jobs", "")
        for tid in every[::3]:
            await c.store.tasks.control("user", tid, ref, "CANCEL", f"cancelled {tid[:4]}")
        await c.close()
    async with Client.from_url(redis_url, namespace=NS) as client:
        await _kill_and_rerun(redis_url, client, every)


async def _kill_and_rerun(redis_url: str, client: Client, every: list[str]) -> None:
    n = len(every)
    r, k = client.redis, client.keys
    before = {}
    for tid in every:
        before[tid] = await read_layout1(r, k, tid)

    # each converted task loses its history stream (a del Redis tells of as it happens):
    # kill once a tenth is done
    async with keyspace(r, "Eg", "__keyevent@0__:del") as told:
        proc = start_migrate(redis_url, "--batch", "1")
        try:
            await notified(told, lambda key: key.endswith(":history"), n // 10, 60)
            assert proc.poll() is None, "the migration ended before it could be killed"
            ports = {c.laddr.port for c in psutil.Process(proc.pid).net_connections("tcp")}
            theirs = {c["addr"] for c in await r.client_list()
                      if int(c["addr"].rsplit(":", 1)[1]) in ports}  # fmt: skip
            assert theirs, "the migration's connections were not found"
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        finally:
            stop_process(proc)

    # a call it sent just before is run once the server has dropped its connections
    async def dropped() -> bool:
        return not theirs & {c["addr"] for c in await r.client_list()}

    await poll_until(dropped, 10, "the killed migration's connections closed", every=0.005)
    new = [tid for tid in every if await r.hexists(k.task(tid), "s")]
    assert 0 < len(new) < n, len(new)
    assert await r.get(k.layout) is None  # not marked: the processes still refuse it
    for tid in every:
        h = await r.hgetall(k.task(tid))
        if "s" in h:  # wholly converted
            assert "state" not in h and not await r.exists(k.history(tid))
        else:  # wholly as it was
            assert await read_layout1(r, k, tid) == before[tid]

    done = migrate(redis_url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert counts(done.stdout) == {
        "converted": n - len(new),
        "already new": len(new),
        "skipped": 0,
        "gone": 0,
    }
    for tid in every:
        info, history = before[tid]
        assert await client.get(tid) == as_migrated(info)
        assert await client.history(tid) == as_numbered(history)


async def test_store_migration_dry_run_counts_and_writes_nothing(redis_url: str) -> None:
    with writing_layout1():
        c = Client.from_url(redis_url, namespace=NS)
        tid = await c.enqueue("echo", None)
        await c.close()
    store = Store(connect(redis_url), Settings(namespace=NS))
    r = store.redis
    untouched = {key: await r.dump(key) async for key in r.scan_iter()}
    report = await store.migration.run(dry_run=True)
    assert (report.converted, report.marked, report.complete) == (1, False, True)
    assert {key: await r.dump(key) async for key in r.scan_iter()} == untouched
    report = await store.migration.run(batch=7)
    assert (report.converted, report.marked) == (1, True)
    assert store.layout_ok  # its own scripts run now
    assert (await Client(store.redis, Settings(namespace=NS)).get(tid)).state == "PENDING"
    await store.close()


async def test_a_task_an_earlier_producer_submits_after_the_migration_is_not_lost(
    redis_url: str,
) -> None:
    """A producer left on the previous release submits into a namespace already migrated:
    the worker cannot start it and says so, but keeps its delivery (nothing drops it as a
    gone task's); a second ``rsjobs migrate`` converts it, and the reaper hands it to the
    worker again."""
    client = Client.from_url(redis_url, namespace=NS)
    r, k = client.redis, client.keys
    # the worker's start marks the empty namespace (Redis tells of the write as it happens)
    async with keyspace(r, "E$", "__keyevent@0__:set") as told:
        worker = spawn_worker(redis_url, NS, "--lease-ms", "500", stderr=subprocess.DEVNULL)
        await notified(told, lambda key: key == k.layout, 1, 20)
    config = ReaperConfig(lease_ms=500, min_idle_ms=500, dead_after_leases=2, guard=False,
                          interval_ms=100)  # fmt: skip
    reaper = Reaper(url=redis_url, settings=Settings(namespace=NS), config=config)
    sweeping: asyncio.Task[None] | None = None
    try:
        assert await r.get(k.layout) == "2"
        assert (
            await client.wait(await client.enqueue("noop", {"x": 0}), timeout_ms=20_000)
        ).state == "SUCCEEDED"
        with writing_layout1():
            async with Client.from_url(redis_url, namespace=NS) as old:
                tid = await old.enqueue("noop", {"x": 1})

        async def delivered() -> bool:  # to the worker, which refused to start it
            return bool((await r.xpending(k.queue("default"), "workers"))["pending"] == 1)

        await poll_until(delivered, 20, "the delivery", every=0.01)
        assert await r.hget(k.task(tid), "state") == "PENDING"
        assert (await reaper.sweep_once()).quarantined == 0  # no bad data: left alone
        done = migrate(redis_url, "--force")  # the worker runs on: --force
        assert done.returncode == 0 and counts(done.stdout)["converted"] == 1, done.stdout
        # the reaper, sweeping, redelivers it: its worker lives, and never started it
        sweeping = asyncio.create_task(reaper.run())
        info = await client.wait(tid, timeout_ms=30_000)
        assert (info.state, info.result) == ("SUCCEEDED", {"x": 1}), await client.history(tid)
    finally:
        stop_process(worker, signal.SIGTERM)
        if sweeping is not None:
            reaper.stop()
            await asyncio.wait_for(sweeping, 10)
        await reaper.close()
        await client.close()
