"""``Client.wait`` on the namespace's events stream: it learns of its task's end even when
MAXLEN trimming removed the entry that named the task before the wait could read it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from rsjobs import Client
from rsjobs.store.record import field

pytestmark = pytest.mark.integration


@pytest.fixture
async def wclient(redis_url: str) -> AsyncIterator[Client]:
    c = Client.from_url(redis_url, namespace="waittrim")
    yield c
    await c.close()


async def test_wait_reads_the_task_again_when_trimming_overtook_it(wclient: Client) -> None:
    c = wclient
    tid = await c.enqueue("noop", {})
    waiting = asyncio.create_task(c.wait(tid, timeout_ms=20_000))
    await asyncio.sleep(0.5)  # the wait is blocked in its XREAD now
    assert not waiting.done()
    # in one transaction (the blocked read is served after it): the task ends, its events
    # entry is written, and other tasks' entries push it out of a stream of 100
    async with c.redis.pipeline(transaction=True) as pipe:
        pipe.hset(c.keys.task(tid), field("state"), "CANCELLED")
        pipe.xadd(c.keys.events, {"id": tid, "hid": "2"})
        for i in range(150):
            pipe.xadd(c.keys.events, {"id": f"{i:032x}", "hid": "2"}, maxlen=100, approximate=False)
        await pipe.execute()
    # at once, not when its 5 s read times out with nothing to say
    info = await asyncio.wait_for(waiting, 2.5)
    assert info.state == "CANCELLED"
