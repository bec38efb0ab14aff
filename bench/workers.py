"""Worker processes: start, wait until idle, measure CPU, stop.

Workers are real child processes started from each system's own worker entry point,
so their CPU can be read from /proc (through psutil) over exactly the processing
window. A worker CLI may fork (taskiq runs a supervisor plus a child), so everything
here works on the whole process tree of each worker we started.

(Freezing idle workers with SIGSTOP while tasks are enqueued was tried and dropped:
a client-side read timeout that expires while a process is stopped fires on resume
even though the reply has arrived, which crashed taskiq's worker. Holding the first
handlers at a gate instead is in handler_support.)
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

REPO_ROOT = Path(__file__).resolve().parent.parent


class WorkerGroup:
    """The worker processes of one run (one or more copies of the same argv)."""

    def __init__(self, argv: Sequence[str], count: int, env: dict[str, str], log_dir: Path):
        self._argv = list(argv)
        self._count = count
        self._env = env
        self._log_dir = log_dir
        self._procs: list[subprocess.Popen[bytes]] = []
        self._logs: list[Path] = []

    def start(self) -> None:
        for k in range(self._count):
            log = self._log_dir / f"worker-{k}.log"
            self._logs.append(log)
            with log.open("wb") as out:
                self._procs.append(
                    subprocess.Popen(
                        self._argv,
                        cwd=REPO_ROOT,
                        env=self._env,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                )

    def _tree(self) -> list[psutil.Process]:
        procs: list[psutil.Process] = []
        for p in self._procs:
            try:
                root = psutil.Process(p.pid)
                procs.append(root)
                procs.extend(root.children(recursive=True))
            except psutil.NoSuchProcess:
                continue
        return procs

    def check_alive(self) -> None:
        for p, log in zip(self._procs, self._logs, strict=True):
            if p.poll() is not None:
                raise RuntimeError(f"worker exited with {p.returncode}:\n{tail(log)}")

    def cpu_seconds(self) -> float:
        """CPU time of every process in the worker trees, so far.

        Read from each thread's /proc/<pid>/task/<tid>/schedstat (nanoseconds), because
        the user/system times of /proc/<pid>/stat tick in 10 ms steps, too coarse for a
        window of a second. Falls back to those where schedstat is missing.
        """
        total = 0.0
        for proc in self._tree():
            try:
                total += _schedstat_seconds(proc.pid)
            except OSError:
                try:
                    t = proc.cpu_times()
                except psutil.NoSuchProcess:
                    continue
                total += t.user + t.system
        return total

    async def wait_idle(self, timeout: float = 60.0) -> None:
        """Wait until the workers have started and sit idle on an empty queue.

        Idle means: the process trees stopped changing and burned under 10% of a core
        over two consecutive 0.3 s windows, at least 1 s after start. Polling workers
        (arq) stay a little busy while idle, hence a threshold instead of zero.
        """
        started = time.monotonic()
        await asyncio.sleep(1.0)
        quiet = 0
        last_pids = {p.pid for p in self._tree()}
        last_cpu = self.cpu_seconds()
        while quiet < 2:
            if time.monotonic() - started > timeout:
                raise RuntimeError("workers did not become idle:\n" + self.logs_tail())
            await asyncio.sleep(0.3)
            self.check_alive()
            pids = {p.pid for p in self._tree()}
            cpu = self.cpu_seconds()
            quiet = quiet + 1 if pids == last_pids and cpu - last_cpu < 0.03 else 0
            last_pids, last_cpu = pids, cpu

    def stop(self, grace_s: float = 3.0) -> None:
        """Ask each worker to shut down (SIGTERM), then kill what is left of its tree.

        Measurements and verification are over by now, so a worker that takes its time
        to stop (taskiq waits out its blocking read and shutdown timeout) is not waited for.
        """
        trees = self._tree()
        for p in self._procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for p in self._procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc in trees:
            try:
                if proc.is_running() and proc.pid != os.getpid():
                    proc.kill()
            except psutil.NoSuchProcess:
                continue
        for p in self._procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    def logs_tail(self) -> str:
        return "\n".join(f"--- {log.name}\n{tail(log)}" for log in self._logs)


def _schedstat_seconds(pid: int) -> float:
    """On-CPU time of all live threads of a process (first field of schedstat, ns)."""
    total_ns = 0
    for task in os.scandir(f"/proc/{pid}/task"):
        try:
            with open(f"{task.path}/schedstat") as f:
                total_ns += int(f.read().split()[0])
        except FileNotFoundError:
            continue  # the thread ended meanwhile
    return total_ns / 1e9


def tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except FileNotFoundError:
        return ""
