"""The workflow routes of the app over ASGI: owners see only their workflows (404
otherwise), bad input gets a 4xx with a reason and writes nothing, refused actions answer
409 and are recorded, and the SSE stream replays a workflow's history to its end (its
live part: ``test_workflow_sse.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import msgspec
import pytest

from rsjobs import Settings, connect
from rsjobs.workflows import WorkflowClient
from tests.support.web import make_app
from tests.support.wf_fixtures import NS
from tests.support.workflows import Hand, character

pytestmark = pytest.mark.integration

ALICE = {"Authorization": "Bearer tok-alice"}
BOB = {"Authorization": "Bearer tok-bob"}
ADMIN = {"Authorization": "Bearer tok-admin"}


@pytest.fixture
async def wf(redis_url: str) -> AsyncIterator[WorkflowClient]:
    c = WorkflowClient(connect(redis_url), Settings(namespace=NS), definitions=[character()])
    yield c
    await c.close()


@pytest.fixture
async def api(redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    app = make_app(redis_url, definitions=[character()], status_ms=50, keepalive_ms=200)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://rsjobs.test") as c:
        yield c
    await app.state.rsjobs.aclose()


async def snapshot(wf: WorkflowClient) -> dict[str, bytes | None]:
    """Every key with its DUMP: equal before and after means nothing was written."""
    keys = sorted([k async for k in wf.redis.scan_iter(count=1000)])
    return {k: await wf.redis.dump(k) for k in keys}


async def test_start_read_and_owner_isolation(api: httpx.AsyncClient) -> None:
    r = await api.post(
        "/workflows", json={"definition": "character", "input": {"n": 1}}, headers=ALICE
    )
    assert r.status_code == 202, r.text
    body = r.json()
    wid = body["id"]
    assert r.headers["location"] == f"/workflows/{wid}"
    assert body["workflow"]["status"] == "RUNNING" and body["workflow"]["owner"] == "alice"
    doc = (await api.get(f"/workflows/{wid}", headers=ALICE)).json()
    assert (
        doc["stage"] == "params" and doc["version"] == 1 and doc["tasks"][0]["state"] == "PENDING"
    )
    assert {"progress", "completed_assets", "running_tasks", "failed_tasks", "message"} <= set(doc)
    # another owner sees nothing, exactly like a missing workflow; an admin sees it
    missing = (await api.get("/workflows/" + "0" * 32, headers=BOB)).json()
    for path in ("", "/history", "/events"):
        r = await api.get(f"/workflows/{wid}{path}", headers=BOB)
        assert r.status_code == 404 and r.json()["error"] == missing["error"] == "not_found"
    r = await api.post(f"/workflows/{wid}/cancel", headers=BOB)
    assert r.status_code == 404
    assert (await api.get(f"/workflows/{wid}", headers=ADMIN)).status_code == 200
    assert (await api.get(f"/workflows/{wid}")).status_code == 401
    assert (await api.get("/workflows/not-an-id", headers=ALICE)).status_code == 400


async def test_bad_input_is_refused_and_writes_nothing(
    api: httpx.AsyncClient, wf: WorkflowClient
) -> None:
    wid = await wf.start("character", {"n": 1}, owner="alice")
    before = await snapshot(wf)
    cases = [
        ("/workflows", {"definition": "nope"}, 422, "unknown_definition"),
        ("/workflows", {"definition": "character", "extra": 1}, 422, "invalid_body"),
        ("/workflows", {"definition": "bad name!"}, 422, "invalid_body"),
        ("/workflows", {"definition": "character", "owner": "bob"}, 403, "forbidden"),
        (f"/workflows/{wid}/regenerate", {"stage": "nope"}, 422, "invalid_body"),
        (f"/workflows/{wid}/regenerate", {}, 422, "invalid_body"),
        (f"/workflows/{wid}/confirm", {"version": 0}, 422, "invalid_body"),
        (f"/workflows/{wid}/frobnicate", {}, 404, "not_found"),
    ]
    for path, body, status, code in cases:
        r = await api.post(path, json=body, headers=ALICE)
        assert (r.status_code, r.json()["error"]) == (status, code), (path, body, r.text)
        assert r.json()["detail"]
    r = await api.post("/workflows", content=b"{not json", headers=ALICE)
    assert r.status_code == 400 and r.json()["error"] == "invalid_json"
    r = await api.post(f"/workflows/{wid}/regenerate", content=b"", headers=ALICE)
    assert r.status_code == 400
    assert await snapshot(wf) == before


async def test_refused_actions_answer_409_and_are_recorded(
    api: httpx.AsyncClient, wf: WorkflowClient
) -> None:
    wid = await wf.start("character", {"n": 1}, owner="alice")
    r = await api.post(f"/workflows/{wid}/confirm", headers=ALICE)
    assert r.status_code == 409 and "not WAITING_CONFIRMATION" in r.json()["detail"]
    hand = Hand(wf.redis, wf.settings)
    await hand.complete((await hand.claim())[0])
    r = await api.post(f"/workflows/{wid}/confirm", json={"version": 1}, headers=ALICE)
    assert r.status_code == 200 and r.json()["status"] == "RUNNING"
    assert r.json()["workflow"]["stage"] == "images"
    r = await api.post(f"/workflows/{wid}/regenerate", json={"stage": "params"}, headers=ALICE)
    assert r.status_code == 200 and r.json()["workflow"]["version"] == 2
    page = (await api.get(f"/workflows/{wid}/history", headers=ALICE)).json()
    refused = [e for e in page["entries"] if e["rejected"]]
    assert [e["event"] for e in refused] == ["CONFIRM"]
    assert "by alice" in next(e for e in page["entries"] if e["event"] == "REGENERATE")["message"]


async def test_idempotency_key_names_one_workflow(api: httpx.AsyncClient) -> None:
    h = {**ALICE, "Idempotency-Key": "signup-42"}
    body = {"definition": "character", "input": {"n": 1}}
    first = await api.post("/workflows", json=body, headers=h)
    again = await api.post("/workflows", json=body, headers=h)
    assert first.status_code == 202 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"] and again.json()["changed"] is False
    other = await api.post("/workflows", json={**body, "input": {"n": 2}}, headers=h)
    assert other.status_code == 422 and other.json()["error"] == "idempotency_key_reused"
    bobs = await api.post("/workflows", json=body, headers={**BOB, "Idempotency-Key": "signup-42"})
    assert bobs.status_code == 202 and bobs.json()["id"] != first.json()["id"]


async def test_events_replay_to_the_end(api: httpx.AsyncClient, wf: WorkflowClient) -> None:
    wid = await wf.start("character", {"n": 1}, owner="alice")
    hand = Hand(wf.redis, wf.settings)
    await hand.complete((await hand.claim())[0])
    await wf.cancel(wid, "changed my mind")
    r = await api.get(f"/workflows/{wid}/events", headers=ALICE)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    blocks = [b for b in r.text.split("\n\n") if b.strip()]
    ids = [line[4:] for b in blocks for line in b.splitlines() if line.startswith("id: ")]
    history = await wf.history(wid)
    assert ids == [e.id for e in history]
    status = next(b for b in blocks if b.startswith("event: status"))
    doc = msgspec.json.decode(status.split("data: ", 1)[1])
    assert doc["id"] == wid
    assert blocks[-1].startswith("event: end")
    # reconnecting after the last entry: nothing left, 204 stops EventSource
    r = await api.get(f"/workflows/{wid}/events", headers={**ALICE, "Last-Event-ID": ids[-1]})
    assert r.status_code == 204
    # resuming from the middle replays exactly the rest
    r = await api.get(f"/workflows/{wid}/events?access_token=tok-alice&last_event_id={ids[1]}")
    rest = [line[4:] for line in r.text.splitlines() if line.startswith("id: ")]
    assert rest == ids[2:]
