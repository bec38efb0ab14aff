"""The demo's handlers: an image-generation stand-in with latency, progress and failures.

Run a worker for them with ``rsjobs worker examples.demo_tasks:tasks``.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from examples.imaging import render_png
from rsjobs import Context, NonRetryable, Registry

tasks = Registry()

OUT = Path(os.environ.get("RSJOBS_DEMO_OUT", "out/demo"))


@tasks.handler("image.generate")
async def generate_image(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
    """Pretend to run a diffusion model: ``steps`` denoising steps of ``step_s`` seconds."""
    prompt = str(payload.get("prompt", ""))
    if "forbidden" in prompt:
        raise NonRetryable("prompt rejected by the safety filter")
    steps = int(payload.get("steps", 8))
    step_s = float(payload.get("step_s", 0.15))
    fail_until = int(payload.get("fail_until_attempt", 0))
    for i in range(steps):
        await asyncio.sleep(step_s)
        if i == steps // 2 and ctx.attempt < fail_until:
            raise RuntimeError(f"GPU out of memory at step {i + 1} (attempt {ctx.attempt})")
        await ctx.progress(100 * (i + 1) / steps, f"denoising step {i + 1}/{steps}")
    path = render_png(OUT / f"{ctx.task_id}.png", prompt)
    return {"image": str(path), "prompt": prompt, "attempt": ctx.attempt}
