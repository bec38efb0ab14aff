"""The events hub: one XREAD loop, per-task fan-out, overflow and Redis loss -> resync."""

from __future__ import annotations

import asyncio

import pytest

from rsjobs import Client
from rsjobs.web.hub import Hub, Item, Subscription, parse_id
from tests.support.web import eventually

pytestmark = pytest.mark.integration


def test_parse_id_orders_stream_ids() -> None:
    assert parse_id("1700000000000-12") == (1700000000000, 12)
    assert parse_id("9-1") < parse_id("10-0")
    for bad in ("", "1", "1-", "-1", "a-1", "1-2-3", "1 -2"):
        with pytest.raises(ValueError):
            parse_id(bad)


async def _drain(sub: Subscription, n: int, after: str = "0-0") -> list[Item]:
    """The next ``n`` items after ``after``: the hub may still hand over an entry written
    just before subscribe(); readers skip what they already have, as the SSE stream does."""
    items: list[Item] = []
    async with asyncio.timeout(5):
        while len(items) < n:
            await sub.wake.wait()
            got, _ = sub.take()
            items += [i for i in got if i.key > parse_id(after)]
    return items


async def test_fans_out_per_task_with_history_ids(client: Client) -> None:
    hub = Hub(client.store.events, block_ms=200)
    await hub.start()
    try:
        a = await client.enqueue("x")
        b = await client.enqueue("x")
        subs_a = [hub.subscribe(a) for _ in range(3)]
        sub_b = hub.subscribe(b)
        await client.pause(a)
        await client.cancel(b)
        await client.resume(a)
        hist_a = [e.id for e in await client.history(a)]
        gots = [await _drain(s, 2, after=hist_a[0]) for s in subs_a]
        for got in gots:
            assert [i.hid for i in got] == hist_a[1:]
            assert [i.entry().event for i in got] == ["PAUSE", "RESUME"]
        # one Item (so one SSE encoding) is shared by every subscriber of the task
        assert all(g[0] is gots[0][0] and g[1] is gots[0][1] for g in gots)
        hist_b = [e.id for e in await client.history(b)]
        got_b = await _drain(sub_b, 1, after=hist_b[0])
        assert [i.hid for i in got_b] == hist_b[1:]
        assert got_b[0].terminal
        for s in [*subs_a, sub_b]:
            hub.unsubscribe(s)
        assert hub.subscribers == 0
    finally:
        await hub.aclose()


async def test_entries_written_before_start_returns_are_not_lost(client: Client) -> None:
    """start() fixes the read position at the current end: nothing in between is lost."""
    hub = Hub(client.store.events, block_ms=200)
    tid = await client.enqueue("x")
    await hub.start()
    sub = hub.subscribe(tid)
    await client.cancel(tid)  # written before the first XREAD may even have been sent
    got = await _drain(sub, 1)
    assert got[0].entry().event == "CANCEL"
    await hub.aclose()


async def test_slow_subscriber_overflows_into_resync(client: Client) -> None:
    hub = Hub(client.store.events, block_ms=200, buffer=2)
    await hub.start()
    try:
        tid = await client.enqueue("x")
        sub = hub.subscribe(tid)
        for _ in range(3):
            await client.pause(tid)
            await client.resume(tid)
        await eventually(lambda: sub.resync, what="overflow")
        items, resync = sub.take()
        assert resync and len(items) < 6  # the reader must replay from history
    finally:
        await hub.aclose()


async def test_observers_see_every_entry(client: Client) -> None:
    hub = Hub(client.store.events, block_ms=200)
    seen: list[tuple[str, str]] = []
    hub.observers.append(lambda tid, hid, f: seen.append((tid, f["ev"])))

    def broken(tid: str, hid: str, fields: dict[str, str]) -> None:
        raise RuntimeError("observer bug")

    hub.observers.append(broken)  # a broken observer is contained
    await hub.start()
    try:
        tid = await client.enqueue("x")
        await client.cancel(tid)
        await eventually(lambda: len(seen) >= 2)
        assert seen == [(tid, "ENQUEUE"), (tid, "CANCEL")]
        assert hub.entries_read == 2
    finally:
        await hub.aclose()


async def test_trimming_past_the_reader_triggers_resync(client: Client) -> None:
    hub = Hub(client.store.events, block_ms=200)
    tid = await client.enqueue("x")
    sub = hub.subscribe(tid)
    old = (await client.redis.xrange(client.keys.events, "-", "+", count=1))[0][0]
    hub.cursor = old
    for _ in range(3):
        await client.pause(tid)
        await client.resume(tid)
    await client.redis.xtrim(client.keys.events, maxlen=1)  # MAXLEN overtook the reader
    await hub._check_trimmed()
    assert sub.resync


async def test_watchers_wake_on_their_workflow_and_its_tasks(client: Client) -> None:
    """A workflow's note wakes its watchers to read its history; an entry of one of its
    tasks to send the status; another workflow's entries wake neither; task subscribers
    of its tasks still get their entries."""
    from rsjobs.workflows import WorkflowClient
    from tests.support.workflows import Hand, character

    wf = WorkflowClient(client.redis, client.settings, definitions=[character()])
    hub = Hub(client.store.events, block_ms=200)
    await hub.start()
    try:
        wid = await wf.start("character", {"n": 1})
        other = await wf.start("character", {"n": 2})
        watch, bystander = hub.watch(wid), hub.watch(other)
        assert hub.subscribers == 2
        hand = Hand(client.redis, client.settings)
        claimed = {c.wf: c for c in await hand.claim()}  # START of both workflows' tasks
        await eventually(lambda: watch.moved and bystander.moved, what="the STARTs")
        watch.take(), bystander.take()
        sub = hub.subscribe(claimed[wid].id)
        await hand.progress(claimed[wid], 10)  # a task entry of wid only
        await _drain(sub, 1, after=(await client.history(claimed[wid].id))[-2].id)
        await eventually(lambda: watch.moved, what="the watcher hears its task")
        assert watch.take() == (False, True) and not bystander.wake.is_set()
        await wf.cancel(wid)  # CANCEL of the workflow, and of its task
        await eventually(lambda: watch.grew and watch.moved, what="the note")
        assert watch.take() == (True, True)
        assert not bystander.wake.is_set()
        hub.unwatch(watch)
        hub.unwatch(bystander)
        hub.unsubscribe(sub)
        assert hub.subscribers == 0
    finally:
        await hub.aclose()
