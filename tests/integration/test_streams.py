"""Consumer-group plumbing on a real Redis (``rsjobs.streams``)."""

from __future__ import annotations

import asyncio

import pytest

from rsjobs import connect
from rsjobs.keys import GROUP
from rsjobs.streams import ensure_group, read_batch, read_own_pending

pytestmark = pytest.mark.integration


async def test_reading_own_pending_list_counts_no_delivery(redis_url: str) -> None:
    """A worker re-reads its pending list after every connection error and once a lease:
    that must not count as a delivery nor reset the idle time, or a live worker's task
    would look poisonous to the reaper and never idle (found in a failover test)."""
    r = connect(redis_url)
    try:
        await ensure_group(r, "s")
        kept = await r.xadd("s", {"id": "a"})
        gone = await r.xadd("s", {"id": "b"})
        assert len(await read_batch(r, "w1", {"s": "q"}, 10, 0)) == 2
        await r.xdel("s", gone)  # its task moved on meanwhile
        await asyncio.sleep(0.2)
        for _ in range(3):
            own = await read_own_pending(r, "w1", {"s": "q"})
            assert [(d.entry, d.task_id, d.queue) for d in own] == [(kept, "a", "q")]
        [row] = await r.xpending_range("s", GROUP, "-", "+", 10)
        assert row["times_delivered"] == 1
        assert row["time_since_delivered"] >= 200
        assert await read_own_pending(r, "nobody", {"s": "q", "missing": "m"}) == []
    finally:
        await r.aclose()
