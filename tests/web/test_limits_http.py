"""Shared queues over HTTP (rsjobs.limits): priority on POST /tasks and in GET /tasks/{id}
and the lists; the admin routes of per-owner limits and rate limits; bad values are a
422 (or 400) with a reason and change nothing; other tokens get a 403."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import redis as sync_redis

from rsjobs import Client, ConfigError
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
        ("PUT", "/queues/gpu/rate", {"per_second": 1e-9}, 422),
        ("PUT", "/queues/gpu/rate", {"per_second": 0.0009}, 422),
        ("PUT", "/queues/gpu/rate", {"per_second": 1e308}, 422),
        ("PUT", "/queues/gpu/rate", {"per_second": 5, "burst": 10**12}, 422),
        ("PUT", "/queues/gpu/rate/a%20b", {"per_second": 5}, 400),
        ("PUT", "/queues/gpu/rate/t%0A", {"per_second": 5}, 400),
        ("PUT", "/queues/gpu/rate/%E2%91%A0", {"per_second": 5}, 400),
        ("PUT", "/queues/gpu/rate/" + "t" * 201, {"per_second": 5}, 400),
        ("PUT", "/queues/gpu/limits/%E2%91%A0", {"limit": 2}, 400),
        ("PUT", "/queues/%E2%91%A0/limits", {"limit": 2}, 400),
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


async def test_absurd_numbers_and_names_are_refused_on_every_surface(
    api: httpx.AsyncClient, client: Client, rdb: sync_redis.Redis
) -> None:
    """HTTP: a 4xx with a reason; Client: a typed error (ConfigError); nothing written
    either way (the whole dataset's digest compared)."""
    await client.enqueue("noop", queue="gpu")
    digest, before = rdb.execute_command("DEBUG", "DIGEST"), redis_state(rdb)
    for body in ({"type": "a b"}, {"type": "t\n"}, {"type": "\u2460"}, {"type": "t" * 201},
                 {"type": "noop", "priority": 1e308}, {"type": "noop", "priority": 10**30},
                 {"type": "noop", "owner": "a b"}, {"type": "noop", "queue": "\u2460"}):  # fmt: skip
        r = await api.post("/tasks", json=body, headers=ROOT)
        assert r.status_code == 422 and r.json()["detail"], (body, r.text)
    bad_calls: list[Any] = [
        lambda: client.set_rate("gpu", 1e-9),
        lambda: client.set_rate("gpu", float("nan")),
        lambda: client.set_rate("gpu", 1e308),
        lambda: client.set_rate("gpu", 5, burst=10**12),
        lambda: client.set_rate("gpu", 5, type="a b"),
        lambda: client.set_rate("gpu", 5, type="t\n"),
        lambda: client.set_rate("gpu", 5, type="\u2460"),
        lambda: client.set_rate("\u2460", 5),
        lambda: client.set_limit("gpu", 10**12),
        lambda: client.set_limit("gpu", 0),
        lambda: client.set_limit("gpu", 2, owner="\u2460"),
        lambda: client.enqueue("a b"),
        lambda: client.enqueue("noop", priority=10**30),
        lambda: client.enqueue("noop", priority=-1),
    ]
    for call in bad_calls:
        with pytest.raises(ConfigError):
            await call()
    assert rdb.execute_command("DEBUG", "DIGEST") == digest
    assert redis_state(rdb) == before
