"""The events hub: one XREAD loop, per-task fan-out, overflow and Redis loss -> resync."""

from __future__ import annotations

import pytest

from rsjobs import Client
from rsjobs.ids import parse_id
from rsjobs.web.hub import Hub
from tests.support.web import eventually

pytestmark = pytest.mark.integration


def test_parse_id_orders_stream_ids() -> None:
    assert parse_id("1700000000000-12") == (1700000000000, 12)
    assert parse_id("9-1") < parse_id("10-0")
    # a task's history entry id is its number, ordered before every stream id
    assert parse_id("7") == (0, 7) and parse_id("7") < parse_id("8") < parse_id("1-0")
    for bad in ("", "1-", "-1", "a-1", "1-2-3", "1 -2", "+1", "1" * 19):
        with pytest.raises(ValueError):
            parse_id(bad)


async def test_tells_the_subscribers_of_each_task_to_read_on(client: Client) -> None:
    """A task's events entry (its id and entry number) tells each subscriber of that task,
    and no other, to read its history on from its last id (``resync``)."""
    hub = Hub(client.store.events, block_ms=200)
    await hub.start()
    try:
        a, b, c = [await client.enqueue("x") for _ in range(3)]
        subs_a = [hub.subscribe(a) for _ in range(3)]
        sub_b, sub_c = hub.subscribe(b), hub.subscribe(c)
        await client.pause(a)
        await client.cancel(b)
        await eventually(lambda: all(s.resync for s in [*subs_a, sub_b]), what="told")
        for s in [*subs_a, sub_b]:
            assert s.take() == ([], True)
        assert not sub_c.resync and not sub_c.wake.is_set()
        await client.resume(a)  # told again for the next entry
        await eventually(lambda: all(s.resync for s in subs_a), what="told again")
        assert not sub_b.resync
        for s in [*subs_a, sub_b, sub_c]:
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
    sub.take()  # (start() asks every subscriber to read on: none yet here)
    await client.cancel(tid)  # written before the first XREAD may even have been sent
    await eventually(lambda: sub.resync, what="told of the CANCEL")
    await hub.aclose()


async def test_slow_subscriber_overflows_into_resync(client: Client) -> None:
    hub = Hub(client.store.events, block_ms=200, buffer=2)
    await hub.start()
    try:
        tid = await client.enqueue("x")
        sub = hub.subscribe(tid)
        sub.take()
        # entries that carry their fields (ev...) are handed over as they are, buffered
        fields = {"id": tid, "ev": "PAUSE", "from": "PENDING", "to": "PAUSED", "src": "api",
                  "att": "0", "ts": "1"}  # fmt: skip
        await client.redis.xadd(client.keys.events, {**fields, "hid": "2"})
        await eventually(lambda: sub.items, what="pushed")
        items, resync = sub.take()
        assert [i.hid for i in items] == ["2"] and not resync
        for n in range(3, 6):
            await client.redis.xadd(client.keys.events, {**fields, "hid": str(n)})
        await eventually(lambda: sub.resync, what="overflow")
        items, resync = sub.take()
        assert resync and len(items) < 3  # the reader must replay from history
    finally:
        await hub.aclose()


async def test_observers_see_every_entry(client: Client) -> None:
    hub = Hub(client.store.events, block_ms=200)
    seen: list[tuple[str, str]] = []
    hub.observers.append(lambda tid, hid, f: seen.append((tid, hid)))

    def broken(tid: str, hid: str, fields: dict[str, str]) -> None:
        raise RuntimeError("observer bug")

    hub.observers.append(broken)  # a broken observer is contained
    await hub.start()
    try:
        tid = await client.enqueue("x")
        await client.pause(tid)
        await client.cancel(tid)
        await eventually(lambda: len(seen) >= 2)
        # (a task's first entry, ENQUEUE, is no event)
        assert seen == [(tid, "2"), (tid, "3")]
        assert hub.entries_read == 2
    finally:
        await hub.aclose()


async def test_trimming_past_the_reader_triggers_resync(client: Client) -> None:
    hub = Hub(client.store.events, block_ms=200)
    tid = await client.enqueue("x")
    await client.pause(tid)
    await client.resume(tid)
    sub = hub.subscribe(tid)
    old = (await client.redis.xrange(client.keys.events, "-", "+", count=1))[0][0]
    hub.cursor = old
    for _ in range(3):
        await client.pause(tid)
        await client.resume(tid)
    # MAXLEN overtook the reader (exact: a node holds many of these small entries)
    await client.redis.xtrim(client.keys.events, maxlen=1, approximate=False)
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
        await eventually(lambda: sub.resync, what="its subscriber told to read on")
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
