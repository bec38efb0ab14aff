"""Bad input gets a 4xx with a readable JSON reason, and nothing is written to Redis.

Through Starlette's TestClient; every case compares a DUMP of every key before and after.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis as sync_redis
from starlette.applications import Starlette

from tests.support.web import ALICE, BOB, TestClient, make_app, redis_state

pytestmark = pytest.mark.integration

TASK = "0123456789abcdef0123456789abcdef"


def _check(tc: TestClient, rdb: sync_redis.Redis, status: int, code: str, **req: Any) -> str:
    before = redis_state(rdb)
    r = tc.request(**req)
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"] == code and isinstance(body["detail"], str) and body["detail"]
    assert redis_state(rdb) == before, "a refused request wrote to redis"
    detail: str = body["detail"]
    return detail


def _seed(tc: TestClient) -> str:
    """One real task, so 'nothing written' is checked against a non-empty database."""
    r = tc.post("/tasks", json={"type": "seed"}, headers=ALICE)
    assert r.status_code == 202
    tid: str = r.json()["id"]
    return tid


POST = {"method": "POST", "url": "/tasks", "headers": {**ALICE, "Content-Type": "application/json"}}


@pytest.mark.parametrize(
    ("content", "status", "code", "says"),
    [
        (b"{not json", 400, "invalid_json", "malformed"),
        (b"", 400, "invalid_json", "empty"),
        (b"[1, 2]", 422, "invalid_body", "Expected `object`"),
        (b'{"payload": 1}', 422, "invalid_body", "missing required field `type`"),
        (b'{"type": "x", "colour": "red"}', 422, "invalid_body", "unknown field `colour`"),
        (b'{"type": 5}', 422, "invalid_body", "Expected `str`, got `int` - at `$.type`"),
        (b'{"type": "x", "max_attempts": "3"}', 422, "invalid_body", "$.max_attempts"),
        (b'{"type": "x", "max_attempts": true}', 422, "invalid_body", "$.max_attempts"),
        (b'{"type": "x", "max_attempts": 0}', 422, "invalid_body", ">= 1"),
        (b'{"type": "x", "delay_ms": -1}', 422, "invalid_body", ">= 0"),
        (b'{"type": "x", "queue": "no spaces"}', 422, "invalid_body", "$.queue"),
        (b'{"type": ""}', 422, "invalid_body", "$.type"),
        (b'{"type": "a b"}', 422, "invalid_body", "$.type"),
        (b'{"type": "t\\n"}', 422, "invalid_body", "$.type"),
        (b'{"type": "\\u2460"}', 422, "invalid_body", "$.type"),
        (b'{"type": "x", "priority": 1e308}', 422, "invalid_body", "$.priority"),
        (b'{"type": "x", "dedup_key": ""}', 422, "invalid_body", "$.dedup_key"),
        (b'{"type": "x", "backoff_base_ms": 10, "backoff_max_ms": 5}', 422, "invalid_body",
         "backoff_max_ms"),
        (b'{"type": "x", "owner": "bob"}', 403, "forbidden", "admin"),
    ],
)  # fmt: skip
def test_bad_submit_bodies(
    tc: TestClient, rdb: sync_redis.Redis, content: bytes, status: int, code: str, says: str
) -> None:
    _seed(tc)
    detail = _check(tc, rdb, status, code, **POST, content=content)
    assert says in detail


def test_bad_idempotency_keys(tc: TestClient, rdb: sync_redis.Redis) -> None:
    _seed(tc)
    for key in ("has space", "x" * 129, "tab\there"):
        headers = {**ALICE, "Idempotency-Key": key}
        _check(tc, rdb, 400, "invalid_idempotency_key", method="POST", url="/tasks",
               headers=headers, json={"type": "x"})  # fmt: skip


def test_wrong_content_type(tc: TestClient, rdb: sync_redis.Redis) -> None:
    _seed(tc)
    headers = {**ALICE, "Content-Type": "application/x-www-form-urlencoded"}
    _check(tc, rdb, 415, "unsupported_media_type", method="POST", url="/tasks",
           headers=headers, content=b"type=x")  # fmt: skip


def test_oversized_bodies_are_413_before_reading(redis_url: str, rdb: sync_redis.Redis) -> None:
    app = make_app(redis_url, max_body_bytes=4096)
    with TestClient(app) as tc:
        _seed(tc)
        big = json.dumps({"type": "x", "payload": "a" * 5000}).encode()
        # declared length over the limit
        _check(tc, rdb, 413, "body_too_large", **POST, content=big)

        # no length declared (chunked): counted while reading
        def chunks() -> Any:
            for i in range(0, len(big), 1000):
                yield big[i : i + 1000]

        _check(tc, rdb, 413, "body_too_large", **POST, content=chunks())
        tid = _seed(tc)
        _check(tc, rdb, 413, "body_too_large", method="POST", url=f"/tasks/{tid}/cancel",
               headers=ALICE, content=b'{"reason": "' + b"r" * 5000 + b'"}')  # fmt: skip


def test_payload_over_the_store_limit_is_413(redis_url: str, rdb: sync_redis.Redis) -> None:
    from rsjobs import Settings
    from rsjobs.web import WebConfig, create_app

    app = create_app(redis_url, settings=Settings(namespace="t", payload_limit=100),
                     tokens={"tok-alice": "alice"}, env={}, config=WebConfig())  # fmt: skip
    with TestClient(app) as tc:
        _seed(tc)
        d = _check(tc, rdb, 413, "payload_too_large", method="POST", url="/tasks",
                   headers=ALICE, json={"type": "x", "payload": "p" * 200})  # fmt: skip
        assert "limit of 100 bytes" in d


@pytest.mark.parametrize("bad", ["nothex", TASK.upper(), TASK[:-1], TASK + "0", "g" * 32])
def test_invalid_ids_are_400(tc: TestClient, rdb: sync_redis.Redis, bad: str) -> None:
    _seed(tc)
    for method, path in (("GET", ""), ("GET", "/history"), ("POST", "/cancel"), ("GET", "/events")):
        _check(tc, rdb, 400, "invalid_id", method=method, url=f"/tasks/{bad}{path}", headers=ALICE)


def test_unknown_ids_are_404(tc: TestClient, rdb: sync_redis.Redis) -> None:
    _seed(tc)
    for method, path in (("GET", ""), ("GET", "/history"), ("POST", "/cancel"), ("GET", "/events")):
        _check(tc, rdb, 404, "not_found", method=method, url=f"/tasks/{TASK}{path}", headers=ALICE)


def test_bad_cancel_bodies(tc: TestClient, rdb: sync_redis.Redis) -> None:
    tid = _seed(tc)
    url = f"/tasks/{tid}/cancel"
    _check(tc, rdb, 400, "invalid_json", method="POST", url=url, headers=ALICE, content=b"{")
    _check(tc, rdb, 422, "invalid_body", method="POST", url=url, headers=ALICE,
           json={"reason": "x", "force": True})  # fmt: skip
    _check(tc, rdb, 422, "invalid_body", method="POST", url=url, headers=ALICE, json={"reason": 1})
    # bob's cancel of alice's task: 404 and nothing written (no refused entry either)
    _check(tc, rdb, 404, "not_found", method="POST", url=url, headers=BOB)
    assert tc.get(f"/tasks/{tid}", headers=ALICE).json()["state"] == "PENDING"


def test_bad_history_and_stream_parameters(tc: TestClient, rdb: sync_redis.Redis) -> None:
    tid = _seed(tc)
    cases = [({"after": "yesterday"}, "invalid_after"), ({"after": "1-"}, "invalid_after"),
             ({"limit": "0"}, "invalid_limit"), ({"limit": "x"}, "invalid_limit"),
             ({"limit": "1001"}, "invalid_limit")]  # fmt: skip
    for params, code in cases:
        _check(tc, rdb, 400, code, method="GET", url=f"/tasks/{tid}/history", params=params,
               headers=ALICE)  # fmt: skip
    _check(tc, rdb, 400, "invalid_last_event_id", method="GET", url=f"/tasks/{tid}/events",
           headers={**ALICE, "Last-Event-ID": "not-an-id"})  # fmt: skip


def test_unknown_routes_and_methods_answer_json(tc: TestClient, rdb: sync_redis.Redis) -> None:
    _seed(tc)
    _check(tc, rdb, 404, "not_found", method="GET", url="/nope")
    _check(tc, rdb, 405, "method_not_allowed", method="DELETE", url=f"/tasks/{TASK}", headers=ALICE)
    _check(tc, rdb, 405, "method_not_allowed", method="DELETE", url="/tasks", headers=ALICE)


def test_unauthenticated_writes_nothing(app: Starlette, rdb: sync_redis.Redis) -> None:
    with TestClient(app) as tc:
        _seed(tc)
        _check(tc, rdb, 401, "unauthorized", method="POST", url="/tasks", json={"type": "x"})
