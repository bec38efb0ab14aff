"""``GET /events`` against a real uvicorn server: every entry of the namespace's events
stream is one SSE event (task id, event, state, queue, workflow id), live; a reconnect with
Last-Event-ID resumes exactly after it (nothing missed, nothing repeated); entries trimmed
away are announced with a ``gap``; idle connections get keep-alive comments; admin only,
the token also as ``?access_token=``; malformed or future ids are a 400 that writes
nothing; and the hub holds no entry per follower."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import redis as sync_redis

from rsjobs.web.hub import Tail
from tests.support.web import (
    ADMIN,
    ALICE,
    NAMESPACE,
    ROOT,
    ServerThread,
    SSEReader,
    make_app,
    redis_state,
    serve,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def web(redis_url: str) -> Iterator[ServerThread]:
    with serve(make_app(redis_url, keepalive_ms=200, max_streams_per_client=64)) as server:
        yield server


@contextlib.asynccontextmanager
async def stream(
    http: httpx.AsyncClient, last: str | None = None, headers: dict[str, str] = ROOT
) -> AsyncIterator[tuple[httpx.Response, SSEReader]]:
    h = dict(headers)
    if last is not None:
        h["Last-Event-ID"] = last
    async with http.stream("GET", "/events", headers=h) as r:
        yield r, SSEReader(r)


async def submit(http: httpx.AsyncClient, queue: str = "gpu") -> str:
    r = await http.post("/tasks", json={"type": "img", "queue": queue}, headers=ALICE)
    assert r.status_code == 202, r.text
    tid: str = r.json()["id"]
    return tid


async def test_live_events_then_resume_exactly_after_the_last_id(web: ServerThread) -> None:
    async with httpx.AsyncClient(base_url=web.url, timeout=10) as http:
        a = await submit(http)  # before the stream: not sent (it starts at the end)
        async with stream(http) as (r, sse):
            assert r.status_code == 200 and r.headers["content-type"].startswith(
                "text/event-stream"
            )
            b = await submit(http)
            await http.post(f"/tasks/{a}/cancel", headers=ALICE)
            await http.post(f"/tasks/{b}/cancel", headers=ALICE)
            got = await sse.take(2)
        assert [(e.json()["task_id"], e.json()["event"], e.json()["state"]) for e in got] == [
            (a, "CANCEL", "CANCELLED"),
            (b, "CANCEL", "CANCELLED"),
        ]
        first = got[0].json()
        assert first["queue"] == "gpu" and first["id"] == got[0].id and first["ts"] > 0
        assert not first["rejected"] and first["workflow_id"] == ""
        # while disconnected: a refusal and two more tasks' events
        await http.post(f"/tasks/{a}/cancel", headers=ALICE)  # repeat: changes nothing
        c = await submit(http, "cpu")
        await http.post(f"/tasks/{c}/pause", headers=ROOT)
        await http.post(f"/tasks/{c}/cancel", headers=ALICE)
        async with stream(http, last=got[0].id) as (r, sse):
            again = await sse.take(4)
            assert [
                (e.json()["task_id"], e.json()["state"], e.json()["rejected"]) for e in again
            ] == [
                (b, "CANCELLED", False),
                (a, "CANCELLED", True),  # the refused repeat is an event too
                (c, "PAUSED", False),
                (c, "CANCELLED", False),
            ]
            assert again[0].id == got[1].id
            with pytest.raises(TimeoutError):  # nothing more: comments only
                await sse.take(1, timeout=0.8)


async def test_idle_streams_get_keepalive_comments(web: ServerThread) -> None:
    async with httpx.AsyncClient(base_url=web.url, timeout=10) as http:
        token = ADMIN
        async with http.stream("GET", f"/events?access_token={token}") as r:
            assert r.status_code == 200
            sse = SSEReader(r)
            with contextlib.suppress(TimeoutError):
                await sse.take(1, timeout=0.9)
            assert "keep-alive" in sse.comments and sse.retry is not None


async def test_trimmed_entries_are_announced(web: ServerThread, redis_url: str) -> None:
    r = sync_redis.Redis.from_url(redis_url, decode_responses=True)
    async with httpx.AsyncClient(base_url=web.url, timeout=10) as http:
        a = await submit(http)
        await http.post(f"/tasks/{a}/cancel", headers=ALICE)
        key = f"rsjobs:{{{NAMESPACE}}}:events"
        (old_id,) = [i for i, _ in r.xrange(key)]
        b = await submit(http)
        await http.post(f"/tasks/{b}/cancel", headers=ALICE)
        r.xtrim(key, maxlen=0)  # every entry trimmed away, the one after old_id too
        c = await submit(http)
        await http.post(f"/tasks/{c}/cancel", headers=ALICE)
        async with stream(http, last=old_id) as (resp, sse):
            assert resp.status_code == 200
            gap, ev = await sse.take(2)
            assert gap.event == "gap" and gap.json() == {"after": old_id}
            assert ev.json()["task_id"] == c
    r.close()


@pytest.mark.parametrize(
    ("headers", "query", "status", "code"),
    [
        (ALICE, "", 403, "forbidden"),
        ({}, "", 401, None),
        (ROOT, "?last_event_id=5", 400, "invalid_last_event_id"),
        (ROOT, "?last_event_id=x-1", 400, "invalid_last_event_id"),
        (ROOT, "?last_event_id=99999999999999-0", 400, "invalid_last_event_id"),
        (ROOT, "?last_event_id=18446744073709551616-0", 400, "invalid_last_event_id"),
        (ROOT, "?other=1", 400, None),
        ({}, "?access_token=nope", 401, None),
    ],
)
async def test_bad_requests_are_refused_and_write_nothing(
    web: ServerThread,
    redis_url: str,
    headers: dict[str, str],
    query: str,
    status: int,
    code: str | None,
) -> None:
    rdb = sync_redis.Redis.from_url(redis_url)
    async with httpx.AsyncClient(base_url=web.url, timeout=10) as http:
        await submit(http)
        before = redis_state(rdb)
        r = await http.get(f"/events{query}", headers=headers)
        assert r.status_code == status, r.text
        if code is not None:
            assert r.json()["error"] == code
    assert redis_state(rdb) == before
    rdb.close()


def test_a_tail_holds_flags_not_entries() -> None:
    t = Tail()
    for _ in range(10_000):
        t.notify()
    assert t.__slots__ == ("closed", "grew", "wake") and t.take() is True and t.take() is False


async def test_workflow_entries_carry_the_workflow_id(redis_url: str) -> None:
    from rsjobs import Settings, connect
    from rsjobs.workflows import WorkflowClient
    from tests.support.workflows import character

    wf = WorkflowClient(
        connect(redis_url), Settings(namespace=NAMESPACE), definitions=[character()]
    )
    try:
        wid = await wf.start("character", {"n": 1}, owner="alice")
        await wf.cancel(wid, "stop")
        events = wf.store.events
        described = await events.describe(await events.after("0-0", 100))
    finally:
        await wf.close()
    notes = [(e.event, e.task_id) for e in described if e.workflow_id == wid and not e.task_id]
    assert ("START", "") in notes and ("CANCEL", "") in notes
    tasks = [e for e in described if e.task_id]
    assert tasks and all(e.workflow_id == wid for e in tasks)
    assert {(e.event, e.state, e.queue) for e in tasks} == {("CANCEL", "CANCELLED", "wf")}


async def test_a_stream_ends_after_its_lifetime(redis_url: str) -> None:
    with serve(make_app(redis_url, keepalive_ms=100, live_stream_ms=400)) as server:
        async with (
            httpx.AsyncClient(base_url=server.url, timeout=10) as http,
            stream(http) as (r, sse),
        ):
            assert r.status_code == 200
            assert await sse.rest(timeout=5) == [] and not sse.cut
