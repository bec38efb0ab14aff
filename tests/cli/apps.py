"""Handlers for the command-line tests (``tests.cli.apps:tasks``): one declares its queue."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from rsjobs import Context, Registry
from rsjobs.hooks import HookEvent, Hooks

tasks = Registry()


@tasks.handler("render", queue="gpu")
async def render(ctx: Context, payload: dict[str, Any] | None) -> dict[str, Any]:
    """``steps`` steps of ``step_s`` seconds, each reported as progress."""
    payload = payload or {}
    steps = int(payload.get("steps", 4))
    for i in range(steps):
        await asyncio.sleep(float(payload.get("step_s", 0.05)))
        await ctx.progress(100 * (i + 1) / steps, f"step {i + 1}/{steps}")
    return {"attempt": ctx.attempt}


@tasks.handler("wait")
async def wait(ctx: Context, payload: dict[str, Any] | None) -> dict[str, Any]:
    """Sleeps ``s`` seconds (on whatever queue it was sent to)."""
    payload = payload or {}
    await asyncio.sleep(float(payload.get("s", 60)))
    return {"slept": payload.get("s", 60)}


@tasks.handler("chatty")
async def chatty(ctx: Context, payload: Any) -> str:
    """Logs one line from the handler (the log-format tests read it)."""
    logging.getLogger("tests.app").warning("async handler says %s", payload)
    return "ok"


@tasks.handler("chatty_sync")
def chatty_sync(ctx: Context, payload: Any) -> str:
    """As ``chatty``, from a sync handler's thread."""
    logging.getLogger("tests.app").warning("sync handler says %s", payload)
    return "ok"


def _deep(n: int) -> None:
    raise RuntimeError(f"broken at depth {n}")


@tasks.handler("broken")
async def broken(ctx: Context, payload: Any) -> None:
    """Fails with a traceback that names this module (the failure-log tests read it)."""
    _deep(int(payload))


# a registry that declares its hooks (``rsjobs dev`` runs them): each finished ``done``
# task's id is appended to the file RSJOBS_TEST_HOOK_LOG names
hooks = Hooks()
hooked = Registry(hooks=hooks)


@hooked.handler("done")
async def done(ctx: Context, payload: Any) -> str:
    return "done"


@hooks.hook(on=["SUCCEEDED"], types=["done"], name="log_done")
def log_done(event: HookEvent) -> None:
    with open(os.environ["RSJOBS_TEST_HOOK_LOG"], "a") as f:
        f.write(event.task_id + "\n")
