"""Child processes of a chaos run, watched so that every death is timed when it happened.

:class:`Supervisor` starts every child in its own session (a Ctrl-C reaches only the
harness), writes its pid to the run's ``pids`` file, and ends them all at :meth:`aclose`
(or :meth:`cleanup`, the synchronous last resort for ``atexit``).

Each :class:`Child` has a watcher thread blocked in ``waitid(WNOWAIT)``: it wakes the
moment the process exits and stamps the exit time *before* it reaps the pid, whatever the
event loop is doing (a busy loop would otherwise stamp a death seconds late, and a
reclaim of the dead worker's tasks would look like a theft from a live one). Signals are
sent under the same lock, so a signal can never reach a recycled pid. Nothing here blocks
the event loop: waiting for an exit is awaiting an :class:`asyncio.Event`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["Child", "Supervisor", "now_ms"]


def now_ms() -> int:
    """The harness's wall clock in ms (Redis TIME runs on the same host's clock)."""
    return int(time.time() * 1000)


class Child:
    """One started process and what became of it."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        log_name: str,
        loop: asyncio.AbstractEventLoop,
        on_exit: Callable[[Child], None] | None = None,
    ) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.log_name = log_name
        self.started_ms = now_ms()
        #: when the process exited (stamped by the watcher, before the pid was reaped)
        self.exit_ms: int | None = None
        #: its exit status (negative: killed by that signal)
        self.returncode: int | None = None
        self._loop = loop
        self._on_exit = on_exit
        #: the harness logged this exit already (bookkeeping of the cluster)
        self.noted = False
        self._lock = threading.Lock()
        self._gone = threading.Event()
        self._done = asyncio.Event()
        threading.Thread(target=self._watch, name=f"watch-{self.pid}", daemon=True).start()

    @property
    def alive(self) -> bool:
        return self.exit_ms is None

    @property
    def ran_ms(self) -> int:
        """How long it ran (until now while it is alive)."""
        return (self.exit_ms or now_ms()) - self.started_ms

    def _watch(self) -> None:
        with contextlib.suppress(ChildProcessError):
            # wait for the exit but leave the zombie: the pid cannot be recycled before
            # exit_ms is set and signals stop (under the lock)
            os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)
        with self._lock:
            self.exit_ms = now_ms()
            self.returncode = self.proc.wait()
        self._gone.set()
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            self._loop.call_soon_threadsafe(self._exited)

    def _exited(self) -> None:
        self._done.set()
        if self._on_exit is not None:
            self._on_exit(self)

    def send(self, sig: int) -> bool:
        """Signal the process if it is alive; False when it was gone already."""
        with self._lock:
            if self.exit_ms is not None:
                return False
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                return False
        return True

    async def wait(self, timeout_s: float | None = None) -> int | None:
        """Its exit status once it exited, or None when ``timeout_s`` passed first."""
        if not self._done.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._done.wait(), timeout_s)
        return self.returncode if self.exit_ms is not None else None

    def wait_sync(self, timeout_s: float) -> bool:
        """For :meth:`Supervisor.cleanup` only (outside the event loop)."""
        return self._gone.wait(timeout_s)


class Supervisor:
    """Starts child processes and guarantees they are all gone at :meth:`aclose`."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.children: list[Child] = []
        self._pidfile = run_dir / "pids"
        #: set by aclose / cleanup: nothing may be started any more
        self.closed = False

    def spawn(
        self,
        argv: list[str],
        *,
        log_name: str,
        env: dict[str, str] | None = None,
        on_exit: Callable[[Child], None] | None = None,
    ) -> Child:
        """Start ``argv`` (stdout and stderr to ``log_name`` in the run dir); ``on_exit``
        runs on the event loop when it exits (``child.exit_ms`` says when)."""
        if self.closed:
            raise RuntimeError("the run is over: no new processes")
        with open(self.run_dir / log_name, "ab") as log:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        child = Child(proc, log_name, asyncio.get_running_loop(), on_exit)
        self.children.append(child)
        with open(self._pidfile, "a") as f:
            f.write(f"{child.pid} {log_name}\n")
        return child

    def alive(self) -> list[Child]:
        return [c for c in self.children if c.alive]

    async def aclose(self, grace_s: float = 5.0) -> None:
        """End every child still running: SIGCONT + SIGTERM, SIGKILL after ``grace_s``."""
        self.closed = True
        live = self.alive()
        for c in live:
            c.send(signal.SIGCONT)
            c.send(signal.SIGTERM)
        await asyncio.gather(*(c.wait(grace_s) for c in live))
        for c in live:
            c.send(signal.SIGKILL)
        await asyncio.gather(*(c.wait(5) for c in live))

    def cleanup(self, grace_s: float = 5.0) -> None:
        """The synchronous :meth:`aclose` (``atexit``, or after the loop has gone)."""
        self.closed = True
        live = self.alive()
        for c in live:
            c.send(signal.SIGCONT)
            c.send(signal.SIGTERM)
        end = time.monotonic() + grace_s
        for c in live:
            if not c.wait_sync(max(0.01, end - time.monotonic())):
                c.send(signal.SIGKILL)
        for c in live:
            c.wait_sync(5)
