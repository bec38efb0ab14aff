"""A waiting workflow task holds what its history's entries use, as a plain task does: its
history is compacted when the task is created (``new_task`` in fsm.lua, which both
``enqueue.lua`` and ``wf.lua``'s ``create_task`` use), not left with the 4 kB Redis
preallocates for a stream's first node (real Redis: MEMORY USAGE)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from rsjobs import Client, Settings, connect
from rsjobs.workflows import Stage, TaskSpec, WorkflowClient, WorkflowDefinition

pytestmark = pytest.mark.integration

NS = "mem"
ONE = WorkflowDefinition("one", [Stage("s", [TaskSpec(item="a", type="t")], queue="wf")])


@pytest.fixture
async def clients(redis_url: str) -> AsyncIterator[tuple[Client, WorkflowClient]]:
    r = connect(redis_url)
    settings = Settings(namespace=NS)
    c, wf = Client(r, settings), WorkflowClient(r, settings, definitions=[ONE])
    (_, was), *_ = (await r.config_get("stream-node-max-bytes")).items()
    await r.config_set("stream-node-max-bytes", 4096)  # Redis's default
    try:
        yield c, wf
    finally:
        await r.config_set("stream-node-max-bytes", was)
        await r.aclose()


async def test_a_waiting_workflow_task_is_compacted_like_a_plain_task(
    clients: tuple[Client, WorkflowClient],
) -> None:
    c, wf = clients
    r = c.redis
    await r.xadd("plain-stream", {"ev": "X"})
    assert await r.memory_usage("plain-stream") > 4000  # what an uncompacted stream holds
    plain = await c.enqueue("t", queue="wf")
    wid = await wf.start("one")
    (task_id,) = ((await wf.status(wid)).tasks[0].id,)
    assert (await c.get(task_id)).state == "PENDING"
    plain_bytes = await r.memory_usage(c.keys.history(plain))
    wf_bytes = await r.memory_usage(c.keys.history(task_id))
    assert plain_bytes < 1500, plain_bytes
    assert wf_bytes < 1500, wf_bytes
    # the workflow task's ENQUEUE entry carries its workflow id and a longer message: a
    # few hundred bytes more than a plain task's, not kilobytes
    assert wf_bytes - plain_bytes < 500, (wf_bytes, plain_bytes)
    # compacted to an exact copy: a COPY of it takes as much memory as it does
    await r.copy(c.keys.history(task_id), "probe")
    assert wf_bytes <= await r.memory_usage("probe") + 64
