"""The sharded worker on the session's standalone Redis (which serves every slot), with a
namespace of 4 shards: it runs what is placed on every shard, each task once, with every
script call on one slot; a cancel on shard 3 stops its handler at once; the tasks of a
SIGKILLed worker on every shard come back through the reaper to a second worker; and a
backlog on one shard does not starve another shard's tasks."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from rsjobs import Client, EnqueueRequest, Settings, Worker, connect
from rsjobs.store.cluster import slot_of
from rsjobs.store.scripts import Scripts
from rsjobs.store.shards import shard_of
from tests.support.apps import tasks
from tests.support.processes import stop_process, wait_for_state
from tests.support.reaper import reaper_loop, spawn, terminal_transitions, wait_registered
from tests.support.reference import replay
from tests.support.web import eventually

pytestmark = pytest.mark.integration

NS = "sw"
S = 4


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[Client]:
    c = Client(connect(redis_url), Settings(namespace=NS, shards=S))
    await c.store.require_layout()
    assert (await c.store.open()).count == S  # created with 4 shards
    yield c
    await c.close()


@pytest.fixture
def single_slot(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every script call is checked to touch one slot (a cluster refuses any other); the
    names of the scripts called."""
    called: list[str] = []
    run = Scripts.run

    async def checked(self: Scripts, call: Any, *, durable: bool = False) -> Any:
        slots = {slot_of(k) for k in call.keys}
        assert len(slots) == 1, f"{call.script}.lua touches {len(slots)} slots: {call.keys}"
        called.append(call.script)
        return await run(self, call, durable=durable)

    monkeypatch.setattr(Scripts, "run", checked)
    yield called


@contextlib.asynccontextmanager
async def running_worker(url: str, **kw: Any) -> AsyncIterator[Worker]:
    opts: dict[str, Any] = {
        "concurrency": 8,
        "lease_ms": 2000,
        "handle_signals": False,
        "promote_ms": 20,
        "settings": Settings(namespace=NS),  # reads the namespace's shard count
    }
    opts.update(kw)
    w = Worker(tasks, url=url, **opts)
    task = asyncio.create_task(w.run())
    try:
        deadline = time.monotonic() + 15
        while len(w._lanes) < S:  # set up: it read the namespace's shards
            assert time.monotonic() < deadline and not task.done(), "the worker did not start"
            await asyncio.sleep(0.01)
        yield w
    finally:
        w.stop()
        await asyncio.wait_for(task, 20)
        await w.redis.aclose()


def _keys_on(client: Client, shard: int, n: int) -> list[str]:
    """``n`` shard keys that place a task on ``shard``."""
    shards = client.store.shards
    found = [f"k{i}" for i in range(10_000) if shards.place(shard_key=f"k{i}") == shard]
    return found[:n]


async def _assert_ran_once(client: Client, tid: str) -> None:
    info = await client.wait(tid, timeout_ms=20_000)
    assert info.state == "SUCCEEDED", info
    entries = await client.history(tid)
    assert len(terminal_transitions(entries)) == 1, entries
    assert replay(entries) == [], entries


async def test_a_worker_runs_the_tasks_of_every_shard_once_with_single_slot_calls(
    client: Client, redis_url: str, single_slot: list[str]
) -> None:
    bulk = await client.enqueue_many(
        [EnqueueRequest(type="noop", payload=i) for i in range(6 * S)], chunk=5
    )
    delayed = [await client.enqueue("noop", {"d": i}, delay_ms=200) for i in range(S)]
    progress = [await client.enqueue("sleep", {"s": 0.3, "steps": 3}) for _ in range(S)]
    ids = [*bulk, *delayed, *progress]
    assert {shard_of(t) for t in bulk} == set(range(S))
    assert {shard_of(t) for t in delayed} == {shard_of(t) for t in progress} == set(range(S))
    async with running_worker(redis_url, lease_ms=1000, heartbeat_ms=100) as w:
        for tid in ids:
            await _assert_ran_once(client, tid)
        registered = [
            await client.redis.hexists(client.store.shard(k).keys.workers, w.name) for k in range(S)
        ]
    for tid in ids:
        info = await client.get(tid)
        assert info.attempt == 1 and info.worker == w.name, info
    # each shard's tasks ran, on that shard
    per_shard = {k: [t for t in ids if shard_of(t) == k] for k in range(S)}
    for k, mine in per_shard.items():
        assert len(mine) == 8, (k, len(mine))
        store = client.store.shard(k)
        assert await client.redis.exists(*(store.keys.task(t) for t in mine)) == len(mine)
    assert (await client.stats())["default"]["SUCCEEDED"] == len(ids)
    # start, finish, heartbeat (progress), promote: every call on one slot
    assert {"start", "finish", "heartbeat", "promote"} <= set(single_slot)
    # it registered on every shard (the reaper's scripts read the registry in the slot
    # they sweep), and unregistered from each when it stopped
    assert registered == [1] * S
    for k in range(S):
        assert not await client.redis.hexists(client.store.shard(k).keys.workers, w.name)


async def test_a_cancel_of_a_task_on_shard_3_reaches_the_worker(
    client: Client, redis_url: str
) -> None:
    (key,) = _keys_on(client, 3, 1)
    keys = [_keys_on(client, k, 1)[0] for k in range(S)]  # one per shard
    # (block_ms: a lane blocked on "other" reads "default" again within it once resumed)
    async with running_worker(
        redis_url, lease_ms=30_000, queues=["default", "other"], block_ms=100
    ) as w:
        tid = await client.enqueue("sleep", {"s": 30}, shard_key=key)
        assert shard_of(tid) == 3
        await wait_for_state(client, tid, "RUNNING", timeout=15)
        await eventually(lambda: tid in w.jobs, 5, "the worker's job")
        t0 = time.monotonic()
        assert await client.cancel(tid) == "CANCELLED"
        while tid in w.jobs:
            await asyncio.sleep(0.005)
            assert time.monotonic() - t0 < 1.0, "the cancel on shard 3 did not reach the worker"
        # a pause of the queue on every shard: the worker takes nothing from any shard
        await client.pause_queue("default")
        await eventually(
            lambda: all(lane.paused == {"default"} for lane in w._lanes), 10, "heard on every shard"
        )
        assert w.paused == {"default"}
        held = [await client.enqueue("noop", {"i": i}, shard_key=k) for i, k in enumerate(keys)]
        # every shard's lane read again after them: a task of another queue on each ran
        for k in keys:
            await _assert_ran_once(client, await client.enqueue("noop", queue="other", shard_key=k))
        assert [(await client.get(t)).state for t in held] == ["PENDING"] * S
        await client.resume_queue("default")
        for t in held:
            await _assert_ran_once(client, t)


async def test_a_sigkilled_sharded_workers_tasks_on_every_shard_are_recovered(
    client: Client, redis_url: str
) -> None:
    first = spawn(redis_url, NS, "ka", lease_ms=1000, conc=8)
    second = None
    try:
        await wait_registered(client, ["ka"], timeout=30)
        ids = await client.enqueue_many(
            [EnqueueRequest(type="sleep", payload={"s": 1.5, "steps": 6}) for _ in range(8)]
        )
        assert {shard_of(t) for t in ids} == set(range(S))
        for t in ids:
            info = await wait_for_state(client, t, "RUNNING", timeout=15)
            assert info.worker == "ka"
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        second = spawn(redis_url, NS, "kb", lease_ms=1000, conc=8)
        async with reaper_loop(redis_url, NS, lease_ms=1000):
            infos = [await client.wait(t, timeout_ms=30_000) for t in ids]
        for info in infos:
            assert info.state == "SUCCEEDED" and info.attempt == 2 and info.worker == "kb", info
        for t in ids:
            entries = await client.history(t)
            assert len(terminal_transitions(entries)) == 1 and replay(entries) == [], entries
    finally:
        stop_process(first)
        if second is not None:
            stop_process(second)


async def test_a_backlog_on_one_shard_does_not_starve_another(
    client: Client, redis_url: str
) -> None:
    (k0,) = _keys_on(client, 0, 1)
    others = _keys_on(client, 2, 3)
    backlog = await client.enqueue_many(
        # (20 ms of handler each: 120 x 20 ms over 4 slots in this process, so the backlog
        # outlasts the late tasks by far even on a loaded machine)
        [EnqueueRequest(type="sleep", payload={"s": 0.02, "steps": 1}) for _ in range(120)],
        shard_key=k0,
    )
    assert {shard_of(t) for t in backlog} == {0}
    async with running_worker(redis_url, concurrency=4) as w:
        await wait_for_state(client, backlog[0], "SUCCEEDED", timeout=15)
        late = [await client.enqueue("noop", {"i": i}, shard_key=k) for i, k in enumerate(others)]
        assert {shard_of(t) for t in late} == {2}
        for t in late:
            await _assert_ran_once(client, t)
        # they ran while most of the backlog still waited
        done = sum([(await client.get(t)).terminal for t in backlog])
        assert done < len(backlog) // 2, done
        assert w._lanes[0].hot  # shard 0 still read as a backlog
        for t in backlog:
            await _assert_ran_once(client, t)
