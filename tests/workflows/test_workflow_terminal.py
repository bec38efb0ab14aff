"""Terminal workflows (PUBLISHED, FAILED, CANCELLED) refuse every action and every late
result, create no task, and change nothing; the refusals are recorded."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from rsjobs import Settings, connect
from rsjobs.model import TERMINAL as TASK_TERMINAL
from rsjobs.store.record import field
from rsjobs.workflows import ActionRefused, WorkflowClient
from rsjobs.workflows.spawn import spawn
from tests.support.wf_fixtures import NS
from tests.support.workflows import Claimed, Hand, character, invariants, wf_keys_dump

pytestmark = pytest.mark.integration


@pytest.fixture
async def wf(redis_url: str) -> AsyncIterator[WorkflowClient]:
    c = WorkflowClient(
        connect(redis_url), Settings(namespace=NS), definitions=[character(max_retries=0)]
    )
    yield c
    await c.close()


async def run_all(hand: Hand) -> list[Claimed]:
    claimed = await hand.claim()
    for t in claimed:
        await hand.complete(t)
    return claimed


async def to_terminal(wf: WorkflowClient, hand: Hand, kind: str) -> tuple[str, dict[str, Claimed]]:
    """A workflow ended as ``kind``, and leases kept for late results: a v1 image task
    cancelled by a regenerate ("zombie") and a task that succeeded ("done")."""
    wid = await wf.start("character", {"name": "Mei"})
    await run_all(hand)
    await wf.confirm(wid)
    zombie = (await hand.claim())[0]
    await wf.regenerate(wid, "images")
    await run_all(hand)
    await wf.confirm(wid)
    done = (await run_all(hand))[0]
    emotions = await hand.claim()
    keep = {"zombie": zombie, "done": done}
    if kind == "PUBLISHED":
        for t in emotions:
            await hand.complete(t)
        await wf.publish(wid)
    elif kind == "FAILED":
        await hand.fail(emotions[0])  # max_retries=0: the workflow fails
        keep["cancelled"] = emotions[1]  # cancelled with the failed workflow
    else:
        keep["cancelled"] = emotions[0]
        await wf.cancel(wid, "user gave up")
    assert (await wf.get(wid)).status == kind
    return wid, keep


@pytest.mark.parametrize("kind", ["PUBLISHED", "FAILED", "CANCELLED"])
async def test_a_terminal_workflow_refuses_everything(wf: WorkflowClient, kind: str) -> None:
    hand = Hand(wf.redis, wf.settings)
    wid, keep = await to_terminal(wf, hand, kind)
    before = await wf_keys_dump(wf, wid)
    queue_len = await wf.redis.xlen(wf.keys.queue("wf"))
    history_before = len(await wf.history(wid))

    for action in (
        lambda: wf.confirm(wid),
        lambda: wf.regenerate(wid, "images"),
        lambda: wf.regenerate(wid, "params"),
        lambda: wf.retry(wid),
    ):
        with pytest.raises(ActionRefused):
            await action()
    if kind == "PUBLISHED":
        assert await wf.publish(wid) == "PUBLISHED"  # idempotent: nothing changes
        with pytest.raises(ActionRefused):
            await wf.cancel(wid)
    else:
        with pytest.raises(ActionRefused):
            await wf.publish(wid)
        if kind == "CANCELLED":
            assert await wf.cancel(wid) == "CANCELLED"
        else:
            with pytest.raises(ActionRefused):
                await wf.cancel(wid)
    # late results: a cancelled old version, a repeated completion, a late failure
    assert await hand.complete(keep["zombie"]) == -2
    assert await hand.complete(keep["done"]) == 2
    assert await hand.fail(keep["done"]) == -2
    if "cancelled" in keep:
        assert await hand.complete(keep["cancelled"]) == -2
    assert (await wf.redrive(wid)).spawned == 0
    assert await spawn(wf.store, wid, "test") == 0

    assert await wf_keys_dump(wf, wid) == before
    assert await wf.redis.xlen(wf.keys.queue("wf")) == queue_len  # no task created
    after = (await wf.history(wid))[history_before:]
    assert after and all(e.rejected for e in after), after
    assert {e.event for e in after} >= {"CONFIRM", "REGENERATE", "RETRY", "PUBLISH", "RESULT"}
    slots = await wf.redis.hgetall(wf.keys.workflow_tasks(wid))
    for tid in slots.values():
        assert await wf.redis.hget(wf.keys.task(tid), field("state")) in TASK_TERMINAL
    assert await invariants(wf, wid, quiet=True) == []
