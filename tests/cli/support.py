"""Running ``rsjobs`` and ``rsjobs dev`` as child processes in the command-line tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from tests.support.processes import ROOT

__all__ = ["Dev", "gone", "rsjobs"]


def env(**more: str) -> dict[str, str]:
    # (the settings are the test's to give; the redis-server to run is the session's:
    # a process on another Redis version could not read the AOF the test reads after it)
    e = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("RSJOBS_") or k == "RSJOBS_REDIS_SERVER"
    }
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    return e | more


def rsjobs(url: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rsjobs", "--url", url, *args],
        capture_output=True, text=True, cwd=ROOT, env=env(), timeout=timeout, check=False,
    )  # fmt: skip


def gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


class Dev:
    """``rsjobs dev`` in a child process; its output is collected line by line."""

    def __init__(self, *args: str, cwd: str | Path = ROOT, **more_env: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rsjobs", "dev", *args],
            cwd=cwd, env=env(**more_env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
        self.lines: list[str] = []
        #: notified at each line the child writes, and at the end of its output
        self._said = threading.Condition()
        self._ended = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        try:
            for line in self.proc.stdout:
                with self._said:
                    self.lines.append(line.rstrip("\n"))
                    self._said.notify_all()
        finally:
            with self._said:
                self._ended = True
                self._said.notify_all()

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def expect(self, pattern: str, timeout: float = 30) -> re.Match[str]:
        """The first line of the output so far that matches ``pattern``, waiting for the
        child to write it (woken at each line it writes; no polling)."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self._said:
            while True:
                for line in self.lines[seen:]:
                    m = re.search(pattern, line)
                    if m:
                        return m
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if self._ended or left <= 0:
                    break
                self._said.wait(left)
        raise AssertionError(f"no line matches {pattern!r}:\n{self.output[-4000:]}")

    def started(self) -> tuple[str, int, str]:
        """(redis URL, redis pid, data dir) from the banner, once the worker is up."""
        m = self.expect(r"redis  (redis://\S+)  \(pid (\d+); data in (.+), ")
        self.expect(r"Ctrl-C or SIGTERM stops everything")
        return m.group(1), int(m.group(2)), m.group(3)

    def stop(self, sig: int, timeout: float = 30) -> int:
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        finally:
            self.kill()

    def kill(self) -> None:
        """Kill it if it still runs (its redis-server dies with it); close the pipe."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def lines_matching(text: str, words: Sequence[str]) -> list[str]:
    return [line for line in text.splitlines() if all(w in line for w in words)]
