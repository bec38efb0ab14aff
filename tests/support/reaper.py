"""Helpers for the reaper's integration tests: workers and reapers as child processes,
an in-process reaper loop, and waits driven by the history stream."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from rsjobs import Client, HistoryEntry, Settings, TaskInfo
from rsjobs.model import TERMINAL
from rsjobs.reaper import Reaper, ReaperConfig
from rsjobs.store.cluster import ClusterRedis
from tests.support.processes import ROOT, spawn_worker
from tests.support.waits import keyspace

APP = "tests.support.reaper_apps:tasks"


def spawn(
    url: str, ns: str, name: str, *, lease_ms: int = 1000, conc: int = 4
) -> subprocess.Popen[bytes]:
    """A worker child process named ``name`` serving queue ``default``."""
    args = ("--lease-ms", str(lease_ms), "--name", name, "-c", str(conc), "--grace-ms", "500")
    return spawn_worker(url, ns, *args, app=APP)


def spawn_reaper(url: str, ns: str, log_path: str | None, *args: str) -> subprocess.Popen[bytes]:
    """``rsjobs reaper`` as a child process, its JSON log lines written to ``log_path`` (None:
    to a pipe, ``proc.stderr``, for :func:`tests.support.processes.said`)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "rsjobs", "--url", url, "--namespace", ns, "reaper", *args]
    if log_path is None:
        return subprocess.Popen(
            cmd, env=env, cwd=ROOT, stderr=subprocess.PIPE, start_new_session=True
        )
    with open(log_path, "wb") as log:
        return subprocess.Popen(cmd, env=env, cwd=ROOT, stderr=log, start_new_session=True)


async def wait_registered(client: Client, names: list[str], timeout: float = 20.0) -> None:
    """Until every named worker has registered (it registers before its first read): the
    workers hash is read again each time Redis reports a write to it (a keyspace
    notification on the node that holds it), so the wait ends with the registration."""
    key = client.keys.workers
    r = client.redis
    node = await r.node_for(key) if isinstance(r, ClusterRedis) else r
    db = node.connection_pool.connection_kwargs.get("db", 0)

    async def registered() -> bool:
        return set(names) <= set(await r.hkeys(key))

    # (on a cluster, the notifications come from the node that holds the hash)
    async with keyspace(node, "Kh", f"__keyspace@{db}__:{key}") as told:
        deadline = time.monotonic() + timeout
        while not await registered():
            left = deadline - time.monotonic()
            assert left > 0, f"workers {names} did not register"
            await told.get_message(ignore_subscribe_messages=True, timeout=left)


async def wait_history(
    client: Client, tid: str, pred: Callable[[HistoryEntry], bool], timeout: float
) -> HistoryEntry:
    """The first history entry of ``tid`` matching ``pred``: the history is read through
    the client, again each time the events stream names the task (XREAD BLOCK)."""
    events = client.store.events
    cursor = await events.last_id()
    deadline = time.monotonic() + timeout
    while True:
        for e in await client.history(tid):
            if pred(e):
                return e
        left = deadline - time.monotonic()
        assert left > 0, f"no matching history entry for {tid}: {await client.history(tid)}"
        while left > 0:
            rows = await events.read(cursor, 1000, max(1, int(left * 1000)))
            if rows:
                cursor = rows[-1][0]
                if any(f.get("id") == tid for _, f in rows) or len(rows) == 1000:
                    break
            left = deadline - time.monotonic()


async def wait_terminal(client: Client, tid: str, timeout: float) -> TaskInfo:
    """``Client.wait`` that rides out a Redis restart (reconnects and waits again)."""
    deadline = time.monotonic() + timeout
    while True:
        left_ms = int((deadline - time.monotonic()) * 1000)
        assert left_ms > 0, f"task {tid} not terminal in time"
        try:
            return await client.wait(tid, timeout_ms=left_ms)
        except (RedisConnectionError, RedisTimeoutError, OSError):
            await asyncio.sleep(0.1)


async def sweeps_past(reaper: Reaper, until_ms: int, timeout: float = 15.0) -> None:
    """Until ``reaper``, running its loop, has done a whole sweep begun at or after Redis
    time ``until_ms``: the test waits for the reaper's own sweeps, not on a timer."""
    done = asyncio.Event()
    real = reaper.sweep_once

    async def sweep() -> Any:
        began = await reaper.store.reaper.now_ms()
        report = await real()
        if began >= until_ms:
            done.set()
        return report

    reaper.sweep_once = sweep  # type: ignore[method-assign]
    try:
        await asyncio.wait_for(done.wait(), timeout)
    finally:
        del reaper.sweep_once  # the class's again


def terminal_transitions(entries: list[HistoryEntry]) -> list[HistoryEntry]:
    return [e for e in entries if not e.rejected and e.to_state in TERMINAL]


@contextlib.asynccontextmanager
async def reaper_loop(url: str, ns: str, **cfg: Any) -> AsyncIterator[Reaper]:
    """A :class:`Reaper` sweeping in the background of this test's event loop."""
    opts: dict[str, Any] = {"interval_ms": 200, "lease_ms": 1000, "deadline_grace_ms": 0}
    opts.update(cfg)
    settings = Settings(namespace=ns, retention_ms=opts.pop("retention_ms", 60_000))
    reaper = Reaper(url=url, settings=settings, config=ReaperConfig(**opts))
    task = asyncio.create_task(reaper.run())
    try:
        yield reaper
    finally:
        reaper.stop()
        await asyncio.wait_for(task, 10)
        await reaper.close()
