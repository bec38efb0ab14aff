"""The bounded version of bench/lists.py: a page of GET /tasks costs Redis a number of
commands set by its limit, not by how many tasks Redis holds (counted with INFO
commandstats, the commands the scripts run inside included; not wall time). Pages of each
kind of query at 2,000 and at 20,000 finished tasks (two namespaces, filled alike)."""

from __future__ import annotations

import asyncio

import pytest
import redis as sync_redis

from bench.lists import QUERIES, commands, fill, measure
from rsjobs import Settings

pytestmark = pytest.mark.integration

LIMIT = 50
#: per page: the tasks' reads (a few commands each, inside one script call), the fetches
#: of each index read (three queues, scheduled, paused, four done streams), the sizes
BOUND = 3 * LIMIT + 40


@pytest.mark.timeout(300)
def test_a_page_costs_the_same_commands_at_2k_and_20k_tasks(redis_url: str) -> None:
    fill(redis_url, 2_000, settings=Settings(namespace="small"))
    fill(redis_url, 20_000, settings=Settings(namespace="big"))
    small = asyncio.run(measure(redis_url, pages=3, limit=LIMIT, namespace="small"))
    big = asyncio.run(measure(redis_url, pages=3, limit=LIMIT, namespace="big"))
    for kind in QUERIES:
        assert big[kind]["commands_per_page"] <= BOUND, (kind, big[kind])
        if small[kind]["tasks_per_page"] == big[kind]["tasks_per_page"] == LIMIT:
            # full pages both times: the same work, whatever the number of tasks held
            assert big[kind]["commands_per_page"] <= small[kind]["commands_per_page"] + 5, kind
    # the counter counts what it should: a page of everything sends commands
    r = sync_redis.Redis.from_url(redis_url)
    before = commands(r)
    r.ping()
    assert commands(r) == before + 1
    r.close()
