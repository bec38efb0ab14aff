"""Poison workflows against real processes: `rsjobs reaper` and `rsjobs workflows drive`
stay up, keep recovering and driving other work, and each poison workflow ends FAILED
with its reason.

Two ways a workflow cannot go on: a start whose process died before spawning (or a client
with a larger payload limit) leaves a first stage whose payloads are over the driver's
limit; and an input that fits at start, whose next stage's payloads (the input plus the
references of the earlier assets) do not, found when the worker completes the stage. A
third workflow's stored plan does not decode.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rsjobs import Client, Settings, connect
from rsjobs.workflows import Stage, TaskSpec, WorkflowClient, WorkflowDefinition, fan_out
from tests.support.processes import ROOT, spawn_worker, start_as, stop_process
from tests.support.reaper import spawn_reaper, wait_history
from tests.support.waits import on_keys
from tests.support.wf_fixtures import wait_status
from tests.support.workflows import raw_start, replay

pytestmark = pytest.mark.integration

NS = "wp"
LIMIT = 1 << 20

#: stage one's asset reference is large: its input fits, stage two's payloads do not
CHAIN = WorkflowDefinition(
    "chain",
    [
        Stage("one", [TaskSpec(item="a", type="wf.big", params={"ref_bytes": 500_000})],
              queue="wf"),
        Stage("two", fan_out("wf.make", ["x", "y"]), queue="wf"),
    ],
)  # fmt: skip
FLAT = WorkflowDefinition("flat", [Stage("only", fan_out("wf.make", ["p", "q"]), queue="wf")])


def spawn_driver(url: str, log_path: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "rsjobs", "--url", url, "--namespace", NS,
           "workflows", "drive", "--interval-ms", "200"]  # fmt: skip
    with open(log_path, "wb") as log:
        return subprocess.Popen(cmd, env=env, cwd=ROOT, stderr=log, start_new_session=True)


async def ghost_task(c: Client, queue: str = "default") -> str:
    """A plain task started by a consumer that vanished: only the reaper brings it back."""
    tid = await c.enqueue("echo", {"hello": 1}, queue=queue, max_attempts=3)
    (reply,) = await start_as(c, "ghost", lease_ms=500, nonce="g", queue=queue, count=1)
    assert reply.code == 1 and reply.id == tid
    return tid


async def test_reaper_and_driver_survive_poison_workflows(redis_url: str, tmp_path: Path) -> None:
    wf = WorkflowClient(connect(redis_url), Settings(namespace=NS), definitions=[CHAIN, FLAT])
    tasks = Client(wf.redis, wf.settings)
    reaper = spawn_reaper(redis_url, NS, str(tmp_path / "reaper.log"), "--interval-ms", "200",
                          "--lease-ms", "500", "--deadline-grace-ms", "0")  # fmt: skip
    driver = spawn_driver(redis_url, tmp_path / "driver.log")
    worker = spawn_worker(redis_url, NS, "-q", "wf", "-q", "default", "--lease-ms", "1000",
                          "-c", "4", app="tests.support.wf_apps:tasks")  # fmt: skip
    try:
        # path 1: RUNNING at its first stage with no task, the stage over the limit
        first = await raw_start(wf, CHAIN, {"blob": "b" * (LIMIT + 1000)})
        # path 2: fits at start; its second stage does not
        second = await wf.start("chain", {"blob": "b" * 600_000})
        # and one whose stored plan does not decode
        broken = await raw_start(wf, FLAT, {"name": "?"}, plan=b"{not json")
        good = await wf.start("flat", {"name": "Mei"})
        ghost = await ghost_task(tasks)

        for wid in (first, second):
            doc = await wait_status(wf, wid, "FAILED", timeout=30)
            assert doc.reason.startswith("its next tasks cannot be created: the payload of task")
            assert replay(await wf.history(wid)) == []
            last = (await wf.history(wid))[-1]
            assert (last.event, last.to_status) == ("ABORT", "FAILED")
            assert not await wf.redis.sismember(wf.keys.workflows_active, wid)
        assert "of stage 'one'" in (await wf.get(first)).reason
        info = await wf.get(second)
        assert "of stage 'two'" in info.reason and "over the limit of 1048576 bytes" in info.reason
        assert len(await wf.assets(second)) == 1  # stage one completed before

        async def ended() -> dict[str, str] | None:
            h: dict[str, str] = await wf.redis.hgetall(wf.keys.workflow(broken))
            return h if h["status"] != "RUNNING" else None

        h = await on_keys(wf.redis, [wf.keys.workflow(broken)], ended, 30, "broken ended")
        assert h["status"] == "FAILED" and "its plan does not decode" in h["reason"]

        # the rest of the namespace went on: the good workflow, the lost plain task
        await wait_status(wf, good, "READY_TO_PUBLISH", timeout=30)
        g = await tasks.wait(ghost, timeout_ms=30_000)
        assert g.state == "SUCCEEDED" and g.attempt == 2
        assert "RECLAIM" in [e.event for e in await tasks.history(ghost)]

        # and they are still at work sweeps later: a task lost after the poison is
        # reclaimed (its lease ends after two more sweeps at least; no worker serves its
        # queue, so the reaper's RECLAIM is what brings it back), more work is driven
        lost = await ghost_task(tasks, queue="spare")
        later = await wf.start("flat", {"name": "Lin"})
        await wait_history(tasks, lost, lambda e: e.event == "RECLAIM", timeout=30)
        await wait_status(wf, later, "READY_TO_PUBLISH", timeout=30)
        assert reaper.poll() is None, (tmp_path / "reaper.log").read_text()[-2000:]
        assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-2000:]
        for p in (reaper, driver):
            p.send_signal(signal.SIGTERM)
            assert p.wait(15) == 0
    finally:
        for p in (reaper, driver, worker):
            stop_process(p)
        await wf.close()
    logs = (tmp_path / "reaper.log").read_text() + (tmp_path / "driver.log").read_text()
    assert "FAILED (ABORT)" in logs or '"workflows_aborted":1' in logs


async def test_a_repeated_start_of_a_workflow_that_cannot_go_on_answers_its_id(
    redis_url: str,
) -> None:
    """The first start's reply was lost; by the repeat, stage one has completed and stage
    two cannot be spawned (over the limit). The repeat drives the workflow like any start,
    but that stage's failure is the workflow's (the driver records it), not the start's:
    the caller gets the id, as the first start would have answered."""
    wf = WorkflowClient(connect(redis_url), Settings(namespace=NS + "r"), definitions=[CHAIN])
    worker = spawn_worker(redis_url, NS + "r", "-q", "wf", "--lease-ms", "1000", "-c", "2",
                          app="tests.support.wf_apps:tasks")  # fmt: skip
    wid = "ab" * 16
    try:
        assert await wf.start("chain", {"blob": "b" * 600_000}, workflow_id=wid) == wid

        async def stage_one_done() -> bool:  # stage one done; stage two was refused
            return len(await wf.assets(wid)) == 1

        await on_keys(wf.redis, [wf.keys.workflow_assets(wid)], stage_one_done, 30, "asset")
        assert await wf.start("chain", {"blob": "b" * 600_000}, workflow_id=wid) == wid
        assert (await wf.get(wid)).status == "RUNNING"  # no driver here: left for its ABORT
    finally:
        stop_process(worker)
        await wf.close()
