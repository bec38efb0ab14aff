"""The handlers: stand-in generators with latency, progress, failures and costs.

Each writes a real file under ``$RSJOBS_DEMO_OUT`` (default ``out/character``) and returns
``{"ref": <path>, ...}``: the asset the workflow records. Each charges what a real one
would pay for: the GPU seconds of every step (``gpu_s``) and their price (``usd``), so
``rsjobs cost --workflow <id>`` shows what a character cost, and what its failed and
regenerated work wasted. Run a pool for one stage with
``rsjobs worker examples.character.generators:tasks -q emotions``.
"""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path
from typing import Any

from examples.imaging import render_png
from rsjobs import Context, NonRetryable, Registry

from .media import render_params, render_video

tasks = Registry()

OUT = Path(os.environ.get("RSJOBS_DEMO_OUT", "out/character"))

#: what one GPU second costs the stand-in service
USD_PER_GPU_S = 0.0008


def _path(payload: dict[str, Any], ext: str) -> Path:
    return OUT / payload["workflow"] / f"v{payload['version']}" / f"{payload['item']}.{ext}"


async def _work(ctx: Context, payload: dict[str, Any], seconds: float, what: str) -> None:
    """Simulated generation: progress in steps, a transient error now and then, and the
    planned failure of a "flaky" item on its first run."""
    p = payload.get("params") or {}
    rng = random.Random(f"{payload['workflow']}:{payload['version']}:{ctx.task_id}:{ctx.attempt}")
    steps = 5
    for i in range(steps):
        step = seconds / steps * rng.uniform(0.6, 1.4)  # GPU time, whatever the demo's speed
        await asyncio.sleep(step * float(p.get("speed", 1.0)))
        ctx.charge(round(step, 3), unit="gpu_s")
        ctx.charge(round(step * USD_PER_GPU_S, 6), unit="usd")
        if i == 2 and rng.random() < float(p.get("fail_rate", 0)):
            raise RuntimeError(f"{what}: generation service timed out (transient)")
        await ctx.progress(100 * (i + 1) / steps, f"{what} {i + 1}/{steps}")
    if p.get("flaky") and payload.get("retry", 0) == 0:
        raise NonRetryable(f"{what}: content filter rejected a frame")


@tasks.handler("character.params")
async def params(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
    await _work(ctx, payload, 0.5, "writing the parameter sheet")
    path = await asyncio.to_thread(
        render_params, _path(payload, "json"), payload["input"], payload["version"]
    )
    return {"ref": str(path), "kind": "json"}


@tasks.handler("character.image")
async def image(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
    view = payload["item"]
    await _work(ctx, payload, 0.8, f"drawing the {view} view")
    sheet = payload["assets"]["params"]["params"]
    prompt = f"{payload['input']['name']} {view} {sheet} v{payload['version']}"
    path = await asyncio.to_thread(render_png, _path(payload, "png"), prompt)
    return {"ref": str(path), "kind": "image", "meta": {"view": view}}


@tasks.handler("character.video")
async def video(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
    motion = payload["item"]
    await _work(ctx, payload, 1.0, f"animating '{motion}'")
    front = payload["assets"]["images"]["front"]
    path = await asyncio.to_thread(render_video, _path(payload, "gif"), front, motion)
    return {"ref": str(path), "kind": "video", "meta": {"motion": motion}}
