"""A stage passes labels on to its tasks (``TaskSpec.labels``, ``fan_out(labels=...)``,
from the workflow's input when its tasks are a function of it): the tasks carry them and
the lists find them by them, with the workflow's owner."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from rsjobs import Client, ConfigError, Settings, connect
from rsjobs.workflows import Stage, TaskSpec, WorkflowClient, WorkflowDefinition, fan_out

pytestmark = pytest.mark.integration

NS = "wfl"


def tasks_of(input: Any) -> list[TaskSpec]:
    return list(fan_out("image.generate", ["front", "side"], labels={"character": input["id"]}))


LABELLED = WorkflowDefinition(
    "labelled",
    [
        Stage("images", tasks_of, queue="wf"),
        Stage("more", [TaskSpec(item="x", type="t", labels={"stage": "more"})], queue="wf"),
    ],
)


@pytest.fixture
async def clients(redis_url: str) -> AsyncIterator[tuple[Client, WorkflowClient]]:
    r = connect(redis_url)
    settings = Settings(namespace=NS)
    try:
        yield Client(r, settings), WorkflowClient(r, settings, definitions=[LABELLED])
    finally:
        await r.aclose()


async def test_stage_tasks_carry_the_labels_their_stage_gives(
    clients: tuple[Client, WorkflowClient],
) -> None:
    c, wf = clients
    wid = await wf.start("labelled", {"id": "char_456"}, owner="alice")
    ids = {t.id for t in (await wf.status(wid)).tasks}
    assert len(ids) == 2
    for tid in ids:
        assert (await c.get(tid)).labels == {"character": "char_456"}
    page = await c.list_tasks(label="character=char_456", owner="alice")
    assert {s.id for s in page.items} == ids and {s.workflow for s in page.items} == {wid}
    assert (await c.list_tasks(label="character=char_9")).items == []


def test_bad_labels_in_a_stage_are_refused_at_plan_time() -> None:
    with pytest.raises(ConfigError, match="label key"):
        TaskSpec(item="x", type="t", labels={"bad key": "v"}).plan()
