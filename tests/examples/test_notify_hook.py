"""examples/notify_hooks.py: a worker finishes image tasks, the hook runner mails once per
finished image task (not for other types, not for a repeated delivery)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from examples import notify_hooks
from rsjobs import Client, Context, Registry, Settings, Worker
from rsjobs.hooks import HookRunner


async def test_the_notification_hook_mails_each_finished_image_task_once(
    client: Client, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    tasks = Registry()

    @tasks.handler("image.make")
    async def make(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
        if payload.get("fail"):
            raise ValueError("no GPU")
        return {"url": f"/img/{payload['n']}.png"}

    @tasks.handler("text.make")
    async def text(ctx: Context, payload: Any) -> None:
        return None

    w = Worker(
        tasks, url=redis_url, settings=Settings(namespace="t"), handle_signals=False, block_ms=50
    )
    run = asyncio.create_task(w.run())
    runner = HookRunner(client.store, notify_hooks.hooks, name="r1", block_ms=20)
    await runner.start()
    caplog.set_level(logging.INFO, logger="examples.notify")
    try:
        ok = await client.enqueue("image.make", {"n": 1}, owner="ann")
        bad = await client.enqueue("image.make", {"fail": True}, owner="bob", max_attempts=1)
        other = await client.enqueue("text.make", {})
        for tid in (ok, bad, other):
            await client.wait(tid, timeout_ms=15_000)
        deadline = time.monotonic() + 10
        while len([r for r in caplog.records if r.name == "examples.notify"]) < 2:
            assert time.monotonic() < deadline
            await runner.step()
        await runner.step()
    finally:
        await runner.close()
        w.stop(force=True)
        await asyncio.wait_for(run, 20)
        await w.redis.aclose()
    mails = [r.getMessage() for r in caplog.records if r.name == "examples.notify"]
    assert len(mails) == 2
    assert any(
        m.startswith(f"mail to ann: task {ok} succeeded") and "/img/1.png" in m for m in mails
    )
    assert any(m.startswith(f"mail to bob: task {bad} failed") and "no GPU" in m for m in mails)
