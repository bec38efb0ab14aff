"""Shared fixtures: a real Redis server for the whole session (integration tier), a fresh
database per test, clients bound to it, a workflow client, a headless browser.

Tiers (README, "Testing"), one marker per test, set here at collection:
- ``integration``: uses the session's Redis (``redis_server``, directly or through another
  fixture); a test that starts a Redis of its own marks itself;
- ``cluster`` (with ``integration``): uses the session's Redis Cluster (``redis_cluster``);
  under pytest-xdist they all run in one worker (``xdist_group``), which starts it once;
- ``lua``: no real Redis, the scripts on fakeredis (its module uses fakeredis);
- ``unit``: the others;
- ``slow`` (set by the test, beside its tier): chaos, soak, fresh venv, ``make demo``, the
  browser pages but one; ``make test`` deselects it, ``make test-all`` runs it.

Under pytest-xdist every worker is a process of its own: its own session Redis (a free
port), its own ``tmp_path`` root; nothing a test writes is shared but its screenshots
(one file per test). ``tests/support/sleeps.py`` checks each test's real-time sleeping.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from rsjobs import Client, Settings, connect
from rsjobs.server import EmbeddedRedis
from rsjobs.workflows import WorkflowClient
from tests.support.browser import launch
from tests.support.lua import CLOCK
from tests.support.wf_fixtures import NS
from tests.support.workflows import character
from tools.topology import Cluster

#: the session cluster's node timeout: a master that does not answer for this long is
#: failed over (long enough that a loaded machine does not fail one over by itself)
CLUSTER_NODE_TIMEOUT_MS = 2000


pytest_plugins = ["tests.support.sleeps"]


def _uses_fakeredis(module: Any) -> bool:
    """Whether a test module runs the scripts on fakeredis (imports it or the Lua harness)."""
    for value in vars(module).values() if module is not None else ():
        name = getattr(value, "__module__", None) or getattr(value, "__name__", "")
        if isinstance(name, str) and name.startswith(("fakeredis", "tests.support.lua")):
            return True
    return False


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "redis_server" in names:
            item.add_marker(pytest.mark.integration)
        if "redis_cluster" in names:
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.cluster)
            item.add_marker(pytest.mark.xdist_group("cluster"))
        if item.get_closest_marker("integration") is None:
            lua = _uses_fakeredis(getattr(item, "module", None))
            item.add_marker(pytest.mark.lua if lua else pytest.mark.unit)


@pytest.fixture(autouse=True)
def _fakeredis_clock() -> Iterator[None]:
    """fakeredis's clock back to the real time after each test (a Lua-tier test moves it
    on with ``LuaHarness.advance``)."""
    yield
    CLOCK.offset_s = 0.0


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedRedis]:
    """One real server on a free loopback port (see rsjobs.server.find_redis_server)."""
    server = EmbeddedRedis(appendonly=False, debug=True)
    server.start()
    yield server
    server.cleanup()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[Cluster]:
    """A local Redis Cluster for the cluster tier: 3 masters + 3 replicas of the session's
    redis-server binary on loopback, started for the first test that asks for it (tests
    using it are marked ``cluster``). A test that fails nodes over or kills them heals
    the cluster before it ends (:func:`cluster_url` checks)."""
    with Cluster(masters=3, replicas=1, node_timeout_ms=CLUSTER_NODE_TIMEOUT_MS) as cluster:
        yield cluster


@pytest.fixture
def cluster_url(redis_cluster: Cluster) -> str:
    """The cluster's ``redis+cluster://`` URL, every node up and in agreement and every
    master flushed before the test."""
    if redis_cluster.killed:
        redis_cluster.heal()
    redis_cluster.wait_ok()
    redis_cluster.flush()
    return redis_cluster.url


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


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    """Headless Chromium (Debian's package) under Playwright; skips without Playwright."""
    api = pytest.importorskip("playwright.async_api")
    async with api.async_playwright() as pw:
        b = await launch(pw)
        yield b
        await b.close()


@pytest.fixture
async def wf(redis_url: str, tmp_path: Path) -> AsyncIterator[WorkflowClient]:
    """A workflow client of the character test pipeline, whose handlers fail or hang on the
    flag files a test puts in ``tmp_path`` (see ``tests.support.workflows.character``)."""
    c = WorkflowClient(
        connect(redis_url), Settings(namespace=NS), definitions=[character(flags=str(tmp_path))]
    )
    yield c
    await c.close()
