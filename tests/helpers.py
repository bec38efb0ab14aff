"""Helpers for integration tests: worker child processes and waiting on task states."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import IO

from rsjobs import Client, TaskInfo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def spawn_worker(
    url: str,
    namespace: str = "t",
    *args: str,
    app: str = "tests.apps:tasks",
    stderr: int | IO[bytes] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``rsjobs worker`` as a child process (its own process group); its log goes to
    ``stderr`` (default: the test's)."""
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
        "WARNING",
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


async def wait_for_state(
    client: Client, task_id: str, states: Sequence[str] | str, timeout: float = 10.0
) -> TaskInfo:
    """Poll until the task is in one of ``states`` (for non-terminal states; use
    Client.wait for terminal ones)."""
    wanted = {states} if isinstance(states, str) else set(states)
    deadline = time.monotonic() + timeout
    while True:
        info = await client.get(task_id)
        if info.state in wanted:
            return info
        if time.monotonic() > deadline:
            raise AssertionError(f"task {task_id} is {info.state}, expected {sorted(wanted)}")
        await asyncio.sleep(0.02)
