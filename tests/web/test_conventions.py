"""HTTP conventions of the app: every error is an RFC 9457 problem document that still
carries the ``error`` code; the task and workflow documents answer with an ETag and 304
to a matching If-None-Match; the OpenAPI document names its mount point in ``servers``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from http import HTTPStatus

import httpx
import pytest

from rsjobs import Client
from rsjobs.web.openapi import openapi_document
from tests.support.web import ALICE, BOB, ROOT, make_app
from tests.support.workflows import character

pytestmark = pytest.mark.integration

WF_ID = "0" * 32


@pytest.fixture
async def web(redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    app = make_app(redis_url, definitions=[character()])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://rsjobs.test") as c:
        yield c
    await app.state.rsjobs.aclose()


def assert_problem(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["type"] == "about:blank" and body["title"] == HTTPStatus(status).phrase
    assert body["status"] == status and body["error"] == code  # the code clients match on
    assert isinstance(body["detail"], str) and body["detail"]


async def test_every_kind_of_error_is_a_problem_document_with_its_code(
    web: httpx.AsyncClient, client: Client
) -> None:
    tid = await client.enqueue("render", 1, owner="alice", dedup_key="alice/k")
    # from each source of errors: routing, auth, input checks, handlers, the workflow routes
    cases = [
        (await web.get("/nowhere", headers=ALICE), 404, "not_found"),
        (await web.delete("/tasks", headers=ALICE), 405, "method_not_allowed"),
        (await web.get(f"/tasks/{tid}"), 401, "unauthorized"),
        (await web.get(f"/tasks/{tid}", headers=BOB), 404, "not_found"),
        (await web.get("/tasks/not-an-id", headers=ALICE), 400, "invalid_id"),
        (await web.put("/tasks", headers=ALICE), 405, "method_not_allowed"),
        # the list, action and bulk routes
        (await web.get("/tasks?x=1", headers=ALICE), 400, "unknown_parameter"),
        (await web.get("/tasks?limit=0", headers=ALICE), 400, "invalid_limit"),
        (await web.get("/tasks?owner=bob", headers=ALICE), 403, "forbidden"),
        (await web.get("/queues", headers=ALICE), 403, "forbidden"),
        (await web.get("/deadletters?cursor=zz", headers=ROOT), 400, "invalid_cursor"),
        (await web.post(f"/tasks/{tid}/retry", json={}, headers=ALICE), 409, "refused"),
        (await web.post("/queues/default/pause", json={}, headers=ALICE), 403, "forbidden"),
        (await web.post("/tasks/bulk/cancel", json={"limit": "x"}, headers=ROOT),
         422, "invalid_body"),
        (await web.post("/tasks", content=b"{", headers=ALICE), 400, "invalid_json"),
        (await web.post("/tasks", content=b"x", headers={**ALICE, "Content-Type": "text/plain"}),
         415, "unsupported_media_type"),
        (await web.post("/tasks", json={"type": "render", "payload": 2}, headers={
            **ALICE, "Idempotency-Key": "k"}), 422, "idempotency_key_reused"),
        (await web.get(f"/workflows/{WF_ID}", headers=ALICE), 404, "not_found"),
        (await web.post("/workflows", json={"definition": "nope"}, headers=ALICE),
         422, "unknown_definition"),
    ]  # fmt: skip
    for r, status, code in cases:
        assert_problem(r, status, code)
    assert r.json()["detail"].startswith("unknown workflow definition")


async def test_error_codes_of_the_document_are_problem_documents() -> None:
    doc = openapi_document()
    errors = [
        (path, method, status, answer)
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
        for status, answer in op["responses"].items()
        if int(status) >= 400
    ]
    assert len(errors) > 50
    problem = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    for path, method, status, answer in errors:
        if path in ("/healthz", "/readyz") and status == "503":  # a health document
            continue
        assert answer["content"] == problem, (path, method, status)
    schema = doc["components"]["schemas"]["ErrorBody"]
    assert set(schema["required"]) >= {"title", "status", "detail", "error"}


async def test_a_task_answers_304_while_it_is_unchanged(
    web: httpx.AsyncClient, client: Client
) -> None:
    tid = await client.enqueue("render", {"n": 1}, owner="alice")
    first = await web.get(f"/tasks/{tid}", headers=ALICE)
    tag = first.headers["etag"]
    assert first.status_code == 200 and tag.startswith('"') and tag.endswith('"')
    assert first.headers["cache-control"] == "private, no-cache"
    for match in (tag, f'"other", {tag}', f"W/{tag}", "*"):
        again = await web.get(f"/tasks/{tid}", headers={**ALICE, "If-None-Match": match})
        assert again.status_code == 304 and again.content == b"", match
        assert again.headers["etag"] == tag
    stale = await web.get(f"/tasks/{tid}", headers={**ALICE, "If-None-Match": '"other"'})
    assert stale.status_code == 200 and stale.json() == first.json()
    # another owner learns nothing from a tag: the same 404 as without one
    assert_problem(
        await web.get(f"/tasks/{tid}", headers={**BOB, "If-None-Match": tag}), 404, "not_found"
    )
    await client.cancel(tid, "changed")
    changed = await web.get(f"/tasks/{tid}", headers={**ALICE, "If-None-Match": tag})
    assert changed.status_code == 200 and changed.json()["state"] == "CANCELLED"
    assert changed.headers["etag"] != tag


async def test_a_workflow_status_answers_304_while_it_is_unchanged(
    web: httpx.AsyncClient,
) -> None:
    r = await web.post(
        "/workflows", json={"definition": "character", "input": {"n": 1}}, headers=ALICE
    )
    wid = r.json()["id"]
    first = await web.get(f"/workflows/{wid}", headers=ALICE)
    tag = first.headers["etag"]
    same = await web.get(f"/workflows/{wid}", headers={**ALICE, "If-None-Match": tag})
    assert same.status_code == 304 and same.content == b""
    cancel = await web.post(f"/workflows/{wid}/cancel", json={}, headers=ALICE)
    assert cancel.status_code == 200, cancel.text
    changed = await web.get(f"/workflows/{wid}", headers={**ALICE, "If-None-Match": tag})
    assert changed.status_code == 200 and changed.headers["etag"] != tag
    assert changed.json()["status"] == "CANCELLED"


async def test_openapi_names_the_mount_point_in_servers(redis_url: str) -> None:
    app = make_app(redis_url)
    try:
        for root, servers in (
            ("", None),
            ("/jobs", [{"url": "/jobs"}]),
            ("/a/b", [{"url": "/a/b"}]),
        ):
            transport = httpx.ASGITransport(app=app, root_path=root)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                doc = (await c.get(f"{root.rstrip('/')}/openapi.json")).json()
            assert doc.get("servers") == servers, root
            assert doc["paths"] == openapi_document()["paths"]
    finally:
        await app.state.rsjobs.aclose()
