"""The cost routes: a task's and a workflow's costs follow their access rule, the totals
are an admin's (an owner reads its own owner's only), bad input is a 4xx that writes
nothing, and a provider's callback may bring the outside job's charges."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis as sync_redis

from rsjobs import ChargeError, Client, Settings, connect
from rsjobs.callbacks import Claims, sign
from rsjobs.costs import SCALE
from rsjobs.store import Store
from tests.support.web import ALICE, BOB, ROOT, TestClient, make_app, redis_state, running_worker

pytestmark = pytest.mark.integration

SECRET = "web-callback-secret-0123456789"


def _charged(tc: TestClient, headers: dict[str, str], charges: dict[str, float]) -> str:
    r = tc.post("/tasks", json={"type": "charge", "payload": {"charges": charges}}, headers=headers)
    assert r.status_code == 202, r.text
    return str(r.json()["id"])


async def _finished(tc: TestClient, redis_url: str, ids: list[str]) -> None:
    async with running_worker(redis_url):
        deadline = time.monotonic() + 15
        while any(tc.get(f"/tasks/{t}", headers=ROOT).json()["state"] != "SUCCEEDED" for t in ids):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)


async def test_task_costs_and_totals_follow_the_access_rules(
    tc: TestClient, redis_url: str, rdb: sync_redis.Redis
) -> None:
    a = _charged(tc, ALICE, {"gpu_s": 1.5})
    b = _charged(tc, BOB, {"gpu_s": 2, "usd": 0.125})
    await _finished(tc, redis_url, [a, b])
    mine = tc.get(f"/tasks/{a}/cost", headers=ALICE)
    assert mine.status_code == 200, mine.text
    doc = mine.json()
    assert doc["owner"] == "alice" and doc["state"] == "SUCCEEDED"
    (attempt,) = doc["attempts"]
    assert attempt["category"] == "ok" and attempt["charges"] == {"gpu_s": 1.5}
    assert doc["totals"]["total"]["gpu_s"] == 1.5 and doc["totals"]["waste"] == {}
    # another owner's task is not there for alice; an admin sees it
    assert tc.get(f"/tasks/{b}/cost", headers=ALICE).status_code == 404
    assert tc.get(f"/tasks/{b}/cost", headers=ROOT).json()["totals"]["total"]["usd"] == 0.125

    # the totals: alice reads her own (the default dimension for her), an admin any
    own = tc.get("/costs", headers=ALICE).json()
    assert own["by"] == "owner" and [r["name"] for r in own["rows"]] == ["alice"]
    assert own["rows"][0]["totals"]["categories"]["ok"]["gpu_s"] == 1.5
    assert tc.get("/costs?by=owner&name=alice", headers=ALICE).status_code == 200
    everyone = tc.get("/costs?by=owner", headers=ROOT).json()
    assert [r["name"] for r in everyone["rows"]] == ["alice", "bob"]
    assert everyone["total"]["total"]["gpu_s"] == 3.5
    by_type = tc.get("/costs?by=type", headers=ROOT).json()
    assert [(r["name"], r["totals"]["total"]["attempts"]) for r in by_type["rows"]] == [
        ("charge", 2)
    ]
    assert tc.get("/costs?by=queue&name=default", headers=ROOT).json()["rows"][0]["name"] == (
        "default"
    )
    assert tc.get("/costs?by=stage", headers=ROOT).json()["rows"] == []

    # refusals: 4xx with a reason, nothing written
    before = redis_state(rdb)
    for path, headers, status in [
        (f"/tasks/{a}/cost", {}, 401),
        ("/tasks/NOT-AN-ID/cost", ALICE, 400),
        (f"/tasks/{'0' * 32}/cost", ALICE, 404),
        ("/costs?by=type", ALICE, 403),
        ("/costs?by=owner&name=bob", ALICE, 403),
        ("/costs?by=colour", ROOT, 400),
        ("/costs?by=owner&name=", ROOT, 400),
        ("/costs?by=owner&name=" + "x" * 301, ROOT, 400),
        ("/costs?limit=3", ROOT, 400),
        (f"/workflows/{'0' * 32}/cost", ROOT, 404),
        ("/workflows/nope/cost", ROOT, 400),
    ]:
        r = tc.get(path, headers=headers)
        assert r.status_code == status, (path, r.text)
        assert r.json()["error"] and r.json()["detail"], path
    assert redis_state(rdb) == before


async def test_a_callback_brings_the_outside_jobs_charges(
    redis_url: str, rdb: sync_redis.Redis
) -> None:
    with TestClient(make_app(redis_url, callback_secret=SECRET)) as cb:
        tid = cb.post("/tasks", json={"type": "gen", "max_attempts": 1}, headers=ALICE).json()["id"]
        store = Store(connect(redis_url), Settings(namespace="t"))
        try:
            k, work = store.keys, store.work
            await work.ensure_groups([k.queue("default")])
            (d,) = await work.read("hand", {k.queue("default"): "default"}, 1, None)
            (started,) = await work.start("hand", 60_000, "hand-n", [d])
            await store.deferred.defer(
                k.task_keys(tid, "default"), started.lease, "job-1", "acme", 60_000,
                charges="gpu_s:4",
            )  # fmt: skip
        finally:
            await store.close()
        token = sign(SECRET, Claims("t", tid, "default", 1, int(time.time() * 1000) + 60_000))
        body: dict[str, Any] = {"status": "succeeded", "result": "x"}
        before = redis_state(rdb)
        for bad in ({"usd": -1}, {"USD": 1}, {"run_ms": 5}, {"usd": 1e12}):
            r = cb.post(f"/callbacks/{token}", json={**body, "charges": bad})
            assert r.status_code == 422 and r.json()["error"] in ("invalid_charges", "invalid_body")
        too_many = {f"u{i}": 1 for i in range(9)}
        assert cb.post(f"/callbacks/{token}", json={**body, "charges": too_many}).status_code == 422
        digest = rdb.execute_command("DEBUG", "DIGEST")
        # past a float's range, not numbers, or numbers too large to hold: a 4xx, not a 500
        for raw, status in (
            (b'{"usd": 1e308}', 422),
            (b'{"usd": 1.7976931348623157e308}', 422),
            (b'{"usd": 1e400}', 422),
            (b'{"usd": -1e308}', 422),
            (b'{"usd": -0.000001}', 422),
            (b'{"usd": 1000000000}', 422),
            (b'{"usd": NaN}', 400),
            (b'{"usd": Infinity}', 400),
            (b'{"usd": -Infinity}', 400),
            (b'{"usd": "1"}', 422),
        ):
            content = b'{"status": "succeeded", "result": "x", "charges": ' + raw + b"}"
            r = cb.post(f"/callbacks/{token}", content=content,
                        headers={"content-type": "application/json"})  # fmt: skip
            assert r.status_code == status, (raw, r.text)
            assert r.json()["error"] in ("invalid_charges", "invalid_body", "invalid_json"), raw
            assert r.json()["detail"], raw
        assert rdb.execute_command("DEBUG", "DIGEST") == digest
        # the Client's way: a typed error, nothing written
        async with Client.from_url(redis_url, namespace="t") as client:
            for amount in (1e308, float("nan"), float("inf"), -1.0, 10**400, 1e9):
                with pytest.raises(ChargeError):
                    await client.complete_external(tid, "x", charges={"usd": amount})
        assert rdb.execute_command("DEBUG", "DIGEST") == digest
        assert redis_state(rdb) == before
        r = cb.post(f"/callbacks/{token}", json={**body, "charges": {"usd": 0.75}})
        assert r.status_code == 200 and r.json()["state"] == "SUCCEEDED", r.text
        cost = cb.get(f"/tasks/{tid}/cost", headers=ALICE).json()
        (attempt,) = cost["attempts"]
        assert attempt["deferred"] and attempt["charges"] == {"gpu_s": 4, "usd": 0.75}
        row = cb.get("/costs?by=owner", headers=ALICE).json()["rows"][0]
        assert round(row["totals"]["categories"]["ok"]["usd"] * SCALE) == 750_000
