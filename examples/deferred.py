"""Deferred completion end to end: handlers hand their attempts to an outside generation
service and free their slot at once; the service answers by webhook (or is polled); late,
duplicate and forged callbacks are refused.

``python -m examples.deferred`` starts an embedded redis-server (unless RSJOBS_URL names
one), the web app (with a callback secret), a stand-in provider (tests/support/provider.py:
a small Starlette app on 127.0.0.1 that finishes jobs later and calls back) and one worker
with two slots, then submits:

* 6 ``gen.callback`` tasks: the provider calls each back at its ``ctx.callback_url()``;
  one of them three times (the repeats answer 200 ``changed: false``, nothing written);
* 2 ``gen.poll`` tasks: no webhook; the worker's poller asks the provider until done;
* 1 task whose callback is forged (401, nothing written) and then ended by the client
  with the outside job's id (``Client.complete_external``);
* 1 task whose callback comes after its longest wait: timed out, the late result refused
  and recorded (409).

Prints each task's end and exits 0 when every one ended as expected.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable

from rsjobs import Client, Settings, TaskInfo, Worker
from rsjobs.server import EmbeddedRedis
from rsjobs.web import WebConfig, create_app

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.support.deferred_apps import tasks  # noqa: E402
from tests.support.provider import Provider  # noqa: E402
from tests.support.web import ServerThread  # noqa: E402

SECRET = "example-callback-secret-0123456789"
NS = "deferred-example"


async def _until(client: Client, tid: str, done: Callable[[TaskInfo], object]) -> TaskInfo:
    """The task, once ``done`` holds for it (read every 50 ms; 30 s at most)."""
    for _ in range(600):
        info = await client.get(tid)
        if done(info):
            return info
        await asyncio.sleep(0.05)
    raise TimeoutError(f"task {tid} did not get there")


async def run(url: str) -> int:
    provider = Provider(late_ms=1500).start()
    app = create_app(url, namespace=NS, dev=True, env={},
                     config=WebConfig(callback_secret=SECRET, serve_ui=False))  # fmt: skip
    web = ServerThread(app).start()
    settings = Settings(namespace=NS)
    worker = Worker(tasks, url=url, settings=settings, concurrency=2, handle_signals=False,
                    callback_secret=SECRET, callback_url=web.url, poll_ms=50)  # fmt: skip
    running = asyncio.create_task(worker.run())
    client = Client.from_url(url, namespace=NS)
    ok = True
    try:
        p = {"provider": provider.url, "delay_ms": 300}
        plan = [("gen.callback", {**p}, "SUCCEEDED") for _ in range(5)]
        plan.append(("gen.callback", {**p, "mode": "duplicate"}, "SUCCEEDED"))
        plan += [("gen.poll", {**p, "poll_ms": 100}, "SUCCEEDED") for _ in range(2)]
        plan.append(("gen.callback", {**p, "mode": "forge"}, "SUCCEEDED"))
        plan.append(("gen.callback", {**p, "mode": "delay", "max_wait_ms": 800}, "TIMED_OUT"))
        ids = []
        for ttype, payload, _ in plan:
            ids.append(await client.enqueue(ttype, payload, max_attempts=1))
        t0 = time.monotonic()
        forged = ids[-2]
        info = await _until(
            client, forged, lambda i: i.state == "DEFERRED" and provider.sent(i.external_id)
        )
        print(f"forged callback for {forged[:8]} answered {provider.sent(info.external_id)}")
        state = await client.complete_external(info.external_id, {"image": "by-hand.png"},
                                               provider="testprov")  # fmt: skip
        print(f"Client.complete_external({info.external_id!r}) -> {state}")
        for tid, (ttype, payload, want) in zip(ids, plan, strict=True):
            info = await client.wait(tid, timeout_ms=30_000)
            mode = payload.get("mode", "poll" if ttype == "gen.poll" else "callback")
            print(f"{tid[:8]} {ttype:<13} {mode:<9} {info.state:<10} {info.result or info.error}")
            ok = ok and info.state == want
        late = ids[-1]
        ext = (await _until(client, late, lambda i: bool(provider.sent(i.external_id)))).external_id
        refused = [e for e in await client.history(late) if e.rejected]
        print(f"late callback answered {provider.sent(ext)}; history: {refused[0].message}")
        ok = ok and provider.sent(ext) == [409] and len(refused) == 1
        dup = (await client.get(ids[5])).external_id
        print(f"duplicate callbacks answered {provider.sent(dup)} (one COMPLETE in history)")
        print(f"all ended in {time.monotonic() - t0:.1f} s on 2 worker slots")
    finally:
        await client.close()
        worker.stop()
        await running
        web.stop()
        provider.stop()
    return 0 if ok else 1


def main() -> int:
    url = os.environ.get("RSJOBS_URL")
    if url:
        return asyncio.run(run(url))
    with EmbeddedRedis() as server:
        return asyncio.run(run(server.url))


if __name__ == "__main__":
    sys.exit(main())
