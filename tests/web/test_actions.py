"""The operator's routes over HTTP, checked against what Redis holds: a task's pause,
resume, retry and replay, a queue's pause and resume, bulk cancel and retry, a dead
letter's requeue. Every route: another owner's task is a 404 that writes nothing, admin
routes refuse other tokens (403), bad input is a 4xx with a reason that writes nothing."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import redis as sync_redis

from rsjobs import Client
from rsjobs.store import layout
from rsjobs.store.layout import QuarantineArgs
from tests.support.web import ALICE, BOB, ROOT, redis_state, running_worker

pytestmark = pytest.mark.integration

MISSING = "0" * 32


async def _alices(api: httpx.AsyncClient, **body: Any) -> str:
    r = await api.post("/tasks", json={"type": "noop", **body}, headers=ALICE)
    assert r.status_code == 202, r.text
    tid: str = r.json()["id"]
    return tid


async def _failed(client: Client, redis_url: str, **kw: Any) -> str:
    tid = await client.enqueue("fatal", {"n": 1}, owner="alice", **kw)
    async with running_worker(redis_url):
        assert (await client.wait(tid, timeout_ms=10_000)).state == "FAILED"
    return tid


def _unchanged(rdb: sync_redis.Redis, before: dict[bytes, Any]) -> None:
    assert redis_state(rdb) == before


async def test_pause_and_resume_a_task(
    api: httpx.AsyncClient, client: Client, rdb: sync_redis.Redis
) -> None:
    tid = await _alices(api)
    # another owner's task is a missing one, and nothing is written
    before = redis_state(rdb)
    for path in (f"/tasks/{tid}/pause", f"/tasks/{tid}/resume"):
        theirs = await api.post(path, headers=BOB)
        nothing = await api.post(path.replace(tid, MISSING), headers=BOB)
        assert theirs.status_code == nothing.status_code == 404
    _unchanged(rdb, before)
    r = await api.post(f"/tasks/{tid}/pause", json={"reason": "hold on"}, headers=ALICE)
    assert r.status_code == 200 and r.json() == {"id": tid, "state": "PAUSED", "changed": True}
    again = await api.post(f"/tasks/{tid}/pause", headers=ALICE)
    assert again.json() == {"id": tid, "state": "PAUSED", "changed": False}
    pause = next(e for e in await client.history(tid) if e.event == "PAUSE" and not e.rejected)
    assert (pause.source, pause.message) == ("owner:alice", "hold on")
    r = await api.post(f"/tasks/{tid}/resume", headers=ROOT)
    assert r.json() == {"id": tid, "state": "PENDING", "changed": True}
    assert (await client.history(tid))[-1].source == "admin:admin"
    # resume of a task that is not PAUSED: refused, and says why
    r = await api.post(f"/tasks/{tid}/resume", headers=ALICE)
    assert r.status_code == 409 and r.json()["error"] == "refused"
    assert "is PENDING" in r.json()["detail"]


async def test_cancel_records_who_cancelled(api: httpx.AsyncClient, client: Client) -> None:
    tid = await _alices(api)
    r = await api.post(f"/tasks/{tid}/cancel", json={"reason": "stop"}, headers=ALICE)
    assert r.json()["state"] == "CANCELLED"
    last = (await client.history(tid))[-1]
    assert (last.event, last.source, last.message) == ("CANCEL", "owner:alice", "stop")


async def test_retry_and_replay(
    api: httpx.AsyncClient, client: Client, redis_url: str, rdb: sync_redis.Redis
) -> None:
    tid = await _failed(client, redis_url)
    before = redis_state(rdb)
    for path in (f"/tasks/{tid}/retry", f"/tasks/{tid}/replay"):
        assert (await api.post(path, headers=BOB)).status_code == 404
    _unchanged(rdb, before)
    # replay is for a SUCCEEDED task: refused, recorded in the task's history
    r = await api.post(f"/tasks/{tid}/replay", headers=ALICE)
    assert r.status_code == 409 and "RETRY starts it over" in r.json()["detail"]
    assert (await client.history(tid))[-1].rejected
    r = await api.post(f"/tasks/{tid}/retry", json={"reason": "fixed"}, headers=ALICE)
    assert r.status_code == 202, r.text
    body = r.json()
    new = body["new_id"]
    assert body == {"id": tid, "event": "RETRY", "new_id": new, "state": "PENDING", "created": True}
    assert r.headers["location"] == f"/tasks/{new}"
    view = (await api.get(f"/tasks/{new}", headers=ALICE)).json()
    assert (view["retry_of"], view["owner"], view["type"]) == (tid, "alice", "fatal")
    old = (await api.get(f"/tasks/{tid}", headers=ALICE)).json()
    assert (old["state"], old["retried_as"]) == ("FAILED", new)
    assert old["recent"][-1]["event"] == "RETRY" and old["recent"][-1]["source"] == "owner:alice"
    # a second retry answers the same task (200), and writes nothing
    before = redis_state(rdb)
    again = await api.post(f"/tasks/{tid}/retry", headers=ALICE)
    assert again.status_code == 200 and again.json()["new_id"] == new
    assert again.json()["created"] is False
    _unchanged(rdb, before)
    # an unfinished task is refused (409)
    r = await api.post(f"/tasks/{new}/retry", headers=ALICE)
    assert r.status_code == 409 and "only a finished task" in r.json()["detail"]


async def test_the_traceback_shows_in_task_info_and_history(
    api: httpx.AsyncClient, client: Client, redis_url: str
) -> None:
    tid = await client.enqueue("needs_file", {"path": "/nonexistent/x"}, owner="alice",
                               max_attempts=1)  # fmt: skip
    async with running_worker(redis_url):
        await client.wait(tid, timeout_ms=10_000)
    view = (await api.get(f"/tasks/{tid}", headers=ALICE)).json()
    assert view["error_type"] == "FileNotFoundError"
    assert "FileNotFoundError" in view["traceback"] and "in _open_input" in view["traceback"]
    page = (await api.get(f"/tasks/{tid}/history", headers=ALICE)).json()
    fail = next(e for e in page["entries"] if e["event"] == "FAIL")
    assert fail["extra"]["traceback"] == view["traceback"]
    assert fail["extra"]["error_type"] == "FileNotFoundError"


async def test_queue_pause_is_for_admins(
    api: httpx.AsyncClient, client: Client, rdb: sync_redis.Redis
) -> None:
    tid = await _alices(api, queue="gpu")
    before = redis_state(rdb)
    r = await api.post("/queues/gpu/pause", headers=ALICE)
    assert r.status_code == 403 and r.json()["error"] == "forbidden"
    for bad in ("g%20pu", "g%0A", "x" * 200):
        r = await api.post(f"/queues/{bad}/pause", headers=ROOT)
        assert r.status_code in (400, 404), (bad, r.status_code)
    r = await api.post("/queues/gpu/pause", json={"unknown": 1}, headers=ROOT)
    assert r.status_code == 422
    _unchanged(rdb, before)
    r = await api.post("/queues/gpu/pause", json={"reason": "drivers"}, headers=ROOT)
    assert r.status_code == 200
    p = r.json()
    assert (p["queue"], p["paused"], p["changed"], p["by"], p["reason"]) == (
        "gpu", True, True, "admin:admin", "drivers",
    )  # fmt: skip
    assert (await api.get(f"/tasks/{tid}", headers=ALICE)).json()["queue_paused"] is True
    metrics = (await api.get("/metrics", headers=ROOT)).text
    assert 'rsjobs_queue_paused{queue="gpu"} 1.0' in metrics
    again = (await api.post("/queues/gpu/pause", headers=ROOT)).json()
    assert again["changed"] is False and again["reason"] == "drivers"
    r = await api.post("/queues/gpu/resume", headers=ROOT)
    assert r.json()["paused"] is False and r.json()["changed"] is True
    assert (await api.get(f"/tasks/{tid}", headers=ALICE)).json()["queue_paused"] is False


async def test_bulk_cancel_and_retry(
    api: httpx.AsyncClient, client: Client, redis_url: str, rdb: sync_redis.Redis
) -> None:
    ids = [await _alices(api, queue="gpu", payload={"i": i}) for i in range(4)]
    body = {"filter": {"queue": "gpu", "state": "PENDING"}, "dry_run": True, "limit": 2}
    before = redis_state(rdb)
    r = await api.post("/tasks/bulk/cancel", json=body, headers=ALICE)
    assert r.status_code == 403
    for bad in (
        {"filter": {}},  # every task: must be said
        {"filter": {"state": "DONE"}},
        {"filter": {"queue": "gpu"}, "limit": 0},
        {"filter": {"queue": "gpu"}, "limit": 1001},
        {"filter": {"queue": "gpu", "priority": 1}},
        {"filter": {"state": "SUCCEEDED"}},  # a finished task cannot be cancelled
        {"filter": {"since": 10, "until": 5}},
    ):
        r = await api.post("/tasks/bulk/cancel", json=bad, headers=ROOT)
        assert r.status_code == 422, (bad, r.text)
        assert r.json()["detail"]
    assert (await api.post("/tasks/bulk/cancel", content=b"{", headers=ROOT)).status_code == 400
    r = await api.post("/tasks/bulk/cancel", json=body, headers=ROOT)
    assert r.status_code == 200
    dry = r.json()
    assert (dry["matched"], len(dry["ids"]), dry["dry_run"], dry["items"]) == (4, 2, True, [])
    _unchanged(rdb, before)
    r = await api.post("/tasks/bulk/cancel", json={**body, "dry_run": False}, headers=ROOT)
    done = r.json()
    assert done["changed"] == 2 and {i["state"] for i in done["items"]} == {"CANCELLED"}
    cancelled = [i for i in ids if (await client.get(i)).state == "CANCELLED"]
    assert sorted(cancelled) == sorted(done["ids"])
    assert (await client.history(cancelled[0]))[-1].source == "admin:admin"
    # bulk retry: the cancelled ones start over
    r = await api.post("/tasks/bulk/retry", json={"filter": {"queue": "gpu"}}, headers=ROOT)
    assert r.status_code == 200 and r.json()["changed"] == 2
    for item in r.json()["items"]:
        assert (await client.get(item["new_id"])).retry_of == item["id"]
    r = await api.post("/tasks/bulk/retry", json={"filter": {"state": "PENDING"}}, headers=ROOT)
    assert r.status_code == 422


async def test_deadletter_requeue(
    api: httpx.AsyncClient, client: Client, rdb: sync_redis.Redis
) -> None:
    tid = await _alices(api, payload={"x": 1})
    plain = await _alices(api)
    # dead-letter it as the reaper's quarantine does
    (entry,) = [e for e, f in await client.redis.xrange(client.keys.queue("default"))
                if f["id"] == tid]  # fmt: skip
    k, scripts = client.keys, client.store.scripts
    args = QuarantineArgs(tid, "default", "queue", entry, "recovery", "test", 1000)
    keys = k.task_keys(tid, "default")
    await scripts.run(layout.quarantine(scripts.common, k, "reaper", keys, args))
    assert (await client.get(tid)).state == "FAILED"
    before = redis_state(rdb)
    assert (await api.post(f"/deadletters/{tid}/requeue", headers=BOB)).status_code == 404
    assert (await api.post(f"/deadletters/{MISSING}/requeue", headers=ROOT)).status_code == 404
    assert (await api.post("/deadletters/nothex/requeue", headers=ROOT)).status_code == 400
    r = await api.post(f"/deadletters/{plain}/requeue", headers=ALICE)
    assert r.status_code == 409 and r.json()["error"] == "not_dead_lettered"
    _unchanged(rdb, before)
    r = await api.post(f"/deadletters/{tid}/requeue", headers=ALICE)
    assert r.status_code == 202, r.text
    clone = r.json()["requeued_as"]
    assert r.json() == {"id": tid, "requeued_as": clone, "created": True}
    info = await client.get(clone)
    assert info.payload == {"x": 1} and info.owner == "alice"
    assert (await client.history(clone))[0].source == "owner:alice"
    again = await api.post(f"/deadletters/{tid}/requeue", headers=ALICE)
    assert again.status_code == 200 and again.json()["requeued_as"] == clone


@pytest.mark.parametrize(
    "path",
    ["/tasks/{t}/pause", "/tasks/{t}/resume", "/tasks/{t}/retry", "/tasks/{t}/replay",
     "/deadletters/{t}/requeue", "/queues/gpu/pause", "/queues/gpu/resume"],
)  # fmt: skip
async def test_bad_bodies_write_nothing(
    api: httpx.AsyncClient, rdb: sync_redis.Redis, path: str
) -> None:
    tid = await _alices(api)
    url = path.format(t=tid)
    before = redis_state(rdb)
    cases = [
        ({"content": b"{", "headers": {"Content-Type": "application/json"}}, 400),
        ({"content": b"x", "headers": {"Content-Type": "text/plain"}}, 415),
        ({"json": {"reason": "x" * 501}}, 422),
        ({"json": {"reason": "ok", "extra": 1}}, 422),
        ({"json": {"reason": 5}}, 422),
    ]
    for kw, status in cases:
        headers = {**ROOT, **kw.pop("headers", {})}
        r = await api.post(url, headers=headers, **kw)
        assert r.status_code == status, (url, kw, r.text)
        assert r.json()["detail"]
    r = await api.post(url + "?x=1", headers=ROOT)
    assert r.status_code == 400 and r.json()["error"] == "unknown_parameter"
    _unchanged(rdb, before)
