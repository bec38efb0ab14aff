"""saq application: one Redis queue and its worker settings for the ``saq`` CLI
(``saq bench.peers.saq_app.settings``)."""

from __future__ import annotations

from typing import Any

from saq import Queue

from bench.handler_support import task_ran
from bench.peers.base import TASK_NAME, concurrency, redis_url

queue = Queue.from_url(redis_url(), name="bench")


async def noop(ctx: dict[str, Any], *, i: int) -> None:
    await task_ran(i)


settings = {
    "queue": queue,
    "functions": [(TASK_NAME, noop)],
    "concurrency": concurrency(),
}
