"""Owner isolation: a token sees and cancels only its owner's tasks; others answer 404."""

from __future__ import annotations

import httpx
import pytest

from rsjobs import Client
from tests.support.web import ALICE, BOB, ROOT

pytestmark = pytest.mark.integration


async def test_other_owners_task_is_404_everywhere(api: httpx.AsyncClient, client: Client) -> None:
    tid = (await api.post("/tasks", json={"type": "x"}, headers=ALICE)).json()["id"]
    missing = "0" * 32
    for path in (f"/tasks/{tid}", f"/tasks/{tid}/history", f"/tasks/{tid}/events"):
        theirs = await api.get(path, headers=BOB)
        nothing = await api.get(path.replace(tid, missing), headers=BOB)
        assert theirs.status_code == nothing.status_code == 404
        # indistinguishable from a task that does not exist
        assert theirs.json()["detail"].replace(tid, "") == nothing.json()["detail"].replace(
            missing, ""
        )
    r = await api.post(f"/tasks/{tid}/cancel", headers=BOB)
    assert r.status_code == 404
    assert (await client.get(tid)).state == "PENDING"  # bob's cancel did nothing
    assert [e.event for e in await client.history(tid)] == ["ENQUEUE"]
    # alice and the admin do see it
    assert (await api.get(f"/tasks/{tid}", headers=ALICE)).status_code == 200
    assert (await api.get(f"/tasks/{tid}", headers=ROOT)).json()["owner"] == "alice"
    r = await api.post(f"/tasks/{tid}/cancel", headers=ROOT)
    assert r.json()["state"] == "CANCELLED"


async def test_tasks_without_owner_are_admin_only(api: httpx.AsyncClient, client: Client) -> None:
    tid = await client.enqueue("x")  # submitted by a backend, no owner
    assert (await api.get(f"/tasks/{tid}", headers=ALICE)).status_code == 404
    assert (await api.get(f"/tasks/{tid}", headers=ROOT)).status_code == 200


async def test_owner_set_by_python_client_is_honoured(
    api: httpx.AsyncClient, client: Client
) -> None:
    tid = await client.enqueue("x", owner="bob")
    assert (await api.get(f"/tasks/{tid}", headers=BOB)).status_code == 200
    assert (await api.get(f"/tasks/{tid}", headers=ALICE)).status_code == 404


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic dXNlcjpwdw=="},
     {"Authorization": "Bearer "}],
)  # fmt: skip
async def test_missing_or_bad_token_is_401(api: httpx.AsyncClient, headers: dict[str, str]) -> None:
    for method, path in (("POST", "/tasks"), ("GET", "/tasks/" + "0" * 32)):
        r = await api.request(method, path, headers=headers, json={"type": "x"})
        assert r.status_code == 401
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert r.json()["error"] == "unauthorized"


async def test_token_in_query_only_for_event_streams(
    api: httpx.AsyncClient, client: Client
) -> None:
    tid = (await api.post("/tasks", json={"type": "x"}, headers=ALICE)).json()["id"]
    await client.cancel(tid)
    r = await api.get(f"/tasks/{tid}", params={"access_token": "tok-alice"})
    assert r.status_code == 401
    r = await api.get(f"/tasks/{tid}/events", params={"access_token": "tok-alice"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    r = await api.get(f"/tasks/{tid}/events", params={"access_token": "tok-bob"})
    assert r.status_code == 404


async def test_metrics_need_admin(api: httpx.AsyncClient) -> None:
    assert (await api.get("/metrics")).status_code == 401
    assert (await api.get("/metrics", headers=ALICE)).status_code == 403
    assert (await api.get("/metrics", headers=ROOT)).status_code == 200
    assert (await api.get("/healthz")).status_code == 200  # no token needed


async def test_dev_mode_anonymous(redis_url: str, client: Client) -> None:
    from tests.support.web import make_app

    app = make_app(redis_url, dev=True)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://x") as anon:
        r = await anon.post("/tasks", json={"type": "x"})
        assert r.status_code == 202
        tid = r.json()["id"]
        assert (await client.get(tid)).owner == ""
        theirs = await client.enqueue("x", owner="alice")
        assert (await anon.get(f"/tasks/{theirs}")).status_code == 200  # anonymous dev = admin
        # a token that is sent is still checked
        assert (
            await anon.get(f"/tasks/{tid}", headers={"Authorization": "Bearer bad"})
        ).status_code == 401
    await app.state.rsjobs.aclose()
