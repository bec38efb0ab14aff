"""Successor tasks end to end: an image render that defers to an outside generation
service, a watermark task that waits for the render and reads its result, and a hook that
mails the owner when a watermarked render is ready (or why it is not).

``python -m examples.watermark`` starts an embedded redis-server (unless RSJOBS_URL names
one), the web app (it takes the provider's callbacks), a stand-in generation service
(tests/support/provider.py: a small Starlette app on 127.0.0.1 that finishes a job later
and calls back), a worker and the hook runner, then submits three renders, each with a
watermark successor::

    render = client.enqueue("image.render", {"prompt": ...}, owner=...)
    client.enqueue("image.watermark", {"text": "© rsjobs"}, after=[render], owner=...)

The render hands its job to the provider (``ctx.defer``) and frees its worker slot; the
provider's callback completes it, which releases its watermark with the render's result in
``ctx.predecessors``. One render is made to fail at the provider: its watermark is
cancelled, with the render's id and state as the reason, and never runs. The hook mails
(logs) each watermark's end. Prints every task's end and exits 0 when all went as planned.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from rsjobs import Client, Context, Registry, Settings, Worker
from rsjobs.hooks import HookEvent, HookRunner, Hooks
from rsjobs.server import EmbeddedRedis
from rsjobs.web import WebConfig, create_app

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from examples.imaging import render_png  # noqa: E402
from tests.support.provider import Provider  # noqa: E402
from tests.support.web import ServerThread  # noqa: E402

SECRET = "example-callback-secret-0123456789"
NS = "watermark-example"
OUT = Path(tempfile.gettempdir()) / "rsjobs-watermark-example"

tasks = Registry()
hooks = Hooks()
log = logging.getLogger("examples.watermark")
#: the mails the hook sent: (to, subject)
mailed: list[tuple[str, str]] = []


@tasks.handler("image.render")
async def render(ctx: Context, payload: dict[str, Any]) -> Any:
    """Hands the render to the generation service; its callback ends the attempt."""
    async with httpx.AsyncClient(timeout=10) as http:
        r = await http.post(
            payload["provider"] + "/jobs",
            json={"callback_url": ctx.callback_url(), "mode": payload.get("mode", "normal"),
                  "delay_ms": 300},
        )  # fmt: skip
        r.raise_for_status()
    return ctx.defer(r.json()["id"], provider="genco", max_wait_ms=30_000)


@tasks.handler("image.watermark")
def watermark(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
    """Reads its render's result (``ctx.predecessors``) and writes the marked image."""
    ((render_id, made),) = ctx.predecessors.items()
    source = made["image"]
    path = render_png(OUT / f"{ctx.task_id}.png", f"{source} {payload['text']}")
    return {"image": str(path), "from": source, "render": render_id, "mark": payload["text"]}


@hooks.hook(on=["SUCCEEDED", "CANCELLED"], types=["image.watermark"], max_attempts=5)
def notify(event: HookEvent) -> None:
    """Mails the owner once per watermark's end (stands in for a mail client)."""
    task = event.task
    to = task.owner if task is not None and task.owner else "someone"
    if event.state == "SUCCEEDED" and task is not None:
        subject = f"your image is ready: {task.result['image']}"
    else:
        subject = f"your image could not be made: {task.error if task is not None else '?'}"
    if (to, subject) not in mailed:  # at least once: deduplicated here
        mailed.append((to, subject))
        log.info("mail to %s: %s", to, subject)


async def run(url: str) -> int:
    provider = Provider().start()
    app = create_app(url, namespace=NS, dev=True, env={},
                     config=WebConfig(callback_secret=SECRET, serve_ui=False))  # fmt: skip
    web = ServerThread(app).start()
    settings = Settings(namespace=NS)
    worker = Worker(tasks, url=url, settings=settings, concurrency=2, handle_signals=False,
                    callback_secret=SECRET, callback_url=web.url)  # fmt: skip
    client = Client.from_url(url, namespace=NS)
    runner = HookRunner(client.store, hooks, name="mailer", block_ms=50)
    stop = asyncio.Event()
    await runner.start()
    parts = [asyncio.create_task(worker.run()), asyncio.create_task(runner.run(stop))]
    ok = True
    try:
        plan = [("ann", "a lighthouse", "normal"), ("bob", "a fox", "fail"),
                ("cy", "a harbour", "normal")]  # fmt: skip
        pairs = []
        for owner, prompt, mode in plan:
            job = {"prompt": prompt, "mode": mode, "provider": provider.url}
            r = await client.enqueue("image.render", job, owner=owner, max_attempts=1)
            mark = {"text": "© rsjobs"}
            w = await client.enqueue("image.watermark", mark, after=[r], owner=owner)
            print(f"{owner}: render {r[:8]} -> watermark {w[:8]} ({(await client.get(w)).state})")
            pairs.append((owner, mode, r, w))
        for owner, mode, r, w in pairs:
            rendered, marked = (
                await client.wait(r, timeout_ms=30_000),
                await client.wait(w, timeout_ms=30_000),
            )
            print(f"{owner}: render {rendered.state:<9} watermark {marked.state:<9} "
                  f"{marked.result or marked.error}")  # fmt: skip
            if mode == "fail":
                cancel = [e for e in await client.history(w) if e.event == "CANCEL"]
                ok = ok and rendered.state == "FAILED" and marked.state == "CANCELLED"
                ok = ok and marked.attempt == 0 and cancel[0].extra["pred"] == r
            else:
                ok = ok and rendered.state == marked.state == "SUCCEEDED"
                ok = ok and marked.result["from"] == rendered.result["image"]
                ok = ok and await asyncio.to_thread(os.path.exists, marked.result["image"])
        for _ in range(200):  # the hook runs beside the tasks: wait for its three mails
            if len(mailed) >= len(plan):
                break
            await asyncio.sleep(0.05)
        for to, subject in mailed:
            print(f"mailed {to}: {subject}")
        ok = ok and sorted(to for to, _ in mailed) == ["ann", "bob", "cy"]
    finally:
        stop.set()
        worker.stop()
        await asyncio.gather(*parts)
        await runner.close()
        await client.close()
        web.stop()
        provider.stop()
    print("all as planned" if ok else "NOT as planned")
    return 0 if ok else 1


def main() -> int:
    logging.basicConfig(level=logging.WARNING)
    url = os.environ.get("RSJOBS_URL")
    if url:
        return asyncio.run(run(url))
    with EmbeddedRedis() as server:
        return asyncio.run(run(server.url))


if __name__ == "__main__":
    sys.exit(main())
