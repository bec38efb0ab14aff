"""The character example's pipeline as the browser tests run it: fast stand-in settings,
workers for every stage queue and the workflow driver in the test's event loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from rsjobs import Settings, Worker
from rsjobs.workflows import WorkflowDriver

NS = "t"


def definition() -> Any:
    from examples.character.pipeline import character_pipeline

    # fast and deterministic: no transient errors, no emotion that fails on its first run
    return character_pipeline(speed=0.1, fail_rate=0.0, flaky=())


@contextlib.asynccontextmanager
async def backend(redis_url: str) -> AsyncIterator[None]:
    """Workers for every stage queue and the workflow driver, in this event loop."""
    from examples.character.generators import tasks
    from examples.character.pipeline import QUEUES

    settings = Settings(namespace=NS)
    worker = Worker(tasks, url=redis_url, settings=settings, queues=list(QUEUES.values()),
                    concurrency=8, lease_ms=3000, handle_signals=False, promote_ms=50)  # fmt: skip
    driver = WorkflowDriver(url=redis_url, settings=settings, interval_ms=100)
    running = [asyncio.create_task(worker.run()), asyncio.create_task(driver.run())]
    try:
        yield
    finally:
        worker.stop(force=True)
        driver.stop()
        await asyncio.wait_for(asyncio.gather(*running), 20)
        await worker.redis.aclose()
        await driver.close()
