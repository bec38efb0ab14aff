"""Successors over HTTP (``POST /tasks`` with ``after``; 422 with a reason for bad input,
writing nothing; an owner cannot tell another owner's task from no task; WAITING listed
from its index) and on the command line (``rsjobs enqueue --after``, ``rsjobs tasks
--state WAITING``, ``rsjobs queues``), and the sync client."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import redis as sync_redis
from starlette.applications import Starlette

from rsjobs import Client, PredecessorRefused, SyncClient, UnknownPredecessor
from rsjobs.cli import main
from tests.support.web import ALICE, BOB, ROOT, TestClient, make_app, redis_state

pytestmark = pytest.mark.integration


@pytest.fixture
def app(redis_url: str) -> Starlette:
    return make_app(redis_url)


@pytest.fixture
async def api(app: Starlette) -> Any:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://rsjobs.test") as c:
        yield c
    await app.state.rsjobs.aclose()


async def test_submit_a_successor_and_read_it_back(api: httpx.AsyncClient, client: Client) -> None:
    a = (await api.post("/tasks", json={"type": "render"}, headers=ALICE)).json()["id"]
    r = await api.post(
        "/tasks",
        json={"type": "watermark", "after": [a], "after_policy": "always"},
        headers=ALICE,
    )
    assert r.status_code == 202, r.text
    b = r.json()["id"]
    assert r.json()["state"] == "WAITING"
    view = (await api.get(f"/tasks/{b}", headers=ALICE)).json()
    assert view["after"] == [a] and view["after_policy"] == "always"
    assert view["predecessor_states"] == {}
    assert (await api.get(f"/tasks/{a}", headers=ALICE)).json()["successors"] == [b]
    listed = (await api.get("/tasks", params={"state": "WAITING"}, headers=ALICE)).json()
    assert [t["id"] for t in listed["items"]] == [b]
    assert listed["items"][0]["state"] == "WAITING"
    assert (await client.get(b)).owner == "alice"
    queues = (await api.get("/queues", headers=ROOT)).json()["queues"]
    assert [q["counts"]["WAITING"] for q in queues] == [1]
    await client.cancel(a)
    assert (await api.get(f"/tasks/{b}", headers=ALICE)).json()["state"] == "PENDING"
    listed = (await api.get("/tasks", params={"state": "WAITING"}, headers=ALICE)).json()
    assert listed["items"] == []


def _check(tc: TestClient, rdb: sync_redis.Redis, code: str, body: dict[str, Any]) -> str:
    before = redis_state(rdb)
    r = tc.post("/tasks", json=body, headers=ALICE)
    assert r.status_code == 422, r.text
    problem = r.json()
    assert problem["error"] == code and problem["detail"]
    assert redis_state(rdb) == before, "a refused request wrote to redis"
    return str(problem["detail"])


def test_bad_predecessors_get_a_422_with_a_reason_and_write_nothing(redis_url: str) -> None:
    rdb = sync_redis.Redis.from_url(redis_url)
    with TestClient(make_app(redis_url)) as tc:
        mine = tc.post("/tasks", json={"type": "seed"}, headers=ALICE).json()["id"]
        theirs = tc.post("/tasks", json={"type": "seed"}, headers=BOB).json()["id"]
        nobody = "0123456789abcdef0123456789abcdef"
        base = {"type": "w"}
        # another owner's task reads as no task at all
        other = _check(tc, rdb, "unknown_predecessor", {**base, "after": [theirs]})
        missing = _check(tc, rdb, "unknown_predecessor", {**base, "after": [nobody]})
        assert other.replace(theirs, "X") == missing.replace(nobody, "X")
        _check(tc, rdb, "unknown_predecessor", {**base, "after": [mine, theirs]})
        for after in ([], ["nope"], [mine] * 33, [mine.upper()]):
            _check(tc, rdb, "invalid_body", {**base, "after": after})
        assert "twice" in _check(tc, rdb, "invalid_body", {**base, "after": [mine, mine]})
        _check(tc, rdb, "invalid_body", {**base, "after": [mine], "after_policy": "never"})
        _check(tc, rdb, "invalid_body", {**base, "after": mine})
        rdb.hset(f"rsjobs:{{t}}:task:{mine}", "wf", "w-1")
        why = _check(tc, rdb, "predecessor_refused", {**base, "after": [mine]})
        assert "workflow" in why
    rdb.close()


def test_the_openapi_document_describes_after(redis_url: str) -> None:
    with TestClient(make_app(redis_url)) as tc:
        doc = tc.get("/openapi.json").json()
    submit = doc["components"]["schemas"]["SubmitRequest"]["properties"]
    assert submit["after"]["anyOf"][0]["maxItems"] == 32
    assert set(submit["after_policy"]["enum"]) == {"succeeded", "always"}
    post = doc["paths"]["/tasks"]["post"]["responses"]["422"]["description"]
    assert "unknown_predecessor" in post and "predecessor_refused" in post
    view = doc["components"]["schemas"]["TaskView"]["properties"]
    assert {"after", "after_policy", "predecessor_states", "successors"} <= set(view)


async def test_the_client_raises_typed_errors_before_any_write(client: Client) -> None:
    a = await client.enqueue("x", owner="alice")
    with pytest.raises(UnknownPredecessor) as other:
        await client.enqueue("y", owner="bob", after=[a])
    assert other.value.task_id == a
    await client.redis.hset(client.keys.task(a), "wf", "w-1")
    with pytest.raises(PredecessorRefused, match="workflow"):
        await client.enqueue("y", owner="alice", after=[a])
    with pytest.raises(UnknownPredecessor):
        await client.enqueue_many([])  # nothing to check: fine
        from rsjobs import EnqueueRequest

        await client.enqueue_many(
            [EnqueueRequest(type="ok"), EnqueueRequest(type="y", after=["f" * 32])]
        )
    # the batch was refused whole: only a's hash is there
    assert await client.redis.keys(client.keys.task("*")) == [client.keys.task(a)]


async def test_a_batch_submits_successors_in_order(client: Client) -> None:
    from rsjobs import EnqueueRequest

    a = await client.enqueue("x")
    ids = await client.enqueue_many(
        [
            EnqueueRequest(type="plain"),
            EnqueueRequest(type="w", after=[a]),
            EnqueueRequest(type="plain2"),
        ]
    )
    infos = await client.get_many(ids)
    assert [i.state for i in infos if i] == ["PENDING", "WAITING", "PENDING"]
    assert (await client.get(a)).successors == [ids[1]]


def test_the_sync_client_submits_a_successor(redis_url: str) -> None:
    with SyncClient.from_url(redis_url, namespace="t") as c:
        a = c.enqueue("x")
        b = c.enqueue("y", after=[a], after_policy="always")
        assert c.get(b).state == "WAITING" and c.get(b).after_policy == "always"


def _cli(redis_url: str, *args: str) -> list[str]:
    return ["--url", redis_url, "--namespace", "t", *args]


def test_the_command_line_submits_and_lists_successors(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_cli(redis_url, "enqueue", "render")) == 0
    a = capsys.readouterr().out.split()[0]
    assert main(_cli(redis_url, "enqueue", "mark", "--after", a, "--after", a)) == 2
    assert "twice" in capsys.readouterr().err
    assert main(_cli(redis_url, "enqueue", "mark", "--after-policy", "always")) == 2
    assert "--after-policy needs --after" in capsys.readouterr().err
    assert main(_cli(redis_url, "enqueue", "mark", "--after", "f" * 32)) == 2
    assert "unknown predecessor" in capsys.readouterr().err
    assert main(_cli(redis_url, "enqueue", "mark", "--after", a)) == 0
    b = capsys.readouterr().out.split()[0]
    assert main(_cli(redis_url, "tasks", "--state", "WAITING", "--json")) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [t["id"] for t in listed] == [b] and listed[0]["state"] == "WAITING"
    assert main(_cli(redis_url, "queues", "--json")) == 0
    queue = json.loads(capsys.readouterr().out)["default"]
    assert queue["WAITING"] == 1 and queue["PENDING"] == 1
    assert main(_cli(redis_url, "status", b, "--json")) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["state"] == "WAITING" and status["after"] == [a]
    assert main(_cli(redis_url, "status", b)) == 0
    assert f"{a}:awaited" in capsys.readouterr().out
    assert main(_cli(redis_url, "status", a)) == 0
    assert b in capsys.readouterr().out  # its successors
