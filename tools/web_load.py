"""Load check of the SSE fan-out: many concurrent event-stream clients on ONE web process.

Starts (all on 127.0.0.1) an embedded Redis, ``rsjobs web --dev`` as a child process and,
once every client is connected, an ``rsjobs worker`` running the ``sleep`` test handler
(progress in steps). Each client follows one task over SSE until its ``end`` event and
must have received exactly the task's history, in order. Prints clients, events, wall
time and the CPU time of the web process.

    .venv/bin/python tools/web_load.py                       # 500 clients, 50 tasks
    .venv/bin/python tools/web_load.py --clients 100 --tasks 10 --json

Exit status 0 when every client received every event, 1 otherwise. Bounded by --timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import httpx  # noqa: E402
import msgspec  # noqa: E402
import psutil  # noqa: E402

from rsjobs import Client  # noqa: E402
from rsjobs.server import EmbeddedRedis, free_port  # noqa: E402

NAMESPACE = "load"


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def spawn(url: str, *args: str, stderr: int | None = None) -> subprocess.Popen[bytes]:
    """``rsjobs <args>`` as a child process on the load namespace."""
    cmd = [sys.executable, "-m", "rsjobs", "--url", url, "--namespace", NAMESPACE,
           "--log-level", "WARNING", *args]  # fmt: skip
    return subprocess.Popen(cmd, env=child_env(), cwd=ROOT, stderr=stderr)


async def follow(
    http: httpx.AsyncClient,
    tid: str,
    connected: asyncio.Event,
    counter: list[int],
    lags: list[float],
) -> list[str]:
    """One SSE client: the ids it received, until `end`; records each live event's lag
    (receipt time minus the Redis TIME of the transition)."""
    ids: list[str] = []
    async with http.stream("GET", f"/tasks/{tid}/events") as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {await r.aread()!r}")
        counter[0] += 1
        if counter[0] == counter[1]:
            connected.set()
        event = "message"
        async for line in r.aiter_lines():
            if line.startswith("id: "):
                ids.append(line[4:])
            elif line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and connected.is_set():
                ts = msgspec.json.decode(line[6:]).get("ts")
                if ts:
                    lags.append(time.time() * 1000 - ts)
            elif line == "" and event == "end":
                return ids
    raise RuntimeError("stream closed before its end event")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with EmbeddedRedis() as redis_server:
        url = redis_server.url
        port = free_port()
        web = spawn(
            url, "web", "--dev", "--port", str(port), "--max-streams", "0", stderr=subprocess.PIPE
        )
        worker = None
        client = Client.from_url(url, namespace=NAMESPACE)
        try:
            base = f"http://127.0.0.1:{port}"
            limits = httpx.Limits(max_connections=args.clients + 20, max_keepalive_connections=0)
            async with httpx.AsyncClient(
                base_url=base, limits=limits, timeout=args.timeout
            ) as http:
                deadline = time.monotonic() + 20
                while True:
                    try:
                        if (await http.get("/healthz")).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    if web.poll() is not None or time.monotonic() > deadline:
                        err = web.stderr.read() if web.stderr else b""
                        raise RuntimeError(f"rsjobs web did not start: {err!r}")
                    await asyncio.sleep(0.05)
                tids = [
                    await client.enqueue("sleep", {"s": args.seconds, "steps": args.steps})
                    for _ in range(args.tasks)
                ]
                proc = psutil.Process(web.pid)
                connected = asyncio.Event()
                counter = [0, args.clients]
                lags: list[float] = []
                t_connect, cpu_c = time.monotonic(), proc.cpu_times()
                followers = [
                    asyncio.create_task(
                        follow(http, tids[i % args.tasks], connected, counter, lags)
                    )
                    for i in range(args.clients)
                ]
                await asyncio.wait_for(connected.wait(), args.timeout)
                connect_s = time.monotonic() - t_connect
                cpu0, me0 = proc.cpu_times(), resource.getrusage(resource.RUSAGE_SELF)
                t0 = time.monotonic()
                worker = spawn(url, "worker", "tests.support.apps:tasks", "-c", str(args.tasks))
                results = await asyncio.wait_for(
                    asyncio.gather(*followers, return_exceptions=True), args.timeout
                )
                wall = time.monotonic() - t0
                cpu1, me1 = proc.cpu_times(), resource.getrusage(resource.RUSAGE_SELF)
                rss = proc.memory_info().rss
            histories = {tid: [e.id for e in await client.history(tid)] for tid in tids}
        finally:
            for p in (worker, web):
                if p is not None and p.poll() is None:
                    p.terminate()
                    try:
                        p.wait(10)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait(5)
            await client.close()
    complete = errors = 0
    for i, res in enumerate(results):
        if isinstance(res, BaseException):
            errors += 1
        elif res == histories[tids[i % args.tasks]]:
            complete += 1
    events_per_task = [len(h) for h in histories.values()]
    delivered = sum(len(r) for r in results if isinstance(r, list))
    server_cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    connect_cpu = (cpu0.user - cpu_c.user) + (cpu0.system - cpu_c.system)
    lags.sort()

    def pct(q: float) -> float:
        return round(lags[min(len(lags) - 1, int(q * len(lags)))], 1) if lags else 0.0

    client_cpu = (me1.ru_utime - me0.ru_utime) + (me1.ru_stime - me0.ru_stime)
    return {
        "clients": args.clients,
        "tasks": args.tasks,
        "events_per_task_min": min(events_per_task),
        "events_per_task_max": max(events_per_task),
        "events_delivered": delivered,
        "clients_complete": complete,
        "clients_failed": errors,
        "connect_s": round(connect_s, 2),
        "web_cpu_connect_s": round(connect_cpu, 2),
        "wall_s": round(wall, 2),
        "task_seconds": args.seconds,
        "web_cpu_s": round(server_cpu, 2),
        "web_cpu_per_1k_events_ms": round(1000 * server_cpu / max(1, delivered) * 1000, 1),
        "web_rss_mb": round(rss / 2**20, 1),
        "lag_ms_p50": pct(0.5),
        "lag_ms_p99": pct(0.99),
        "lag_ms_max": pct(1.0),
        "load_client_cpu_s": round(client_cpu, 2),
        "ok": complete == args.clients,
        "first_error": next((repr(r) for r in results if isinstance(r, BaseException)), None),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=500)
    p.add_argument("--tasks", type=int, default=50, help="clients are spread over these")
    p.add_argument("--seconds", type=float, default=3.0, help="run time of each task")
    p.add_argument("--steps", type=int, default=30, help="progress steps of each task")
    p.add_argument("--timeout", type=float, default=180.0)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    args = p.parse_args()
    report = asyncio.run(run(args))
    if args.json:
        print(json.dumps(report))
    else:
        for k, v in report.items():
            print(f"{k:>26}  {v}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
