"""A hook runner SIGKILLed mid-delivery: after a new runner starts, every matching change
of state has been delivered at least once (counted), none that did not match."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable

import redis.asyncio as aredis

from rsjobs import Client
from tests.support.hook_apps import RUNS, SEEN
from tests.support.processes import ROOT, stop_process
from tests.support.waits import on_keys


def _runner(url: str, name: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["RSJOBS_TEST_URL"] = url
    env["RSJOBS_TEST_HOOK_SLEEP"] = "0.1"
    cmd = [sys.executable, "-m", "rsjobs", "--url", url, "--namespace", "t"]
    cmd += ["--log-level", "WARNING", "hooks", "run", "tests.support.hook_apps:hooks"]
    cmd += ["--name", name, "--claim-idle-ms", "600", "--batch", "8"]
    return subprocess.Popen(cmd, env=env, cwd=ROOT, start_new_session=True)


async def _wait(client: Client, cond: Callable[[], Awaitable[bool]], timeout: float) -> None:
    """Until ``cond()``: looked at again each time Redis tells of a write to a key it
    reads (the hook's records, the hook stream, its retries, the listeners)."""
    k = client.keys
    await on_keys(client.redis, [RUNS, SEEN, k.hooks, k.hooks_retry, k.hooks_on], cond, timeout)


async def test_every_matching_change_is_delivered_after_a_runner_is_killed(
    client: Client, redis_url: str
) -> None:
    r = aredis.Redis.from_url(redis_url)
    first = _runner(redis_url, "h1")
    second = None
    try:

        async def listening() -> bool:
            return bool(await client.redis.hexists(client.keys.hooks_on, "hook:record"))

        await _wait(client, listening, 20)
        images = [await client.enqueue("image.make", {"n": n}) for n in range(60)]
        others = [await client.enqueue("video.make", {"n": n}) for n in range(10)]
        for tid in images + others:
            await client.cancel(tid)

        async def some_ran() -> bool:
            return int(await r.llen(RUNS)) >= 10

        await _wait(client, some_ran, 30)
        os.kill(first.pid, signal.SIGKILL)  # mid-batch: runs under way, entries held
        first.wait(10)
        before = int(await r.scard(SEEN))
        assert before < len(images), "the kill came too late to test anything"
        second = _runner(redis_url, "h2")

        async def all_seen() -> bool:
            return int(await r.scard(SEEN)) == len(images)

        await _wait(client, all_seen, 60)
        seen = {x.decode() for x in await r.smembers(SEEN)}
        assert seen == set(images)
        runs = [x.decode() for x in await r.lrange(RUNS, 0, -1)]
        # at least once each; the repeats are runs the kill interrupted (at most a batch)
        assert set(runs) == set(images)
        assert len(runs) - len(images) <= 8

        async def settled() -> bool:
            b = await client.store.hooks.backlog()
            return b["stream"] == 0 and b["retries"] == 0

        await _wait(client, settled, 20)
        assert (await client.store.hooks.backlog())["dead"] == 0
    finally:
        stop_process(first)
        if second is not None:
            stop_process(second, signal.SIGTERM)
        await r.aclose()
