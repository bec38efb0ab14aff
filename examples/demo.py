"""`make demo`: a real Redis, workers and a producer, with every task's live state, then
the character workflow end to end, live in the terminal and in the browser.

Part 1, tasks: starts an embedded redis-server (unless RSJOBS_URL names one), starts a
worker process, submits image-generation-like tasks that end in every terminal state (one
is cancelled while it runs, one is paused and resumed) and prints each transition as it
happens from the events stream.

Part 2, the workflow (examples/character): starts the web app (uvicorn on 127.0.0.1, a
free port, dev mode, the character definition, the example's output directory as asset
root), one worker pool per kind of stage and a reaper (which drives the workflows every
sweep); starts the pipeline through ``POST /workflows`` and prints the address of the
workflow page to watch it live; then plays the user over the HTTP API: each gate is
confirmed after a short pause (the images are regenerated once first, a new version), the
emotion video that fails is retried, and the result is published. Checks that the app
serves every asset file.

Run in a terminal, it then keeps the page, the workers and Redis up until Ctrl-C (and
prints an ``rsjobs ... queues`` line to try meanwhile); anywhere else (CI, a pipe) it
stops everything at once. ``--linger SECONDS`` sets that time either way. Exits 0 only if
every task and the workflow reached the expected end.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import httpx
import msgspec
import uvicorn
from starlette.applications import Starlette

from rsjobs import Client, Settings, connect
from rsjobs.model import TERMINAL
from rsjobs.server import EmbeddedRedis, free_port
from rsjobs.web import create_app
from rsjobs.workflows import WorkflowClient, WorkflowStatus

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLOURS = {
    "SUCCEEDED": "32",
    "FAILED": "31",
    "CANCELLED": "33",
    "TIMED_OUT": "35",
    "RUNNING": "36",
    "PAUSED": "34",
    "SCHEDULED": "34",
}


def paint(state: str) -> str:
    code = COLOURS.get(state)
    if not code or not sys.stdout.isatty():
        return state
    return f"\x1b[{code}m{state}\x1b[0m"


#: (prompt, handler parameters, enqueue options, the state it must end in)
JOBS: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    ("a watercolour fox", {"steps": 6}, {}, "SUCCEEDED"),
    ("a neon city at night", {"steps": 8}, {}, "SUCCEEDED"),
    (
        "portrait, retried after a GPU error",
        {"steps": 6, "fail_until_attempt": 2},
        {"backoff_base_ms": 300},
        "SUCCEEDED",
    ),
    ("forbidden content", {"steps": 4}, {}, "FAILED"),
    (
        "a huge 8k panorama (times out)",
        {"steps": 40, "step_s": 0.2},
        {"timeout_ms": 1500, "max_attempts": 1},
        "TIMED_OUT",
    ),
    ("a cat astronaut (cancelled while running)", {"steps": 40}, {}, "CANCELLED"),
    ("a lighthouse (scheduled 1 s later)", {"steps": 4}, {"delay_ms": 1000}, "SUCCEEDED"),
    ("a mountain lake (paused, then resumed)", {"steps": 30, "step_s": 0.1}, {}, "SUCCEEDED"),
]


async def produce_and_watch(client: Client) -> dict[str, str]:
    labels: dict[str, str] = {}
    events = client.store.events
    last = await events.last_id()
    ids = []
    for prompt, params, opts, _ in JOBS:
        tid = await client.enqueue(
            "image.generate", {"prompt": prompt, **params}, owner="demo", **opts
        )
        labels[tid] = prompt
        ids.append(tid)
    cancel_id, pause_id = ids[5], ids[7]
    actions_done: set[str] = set()
    t0 = time.monotonic()
    finished: set[str] = set()
    resume_task = None
    seen: dict[str, int] = {}  # task id -> the last history entry printed
    while len(finished) < len(ids):
        if time.monotonic() - t0 > 60:
            raise SystemExit("demo: tasks did not finish within 60 s")
        # the events stream names the task and entry; the entry is read from the task
        rows = await events.read(last, 200, 500)
        for eid, ev in rows:
            last = eid
            tid = ev.get("id", "")
            if tid not in labels:
                continue
            for e in await client.history(tid, after=str(seen.get(tid, 0))):
                seen[tid] = int(e.id)
                label = labels[tid][:42]
                if e.rejected:
                    line = f"refused {e.event}: {e.message}"
                elif e.event == "PROGRESS":
                    line = f"{float(e.extra['p']):5.1f}%  {e.message}"
                else:
                    line = f"{e.event:<8} {e.from_state or '-':>9} -> {paint(e.to_state)}"
                    if e.message:
                        line += f"  ({e.message[:60]})"
                print(f"{time.monotonic() - t0:6.2f}s  {tid[:8]}  {label:<42}  {line}", flush=True)
                if e.to_state in TERMINAL and not e.rejected:
                    finished.add(tid)
                f = e.extra
                # drive the scripted user actions off what we see
                if (
                    tid == cancel_id
                    and f.get("p")
                    and float(f["p"]) >= 10
                    and "c" not in actions_done
                ):
                    actions_done.add("c")
                    print(f"          user cancels {tid[:8]} while it runs", flush=True)
                    await client.cancel(tid, "user pressed cancel")
                if (
                    tid == pause_id
                    and f.get("p")
                    and float(f["p"]) >= 20
                    and "p" not in actions_done
                ):
                    actions_done.add("p")
                    print(f"          user pauses {tid[:8]}", flush=True)
                    await client.pause(tid, "user pressed pause")
                    resume_task = asyncio.create_task(resume_later(client, tid))
    if resume_task is not None:
        await resume_task
    return labels


async def resume_later(client: Client, tid: str) -> None:
    await asyncio.sleep(0.5)
    print(f"          user resumes {tid[:8]}", flush=True)
    await client.resume(tid, "user pressed resume")


async def summary(client: Client, labels: dict[str, str]) -> tuple[set[str], list[str]]:
    """Prints the final states; returns them and the tasks that did not end as expected."""
    print("\nfinal states:")
    states = set()
    wrong = []
    for (tid, label), job in zip(labels.items(), JOBS, strict=True):
        info = await client.get(tid)
        states.add(info.state)
        if info.state != job[3]:
            wrong.append(f"{tid[:8]} {label!r} ended {info.state}, expected {job[3]}")
        detail = info.result.get("image") if isinstance(info.result, dict) else info.error
        print(
            f"  {tid[:8]}  {label[:42]:<42}  {paint(info.state):<10} attempts={info.attempt}"
            f"  {detail}"
        )
    print(f"\nhistory of the cancelled task ({list(labels)[5][:8]}), as `rsjobs history` shows it:")
    for e in await client.history(list(labels)[5]):
        mark = "REFUSED " if e.rejected else ""
        print(
            f"  {mark}{e.event:<9} {e.from_state or '-':>9} -> {e.to_state:<10} "
            f"src={e.source:<6} att={e.attempt} {e.message}"
        )
    return states, wrong


async def tasks_part(url: str) -> bool:
    """Part 1: tasks reaching every terminal state. True when each ended as expected."""
    namespace = f"demo-{uuid.uuid4().hex[:6]}"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rsjobs",
            "--url",
            url,
            "--namespace",
            namespace,
            "--log-level",
            "WARNING",
            "worker",
            "examples.demo_tasks:tasks",
            "-c",
            "4",
            "--lease-ms",
            "5000",
            "--grace-ms",
            "3000",
        ],
        cwd=ROOT,
        env=env,
    )
    print(f"demo: started worker pid {worker.pid} (namespace {namespace}, concurrency 4)\n")
    NAMESPACES.append(namespace)
    client = Client.from_url(url, namespace=namespace, source="user")
    try:
        labels = await produce_and_watch(client)
        states, wrong = await summary(client, labels)
        missing = TERMINAL - states
        print(f"\nterminal states reached: {', '.join(sorted(states))}")
        if missing:
            print(f"demo: missing terminal states {sorted(missing)}")
        for line in wrong:
            print(f"demo: {line}")
        print(f"task hashes live at rsjobs:{{{namespace}}}:task:<id> (see README, key layout)")
        return not missing and not wrong
    finally:
        await client.close()
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(15)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        print(f"demo: worker stopped (exit {worker.returncode})")


# -- part 2: the character workflow ---------------------------------------------------------

#: the namespaces the demo used (tasks, workflow), for the `rsjobs queues` line it prints
NAMESPACES: list[str] = []


def rsjobs_command() -> str:
    """How to run the CLI from here: the venv's ``rsjobs`` next to this Python."""
    exe = os.path.join(os.path.dirname(sys.executable), "rsjobs")
    if not os.path.exists(exe):
        return "rsjobs"
    rel = os.path.relpath(exe)
    return rel if not rel.startswith("..") else exe


def try_lines(url: str) -> list[str]:
    cli = rsjobs_command()
    return [f"{cli} --url {url} --namespace {ns} queues" for ns in NAMESPACES]


async def until_stopped(seconds: float) -> None:
    """Sleep ``seconds`` (inf: forever), or until SIGINT / SIGTERM; either ends normally."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        timeout = None if math.isinf(seconds) else seconds
        try:
            await asyncio.wait_for(stop.wait(), timeout)
        except TimeoutError:
            return
        print("\ndemo: stopping (Ctrl-C)", flush=True)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


class WebThread:
    """uvicorn serving ``app`` on 127.0.0.1 in a thread with its own event loop (so Ctrl-C
    reaches the demo, not the server)."""

    def __init__(self, app: Starlette) -> None:
        self.app = app
        self.port = free_port()
        self.server = uvicorn.Server(
            uvicorn.Config(
                app,
                host="127.0.0.1",
                port=self.port,
                log_level="warning",
                lifespan="on",
                timeout_graceful_shutdown=2,
            )
        )
        self.thread = threading.Thread(target=self.server.run, name="demo-web", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the web app did not start")
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        self.app.state.rsjobs.close_streams()
        self.server.should_exit = True
        await asyncio.to_thread(self.thread.join, 10)


class User:
    """Plays the user of the workflow page over the HTTP API: confirms each gate after a
    pause (regenerating the images once first), retries failed tasks, publishes."""

    def __init__(self, http: httpx.AsyncClient, wid: str, pause: float, screen: Any) -> None:
        self.http, self.wid, self.pause, self.screen = http, wid, pause, screen
        self.regenerated = False
        self.waiting: tuple[str, int, str] | None = None
        self.due = 0.0

    async def status(self) -> WorkflowStatus:
        r = await self.http.get(f"/workflows/{self.wid}")
        r.raise_for_status()
        return msgspec.convert(r.json(), WorkflowStatus)

    async def act(self, action: str, body: dict[str, Any]) -> None:
        r = await self.http.post(f"/workflows/{self.wid}/{action}", json=body)
        if r.status_code == 409:  # e.g. someone pressed the button on the page first
            self.screen.event(f"(refused: {r.json()['detail']})")
        elif r.status_code != 200:
            raise RuntimeError(f"POST /workflows/{self.wid}/{action}: {r.status_code} {r.text}")

    async def step(self, doc: WorkflowStatus) -> None:
        """Act on ``doc`` once its decision has been on screen for ``pause`` seconds."""
        key = (doc.status, doc.version, doc.stage)
        if doc.status not in ("WAITING_CONFIRMATION", "READY_TO_PUBLISH", "PARTIALLY_FAILED"):
            self.waiting = None
            return
        if doc.status == "PARTIALLY_FAILED" and doc.running_tasks:
            return  # let the rest of the stage finish first
        if self.waiting != key:
            self.waiting, self.due = key, time.monotonic() + self.pause
            what = {
                "WAITING_CONFIRMATION": f"the gate after {doc.stage} (v{doc.version}) waits for "
                "confirmation",
                "READY_TO_PUBLISH": f"version {doc.version} is ready to publish",
                "PARTIALLY_FAILED": "a task failed; the others kept their results",
            }[doc.status]
            self.screen.event(
                f"user: {what}; the demo decides in {self.pause:g} s (or use the page)"
            )
            return
        if time.monotonic() < self.due:
            return
        self.waiting = None
        if doc.status == "WAITING_CONFIRMATION":
            if doc.stage == "images" and not self.regenerated:
                self.regenerated = True
                self.screen.event(f"user: not quite right, regenerate the images (v{doc.version})")
                await self.act(
                    "regenerate",
                    {"stage": "images", "version": doc.version, "reason": "a friendlier look"},
                )
            else:
                self.screen.event(f"user: confirms the {doc.stage} of version {doc.version}")
                await self.act("confirm", {"version": doc.version, "stage": doc.stage})
        elif doc.status == "PARTIALLY_FAILED":
            failed = [t.item for t in doc.tasks if t.state in ("FAILED", "TIMED_OUT", "CANCELLED")]
            self.screen.event(f"user: retries only the failed ones: {', '.join(failed)}")
            await self.act("retry", {})
        else:
            self.screen.event(f"user: publishes version {doc.version}")
            await self.act("publish", {"version": doc.version})


async def follow(wf: WorkflowClient, user: User, screen: Any, timeout: float) -> WorkflowStatus:
    """Print the workflow's history as it is written and let the user act; returns the
    final status document (or the last one seen when ``timeout`` passes)."""
    from examples.character.__main__ import describe

    hkey = wf.keys.workflow_history(user.wid)
    last = "0-0"
    deadline = time.monotonic() + timeout
    while True:
        rows = await wf.redis.xread({hkey: last}, block=250, count=100)
        for _, entries in rows or []:
            for entry_id, fields in entries:
                last = entry_id
                if fields["ev"] != "SPAWN":
                    screen.event(describe(fields))
        doc = await user.status()
        screen.status(doc)
        if doc.terminal or time.monotonic() > deadline:
            return doc
        await user.step(doc)


def file_size(path: str) -> int:
    return os.path.getsize(path) if os.path.exists(path) else -1


async def check_assets(http: httpx.AsyncClient, doc: WorkflowStatus) -> list[str]:
    """Every asset of the current version must be served by the app, byte for byte."""
    problems = []
    for a in doc.completed_assets:
        r = await http.get(f"/workflows/{doc.id}/assets/{a.version}/{a.stage}/{a.item}")
        size = await asyncio.to_thread(file_size, a.ref)
        if r.status_code != 200 or len(r.content) != size:
            problems.append(f"{a.stage}/{a.item}: HTTP {r.status_code}, {len(r.content)} B")
    return problems


async def workflow_part(url: str, args: argparse.Namespace) -> bool:
    """Part 2: the character pipeline, live. True when it ended PUBLISHED as expected."""
    from examples.character import generators
    from examples.character.__main__ import TTY, Screen, background, paint
    from examples.character.__main__ import summary as wf_summary
    from examples.character.pipeline import QUEUES, character_pipeline

    print(
        "\n== the character workflow: params -> images -> action videos -> 8 emotion videos "
        "-> publish ==\n"
    )
    settings = Settings(namespace=f"demo-wf-{uuid.uuid4().hex[:6]}")
    NAMESPACES.append(settings.namespace)
    definition = character_pipeline(speed=args.speed)
    root = generators.OUT.resolve()
    root.mkdir(parents=True, exist_ok=True)
    app = create_app(
        url, settings=settings, dev=True, env={}, definitions=[definition], asset_root=root
    )
    web = WebThread(app)
    await web.start()
    wf = WorkflowClient(connect(url), settings, source="user")
    screen = Screen()
    ok = False
    try:
        print(f"demo: web app at {web.url} (dev mode: no token; assets served from {root})")
        async with (
            background(url, settings, reaper=True),
            httpx.AsyncClient(base_url=web.url, timeout=10) as http,
        ):
            print(
                f"demo: worker pools for queues {', '.join(QUEUES.values())}; a reaper sweeps "
                "every 0.5 s and drives the workflows"
            )
            r = await http.post(
                "/workflows",
                json={
                    "definition": "character",
                    "input": {
                        "name": "Mei",
                        "background": "a lighthouse keeper's daughter who sings",
                    },
                },
                headers={"Idempotency-Key": f"demo-{uuid.uuid4().hex}"},
            )
            if r.status_code != 202:
                print(f"demo: POST /workflows answered {r.status_code}: {r.text}")
                return False
            wid = r.json()["id"]
            print(f"demo: workflow {wid} started (POST /workflows)")
            print(f"demo: open {web.url}/ui/workflow.html?id={wid}  to watch it live\n", flush=True)
            user = User(http, wid, args.gate_pause, screen)
            doc = await follow(wf, user, screen, args.timeout)
            if TTY:
                print()
            by_version: dict[int, int] = {}
            for a in await wf.all_assets(wid):
                by_version[a.version] = by_version.get(a.version, 0) + 1
            wf_summary(doc, by_version)
            if doc.status != "PUBLISHED":
                print(
                    f"demo: the workflow ended {paint(doc.status)} ({doc.message}), "
                    f"expected PUBLISHED within {args.timeout:g} s"
                )
                return False
            problems = await check_assets(http, doc)
            for p in problems:
                print(f"demo: asset not served: {p}")
            if not problems:
                print(
                    f"demo: the app serves all {len(doc.completed_assets)} asset files of "
                    f"v{doc.version} (GET /workflows/{wid}/assets/...)"
                )
            ok = not problems
            tasks_ns = ", ".join(ns for ns in NAMESPACES if ns != settings.namespace)
            print(f"demo: namespaces {tasks_ns} (tasks), {settings.namespace} (workflow)")
            if args.linger > 0:
                how_long = "until Ctrl-C" if math.isinf(args.linger) else f"{args.linger:g} s more"
                print(
                    f"demo: the page, the workers and redis stay up {how_long}: "
                    f"{web.url}/ui/workflow.html?id={wid}",
                    flush=True,
                )
                print("demo: try, in another shell:")
                for line in try_lines(url):
                    print(f"    {line}")
                print(flush=True)
                await until_stopped(args.linger)
        print("demo: worker pools and reaper stopped")
        return ok
    finally:
        await wf.close()
        await web.stop()
        print("demo: web app stopped")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m examples.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--speed",
        type=float,
        default=1.0,
        help="latency multiplier of the workflow's stand-in generators",
    )
    p.add_argument(
        "--gate-pause",
        type=float,
        default=2.0,
        help="seconds each decision of the workflow stays on screen",
    )
    p.add_argument(
        "--timeout", type=float, default=90.0, help="seconds the workflow may take to be PUBLISHED"
    )
    p.add_argument(
        "--linger",
        type=float,
        default=None,
        metavar="SECONDS",
        help="keep the page, the workers and redis up this many seconds after the end "
        "(default: until Ctrl-C in a terminal, 0 anywhere else)",
    )
    args = p.parse_args(argv)
    if args.linger is None:
        args.linger = math.inf if in_terminal() else 0.0
    if args.linger < 0 or math.isnan(args.linger):
        p.error("--linger must be >= 0")
    return args


def in_terminal() -> bool:
    """Someone watches and can press Ctrl-C: both stdin and stdout are a terminal."""
    return sys.stdin is not None and sys.stdin.isatty() and sys.stdout.isatty()


async def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    url = os.environ.get("RSJOBS_URL")
    server = None
    if not url:
        # a session of its own: a Ctrl-C reaches the demo, which stops redis last
        server = EmbeddedRedis(own_session=True).start()
        url = server.url
        assert server.proc is not None
        print(f"demo: started redis-server ({server.binary}, pid {server.proc.pid}) at {url}")
    try:
        tasks_ok = await tasks_part(url)
        workflow_ok = await workflow_part(url, args)
    finally:
        if server is not None:
            server.cleanup()
            print("demo: redis-server stopped")
    if not (tasks_ok and workflow_ok):
        failed = [name for name, ok in (("tasks", tasks_ok), ("workflow", workflow_ok)) if not ok]
        print(f"demo: FAILED: {', '.join(failed)} did not reach the expected end")
        return 1
    print("demo: OK: every task reached its expected state; the workflow is PUBLISHED")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
