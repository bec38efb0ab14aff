"""The provider callback routes: bad input is a 4xx with a reason and writes nothing (every
key compared before and after); a valid callback ends the wait once, a repeat answers
``changed: false`` and writes nothing, one for an attempt that is over is a 409 recorded
in the task's history; without a secret the routes answer 404."""

from __future__ import annotations

import hashlib
import hmac
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


def _signed(
    body: bytes, *, provider: str = "acme", job: str = "job-1", at: int | None = None
) -> dict[str, str]:
    return {"x-rsjobs-signature": body_signature(SECRET, provider, job, body, at)}


def _digest(rdb: sync_redis.Redis) -> bytes:
    """The server's digest of its whole dataset (real Redis: DEBUG DIGEST)."""
    out = rdb.execute_command("DEBUG", "DIGEST")
    assert isinstance(out, bytes) and out.strip(b"0"), "expected a non-empty dataset"
    return out


def _misdirected(cb: TestClient, rdb: sync_redis.Redis, url: str, body: bytes,
                 headers: dict[str, str], reason: str) -> None:  # fmt: skip
    before, keys = _digest(rdb), redis_state(rdb)
    r = cb.post(url, content=body, headers=headers)
    assert r.status_code == 401, r.text
    assert r.json()["error"] == "bad_signature" and reason in r.json()["detail"]
    assert _digest(rdb) == before, "a refused callback wrote to redis"
    assert redis_state(rdb) == keys


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
             headers=_signed(body + b" "))  # fmt: skip
    _refused(cb, rdb, 400, "invalid_id", method="POST", url="/callbacks/external/acme/a%20b",
             content=body, headers=_signed(body, job="a b"))  # fmt: skip
    _refused(cb, rdb, 404, "not_found", method="POST", url="/callbacks/external/acme/job-9",
             content=body, headers=_signed(body, job="job-9"))  # fmt: skip
    # the real ones: the first ends the wait, a repeat writes nothing
    r = cb.post(f"/callbacks/{good}", json=OK)
    assert r.json() == {"id": tid, "state": "SUCCEEDED", "changed": True}
    before = redis_state(rdb)
    again = cb.post(f"/callbacks/{good}", json=OK)
    assert again.json() == {"id": tid, "state": "SUCCEEDED", "changed": False}
    again_body = b'{"status": "succeeded", "result": {"url": "x"}}'
    by_ext = cb.post(ext, content=again_body, headers=_signed(again_body))
    assert by_ext.json()["changed"] is False
    assert redis_state(rdb) == before
    # a failure for that attempt now: refused (409), recorded once, then counted
    fail = {"status": "failed", "error": "late"}
    assert cb.post(f"/callbacks/{good}", json=fail).status_code == 409
    assert cb.post(f"/callbacks/{good}", json=fail).status_code == 409
    hist = cb.get(f"/tasks/{tid}/history", headers=ALICE).json()["entries"]
    refused = [e for e in hist if e["rejected"]]
    assert len(refused) == 1 and refused[0]["repeats"] == 1 and refused[0]["source"] == "callback"


async def test_a_body_signed_for_one_job_ends_no_other(
    redis_url: str, cb: TestClient, rdb: Any
) -> None:
    a = await _deferred(redis_url, cb, "job-a")
    b = await _deferred(redis_url, cb, "job-b")
    body = b'{"status": "failed", "error": "cancelled by the provider", "retryable": false}'
    for_a = _signed(body, job="job-a")
    # job A's signed body, replayed at job B (and at job A under another provider name)
    _misdirected(cb, rdb, "/callbacks/external/acme/job-b", body, for_a, "does not verify")
    _misdirected(cb, rdb, "/callbacks/external/acme2/job-a", body, for_a, "does not verify")
    # signed for job A, but long ago: a replay
    now = int(time.time())
    old = _signed(body, job="job-a", at=now - 301)
    _misdirected(cb, rdb, "/callbacks/external/acme/job-a", body, old, "s old")
    ahead = _signed(body, job="job-a", at=now + 400)
    _misdirected(cb, rdb, "/callbacks/external/acme/job-a", body, ahead, "in the future")
    # the old form, signing the body only
    legacy = {"x-rsjobs-signature": "sha256=" + hmac.new(
        SECRET.encode(), body, hashlib.sha256).hexdigest()}  # fmt: skip
    _misdirected(cb, rdb, "/callbacks/external/acme/job-b", body, legacy, "sha256=")
    # the real one ends job A only; B still waits, and its own signed result ends it
    r = cb.post("/callbacks/external/acme/job-a", content=body, headers=for_a)
    assert r.status_code == 200 and r.json() == {"id": a, "state": "FAILED", "changed": True}
    assert cb.get(f"/tasks/{b}", headers=ALICE).json()["state"] == "DEFERRED"
    ok = b'{"status": "succeeded", "result": 2}'
    r = cb.post("/callbacks/external/acme/job-b", content=ok, headers=_signed(ok, job="job-b"))
    assert r.json() == {"id": b, "state": "SUCCEEDED", "changed": True}


async def test_the_tolerance_is_a_setting(redis_url: str, rdb: Any) -> None:
    with TestClient(make_app(redis_url, callback_secret=SECRET, callback_tolerance_ms=5_000)) as c:
        await _deferred(redis_url, c)
        body = b'{"status": "succeeded", "result": 1}'
        stale = _signed(body, at=int(time.time()) - 60)
        _misdirected(c, rdb, "/callbacks/external/acme/job-1", body, stale, "more than 5 s")
        fresh = _signed(body, at=int(time.time()) - 2)
        assert c.post("/callbacks/external/acme/job-1", content=body, headers=fresh).json()[
            "changed"
        ]


def test_without_a_secret_callbacks_are_not_found(redis_url: str, rdb: Any) -> None:
    with TestClient(make_app(redis_url)) as plain:
        _refused(plain, rdb, 404, "not_found", method="POST", url="/callbacks/anything", json=OK)
        _refused(plain, rdb, 404, "not_found", method="POST",
                 url="/callbacks/external/acme/job-1", json=OK)  # fmt: skip
