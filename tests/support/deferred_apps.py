"""Handlers that defer their attempts to the test provider (tests/support/provider.py),
importable by worker child processes as ``tests.support.deferred_apps:tasks``.

Payload: ``provider`` (its URL), ``mode`` (the provider's job mode), ``delay_ms`` (how
long the outside job runs), ``max_wait_ms`` (the longest wait), ``poll_ms``.
"""

from __future__ import annotations

from typing import Any

import httpx

from rsjobs import Context, Registry
from rsjobs.worker import PollContext, PollResult

tasks = Registry()


async def _submit(payload: dict[str, Any], callback_url: str | None) -> str:
    async with httpx.AsyncClient(timeout=10) as http:
        r = await http.post(
            payload["provider"] + "/jobs",
            json={
                "callback_url": callback_url,
                "mode": payload.get("mode", "normal"),
                "delay_ms": payload.get("delay_ms", 50),
            },
        )
        r.raise_for_status()
        return str(r.json()["id"])


@tasks.handler("gen.callback")
async def gen_callback(ctx: Context, payload: dict[str, Any]) -> Any:
    """Hands the job to the provider with this attempt's callback URL."""
    job = await _submit(payload, ctx.callback_url())
    return ctx.defer(job, provider="testprov", max_wait_ms=int(payload.get("max_wait_ms", 30_000)))


@tasks.handler("gen.poll")
async def gen_poll(ctx: Context, payload: dict[str, Any]) -> Any:
    """Hands the job to the provider without a callback: polled."""
    job = await _submit(payload, None)
    return ctx.defer(
        job,
        provider="testprov",
        max_wait_ms=int(payload.get("max_wait_ms", 30_000)),
        poll_every_ms=int(payload.get("poll_ms", 100)),
    )


@tasks.poller("gen.poll")
async def poll_gen(poll: PollContext) -> PollResult:
    async with httpx.AsyncClient(timeout=5) as http:
        r = await http.get(f"{poll.payload['provider']}/jobs/{poll.external_id}")
    body = r.json()
    if body["status"] == "running":
        return PollResult.pending()
    if body["status"] == "failed":
        return PollResult.failed(body.get("error", "failed"))
    return PollResult.done(body["result"])


@tasks.handler("quick")
async def quick(ctx: Context, payload: Any) -> Any:
    return {"attempt": ctx.attempt}


@tasks.handler("slow")
async def slow(ctx: Context, payload: dict[str, Any]) -> Any:
    """Runs ``s`` seconds (a RUNNING task for a reaper to take back once its worker died)."""
    import asyncio

    await asyncio.sleep(float(payload.get("s", 30)))
    return {"attempt": ctx.attempt}
