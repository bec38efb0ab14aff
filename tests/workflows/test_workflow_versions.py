"""Regenerate while the old version's tasks run: they end CANCELLED, a late result of the
old version is refused (and recorded), and only the new version's assets are listed."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from rsjobs import Client
from rsjobs.store.record import field
from rsjobs.workflows import WorkflowClient
from tests.support.reference import replay
from tests.support.wf_fixtures import running_worker, wait_status
from tests.support.workflows import Hand, invariants

pytestmark = pytest.mark.integration


async def test_regenerate_cancels_the_running_old_version(
    wf: WorkflowClient, redis_url: str, tmp_path: Path
) -> None:
    for item in ("front", "side"):
        (tmp_path / f"hold-{item}").touch()  # the images hang until released
    async with running_worker(redis_url) as w:
        wid = await wf.start("character", {"name": "Mei"}, owner="alice")
        await wait_status(wf, wid, "WAITING_CONFIRMATION")
        await wf.confirm(wid)
        t0 = time.monotonic()
        while (doc := await wf.status(wid)).running_tasks < 2:
            assert time.monotonic() - t0 < 5, doc
            await asyncio.sleep(0.02)
        v1_tasks = [t.id for t in doc.tasks]

        assert await wf.regenerate(wid, "images", reason="a new look") == "RUNNING"
        for tid in v1_tasks:
            assert await wf.redis.hget(wf.keys.task(tid), field("state")) == "CANCELLED"
        t0 = time.monotonic()
        while any(j.id in v1_tasks for j in w.jobs.values()):  # handlers stopped at once
            assert time.monotonic() - t0 < 2, "old handlers still running"
            await asyncio.sleep(0.01)
        for item in ("front", "side"):
            (tmp_path / f"hold-{item}").unlink()
        doc = await wait_status(wf, wid, "WAITING_CONFIRMATION")
    assert doc.version == 2 and {t.id for t in doc.tasks}.isdisjoint(v1_tasks)
    images = [a for a in doc.completed_assets if a.stage == "images"]
    assert [a.item for a in images] == ["front", "side"]
    assert all(a.version == 2 and "/v2/" in a.ref for a in images)
    params = [a for a in doc.completed_assets if a.stage == "params"]
    assert params[0].version == 2 and params[0].carried_from == 1
    tasks = Client(wf.redis, wf.settings)
    for tid in v1_tasks:  # ordinary task histories: ENQUEUE, START, ..., CANCEL
        history = await tasks.history(tid)
        assert replay(history) == []
        assert [history[0].event, history[-1].event] == ["ENQUEUE", "CANCEL"]
        assert "superseded by version 2" in history[-1].message
    regen = [e for e in await wf.history(wid) if e.event == "REGENERATE"]
    assert regen[0].extra["cancelled"] == "2" and "a new look" in regen[0].message
    assert await invariants(wf, wid, quiet=True) == []


async def test_late_result_of_an_old_version_is_refused_and_recorded(wf: WorkflowClient) -> None:
    hand = Hand(wf.redis, wf.settings)
    wid = await wf.start("character", {"name": "Mei"})
    await hand.complete((await hand.claim())[0])
    await wf.confirm(wid)
    old = {t.item: t for t in await hand.claim()}  # v1 images, RUNNING under our lease
    await hand.complete(old["side"])  # one finished before the user changed their mind
    await wf.regenerate(wid, "images")
    # the v1 front image arrives late: its task is CANCELLED, the result lands nowhere
    assert await hand.complete(old["front"]) == -2
    refused = [e for e in await wf.history(wid) if e.rejected]
    assert refused[-1].event == "RESULT" and "late COMPLETE" in refused[-1].message
    assert refused[-1].extra["task"] == old["front"].id
    rows = await wf.store.tasks.history(old["front"].id)
    assert rows is not None and rows.entries(old["front"].id)[-1].rejected
    # the new version runs; only its images are listed (v1's side image is kept as v1's)
    new = await hand.claim()
    assert {t.version for t in new} == {2}
    for t in new:
        await hand.complete(t)
    current = await wf.assets(wid)
    assert [(a.stage, a.version) for a in current] == [
        ("params", 2),
        ("images", 2),
        ("images", 2),
    ]
    assert all(a.task not in {o.id for o in old.values()} for a in current)
    every = await wf.all_assets(wid)
    assert [(a.version, a.item) for a in every if a.stage == "images"] == [
        (1, "side"),
        (2, "front"),
        (2, "side"),
    ]
    # a second regenerate keeps v2's images as v2's; v3 lists none of them
    await wf.confirm(wid)
    await wf.regenerate(wid, "images")
    v3 = await wf.status(wid)
    assert v3.version == 3 and [a.stage for a in v3.completed_assets] == ["params"]
    assert await invariants(wf, wid) == []
