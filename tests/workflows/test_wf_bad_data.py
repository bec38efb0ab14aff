"""Bad input and bad data on the workflow side, on fakeredis: actions whose tasks would
be over the payload limit are refused before their first write; the driver moves a
workflow it cannot drive to FAILED (ABORT) and goes on with the others."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import fakeredis
import pytest

from rsjobs import PayloadError, StoreError
from rsjobs.settings import Settings
from rsjobs.store.record import field
from rsjobs.workflows import (
    CorruptWorkflow,
    Stage,
    TaskSpec,
    WorkflowClient,
    WorkflowDefinition,
    WorkflowDriver,
)
from rsjobs.workflows import driver as driver_module
from tests.support.workflows import Hand, raw_start, redis_dump, replay

LIMIT = 1 << 20

TWO = WorkflowDefinition(
    "two",
    [
        Stage("one", [TaskSpec(item="a", type="t")], queue="wf", gate=True),
        Stage("fan", [TaskSpec(item="x", type="t"), TaskSpec(item="y", type="t")], queue="wf"),
    ],
)


Env = tuple[WorkflowClient, Hand, WorkflowDriver]


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    r = fakeredis.aioredis.FakeRedis(decode_responses=True)
    st = Settings(namespace="t", retention_ms=0)
    c = WorkflowClient(r, st, definitions=[TWO])
    yield c, Hand(r, st), WorkflowDriver(redis=r, settings=st)
    await r.aclose()


def big(n: int) -> dict[str, str]:
    return {"blob": "x" * n}


async def _at_gate_with_big_asset(c: WorkflowClient, hand: Hand, ref_bytes: int) -> str:
    """A workflow of TWO waiting at its gate, whose stage-one asset ref is ``ref_bytes``
    long: its input fits, the next stage's payloads (input + the ref) do not."""
    wid = await c.start("two", big(LIMIT // 2))
    (task,) = await hand.claim()
    assert await hand.complete(task, {"ref": "r" * ref_bytes}) == 1
    assert (await c.get(wid)).status == "WAITING_CONFIRMATION"
    return wid


async def test_start_over_the_limit_writes_nothing(env: Env) -> None:
    c, hand, _ = env
    await c.start("two", {"seed": 1})  # the database is not empty
    before = await redis_dump(c.redis)
    with pytest.raises(PayloadError, match=r"payload of task 'a' of stage 'one' is .* over the"):
        await c.start("two", big(LIMIT))
    assert await redis_dump(c.redis) == before


async def test_confirm_whose_next_tasks_would_be_over_the_limit_writes_nothing(
    env: Env,
) -> None:
    c, hand, _ = env
    wid = await _at_gate_with_big_asset(c, hand, LIMIT // 2 + 100)
    before = await redis_dump(c.redis)
    with pytest.raises(PayloadError, match="task 'x' of stage 'fan'"):
        await c.confirm(wid)
    assert await redis_dump(c.redis) == before
    assert (await c.get(wid)).status == "WAITING_CONFIRMATION"


async def test_regenerate_whose_tasks_would_be_over_the_limit_writes_nothing(env: Env) -> None:
    c, hand, _ = env
    wid = await _at_gate_with_big_asset(c, hand, LIMIT // 2 + 100)
    # a client with a larger limit confirms: the stage runs
    roomy = WorkflowClient(
        c.redis, Settings(namespace="t", retention_ms=0, payload_limit=4 * LIMIT)
    )
    assert await roomy.confirm(wid) == "RUNNING"
    assert len(await hand.claim()) == 2
    before = await redis_dump(c.redis)
    with pytest.raises(PayloadError, match="stage 'fan'"):
        await c.regenerate(wid, "fan")
    assert await redis_dump(c.redis) == before
    # from the first stage the new tasks fit: regenerate works
    assert await c.regenerate(wid, "one") == "RUNNING"


async def test_restart_over_the_limit_writes_nothing(env: Env) -> None:
    c, hand, _ = env
    roomy = WorkflowClient(
        c.redis, Settings(namespace="t", retention_ms=0, payload_limit=4 * LIMIT), definitions=[TWO]
    )
    wid = await roomy.start("two", big(LIMIT + 10))
    await roomy.cancel(wid)
    before = await redis_dump(c.redis)
    with pytest.raises(PayloadError):
        await c.restart(wid)
    assert await redis_dump(c.redis) == before


async def test_the_driver_fails_a_workflow_whose_stage_cannot_be_created(env: Env) -> None:
    """Its input fits the limit of the client that started it, not the driver's."""
    c, hand, _ = env
    tight = Settings(namespace="t", retention_ms=0, payload_limit=LIMIT // 4)
    driver = WorkflowDriver(redis=c.redis, settings=tight)
    bad = await raw_start(c, TWO, big(LIMIT // 2))
    good = await raw_start(c, TWO, {"small": True})
    report = await driver.sweep_once()
    assert (report.visited, report.aborted, report.spawned_workflows) == (2, 1, 1)
    info = await c.get(bad)
    assert info.status == "FAILED"
    assert info.reason.startswith("its next tasks cannot be created: the payload of task 'a'")
    last = (await c.history(bad))[-1]
    assert (last.from_status, last.event, last.to_status) == ("RUNNING", "ABORT", "FAILED")
    assert replay(await c.history(bad)) == []
    assert not await c.redis.sismember(c.keys.workflows_active, bad)
    assert [t.item for t in await hand.claim()] == ["a"]  # the good one's task only
    assert (await c.get(good)).status == "RUNNING"
    assert (await driver.sweep_once()).aborted == 0  # once


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("plan", "{not json", "its plan does not decode"),
        ("stage", None, "stage is missing"),
        ("need", "many", "need is not a number"),
        ("input", "[1, 2", "its input does not decode"),
    ],
)
async def test_the_driver_fails_a_workflow_whose_hash_is_corrupt(
    env: Env, field: str, value: str | None, says: str
) -> None:
    c, hand, driver = env
    bad = await raw_start(c, TWO, {"n": 1})
    if value is None:
        await c.redis.hdel(c.keys.workflow(bad), field)
    else:
        await c.redis.hset(c.keys.workflow(bad), field, value)
    good = await raw_start(c, TWO, {"n": 2})
    report = await driver.sweep_once()
    assert (report.aborted, report.spawned_workflows, report.errors) == (1, 1, 0)
    h = await c.redis.hgetall(c.keys.workflow(bad))
    assert h["status"] == "FAILED" and says in h["reason"]
    entries = await c.redis.xrange(c.keys.workflow_history(bad))
    assert entries[-1][1]["ev"] == "ABORT" and says in entries[-1][1]["msg"]
    assert (await c.get(good)).status == "RUNNING"


async def test_the_open_tasks_of_an_aborted_workflow_are_cancelled(env: Env) -> None:
    c, hand, driver = env
    wid = await c.start("two", {"n": 1})
    (task,) = await hand.claim()
    # the plan turns unreadable while its task runs; its end cannot be accounted
    await c.redis.hset(c.keys.workflow(wid), "stage", "first")
    report = await driver.sweep_once()
    assert report.aborted == 1
    assert await c.redis.hget(c.keys.task(task.id), field("state")) == "CANCELLED"
    assert await c.redis.scard(c.keys.workflow_open(wid)) == 0
    assert await hand.complete(task) == -2  # its late result is refused


async def test_a_workflow_the_table_cannot_move_is_quarantined(env: Env) -> None:
    c, hand, driver = env
    bad = await raw_start(c, TWO, {"n": 1})
    await c.redis.hset(c.keys.workflow(bad), mapping={"status": "LIMBO", "version": "?"})
    report = await driver.sweep_once()
    assert (report.quarantined, report.aborted) == (1, 0)
    assert not await c.redis.sismember(c.keys.workflows_active, bad)
    assert await c.redis.hget(c.keys.workflow(bad), "status") == "LIMBO"
    last = (await c.redis.xrange(c.keys.workflow_history(bad)))[-1][1]
    assert last["ev"] == "ABORT" and last["rej"] == "1" and "unknown status 'LIMBO'" in last["msg"]
    assert (await driver.sweep_once()).visited == 0


async def test_an_open_set_of_the_wrong_type_is_quarantined(env: Env) -> None:
    c, hand, driver = env
    bad = await raw_start(c, TWO, {"n": 1})
    await c.redis.set(c.keys.workflow_open(bad), "junk")
    report = await driver.sweep_once()
    assert report.quarantined == 1
    assert not await c.redis.sismember(c.keys.workflows_active, bad)


async def test_nothing_wrong_found_leaves_the_workflow_as_it_is(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure the workflow's data does not explain (here: a bug) fails no workflow."""
    c, hand, driver = env
    wid = await raw_start(c, TWO, {"n": 1})
    other = await raw_start(c, TWO, {"n": 2})
    real = driver_module.redrive

    async def buggy(ws: Any, wf_id: str, source: str = "driver") -> Any:
        if wf_id == wid:
            raise RuntimeError("a bug")
        return await real(ws, wf_id, source)

    monkeypatch.setattr(driver_module, "redrive", buggy)
    before = await c.redis.hgetall(c.keys.workflow(wid))
    report = await driver.sweep_once()
    assert (report.errors, report.aborted, report.spawned_workflows) == (1, 0, 1)
    assert await c.redis.hgetall(c.keys.workflow(wid)) == before
    assert (await c.get(other)).status == "RUNNING"


@pytest.mark.parametrize("damage", ["no queue", "not a hash"])
async def test_a_corrupt_task_counts_as_failed_for_its_workflow(env: Env, damage: str) -> None:
    c, hand, driver = env
    wid = await c.start("two", {"n": 1})
    (task,) = await hand.claim()
    if damage == "no queue":
        await c.redis.hdel(c.keys.task(task.id), field("queue"))
    else:
        await c.redis.delete(c.keys.task(task.id))
        await c.redis.set(c.keys.task(task.id), "junk")
    report = await driver.sweep_once()
    assert (report.errors, report.aborted) == (0, 0)
    info = await c.get(wid)
    assert info.status == "PARTIALLY_FAILED"
    last = (await c.history(wid))[-1]
    assert last.event == "TASK_FAILED" and "task record unreadable" in last.message
    # the user's actions still work around it
    assert await c.retry(wid) == "RUNNING"
    (again,) = await hand.claim()
    assert again.id != task.id and again.item == "a"
    assert await c.cancel(wid) == "CANCELLED"


async def test_a_corrupt_workflow_hash_is_refused_before_any_write(env: Env) -> None:
    c, hand, _ = env
    wid = await c.start("two", {"n": 1})
    (task,) = await hand.claim()
    await c.redis.hdel(c.keys.workflow(wid), "stage")
    before = await redis_dump(c.redis)
    open_set = await c.store.workflows.open_tasks(wid)
    with pytest.raises(StoreError, match=r"corrupt workflow hash .* field stage is missing"):
        await c.store.workflows.sync("driver", wid, open_set)
    assert await redis_dump(c.redis) == before
    assert await c.redis.hget(c.keys.task(task.id), field("state")) == "RUNNING"


async def test_a_worker_that_completes_a_stage_whose_next_cannot_be_created_goes_on(
    env: Env,
) -> None:
    c, hand, driver = env
    chain = WorkflowDefinition(
        "chain",
        [
            Stage("one", [TaskSpec(item="a", type="t")], queue="wf"),
            Stage("two", [TaskSpec(item="b", type="t")], queue="wf"),
        ],
    )
    wid = await c.start(chain, big(LIMIT // 2))
    (task,) = await hand.claim()
    # the finish advances the workflow; spawning stage two fails: logged, not raised
    assert await hand.complete(task, {"ref": "r" * (LIMIT // 2)}) == 1
    info = await c.get(wid)
    assert (info.status, info.stage_name, info.needs_spawn) == ("RUNNING", "two", True)
    assert (await driver.sweep_once()).aborted == 1
    assert "of stage 'two'" in (await c.get(wid)).reason


async def test_no_error_ends_the_driver_loop(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    c, hand, _ = env
    driver = WorkflowDriver(redis=c.redis, settings=c.settings, interval_ms=10)
    real = driver.sweep_once
    calls = 0

    async def flaky() -> Any:
        nonlocal calls
        calls += 1
        if calls <= 2:
            raise RuntimeError("unexpected")
        return await real()

    monkeypatch.setattr(driver, "sweep_once", flaky)
    wid = await raw_start(c, TWO, {"n": 1})
    task = asyncio.create_task(driver.run())
    try:
        for _ in range(200):
            if driver.passes:
                break
            await asyncio.sleep(0.02)
        assert not task.done() and driver.failed_passes == 2 and driver.passes >= 1
        assert len(await hand.claim()) == 1  # a later pass spawned its stage
    finally:
        driver.stop()
        await asyncio.wait_for(task, 5)
    assert (await c.get(wid)).status == "RUNNING"


async def test_a_corrupt_workflow_reads_as_a_typed_error_and_hides_no_other(env: Env) -> None:
    c, hand, driver = env
    good = await raw_start(c, TWO, {"n": 1})
    bad = await raw_start(c, TWO, {"n": 2}, plan=b"{not json")
    with pytest.raises(CorruptWorkflow, match=f"workflow {bad} is corrupt"):
        await c.get(bad)
    assert [w.id for w in await c.list()] == [good]
    assert (await driver.sweep_once()).aborted == 1
    assert [e.event for e in await c.history(bad)][-1] == "ABORT"
