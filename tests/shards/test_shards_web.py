"""The web app on a namespace of 4 shards (the session's standalone Redis): idempotent
submits meet on one shard, lists merge the shards with a checked cursor, GET /events
merges the shards' events streams and resumes exactly after a position, the queue views
sum the shards, /healthz reads every shard; bad input is a 400 that writes nothing."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import redis as sync_redis

from rsjobs import Client, Settings, connect
from rsjobs.store.shards import shard_of
from tests.support.web import (
    ALICE,
    NAMESPACE,
    ROOT,
    ServerThread,
    SSEReader,
    make_app,
    redis_state,
    serve,
)

S = 4


@pytest.fixture
async def web(redis_url: str) -> AsyncIterator[ServerThread]:
    c = Client(connect(redis_url), Settings(namespace=NAMESPACE, shards=S))
    await c.store.require_layout()  # the namespace is made with 4 shards
    await c.close()
    with serve(make_app(redis_url, keepalive_ms=200)) as server:
        yield server


@contextlib.asynccontextmanager
async def stream(
    http: httpx.AsyncClient, last: str | None = None
) -> AsyncIterator[tuple[httpx.Response, SSEReader]]:
    h = dict(ROOT)
    if last is not None:
        h["Last-Event-ID"] = last
    async with http.stream("GET", "/events", headers=h) as r:
        yield r, SSEReader(r)


async def submit(url: str, n: int) -> list[str]:
    """``n`` tasks without an owner (over HTTP every task has its token's owner, which
    places it), spread over the shards."""
    async with Client(connect(url), Settings(namespace=NAMESPACE)) as c:
        return [await c.enqueue("img", queue="gpu", shard_key=f"k{i}") for i in range(n)]


def _state(url: str) -> Iterator[dict[bytes, object]]:
    r = sync_redis.Redis.from_url(url)
    try:
        yield redis_state(r)
    finally:
        r.close()


async def test_events_merge_the_shards_and_resume_after_a_position(
    web: ServerThread, redis_url: str
) -> None:
    async with httpx.AsyncClient(base_url=web.url, timeout=10) as http:
        ids = await submit(redis_url, 6)
        assert len({shard_of(t) for t in ids}) > 1
        async with stream(http) as (r, sse):
            assert r.status_code == 200
            for t in ids:
                await http.post(f"/tasks/{t}/cancel", headers=ROOT)
            got = await sse.take(6)
        assert sorted(e.json()["task_id"] for e in got) == sorted(ids)
        assert all(e.json()["event"] == "CANCEL" for e in got)
        # resume after the second: exactly the other four (and what came since)
        for t in ids[:2]:
            await http.post(f"/tasks/{t}/pause", headers=ROOT)  # refused: recorded
        async with stream(http, last=got[1].id) as (r, sse):
            again = await sse.take(6)
        assert [e.id for e in again[:4]] == [e.id for e in got[2:]]
        assert [e.json()["rejected"] for e in again[4:]] == [True, True]
        # an id of another form is a 400, and writes nothing
        before = next(_state(redis_url))
        for bad in ("1-0", "12", "0:..", got[0].id + ".", "x"):
            async with stream(http, last=bad) as (r, _):
                assert r.status_code == 400, bad
                assert (await r.aread()) and r.status_code == 400
        assert next(_state(redis_url)) == before


async def test_lists_queues_and_health_merge_the_shards(web: ServerThread, redis_url: str) -> None:
    async with httpx.AsyncClient(base_url=web.url, timeout=10) as http:
        ids = await submit(redis_url, 9)
        dup = {"Idempotency-Key": "same", **ALICE}
        a = await http.post("/tasks", json={"type": "img", "queue": "gpu"}, headers=dup)
        b = await http.post("/tasks", json={"type": "img", "queue": "gpu"}, headers=dup)
        assert a.json()["id"] == b.json()["id"] and b.json()["duplicate"] is True
        ids.append(a.json()["id"])
        seen: list[str] = []
        cursor = None
        for _ in range(10):
            params = {"limit": "3", **({"cursor": cursor} if cursor else {})}
            page = (await http.get("/tasks", params=params, headers=ROOT)).json()
            seen += [t["id"] for t in page["items"]]
            cursor = page["cursor"]
            if not cursor:
                break
        assert sorted(seen) == sorted(ids)
        before = next(_state(redis_url))
        for bad in ("nope", "WyJTIiwgW119", seen[0]):
            r = await http.get("/tasks", params={"cursor": bad}, headers=ROOT)
            assert r.status_code == 400 and r.json()["error"] == "invalid_cursor", r.text
        assert next(_state(redis_url)) == before
        queues = (await http.get("/queues", headers=ROOT)).json()["queues"]
        gpu = next(q for q in queues if q["name"] == "gpu")
        assert gpu["counts"]["PENDING"] == 10 and gpu["depth"] == 10
        health = await http.get("/healthz")
        assert health.status_code == 200 and health.json()["events_reader"] in ("ok", "not started")
        metrics = await http.get("/metrics", headers=ROOT)
        assert metrics.status_code == 200
        assert 'rsjobs_tasks{queue="gpu",state="PENDING"} 10' in metrics.text
