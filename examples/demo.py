"""`make demo`: a real Redis, a worker process and a producer, with every task's live state.

Starts an embedded redis-server (unless RSJOBS_URL names one), starts a worker process,
submits image-generation-like tasks that end in every terminal state (one is cancelled
while it runs, one is paused and resumed), prints each transition as it happens from the
events stream, then stops everything cleanly.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from typing import Any

from rsjobs import Client
from rsjobs.model import TERMINAL
from rsjobs.server import EmbeddedRedis

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


JOBS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("a watercolour fox", {"steps": 6}, {}),
    ("a neon city at night", {"steps": 8}, {}),
    (
        "portrait, retried after a GPU error",
        {"steps": 6, "fail_until_attempt": 2},
        {"backoff_base_ms": 300},
    ),
    ("forbidden content", {"steps": 4}, {}),
    (
        "a huge 8k panorama (times out)",
        {"steps": 40, "step_s": 0.2},
        {"timeout_ms": 1500, "max_attempts": 1},
    ),
    ("a cat astronaut (cancelled while running)", {"steps": 40}, {}),
    ("a lighthouse (scheduled 1 s later)", {"steps": 4}, {"delay_ms": 1000}),
    ("a mountain lake (paused, then resumed)", {"steps": 30, "step_s": 0.1}, {}),
]


async def produce_and_watch(client: Client) -> dict[str, str]:
    labels: dict[str, str] = {}
    last = (await client.redis.xrevrange(client.keys.events, "+", "-", count=1) or [("0-0",)])[0][0]
    ids = []
    for prompt, params, opts in JOBS:
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
    while len(finished) < len(ids):
        if time.monotonic() - t0 > 60:
            raise SystemExit("demo: tasks did not finish within 60 s")
        rows = await client.redis.xread({client.keys.events: last}, block=500, count=200)
        for _, entries in rows or []:
            for eid, f in entries:
                last = eid
                tid = f.get("id", "")
                if tid not in labels:
                    continue
                label = labels[tid][:42]
                if f.get("rej") == "1":
                    line = f"refused {f['ev']}: {f.get('msg', '')}"
                elif f["ev"] == "PROGRESS":
                    line = f"{float(f['p']):5.1f}%  {f.get('msg', '')}"
                else:
                    line = f"{f['ev']:<8} {f['from'] or '-':>9} -> {paint(f['to'])}"
                    if f.get("msg"):
                        line += f"  ({f['msg'][:60]})"
                print(f"{time.monotonic() - t0:6.2f}s  {tid[:8]}  {label:<42}  {line}", flush=True)
                if f.get("to") in TERMINAL and f.get("rej") != "1":
                    finished.add(tid)
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


async def summary(client: Client, labels: dict[str, str]) -> set[str]:
    print("\nfinal states:")
    states = set()
    for tid, label in labels.items():
        info = await client.get(tid)
        states.add(info.state)
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
    return states


async def main() -> int:
    url = os.environ.get("RSJOBS_URL")
    server = None
    if not url:
        server = EmbeddedRedis().start()
        url = server.url
        print(f"demo: started redis-server ({server.binary}) at {url}")
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
    client = Client.from_url(url, namespace=namespace, source="user")
    try:
        labels = await produce_and_watch(client)
        states = await summary(client, labels)
        missing = TERMINAL - states
        print(f"\nterminal states reached: {', '.join(sorted(states))}")
        if missing:
            print(f"demo: missing terminal states {sorted(missing)}")
            return 1
        print(f"task hashes live at rsjobs:{{{namespace}}}:task:<id> (see README, key layout)")
        return 0
    finally:
        await client.close()
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(15)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        print(f"demo: worker stopped (exit {worker.returncode})")
        if server is not None:
            server.cleanup()
            print("demo: redis-server stopped")


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
