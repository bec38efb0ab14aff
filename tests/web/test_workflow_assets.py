"""The workflow routes the web app adds: ``GET /workflows/{id}/plan`` and the asset files
(``GET /workflows/{id}/assets/{version}/{stage}/{item}``): served only from under the
configured asset root, looked up by slot (no path from the client), owner-checked; path
traversal through a recorded reference (``..``, absolute paths, symbolic links) is refused
with a 4xx and never leaks the file."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import msgspec
import pytest
from starlette.applications import Starlette

from rsjobs import ConfigError
from rsjobs.web import create_app
from rsjobs.workflows import Asset, WorkflowClient
from tests.support.web import ADMIN, ALICE, BOB, NAMESPACE, ROOT, TOKENS
from tests.support.workflows import Hand, character

pytestmark = pytest.mark.integration

SECRET = b"not for the web\n"
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 32


def make(redis_url: str, root: Path | None) -> Starlette:
    return create_app(
        redis_url,
        namespace=NAMESPACE,
        tokens=TOKENS,
        admin_token=ADMIN,
        env={},
        definitions=[character()],
        asset_root=root,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """tmp/assets (the root, with files) and tmp/secret.txt beside it (outside)."""
    root = tmp_path / "assets"
    (root / "wf" / "v1").mkdir(parents=True)
    (root / "wf" / "v1" / "params.json").write_bytes(b'{"hair": "silver"}')
    (root / "wf" / "v1" / "front.png").write_bytes(PNG)
    (root / "wf" / "v1" / "page.html").write_bytes(b"<script>alert(1)</script>")
    (tmp_path / "secret.txt").write_bytes(SECRET)
    os.symlink(tmp_path / "secret.txt", root / "link-out.txt")
    os.symlink(root / "wf" / "v1" / "front.png", root / "link-in.png")
    return root


def relative(path: Path) -> str:
    return os.path.relpath(path)


async def client_for(app: Starlette) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x")


@pytest.fixture
async def api(redis_url: str, tree: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = make(redis_url, tree)
    async with await client_for(app) as c:
        yield c
    await app.state.rsjobs.aclose()


@pytest.fixture
async def wf(redis_url: str) -> AsyncIterator[WorkflowClient]:
    from rsjobs import Settings, connect

    c = WorkflowClient(connect(redis_url), Settings(namespace=NAMESPACE), definitions=[character()])
    yield c
    await c.close()


async def record(wf: WorkflowClient, wid: str, slot: str, ref: str) -> None:
    """Write an asset record as a (buggy or hostile) worker might have made it."""
    version, index, item = slot.split(":")
    asset = Asset(ref=ref, kind="image", version=int(version), stage="images",
                  stage_index=int(index), item=item, task="0" * 32)  # fmt: skip
    await wf.redis.hset(wf.keys.workflow_assets(wid), slot, msgspec.json.encode(asset))


async def raw_get(app: Starlette, raw: str) -> tuple[int, bytes]:
    """GET ``raw`` through the ASGI app exactly as written (no URL normalisation)."""
    from urllib.parse import unquote

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
             "scheme": "http", "path": unquote(raw), "raw_path": raw.encode(), "query_string": b"",
             "root_path": "", "headers": [(b"host", b"x"), (b"authorization", b"Bearer tok-alice")],
             "client": ("127.0.0.1", 1), "server": ("x", 80)}  # fmt: skip
    status, body = 0, b""

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, object]) -> None:
        nonlocal status, body
        if message["type"] == "http.response.start":
            status = int(message["status"])  # type: ignore[call-overload]
        elif message["type"] == "http.response.body":
            body += message.get("body", b"")  # type: ignore[operator]

    await app(scope, receive, send)
    return status, body


async def test_plan_shows_stages_and_gates(api: httpx.AsyncClient, wf: WorkflowClient) -> None:
    wid = await wf.start("character", {"n": 1}, owner="alice")
    r = await api.get(f"/workflows/{wid}/plan", headers=ALICE)
    assert r.status_code == 200, r.text
    plan = r.json()
    assert plan["id"] == wid and plan["definition"] == "character"
    stages = plan["stages"]
    assert [(s["name"], s["gate"]) for s in stages] == [
        ("params", True), ("images", True), ("actions", False), ("emotions", False)]  # fmt: skip
    assert [i["item"] for i in stages[1]["items"]] == ["front", "side"]
    assert stages[1]["items"][0]["kind"] == "image" and "params" not in stages[1]["items"][0]
    assert (await api.get(f"/workflows/{wid}/plan", headers=ROOT)).status_code == 200
    missing = await api.get("/workflows/" + "0" * 32 + "/plan", headers=BOB)
    other = await api.get(f"/workflows/{wid}/plan", headers=BOB)
    assert other.status_code == missing.status_code == 404 and other.json() == {
        **missing.json(), "detail": other.json()["detail"]}  # fmt: skip
    assert (await api.get(f"/workflows/{wid}/plan")).status_code == 401
    assert (await api.get("/workflows/nope/plan", headers=ALICE)).status_code == 400


async def test_serves_a_recorded_asset_under_the_root(
    api: httpx.AsyncClient, wf: WorkflowClient, tree: Path
) -> None:
    wid = await wf.start("character", {"n": 1}, owner="alice")
    hand = Hand(wf.redis, wf.settings)
    [task] = await hand.claim()
    ref = str(tree / "wf" / "v1" / "params.json")
    await hand.complete(task, {"ref": ref, "kind": "json"})
    url = f"/workflows/{wid}/assets/1/params/params"
    r = await api.get(url, headers=ALICE)
    assert r.status_code == 200, r.text
    assert r.content == b'{"hair": "silver"}'
    assert r.headers["content-type"] == "application/json"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "sandbox" in r.headers["content-security-policy"]
    # <img src> cannot send headers: the token may come in the query
    assert (await api.get(url + "?access_token=tok-alice")).status_code == 200
    assert (await api.get(url)).status_code == 401
    # another owner: exactly like a workflow that does not exist
    assert (await api.get(url, headers=BOB)).status_code == 404
    assert (await api.get(url, headers=ROOT)).status_code == 200
    # the same file, through an image slot and through a symbolic link inside the root
    await record(wf, wid, "1:1:front", str(tree / "wf" / "v1" / "front.png"))
    await record(wf, wid, "1:1:side", str(tree / "link-in.png"))
    for item in ("front", "side"):
        r = await api.get(f"/workflows/{wid}/assets/1/images/{item}", headers=ALICE)
        assert r.status_code == 200 and r.content == PNG
        assert r.headers["content-type"] == "image/png"
    # a relative reference resolves against the web process's working directory
    await record(wf, wid, "1:1:rel", relative(tree / "wf" / "v1" / "front.png"))
    r = await api.get(f"/workflows/{wid}/assets/1/images/rel", headers=ALICE)
    assert r.status_code == 200 and r.content == PNG
    # a type that could run in a browser is sent as an attachment, sandboxed anyway
    await record(wf, wid, "1:1:page", str(tree / "wf" / "v1" / "page.html"))
    r = await api.get(f"/workflows/{wid}/assets/1/images/page", headers=ALICE)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/octet-stream"
    assert r.headers["content-disposition"] == "attachment"


async def test_path_traversal_is_refused(
    api: httpx.AsyncClient, wf: WorkflowClient, tree: Path
) -> None:
    wid = await wf.start("character", {"n": 1}, owner="alice")
    outside = tree.parent / "secret.txt"
    hostile = {
        "dotdot": str(tree / ".." / "secret.txt"),
        "dotdot2": str(tree / "wf" / ".." / ".." / "secret.txt"),
        "absolute": str(outside),
        "etc": "/etc/passwd",
        "symlink": str(tree / "link-out.txt"),
        "relative": relative(outside),
    }
    for item, ref in hostile.items():
        await record(wf, wid, f"1:1:{item}", ref)
        r = await api.get(f"/workflows/{wid}/assets/1/images/{item}", headers=ALICE)
        assert r.status_code == 403, (item, r.text)
        assert r.json()["error"] == "forbidden" and SECRET not in r.content
    # the client names a slot, never a path: traversal in the URL finds nothing (httpx
    # normalises dot segments, so the raw paths also go to the app as they are)
    app = api._transport.app  # type: ignore[attr-defined]
    for path in ("1/images/..%2F..%2Fsecret.txt", "1/images/%2E%2E", "1/../../secret.txt",
                 "1/images/front/../../../../secret.txt", "1/images/..",
                 "1/../secret.txt/x"):  # fmt: skip
        r = await api.get(f"/workflows/{wid}/assets/{path}", headers=ALICE)
        assert 400 <= r.status_code < 500 and SECRET not in r.content, (path, r.status_code)
        status, body = await raw_get(app, f"/workflows/{wid}/assets/{path}")
        assert 400 <= status < 500 and SECRET not in body, (path, status)


async def test_unknown_assets_and_files_are_404(
    api: httpx.AsyncClient, wf: WorkflowClient, tree: Path
) -> None:
    wid = await wf.start("character", {"n": 1}, owner="alice")
    await record(wf, wid, "1:1:gone", str(tree / "wf" / "v1" / "gone.png"))
    await record(wf, wid, "1:1:dir", str(tree / "wf"))
    await record(wf, wid, "1:1:url", "s3://bucket/front.png")
    await record(wf, wid, "1:1:empty", "")
    for path in ("1/images/gone", "1/images/dir", "1/images/url", "1/images/empty",
                 "1/images/never", "2/images/gone", "1/nostage/gone"):  # fmt: skip
        r = await api.get(f"/workflows/{wid}/assets/{path}", headers=ALICE)
        assert r.status_code == 404 and r.json()["error"] == "not_found", (path, r.text)
    r = await api.get("/workflows/" + "0" * 32 + "/assets/1/images/gone", headers=ALICE)
    assert r.status_code == 404
    for path in ("0/images/gone", "x/images/gone", "1/bad name/gone", "1/images/" + "i" * 65):
        r = await api.get(f"/workflows/{wid}/assets/{path}", headers=ALICE)
        assert r.status_code == 400 and r.json()["error"] == "invalid_asset", path
    assert (await api.get("/workflows/nope/assets/1/images/gone", headers=ALICE)).status_code == 400


async def test_without_an_asset_root_nothing_is_served(
    redis_url: str, wf: WorkflowClient, tree: Path
) -> None:
    wid = await wf.start("character", {"n": 1}, owner="alice")
    await record(wf, wid, "1:1:front", str(tree / "wf" / "v1" / "front.png"))
    app = make(redis_url, None)
    async with await client_for(app) as c:
        r = await c.get(f"/workflows/{wid}/assets/1/images/front", headers=ALICE)
        assert r.status_code == 404 and "no asset root" in r.json()["detail"]
        assert (await c.get(f"/workflows/{wid}/plan", headers=ALICE)).status_code == 200
    await app.state.rsjobs.aclose()


def test_the_asset_root_must_be_a_directory(redis_url: str, tree: Path) -> None:
    for bad in (tree / "missing", tree / "wf" / "v1" / "front.png"):
        with pytest.raises(ConfigError, match="not a directory"):
            make(redis_url, bad)
