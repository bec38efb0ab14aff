"""SIGKILL a worker in the middle of a stage: the reaper takes its tasks back (RECLAIM), a
second worker runs them, and the workflow still completes, every task ending once."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import time
from collections.abc import AsyncIterator

import pytest

from rsjobs import Client, Settings, connect
from rsjobs.reaper import Reaper, ReaperConfig
from rsjobs.workflows import Stage, WorkflowClient, WorkflowDefinition, fan_out
from tests.support.processes import spawn_worker, stop_process
from tests.support.reference import replay
from tests.support.wf_fixtures import NS, running_driver, wait_status
from tests.support.workflows import EMOTIONS, invariants

pytestmark = pytest.mark.integration

LEASE_MS = 1000
SLOW = WorkflowDefinition(
    "slow",
    [
        Stage("images", fan_out("wf.make", ["front", "side"]), queue="wf", gate=True),
        Stage(
            "emotions",
            fan_out("wf.make", EMOTIONS, params=lambda i: {"s": 1.2, "steps": 6}),
            queue="wf",
        ),
    ],
)


def worker(url: str, name: str) -> subprocess.Popen[bytes]:
    return spawn_worker(
        url, NS, "-q", "wf", "--lease-ms", str(LEASE_MS), "--name", name, "-c", "4",
        "--grace-ms", "500", app="tests.support.wf_apps:tasks",
    )  # fmt: skip


@contextlib.asynccontextmanager
async def reaper_loop(url: str) -> AsyncIterator[Reaper]:
    config = ReaperConfig(
        interval_ms=200, lease_ms=LEASE_MS, dead_after_leases=2, deadline_grace_ms=0
    )
    reaper = Reaper(url=url, settings=Settings(namespace=NS), config=config)
    task = asyncio.create_task(reaper.run())
    try:
        yield reaper
    finally:
        reaper.stop()
        await asyncio.wait_for(task, 10)
        await reaper.close()


async def test_sigkilled_worker_mid_stage_the_workflow_still_completes(redis_url: str) -> None:
    wf = WorkflowClient(connect(redis_url), Settings(namespace=NS), definitions=[SLOW])
    tasks = Client(wf.redis, wf.settings)
    procs = [worker(redis_url, "wa"), worker(redis_url, "wb")]
    try:
        async with reaper_loop(redis_url), running_driver(redis_url):
            wid = await wf.start("slow", {"name": "Mei"})
            await wait_status(wf, wid, "WAITING_CONFIRMATION", timeout=20)
            await wf.confirm(wid)
            t0 = time.monotonic()
            victims: list[str] = []
            while not victims:
                assert time.monotonic() - t0 < 10, "no emotion task ran on wa"
                doc = await wf.status(wid)
                for t in doc.tasks:
                    info = await tasks.get(t.id)
                    if info.state == "RUNNING" and info.worker == "wa" and info.progress > 0:
                        victims.append(t.id)
                await asyncio.sleep(0.02)
            procs[0].send_signal(signal.SIGKILL)
            procs[0].wait(5)
            doc = await wait_status(wf, wid, "READY_TO_PUBLISH", timeout=30)
            assert await wf.publish(wid) == "PUBLISHED"
        for tid in victims:
            history = await tasks.history(tid)
            assert replay(history) == []
            events = [(e.event, e.to_state) for e in history if not e.rejected]
            assert ("RECLAIM", "PENDING") in events and events[-1] == ("COMPLETE", "SUCCEEDED")
            info = await tasks.get(tid)
            assert info.worker == "wb" and info.attempt == 2
        assert len([a for a in doc.completed_assets if a.stage == "emotions"]) == 8
        assert await invariants(wf, wid, quiet=True) == []
    finally:
        for p in procs:
            stop_process(p)
        await wf.close()
