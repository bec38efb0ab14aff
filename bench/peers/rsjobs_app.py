"""rsjobs application: the Registry the ``rsjobs worker`` CLI runs
(``rsjobs worker bench.peers.rsjobs_app:tasks``)."""

from __future__ import annotations

from typing import Any

import rsjobs
from bench.handler_support import task_ran
from bench.peers.base import TASK_NAME, check_import_root
from rsjobs import Context, Registry

# a worker of a paired run (bench.run --baseline) runs the side it was started for
check_import_root(rsjobs.__file__)

NAMESPACE = "bench"
QUEUE = "bench"

tasks = Registry()


@tasks.handler(TASK_NAME)
async def noop(ctx: Context, payload: dict[str, Any]) -> None:
    await task_ran(payload["i"])
