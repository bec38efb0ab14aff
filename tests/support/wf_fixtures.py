"""Shared pieces of the workflow integration tests: an in-process worker and driver for
the wf_apps handlers, and waits on a workflow's status."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

from rsjobs import Settings, Worker
from rsjobs.workflows import WorkflowClient, WorkflowDriver, WorkflowStatus
from tests.support.wf_apps import tasks

NS = "t"


@contextlib.asynccontextmanager
async def running_worker(url: str, **kw: Any) -> AsyncIterator[Worker]:
    opts: dict[str, Any] = {
        "concurrency": 8,
        "lease_ms": 2000,
        "handle_signals": False,
        "promote_ms": 20,
        "queues": ["wf"],
        "settings": Settings(namespace=NS),
    }
    opts.update(kw)
    w = Worker(tasks, url=url, **opts)
    task = asyncio.create_task(w.run())
    try:
        yield w
    finally:
        w.stop()
        await asyncio.wait_for(task, 20)
        await w.redis.aclose()


@contextlib.asynccontextmanager
async def running_driver(url: str, interval_ms: int = 100) -> AsyncIterator[WorkflowDriver]:
    d = WorkflowDriver(url=url, settings=Settings(namespace=NS), interval_ms=interval_ms)
    task = asyncio.create_task(d.run())
    try:
        yield d
    finally:
        d.stop()
        await asyncio.wait_for(task, 10)
        await d.close()


async def wait_status(
    c: WorkflowClient,
    wf_id: str,
    statuses: Iterable[str] | str,
    *,
    timeout: float = 15.0,
    done: int | None = None,
) -> WorkflowStatus:
    """Poll the status document until its status is one of ``statuses`` (and, with
    ``done``, that many assets of the current stage are recorded)."""
    wanted = {statuses} if isinstance(statuses, str) else set(statuses)
    deadline = time.monotonic() + timeout
    while True:
        doc = await c.status(wf_id)
        info = await c.get(wf_id)
        if doc.status in wanted and (done is None or info.done == done):
            return doc
        if time.monotonic() > deadline:
            raise AssertionError(f"workflow {wf_id} is {doc.status} ({doc.message})")
        await asyncio.sleep(0.02)
