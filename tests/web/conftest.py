"""Fixtures of the web tests: the app bound to the session Redis, through Starlette's
TestClient (sync) or httpx over ASGI (async, in the test's event loop)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import redis as sync_redis
from starlette.applications import Starlette

from tests.support.web import TestClient, make_app


@pytest.fixture
def app(redis_url: str) -> Starlette:
    return make_app(redis_url)


@pytest.fixture
def tc(app: Starlette) -> Iterator[TestClient]:
    """Starlette's TestClient, lifespan included (the events reader runs)."""
    with TestClient(app) as c:
        yield c


@pytest.fixture
async def api(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    """httpx over ASGI in the test's loop (buffers responses: SSE of finished tasks only)."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://rsjobs.test") as c:
        yield c
    await app.state.rsjobs.aclose()


@pytest.fixture
def rdb(redis_url: str) -> Iterator[sync_redis.Redis]:
    """A plain (bytes) sync client of the session Redis."""
    r = sync_redis.Redis.from_url(redis_url)
    yield r
    r.close()
