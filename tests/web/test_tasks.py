"""Submit, read, history and cancel over HTTP, checked against what Redis holds."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from rsjobs import Client
from rsjobs.web.routes import Api
from tests.support.web import ALICE, BOB, ROOT, eventually, running_worker

pytestmark = pytest.mark.integration


async def test_submit_then_read_back(api: httpx.AsyncClient, client: Client) -> None:
    r = await api.post(
        "/tasks",
        json={"type": "render", "payload": {"prompt": "a cat"}, "queue": "images",
              "max_attempts": 2, "timeout_ms": 60000},
        headers=ALICE,
    )  # fmt: skip
    assert r.status_code == 202, r.text
    body = r.json()
    tid = body["id"]
    assert body == {"id": tid, "state": "PENDING", "duplicate": False}
    assert r.headers["location"] == f"/tasks/{tid}"
    # what the client (the source of truth) says
    info = await client.get(tid)
    assert (info.type, info.queue, info.owner, info.state) == (
        "render",
        "images",
        "alice",
        "PENDING",
    )
    assert info.payload == {"prompt": "a cat"} and info.max_attempts == 2

    r = await api.get(f"/tasks/{tid}", headers=ALICE)
    assert r.status_code == 200
    view = r.json()
    assert view["state"] == "PENDING" and view["terminal"] is False
    assert view["owner"] == "alice" and view["payload"] == {"prompt": "a cat"}
    assert view["created_at"] == info.created_at > 0
    assert [e["event"] for e in view["recent"]] == ["ENQUEUE"]
    assert view["recent"][0]["to_state"] == "PENDING"


async def test_delayed_submit_is_scheduled(api: httpx.AsyncClient) -> None:
    r = await api.post("/tasks", json={"type": "x", "delay_ms": 60000}, headers=BOB)
    assert r.status_code == 202 and r.json()["state"] == "SCHEDULED"


async def test_idempotency_key_header_and_body(api: httpx.AsyncClient, client: Client) -> None:
    req = {"type": "render", "payload": {"n": 1}}
    first = await api.post("/tasks", json=req, headers={**ALICE, "Idempotency-Key": "k-1"})
    again = await api.post("/tasks", json=req, headers={**ALICE, "Idempotency-Key": "k-1"})
    body = await api.post("/tasks", json={**req, "dedup_key": "k-1"}, headers=ALICE)
    assert first.status_code == again.status_code == body.status_code == 202
    tid = first.json()["id"]
    assert again.json() == {"id": tid, "state": "PENDING", "duplicate": True}
    assert body.json()["id"] == tid
    assert len(await client.history(tid)) == 1  # one ENQUEUE: nothing else was written
    # scoped per owner: bob's identical key is bob's own task
    other = await api.post("/tasks", json=req, headers={**BOB, "Idempotency-Key": "k-1"})
    assert other.json()["id"] != tid and other.json()["duplicate"] is False
    # the same key with a different request is refused, not silently merged
    r = await api.post(
        "/tasks",
        json={"type": "render", "payload": {"n": 2}},
        headers={**ALICE, "Idempotency-Key": "k-1"},
    )
    assert r.status_code == 422 and r.json()["error"] == "idempotency_key_reused"
    # header and body disagreeing is a client bug
    r = await api.post(
        "/tasks", json={**req, "dedup_key": "k-2"}, headers={**ALICE, "Idempotency-Key": "k-1"}
    )
    assert r.status_code == 400


async def test_a_key_reused_during_a_submit_is_refused_too(
    api: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The submit that loses the race to a concurrent one with the same key and another
    request gets the same 422 (the client applies the rule after enqueue.lua)."""
    key = {**ALICE, "Idempotency-Key": "k"}
    first = await api.post("/tasks", json={"type": "render", "payload": 1}, headers=key)

    async def saw_nothing(self: Api, dedup: str, req: object) -> None:  # read before `first`
        return None

    monkeypatch.setattr(Api, "duplicate_of", saw_nothing)
    r = await api.post("/tasks", json={"type": "render", "payload": 2}, headers=key)
    assert r.status_code == 422 and r.json()["error"] == "idempotency_key_reused", r.text
    assert first.json()["id"] in r.json()["detail"]
    same = await api.post("/tasks", json={"type": "render", "payload": 1}, headers=key)
    assert same.status_code == 202 and same.json()["id"] == first.json()["id"]
    assert same.json()["duplicate"] is True


async def test_history_pages(api: httpx.AsyncClient, client: Client) -> None:
    tid = (await api.post("/tasks", json={"type": "x"}, headers=ALICE)).json()["id"]
    await client.pause(tid)
    await client.resume(tid)
    await client.cancel(tid)
    full = (await api.get(f"/tasks/{tid}/history", headers=ALICE)).json()
    expected = [e.id for e in await client.history(tid)]
    assert [e["id"] for e in full["entries"]] == expected
    assert [e["event"] for e in full["entries"]] == ["ENQUEUE", "PAUSE", "RESUME", "CANCEL"]
    assert full["next"] == expected[-1]
    # paging with after/limit walks the same entries
    seen, after = [], "0-0"
    while True:
        page = (
            await api.get(
                f"/tasks/{tid}/history", params={"after": after, "limit": 1}, headers=ALICE
            )
        ).json()
        if not page["entries"]:
            assert page["next"] is None
            break
        seen += [e["id"] for e in page["entries"]]
        after = page["next"]
    assert seen == expected


async def test_cancel_is_idempotent(api: httpx.AsyncClient, client: Client) -> None:
    tid = (await api.post("/tasks", json={"type": "x"}, headers=ALICE)).json()["id"]
    r = await api.post(f"/tasks/{tid}/cancel", json={"reason": "changed my mind"}, headers=ALICE)
    assert r.status_code == 200
    assert r.json() == {"id": tid, "state": "CANCELLED", "changed": True}
    before = await client.get(tid)
    assert before.state == "CANCELLED" and "changed my mind" in before.error
    # a second cancel (with or without a body) answers the same and changes nothing
    bodies: list[dict[str, Any]] = [{}, {"json": {}}, {"json": {"reason": "again"}}]
    for kw in bodies:
        r = await api.post(f"/tasks/{tid}/cancel", headers=ALICE, **kw)
        assert r.status_code == 200
        assert r.json() == {"id": tid, "state": "CANCELLED", "changed": False}
    after = await client.get(tid)
    assert after == before  # state, error, finished_at, updated_at: all as they were
    applied = [e for e in await client.history(tid) if not e.rejected]
    assert [e.event for e in applied] == ["ENQUEUE", "CANCEL"]


async def test_cancel_of_a_succeeded_task_changes_nothing(
    api: httpx.AsyncClient, client: Client, redis_url: str
) -> None:
    tid = (
        await api.post("/tasks", json={"type": "noop", "payload": {"v": 7}}, headers=ALICE)
    ).json()["id"]
    async with running_worker(redis_url):
        done = await client.wait(tid, timeout_ms=10_000)
    assert done.state == "SUCCEEDED"
    r = await api.post(f"/tasks/{tid}/cancel", headers=ALICE)
    assert r.status_code == 200
    assert r.json() == {"id": tid, "state": "SUCCEEDED", "changed": False}
    after = await client.get(tid)
    assert after == done and after.result == {"v": 7}
    view = (await api.get(f"/tasks/{tid}", headers=ALICE)).json()
    assert view["state"] == "SUCCEEDED" and view["result"] == {"v": 7} and view["terminal"]


async def test_cancel_of_a_running_task(
    api: httpx.AsyncClient, client: Client, redis_url: str
) -> None:
    from tests.support.processes import wait_for_state

    tid = (
        await api.post("/tasks", json={"type": "sleep", "payload": {"s": 30}}, headers=ALICE)
    ).json()["id"]
    async with running_worker(redis_url) as w:
        await wait_for_state(client, tid, "RUNNING")
        r = await api.post(f"/tasks/{tid}/cancel", headers=ALICE)
        assert r.json() == {"id": tid, "state": "CANCELLED", "changed": True}
        assert (await client.get(tid)).state == "CANCELLED"
        # the running handler is stopped and the worker's slot freed
        await eventually(lambda: tid not in w.jobs, what="handler stopped")


async def test_admin_submits_on_behalf_of_an_owner(api: httpx.AsyncClient, client: Client) -> None:
    r = await api.post("/tasks", json={"type": "x", "owner": "bob"}, headers=ROOT)
    tid = r.json()["id"]
    assert (await client.get(tid)).owner == "bob"
    assert (await api.get(f"/tasks/{tid}", headers=BOB)).status_code == 200
    # an ordinary token cannot
    r = await api.post("/tasks", json={"type": "x", "owner": "bob"}, headers=ALICE)
    assert r.status_code == 403
