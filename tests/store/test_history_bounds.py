"""On a real Redis: what clients send cannot grow a task's history (refusals coalesce,
each counted), and bad input is refused before anything is written."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from rsjobs import Client, ConfigError
from rsjobs.store.layout import BeatItem, Ending
from rsjobs.store.record import field
from tests.support.processes import start_as

pytestmark = pytest.mark.integration


async def _in_chunks(n: int, call: object, size: int = 250) -> None:
    for start in range(0, n, size):
        await asyncio.gather(*(call() for _ in range(min(size, n - start))))  # type: ignore[operator]


async def _memory(client: Client, key: str) -> int:
    return int(await client.redis.memory_usage(key, samples=0) or 0)


async def test_ten_thousand_refused_cancels_keep_a_history_small(client: Client) -> None:
    tid = await client.enqueue("noop", {"x": 1})
    assert await client.cancel(tid) == "CANCELLED"
    tkey = client.keys.task(tid)  # the hash holds the history
    task_before = await _memory(client, tkey)
    await _in_chunks(10_000, lambda: client.cancel(tid, "again"))
    hist = await client.history(tid)
    assert await _memory(client, tkey) - task_before < 256  # the count, not the calls
    refused = [e for e in hist if e.rejected]
    assert len(hist) == 3 and len(refused) == 1
    (r,) = refused
    assert (r.event, r.to_state, r.repeats, r.count) == ("CANCEL", "CANCELLED", 9_999, 10_000)
    assert r.last_ts >= r.ts
    assert (await client.counters())["rej:CANCEL"] == 10_000


async def _started_then_cancelled(client: Client) -> tuple[str, list[Any], str, str]:
    """A task STARTed by worker "w" (by its script), then cancelled: (id, keys, entry, lease)."""
    tid = await client.enqueue("noop", {"x": 1})
    (started,) = await start_as(client, "w")
    entry = await client.redis.hget(client.keys.task(tid), field("entry"))
    keys = client.keys.task_keys(tid, "default")
    assert await client.cancel(tid) == "CANCELLED"
    return tid, keys, entry, started.lease


async def test_a_mix_of_refused_commands_keeps_a_history_small(client: Client) -> None:
    """Refused CANCEL / PAUSE / RESUME from clients and HEARTBEAT / COMPLETE from a worker
    that lost the task, interleaved at random: one entry per kind, every call counted, and
    the history does not grow after the first refusal of each kind."""
    work = client.store.work
    tid, keys, entry, lease = await _started_then_cancelled(client)

    async def refused_call(kind: str) -> None:
        if kind == "CANCEL":
            assert await client.cancel(tid) == "CANCELLED"
        elif kind == "PAUSE":
            with pytest.raises(Exception, match="PAUSE"):
                await client.pause(tid)
        elif kind == "RESUME":
            with pytest.raises(Exception, match="RESUME"):
                await client.resume(tid)
        elif kind == "HEARTBEAT":
            reply = await work.heartbeat("w", 60_000, [(keys, BeatItem(lease, entry, "", ""))])
            assert reply == ["CANCELLED"]
        else:
            ending = Ending("COMPLETE", lease, '"late"', "", 1, -1, 0.5)
            assert list((await work.finish([(keys, ending)]))[0]) == [-2, "CANCELLED"]

    kinds = ["CANCEL", "PAUSE", "RESUME", "HEARTBEAT", "COMPLETE"]
    rng = random.Random(7)
    plan = kinds + kinds + [rng.choice(kinds) for _ in range(10_000 - 2 * len(kinds))]
    for kind in kinds + kinds:  # the first refusal of each, then its repeat counters
        await refused_call(kind)
    tkey = client.keys.task(tid)  # the hash holds the history
    first = await _memory(client, tkey)
    for start in range(2 * len(kinds), len(plan), 250):
        await asyncio.gather(*(refused_call(k) for k in plan[start : start + 250]))
    hist = await client.history(tid)
    # no growth with the calls: only the repeat counters' values widen (a few bytes)
    grown = await _memory(client, tkey) - first
    assert grown < 64, grown
    refused = {e.event: e for e in hist if e.rejected}
    assert sorted(refused) == sorted(kinds) and len(hist) == 3 + len(kinds)
    for kind in kinds:
        assert refused[kind].count == plan.count(kind), kind
        assert refused[kind].attempt == 1
    counters = await client.counters()
    assert {k: counters[f"rej:{k}"] for k in kinds} == {k: plan.count(k) for k in kinds}


async def test_bad_input_to_the_client_writes_nothing(client: Client) -> None:
    tid = await client.enqueue("noop", {"x": 1})
    before = await client.redis.dbsize()
    h_before = await client.redis.hgetall(client.keys.task(tid))
    bad: list[dict[str, object]] = [
        {"queue": "q\n"},
        {"delay_ms": 10**30},
        {"delay_ms": 1.5},
        {"timeout_ms": True},
        {"max_attempts": 2.5},
    ]
    for kw in bad:
        with pytest.raises(ConfigError):
            await client.enqueue("noop", {"x": 2}, **kw)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="reason"):
        await client.cancel(tid, "x" * 5000)
    assert await client.redis.dbsize() == before
    assert await client.redis.hgetall(client.keys.task(tid)) == h_before
    assert (await client.get(tid)).state == "PENDING"


async def test_a_finished_tasks_history_stays_compact_after_refusals(client: Client) -> None:
    """A finished task's history is compacted when it ends; a refusal appended later may
    open a new, preallocated node, so the history is compacted again then (only the first
    refusal of a kind appends anything). With the embedded server's 512-byte nodes, six
    entries (three transitions, three kinds of refusal) open a second node."""
    tid, *_ = await _started_then_cancelled(client)
    for _ in range(2):
        await client.cancel(tid)
        for call in (client.pause, client.resume):
            with pytest.raises(Exception, match="CANCELLED"):
                await call(tid)
    hkey = client.keys.history(tid)
    twin = hkey[:-1] + "X"  # MEMORY USAGE counts the key's name too: same length
    await client.redis.copy(hkey, twin)
    try:
        assert await _memory(client, hkey) == await _memory(client, twin)
    finally:
        await client.redis.delete(twin)
