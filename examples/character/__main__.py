"""``python -m examples.character``: the whole pipeline, live in the terminal.

Starts an embedded redis-server (unless RSJOBS_URL names one), a worker pool per kind of
stage (params + images, action videos, emotion videos), the workflow driver, and then
plays the user: it confirms the parameters, asks for new images once (a regenerate: a
new version, the old images' tasks cancelled), confirms them, retries the emotion video
that failed, and publishes. Exits 0 once the workflow is PUBLISHED.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator

from rsjobs import Client, Settings, Worker, connect
from rsjobs.costs import WorkflowCost
from rsjobs.reaper import Reaper, ReaperConfig
from rsjobs.server import EmbeddedRedis
from rsjobs.workflows import ActionRefused, WorkflowClient, WorkflowDriver, WorkflowStatus

from .generators import tasks
from .pipeline import QUEUES, character_pipeline

TTY = sys.stdout.isatty()
COLOURS = {
    "RUNNING": "36",
    "WAITING_CONFIRMATION": "33",
    "PARTIALLY_FAILED": "31",
    "READY_TO_PUBLISH": "35",
    "PUBLISHED": "32",
    "FAILED": "31",
    "CANCELLED": "33",
}


def paint(status: str) -> str:
    code = COLOURS.get(status)
    return f"\x1b[{code}m{status}\x1b[0m" if code and TTY else status


class Screen:
    """Workflow events as lines, with a live status line under them on a terminal."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.last_line = ""
        self.last_print = 0.0

    def event(self, text: str) -> None:
        if TTY:
            sys.stdout.write("\x1b[2K\r")
        print(f"{time.monotonic() - self.t0:6.2f}s  {text}", flush=True)
        if TTY and self.last_line:
            sys.stdout.write(self.last_line)
            sys.stdout.flush()

    def status(self, doc: WorkflowStatus) -> None:
        bar = "#" * (doc.progress // 5) + "-" * (20 - doc.progress // 5)
        line = f"  [{bar}] {doc.progress:3d}%  v{doc.version}  {paint(doc.status)}  {doc.message}"
        if line == self.last_line:
            return
        self.last_line = line
        if TTY:
            sys.stdout.write("\x1b[2K\r" + line[:160])
            sys.stdout.flush()
        elif time.monotonic() - self.last_print > 1.0:
            self.last_print = time.monotonic()
            print(line, flush=True)


@contextlib.asynccontextmanager
async def background(
    url: str, settings: Settings, *, reaper: bool = False, interval_ms: int = 500
) -> AsyncIterator[list[Worker]]:
    """The worker pools and the driver, in this process. ``reaper=True``: an
    :class:`rsjobs.reaper.Reaper` instead of the bare driver (it recovers lost work and
    drives the workflows every sweep, as a deployment would run it)."""
    lease_ms = 5000
    pools = [
        Worker(tasks, url=url, settings=settings, queues=[QUEUES["params"], QUEUES["images"]],
               concurrency=2, name="pool-images", handle_signals=False, lease_ms=lease_ms),
        Worker(tasks, url=url, settings=settings, queues=[QUEUES["actions"]],
               concurrency=2, name="pool-actions", handle_signals=False, lease_ms=lease_ms),
        Worker(tasks, url=url, settings=settings, queues=[QUEUES["emotions"]],
               concurrency=8, name="pool-emotions", handle_signals=False, lease_ms=lease_ms),
    ]  # fmt: skip
    driver: Reaper | WorkflowDriver
    if reaper:
        config = ReaperConfig(interval_ms=interval_ms, lease_ms=lease_ms, log_idle=False)
        driver = Reaper(url=url, settings=settings, config=config)
    else:
        driver = WorkflowDriver(url=url, settings=settings, interval_ms=interval_ms)
    running = [asyncio.create_task(w.run()) for w in pools]
    running.append(asyncio.create_task(driver.run()))
    try:
        yield pools
    finally:
        for w in pools:
            w.stop(force=True)
        driver.stop()
        await asyncio.wait(running, timeout=15)
        for w in pools:
            await w.redis.aclose()
        await driver.close()


def describe(f: dict[str, str]) -> str:
    move = f"{f.get('from') or '-':>20} -> {paint(f['to'])}" if f["from"] != f["to"] else ""
    mark = "REFUSED " if f.get("rej") == "1" else ""
    what = f"{mark}{f['ev']:<11}"
    detail = f.get("msg", "")
    if f["ev"] == "ASSET":
        detail = f"{f.get('item')}: {f.get('ref')}"
    return f"{what} v{f.get('v')} {f.get('stage', ''):<9} {move}  {detail}".rstrip()


async def play(wf: WorkflowClient, wid: str, args: argparse.Namespace, screen: Screen) -> str:
    """Follow the workflow's history and act as the user would; returns the final status."""
    hkey = wf.keys.workflow_history(wid)
    last = "0-0"
    regenerated = args.no_regenerate
    deadline = time.monotonic() + args.timeout
    while True:
        rows = await wf.redis.xread({hkey: last}, block=250, count=100)
        for _, entries in rows or []:
            for entry_id, fields in entries:
                last = entry_id
                if fields["ev"] != "SPAWN" or args.verbose:
                    screen.event(describe(fields))
        doc = await wf.status(wid)
        screen.status(doc)
        if doc.terminal:
            return doc.status
        if time.monotonic() > deadline:
            raise SystemExit(f"character: not PUBLISHED within {args.timeout} s")
        try:
            if doc.status == "WAITING_CONFIRMATION":
                if doc.stage == "images" and not regenerated:
                    regenerated = True
                    screen.event(f"user: not quite right, regenerate the images (v{doc.version})")
                    await wf.regenerate(
                        wid, "images", reason="a friendlier look", version=doc.version
                    )
                else:
                    screen.event(f"user: confirms the {doc.stage} of version {doc.version}")
                    await wf.confirm(wid, version=doc.version, stage=doc.stage)
            elif doc.status == "PARTIALLY_FAILED" and doc.running_tasks == 0:
                failed = [
                    t.item for t in doc.tasks if t.state in ("FAILED", "TIMED_OUT", "CANCELLED")
                ]
                screen.event(f"user: retries only the failed ones: {', '.join(failed)}")
                await wf.retry(wid)
            elif doc.status == "READY_TO_PUBLISH":
                screen.event(f"user: publishes version {doc.version}")
                await wf.publish(wid, version=doc.version)
        except ActionRefused as exc:  # the workflow moved on meanwhile: look again
            screen.event(f"(refused: {exc.reason})")


def summary(doc: WorkflowStatus, assets_by_version: dict[int, int]) -> None:
    print(f"\nworkflow {doc.id}: {paint(doc.status)} (version {doc.version})")
    print("published assets (current version only):")
    for a in doc.completed_assets:
        size = os.path.getsize(a.ref) if os.path.exists(a.ref) else 0
        carried = f" (made in v{a.carried_from})" if a.carried_from else ""
        print(f"  {a.stage:<9} {a.item:<10} {a.kind:<6} {size:6d} B  {a.ref}{carried}")
    versions = ", ".join(f"v{v}: {n}" for v, n in sorted(assets_by_version.items()))
    print(f"assets kept per version: {versions}")


def cost_summary(cost: WorkflowCost) -> None:
    """What the character cost, and what of it was waste (``rsjobs cost --workflow ID``)."""
    total, waste = cost.totals.total, cost.totals.waste
    print(
        f"cost: {total.get('gpu_s', 0):.2f} GPU s, ${total.get('usd', 0):.4f} in "
        f"{total.get('attempts', 0)} attempts of {len(cost.tasks)} tasks"
    )
    kinds = ", ".join(
        f"{c} {row.get('gpu_s', 0):.2f} GPU s ({row.get('attempts', 0)} attempts)"
        for c, row in cost.totals.categories.items()
        if c != "ok"
    )
    print(f"waste: {waste.get('gpu_s', 0):.2f} GPU s, ${waste.get('usd', 0):.4f}: {kinds or '-'}")


async def main(args: argparse.Namespace) -> int:
    url = os.environ.get("RSJOBS_URL")
    server = None
    if not url:
        server = EmbeddedRedis().start()
        url = server.url
        print(f"character: started redis-server at {url}")
    namespace = f"character-{uuid.uuid4().hex[:6]}"
    settings = Settings(namespace=namespace)
    definition = character_pipeline(
        fail_rate=args.fail_rate, flaky=tuple(args.flaky), speed=args.speed
    )
    wf = WorkflowClient(connect(url), settings, definitions=[definition], source="user")
    screen = Screen()
    try:
        async with background(url, settings):
            print(f"character: 3 worker pools and the driver are up (namespace {namespace})\n")
            wid = await wf.start(
                "character",
                {"name": args.name, "background": "a lighthouse keeper's daughter who sings"},
                owner="demo",
            )
            print(f"character: workflow {wid} started; status at GET /workflows/{wid}\n")
            final = await play(wf, wid, args, screen)
        if TTY:
            print()
        doc = await wf.status(wid)
        by_version: dict[int, int] = {}
        for a in await wf.all_assets(wid):
            by_version[a.version] = by_version.get(a.version, 0) + 1
        summary(doc, by_version)
        cost_summary(await Client(wf.redis, settings).workflow_cost(wid))
        return 0 if final == "PUBLISHED" else 1
    finally:
        await wf.close()
        if server is not None:
            server.cleanup()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m examples.character", description=__doc__)
    p.add_argument("--name", default="Mei")
    p.add_argument("--speed", type=float, default=1.0, help="latency multiplier (0.2 = fast)")
    p.add_argument("--fail-rate", type=float, default=0.1, help="transient error chance")
    p.add_argument("--flaky", nargs="*", default=["angry"], help="emotions that fail once")
    p.add_argument("--no-regenerate", action="store_true", help="accept the first images")
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("-v", "--verbose", action="store_true", help="show SPAWN notes too")
    return p.parse_args(argv)


def run(argv: list[str] | None = None) -> int:
    return asyncio.run(main(parse(argv)))


if __name__ == "__main__":
    sys.exit(run())
