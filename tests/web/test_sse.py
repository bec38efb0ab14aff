"""SSE against a real uvicorn server: resume with Last-Event-ID after forced disconnects
(client side and server side) yields exactly the task's history; keep-alives; the end;
per-client caps; one Redis reader however many streams are open."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import msgspec
import pytest
import redis as sync_redis

from rsjobs import Client
from rsjobs.server import EmbeddedRedis
from tests.support.web import (
    ALICE,
    BOB,
    NAMESPACE,
    ServerThread,
    SSEEvent,
    SSEReader,
    eventually,
    make_app,
    running_worker,
    serve,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def web(redis_url: str) -> Iterator[ServerThread]:
    with serve(make_app(redis_url, keepalive_ms=200, max_streams_per_client=64)) as server:
        yield server


@contextlib.asynccontextmanager
async def stream(
    http: httpx.AsyncClient, tid: str, headers: dict[str, str], last: str | None = None
) -> AsyncIterator[tuple[httpx.Response, SSEReader]]:
    h = dict(headers)
    if last is not None:
        h["Last-Event-ID"] = last
    async with http.stream("GET", f"/tasks/{tid}/events", headers=h) as r:
        yield r, SSEReader(r)


async def submit(http: httpx.AsyncClient, body: dict[str, object]) -> str:
    r = await http.post("/tasks", json=body, headers=ALICE)
    assert r.status_code == 202, r.text
    tid: str = r.json()["id"]
    return tid


async def assert_is_history(client: Client, tid: str, got: list[SSEEvent]) -> None:
    """The events received, in order, are exactly the task's history, then `end`."""
    history = await client.history(tid)
    transitions = [e for e in got if e.event == "message"]
    assert [e.id for e in transitions] == [h.id for h in history]  # no gap, no duplicate
    assert [e.json() for e in transitions] == [msgspec.to_builtins(h) for h in history]
    final = history[-1].to_state
    done = {"progress": 100.0} if final == "SUCCEEDED" else {}
    assert got[-1].event == "end" and got[-1].json() == {"state": final, **done}
    assert [e.event for e in got].count("end") == 1


async def test_resume_after_forced_disconnects_is_complete_and_ordered(
    web: ServerThread, client: Client, redis_url: str
) -> None:
    got: list[SSEEvent] = []
    reconnects = 0
    async with (
        httpx.AsyncClient(base_url=web.url, timeout=10) as http,
        running_worker(redis_url),
    ):
        tid = await submit(http, {"type": "sleep", "payload": {"s": 1.2, "steps": 12}})
        async with stream(http, tid, ALICE) as (r, reader):
            assert r.status_code == 200
            got += await reader.take(4)
        # dropped mid-task; transitions keep coming while nobody listens
        await asyncio.sleep(0.3)
        while not got or got[-1].event != "end":
            async with stream(http, tid, ALICE, last=got[-1].id) as (r, reader):
                assert r.status_code == 200
                got += await reader.take(3)
            reconnects += 1
    assert reconnects >= 3
    assert sum(e.json().get("event") == "PROGRESS" for e in got if e.event == "message") >= 5
    await assert_is_history(client, tid, got)


async def test_resume_on_another_server_after_the_first_one_dies(
    redis_url: str, client: Client
) -> None:
    """Server-side disconnect: the process serving the stream goes away mid-task; the
    client resumes on a second server (its own events reader) from Last-Event-ID."""
    got: list[SSEEvent] = []
    first = ServerThread(make_app(redis_url, keepalive_ms=200)).start()
    async with running_worker(redis_url):
        async with httpx.AsyncClient(base_url=first.url, timeout=10) as http:
            tid = await submit(http, {"type": "sleep", "payload": {"s": 1.5, "steps": 15}})
            async with stream(http, tid, ALICE) as (r, reader):
                got += await reader.take(3)
                await asyncio.to_thread(first.stop)  # the server closes the connection
                got += await reader.rest(timeout=5)  # whatever was in flight, then EOF
        assert got and got[-1].event == "message", "the first stream was not cut mid-task"
        with serve(make_app(redis_url, keepalive_ms=200)) as second:
            async with (
                httpx.AsyncClient(base_url=second.url, timeout=10) as http,
                stream(http, tid, ALICE, last=got[-1].id) as (r, reader),
            ):
                assert r.status_code == 200
                got += await reader.rest()
    await assert_is_history(client, tid, got)


async def test_keepalive_end_and_no_reconnect_after_the_end(
    web: ServerThread, client: Client
) -> None:
    async with httpx.AsyncClient(base_url=web.url, timeout=10) as http:
        tid = await submit(http, {"type": "nobody-runs-this"})
        async with stream(http, tid, ALICE) as (r, reader):
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            got = await reader.take(1)  # ENQUEUE
            assert got[0].json()["event"] == "ENQUEUE"
            # idle: comments (every 200 ms here) keep proxies from closing the connection
            rest = asyncio.create_task(reader.rest(timeout=10))
            await eventually(lambda: reader.comments.count("keep-alive") >= 3, what="keep-alives")
            assert reader.retry == 2000
            c = await http.post(f"/tasks/{tid}/cancel", headers=ALICE)
            assert c.json()["state"] == "CANCELLED"
            got += await rest  # CANCEL, end, then the server closes the stream
            assert not reader.cut
        await assert_is_history(client, tid, got)
        async with stream(http, tid, ALICE, last=got[-2].id) as (r, _):
            assert r.status_code == 204  # EventSource stops reconnecting


async def test_stream_caps_per_owner_and_per_ip(redis_url: str, client: Client) -> None:
    app = make_app(redis_url, dev=True, max_streams_per_client=2, keepalive_ms=200)
    tid = await client.enqueue("x", owner="alice")
    bobs = await client.enqueue("x", owner="bob")
    with serve(app) as web:
        async with httpx.AsyncClient(base_url=web.url, timeout=10) as http:
            async with contextlib.AsyncExitStack() as stack:
                for _ in range(2):
                    r, _ = await stack.enter_async_context(stream(http, tid, ALICE))
                    assert r.status_code == 200
                async with stream(http, tid, ALICE) as (r, _):
                    assert r.status_code == 429 and r.headers["retry-after"]
                    await r.aread()
                    assert r.json()["error"] == "too_many_streams"
                async with stream(http, bobs, BOB) as (r, _):
                    assert r.status_code == 200  # bob has his own allowance
                # anonymous (dev mode) requests are counted per IP
                for _ in range(2):
                    r, _ = await stack.enter_async_context(stream(http, tid, {}))
                    assert r.status_code == 200
                async with stream(http, tid, {}) as (r, _):
                    assert r.status_code == 429
            # closed streams give their slots back (once the server sees the disconnect)
            svc = app.state.rsjobs
            await eventually(lambda: not svc.limiter.total and not svc.hub.subscribers)
            async with stream(http, tid, ALICE) as (r, _):
                assert r.status_code == 200


async def test_one_redis_reader_for_many_streams(
    web: ServerThread, client: Client, redis_url: str
) -> None:
    n = 40
    tids = [await client.enqueue("x", owner="alice") for _ in range(n // 2)]
    r = sync_redis.Redis.from_url(redis_url, decode_responses=True)

    def calls() -> dict[str, int]:
        stats = r.info("commandstats")
        return {
            c: stats.get(f"cmdstat_{c}", {}).get("calls", 0)
            for c in ("xread", "xrange", "hmget", "hget", "hgetall")
        }

    async with (
        httpx.AsyncClient(base_url=web.url, timeout=10) as http,
        contextlib.AsyncExitStack() as stack,
    ):
        readers = []
        for i in range(n):
            resp, reader = await stack.enter_async_context(stream(http, tids[i % len(tids)], ALICE))
            assert resp.status_code == 200
            readers.append(reader)
        for reader in readers:
            assert len(await reader.take(1)) == 1  # the ENQUEUE replay
        blocked = [c for c in r.client_list() if c["cmd"] == "xread"]
        assert len(blocked) == 1, blocked  # one XREAD BLOCK, not one per connection
        before = calls()
        await asyncio.sleep(0.6)  # idle: keep-alives only
        after = calls()
        assert after["xread"] - before["xread"] <= 2
        for c in ("xrange", "hmget", "hget", "hgetall"):
            assert after[c] == before[c], f"{c} polled while idle"
        # and a transition reaches both watchers of its task
        await client.cancel(tids[0])
        for reader in (readers[0], readers[len(tids)]):
            rest = await reader.rest(timeout=5)
            assert [e.event for e in rest] == ["message", "end"]
    r.close()


async def test_stream_survives_a_redis_restart(tmp_path: Path) -> None:
    """Redis dies (SIGKILL) under an open stream and comes back from its AOF: the events
    reader reconnects, the stream catches up from the history, nothing is lost."""
    server = EmbeddedRedis(appendonly=True, appendfsync="always", data_dir=str(tmp_path))
    server.start()
    try:
        client = Client.from_url(server.url, namespace=NAMESPACE)
        tid = await client.enqueue("x", owner="alice")
        got: list[SSEEvent] = []
        with serve(make_app(server.url, keepalive_ms=200)) as web:
            async with (
                httpx.AsyncClient(base_url=web.url, timeout=10) as http,
                stream(http, tid, ALICE) as (r, reader),
            ):
                got += await reader.take(1)  # ENQUEUE
                await asyncio.to_thread(server.restart, kill=True)
                await client.redis.connection_pool.disconnect()
                await client.pause(tid, "while the reader reconnects")
                await client.cancel(tid)
                got += await reader.rest(timeout=15)
                assert not reader.cut
        await assert_is_history(client, tid, got)
        assert [e.json()["event"] for e in got if e.event == "message"] == [
            "ENQUEUE",
            "PAUSE",
            "CANCEL",
        ]
        await client.close()
    finally:
        server.cleanup()


async def test_workflow_streams_count_against_the_same_cap(redis_url: str) -> None:
    """A workflow stream takes a place under the per-client cap that task streams use,
    and gives it back when it closes."""
    from rsjobs import Settings, connect
    from rsjobs.workflows import WorkflowClient
    from tests.support.workflows import character

    wf = WorkflowClient(
        connect(redis_url), Settings(namespace=NAMESPACE), definitions=[character()]
    )
    app = make_app(redis_url, max_streams_per_client=2, keepalive_ms=200)
    try:
        wid = await wf.start(character(), {"n": 1}, owner="alice")
        with serve(app) as web:
            async with httpx.AsyncClient(base_url=web.url, timeout=10) as http:
                async with contextlib.AsyncExitStack() as stack:
                    for _ in range(2):
                        r = await stack.enter_async_context(
                            http.stream("GET", f"/workflows/{wid}/events", headers=ALICE)
                        )
                        assert r.status_code == 200
                    async with http.stream("GET", f"/workflows/{wid}/events", headers=ALICE) as r:
                        assert r.status_code == 429
                        await r.aread()
                        assert r.json()["error"] == "too_many_streams"
                    async with http.stream("GET", f"/workflows/{wid}/events", headers=BOB) as r:
                        assert r.status_code == 404  # bob's own allowance; not his workflow
                svc = app.state.rsjobs
                await eventually(lambda: not svc.limiter.total)
                async with http.stream("GET", f"/workflows/{wid}/events", headers=ALICE) as r:
                    assert r.status_code == 200
    finally:
        await wf.close()


async def test_streams_end_when_redis_stays_unreachable(tmp_path: Path) -> None:
    """Redis dies and stays down: open task and workflow streams end within the bound,
    without `end` (EventSource reconnects with Last-Event-ID); a new stream is a 503; once
    Redis is back, resuming from the last id sent loses nothing."""
    from rsjobs import Settings, connect
    from rsjobs.workflows import WorkflowClient
    from tests.support.workflows import character

    server = EmbeddedRedis(appendonly=True, appendfsync="always", data_dir=str(tmp_path))
    server.start()
    client = Client.from_url(server.url, namespace=NAMESPACE)
    wf = WorkflowClient(connect(server.url), Settings(namespace=NAMESPACE), definitions=[])
    try:
        tid = await client.enqueue("x", owner="alice")
        wid = await wf.start(character(), {"n": 1}, owner="alice")
        app = make_app(server.url, keepalive_ms=200, redis_outage_ms=1000)
        with serve(app) as web:
            async with httpx.AsyncClient(base_url=web.url, timeout=10) as http:
                paths = [f"/tasks/{tid}/events", f"/workflows/{wid}/events"]
                async with contextlib.AsyncExitStack() as stack:
                    readers = []
                    for path in paths:
                        r = await stack.enter_async_context(http.stream("GET", path, headers=ALICE))
                        assert r.status_code == 200
                        readers.append(SSEReader(r))
                    # (a workflow stream begins with a status event)
                    firsts = [await readers[0].take(1), (await readers[1].take(2))[1:]]
                    assert all(len(f) == 1 and f[0].id for f in firsts), firsts
                    t0 = asyncio.get_running_loop().time()
                    await asyncio.to_thread(server.stop, kill=True)
                    rests = [await rd.rest(timeout=8) for rd in readers]
                    took = asyncio.get_running_loop().time() - t0
                    assert took < 1.0 + 4, took
                    for rd, rest in zip(readers, rests, strict=True):
                        assert not rd.cut  # ended cleanly by the server
                        assert "end" not in [e.event for e in rest]
                    r = await http.get(paths[0], headers=ALICE)
                    assert r.status_code == 503 and r.json()["error"] == "redis_unavailable"
                await asyncio.to_thread(server.start)
                await client.redis.connection_pool.disconnect()
                await client.cancel(tid)
                last = firsts[0][0].id
                async with stream(http, tid, ALICE, last=last) as (r, reader):
                    assert r.status_code == 200
                    got = firsts[0] + await reader.rest(timeout=15)
        await assert_is_history(client, tid, got)
        assert await wf.get(wid)
    finally:
        await client.close()
        await wf.close()
        server.cleanup()
