"""The worker's side of workflows: ending an attempt of a workflow task.

``start.lua`` tells the worker which tasks belong to a workflow (their ``wf`` field); the
worker hands the end of such an attempt here instead of to its batched ``finish.lua``
call. ``wf_finish.lua`` moves the task and accounts for it in the workflow in one step
(asset recorded, stage completed with its last asset); when that opens the next stage,
its tasks are spawned at once, or by the driver if this process dies first.
"""

from __future__ import annotations

import asyncio
import logging
import time

from ..errors import RedisUnavailable, RsjobsError
from ..store import Store, TaskKeys
from ..store.layout import Ending
from .spawn import redrive

__all__ = ["WorkflowFinisher"]

log = logging.getLogger("rsjobs.workflows")


class WorkflowFinisher:
    """Ends attempts of workflow tasks for one worker, one ``wf_finish.lua`` call each."""

    def __init__(self, store: Store, worker: str = "") -> None:
        self.store = store
        self.worker = worker

    async def finish(
        self,
        wf_id: str,
        task_id: str,
        keys: TaskKeys,
        ending: Ending,
        *,
        give_up_s: float,
    ) -> int:
        """Send one attempt's end; returns the reply code (a :class:`WfCode`; 0 when it
        was not sent).

        Transient Redis errors are retried until ``give_up_s`` (the lease: past it the
        reaper takes the task back and the result would be refused anyway).
        """
        backoff = 0.05
        deadline = time.monotonic() + give_up_s
        while True:
            try:
                # (the workflow's shard: its tasks live there)
                store = await self.store.at(wf_id)
                reply = await store.workflows.finish("worker", wf_id, keys, ending)
                break
            except RedisUnavailable as exc:
                if time.monotonic() > deadline:
                    log.error(
                        "worker %s: dropping the result of task %s after redis outage (%s); "
                        "the reaper will recover it",
                        self.worker,
                        task_id,
                        exc,
                    )
                    return 0
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
            except RsjobsError as exc:
                log.error("worker %s: ending task %s failed: %s", self.worker, task_id, exc)
                return 0
        if reply.code < 0:
            log.warning(
                "worker %s: %s of task %s refused (task is %s, workflow %s is %s): %s",
                self.worker,
                ending.event,
                task_id,
                reply.state,
                wf_id,
                reply.status,
                reply.message,
            )
        if reply.drive:
            try:
                await redrive(self.store, wf_id, "worker")
            except Exception as exc:
                # the driver will do it, or move the workflow to FAILED when it cannot go
                # on (e.g. its next tasks' payloads are over the limit); the worker goes on
                log.warning(
                    "worker %s: could not drive workflow %s (%s: %s); left to the driver",
                    self.worker,
                    wf_id,
                    type(exc).__name__,
                    exc,
                )
        return int(reply.code)
