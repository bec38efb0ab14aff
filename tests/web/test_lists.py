"""The operator's reads over HTTP: ``GET /tasks`` (filters, cursor pages), ``GET
/tasks/export``, ``GET /queues``, ``GET /workers``, ``GET /deadletters``; labels on
submit. Owner isolation on every route (an owner lists its own tasks, another owner's are
invisible, the namespace views need the admin token), and every bad parameter is a 400
with a reason that writes nothing."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
import redis as sync_redis

from rsjobs.overview import DeadLetterPage
from rsjobs.schemas import TaskPage, TaskSummary
from rsjobs.web.schemas import QueueList, WorkerList
from tests.support.web import ALICE, BOB, ROOT, TestClient, redis_state

pytestmark = pytest.mark.integration


def submit(tc: TestClient, headers: dict[str, str], **body: Any) -> str:
    r = tc.post("/tasks", json={"type": "img", **body}, headers=headers)
    assert r.status_code == 202, r.text
    tid: str = r.json()["id"]
    return tid


def pages(tc: TestClient, headers: dict[str, str], **params: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cursor = None
    while True:
        q = {**params, **({"cursor": cursor} if cursor else {})}
        r = tc.get("/tasks", params=q, headers=headers)
        assert r.status_code == 200, r.text
        page = msgspec.json.decode(r.content, type=TaskPage)  # the documented shape
        out += [msgspec.to_builtins(s) for s in page.items]
        cursor = page.cursor
        if cursor is None:
            return out


@pytest.fixture
def seeded(tc: TestClient) -> dict[str, list[str]]:
    """Tasks of alice (gpu, labelled), bob (cpu) and admin's on behalf of carol."""
    ids = {
        "alice": [submit(tc, ALICE, queue="gpu", labels={"user": "u_9"}) for _ in range(3)],
        "bob": [submit(tc, BOB, queue="cpu") for _ in range(4)],
        "carol": [submit(tc, ROOT, owner="carol", labels={"user": "u_9"})],
    }
    tc.post(f"/tasks/{ids['bob'][0]}/cancel", headers=BOB)
    return ids


def test_an_owner_lists_its_own_tasks_only(tc: TestClient, seeded: dict[str, list[str]]) -> None:
    mine = pages(tc, ALICE, limit=2)
    assert {t["id"] for t in mine} == set(seeded["alice"])
    assert {t["owner"] for t in mine} == {"alice"} and mine[0]["labels"] == {"user": "u_9"}
    assert {t["id"] for t in pages(tc, ALICE, label="user=u_9")} == set(seeded["alice"])
    assert pages(tc, ALICE, queue="cpu") == []  # bob's queue: none of alice's there
    assert {t["id"] for t in pages(tc, BOB, state="CANCELLED")} == {seeded["bob"][0]}
    # the admin sees every owner, and lists one by name
    assert len(pages(tc, ROOT)) == 8
    assert {t["id"] for t in pages(tc, ROOT, owner="bob")} == set(seeded["bob"])
    both = pages(tc, ROOT, label="user=u_9")
    assert {t["owner"] for t in both} == {"alice", "carol"}
    states = pages(tc, ROOT, state="PENDING,CANCELLED", queue="cpu")
    assert sorted(t["state"] for t in states) == ["CANCELLED", "PENDING", "PENDING", "PENDING"]


def test_naming_another_owner_is_refused(
    tc: TestClient, rdb: sync_redis.Redis, seeded: dict[str, list[str]]
) -> None:
    for url in ("/tasks", "/tasks/export"):
        before = redis_state(rdb)
        r = tc.get(url, params={"owner": "bob"}, headers=ALICE)
        assert r.status_code == 403 and r.json()["error"] == "forbidden"
        assert redis_state(rdb) == before
    # its own name is fine
    assert tc.get("/tasks", params={"owner": "alice"}, headers=ALICE).status_code == 200


def test_a_cursor_does_not_cross_owners(tc: TestClient, seeded: dict[str, list[str]]) -> None:
    r = tc.get("/tasks", params={"limit": 1}, headers=BOB)
    cursor = r.json()["cursor"]
    assert cursor
    # alice's list has other filters (her owner): bob's cursor is refused, not read
    r = tc.get("/tasks", params={"cursor": cursor}, headers=ALICE)
    assert r.status_code == 400 and r.json()["error"] == "invalid_cursor"


def test_the_export_is_every_page_as_json_lines(
    tc: TestClient, seeded: dict[str, list[str]]
) -> None:
    for _ in range(3):
        submit(tc, ALICE, queue="gpu")
    r = tc.get("/tasks/export", params={"queue": "gpu"}, headers=ALICE)
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    rows = [msgspec.json.decode(line, type=TaskSummary) for line in r.text.splitlines()]
    assert len(rows) == 6 and {s.owner for s in rows} == {"alice"}
    times = [s.listed_at for s in rows]
    assert times == sorted(times, reverse=True)
    everyone = tc.get("/tasks/export", headers=ROOT).text.splitlines()
    assert len(everyone) == 11


def test_the_namespace_views_need_the_admin_token(
    tc: TestClient, rdb: sync_redis.Redis, seeded: dict[str, list[str]]
) -> None:
    for url in ("/queues", "/workers", "/deadletters"):
        before = redis_state(rdb)
        r = tc.get(url, headers=ALICE)
        assert r.status_code == 403 and "admin" in r.json()["detail"], url
        assert tc.get(url).status_code == 401
        assert redis_state(rdb) == before
    queues = msgspec.json.decode(tc.get("/queues", headers=ROOT).content, type=QueueList)
    by_name = {q.name: q for q in queues.queues}
    assert by_name["cpu"].counts["PENDING"] == 3 and by_name["cpu"].counts["CANCELLED"] == 1
    assert by_name["cpu"].depth == 3 and by_name["cpu"].waiting == 3
    assert by_name["cpu"].unserved and by_name["cpu"].workers == 0
    assert by_name["gpu"].oldest_pending_ms >= 0 and by_name["gpu"].paused is False
    workers = msgspec.json.decode(tc.get("/workers", headers=ROOT).content, type=WorkerList)
    assert workers.workers == []
    dead = msgspec.json.decode(tc.get("/deadletters", headers=ROOT).content, type=DeadLetterPage)
    assert dead.items == [] and dead.cursor is None


def test_get_queues_says_which_queues_are_paused(
    tc: TestClient, seeded: dict[str, list[str]]
) -> None:
    r = tc.post("/queues/gpu/pause", json={"reason": "driver update"}, headers=ROOT)
    assert r.status_code == 200 and r.json()["paused"] is True, r.text
    queues = msgspec.json.decode(tc.get("/queues", headers=ROOT).content, type=QueueList)
    assert {q.name for q in queues.queues if q.paused} == {"gpu"}
    assert tc.post("/queues/gpu/resume", json={}, headers=ROOT).status_code == 200
    queues = msgspec.json.decode(tc.get("/queues", headers=ROOT).content, type=QueueList)
    assert not any(q.paused for q in queues.queues)


def test_deadletters_are_paged(tc: TestClient, rdb: sync_redis.Redis) -> None:
    for n in range(5):
        rdb.xadd("rsjobs:{t}:deadletter", {"id": f"{n:032x}", "q": "gpu", "ts": n})
    first = tc.get("/deadletters", params={"limit": 2}, headers=ROOT).json()
    assert [d["task_id"] for d in first["items"]] == [f"{n:032x}" for n in (4, 3)]
    second = tc.get(
        "/deadletters", params={"limit": 2, "cursor": first["cursor"]}, headers=ROOT
    ).json()
    assert [d["task_id"] for d in second["items"]] == [f"{n:032x}" for n in (2, 1)]
    last = tc.get("/deadletters", params={"limit": 2, "cursor": second["cursor"]}, headers=ROOT)
    assert len(last.json()["items"]) == 1 and last.json()["cursor"] is None


@pytest.mark.parametrize(
    ("url", "params", "code"),
    [
        ("/tasks", {"state": "DONE"}, "invalid_filter"),
        ("/tasks", {"state": "PENDING,nope"}, "invalid_filter"),
        ("/tasks", {"state": ""}, "invalid_filter"),
        ("/tasks", {"state": "PENDING,"}, "invalid_filter"),
        ("/tasks", {"queue": "gpu,,cpu"}, "invalid_filter"),
        ("/tasks", {"since": ""}, "invalid_since"),
        ("/tasks", {"queue": "no spaces"}, "invalid_filter"),
        ("/tasks", {"label": "novalue"}, "invalid_filter"),
        ("/tasks", {"label": "k=" + "v" * 65}, "invalid_filter"),
        ("/tasks", {"type": "x" * 201}, "invalid_filter"),
        ("/tasks", {"since": "yesterday"}, "invalid_since"),
        ("/tasks", {"until": "-5"}, "invalid_until"),
        ("/tasks", {"since": "20", "until": "10"}, "invalid_filter"),
        ("/tasks", {"limit": "0"}, "invalid_limit"),
        ("/tasks", {"limit": "501"}, "invalid_limit"),
        ("/tasks", {"limit": "²"}, "invalid_limit"),
        ("/tasks", {"cursor": "not-a-cursor"}, "invalid_cursor"),
        ("/tasks", {"limt": "5"}, "unknown_parameter"),
        ("/tasks/export", {"limit": "5"}, "unknown_parameter"),
        ("/tasks/export", {"state": "DONE"}, "invalid_filter"),
        ("/tasks/export", {"cursor": "x"}, "unknown_parameter"),
        ("/deadletters", {"cursor": "nope"}, "invalid_cursor"),
        ("/deadletters", {"cursor": ""}, "invalid_cursor"),
        ("/deadletters", {"limit": "1001"}, "invalid_limit"),
        ("/queues", {"x": "1"}, "unknown_parameter"),
        ("/workers", {"x": "1"}, "unknown_parameter"),
    ],
)
def test_bad_parameters_are_a_400_that_writes_nothing(
    tc: TestClient,
    rdb: sync_redis.Redis,
    seeded: dict[str, list[str]],
    url: str,
    params: dict[str, str],
    code: str,
) -> None:
    before = redis_state(rdb)
    r = tc.get(url, params=params, headers=ROOT)
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["error"] == code and body["detail"]
    assert redis_state(rdb) == before


@pytest.mark.parametrize(
    "labels",
    [
        {"bad key": "v"},
        {"k": ""},
        {"k": "v" * 65},
        {"k": "line\nbreak"},
        {f"k{i}": "v" for i in range(9)},
        {"k": 5},
        ["k", "v"],
    ],
)
def test_bad_labels_on_submit_are_a_422_that_writes_nothing(
    tc: TestClient, rdb: sync_redis.Redis, seeded: dict[str, list[str]], labels: Any
) -> None:
    before = redis_state(rdb)
    r = tc.post("/tasks", content=json.dumps({"type": "img", "labels": labels}), headers={
        **ALICE, "Content-Type": "application/json"})  # fmt: skip
    assert r.status_code == 422 and r.json()["error"] == "invalid_body", r.text
    assert redis_state(rdb) == before


def test_a_task_shows_its_labels(tc: TestClient) -> None:
    tid = submit(tc, ALICE, labels={"character": "char_456", "user": "u_9"})
    view = tc.get(f"/tasks/{tid}", headers=ALICE).json()
    assert view["labels"] == {"character": "char_456", "user": "u_9"}
