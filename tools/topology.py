"""Local Redis topologies for tests and the chaos harness: a primary with replicas watched
by Sentinel, all real ``redis-server`` processes on 127.0.0.1 (free ports, temporary
directories, ended by pid).

    with ReplicaSet(replicas=1, sentinels=3) as rs:
        client = rsjobs.connect(rs.url)          # redis+sentinel://127.0.0.1:p1,.../rsjobs/0
        rs.failover()                            # SENTINEL FAILOVER; waits for the new primary
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
from redis.exceptions import RedisError

from rsjobs.server import EmbeddedRedis, find_redis_server, free_port

__all__ = ["ReplicaSet", "SentinelProcess"]


def _client(port: int, timeout: float = 2.0) -> redis.Redis:
    return redis.Redis(
        host="127.0.0.1", port=port, socket_timeout=timeout, socket_connect_timeout=timeout,
        decode_responses=True,
    )  # fmt: skip


def _call(port: int, *args: str, timeout: float = 2.0) -> Any:
    """One command to 127.0.0.1:``port`` on a fresh connection (closed after)."""
    c = _client(port, timeout)
    try:
        return c.execute_command(*args)
    finally:
        c.close()


class SentinelProcess:
    """One ``redis-server --sentinel`` watching ``service`` at a primary port."""

    def __init__(
        self,
        service: str,
        primary_port: int,
        quorum: int,
        down_after_ms: int,
        failover_timeout_ms: int,
    ) -> None:
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="rsjobs-sentinel-")
        self.conf = Path(self.dir, "sentinel.conf")
        self.conf.write_text(
            "\n".join([
                f"port {self.port}",
                "bind 127.0.0.1",
                f"dir {self.dir}",
                f"logfile {self.dir}/sentinel.log",
                f"sentinel monitor {service} 127.0.0.1 {primary_port} {quorum}",
                f"sentinel down-after-milliseconds {service} {down_after_ms}",
                f"sentinel failover-timeout {service} {failover_timeout_ms}",
                f"sentinel parallel-syncs {service} 1",
                "",
            ])
        )  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> SentinelProcess:
        self.proc = subprocess.Popen(
            [find_redis_server(), str(self.conf), "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if _call(self.port, "PING", timeout=0.5):
                    return self
            except (RedisError, OSError):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"sentinel on port {self.port} did not start; see {self.dir}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)


class ReplicaSet:
    """A primary, ``replicas`` replicas and ``sentinels`` sentinels for service ``service``.

    ``appendonly`` / ``appendfsync`` apply to every data node. ``url`` is the Sentinel URL
    rsjobs connects with. Use as a context manager, or call start()/cleanup().
    """

    def __init__(
        self,
        *,
        replicas: int = 1,
        sentinels: int = 3,
        service: str = "rsjobs",
        appendonly: bool = True,
        appendfsync: str = "everysec",
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 4000,
    ) -> None:
        self.service = service
        self.nodes = [EmbeddedRedis(appendonly=appendonly, appendfsync=appendfsync)]
        for _ in range(replicas):
            self.nodes.append(
                EmbeddedRedis(
                    appendonly=appendonly,
                    appendfsync=appendfsync,
                    extra_args=["--replicaof", "127.0.0.1", str(self.nodes[0].port)],
                )
            )
        quorum = max(1, sentinels // 2 + 1)
        self.sentinels = [
            SentinelProcess(service, self.nodes[0].port, quorum, down_after_ms,
                            failover_timeout_ms)
            for _ in range(sentinels)
        ]  # fmt: skip

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}/0"

    def start(self) -> ReplicaSet:
        for n in self.nodes:
            n.start()
        self.wait_synced()
        for s in self.sentinels:
            s.start()
        self.wait_primary(self.nodes[0].port)
        return self

    def node(self, port: int) -> EmbeddedRedis:
        for n in self.nodes:
            if n.port == port:
                return n
        raise KeyError(port)

    def _reported(self, sentinel: SentinelProcess) -> int | None:
        """The primary's port as ``sentinel`` reports it (None when it does not answer)."""
        try:
            addr = _call(
                sentinel.port, "SENTINEL", "get-master-addr-by-name", self.service, timeout=0.5
            )
        except (RedisError, OSError):
            return None
        return int(addr[1]) if addr else None

    def primary_port(self) -> int | None:
        """The primary's port as the first answering sentinel reports it."""
        for s in self.sentinels:
            port = self._reported(s)
            if port is not None:
                return port
        return None

    @staticmethod
    def role(port: int) -> str:
        """``master`` / ``slave`` as the node says, or ``down``."""
        try:
            return str(_call(port, "ROLE", timeout=0.5)[0])
        except (RedisError, OSError):
            return "down"

    def _snapshot(self) -> str:
        """What every sentinel reports and every node says, for a timeout's message."""
        reported = [self._reported(s) for s in self.sentinels]
        roles = {n.port: self.role(n.port) for n in self.nodes}
        return f"sentinels report {reported}, nodes say {roles}"

    def wait_primary(self, port: int, timeout: float = 30.0) -> None:
        """Until every sentinel names ``port`` and that node says it is a writable master."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            agree = all(self._reported(s) == port for s in self.sentinels)
            if agree and self.role(port) == "master":
                return
            time.sleep(0.1)
        raise TimeoutError(
            f"sentinels did not agree on primary {port} within {timeout:g}s: {self._snapshot()}"
        )

    def wait_synced(self, timeout: float = 30.0) -> None:
        """Until every replica of the current primary reports its link up."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            links = []
            for n in self.nodes:
                try:
                    info = _call(n.port, "INFO", "replication")
                except (RedisError, OSError):
                    continue
                if info.get("role") == "slave":
                    links.append(info.get("master_link_status") == "up")
            if all(links):
                return
            time.sleep(0.05)
        raise TimeoutError("replicas did not sync")

    def failover(self, timeout: float = 60.0) -> int:
        """``SENTINEL FAILOVER``: a replica becomes primary; returns its port once every
        sentinel names the same new primary and it accepts writes.

        On a loaded machine a sentinel may start a second failover right after the first
        (the new primary missed ``down_after_ms`` of pings): the wait is for any new
        primary that every sentinel agrees on, not for the first one named. The command
        is sent until a sentinel accepts it (one refuses it while a replica is still
        syncing), and never again after that: a second accepted command would be a second
        failover.
        """
        old = self.primary_port()
        deadline = time.monotonic() + timeout
        accepted = False
        while time.monotonic() < deadline:
            for s in [] if accepted else self.sentinels:
                try:
                    _call(s.port, "SENTINEL", "FAILOVER", self.service)
                    accepted = True
                    break
                except (RedisError, OSError):
                    continue
            reported = {self._reported(s) for s in self.sentinels}
            if len(reported) == 1:
                (new,) = reported
                if new is not None and new != old and self.role(new) == "master":
                    return new
            time.sleep(0.1)
        raise TimeoutError(f"no agreed failover within {timeout:g}s: {self._snapshot()}")

    def cleanup(self) -> None:
        for s in self.sentinels:
            s.stop()
        for n in self.nodes:
            n.cleanup()

    def __enter__(self) -> ReplicaSet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
