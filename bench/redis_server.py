"""Start and stop the benchmark's own Redis on a free loopback port.

Persistence is off (``--save "" --appendonly no``) so that no fork or disk write lands
inside a measurement window, and the data directory is a fresh temporary directory.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from rsjobs import server as rsjobs_server


def find_redis_server() -> str:
    """$BENCH_REDIS_SERVER (a server kept off PATH, e.g. another version to compare on),
    else the server rsjobs itself would start (:func:`rsjobs.server.find_redis_server`: a
    system server >= 7.0, else the embedded Valkey)."""
    return os.environ.get("BENCH_REDIS_SERVER") or rsjobs_server.find_redis_server()


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A redis-server child process; ``stop`` ends it by its pid."""

    def __init__(self) -> None:
        self.executable = find_redis_server()
        self.port = _free_loopback_port()
        self._dir = tempfile.TemporaryDirectory(prefix="rsjobs-bench-redis-")
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        log = Path(self._dir.name) / "redis.log"
        self._proc = subprocess.Popen(
            [
                self.executable,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self._dir.name,
                "--logfile",
                str(log),
                "--daemonize",
                "no",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(host="127.0.0.1", port=self.port)
        deadline = time.monotonic() + 15
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    tail = log.read_text()[-2000:] if log.exists() else ""
                    self.stop()
                    raise RuntimeError(f"redis-server did not start:\n{tail}") from None
                time.sleep(0.05)
        client.close()

    def version(self) -> str:
        client = redis.Redis(host="127.0.0.1", port=self.port)
        try:
            return str(client.info("server")["redis_version"])
        finally:
            client.close()

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        self._dir.cleanup()
