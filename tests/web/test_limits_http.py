"""Shared queues over HTTP (rsjobs.limits): priority on POST /tasks and in GET /tasks/{id}
and the lists; the admin routes of per-owner limits and rate limits; bad values are a
422 (or 400) with a reason and change nothing; other tokens get a 403."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import redis as sync_redis

from rsjobs import Client
from tests.support.web import ALICE, ROOT, redis_state

pytestmark = pytest.mark.integration


async def test_priority_on_submit_and_shown_with_the_task(
    api: httpx.AsyncClient, client: Client, rdb: sync_redis.Redis
) -> None:
    r = await api.post("/tasks", json={"type": "noop", "priority": 7}, headers=ALICE)
    assert r.status_code == 202, r.text
    tid = r.json()["id"]
    view = (await api.get(f"/tasks/{tid}", headers=ALICE)).json()
    assert view["priority"] == 7
    assert view["recent"][0]["extra"] == {"pr": "7"}  # the ENQUEUE entry names it
    page = (await api.get("/tasks?state=PENDING", headers=ALICE)).json()
    assert [(i["id"], i["priority"]) for i in page["items"]] == [(tid, 7)]
    assert (await client.get(tid)).priority == 7
    before = redis_state(rdb)
    for bad in (-1, 10, 1.5, "3", True, None):
        r = await api.post("/tasks", json={"type": "noop", "priority": bad}, headers=ALICE)
        assert r.status_code == 422, (bad, r.text)
        assert "priority" in r.json()["detail"]
    assert redis_state(rdb) == before


async def test_limits_routes_set_show_and_clear(
    api: httpx.AsyncClient, client: Client, rdb: sync_redis.Redis
) -> None:
    await client.enqueue("noop", queue="gpu")
    r = await api.put("/queues/gpu/limits", json={"limit": 2}, headers=ROOT)
    assert r.status_code == 200, r.text
    assert r.json()["default"] == 2
    r = await api.put("/queues/gpu/limits/vip", json={"limit": 10}, headers=ROOT)
    assert r.json()["owners"] == {"vip": 10}
    r = await api.put("/queues/gpu/rate", json={"per_second": 5}, headers=ROOT)
    assert r.json()["rates"] == [
        {"queue": "gpu", "type": "", "retries": False, "per_second": 5.0, "burst": 5}
    ]
    r = await api.put("/queues/gpu/rate/render/retries", json={"per_second": 0.5, "burst": 1},
                      headers=ROOT)  # fmt: skip
    rates = {(x["type"], x["retries"]): x["per_second"] for x in r.json()["rates"]}
    assert rates == {("", False): 5.0, ("render", True): 0.5}
    assert (await client.limits("gpu"))[0].owners == {"vip": 10}
    listed = (await api.get("/limits", headers=ROOT)).json()["queues"]
    assert [q["queue"] for q in listed] == ["gpu"]
    shown = (await api.get("/queues/gpu/limits", headers=ROOT)).json()
    assert shown["default"] == 2 and shown["waiting"] == 0
    # bad values: a 422 (or a 400 for the path) with a reason, and nothing written
    before = redis_state(rdb)
    bad: list[tuple[str, str, Any, int]] = [
        ("PUT", "/queues/gpu/limits", {"limit": 0}, 422),
        ("PUT", "/queues/gpu/limits", {"limit": -3}, 422),
        ("PUT", "/queues/gpu/limits", {"limit": 10**9}, 422),
        ("PUT", "/queues/gpu/limits", {"limit": "2"}, 422),
        ("PUT", "/queues/gpu/limits", {"limit": 2, "extra": 1}, 422),
        ("PUT", "/queues/gpu/limits/not%20an%20owner", {"limit": 2}, 400),
        ("PUT", "/queues/bad%20queue/limits", {"limit": 2}, 400),
        ("PUT", "/queues/gpu/rate", {"per_second": 0}, 422),
        ("PUT", "/queues/gpu/rate", {"per_second": -1}, 422),
        ("PUT", "/queues/gpu/rate", {"per_second": 5, "burst": 0}, 422),
        ("PUT", "/queues/gpu/rate", {"per_second": 1e12}, 422),
        ("DELETE", "/queues/gpu/limits/nobody", None, 404),
        ("DELETE", "/queues/gpu/rate/nothing", None, 404),
    ]
    for method, path, body, status in bad:
        r = await api.request(method, path, json=body, headers=ROOT)
        assert r.status_code == status, (method, path, body, r.text)
        assert r.json()["detail"]
    # an owner's token may not touch them
    for method, path, body in (("GET", "/limits", None), ("PUT", "/queues/gpu/limits",
                                                           {"limit": 1})):  # fmt: skip
        r = await api.request(method, path, json=body, headers=ALICE)
        assert r.status_code == 403
    assert redis_state(rdb) == before
    r = await api.delete("/queues/gpu/limits/vip", headers=ROOT)
    assert r.status_code == 200 and r.json()["owners"] == {}
    r = await api.delete("/queues/gpu/rate/render/retries", headers=ROOT)
    assert [x["type"] for x in r.json()["rates"]] == [""]
    r = await api.delete("/queues/gpu/limits", headers=ROOT)
    assert r.json()["default"] is None
