"""Workflow event streams over a real server: they follow the workflow live from the hub
(no blocking read, so no Redis connection, per open stream), replay without gap or
duplicate after the hub missed entries, and carry the status within ``status_ms`` of a
task's progress."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import redis as sync_redis

from rsjobs import Settings, connect
from rsjobs.workflows import WorkflowClient
from tests.support.web import ALICE, ServerThread, SSEEvent, SSEReader, make_app, serve
from tests.support.wf_fixtures import NS
from tests.support.workflows import Hand, character

pytestmark = pytest.mark.integration

STATUS_MS = 100
#: status documents the progress test waits for while the reports go on
DURING = 3


@pytest.fixture
async def wf(redis_url: str) -> AsyncIterator[WorkflowClient]:
    c = WorkflowClient(connect(redis_url), Settings(namespace=NS), definitions=[character()])
    yield c
    await c.close()


@pytest.fixture
def server(redis_url: str) -> Iterator[ServerThread]:
    app = make_app(
        redis_url,
        definitions=[character()],
        status_ms=STATUS_MS,
        keepalive_ms=60_000,
        max_streams_per_client=0,
    )
    with serve(app) as s:
        yield s


def entry_ids(events: list[SSEEvent]) -> list[str]:
    return [e.id for e in events if e.id is not None]


def statuses(events: list[SSEEvent]) -> list[str]:
    return [e.json()["status"] for e in events if e.event == "status"]


async def test_live_events_follow_the_workflow(server: ServerThread, wf: WorkflowClient) -> None:
    wid = await wf.start("character", {"n": 1}, owner="alice")
    hand = Hand(wf.redis, wf.settings)
    async with (
        httpx.AsyncClient(base_url=server.url, timeout=10) as http,
        http.stream("GET", f"/workflows/{wid}/events", headers=ALICE) as r,
    ):
        assert r.status_code == 200
        sse = SSEReader(r)
        first = await sse.take(2)  # the status, then START
        assert [first[0].event, first[1].id] == ["status", (await wf.history(wid))[0].id]
        await hand.complete((await hand.claim())[0])
        events = first
        async with asyncio.timeout(10):  # the gate's status arrives live
            while "WAITING_CONFIRMATION" not in statuses(events):
                ev = await sse.next()
                assert ev is not None
                events.append(ev)
        await wf.confirm(wid)
        await wf.cancel(wid)
        events += await sse.rest()
    assert entry_ids(events) == [e.id for e in await wf.history(wid)]
    seen = statuses(events)
    assert seen[0] == "RUNNING" and seen[-1] == "CANCELLED"
    assert events[-1].event == "end"


async def test_replays_what_the_hub_missed(server: ServerThread, wf: WorkflowClient) -> None:
    """Entries written while the hub is stopped reach the stream when it restarts (it
    asks every watcher to read its history again): none lost, none twice."""
    wid = await wf.start("character", {"n": 1}, owner="alice")
    svc = server.app.state.rsjobs
    hub, loop = svc.hub, svc._loop  # the server's event loop, where the hub runs
    hand = Hand(wf.redis, wf.settings)
    async with (
        httpx.AsyncClient(base_url=server.url, timeout=10) as http,
        http.stream("GET", f"/workflows/{wid}/events", headers=ALICE) as r,
    ):
        sse = SSEReader(r)
        first = await sse.take(2)
        asyncio.run_coroutine_threadsafe(hub.aclose(), loop).result(10)
        await hand.complete((await hand.claim())[0])  # SPAWN.., ASSET, GATE: unheard
        await wf.confirm(wid)
        asyncio.run_coroutine_threadsafe(hub.start(), loop).result(10)
        await wf.cancel(wid)
        events = first + await sse.rest()
    assert entry_ids(events) == [e.id for e in await wf.history(wid)]
    assert events[-1].event == "end"


async def test_open_streams_hold_no_redis_connection(
    server: ServerThread, wf: WorkflowClient, redis_url: str
) -> None:
    """50 open workflow streams: the server's Redis connections do not grow with them
    (each used to hold a blocking XREAD), and every stream is still live."""
    ids = [await wf.start("character", {"n": i}, owner="alice") for i in range(50)]
    r = sync_redis.Redis.from_url(redis_url)
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as http:
        await http.get("/healthz")  # the app's pool and the hub's connection exist
        before = len(r.client_list())
        streams, readers = [], []
        try:
            for wid in ids:
                # one at a time: concurrent connects would open pool connections at once
                cm = http.stream("GET", f"/workflows/{wid}/events", headers=ALICE)
                resp = await cm.__aenter__()
                streams.append(cm)
                reader = SSEReader(resp)
                assert [e.event for e in await reader.take(2)] == ["status", "message"]
                readers.append(reader)
            after = len(r.client_list())
            print(f"\nCLIENT LIST: {before} before, {after} with 50 open workflow streams")
            assert after - before <= 2, (before, after)
            for wid in ids:
                await wf.cancel(wid)
            for wid, reader in zip(ids, readers, strict=True):
                rest = await reader.rest()
                assert rest[-1].event == "end" and statuses(rest)[-1] == "CANCELLED", wid
        finally:
            for cm in streams:
                await cm.__aexit__(None, None, None)
            r.close()


async def test_status_within_status_ms_of_progress(
    server: ServerThread, wf: WorkflowClient
) -> None:
    """A task reports progress every 10 ms: status documents come while the reports go on
    (not only once they stop), each report is shown (or overtaken by a later one) within
    status_ms, and they are coalesced (about one per status_ms, not one per report)."""
    wid = await wf.start("character", {"n": 1}, owner="alice")
    hand = Hand(wf.redis, wf.settings)
    (task,) = await hand.claim()
    written: dict[float, float] = {}  # progress -> when it was written (monotonic)
    seen: dict[float, float] = {}  # progress -> when a status first showed it
    count = 0
    last = asyncio.Event()  # a status showed the last report
    final: list[float] = []

    async def watch(sse: SSEReader) -> None:
        nonlocal count
        while (ev := await sse.next()) is not None:
            if ev.event == "status":
                count += 1
                for t in ev.json()["tasks"]:
                    seen.setdefault(float(t["progress"]), time.monotonic())
                if final and final[0] in seen:
                    last.set()

    async with (
        httpx.AsyncClient(base_url=server.url, timeout=10) as http,
        http.stream("GET", f"/workflows/{wid}/events", headers=ALICE) as r,
    ):
        sse = SSEReader(r)
        await sse.take(3)  # status, START, SPAWN
        count = 0
        reader = asyncio.create_task(watch(sse))
        started = time.monotonic()
        # reports go on until DURING statuses came (a stream that waited for the
        # reports to stop would show none: the bound of 100 reports ends it)
        for n in range(1, 101):
            written[float(n)] = time.monotonic()
            await hand.progress(task, n)
            if count >= DURING:
                break
            await asyncio.sleep(0.01)
        assert count >= DURING, f"{count} status documents during {len(written)} reports"
        final.append(max(written))
        if final[0] in seen:
            last.set()
        async with asyncio.timeout(10):
            await last.wait()
        elapsed = time.monotonic() - started
        reader.cancel()
    lags = {p: seen[p] - written[p] for p in seen if p in written}
    # a report is shown, or overtaken by a later one, within status_ms (plus delivery)
    for p, at in written.items():
        shown = min((seen[q] for q in seen if q >= p), default=None)
        assert shown is not None and shown - at <= STATUS_MS / 1000 + 0.4, (p, shown, at)
    print(f"\nstatus lag after progress: max {max(lags.values()) * 1000:.0f} ms "
          f"(status_ms {STATUS_MS}); {count} status documents for {len(written)} reports "
          f"in {elapsed:.2f} s")  # fmt: skip
    assert count <= elapsed / (STATUS_MS / 1000) + 2
    assert count < len(written)
