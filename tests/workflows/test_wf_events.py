"""What the scripts write to the namespace's events stream for workflows (fakeredis): a
note per workflow history entry (wf, hid, ev; nothing more), and on every entry of a
workflow's task its workflow id (once), which the web app's hub uses to wake the
workflow's event streams."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import fakeredis
import pytest

from rsjobs import Client
from rsjobs.settings import Settings
from rsjobs.workflows import Stage, TaskSpec, WorkflowClient, WorkflowDefinition, fan_out
from tests.support.workflows import Hand

SMALL = WorkflowDefinition(
    "small",
    [
        Stage("one", [TaskSpec(item="a", type="t")], queue="wf", gate=True),
        Stage("fan", fan_out("t", ["x", "y"]), queue="wf"),
    ],
)

# the raw entries, duplicate field names included (a client's reply parser folds them)
_RAW = "return redis.call('XRANGE', KEYS[1], '-', '+')"


@pytest.fixture
async def env() -> AsyncIterator[tuple[WorkflowClient, Hand, Client]]:
    r = fakeredis.aioredis.FakeRedis(decode_responses=True)
    st = Settings(namespace="t", retention_ms=0)
    yield WorkflowClient(r, st, definitions=[SMALL]), Hand(r, st), Client(r, st)
    await r.aclose()


async def raw_events(c: WorkflowClient) -> list[tuple[str, list[str]]]:
    rows: Any = await c.redis.eval(_RAW, 1, c.keys.events)
    return [(str(i), [str(x) for x in f]) for i, f in rows]


async def test_workflow_entries_and_its_tasks_entries_are_tagged(
    env: tuple[WorkflowClient, Hand, Client],
) -> None:
    c, hand, tasks = env
    plain = await tasks.enqueue("t", queue="other")
    wid = await c.start("small")
    (a,) = await hand.claim()
    assert str(await hand.progress(a, 50)) == "OK"
    await hand.complete(a)
    await c.confirm(wid)  # spawns x and y
    await c.cancel(wid, "enough")  # cancels them
    events = await raw_events(c)

    notes = [f for _, f in events if "id" not in f[::2]]
    history = await c.history(wid)
    assert notes == [["wf", wid, "hid", e.id, "ev", e.event] for e in history]
    assert {"START", "SPAWN", "ASSET", "GATE", "CONFIRM", "CANCEL"} <= {e.event for e in history}

    task_entries = [dict(zip(f[::2], f[1::2], strict=True)) | {"_names": f[::2]}
                    for _, f in events if "id" in f[::2]]  # fmt: skip
    of_wf = [e for e in task_entries if e["id"] != plain]
    ids = {e["id"] for e in of_wf}
    assert a.id in ids and len(ids) == 3  # a, x, y
    for e in of_wf:
        assert e["wf"] == wid and e["_names"].count("wf") == 1, e
    for e in of_wf:
        assert e["_names"] == ["id", "hid", "wf"], e  # the entry itself is in the task
    told = set()
    for e in of_wf:
        (entry,) = [h for h in await tasks.history(e["id"]) if h.id == e["hid"]]
        told.add(entry.event)
    # every entry but a task's first (its ENQUEUE) is told
    assert told == {"START", "PROGRESS", "COMPLETE", "CANCEL"}
    assert all("wf" not in e for e in task_entries if e["id"] == plain)
    # the task's own history is as before: its ENQUEUE names the workflow, nothing else
    first, *rest = await tasks.history(a.id)
    assert first.extra.get("wf") == wid and all("wf" not in e.extra for e in rest)
