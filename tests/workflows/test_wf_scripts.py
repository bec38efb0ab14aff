"""The workflow scripts on fakeredis, through the real client and the worker's finisher:
exactly-once spawn, completion in the step that records the last asset, refusals, stale
calls that write nothing, and the driver's accounting of task ends it did not see."""

from __future__ import annotations

from collections.abc import AsyncIterator

import fakeredis
import pytest

from rsjobs.settings import Settings
from rsjobs.store import OpenSet, Store
from rsjobs.store.layout import Ending, WfRegenerateArgs, WfSpawnArgs
from rsjobs.store.record import field
from rsjobs.workflows import (
    ActionRefused,
    Stage,
    TaskSpec,
    WorkflowClient,
    WorkflowDefinition,
    fan_out,
)
from tests.support.lua import long_names
from tests.support.workflows import Hand, character, invariants, wf_keys_dump

SMALL = WorkflowDefinition(
    "small",
    [
        Stage("one", [TaskSpec(item="a", type="t")], queue="wf", gate=True),
        Stage("fan", fan_out("t", ["x", "y", "z"]), queue="wf", max_retries=0),
    ],
)


@pytest.fixture
async def env() -> AsyncIterator[tuple[WorkflowClient, Hand]]:
    r = fakeredis.aioredis.FakeRedis(decode_responses=True)
    st = Settings(namespace="t", retention_ms=0)
    c = WorkflowClient(r, st, definitions=[SMALL, character()])
    yield c, Hand(r, st)
    await r.aclose()


async def test_a_stage_is_spawned_exactly_once(env: tuple[WorkflowClient, Hand]) -> None:
    c, hand = env
    wid = await c.start("small")
    assert len(await hand.claim()) == 1
    for _ in range(3):
        assert (await c.redrive(wid)).spawned == 0
    spawns = [e for e in await c.history(wid) if e.event == "SPAWN"]
    assert len(spawns) == 1
    assert await invariants(c, wid) == []


async def test_the_last_asset_completes_the_stage_in_the_same_call(
    env: tuple[WorkflowClient, Hand],
) -> None:
    c, hand = env
    wid = await c.start("small")
    (task,) = await hand.claim()
    assert await hand.complete(task) == 1
    # no driver, no second call: the finish itself moved the workflow to its gate
    info = await c.get(wid)
    assert info.status == "WAITING_CONFIRMATION" and info.done == 1
    events = [e.event for e in await c.history(wid)]
    assert events[-2:] == ["ASSET", "GATE"]
    assert [a.ref for a in await c.assets(wid)] == [f"mem://{wid}/v1/one/a/{task.id}"]
    # confirm opens the next stage and spawns its three tasks at once
    assert await c.confirm(wid) == "RUNNING"
    assert sorted(t.item for t in await hand.claim()) == ["x", "y", "z"]


async def test_a_result_naming_no_asset_fails_the_task(env: tuple[WorkflowClient, Hand]) -> None:
    c, hand = env
    wid = await c.start("small")
    (task,) = await hand.claim()
    assert await hand.complete(task, {"no": "ref"}) == 1
    t = long_names(await c.redis.hgetall(c.keys.task(task.id)))
    assert t["state"] == "FAILED" and t["error_type"] == "AssetError"
    doc = await c.status(wid)
    assert doc.status == "PARTIALLY_FAILED" and doc.failed_tasks == 1
    assert doc.completed_assets == []


async def test_no_retries_left_fails_the_workflow_and_cancels_the_rest(
    env: tuple[WorkflowClient, Hand],
) -> None:
    c, hand = env
    wid = await c.start("small")
    (task,) = await hand.claim()
    await hand.complete(task)
    await c.confirm(wid)
    x, y, z = sorted(await hand.claim(), key=lambda t: t.item)
    await hand.complete(x)
    assert await hand.fail(y) == 1  # max_retries=0 on this stage
    info = await c.get(wid)
    assert info.status == "FAILED" and "no retries left" in info.reason
    # the finisher re-drove at once: the unfinished task is cancelled, nothing is open
    assert await c.redis.hget(c.keys.task(z.id), field("state")) == "CANCELLED"
    assert await hand.complete(z) == -2
    assert await invariants(c, wid, quiet=True) == []


async def test_a_running_task_the_workflow_lost_track_of_is_refused(
    env: tuple[WorkflowClient, Hand],
) -> None:
    """Defence in depth: a RUNNING task of an older version that regenerate did not cancel
    (here: removed from the open set by hand) has its result refused and ends CANCELLED."""
    c, hand = env
    wid = await c.start("small")
    (old,) = await hand.claim()
    await c.redis.srem(c.keys.workflow_open(wid), old.id)
    await c.regenerate(wid, "one", reason="new look")
    assert await c.redis.hget(c.keys.task(old.id), field("state")) == "RUNNING"
    assert await hand.complete(old) == -4
    assert await c.redis.hget(c.keys.task(old.id), field("state")) == "CANCELLED"
    refused = [e for e in await c.history(wid) if e.rejected]
    assert refused[-1].event == "RESULT" and "not current" in refused[-1].message
    assert await c.assets(wid) == []
    rows = await c.store.tasks.history(old.id)
    assert rows is not None
    task_history = rows.entries(old.id)
    assert [e.event for e in task_history][-2:] == ["COMPLETE", "CANCEL"]


async def test_stale_calls_write_nothing(env: tuple[WorkflowClient, Hand]) -> None:
    c, hand = env
    wid = await c.start("small")
    (task,) = await hand.claim()
    before = await wf_keys_dump(c, wid)
    history = await c.redis.xlen(c.keys.workflow_history(wid))
    s = c.store.workflows
    none = OpenSet([], [])
    # regenerate and cancel naming the wrong open set; spawn for a version that is not current
    regenerate = WfRegenerateArgs(0, "", 100, "")
    assert (await s.regenerate("api", wid, regenerate, none)).code == -5
    assert (await s.cancel("api", wid, "", none)).code == -5
    assert (await s.spawn("api", wid, WfSpawnArgs(7, 0), [])).code == -5
    assert await wf_keys_dump(c, wid) == before
    assert await c.redis.xlen(c.keys.workflow_history(wid)) == history
    assert await c.redis.hget(c.keys.task(task.id), field("state")) == "RUNNING"


async def test_the_driver_accounts_for_task_ends_it_did_not_see(
    env: tuple[WorkflowClient, Hand],
) -> None:
    """A task failed by the reaper (here: finish.lua, the plain path) or succeeded through
    it is accounted for by the next redrive, from the persisted task hash."""
    c, hand = env
    wid = await c.start("small")
    (task,) = await hand.claim()
    work = Store(c.redis, c.settings).work
    done = Ending("COMPLETE", task.lease, '{"ref": "file:///a.json"}', "", 1, -1, 0.5)
    assert list((await work.finish([(task.keys, done)]))[0]) == [1, "SUCCEEDED"]
    assert (await c.get(wid)).status == "RUNNING"
    assert (await c.redrive(wid)).status == "WAITING_CONFIRMATION"
    assert [a.ref for a in await c.assets(wid)] == ["file:///a.json"]
    await c.confirm(wid)
    x, y, z = sorted(await hand.claim(), key=lambda t: t.item)
    await hand.complete(x)
    await hand.complete(z)
    lost = Ending("FAIL", y.lease, "worker lost", "WorkerLost", 0, -1, 0.5)
    await work.finish([(y.keys, lost)])
    assert (await c.redrive(wid)).status == "FAILED"
    assert await invariants(c, wid, quiet=True) == []


async def test_decisions_for_a_version_the_workflow_left_are_refused(
    env: tuple[WorkflowClient, Hand],
) -> None:
    c, hand = env
    wid = await c.start("small")
    await hand.complete((await hand.claim())[0])
    await c.regenerate(wid, "one")
    await hand.complete((await hand.claim())[0])
    with pytest.raises(ActionRefused, match="current version is 2"):
        await c.confirm(wid, version=1)
    with pytest.raises(ActionRefused, match="current stage is 0"):
        await c.confirm(wid, version=2, stage="fan")
    assert await c.confirm(wid, version=2, stage="one") == "RUNNING"
    refused = [e.event for e in await c.history(wid) if e.rejected]
    assert refused == ["CONFIRM", "CONFIRM"]
