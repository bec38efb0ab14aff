"""The provider callback routes: bad input is a 4xx with a reason and writes nothing (every
key compared before and after); a valid callback ends the wait once, a repeat answers
``changed: false`` and writes nothing, one for an attempt that is over is a 409 recorded
in the task's history; without a secret the routes answer 404."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis as sync_redis

from rsjobs import Settings, connect
from rsjobs.callbacks import Claims, body_signature, sign
from rsjobs.store import Store
from tests.support.web import ALICE, TestClient, make_app, redis_state

pytestmark = pytest.mark.integration

SECRET = "web-callback-secret-0123456789"


def _token(tid: str, attempt: int = 1, *, ns: str = "t", ttl_ms: int = 60_000) -> str:
    return sign(SECRET, Claims(ns, tid, "default", attempt, int(time.time() * 1000) + ttl_ms))


@pytest.fixture
def cb(redis_url: str) -> Any:
    with TestClient(make_app(redis_url, callback_secret=SECRET)) as c:
        yield c


async def _deferred(redis_url: str, cb: TestClient, job: str = "job-1") -> str:
    """A task of alice's, started by hand and deferred on ``job`` of provider ``acme``."""
    tid = cb.post("/tasks", json={"type": "gen", "max_attempts": 1}, headers=ALICE).json()["id"]
    store = Store(connect(redis_url), Settings(namespace="t"))
    try:
        k, work = store.keys, store.work
        await work.ensure_groups([k.queue("default")])
        (d,) = await work.read("hand", {k.queue("default"): "default"}, 1, None)
        (started,) = await work.start("hand", 60_000, "hand-n", [d])
        await store.deferred.defer(k.task_keys(tid, "default"), started.lease, job, "acme", 60_000)
    finally:
        await store.close()
    return tid


def _refused(cb: TestClient, rdb: sync_redis.Redis, status: int, code: str, **req: Any) -> None:
    before = redis_state(rdb)
    r = cb.request(**req)
    assert r.status_code == status, r.text
    assert r.json()["error"] == code and r.json()["detail"]
    assert redis_state(rdb) == before, "a refused callback wrote to redis"


OK = {"status": "succeeded", "result": {"url": "x"}}


async def test_bad_callbacks_write_nothing(redis_url: str, cb: TestClient, rdb: Any) -> None:
    tid = await _deferred(redis_url, cb)
    good = _token(tid)
    _refused(cb, rdb, 401, "bad_signature", method="POST", url="/callbacks/nonsense", json=OK)
    _refused(cb, rdb, 401, "bad_signature", method="POST",
             url=f"/callbacks/{sign('another-secret-0123456789', Claims('t', tid, 'default', 1, 2**41))}",
             json=OK)  # fmt: skip
    _refused(cb, rdb, 401, "bad_signature", method="POST",
             url=f"/callbacks/{_token(tid, ttl_ms=-1000)}", json=OK)  # fmt: skip
    _refused(cb, rdb, 401, "bad_signature", method="POST",
             url=f"/callbacks/{_token(tid, ns='other')}", json=OK)  # fmt: skip
    _refused(cb, rdb, 400, "invalid_json", method="POST", url=f"/callbacks/{good}", content=b"{")
    _refused(cb, rdb, 400, "invalid_json", method="POST", url=f"/callbacks/{good}", content=b"")
    _refused(cb, rdb, 422, "invalid_body", method="POST", url=f"/callbacks/{good}",
             json={"status": "maybe"})  # fmt: skip
    _refused(cb, rdb, 422, "invalid_body", method="POST", url=f"/callbacks/{good}",
             json={**OK, "extra": 1})  # fmt: skip
    _refused(cb, rdb, 415, "unsupported_media_type", method="POST", url=f"/callbacks/{good}",
             content=b"x", headers={"content-type": "text/plain"})  # fmt: skip
    _refused(
        cb, rdb, 400, "unknown_parameter", method="POST", url=f"/callbacks/{good}?x=1", json=OK
    )
    ext = "/callbacks/external/acme/job-1"
    body = b'{"status": "succeeded", "result": 1}'
    _refused(cb, rdb, 401, "bad_signature", method="POST", url=ext, content=body)
    _refused(cb, rdb, 401, "bad_signature", method="POST", url=ext, content=body,
             headers={"x-rsjobs-signature": body_signature(SECRET, body + b" ")})  # fmt: skip
    signed = {"x-rsjobs-signature": body_signature(SECRET, body)}
    _refused(cb, rdb, 400, "invalid_id", method="POST", url="/callbacks/external/a%20b/job-1",
             content=body, headers=signed)  # fmt: skip
    _refused(cb, rdb, 404, "not_found", method="POST", url="/callbacks/external/acme/job-9",
             content=body, headers=signed)  # fmt: skip
    # the real ones: the first ends the wait, a repeat writes nothing
    r = cb.post(f"/callbacks/{good}", json=OK)
    assert r.json() == {"id": tid, "state": "SUCCEEDED", "changed": True}
    before = redis_state(rdb)
    again = cb.post(f"/callbacks/{good}", json=OK)
    assert again.json() == {"id": tid, "state": "SUCCEEDED", "changed": False}
    by_ext = cb.post(ext, content=b'{"status": "succeeded", "result": {"url": "x"}}',
                     headers={"x-rsjobs-signature": body_signature(
                         SECRET, b'{"status": "succeeded", "result": {"url": "x"}}')})  # fmt: skip
    assert by_ext.json()["changed"] is False
    assert redis_state(rdb) == before
    # a failure for that attempt now: refused (409), recorded once, then counted
    fail = {"status": "failed", "error": "late"}
    assert cb.post(f"/callbacks/{good}", json=fail).status_code == 409
    assert cb.post(f"/callbacks/{good}", json=fail).status_code == 409
    hist = cb.get(f"/tasks/{tid}/history", headers=ALICE).json()["entries"]
    refused = [e for e in hist if e["rejected"]]
    assert len(refused) == 1 and refused[0]["repeats"] == 1 and refused[0]["source"] == "callback"


def test_without_a_secret_callbacks_are_not_found(redis_url: str, rdb: Any) -> None:
    with TestClient(make_app(redis_url)) as plain:
        _refused(plain, rdb, 404, "not_found", method="POST", url="/callbacks/anything", json=OK)
        _refused(plain, rdb, 404, "not_found", method="POST",
                 url="/callbacks/external/acme/job-1", json=OK)  # fmt: skip
