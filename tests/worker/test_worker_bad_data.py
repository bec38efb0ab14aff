"""A worker given one task's bad data (a payload that does not decode, a hash missing
fields) fails or sets aside that task alone: the worker keeps running, and the other
tasks of the same batch run as if nothing happened."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from rsjobs import Client, Context, Registry, Settings, Worker
from rsjobs.reaper import Reaper, ReaperConfig, list_deadletters
from rsjobs.store.layout import Ending
from rsjobs.store.record import field
from tests.support.lua import long_names
from tests.support.processes import wait_for_state
from tests.support.waits import on_keys

pytestmark = pytest.mark.integration

NS = "wb"

tasks = Registry()


@tasks.handler("noop")
async def noop(ctx: Context, payload: Any) -> Any:
    return payload


#: the "hold" tasks run until the test sets this (work whose end the test decides)
RELEASE: dict[str, asyncio.Event] = {}


@tasks.handler("hold")
async def hold(ctx: Context, payload: Any) -> Any:
    await RELEASE.setdefault(str(payload["gate"]), asyncio.Event()).wait()
    return "held"


@pytest.fixture
async def wc(redis_url: str) -> AsyncIterator[Client]:
    c = Client.from_url(redis_url, namespace=NS)
    yield c
    await c.close()


async def ended(c: Client, tid: str, timeout: float = 10.0) -> dict[str, str]:
    """The task's hash once it is terminal, by its long field names (read raw: its payload
    may not decode)."""
    deadline = time.monotonic() + timeout
    while True:
        h = long_names(await c.redis.hgetall(c.keys.task(tid)))
        if h.get("state") in ("SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"):
            return h
        assert time.monotonic() < deadline, f"task {tid} is {h.get('state')}"
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def worker(url: str, **kw: Any) -> AsyncIterator[Worker]:
    opts: dict[str, Any] = {"concurrency": 8, "lease_ms": 2000, "handle_signals": False,
                            "settings": Settings(namespace=NS), "promote_ms": 20}  # fmt: skip
    opts.update(kw)
    w = Worker(tasks, url=url, **opts)
    run = asyncio.create_task(w.run())
    try:
        yield w
    finally:
        assert not run.done(), "the worker stopped by itself"
        w.stop()
        await asyncio.wait_for(run, 20)
        await w.redis.aclose()


async def test_a_payload_that_does_not_decode_fails_that_task_at_once(
    wc: Client, redis_url: str
) -> None:
    ids = [await wc.enqueue("noop", {"i": i}) for i in range(5)]
    garbled, missing, untyped = ids[1], ids[2], ids[3]
    await wc.redis.hset(wc.keys.task(garbled), field("payload"), "{not json")
    await wc.redis.hdel(wc.keys.task(missing), field("payload"))
    await wc.redis.hdel(wc.keys.task(untyped), field("type"))
    async with worker(redis_url):
        hashes = {tid: await ended(wc, tid) for tid in ids}
    for tid in (ids[0], ids[4]):
        assert (hashes[tid]["state"], hashes[tid]["attempt"]) == ("SUCCEEDED", "1")
    for tid, says in ((garbled, "does not decode"), (missing, "no payload field")):
        h = hashes[tid]
        assert (h["state"], h["attempt"], h["error_type"]) == ("FAILED", "1", "PayloadError")
        assert says in h["error"] and h["error"].startswith("non-retryable")
    assert (hashes[untyped]["state"], hashes[untyped]["error_type"]) == ("FAILED", "NoHandler")


async def test_a_task_hash_without_its_queue_does_not_stop_the_batch(
    wc: Client, redis_url: str
) -> None:
    ids = [await wc.enqueue("noop", {"i": i}) for i in range(6)]
    bad = ids[3]  # tasks before it in the batch are started by the call that fails
    await wc.redis.hdel(wc.keys.task(bad), field("queue"))
    async with worker(redis_url):
        for tid in ids:
            if tid != bad:
                info = await wc.wait(tid, timeout_ms=10_000)
                assert info.state == "SUCCEEDED" and info.attempt == 1
        info = await wc.wait(bad, timeout_ms=10_000)
    # set aside through the reaper's quarantine: a dead letter with the reason
    assert info.state == "FAILED" and info.error_type == "DeadLetter"
    assert info.error.startswith("quarantined: start failed on this task: no queue (q) field")
    (letter,) = await list_deadletters(wc.store)
    assert (letter.task_id, letter.step) == (bad, "start")


async def test_a_task_corrupted_while_it_runs_costs_no_other_its_lease(
    wc: Client, redis_url: str
) -> None:
    gate = f"bad-data-{uuid.uuid4().hex}"
    ids = [await wc.enqueue("hold", {"gate": gate}) for _ in range(4)]
    bad = ids[0]
    lease_ms = 600
    async with worker(redis_url, lease_ms=lease_ms):
        for tid in ids:
            await wait_for_state(wc, tid, "RUNNING")
        await wc.redis.hdel(wc.keys.task(bad), field("queue"))  # its heartbeats now fail
        past = await wc.store.reaper.now_ms() + 2 * lease_ms

        async def renewed() -> bool:  # the others' leases, renewed past two more leases
            infos = await wc.get_many(ids[1:])
            return all(i is not None and i.lease_expires_at > past for i in infos)

        # (looked at again at each write to their hashes: the heartbeats themselves)
        await on_keys(wc.redis, [wc.keys.task(t) for t in ids[1:]], renewed, 15)
        RELEASE.setdefault(gate, asyncio.Event()).set()
        for tid in ids[1:]:
            info = await wc.wait(tid, timeout_ms=10_000)
            assert (info.state, info.attempt) == ("SUCCEEDED", 1)
        # its handler was stopped; its delivery, still this worker's, is set aside when
        # the worker looks at what it holds (or by the reaper, once its lease ran out)
        h = await ended(wc, bad)
    assert (h["state"], h["error_type"]) == ("FAILED", "DeadLetter")
    assert "no queue (q) field" in h["error"]


async def test_a_finish_batch_with_one_bad_task_keeps_the_others_results(
    wc: Client, redis_url: str
) -> None:
    ids = [await wc.enqueue("noop", {"i": i}) for i in range(3)]
    w = Worker(tasks, url=redis_url, settings=Settings(namespace=NS), handle_signals=False)
    try:
        stream = w.keys.queue("default")
        work = w.store.work
        await work.ensure_groups([stream])
        deliveries = await work.read(w.name, {stream: "default"}, 3, None)
        assert [d.task_id for d in deliveries] == ids
        replies = await work.start(w.name, 60_000, w.nonce, deliveries)
        bad = ids[1]
        await w.redis.hdel(w.keys.task(bad), field("queue"))
        for d, r in zip(deliveries, replies, strict=True):
            ending = Ending("COMPLETE", r.lease, '"done"', "", 1, -1, 0.5)
            keys = w.keys.task_keys(d.task_id, "default")
            w._finish_items.append((keys, ending, d.task_id, d.entry))
        await w._flush_finishes()
    finally:
        await w.redis.aclose()
    for tid in ids:
        state = await wc.redis.hget(wc.keys.task(tid), field("state"))
        assert state == ("RUNNING" if tid == bad else "SUCCEEDED")


async def test_a_bad_scheduled_task_does_not_stop_the_workers_promotion(
    wc: Client, redis_url: str
) -> None:
    bad = await wc.enqueue("noop", {}, delay_ms=10)
    await wc.redis.hdel(wc.keys.task(bad), field("queue"))
    good = await wc.enqueue("noop", {"later": True}, delay_ms=1500)
    r = Reaper(redis=wc.redis, settings=wc.settings, config=ReaperConfig(guard=False))
    async with worker(redis_url):
        await asyncio.sleep(0.3)  # the worker's promotion fails on it meanwhile
        t0 = time.monotonic()
        report = await r.sweep_once()  # the bad one is due, the good one not yet
        assert (report.quarantined, report.promoted) == (1, 0)
        assert time.monotonic() - t0 < 1
        info = await wc.wait(good, timeout_ms=10_000)  # promoted by the worker alone
    assert info.state == "SUCCEEDED"
    assert (await wc.get(bad)).state == "FAILED"
