"""The workflow index keeps the order of starts (``wf_start.lua``), on fakeredis: workflows
started in one millisecond, or after the clock went back, are listed newest first in the
order they started, and cursor pages cover them exactly once."""

from __future__ import annotations

from collections.abc import AsyncIterator

import fakeredis
import pytest

from rsjobs.settings import Settings
from rsjobs.workflows import WorkflowClient
from rsjobs.workflows.listing import page
from tests.support.workflows import character


@pytest.fixture
async def wf() -> AsyncIterator[WorkflowClient]:
    r = fakeredis.aioredis.FakeRedis(decode_responses=True)
    c = WorkflowClient(r, Settings(namespace="t", retention_ms=0), definitions=[character()])
    yield c
    await r.aclose()


async def listed(wf: WorkflowClient, limit: int) -> list[str]:
    out: list[str] = []
    cursor = None
    while True:
        p = await page(wf.store, cursor=cursor, limit=limit)
        out += [w.id for w in p.workflows]
        if p.cursor is None:
            return out
        cursor = p.cursor


async def test_starts_in_the_newest_entrys_millisecond_keep_their_order(
    wf: WorkflowClient,
) -> None:
    first = await wf.start("character", {"n": 0})
    # the newest entry 10 s ahead of this Redis's clock (a clock that went back, or every
    # later start in its millisecond): later starts still go after it, one ms apart
    ahead = int(await wf.redis.zscore(wf.store.keys.workflows, first)) + 10_000
    await wf.redis.zadd(wf.store.keys.workflows, {first: ahead})
    later = [await wf.start("character", {"n": i}) for i in range(1, 6)]
    scores = [await wf.redis.zscore(wf.store.keys.workflows, i) for i in later]
    assert scores == [ahead + n for n in range(1, 6)]
    started = [first, *later]
    for limit in (1, 2, 50):
        assert await listed(wf, limit) == started[::-1]
    # created_at keeps the Redis time of the start
    (newest,) = (await page(wf.store, limit=1)).workflows
    assert newest.created_at < ahead


async def test_a_burst_of_starts_is_listed_in_start_order(wf: WorkflowClient) -> None:
    started = [await wf.start("character", {"n": i}) for i in range(30)]
    for limit in (1, 7, 50):
        assert await listed(wf, limit) == started[::-1]
