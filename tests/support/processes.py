"""Helpers for integration tests: worker child processes, and a task STARTed by hand."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from typing import IO

from rsjobs import Client
from rsjobs.store import Started
from tests.support.waits import wait_for_state

__all__ = ["said", "spawn_worker", "start_as", "stop_process", "wait_for_state"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def spawn_worker(
    url: str,
    namespace: str = "t",
    *args: str,
    app: str = "tests.support.apps:tasks",
    stderr: int | IO[bytes] | None = None,
    log_level: str = "WARNING",
) -> subprocess.Popen[bytes]:
    """Start ``rsjobs worker`` as a child process (its own process group); its log, from
    ``log_level`` up, goes to ``stderr`` (default: the test's)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [
        sys.executable,
        "-m",
        "rsjobs",
        "--url",
        url,
        "--namespace",
        namespace,
        "--log-level",
        log_level,
        "worker",
        app,
        *args,
    ]
    return subprocess.Popen(cmd, env=env, cwd=ROOT, stderr=stderr, start_new_session=True)


def stop_process(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    if proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGCONT)
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


async def said(proc: subprocess.Popen[bytes], words: bytes, n: int = 1) -> None:
    """Until ``proc`` has written ``n`` lines holding ``words`` to its stderr (a pipe): its
    log read as it writes it (a blocking read, in a thread)."""
    assert proc.stderr is not None
    seen = 0
    while seen < n:
        line = await asyncio.to_thread(proc.stderr.readline)
        assert line, f"the process exited having said {words!r} {seen} times"
        seen += words in line


async def start_as(
    client: Client,
    consumer: str,
    *,
    lease_ms: int = 60_000,
    nonce: str = "n",
    queue: str = "default",
    count: int = 100,
) -> list[Started]:
    """Deliver a queue's waiting entries to ``consumer`` and START them through the store,
    as a worker of that name would (it then runs nothing: a ghost, or a zombie)."""
    work = client.store.work
    stream = client.keys.queue(queue)
    await work.ensure_groups([stream])
    deliveries = await work.read(consumer, {stream: queue}, count, None)
    return await work.start(consumer, lease_ms, nonce, deliveries)
