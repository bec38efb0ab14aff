"""Handlers of the workflow tests (importable by worker child processes as
tests.integration.wf_apps:tasks). Behaviour comes from the task's params: ``s`` / ``steps``
(duration, progress steps), ``hold_flag`` (wait while that file exists), ``fail_flag``
(fail, non-retryably, while that file exists)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from rsjobs import Context, NonRetryable, Registry

tasks = Registry()


def _flag(path: str | None) -> bool:
    return bool(path) and os.path.exists(str(path))


@tasks.handler("wf.make")
async def make(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
    p = payload.get("params") or {}
    for _ in range(3000):  # held (at most a minute) while the hold flag exists
        if not _flag(p.get("hold_flag")):
            break
        await asyncio.sleep(0.02)
    steps = int(p.get("steps", 2))
    total = float(p.get("s", 0.02))
    for i in range(steps):
        await asyncio.sleep(total / steps)
        await ctx.progress(100 * (i + 1) / steps, f"step {i + 1}/{steps}")
    if _flag(p.get("fail_flag")):
        raise NonRetryable(f"planned failure of {payload['item']}")
    ref = "mem://{workflow}/v{version}/{stage}/{item}".format(**payload)
    return {"ref": f"{ref}/{ctx.task_id}", "meta": {"worker": ctx.worker, "pid": os.getpid()}}


@tasks.handler("wf.big")
async def big(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
    """An asset whose reference is ``params.ref_bytes`` long: the next stage's payloads
    (which carry the references of earlier assets) grow by as much."""
    n = int((payload.get("params") or {}).get("ref_bytes", 10))
    return {"ref": "r" * n}


@tasks.handler("echo")
async def echo(ctx: Context, payload: Any) -> Any:
    """A plain task (no workflow)."""
    return payload
