"""The processes of a chaos run: Redis (with AOF), workers and reapers, on loopback.

:class:`Supervisor` starts every child in its own session (so a Ctrl-C reaches only the
harness), remembers every pid it ever started, and :meth:`Supervisor.cleanup` ends them
all (SIGCONT, SIGTERM, then SIGKILL) — on success, failure, Ctrl-C or SIGTERM alike.
:class:`Cluster` keeps *slots* (worker 0..n-1, reaper 0..m-1); a fault replaces the
process in a slot, and an unplanned exit is logged and the slot refilled.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import rsjobs
from rsjobs.errors import RedisUnavailable
from rsjobs.server import EmbeddedRedis

from .config import ChaosConfig
from .producer import now_ms
from .records import FaultEvent
from .workload import QUEUE

__all__ = ["ChaosRedis", "Cluster", "Slot", "Supervisor"]


class Supervisor:
    """Starts child processes and guarantees they are all gone at :meth:`cleanup`."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.procs: list[subprocess.Popen[bytes]] = []
        self._pidfile = run_dir / "pids"
        #: set by cleanup: nothing may be started any more
        self.closed = False

    def spawn(
        self, argv: list[str], *, log_name: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
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
        self.procs.append(proc)
        with open(self._pidfile, "a") as f:
            f.write(f"{proc.pid} {log_name}\n")
        return proc

    @staticmethod
    def send(proc: subprocess.Popen[bytes], sig: int) -> bool:
        """Signal ``proc`` if it is still ours and alive; False when it was gone."""
        if proc.poll() is not None:
            return False
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is None]

    def cleanup(self, grace_s: float = 5.0) -> None:
        """End every child still running: SIGCONT + SIGTERM, then SIGKILL after grace."""
        self.closed = True
        for _ in range(3):  # again, in case a thread was starting one meanwhile
            live = self.alive()
            if not live:
                return
            self._end(live, grace_s)

    def _end(self, live: list[subprocess.Popen[bytes]], grace_s: float) -> None:
        for p in live:
            self.send(p, signal.SIGCONT)
            self.send(p, signal.SIGTERM)
        end = time.monotonic() + grace_s
        for p in live:
            try:
                p.wait(max(0.01, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.send(p, signal.SIGKILL)
        for p in live:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:  # pragma: no cover - unkillable
                pass


class ChaosRedis(EmbeddedRedis):
    """:class:`EmbeddedRedis` whose server runs in its own session under the supervisor."""

    def __init__(self, sup: Supervisor, *, appendfsync: str, data_dir: str) -> None:
        super().__init__(appendonly=True, appendfsync=appendfsync, data_dir=data_dir)
        self.sup = sup
        self.starts = 0

    def start(self, timeout: float = 30.0) -> ChaosRedis:
        self.starts += 1
        self.proc = self.sup.spawn(self.argv(), log_name="redis.out")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RedisUnavailable(f"redis-server exited; see {self.data_dir}/redis.log")
            if self.ping():  # answers PONG only once the AOF is loaded
                return self
            time.sleep(0.02)
        raise RedisUnavailable(f"redis-server did not answer on port {self.port}")


class Slot:
    """One place for a worker or a reaper; ``gen`` counts the processes it has had."""

    def __init__(self, role: str, index: int) -> None:
        self.role = role
        self.index = index
        self.gen = 0
        self.name = ""
        self.proc: subprocess.Popen[bytes] | None = None
        #: faults acting on the slot now (the monitor leaves a busy slot alone)
        self.busy = 0
        self.stopped = False
        self.started = 0.0  #: time.monotonic() of the current process's start
        self.exit_noted = False


class Cluster:
    """Redis + worker slots + reaper slots, and the log of what happened to them."""

    def __init__(
        self, cfg: ChaosConfig, run_dir: Path, echo: Callable[[str], None] = print
    ) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.echo = echo
        self.sup = Supervisor(run_dir)
        data = run_dir / "redis"
        data.mkdir(exist_ok=True)
        self.redis = ChaosRedis(self.sup, appendfsync=cfg.fsync, data_dir=str(data))
        self.redis_lock = asyncio.Lock()
        self.workers = [Slot("worker", i) for i in range(cfg.workers)]
        self.reapers = [Slot("reaper", i) for i in range(cfg.reapers)]
        self.events: list[FaultEvent] = []
        # the children import rsjobs and this harness (tools.chaos.handlers) from here
        roots = dict.fromkeys(
            [
                str(Path(rsjobs.__file__).resolve().parents[1]),
                str(Path(__file__).resolve().parents[2]),
            ]
        )
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join([*roots, self.env.get("PYTHONPATH", "")])
        self.env["RSJOBS_CHAOS_URL"] = self.redis.url
        self.env["RSJOBS_CHAOS_NAMESPACE"] = cfg.namespace

    @property
    def url(self) -> str:
        return self.redis.url

    def note(
        self,
        kind: str,
        target: str,
        pid: int = 0,
        detail: str = "",
        status: int | None = None,
        *,
        ran_ms: int = 0,
    ) -> None:
        ev = FaultEvent(
            at_ms=now_ms(),
            kind=kind,
            target=target,
            pid=pid,
            detail=detail,
            status=status,
            ran_ms=ran_ms,
        )
        self.events.append(ev)
        if self.cfg.verbose or not kind.endswith(("_start", "_up")):
            self.echo(f"  [{ev.at_ms % 100_000:>6}] {kind:<12} {target} {detail}".rstrip())

    # -- processes -----------------------------------------------------------------------

    def _argv(self, slot: Slot) -> list[str]:
        cfg = self.cfg
        base = [sys.executable, "-m", "rsjobs", "--url", self.url, "--namespace", cfg.namespace]
        if slot.role == "worker":
            return [
                *base,
                "worker",
                cfg.worker_app,
                "-q",
                QUEUE,
                "-c",
                str(cfg.concurrency),
                "--lease-ms",
                str(cfg.lease_ms),
                "--grace-ms",
                str(cfg.grace_ms),
                "--name",
                slot.name,
            ]
        return [
            *base,
            "reaper",
            "--interval-ms",
            str(cfg.reaper_interval_ms),
            "--lease-ms",
            str(cfg.lease_ms),
            "--deadline-grace-ms",
            "500",
            "--max-deliveries",
            str(cfg.max_deliveries),
            "--quiet",
            "--name",
            slot.name,
        ]

    def spawn(self, slot: Slot) -> None:
        """Start a new process in ``slot`` (a new name: the old consumer stays dead)."""
        if self.sup.closed:
            return
        slot.gen += 1
        short = "w" if slot.role == "worker" else "r"
        slot.name = f"chaos-{short}{slot.index}g{slot.gen}"
        slot.stopped = False
        slot.started = time.monotonic()
        slot.exit_noted = False
        slot.proc = self.sup.spawn(self._argv(slot), log_name=f"{slot.name}.log", env=self.env)
        self.note(f"{slot.role}_start", slot.name, slot.proc.pid)

    def signal(self, slot: Slot, sig: int, kind: str, detail: str = "") -> bool:
        """Send ``sig`` to the slot's process and log it as ``kind``; False (and its exit
        logged, if nobody saw it yet) when the process was already gone."""
        proc = slot.proc
        if proc is None:
            return False
        if not self.sup.send(proc, sig):
            self._exited(slot, f"found dead by {kind}")
            return False
        if sig == signal.SIGKILL:
            slot.exit_noted = True  # this death is the fault itself
        self.note(kind, slot.name, proc.pid, detail)
        return True

    async def start(self) -> None:
        await asyncio.to_thread(self.redis.start)
        self.note("redis_up", "redis", self.redis.proc.pid if self.redis.proc else 0)
        for slot in self.reapers + self.workers:
            self.spawn(slot)

    async def restart_redis(self, kill: bool, down_s: float) -> None:
        """Stop Redis (SIGTERM: a clean shutdown that writes the AOF; or SIGKILL), keep it
        down for ``down_s``, start it again on the same port and data directory. Restarts
        never overlap: a second one waits for the first."""
        async with self.redis_lock:
            try:
                pid = self.redis.proc.pid if self.redis.proc else 0
                kind = "redis_kill" if kill else "redis_term"
                self.note(kind, "redis", pid, f"down {down_s:.2f}s")
                await asyncio.to_thread(self.redis.stop, kill=kill)
                await asyncio.sleep(down_s)
            finally:
                await self._start_redis()

    async def drop_clients(self) -> None:
        """Close every client connection (a network blip); Redis keeps running."""
        from rsjobs.client import connect

        async with self.redis_lock:
            r = connect(self.url, socket_timeout=5)
            try:
                n = 0
                for kind in ("normal", "pubsub"):
                    n += int(
                        await r.execute_command("CLIENT", "KILL", "TYPE", kind, "SKIPME", "yes")
                    )
                self.note("redis_drop", "redis", 0, f"{n} connections closed")
            finally:
                await r.aclose()

    def _redis_down(self) -> bool:
        rp = self.redis.proc
        return rp is None or rp.poll() is not None

    async def _start_redis(self) -> None:
        """Start Redis (the caller holds ``redis_lock``); three tries."""
        for attempt in range(3):
            try:
                await asyncio.to_thread(self.redis.start)
                break
            except RedisUnavailable as exc:
                self.note("redis_error", "redis", 0, f"start failed: {exc}")
                await asyncio.to_thread(self.redis.stop, kill=True)
                if attempt == 2:
                    raise
        self.note("redis_up", "redis", self.redis.proc.pid if self.redis.proc else 0)

    # -- watching and healing ------------------------------------------------------------

    def _exited(self, slot: Slot, why: str) -> None:
        """Log the death of the slot's process (once)."""
        p = slot.proc
        if slot.exit_noted:
            return
        slot.exit_noted = True
        code = p.returncode if p is not None else None
        self.note(
            f"{slot.role}_exit",
            slot.name,
            p.pid if p is not None else 0,
            f"{why}: exit status {code}",
            code,
            ran_ms=int((time.monotonic() - slot.started) * 1000),
        )

    async def monitor(self, period_s: float = 0.1) -> None:
        """Refill slots whose process died without a fault (a poison task, a crash)."""
        while True:
            await asyncio.sleep(period_s)
            for slot in self.workers + self.reapers:
                p = slot.proc
                if slot.busy or p is None or p.poll() is None:
                    continue
                self._exited(slot, "unplanned")
                self.spawn(slot)
            if self.redis_lock.locked() or not self._redis_down():
                continue
            async with self.redis_lock:
                if self._redis_down():
                    rp = self.redis.proc
                    code = rp.returncode if rp is not None else None
                    self.note("redis_exit", "redis", rp.pid if rp else 0, "unplanned", code)
                    await self._start_redis()

    async def heal(self) -> None:
        """SIGCONT what is stopped, restart what is down."""
        async with self.redis_lock:
            if self._redis_down():
                await self._start_redis()
        for slot in self.workers + self.reapers:
            p = slot.proc
            if p is None or p.poll() is not None:
                self._exited(slot, "found down at heal")
                self.spawn(slot)
            elif slot.stopped:
                self.signal(slot, signal.SIGCONT, f"{slot.role}_cont", "heal")
                slot.stopped = False

    async def stop_processes(self, timeout_s: float) -> list[str]:
        """Graceful stop of workers and reapers (SIGTERM); returns those that needed -9."""
        slots = [s for s in self.workers + self.reapers if s.proc and s.proc.poll() is None]
        for s in slots:
            assert s.proc is not None
            self.sup.send(s.proc, signal.SIGCONT)
            self.sup.send(s.proc, signal.SIGTERM)
        end = time.monotonic() + timeout_s
        forced: list[str] = []
        for s in slots:
            assert s.proc is not None
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(s.proc.wait, max(0.01, end - time.monotonic()))
            if s.proc.poll() is None:
                forced.append(s.name)
                self.sup.send(s.proc, signal.SIGUSR1)  # stacks into its log (workers)
                await asyncio.sleep(1.0)
                self.sup.send(s.proc, signal.SIGKILL)
                await asyncio.to_thread(s.proc.wait, 5)
        return forced

    def cleanup(self, keep_data: bool) -> None:
        self.sup.cleanup()
        self.redis.proc = None
        if not keep_data:
            import shutil

            shutil.rmtree(self.redis.data_dir, ignore_errors=True)
