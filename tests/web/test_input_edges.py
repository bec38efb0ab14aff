"""Inputs at the edges of what the parsers accept get a 4xx, never a 5xx, and write
nothing: JSON nested beyond the stack, digits that are not ASCII, stream ids Redis would
refuse, names with a trailing newline; and what is documented as valid works (the
longest owner with the longest idempotency key). Each case compares a DUMP of every key
before and after, through the app the way ``create_app`` builds it (task and workflow
routes)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis as sync_redis
from starlette.applications import Starlette
from starlette.routing import Mount

from rsjobs import Client, PayloadError
from rsjobs.codec import MAX_DEPTH, encode_payload, too_deep
from rsjobs.web import create_app
from tests.support.web import ADMIN, ALICE, NAMESPACE, ROOT, TOKENS, TestClient, redis_state
from tests.support.workflows import character

pytestmark = pytest.mark.integration

#: ids Redis refuses (a part of 2^64 or more) or that only Unicode calls digits
BAD_STREAM_IDS = [
    "18446744073709551616-0",
    "1-18446744073709551616",
    "99999999999999999999-0",
    "\u0661-0",  # ARABIC-INDIC DIGIT ONE: str.isdigit() is true
    "\u00b2-0",  # SUPERSCRIPT TWO
    "1-0\n",
    "1-0 ",
]
LARGEST_ID = "18446744073709551615-18446744073709551615"


@pytest.fixture
def app(redis_url: str) -> Starlette:
    return create_app(redis_url, namespace=NAMESPACE, tokens=TOKENS, admin_token=ADMIN,
                      env={}, definitions=[character()])  # fmt: skip


@pytest.fixture
def tc(app: Starlette) -> Iterator[TestClient]:
    with TestClient(app) as c:
        yield c


@pytest.fixture
def seeded(tc: TestClient) -> tuple[str, str]:
    """A task and a workflow of alice, so 'nothing written' is checked against data."""
    r = tc.post("/tasks", json={"type": "seed"}, headers=ALICE)
    assert r.status_code == 202, r.text
    w = tc.post("/workflows", json={"definition": "character", "input": {"n": 1}}, headers=ALICE)
    assert w.status_code == 202, w.text
    return r.json()["id"], w.json()["id"]


def refused(tc: TestClient, rdb: sync_redis.Redis, status: int, code: str, **req: Any) -> str:
    before = redis_state(rdb)
    r = tc.request(**req)
    assert (r.status_code, r.json()["error"]) == (status, code), r.text
    assert redis_state(rdb) == before, "a refused request wrote to redis"
    detail: str = r.json()["detail"]
    return detail


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1000, 100_000])
def test_deeply_nested_bodies_are_422(
    tc: TestClient, rdb: sync_redis.Redis, seeded: tuple[str, str], depth: int
) -> None:
    tid, wid = seeded
    for url, field in (("/tasks", b'"payload"'), ("/workflows", b'"input"')):
        head = b'{"type": "x", ' if url == "/tasks" else b'{"definition": "character", '
        body = head + field + b": " + nested(depth) + b"}"
        d = refused(tc, rdb, 422, "invalid_body", method="POST", url=url,
                    headers={**ALICE, "Content-Type": "application/json"}, content=body)  # fmt: skip
        assert f"at most {MAX_DEPTH}" in d
    for url in (f"/tasks/{tid}/cancel", f"/workflows/{wid}/cancel"):
        refused(tc, rdb, 422, "invalid_body", method="POST", url=url, headers=ALICE,
                content=nested(depth))  # fmt: skip


def test_the_deepest_accepted_payload_reads_back(tc: TestClient) -> None:
    payload: Any = []
    for _ in range(MAX_DEPTH - 1):
        payload = [payload]
    r = tc.post("/tasks", json={"type": "x", "payload": payload}, headers=ALICE)
    assert r.status_code == 202, r.text
    got = tc.get(f"/tasks/{r.json()['id']}", headers=ALICE)
    assert got.status_code == 200 and got.json()["payload"] == payload


async def test_client_enqueue_of_a_too_deep_payload_is_a_payload_error(
    client: Client, rdb: sync_redis.Redis
) -> None:
    await client.enqueue("seed")
    before = redis_state(rdb)
    for depth in (MAX_DEPTH + 1, 5000):
        payload: Any = []
        for _ in range(depth - 1):
            payload = [payload]
        with pytest.raises(PayloadError, match="nested"):
            await client.enqueue("x", payload)
    assert redis_state(rdb) == before


def test_too_deep_counts_structure_not_text() -> None:
    assert not too_deep(b'"' + b"[" * 500 + b'"')  # brackets inside a string
    assert not too_deep(b'["\\"' + b"[" * 500 + b'"]')  # an escaped quote does not end it
    assert too_deep(nested(MAX_DEPTH + 1)) and not too_deep(nested(MAX_DEPTH))
    assert not too_deep(b"[" + b"[],{}," * 1000 + b"[]]")  # many, but shallow
    with pytest.raises(PayloadError, match=f"more than {MAX_DEPTH} levels"):
        encode_payload(_deep(MAX_DEPTH + 1))
    assert encode_payload(_deep(MAX_DEPTH))


def _deep(depth: int) -> Any:
    value: Any = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize("limit", ["\u00b2", "\u2460", "\u0661", "\uff11", "1\n", " 1", "+1"])
def test_limits_with_digits_int_refuses_are_400(
    tc: TestClient, rdb: sync_redis.Redis, seeded: tuple[str, str], limit: str
) -> None:
    for path in (f"/tasks/{seeded[0]}/history", f"/workflows/{seeded[1]}/history"):
        refused(tc, rdb, 400, "invalid_limit", method="GET", url=path, headers=ALICE,
                params={"limit": limit})  # fmt: skip


@pytest.mark.parametrize("bad", BAD_STREAM_IDS)
def test_stream_ids_redis_refuses_are_400(
    tc: TestClient, rdb: sync_redis.Redis, seeded: tuple[str, str], bad: str
) -> None:
    tid, wid = seeded
    for path in (f"/tasks/{tid}/history", f"/workflows/{wid}/history"):
        refused(tc, rdb, 400, "invalid_after", method="GET", url=path, headers=ALICE,
                params={"after": bad})  # fmt: skip
    for path in (f"/tasks/{tid}/events", f"/workflows/{wid}/events"):
        refused(tc, rdb, 400, "invalid_last_event_id", method="GET", url=path, headers=ALICE,
                params={"last_event_id": bad})  # fmt: skip
        if bad.isascii():  # (headers are latin-1)
            refused(tc, rdb, 400, "invalid_last_event_id", method="GET", url=path,
                    headers={**ALICE, "Last-Event-ID": bad})  # fmt: skip
        # a malformed query id is refused even beside a well-formed header
        refused(tc, rdb, 400, "invalid_last_event_id", method="GET", url=path,
                headers={**ALICE, "Last-Event-ID": "1-0"}, params={"last_event_id": bad})  # fmt: skip


def test_the_largest_stream_id_is_valid_and_nothing_follows_it(
    tc: TestClient, seeded: tuple[str, str]
) -> None:
    tid, wid = seeded
    for path in (f"/tasks/{tid}/history", f"/workflows/{wid}/history"):
        r = tc.get(path, params={"after": LARGEST_ID}, headers=ALICE)
        assert r.status_code == 200 and r.json()["entries"] == [] and r.json()["next"] is None
    for path in (f"/tasks/{tid}/events", f"/workflows/{wid}/events"):
        r = tc.get(path, headers={**ALICE, "Last-Event-ID": LARGEST_ID})
        assert r.status_code == 400 and r.json()["error"] == "invalid_last_event_id"


def test_workflow_stream_refuses_an_id_of_another_stream(
    tc: TestClient, rdb: sync_redis.Redis, seeded: tuple[str, str]
) -> None:
    tid, wid = seeded
    task_entry = tc.get(f"/tasks/{tid}/history", headers=ALICE).json()["entries"][0]["id"]
    other = tc.post("/workflows", json={"definition": "character", "input": {"n": 2}},
                    headers=ALICE).json()["id"]  # fmt: skip
    other_entry = tc.get(f"/workflows/{other}/history", headers=ALICE).json()["entries"][0]["id"]
    own = tc.get(f"/workflows/{wid}/history", headers=ALICE).json()["entries"]
    for last in (task_entry, other_entry, "1-0"):
        assert last not in {e["id"] for e in own}
        d = refused(tc, rdb, 400, "invalid_last_event_id", method="GET",
                    url=f"/workflows/{wid}/events", headers={**ALICE, "Last-Event-ID": last})  # fmt: skip
        assert "not an event of this workflow" in d
    # its own entry is a resume point (the stream of a finished workflow ends; cancel it)
    assert tc.post(f"/workflows/{wid}/cancel", headers=ALICE).status_code == 200
    entries = tc.get(f"/workflows/{wid}/history", headers=ALICE).json()["entries"]
    r = tc.get(f"/workflows/{wid}/events", headers={**ALICE, "Last-Event-ID": entries[0]["id"]})
    assert r.status_code == 200 and "event: end" in r.text
    r = tc.get(f"/workflows/{wid}/events", headers={**ALICE, "Last-Event-ID": entries[-1]["id"]})
    assert r.status_code == 204


@pytest.mark.parametrize(
    ("url", "body"),
    [
        ("/tasks", {"type": "x", "queue": "q\n"}),
        ("/tasks", {"type": "x", "owner": "alice\n"}),
        ("/tasks", {"type": "x", "dedup_key": "k\n"}),
        ("/tasks", {"type": "x", "dedup_key": "has space"}),
        ("/workflows", {"definition": "character\n"}),
        ("/workflows", {"definition": "character", "owner": "alice\n"}),
    ],
)
def test_names_with_a_trailing_newline_are_422(
    tc: TestClient, rdb: sync_redis.Redis, seeded: tuple[str, str], url: str, body: Any
) -> None:
    refused(tc, rdb, 422, "invalid_body", method="POST", url=url,
            headers=ROOT, json=body)  # fmt: skip
    stage = {"stage": "params\n"}
    refused(tc, rdb, 422, "invalid_body", method="POST", url=f"/workflows/{seeded[1]}/regenerate",
            headers=ALICE, json=stage)  # fmt: skip


def asgi_post(app: Starlette, path: str, headers: list[tuple[bytes, bytes]], body: bytes) -> int:
    """POST straight into the app's ASGI interface, with header values an HTTP client
    would not send (another ASGI server might pass them on); the answer's status."""
    import asyncio

    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
             "root_path": "", "server": ("test", 80), "client": ("127.0.0.1", 1),
             "headers": [(b"authorization", b"Bearer tok-alice"), *headers]}  # fmt: skip
    asyncio.run(app(scope, receive, send))
    status: int = sent[0]["status"]
    return status


def test_idempotency_keys_with_a_trailing_newline_are_400(
    app: Starlette, rdb: sync_redis.Redis, seeded: tuple[str, str]
) -> None:
    before = redis_state(rdb)
    for url, body in (("/tasks", b'{"type": "x"}'), ("/workflows", b'{"definition": "character"}')):
        for key in (b"k\n", b"k\r\n"):
            headers = [(b"content-type", b"application/json"), (b"idempotency-key", key)]
            assert asgi_post(app, url, headers, body) == 400, (url, key)
    assert redis_state(rdb) == before


def test_asset_slots_with_a_trailing_newline_are_400(
    tc: TestClient, seeded: tuple[str, str]
) -> None:
    wid = seeded[1]
    for slot in ("1%0A/params/params", "1/params%0A/params", "1/params/params%0A"):
        r = tc.get(f"/workflows/{wid}/assets/{slot}", headers=ALICE)
        assert (r.status_code, r.json()["error"]) == (400, "invalid_asset"), slot


def test_longest_owner_with_longest_idempotency_key(tc: TestClient, rdb: sync_redis.Redis) -> None:
    """Both documented as valid (128 characters each): the task is made once, and a repeat
    is a duplicate; the same key of another owner, or a key one character off, is not."""
    root = ROOT
    owner, key = "o" * 128, "k" * 128
    body = {"type": "x", "owner": owner}
    first = tc.post("/tasks", json=body, headers={**root, "Idempotency-Key": key})
    assert first.status_code == 202 and first.json()["duplicate"] is False, first.text
    again = tc.post("/tasks", json={**body, "dedup_key": key}, headers=root)
    assert again.status_code == 202 and again.json() == {**first.json(), "duplicate": True}
    near = tc.post("/tasks", json=body, headers={**root, "Idempotency-Key": key[:-1] + "j"})
    other = tc.post("/tasks", json={**body, "owner": "p" * 128},
                    headers={**root, "Idempotency-Key": key})  # fmt: skip
    ids = {first.json()["id"], near.json()["id"], other.json()["id"]}
    assert len(ids) == 3 and not near.json()["duplicate"] and not other.json()["duplicate"]
    reused = tc.post("/tasks", json={**body, "type": "y"}, headers={**root, "Idempotency-Key": key})
    assert reused.status_code == 422 and reused.json()["error"] == "idempotency_key_reused"
    # keys that fit keep their readable form, so tasks submitted before stay deduplicated
    short = tc.post("/tasks", json={"type": "x"}, headers={**ALICE, "Idempotency-Key": "k-1"})
    assert rdb.get(f"rsjobs:{{{NAMESPACE}}}:dedup:alice/k-1") == short.json()["id"].encode()


@pytest.mark.parametrize("length", ["\u00b2", "1\u00b3", "-1", "1 2", "0x1"])
def test_content_length_must_be_ascii_digits(
    app: Starlette, rdb: sync_redis.Redis, seeded: tuple[str, str], length: str
) -> None:
    before = redis_state(rdb)
    headers = [(b"content-length", length.encode("latin-1"))]  # how ASGI reads headers
    assert asgi_post(app, "/tasks", headers, b'{"type": "x"}') == 400
    assert redis_state(rdb) == before


def test_root_redirects_to_a_relative_location(redis_url: str) -> None:
    jobs = create_app(redis_url, namespace=NAMESPACE, tokens=TOKENS, env={})
    outer = Starlette(routes=[Mount("/jobs", app=jobs)])
    with TestClient(jobs) as tc:
        r = tc.get("/", headers={"Host": "evil.example"}, follow_redirects=False)
        assert r.status_code == 307 and r.headers["location"] == "/ui/"
    with TestClient(outer) as tc:
        r = tc.get("/jobs/", headers={"Host": "evil.example"}, follow_redirects=False)
        assert r.status_code == 307 and r.headers["location"] == "/jobs/ui/"
        assert tc.get("/jobs/", headers={"Host": "evil.example"}).status_code == 200


def test_unknown_query_parameters_are_400(
    tc: TestClient, rdb: sync_redis.Redis, seeded: tuple[str, str]
) -> None:
    """A misspelt parameter is refused rather than ignored; each route takes its own."""
    tid, wid = seeded
    cases = [("POST", "/tasks", {"typo": "1"}), ("GET", f"/tasks/{tid}", {"after": "0-0"}),
             ("GET", f"/tasks/{tid}/history", {"limt": "5"}),
             ("POST", f"/tasks/{tid}/cancel", {"reason": "x"}),
             ("GET", f"/tasks/{tid}/events", {"after": "0-0"}),
             ("GET", f"/workflows/{wid}/history", {"last_event_id": "0-0"}),
             ("POST", f"/workflows/{wid}/cancel", {"x": ""}),
             ("GET", f"/workflows/{wid}/plan", {"access_token": "tok-alice"}),
             ("GET", "/healthz", {"verbose": "1"})]  # fmt: skip
    for method, url, params in cases:
        d = refused(tc, rdb, 400, "unknown_parameter", method=method, url=url, headers=ALICE,
                    params=params, json={"type": "x"} if url == "/tasks" else None)  # fmt: skip
        assert repr(next(iter(params))) in d, (url, d)
    # what a route takes is accepted, the token in the query where documented
    assert tc.get(f"/tasks/{tid}/history", params={"after": "0-0", "limit": "5"},
                  headers=ALICE).status_code == 200  # fmt: skip
    r = tc.get(f"/workflows/{wid}/plan", params={"access_token": "tok-alice"})
    assert r.status_code == 401  # (no header: the token in the query is not read here)


def test_document_patterns_are_ecma() -> None:
    """The Structs anchor their patterns with \\Z (Python's end of the string); the document
    spells it $, ECMA-262's end of the string, since \\Z means a plain "Z" there."""
    import re

    import msgspec

    from rsjobs.web.openapi import openapi_document

    text = msgspec.json.encode(openapi_document()).decode()
    found = re.findall(r'"pattern":("(?:[^"\\]|\\.)*")', text)
    patterns = {msgspec.json.decode(p) for p in found}
    assert {
        r"^[A-Za-z0-9_.\-]{1,64}$",
        r"^[A-Za-z0-9_.@\-]{1,128}$",
        r"^[\x21-\x7e]{1,128}$",
    } <= patterns
    for p in patterns:
        assert "\\Z" not in p and p.startswith("^") and p.endswith("$"), p
        re.compile(p)
