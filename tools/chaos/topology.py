"""The Redis of a chaos run: one server with AOF (``single``), a primary, one replica
and three sentinels on loopback (``sentinel``), or a Redis Cluster of three masters with
one replica each (``cluster``; AOF on every node).

A :class:`RedisNode` is one ``redis-server`` (AOF on, the run's ``appendfsync``) or one
sentinel; starting it and waiting for it to answer are awaits, never a blocking sleep
(a server loading a long AOF answers ``-LOADING`` until it is done). A topology knows
which node is the primary now and the URL every rsjobs process connects with: the
server's ``redis://`` URL, ``redis+sentinel://host:port,.../<service>/0`` through the
sentinels, or ``redis+cluster://host:port,...`` (every node a seed), so that clients
follow a failover. In a cluster "the primary" is the master serving the namespace's slot:
the one every Redis fault acts on.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable
from pathlib import Path

from redis.exceptions import RedisError

from rsjobs.errors import RedisUnavailable
from rsjobs.server import EmbeddedRedis, find_redis_server
from tools.topology import cluster_args, cluster_port, cluster_view, form_cluster, wait_cluster_ok

from .supervisor import Child, Supervisor

__all__ = ["SERVICE", "RedisNode", "Topology", "ask", "ping"]

#: the name the sentinels monitor the primary under
SERVICE = "chaos"


async def ask(port: int, *args: str, timeout_s: float = 2.0) -> str:
    """One command on a fresh connection to 127.0.0.1:``port``; its reply as text (a
    bulk or simple string, an integer, or an error line starting with ``-``); arrays are
    flattened to lines. Raises OSError / TimeoutError when the server does not answer."""

    async def call() -> str:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            req = f"*{len(args)}\r\n" + "".join(f"${len(a.encode())}\r\n{a}\r\n" for a in args)
            writer.write(req.encode())
            await writer.drain()
            return await _read_reply(reader)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    return await asyncio.wait_for(call(), timeout_s)


async def _read_reply(reader: asyncio.StreamReader) -> str:
    line = (await reader.readline()).decode(errors="replace").rstrip("\r\n")
    if not line:
        raise ConnectionError("connection closed")
    kind, rest = line[0], line[1:]
    if kind in "+:":
        return rest
    if kind == "-":
        return line
    if kind == "$":
        n = int(rest)
        if n < 0:
            return ""
        data = await reader.readexactly(n + 2)
        return data[:-2].decode(errors="replace")
    if kind == "*":
        n = int(rest)
        return "\n".join([await _read_reply(reader) for _ in range(max(n, 0))])
    raise ConnectionError(f"unexpected reply {line[:40]!r}")


async def ping(port: int, timeout_s: float = 0.5) -> bool:
    """PONG from the server (a server still loading its AOF answers -LOADING)."""
    try:
        return await ask(port, "PING", timeout_s=timeout_s) == "PONG"
    except (OSError, TimeoutError, ConnectionError, ValueError):
        return False


class RedisNode:
    """One redis-server (or sentinel) process of the run, restartable on its port."""

    def __init__(
        self,
        sup: Supervisor,
        name: str,
        *,
        data_dir: Path,
        appendfsync: str,
        sentinel_conf: str = "",
        extra_args: list[str] | None = None,
        on_exit: Callable[[RedisNode, Child], None] | None = None,
        port: int | None = None,
    ) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.sup = sup
        self.name = name
        self.sentinel = bool(sentinel_conf)
        # EmbeddedRedis only builds the command line (binary, port, AOF, directories)
        self._cmd = EmbeddedRedis(
            port,
            appendonly=True,
            appendfsync=appendfsync,
            data_dir=str(data_dir),
            extra_args=extra_args,
        )
        self.port = self._cmd.port
        self.data_dir = data_dir
        self.conf = data_dir / "sentinel.conf"
        if sentinel_conf:
            conf = sentinel_conf.replace("{port}", str(self.port))
            self.conf.write_text(conf.replace("{dir}", str(data_dir)))
        self.on_exit = on_exit
        self.child: Child | None = None
        self.starts = 0
        #: set while the harness ends this process on purpose (a fault, not a crash)
        self.expect_exit = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def up(self) -> bool:
        return self.child is not None and self.child.alive

    def argv(self, replicaof: int | None = None) -> list[str]:
        if self.sentinel:
            return [
                find_redis_server(),
                str(self.conf),
                "--sentinel",
                "--logfile",
                str(self.data_dir / "sentinel.log"),
            ]
        args = self._cmd.argv()
        if replicaof is not None:
            args += ["--replicaof", "127.0.0.1", str(replicaof)]
        return args

    async def start(self, replicaof: int | None = None, timeout_s: float = 120.0) -> Child:
        """Start the process (as a replica of the server on ``replicaof``) and wait until
        it answers PING; raises RedisUnavailable when it exits or never answers."""
        self.starts += 1
        self.expect_exit = False
        child = self.sup.spawn(
            self.argv(replicaof), log_name=f"{self.name}.out", on_exit=self._exited
        )
        self.child = child
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while True:
            if not child.alive:
                raise RedisUnavailable(
                    f"{self.name} exited with status {child.returncode}; see {self.data_dir}"
                )
            if await ping(self.port):
                return child
            if loop.time() > end:
                raise RedisUnavailable(f"{self.name} did not answer on port {self.port}")
            await asyncio.sleep(0.02)

    def _exited(self, child: Child) -> None:
        if child is self.child and self.on_exit is not None:
            self.on_exit(self, child)

    async def stop(self, *, kill: bool) -> int | None:
        """SIGTERM (a clean shutdown that completes the AOF) or SIGKILL; waits for the
        exit (SIGKILL after 10 s of a SIGTERM) and returns its status."""
        child = self.child
        if child is None or not child.alive:
            return child.returncode if child is not None else None
        self.expect_exit = True
        child.send(signal.SIGKILL if kill else signal.SIGTERM)
        code = await child.wait(10)
        if code is None:
            child.send(signal.SIGKILL)
            code = await child.wait(10)
        return code


#: a cluster run's masters (each with one replica)
CLUSTER_MASTERS = 3


class Topology:
    """The Redis side of a run: the data nodes, the sentinels (maybe none), and where
    the primary is (in a cluster: the master serving ``slot``, the namespace's)."""

    def __init__(
        self,
        sup: Supervisor,
        run_dir: Path,
        *,
        kind: str,
        appendfsync: str,
        down_after_ms: int,
        on_exit: Callable[[RedisNode, Child], None] | None = None,
        slot: int = 0,
    ) -> None:
        self.kind = kind
        self.slot = slot
        #: (cluster) the nodes' cluster-node-timeout; (sentinel) down-after-milliseconds
        self.down_after_ms = down_after_ms
        n_data = {"sentinel": 2, "cluster": 2 * CLUSTER_MASTERS}.get(kind, 1)
        # a replica resyncs as soon as its primary is back (Redis 7 waits 5 s for more
        # replicas first): with restarts every few seconds it would never be in sync, and
        # durable writes would never be confirmed. A cluster node fails over a master
        # silent for down_after_ms (longer than any freeze or restart), and needs a port
        # whose +10000 (its cluster bus) is free too
        extra = ["--repl-diskless-sync-delay", "0"] if n_data > 1 else None
        if kind == "cluster":
            extra = cluster_args(down_after_ms)
        self.nodes = [
            RedisNode(
                sup,
                "redis" if n_data == 1 else f"redis{i}",
                data_dir=run_dir / ("redis" if n_data == 1 else f"redis{i}"),
                appendfsync=appendfsync,
                extra_args=extra,
                on_exit=on_exit,
                port=cluster_port() if kind == "cluster" else None,
            )
            for i in range(n_data)
        ]
        self.sentinels: list[RedisNode] = []
        if kind == "sentinel":
            primary = self.nodes[0].port
            conf = (
                "port {port}\nbind 127.0.0.1\n"
                "dir {dir}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {primary} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} {down_after_ms}\n"
                f"sentinel failover-timeout {SERVICE} 10000\n"
                f"sentinel parallel-syncs {SERVICE} 1\n"
            )
            self.sentinels = [
                RedisNode(
                    sup,
                    f"sentinel{i}",
                    data_dir=run_dir / f"sentinel{i}",
                    appendfsync=appendfsync,
                    sentinel_conf=conf,
                    on_exit=on_exit,
                )
                for i in range(3)
            ]
        #: the node the harness last knew as the primary
        self.primary = self.nodes[0]

    @property
    def url(self) -> str:
        """What every rsjobs process connects with."""
        if self.kind == "sentinel":
            hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
            return f"redis+sentinel://{hosts}/{SERVICE}/0"
        if self.kind == "cluster":
            return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)
        return self.primary.url

    @property
    def all_nodes(self) -> list[RedisNode]:
        return self.nodes + self.sentinels

    def node(self, port: int) -> RedisNode | None:
        return next((n for n in self.nodes if n.port == port), None)

    def other(self, node: RedisNode) -> RedisNode:
        return next(n for n in self.nodes if n is not node)

    async def start(self) -> None:
        if self.kind == "cluster":
            for n in self.nodes:
                await n.start()
            ports = [n.port for n in self.nodes]
            # CLUSTER ADDSLOTS / MEET / REPLICATE, then until the nodes agree (in a thread:
            # the loop stays free to stamp the children's exits)
            await asyncio.to_thread(
                form_cluster, ports[:CLUSTER_MASTERS], ports[CLUSTER_MASTERS:], 60.0
            )
            await self.refresh_primary()
            return
        await self.nodes[0].start()
        for n in self.nodes[1:]:
            await n.start(replicaof=self.nodes[0].port)
        for s in self.sentinels:
            await s.start()
        if self.sentinels:
            await self.wait_synced(60)

    async def slot_table(self) -> tuple[tuple[int, int, int, tuple[int, ...]], ...] | None:
        """(cluster) The slot table as the first live node that answers says it."""
        for n in self.nodes:
            if not n.up:
                continue
            try:
                _, table = await asyncio.to_thread(cluster_view, n.port, 1.0)
            except (OSError, RedisError):
                continue
            if table:
                return table
        return None

    async def slot_owners(self) -> list[int | None]:
        """(cluster) The port of the master serving ``slot`` as each live node says it
        (None: no answer, or no owner): a failover has settled when they all name the
        new master; one node's word is not enough (a replica that "won" on a stale
        election's votes names itself while the others do not follow)."""

        def views() -> list[int | None]:
            out: list[int | None] = []
            for n in live:
                try:
                    _, table = cluster_view(n.port, 1.0)
                except (OSError, RedisError):
                    out.append(None)
                    continue
                out.append(next((m for a, b, m, _ in table if a <= self.slot <= b), None))
            return out

        live = [n for n in self.nodes if n.up]
        return await asyncio.to_thread(views)

    async def cluster_replica(self, master: RedisNode) -> RedisNode | None:
        """(cluster) A live replica of ``master``, as the slot table says."""
        for _, _, port, replicas in await self.slot_table() or ():
            if port == master.port:
                for r in replicas:
                    node = self.node(r)
                    if node is not None and node.up:
                        return node
        return None

    async def wait_cluster(self, timeout_s: float) -> bool:
        """(cluster) Until the live nodes agree on the slots, each master with a linked
        replica when every node is up."""
        live = [n.port for n in self.nodes if n.up]
        replicas = 1 if len(live) == len(self.nodes) else 0
        try:
            await asyncio.to_thread(wait_cluster_ok, live, timeout_s, frozenset(), replicas)
        except TimeoutError:
            return False
        return True

    async def sentinel_primary(self) -> tuple[int | None, list[int | None]]:
        """The primary's port as the sentinels see it: the answer of the first one that
        answers, and every sentinel's answer (None: no answer)."""
        answers: list[int | None] = []
        for s in self.sentinels:
            try:
                reply = await ask(s.port, "SENTINEL", "get-master-addr-by-name", SERVICE)
                answers.append(int(reply.split("\n")[1]) if "\n" in reply else None)
            except (OSError, TimeoutError, ConnectionError, ValueError, IndexError):
                answers.append(None)
        first = next((a for a in answers if a is not None), None)
        return first, answers

    async def refresh_primary(self) -> RedisNode:
        """Ask the sentinels where the primary is (a cluster: the master of the namespace's
        slot, as the slot table says; single: always the one node)."""
        if self.kind == "cluster":
            for first, last, master, _ in await self.slot_table() or ():
                owner = self.node(master) if first <= self.slot <= last else None
                if owner is not None:
                    self.primary = owner
            return self.primary
        if self.sentinels:
            port, _ = await self.sentinel_primary()
            node = self.node(port) if port is not None else None
            if node is not None:
                self.primary = node
        return self.primary

    async def role(self, node: RedisNode) -> str:
        """``master``, ``slave`` or '' (no answer)."""
        try:
            info = await ask(node.port, "ROLE", timeout_s=1.0)
        except (OSError, TimeoutError, ConnectionError, ValueError):
            return ""
        return info.split("\n", 1)[0] if not info.startswith("-") else ""

    async def _replica_info(self) -> str:
        """``INFO all`` of the primary's replica (a cluster: the node replicating it)."""
        candidates = [n for n in self.nodes if n is not self.primary and n.up]
        for node in candidates:
            info = await ask(node.port, "INFO", "all", timeout_s=1.0)
            if self.kind != "cluster" or f"master_port:{self.primary.port}" in info:
                return info
        return ""

    async def wait_synced(self, timeout_s: float) -> bool:
        """Until the primary has its replica online (state=online in INFO replication) and
        the replica has the data: its link up, no sync in progress, nothing loading. (The
        primary says online once it has streamed its RDB; a replica that downloads it in
        the background loads it a moment later, and one promoted in between comes up
        without it: Valkey 9.1 was seen to lose writes so, WAIT-acknowledged ones too.)"""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while loop.time() < end:
            try:
                info = await ask(self.primary.port, "INFO", "replication", timeout_s=1.0)
                mine = await self._replica_info()
            except (OSError, TimeoutError, ConnectionError, ValueError):
                info = mine = ""
            if (
                "state=online" in info
                and "role:master" in info
                and "master_link_status:up" in mine
                and "master_sync_in_progress:0" in mine
                and "loading:0" in mine
            ):
                return True
            await asyncio.sleep(0.1)
        return False
