"""The queue registry: a refused submit registers no queue (every check before the first
write), an owner is held to its quota of queues, and an unused queue can be deleted with
everything it left behind (``rsjobs queue delete``)."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis as sync_redis
from starlette.applications import Starlette

from rsjobs import (
    Client,
    EnqueueRequest,
    QueueInUse,
    QueueQuotaExceeded,
    Settings,
    SyncClient,
    UnknownPredecessor,
    UnknownQueue,
    connect,
)
from rsjobs.cli import CliError, main, settings_from_args
from rsjobs.store.keys import Keys
from rsjobs.web import WebConfig, create_app
from tests.support.web import ADMIN, ALICE, BOB, NAMESPACE, ROOT, TOKENS, redis_state

pytestmark = pytest.mark.integration

KEYS = Keys(NAMESPACE)
UNKNOWN = "0" * 32


def make_app(url: str, quota: int = 100) -> Starlette:
    return create_app(
        url,
        settings=Settings(namespace=NAMESPACE, queue_quota=quota),
        tokens=TOKENS,
        admin_token=ADMIN,
        env={},
        config=WebConfig(),
    )


@pytest.fixture
async def api(redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    app = make_app(redis_url, quota=3)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://rsjobs.test") as c:
        yield c
    await app.state.rsjobs.aclose()


@pytest.fixture
def rdb(redis_url: str) -> Any:
    r = sync_redis.Redis.from_url(redis_url)
    yield r
    r.close()


def metric_lines(text: str) -> list[str]:
    """The series of a scrape (name and labels; values that move with time, such as the
    oldest task's age, left out), without this process's own (its requests and their
    durations, which the scrape itself moves)."""
    return [
        line.rsplit(" ", 1)[0]
        for line in text.splitlines()
        if line
        and not line.startswith("#")
        and not re.match(r"(rsjobs_http|process_|python_)", line)
    ]


async def test_200_refused_successor_submits_write_nothing(
    api: httpx.AsyncClient, client: Client, rdb: Any
) -> None:
    await api.post("/tasks", json={"type": "seed"}, headers=ALICE)  # a namespace to compare
    before = redis_state(rdb)
    scrape = metric_lines((await api.get("/metrics", headers=ROOT)).text)
    for i in range(200):
        body = {"type": "t", "queue": f"flood{i}", "after": [UNKNOWN]}
        r = await api.post("/tasks", json=body, headers=ALICE)
        assert r.status_code == 422 and r.json()["error"] == "unknown_predecessor", r.text
    # the Client's calls too: one by one, and as a batch
    for i in range(20):
        with pytest.raises(UnknownPredecessor):
            await client.enqueue("t", queue=f"lib{i}", owner="alice", after=[UNKNOWN])
    with pytest.raises(UnknownPredecessor):
        await client.enqueue_many(
            [EnqueueRequest(type="t", queue=f"many{i}", after=[UNKNOWN]) for i in range(5)]
        )
    assert redis_state(rdb) == before
    assert metric_lines((await api.get("/metrics", headers=ROOT)).text) == scrape
    assert any('queue="default"' in line for line in scrape)
    assert [q.name for q in await client.queues()] == ["default"]


async def test_a_refused_dedup_submit_registers_no_queue(client: Client, rdb: Any) -> None:
    await client.enqueue("t", {"a": 1}, dedup_key="k")
    before = redis_state(rdb)
    from rsjobs import DedupKeyReused

    with pytest.raises(DedupKeyReused):
        await client.enqueue("t", {"a": 1}, queue="other", dedup_key="k")
    assert redis_state(rdb) == before


async def test_an_owner_is_held_to_its_quota_of_queues(redis_url: str, rdb: Any) -> None:
    c = Client(connect(redis_url), Settings(namespace=NAMESPACE, queue_quota=3))
    try:
        for q in ("a", "b", "c"):
            await c.enqueue("t", queue=q, owner="alice")
        await c.enqueue("t", queue="a", owner="alice")  # a queue it has: no new one
        before = redis_state(rdb)
        with pytest.raises(QueueQuotaExceeded, match=r"at most 3 queues \(queue_quota\)") as e:
            await c.enqueue("t", queue="d", owner="alice")
        assert (e.value.owner, e.value.quota, e.value.queue) == ("alice", 3, "d")
        # a batch of several owners is checked whole before its first name is written
        with pytest.raises(QueueQuotaExceeded):
            await c.enqueue_many(
                [
                    EnqueueRequest(type="t", queue="bob1", owner="bob"),
                    EnqueueRequest(type="t", queue="e", owner="alice"),
                ]
            )
        assert redis_state(rdb) == before
        # another owner's count is its own; a queue alice made is free for bob to use;
        # owner-less tasks (a backend's) count for no one
        for q in ("a", "x", "y", "z"):
            await c.enqueue("t", queue=q, owner="bob")
        for i in range(5):
            await c.enqueue("t", queue=f"backend{i}")
        owners = {k.decode(): v.decode() for k, v in rdb.hgetall(KEYS.queue_owners).items()}
        assert owners["o|alice"] == "3" and owners["o|bob"] == "3"
        assert owners["q|a"] == "alice" and owners["q|x"] == "bob"
        assert not any(k.startswith("q|backend") for k in owners)
    finally:
        await c.close()


async def test_the_quota_over_http_is_a_422_naming_it(api: httpx.AsyncClient, rdb: Any) -> None:
    for q in ("a", "b", "c"):
        r = await api.post("/tasks", json={"type": "t", "queue": q}, headers=BOB)
        assert r.status_code == 202, r.text
    before = redis_state(rdb)
    r = await api.post("/tasks", json={"type": "t", "queue": "d"}, headers=BOB)
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "queue_quota_exceeded"
    assert "queue_quota" in r.json()["detail"] and "'d'" in r.json()["detail"]
    assert redis_state(rdb) == before
    # alice has her own three
    r = await api.post("/tasks", json={"type": "t", "queue": "d"}, headers=ALICE)
    assert r.status_code == 202, r.text


def _queue_keys(rdb: Any, queue: str) -> list[str]:
    """Every key and stats field naming ``queue``."""
    found = [
        k.decode()
        for k in rdb.scan_iter(count=1000)
        if re.search(rf":(queue|series|parked|throttled|claims):{queue}(\||$)", k.decode())
    ]
    found += [
        f.decode() for f in rdb.hkeys(KEYS.stats) if re.search(rf"(^|:){queue}(:|$)", f.decode())
    ]
    if rdb.sismember(KEYS.queues, queue):
        found.append("queues")
    if rdb.hexists(KEYS.queue_owners, f"q|{queue}"):
        found.append("queues:owners")
    if rdb.hexists(KEYS.paused, queue):
        found.append("paused")
    return found


async def test_delete_removes_an_unused_queue_and_refuses_a_used_one(
    redis_url: str, rdb: Any
) -> None:
    c = Client(connect(redis_url), Settings(namespace=NAMESPACE, queue_quota=2))
    try:
        other = await c.enqueue("t", queue="keep", owner="alice")
        tid = await c.enqueue("t", queue="gpu", owner="alice", priority=3)
        await c.pause_queue("gpu", "maintenance")
        with pytest.raises(QueueQuotaExceeded):
            await c.enqueue("t", queue="third", owner="alice")
        before = redis_state(rdb)
        with pytest.raises(QueueInUse, match=r"'gpu' is in use: it holds live tasks \(PENDING=1\)"):
            await c.delete_queue("gpu")
        await c.pause(tid)
        with pytest.raises(QueueInUse, match=r"PAUSED=1"):
            await c.delete_queue("gpu")
        await c.cancel(tid)
        before = redis_state(rdb)
        # a registered worker serving it
        rdb.hset(KEYS.workers, "w1", json.dumps({"name": "w1", "queues": ["gpu", "x"]}))
        with pytest.raises(QueueInUse, match="worker w1 serves it"):
            await c.delete_queue("gpu")
        rdb.hdel(KEYS.workers, "w1")
        # a schedule enqueueing to it
        await c.schedule("nightly", type="t", queue="gpu", every_ms=3_600_000)
        with pytest.raises(QueueInUse, match="schedule nightly enqueues to it"):
            await c.delete_queue("gpu")
        await c.unschedule("nightly")
        assert redis_state(rdb) == before
        assert _queue_keys(rdb, "gpu")  # its stream, counters, registry entry...
        assert await c.delete_queue("gpu") > 0
        assert _queue_keys(rdb, "gpu") == []
        # the rest is untouched: the other queue, the finished task (read by id)
        assert _queue_keys(rdb, "keep") and (await c.get(other)).state == "PENDING"
        assert (await c.get(tid)).state == "CANCELLED"
        assert "gpu" not in [q.name for q in await c.queues()]
        # alice's place in the quota is back
        await c.enqueue("t", queue="third", owner="alice")
        with pytest.raises(UnknownQueue):
            await c.delete_queue("gpu")
        with pytest.raises(UnknownQueue):
            await c.delete_queue("never")
    finally:
        await c.close()


def test_the_cli_deletes_a_queue_and_refuses_with_a_clear_message(
    redis_url: str, rdb: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    with SyncClient.from_url(redis_url, namespace=NAMESPACE) as c:
        tid = c.enqueue("t", queue="old")
    base = ["--url", redis_url, "--namespace", NAMESPACE, "queue", "delete"]
    assert main([*base, "old"]) == 2
    err = capsys.readouterr().err
    assert "queue 'old' is in use: it holds live tasks (PENDING=1)" in err
    with SyncClient.from_url(redis_url, namespace=NAMESPACE) as c:
        c.cancel(tid)
    assert main([*base, "old"]) == 0
    assert "deleted queue old" in capsys.readouterr().out
    assert _queue_keys(rdb, "old") == []
    assert main([*base, "old"]) == 2
    assert "no such queue: old" in capsys.readouterr().err


async def test_the_admin_route_deletes_and_an_owner_may_not(
    api: httpx.AsyncClient, client: Client, rdb: Any
) -> None:
    await client.enqueue("t", queue="old")
    tid = await client.enqueue("t", queue="busy")
    await client.cancel((await client.list_tasks(queue="old")).items[0].id)
    r = await api.delete("/queues/old", headers=ALICE)
    assert r.status_code == 403, r.text
    r = await api.delete("/queues/busy", headers=ROOT)
    assert r.status_code == 409 and r.json()["error"] == "queue_in_use", r.text
    r = await api.delete("/queues/nope", headers=ROOT)
    assert r.status_code == 404 and r.json()["error"] == "unknown_queue", r.text
    r = await api.delete("/queues/old", headers=ROOT)
    assert r.status_code == 200 and r.json()["deleted"] > 0, r.text
    assert _queue_keys(rdb, "old") == [] and (await client.get(tid)).state == "PENDING"


async def test_a_sharded_namespace_registers_and_deletes_on_every_shard(
    redis_url: str, rdb: Any
) -> None:
    """4 shards: a queue is registered on each (the reaper sweeps each shard's), counted
    once for its owner (shard 0 keeps the quota), and deleted from each once every shard's
    checks passed."""
    c = Client(connect(redis_url), Settings(namespace="sh", shards=4, queue_quota=1))
    try:
        ids = [await c.enqueue("t", queue="gpu", owner=f"o{i}") for i in range(8)]
        with pytest.raises(QueueQuotaExceeded):
            await c.enqueue("t", queue="other", owner="o0")
        stores = await c.store.each()
        assert len(stores) == 4
        for st in stores:
            assert rdb.sismember(st.keys.queues, "gpu")
        assert rdb.hget(stores[0].keys.queue_owners, "o|o0") == b"1"
        assert not rdb.exists(stores[1].keys.queue_owners)
        for tid in ids[:-1]:
            await c.cancel(tid)
        before = redis_state(rdb)
        with pytest.raises(QueueInUse, match="PENDING=1"):  # one shard's live task
            await c.delete_queue("gpu")
        assert redis_state(rdb) == before  # no shard deleted anything
        await c.cancel(ids[-1])
        assert sum(1 for st in stores if list(rdb.scan_iter(match=st.keys.queue("gpu") + "*"))) > 1
        assert await c.delete_queue("gpu") > 0
        for st in stores:
            assert not rdb.sismember(st.keys.queues, "gpu")
            assert not [k for k in rdb.scan_iter(match=st.keys.queue("gpu") + "*")]
        await c.enqueue("t", queue="other", owner="o0")  # o0's place is back
    finally:
        await c.close()


def test_every_command_reads_the_quota_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``settings_from_args`` (every CLI command, ``rsjobs web`` among them) takes
    ``RSJOBS_QUEUE_QUOTA``; a bad value is a one-line CLI error."""
    args = argparse.Namespace(namespace="q", wait_replicas=0, wait_timeout_ms=1000, shards=None)
    monkeypatch.setenv("RSJOBS_QUEUE_QUOTA", "7")
    assert settings_from_args(args).queue_quota == 7
    assert settings_from_args(args, queue_quota=3).queue_quota == 3
    monkeypatch.setenv("RSJOBS_QUEUE_QUOTA", "many")
    with pytest.raises(CliError, match="RSJOBS_QUEUE_QUOTA"):
        settings_from_args(args)
    monkeypatch.delenv("RSJOBS_QUEUE_QUOTA")
    assert settings_from_args(args).queue_quota == 100
