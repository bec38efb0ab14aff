"""A waiting workflow task is kept as a plain task is: one hash with its history inside
(``new_task`` in fsm.lua, which both ``enqueue.lua`` and ``wf.lua``'s ``create_task``
use), no history stream (real Redis: MEMORY USAGE)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from rsjobs import Client, Settings, connect
from rsjobs.workflows import Stage, TaskSpec, WorkflowClient, WorkflowDefinition
from tests.support.encodings import COMPACT_HASH

pytestmark = pytest.mark.integration

NS = "mem"
ONE = WorkflowDefinition("one", [Stage("s", [TaskSpec(item="a", type="t")], queue="wf")])


@pytest.fixture
async def clients(redis_url: str) -> AsyncIterator[tuple[Client, WorkflowClient]]:
    r = connect(redis_url)
    settings = Settings(namespace=NS)
    c, wf = Client(r, settings), WorkflowClient(r, settings, definitions=[ONE])
    try:
        yield c, wf
    finally:
        await r.aclose()


async def test_a_waiting_workflow_task_is_compacted_like_a_plain_task(
    clients: tuple[Client, WorkflowClient],
) -> None:
    """A waiting workflow task is one hash, its history inside, like a plain task's, and
    no history stream. (Its payload, the workflow's task document, is longer than a hash
    keeps in a listpack, 64 B: its hash is a hashtable, a few hundred bytes more.)"""
    c, wf = clients
    r = c.redis
    plain = await c.enqueue("t", queue="wf")
    wid = await wf.start("one")
    (task_id,) = ((await wf.status(wid)).tasks[0].id,)
    assert (await c.get(task_id)).state == "PENDING"
    assert await r.object("encoding", c.keys.task(plain)) in COMPACT_HASH
    for tid in (plain, task_id):
        assert not await r.exists(c.keys.history(tid))
    plain_bytes = int(await r.memory_usage(c.keys.task(plain), samples=0) or 0)
    wf_bytes = int(await r.memory_usage(c.keys.task(task_id), samples=0) or 0)
    assert 0 < plain_bytes < 500, plain_bytes
    # the workflow task's hash carries its workflow id, stage and item, its ENQUEUE entry
    # a longer message: all of it less than its history stream alone used to take (on
    # Redis 7 and Valkey; Redis 6.2 sizes a hashtable's entries larger: 1,688 B measured)
    version = int(str((await r.info("server"))["redis_version"]).split(".")[0])
    assert wf_bytes < (1500 if version >= 7 else 2000), (wf_bytes, plain_bytes)
    assert [e.event for e in await c.history(task_id)] == ["ENQUEUE"]
