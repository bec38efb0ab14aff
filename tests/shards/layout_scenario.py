"""A life cycle of one namespace, and the keys it leaves: what ``test_s1_layout`` compares
with the keys the release before shards wrote (``fixtures/s1_keys.txt``).

``python tests/shards/layout_scenario.py URL [SHARDS]`` runs it on an empty database and
prints the keys, normalized (ids, entry ids, times replaced by placeholders), one
``<type> <key>`` a line, sorted. It uses the public API only, so that the same file runs
against an earlier checkout (``PYTHONPATH=<checkout>``) to make the fixture.
"""

from __future__ import annotations

import asyncio
import re
import sys
from typing import Any

import redis as sync_redis

from rsjobs import Client, Context, Registry, Settings, Worker, connect
from rsjobs.reaper import Reaper, ReaperConfig
from rsjobs.workflows import Stage, TaskSpec, WorkflowClient, WorkflowDefinition

NS = "lay"
app = Registry()


@app.handler("ok")
async def ok(ctx: Context, payload: Any) -> Any:
    return payload


@app.handler("make")
async def make(ctx: Context, payload: Any) -> Any:
    return {"ref": f"mem://{ctx.task_id}"}


@app.handler("boom")
async def boom(ctx: Context, payload: Any) -> None:
    raise RuntimeError("planned")


@app.handler("slow")
async def slow(ctx: Context, payload: Any) -> None:
    await asyncio.sleep(30)


def _settings(shards: int | None) -> Settings:
    if shards is None:
        return Settings(namespace=NS)
    return Settings(namespace=NS, shards=shards)  # type: ignore[call-arg,unused-ignore]


async def scenario(url: str, shards: int | None = None) -> None:
    settings = _settings(shards)
    c = Client(connect(url), settings)
    d = WorkflowDefinition("two", [Stage("a", [TaskSpec(item="x", type="make")], queue="wf")])
    wf = WorkflowClient(connect(url), settings, definitions=[d])
    w = Worker(app, url=url, settings=settings, queues=["q", "wf"], lease_ms=2000,
               promote_ms=20, grace_ms=500, handle_signals=False)  # fmt: skip
    run = asyncio.create_task(w.run())
    try:
        done = [
            await c.enqueue("ok", {"n": 1}, queue="q"),
            await c.enqueue(
                "ok", {"n": 2}, queue="q", dedup_key="k", owner="o1", labels={"a": "b"}
            ),
            await c.enqueue("ok", {"n": 3}, queue="q", delay_ms=50),
            await c.enqueue("boom", None, queue="q", max_attempts=1),
        ]
        head = await c.enqueue("ok", None, queue="q")
        done.append(await c.enqueue("ok", None, queue="q", after=[head]))
        slow_id = await c.enqueue("slow", None, queue="q")
        wid = await wf.start("two", {"x": 1})
        for tid in [*done, head]:
            await c.wait(tid, timeout_ms=20_000)
        await c.cancel(slow_id)
        await c.retry(done[3])
        await c.pause_queue("idle")
        await c.resume_queue("idle")
        await c.enqueue("ok", None, queue="idle")
        await c.schedule("tick", type="ok", every_ms=3_600_000, queue="q")
        for _ in range(100):
            if (await wf.get(wid)).status != "RUNNING":
                break
            await asyncio.sleep(0.05)
        status = (await wf.get(wid)).status
        assert status == "READY_TO_PUBLISH", status
    finally:
        w.stop()
        await asyncio.wait_for(run, 20)
        await w.redis.aclose()
    reaper = Reaper(redis=c.redis, settings=settings, config=ReaperConfig(lease_ms=2000))
    await reaper.sweep_once()
    await wf.close()
    await c.close()


_PATTERNS = [
    (re.compile(r"[0-9a-f]{32}"), "<id>"),
    (re.compile(r"\d{13,}-\d+"), "<entry>"),
]


def keys(url: str) -> list[str]:
    """Every key, normalized, as ``<type> <key>``, sorted and unique."""
    r = sync_redis.Redis.from_url(url, decode_responses=True)
    out = set()
    for k in r.scan_iter(count=1000):
        name = k
        for pat, rep in _PATTERNS:
            name = pat.sub(rep, name)
        out.add(f"{r.type(k)} {name}")
    r.close()
    return sorted(out)


def main() -> None:
    url = sys.argv[1]
    shards = int(sys.argv[2]) if len(sys.argv) > 2 else None
    sync_redis.Redis.from_url(url).flushall()
    asyncio.run(scenario(url, shards))
    print("\n".join(keys(url)))


if __name__ == "__main__":
    main()
