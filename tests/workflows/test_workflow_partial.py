"""One of 8 parallel tasks fails: the other 7 keep their results, the workflow stays in its
stage as PARTIALLY_FAILED; retry re-runs only the failed one; the stage then completes."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsjobs import Client
from rsjobs.workflows import ActionRefused, WorkflowClient
from tests.support.reference import replay
from tests.support.wf_fixtures import running_worker, wait_status
from tests.support.workflows import EMOTIONS, invariants

pytestmark = pytest.mark.integration


async def test_one_failed_emotion_is_retried_alone(
    wf: WorkflowClient, redis_url: str, tmp_path: Path
) -> None:
    (tmp_path / "fail-angry").touch()
    async with running_worker(redis_url):
        wid = await wf.start("character", {"name": "Mei"})
        for _ in range(2):  # params and images wait at their gates
            await wait_status(wf, wid, "WAITING_CONFIRMATION")
            await wf.confirm(wid)
        doc = await wait_status(wf, wid, "PARTIALLY_FAILED", done=7)
        assert doc.stage == "emotions" and doc.failed_tasks == 1 and doc.running_tasks == 0
        assert "retry" in doc.message
        before = {t.item: t for t in doc.tasks}
        assert before["angry"].state == "FAILED"
        kept = {a.item: a for a in doc.completed_assets if a.stage == "emotions"}
        assert sorted(kept) == sorted(set(EMOTIONS) - {"angry"})
        with pytest.raises(ActionRefused):
            await wf.publish(wid)  # not every asset is there

        (tmp_path / "fail-angry").unlink()
        assert await wf.retry(wid) == "RUNNING"
        doc = await wait_status(wf, wid, "READY_TO_PUBLISH")
    after = {t.item: t for t in doc.tasks}
    # the seven that succeeded were not run again: same tasks, same assets
    for item in set(EMOTIONS) - {"angry"}:
        assert after[item].id == before[item].id and after[item].attempt == 1
        emotion = next(a for a in doc.completed_assets if a.item == item)
        assert emotion == kept[item]
    # the failed one got a new task, linked both ways; the old one stays FAILED
    new, old = after["angry"], before["angry"]
    assert new.id != old.id and new.state == "SUCCEEDED"
    tasks = Client(wf.redis, wf.settings)
    assert (await tasks.get(old.id)).state == "FAILED"
    assert await wf.redis.hget(wf.keys.task(new.id), "wf_retry_of") == old.id
    assert await wf.redis.hget(wf.keys.task(old.id), "wf_retried_as") == new.id
    assert replay(await tasks.history(new.id)) == []
    events = [(e.event, e.to_status) for e in await wf.history(wid) if e.event != "ASSET"]
    assert ("TASK_FAILED", "PARTIALLY_FAILED") in events
    assert events[-2:] == [("RETRY", "RUNNING"), ("READY", "READY_TO_PUBLISH")]
    assert await wf.publish(wid) == "PUBLISHED"
    assert await invariants(wf, wid, quiet=True) == []


async def test_a_retry_with_nothing_failed_is_refused_and_recorded(wf: WorkflowClient) -> None:
    wid = await wf.start("character", {"name": "Mei"})
    with pytest.raises(ActionRefused, match="nothing to retry"):
        await wf.retry(wid)
    refused = [e for e in await wf.history(wid) if e.rejected]
    assert [e.event for e in refused] == ["RETRY"]
