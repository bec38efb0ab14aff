"""The OpenAPI document describes the workflow routes as they answer: every ``$ref``
resolves, each action's documented body is the Struct the route decodes, and real answers
(status codes and bodies) of the workflow routes validate against the documented schemas."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec
import pytest

from rsjobs import Settings, connect
from rsjobs.web import create_app
from rsjobs.web.openapi import ACTION_BODIES, openapi_document
from rsjobs.workflows import WorkflowClient
from tests.support.web import ADMIN, ALICE, NAMESPACE, TOKENS
from tests.support.workflows import Hand, character

pytestmark = pytest.mark.integration

DOC = openapi_document()
SCHEMAS = DOC["components"]["schemas"]
_JSON_TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "null": type(None),
}


def problems(value: Any, schema: dict[str, Any], at: str = "$") -> list[str]:
    """A small JSON Schema check (the keywords msgspec and this document use)."""
    if "$ref" in schema:
        return problems(value, SCHEMAS[schema["$ref"].rsplit("/", 1)[1]], at)
    if "anyOf" in schema:
        options = [problems(value, s, at) for s in schema["anyOf"]]
        return [] if any(not p for p in options) else [f"{at}: matches no anyOf option"]
    out: list[str] = []
    kind = schema.get("type")
    if kind is not None:
        ok = isinstance(value, _JSON_TYPES[kind])
        if kind in ("integer", "number") and isinstance(value, bool):
            ok = False
        if not ok:
            return [f"{at}: expected {kind}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{at}: {value!r} not in {schema['enum']}")
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            out.append(f"{at}: {value!r} does not match {schema['pattern']}")
        if len(value) > schema.get("maxLength", len(value)):
            out.append(f"{at}: too long")
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number and not schema.get("minimum", value) <= value <= schema.get("maximum", value):
        out.append(f"{at}: {value} out of range")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        out += [f"{at}: missing {k}" for k in schema.get("required", []) if k not in value]
        if schema.get("additionalProperties") is False:
            out += [f"{at}: unexpected {k}" for k in value if k not in props]
        for k, v in value.items():
            if k in props:
                out += problems(v, props[k], f"{at}.{k}")
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            out += problems(v, schema["items"], f"{at}[{i}]")
    return out


def check(r: httpx.Response, path: str, method: str) -> Any:
    """The answer's status is documented for the operation and its JSON body validates."""
    op = DOC["paths"][path][method]
    documented = op["responses"].get(str(r.status_code))
    assert documented is not None, f"{method} {path}: {r.status_code} is not documented"
    media = r.headers.get("content-type", "").split(";")[0]
    if media not in ("application/json", "application/problem+json"):
        return None
    content = documented.get("content", {}).get(media)
    assert content is not None, (method, path, r.status_code, media)  # the type is documented
    body = r.json()
    assert problems(body, content["schema"]) == [], (method, path, r.status_code, body)
    return body


def test_every_ref_resolves_and_workflow_schemas_are_strict() -> None:
    refs = set(re.findall(r"#/components/schemas/(\w+)", msgspec.json.encode(DOC).decode()))
    assert refs and refs <= set(SCHEMAS), refs - set(SCHEMAS)
    for name in ("StartBody", *(k.__name__ for k in ACTION_BODIES.values())):
        assert SCHEMAS[name]["additionalProperties"] is False, name
    assert SCHEMAS["StartBody"]["required"] == ["definition"]
    assert SCHEMAS["RegenerateBody"]["required"] == ["stage"]
    # the two Any fields are narrowed to what the handlers put there
    assert SCHEMAS["ActionResult"]["properties"]["workflow"] == {
        "$ref": "#/components/schemas/WorkflowStatus"
    }
    assert SCHEMAS["EventsPage"]["properties"]["entries"]["items"] == {
        "$ref": "#/components/schemas/WorkflowEvent"
    }
    op = DOC["paths"]["/workflows/{wf_id}/{action}"]["post"]
    action = next(p for p in op["parameters"] if p["name"] == "action")
    assert action["schema"]["enum"] == ["confirm", "regenerate", "retry", "publish", "cancel"]
    bodies = op["requestBody"]["x-rsjobs-action-bodies"]
    assert set(bodies) == set(ACTION_BODIES)
    for name, kind in ACTION_BODIES.items():
        schema = SCHEMAS[bodies[name].rsplit("/", 1)[1]]
        assert set(schema["properties"]) == {f.encode_name for f in msgspec.structs.fields(kind)}


@pytest.fixture
async def api(redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(redis_url, namespace=NAMESPACE, tokens=TOKENS, admin_token=ADMIN, env={},
                     definitions=[character()])  # fmt: skip
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://x") as c:
        yield c
    await app.state.rsjobs.aclose()


@pytest.fixture
async def wf(redis_url: str) -> AsyncIterator[WorkflowClient]:
    c = WorkflowClient(connect(redis_url), Settings(namespace=NAMESPACE))
    yield c
    await c.close()


async def test_real_answers_match_the_document(api: httpx.AsyncClient, wf: WorkflowClient) -> None:
    start = {"definition": "character", "input": {"n": 1}}
    assert problems(start, SCHEMAS["StartBody"]) == []
    h = {**ALICE, "Idempotency-Key": "k-1"}
    r = await api.post("/workflows", json=start, headers=h)
    assert r.status_code == 202
    wid = check(r, "/workflows", "post")["id"]
    assert check(await api.post("/workflows", json=start, headers=h), "/workflows", "post")[
        "changed"] is False  # fmt: skip
    for bad, code in (({"definition": "nope"}, 422), ({"definition": "character", "x": 1}, 422)):
        r = await api.post("/workflows", json=bad, headers=ALICE)
        assert r.status_code == code and check(r, "/workflows", "post")["error"]
    one = "/workflows/{wf_id}"
    doc = check(await api.get(f"/workflows/{wid}", headers=ALICE), one, "get")
    assert doc["status"] == "RUNNING" and doc["tasks"]
    for r in (await api.get("/workflows/" + "0" * 32, headers=ALICE),
              await api.get("/workflows/nope", headers=ALICE), await api.get(f"/workflows/{wid}")):  # fmt: skip
        assert r.status_code in (400, 401, 404) and check(r, one, "get")

    act = "/workflows/{wf_id}/{action}"
    # refused while RUNNING (409); an unknown field for every action (422); unknown action
    r = await api.post(f"/workflows/{wid}/publish", json={}, headers=ALICE)
    assert r.status_code == 409 and check(r, act, "post")["error"] == "refused"
    for name in ACTION_BODIES:
        r = await api.post(f"/workflows/{wid}/{name}", json={"bogus": 1}, headers=ALICE)
        assert r.status_code == 422 and "bogus" in check(r, act, "post")["detail"], name
    r = await api.post(f"/workflows/{wid}/frobnicate", json={}, headers=ALICE)
    assert r.status_code == 404 and check(r, act, "post")
    # accepted actions, each with a body that validates against its documented schema
    hand = Hand(wf.redis, wf.settings)
    await hand.complete((await hand.claim())[0])
    bodies = [
        ("confirm", {"version": 1, "stage": "params", "note": "ok"}),
        ("regenerate", {"stage": "params", "version": 1, "reason": "again"}),
        ("cancel", {"reason": "enough"}),
        ("cancel", {}),
        ("publish", {"version": 2}),
    ]
    for name, body in bodies:
        assert problems(body, SCHEMAS[ACTION_BODIES[name].__name__]) == [], name
        r = await api.post(f"/workflows/{wid}/{name}", json=body, headers=ALICE)
        got = check(r, act, "post")
        if r.status_code == 200:
            assert got["action"] == name and got["workflow"]["id"] == wid
    assert (await wf.status(wid)).status == "CANCELLED"

    page = check(
        await api.get(f"/workflows/{wid}/history?limit=1000", headers=ALICE),
        "/workflows/{wf_id}/history",
        "get",
    )
    assert {e["event"] for e in page["entries"]} >= {"START", "CONFIRM", "REGENERATE", "CANCEL"}
    r = await api.get(f"/workflows/{wid}/history?limit=0", headers=ALICE)
    assert r.status_code == 400 and check(r, "/workflows/{wf_id}/history", "get")
    plan = check(await api.get(f"/workflows/{wid}/plan", headers=ALICE),
                 "/workflows/{wf_id}/plan", "get")  # fmt: skip
    assert [s["gate"] for s in plan["stages"]] == [True, True, False, False]
    r = await api.get(f"/workflows/{wid}/events", headers=ALICE)
    assert r.status_code == 200 and check(r, "/workflows/{wf_id}/events", "get") is None
    last = (await wf.history(wid))[-1].id
    r = await api.get(f"/workflows/{wid}/events", headers={**ALICE, "Last-Event-ID": last})
    assert r.status_code == 204 and check(r, "/workflows/{wf_id}/events", "get") is None
    r = await api.get(f"/workflows/{wid}/assets/2/params/params", headers=ALICE)
    assert r.status_code == 404
    check(r, "/workflows/{wf_id}/assets/{version}/{stage}/{item}", "get")
