"""A stage's priority (``Stage(priority=...)``, rsjobs.limits): its tasks wait on that
level's stream with that priority, and keep it when the workflow is cancelled; a bad
priority is refused at plan time."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from rsjobs import Client, ConfigError, Settings, connect
from rsjobs.workflows import Stage, TaskSpec, WorkflowClient, WorkflowDefinition, fan_out

pytestmark = pytest.mark.integration

NS = "wfp"

URGENT = WorkflowDefinition(
    "urgent",
    [Stage("images", list(fan_out("image.generate", ["a", "b"])), queue="wf", priority=7)],
)


@pytest.fixture
async def clients(redis_url: str) -> AsyncIterator[tuple[Client, WorkflowClient]]:
    r = connect(redis_url)
    settings = Settings(namespace=NS)
    try:
        yield Client(r, settings), WorkflowClient(r, settings, definitions=[URGENT])
    finally:
        await r.aclose()


async def test_a_stages_tasks_run_at_its_priority(
    clients: tuple[Client, WorkflowClient],
) -> None:
    c, wf = clients
    wid = await wf.start("urgent", None, owner="alice")
    ids = [t.id for t in (await wf.status(wid)).tasks]
    assert len(ids) == 2
    for tid in ids:
        info = await c.get(tid)
        assert info.priority == 7 and info.state == "PENDING"
    k = c.keys
    assert await c.redis.xlen(k.queue("wf", 7)) == 2 and await c.redis.xlen(k.queue("wf")) == 0
    # the workflow's scripts find its tasks on their level's stream (a cancel reaches them)
    await wf.cancel(wid, "no")
    assert {(await c.get(t)).state for t in ids} == {"CANCELLED"}
    assert await c.redis.xlen(k.queue("wf", 7)) == 0


@pytest.mark.parametrize("bad", [-1, 10, 2.5, "3"])
def test_a_bad_stage_priority_is_refused_at_plan_time(bad: object) -> None:
    stage = Stage("s", [TaskSpec(item="x", type="t")], priority=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="priority"):
        stage.plan(None)
