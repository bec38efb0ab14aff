"""What a route answers when the store behind it fails: Redis gone (503), durable mode's
replicas not confirming (503 not_replicated), stored data rsjobs cannot read (500)."""

from __future__ import annotations

import httpx
import pytest

from rsjobs import Settings
from rsjobs.server import EmbeddedRedis
from rsjobs.web import create_app
from tests.support.web import ADMIN, ALICE, NAMESPACE, ROOT, TOKENS, make_app

pytestmark = pytest.mark.integration


def _client(app: object) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


async def test_submit_while_redis_is_down_is_a_503() -> None:
    """The second submit reaches the enqueue script directly (its queue is known): the
    store's RedisUnavailable is answered like redis-py's errors."""
    with EmbeddedRedis() as server:
        app = make_app(server.url)
        async with _client(app) as api:
            assert (await api.post("/tasks", json={"type": "x"}, headers=ALICE)).status_code == 202
            server.stop(kill=True)
            r = await api.post("/tasks", json={"type": "x"}, headers=ALICE)
            assert r.status_code == 503 and r.json()["error"] == "redis_unavailable"
        await app.state.rsjobs.aclose()


async def test_unconfirmed_durable_write_is_a_503(redis_url: str) -> None:
    settings = Settings(namespace=NAMESPACE, wait_replicas=1, wait_timeout_ms=50)
    app = create_app(redis_url, settings=settings, tokens=TOKENS, admin_token=ADMIN, env={})
    async with _client(app) as api:
        r = await api.post("/tasks", json={"type": "x"}, headers=ALICE)
        assert r.status_code == 503, r.text
        assert r.json()["error"] == "not_replicated" and r.headers["retry-after"] == "1"
    await app.state.rsjobs.aclose()


async def test_corrupt_workflow_is_a_clear_500(redis_url: str) -> None:
    import redis as sync_redis

    app = make_app(redis_url)
    wf_id = "a" * 32
    r = sync_redis.Redis.from_url(redis_url)
    r.hset(f"rsjobs:{{{NAMESPACE}}}:wf:{wf_id}", mapping={"status": "RUNNING", "plan": "{"})
    r.close()
    async with _client(app) as api:
        resp = await api.get(f"/workflows/{wf_id}", headers=ROOT)
        assert resp.status_code == 500, resp.text
        assert resp.json()["error"] == "corrupt_data"
    await app.state.rsjobs.aclose()


async def test_corrupt_task_is_a_clear_500(redis_url: str) -> None:
    """A task hash whose payload does not decode answers 500 corrupt_data with a body that
    says so (it was msgspec's DecodeError: a 500 without a clear body)."""
    import redis as sync_redis

    from rsjobs import Client
    from rsjobs.store.record import field

    app = make_app(redis_url)
    async with Client.from_url(redis_url, namespace=NAMESPACE) as c:
        tid = await c.enqueue("x", owner="alice")
    r = sync_redis.Redis.from_url(redis_url)
    r.hset(f"rsjobs:{{{NAMESPACE}}}:task:{tid}", field("payload"), "{not json")
    r.close()
    async with _client(app) as api:
        resp = await api.get(f"/tasks/{tid}", headers=ALICE)
        assert resp.status_code == 500, resp.text
        assert resp.json()["error"] == "corrupt_data" and tid in resp.json()["detail"]
    await app.state.rsjobs.aclose()


async def test_a_namespace_not_migrated_is_a_503_and_refuses_the_startup(redis_url: str) -> None:
    """Tasks an earlier rsjobs wrote (layout 1): the app's startup fails (rsjobs web
    refuses to start), and a mounted app, whose startup is not run, answers 503
    not_migrated to reads and writes alike, writing nothing."""
    import redis as sync_redis

    from rsjobs import Client, NotMigrated
    from tests.support.layout1 import writing_layout1

    with writing_layout1():
        async with Client.from_url(redis_url, namespace=NAMESPACE) as c:
            tid = await c.enqueue("x", None, owner="alice")
    r = sync_redis.Redis.from_url(redis_url)
    before = {k: r.dump(k) for k in r.scan_iter()}
    app = make_app(redis_url)
    with pytest.raises(NotMigrated):
        async with app.router.lifespan_context(app):
            pass
    app = make_app(redis_url)
    async with _client(app) as api:
        for method, path, body in (
            ("POST", "/tasks", {"type": "x"}),
            ("GET", f"/tasks/{tid}", None),
            ("POST", f"/tasks/{tid}/cancel", None),
        ):
            resp = await api.request(method, path, json=body, headers=ALICE)
            assert resp.status_code == 503, (path, resp.text)
            assert resp.json()["error"] == "not_migrated" and "rsjobs" in resp.json()["detail"]
    await app.state.rsjobs.aclose()
    assert {k: r.dump(k) for k in r.scan_iter()} == before
    r.close()
