"""``GET /workflows`` (and ``Client.list_workflows``, ``rsjobs workflows list``) on a real
Redis: newest first from the workflow index, cursor pages that cover the list exactly
once, state and definition filters, owner isolation (an owner lists its own, naming
another is a 403, the admin lists all), expired workflows left out, every stage with its
state, and bad parameters refused with a 400 that writes nothing."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec
import pytest

from rsjobs import Client, ConfigError, Settings, connect
from rsjobs.workflows import WorkflowClient
from rsjobs.workflows.listing import WorkflowPage
from tests.support.web import make_app
from tests.support.wf_fixtures import NS
from tests.support.workflows import character

pytestmark = pytest.mark.integration


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


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
    app = make_app(redis_url, definitions=[character()])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://rsjobs.test") as c:
        yield c
    await app.state.rsjobs.aclose()


@pytest.fixture
async def started(wf: WorkflowClient) -> dict[str, list[str]]:
    """Five of alice's (the second cancelled), three of bob's, oldest first."""
    alice = [await wf.start("character", {"n": i}, owner="alice") for i in range(5)]
    bob = [await wf.start("character", {"n": i}, owner="bob") for i in range(3)]
    await wf.cancel(alice[1], "no longer needed")
    return {"alice": alice, "bob": bob}


async def pages(api: httpx.AsyncClient, headers: dict[str, str], **params: Any) -> list[Any]:
    out: list[Any] = []
    cursor = None
    while True:
        q = {**params, **({"cursor": cursor} if cursor else {})}
        r = await api.get("/workflows", params=q, headers=headers)
        assert r.status_code == 200, r.text
        page = msgspec.json.decode(r.content, type=WorkflowPage)  # the documented shape
        out += page.workflows
        cursor = page.cursor
        if cursor is None:
            return out


async def test_owners_see_their_own_newest_first(
    api: httpx.AsyncClient, started: dict[str, list[str]]
) -> None:
    mine = await pages(api, ALICE, limit=2)
    assert [w.id for w in mine] == started["alice"][::-1]
    assert {w.owner for w in mine} == {"alice"}
    everyone = await pages(api, ADMIN, limit=3)
    assert {w.id for w in everyone} == set(started["alice"] + started["bob"])
    assert len(everyone) == 8
    assert [w.created_at for w in everyone] == sorted(
        (w.created_at for w in everyone), reverse=True
    )
    bobs = await pages(api, ADMIN, owner="bob")
    assert [w.id for w in bobs] == started["bob"][::-1]
    r = await api.get("/workflows", params={"owner": "bob"}, headers=ALICE)
    assert r.status_code == 403 and r.json()["error"] == "forbidden"


async def test_filters_and_the_summary(
    api: httpx.AsyncClient, started: dict[str, list[str]]
) -> None:
    cancelled = await pages(api, ALICE, state="CANCELLED")
    assert [w.id for w in cancelled] == [started["alice"][1]]
    running = await pages(api, ADMIN, state="RUNNING", limit=1)
    assert len(running) == 7 and {w.state for w in running} == {"RUNNING"}
    assert await pages(api, ADMIN, name="other") == []
    assert len(await pages(api, ADMIN, name="character")) == 8
    raw = (await api.get("/workflows", params={"limit": 1}, headers=BOB)).json()
    (w,) = raw["workflows"]
    assert set(w) == {
        "id",
        "name",
        "state",
        "version",
        "owner",
        "created_at",
        "updated_at",
        "stages",
    }
    assert w["name"] == "character" and w["version"] == 1 and w["state"] == "RUNNING"
    assert w["stages"] == [
        {"name": "params", "state": "RUNNING"},
        {"name": "images", "state": "PENDING"},
        {"name": "actions", "state": "PENDING"},
        {"name": "emotions", "state": "PENDING"},
    ]
    (c,) = cancelled
    assert [s.state for s in c.stages] == ["CANCELLED", "SKIPPED", "SKIPPED", "SKIPPED"]


async def test_an_expired_workflow_is_left_out(
    api: httpx.AsyncClient, wf: WorkflowClient, started: dict[str, list[str]]
) -> None:
    gone = started["bob"][1]
    await wf.redis.delete(wf.store.keys.workflow(gone))  # as retention would
    listed = [w.id for w in await pages(api, BOB)]
    assert listed == [started["bob"][2], started["bob"][0]]


async def test_a_selective_filter_is_bounded(
    api: httpx.AsyncClient, wf: WorkflowClient, redis_url: str
) -> None:
    """More index entries than a page looks at, none matching: a short page with a cursor,
    and following the cursors ends."""
    from rsjobs.workflows.listing import SCAN_MIN

    k = wf.store.keys
    await wf.redis.zadd(k.workflows, {f"{n:032x}": 1000 + n for n in range(SCAN_MIN + 50)})
    r = await api.get("/workflows", params={"state": "PUBLISHED"}, headers=ADMIN)
    assert r.status_code == 200 and r.json()["workflows"] == [] and r.json()["cursor"]
    assert await pages(api, ADMIN, state="PUBLISHED") == []


async def snapshot(wf: WorkflowClient) -> dict[str, bytes | None]:
    keys = sorted([k async for k in wf.redis.scan_iter(count=1000)])
    return {k: await wf.redis.dump(k) for k in keys}


@pytest.mark.parametrize(
    ("params", "headers", "status", "code"),
    [
        ({"state": "NOPE"}, ADMIN, 400, "invalid_filter"),
        ({"state": ""}, ADMIN, 400, "invalid_filter"),
        ({"name": ""}, ADMIN, 400, "invalid_filter"),
        ({"name": "a b"}, ADMIN, 400, "invalid_filter"),
        ({"owner": "a b"}, ADMIN, 400, "invalid_filter"),
        ({"cursor": "zzz"}, ADMIN, 400, "invalid_cursor"),
        ({"cursor": "12." + "g" * 32}, ADMIN, 400, "invalid_cursor"),
        ({"limit": "0"}, ADMIN, 400, "invalid_limit"),
        ({"limit": "201"}, ADMIN, 400, "invalid_limit"),
        ({"limit": "x"}, ADMIN, 400, "invalid_limit"),
        ({"other": "1"}, ADMIN, 400, None),
        ({}, {}, 401, None),
        ({"owner": "alice"}, BOB, 403, "forbidden"),
    ],
)
async def test_bad_parameters_are_refused_and_write_nothing(
    api: httpx.AsyncClient,
    wf: WorkflowClient,
    started: dict[str, list[str]],
    params: dict[str, str],
    headers: dict[str, str],
    status: int,
    code: str | None,
) -> None:
    before = await snapshot(wf)
    r = await api.get("/workflows", params=params, headers=headers)
    assert r.status_code == status, r.text
    if code is not None:
        assert r.json()["error"] == code
    assert await snapshot(wf) == before


async def test_client_and_cli(redis_url: str, started: dict[str, list[str]]) -> None:
    async with Client.from_url(redis_url, namespace=NS) as c:
        page = await c.list_workflows(owner="alice", limit=2)
        assert [w.id for w in page.workflows] == started["alice"][::-1][:2]
        nxt = await c.list_workflows(owner="alice", limit=2, cursor=page.cursor)
        assert [w.id for w in nxt.workflows] == started["alice"][::-1][2:4]
        with pytest.raises(ConfigError):
            await c.list_workflows(limit=0)
    base = [
        sys.executable,
        "-m",
        "rsjobs",
        "--url",
        redis_url,
        "--namespace",
        NS,
        "workflows",
        "list",
    ]
    out = await asyncio.to_thread(_run, [*base, "--json", "--state", "CANCELLED"])
    assert out.returncode == 0, out.stderr
    assert [w["id"] for w in json.loads(out.stdout)["workflows"]] == [started["alice"][1]]
    table = await asyncio.to_thread(_run, [*base, "--owner", "bob"])
    assert table.returncode == 0 and table.stdout.count("character") == 3
    assert "params:RUNNING" in table.stdout
    bad = await asyncio.to_thread(_run, [*base, "--state", "NOPE"])
    assert bad.returncode == 2 and "state: one of" in bad.stderr


async def test_a_cursor_is_sealed_and_bound_to_its_owner_and_filters(
    api: httpx.AsyncClient, started: dict[str, list[str]]
) -> None:
    r = await api.get("/workflows", params={"limit": "2"}, headers=ALICE)
    assert r.status_code == 200, r.text
    cursor = r.json()["cursor"]
    assert cursor and not any(w in cursor for w in started["alice"] + started["bob"])
    assert "." not in cursor  # not "<created>.<id>": opaque
    ok = {"limit": "2", "cursor": cursor}
    assert (await api.get("/workflows", params=ok, headers=ALICE)).status_code == 200
    for params, headers in [
        (ok, BOB),  # replayed by another owner
        ({**ok, "state": "CANCELLED"}, ALICE),  # with other filters
        ({**ok, "cursor": cursor[:-1] + ("A" if cursor[-1] != "A" else "B")}, ALICE),
    ]:
        r = await api.get("/workflows", params=params, headers=headers)
        assert r.status_code == 400 and r.json()["error"] == "invalid_cursor", r.text
