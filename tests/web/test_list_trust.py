"""Lists that reveal nothing (issue 26): what an owner's list answers depends on that
owner's tasks alone, whatever other owners hold; a list's cursor is sealed (opaque, and
refused when altered, forged, replayed by another owner or given with other filters); and
every malformed cursor or id is a 400 with a reason that writes nothing."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec
import pytest
import redis as sync_redis

from rsjobs import Client, ConfigError
from rsjobs.schemas import EnqueueRequest, TaskFilter
from rsjobs.store.cursor import Cursor, encode_cursor
from rsjobs.store.seal import new_key, seal_cursor
from tests.support.web import ALICE, BOB, ROOT, TestClient, redis_state

pytestmark = pytest.mark.integration

#: alice's filters: a label, a queue, a state, and combinations of them
FILTERS: list[dict[str, str]] = [
    {},
    {"label": "user=u_9"},
    {"queue": "gpu"},
    {"state": "CANCELLED"},
    {"state": "PENDING"},
    {"state": "PENDING", "queue": "gpu"},
    {"label": "user=u_9", "state": "PENDING"},
    {"label": "user=u_9", "queue": "gpu", "state": "CANCELLED"},
]


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[Client]:
    c = Client.from_url(redis_url, namespace="t")  # the app's namespace
    yield c
    await c.close()


async def submit(api: httpx.AsyncClient, headers: dict[str, str], **body: Any) -> str:
    r = await api.post("/tasks", json={"type": "img", **body}, headers=headers)
    assert r.status_code == 202, r.text
    tid: str = r.json()["id"]
    return tid


async def answers(
    api: httpx.AsyncClient, headers: dict[str, str], params: dict[str, str]
) -> list[bytes]:
    """Every page of a list, as the bytes answered (3 tasks a page)."""
    out: list[bytes] = []
    cursor = None
    while True:
        q = {**params, "limit": "3", **({"cursor": cursor} if cursor else {})}
        r = await api.get("/tasks", params=q, headers=headers)
        assert r.status_code == 200, r.text
        out.append(r.content)
        cursor = r.json()["cursor"]
        if cursor is None:
            return out


async def seed_alice(api: httpx.AsyncClient) -> list[str]:
    ids = [await submit(api, ALICE, queue="gpu", labels={"user": "u_9"}) for _ in range(6)]
    ids += [await submit(api, ALICE, queue="cpu", labels={"user": "u_9"}) for _ in range(3)]
    ids += [await submit(api, ALICE, queue="gpu") for _ in range(3)]
    for tid in (ids[1], ids[7], ids[10]):
        r = await api.post(f"/tasks/{tid}/cancel", headers=ALICE)
        assert r.status_code == 200, r.text
    return ids


async def test_another_owners_tasks_change_nothing_in_an_owners_answers(
    api: httpx.AsyncClient, client: Client
) -> None:
    await seed_alice(api)
    before = {json.dumps(f): await answers(api, ALICE, f) for f in FILTERS}
    assert sum(len(json.loads(p)["items"]) for p in before["{}"]) == 12
    # bob: 2,000 tasks matching every filter of alice's, 700 of them cancelled
    reqs = [
        EnqueueRequest(type="img", queue="gpu", owner="bob", labels={"user": "u_9"})
        for _ in range(2000)
    ]
    bob = await client.enqueue_many(reqs)
    assert len(bob) == 2000
    done = await client.bulk_cancel(TaskFilter(owner="bob"), limit=700)
    assert len(done.items) == 700
    after = {json.dumps(f): await answers(api, ALICE, f) for f in FILTERS}
    assert after == before  # items, cursors and counts, byte for byte
    # and alice's pages name none of bob's tasks, in their items or their cursors
    text = b"".join(p for pages in after.values() for p in pages)
    assert not any(tid.encode() in text for tid in bob[:50] + bob[-50:])


async def test_a_cursor_is_sealed_and_bound_to_its_list(
    api: httpx.AsyncClient, client: Client, redis_url: str
) -> None:
    alice = await seed_alice(api)
    bob = [await submit(api, BOB, queue="gpu", labels={"user": "u_9"}) for _ in range(4)]
    r = await api.get("/tasks", params={"label": "user=u_9", "limit": "2"}, headers=ALICE)
    assert r.status_code == 200, r.text
    cursor = r.json()["cursor"]
    assert cursor is not None
    # it reads as nothing: no id, queue, owner, label or JSON inside
    raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    for secret in [*alice, *bob, "gpu", "alice", "bob", "u_9"]:
        assert secret not in cursor and secret.encode() not in raw
    with pytest.raises(msgspec.DecodeError):
        msgspec.json.decode(raw)
    with pytest.raises(msgspec.DecodeError):
        msgspec.json.decode(raw[17:])  # (past the version byte and the iv)
    ok = {"label": "user=u_9", "limit": "2", "cursor": cursor}
    assert (await api.get("/tasks", params=ok, headers=ALICE)).status_code == 200
    r = await api.get("/tasks", params={**ok, "owner": "alice"}, headers=ROOT)
    assert r.status_code == 200  # the admin asking alice's list: the same list

    rdb = sync_redis.Redis.from_url(redis_url)
    before = redis_state(rdb)
    flipped = [
        cursor[:k] + ("A" if cursor[k] != "A" else "B") + cursor[k + 1 :]
        for k in (0, 5, len(cursor) // 2, len(cursor) - 1)
    ]
    plain = encode_cursor(Cursor("0" * 12, "t0", 1, "t", "o5:alice|0000000000001|" + "0" * 32))
    forged = seal_cursor(bytes.fromhex(new_key()), "tasks:x", plain)
    refused = [
        (ALICE, {**ok, "cursor": c}) for c in (*flipped, cursor[:-3], plain, forged, "0-0")
    ] + [
        (BOB, ok),  # replayed by another owner
        (ALICE, {**ok, "queue": "gpu"}),  # with other filters
        (ALICE, {"limit": "2", "cursor": cursor}),  # without its label
        (ROOT, ok),  # the admin's list of every owner
    ]
    for headers, params in refused:
        r = await api.get("/tasks", params=params, headers=headers)
        assert r.status_code == 400, (params, r.text)
        assert r.json()["error"] == "invalid_cursor" and "cursor" in r.json()["detail"]
    # the Client: a typed error
    with pytest.raises(ConfigError, match="invalid cursor"):
        await client.list_tasks(owner="bob", label="user=u_9", limit=2, cursor=cursor)
    assert redis_state(rdb) == before
    rdb.close()


BIG = str(2**64)
MAX_ID = f"{2**64 - 1}-{2**64 - 1}"
_TASK = "0" * 32


@pytest.mark.parametrize(
    ("method", "url", "params", "headers", "code"),
    [
        *(
            ("GET", "/deadletters", {"cursor": c}, {}, "invalid_cursor")
            for c in ("0-0", f"{BIG}-0", f"1-{BIG}", "1-1.0", "-1-0", "1", "\uff11-1", "x" * 5000)
        ),
        *(
            ("GET", "/tasks", {"cursor": c}, {}, "invalid_cursor")
            for c in ("0-0", f"{BIG}-0", "AQ", "W10", "x" * 20_000)
        ),
        *(
            ("GET", "/workflows", {"cursor": c}, {}, "invalid_cursor")
            for c in ("0-0", f"{BIG}-0", "1.zz")
        ),
        *(
            ("GET", f"/tasks/{_TASK}/history", {"after": a}, {}, "invalid_after")
            for a in (f"{BIG}-0", f"1-{BIG}", "abc", "-1")
        ),
        *(
            ("GET", f"/workflows/{_TASK}/history", {"after": a}, {}, "invalid_after")
            for a in (f"{BIG}-0", "x")
        ),
        *(
            ("GET", url, {}, {"Last-Event-ID": e}, "invalid_last_event_id")
            for url in (f"/tasks/{_TASK}/events", f"/workflows/{_TASK}/events", "/events")
            for e in (f"{BIG}-0", "nope")
        ),
        *(
            (m, u, {}, {}, "invalid_id")
            for m, u in (
                ("GET", "/tasks/0-0"),
                ("GET", f"/tasks/{'A' * 32}"),
                ("GET", "/tasks/xyz/history"),
                ("GET", f"/workflows/{'g' * 32}"),
                ("POST", "/deadletters/0-0/requeue"),
            )
        ),
    ],
)
def test_malformed_cursors_and_ids_are_a_400_that_writes_nothing(
    tc: TestClient,
    rdb: sync_redis.Redis,
    method: str,
    url: str,
    params: dict[str, str],
    headers: dict[str, str],
    code: str,
) -> None:
    r = tc.post("/tasks", json={"type": "img"}, headers=ROOT)  # (a database with data)
    assert r.status_code == 202
    before = redis_state(rdb)
    r = tc.request(method, url, params=params, headers={**ROOT, **headers})
    assert r.status_code == 400, r.text
    assert r.json()["error"] == code and r.json()["detail"]
    assert redis_state(rdb) == before


async def test_the_largest_stream_id_is_a_cursor_like_any_other(api: httpx.AsyncClient) -> None:
    r = await api.get("/deadletters", params={"cursor": MAX_ID}, headers=ROOT)
    assert r.status_code == 200, r.text
    assert r.json() == {"items": [], "cursor": None}


async def test_the_client_refuses_malformed_cursors_and_ids_with_a_typed_error(
    client: Client,
) -> None:
    for bad in ("0-0", f"{BIG}-0", "1-1.0", ""):
        with pytest.raises(ConfigError, match="cursor"):
            await client.deadletters(cursor=bad)
    with pytest.raises(ConfigError, match="history entry id"):
        await client.history(_TASK, after=f"{BIG}-0")
    with pytest.raises(ConfigError, match="task id"):
        await client.get("0-0")
