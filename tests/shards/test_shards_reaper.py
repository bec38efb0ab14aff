"""The reaper of a namespace of 4 shards on the standalone Redis: it sweeps every shard
(promotion, queue-wait deadlines), each with a guard of its own, so two reapers split the
shards; and every script call of a sweep touches one slot."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from rsjobs import Client, Settings, connect
from rsjobs.reaper import Reaper, ReaperConfig
from rsjobs.store.cluster import slot_of
from rsjobs.store.scripts import Scripts
from rsjobs.store.shards import shard_of

NS = "rp"
S = 4


@pytest.fixture
def single_slot(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every script call of the test is checked to touch one slot (as a cluster requires);
    the names of the scripts called."""
    called: list[str] = []
    run = Scripts.run

    async def checked(self: Scripts, call: Any, *, durable: bool = False) -> Any:
        slots = {slot_of(k) for k in call.keys}
        assert len(slots) == 1, f"{call.script}.lua touches {len(slots)} slots: {call.keys}"
        called.append(call.script)
        return await run(self, call, durable=durable)

    monkeypatch.setattr(Scripts, "run", checked)
    yield called


def _reaper(url: str, name: str) -> Reaper:
    # (a guard lives 4/5 of the interval: 48 s, longer than the test)
    cfg = ReaperConfig(interval_ms=60_000, lease_ms=1000)
    return Reaper(redis=connect(url), settings=Settings(namespace=NS), config=cfg, name=name)


async def test_a_sweep_covers_every_shard_and_two_reapers_split_them(
    redis_url: str, single_slot: list[str]
) -> None:
    c = Client(connect(redis_url), Settings(namespace=NS, shards=S))
    a, b = _reaper(redis_url, "ra"), _reaper(redis_url, "rb")
    delayed = [await c.enqueue("t", i, delay_ms=50) for i in range(8)]
    expiring = [await c.enqueue("t", i, queue="nobody", wait_timeout_ms=50) for i in range(8)]
    assert {shard_of(t) for t in delayed} == set(range(S))
    await asyncio.sleep(0.2)
    try:
        # ra takes every guard; rb finds them all taken
        first = await a.sweep_once()
        assert first.shards == list(range(S)) and not first.skipped
        second = await b.sweep_once()
        assert second.skipped and second.guard_holder == "ra"
        assert first.promoted == 8 and first.expired == 8
        for t in delayed:
            assert (await c.get(t)).state == "PENDING"
        for t in expiring:
            assert (await c.get(t)).state == "TIMED_OUT"
        # two guards gone: rb sweeps those two shards, ra the others once its own lapse
        for k in (1, 3):
            await c.redis.delete(c.store.shard(k).keys.reaper_guard)
        assert (await b.sweep_once()).shards == [1, 3]
        assert (await a.sweep_once()).shards == [0, 2]  # it still holds those guards
    finally:
        await a.redis.aclose()
        await b.redis.aclose()
        await c.close()
    assert {"promote", "deadline", "workers", "trim"} <= set(single_slot)
