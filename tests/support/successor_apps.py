"""Handlers of the successor tests (importable by worker child processes as
``tests.support.successor_apps:tasks``): each link of a chain says what it got from its
predecessors and when it ran, so that a test can check the order and the results passed on."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from rsjobs import Context, NonRetryable, Registry

tasks = Registry()


@tasks.handler("link")
async def link(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
    """A link of a chain: its name, the sum of its predecessors' ``n`` plus its own, what
    it got from them, and when it started and ended (time.time())."""
    started = time.time()
    await asyncio.sleep(float(payload.get("s", 0)))
    got = {tid: r for tid, r in ctx.predecessors.items()}
    n = int(payload.get("n", 1)) + sum(int(r["n"]) for r in got.values() if isinstance(r, dict))
    return {
        "name": payload.get("name", ""),
        "n": n,
        "got": got,
        "states": dict(ctx.predecessor_states),
        "started": started,
        "ended": time.time(),
        "attempt": ctx.attempt,
    }


@tasks.handler("boom")
async def boom(ctx: Context, payload: Any) -> None:
    raise NonRetryable(f"planned failure: {payload}")
