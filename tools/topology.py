"""Local Redis topologies for tests and the chaos harness: a primary with replicas watched
by Sentinel, all real ``redis-server`` processes on 127.0.0.1 (free ports, temporary
directories, ended by pid).

    with ReplicaSet(replicas=1, sentinels=3) as rs:
        client = rsjobs.connect(rs.url)          # redis+sentinel://127.0.0.1:p1,.../rsjobs/0
        rs.failover()                            # SENTINEL FAILOVER; waits for the new primary
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import redis
from redis.exceptions import RedisError

from rsjobs.server import EmbeddedRedis, find_redis_server, free_port

__all__ = [
    "Cluster",
    "Elections",
    "ReplicaSet",
    "SentinelProcess",
    "cluster_agreed",
    "cluster_args",
    "cluster_port",
    "cluster_view",
    "form_cluster",
    "node_role",
    "wait_cluster_ok",
]


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


# -- Redis Cluster -----------------------------------------------------------------------

#: the slots of a Redis Cluster
SLOTS = 16384
#: a node's cluster bus listens on its port + this (Redis < 7 has no cluster-port setting)
BUS_OFFSET = 10000
#: a slot table: (first slot, last slot, master port, replica ports) per range
SlotTable = tuple[tuple[int, int, int, tuple[int, ...]], ...]


def cluster_port() -> int:
    """A loopback port free now whose cluster bus port (+10000) is free too, both below
    the ephemeral range when there is room (see :func:`rsjobs.server.free_port`)."""
    lo, _ = _ephemeral_range()
    top = max(lo - BUS_OFFSET, 10001)
    for _ in range(200):
        port = random.randrange(10000, top) if top > 10000 else free_port()
        if port + BUS_OFFSET >= 65536:
            continue
        if _bindable(port) and _bindable(port + BUS_OFFSET):
            return port
    raise RuntimeError("no free port pair for a cluster node")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_args(node_timeout_ms: int) -> list[str]:
    """What makes a redis-server a cluster node (its config file in its data directory)."""
    return [
        "--cluster-enabled", "yes",
        "--cluster-config-file", "nodes.conf",
        "--cluster-node-timeout", str(node_timeout_ms),
        # a replica takes over whatever its link's age (the tests kill masters at once)
        "--cluster-replica-validity-factor", "0",
        "--repl-diskless-sync", "yes",
        "--repl-diskless-sync-delay", "0",
    ]  # fmt: skip


class Elections:
    """When a Redis Cluster (6.2 and 7.x) can elect a replica again: two limits of its
    failover election, which a manual failover (``CLUSTER FAILOVER``, ``FORCE`` too) does
    not lift. Asked sooner, the election fails and the cluster stays as it was for
    4 x ``cluster-node-timeout`` (or until the old master is back); see docs/cluster.md,
    "Failovers in a row".

    * **Votes per master.** A master votes for a replica of master M at most once per
      2 x node timeout (it logs ``Failover auth denied to <id>: can't vote about this
      master before N milliseconds``); the refused replica tries again only 4 x node
      timeout after its attempt began.
    * **Elections per replica.** A replica that ran an election, won or lost, runs no new
      one for 4 x node timeout while its process lives: within 2 x it "wins" again at
      once on the old election's votes and epoch, a claim the other masters ignore (the
      slot has no master they accept until the old one is back), and from 2 x to 4 x the
      attempt is "expired". A restart forgets it.

    Nodes are named by any key (a port, a name); times are ``time.monotonic()`` seconds
    (an asyncio loop's ``time()``). :meth:`elected` takes an upper bound of when the
    election ran (when it was seen settled, or given up on), so a wait computed from it
    is never short.
    """

    def __init__(self, node_timeout_ms: int, margin_s: float = 0.5) -> None:
        self.vote_gap_s = 2 * node_timeout_ms / 1000
        self.retry_gap_s = 4 * node_timeout_ms / 1000
        self.margin_s = margin_s
        #: master -> when a replica of it last ran an election (the masters' vote times)
        self._voted: dict[Hashable, float] = {}
        #: replica -> when it last ran an election in its current process
        self._ran: dict[Hashable, float] = {}

    def elected(self, replica: Hashable, master: Hashable, at: float | None = None) -> None:
        """``replica`` ran an election (won or not) to replace ``master``, at ``at`` at
        the latest (default: now)."""
        at = time.monotonic() if at is None else at
        self._voted[master] = max(at, self._voted.get(master, at))
        self._ran[replica] = max(at, self._ran.get(replica, at))

    def restarted(self, node: Hashable) -> None:
        """``node``'s process was started again: its own election clock is gone."""
        self._ran.pop(node, None)

    def wait(
        self, replica: Hashable, master: Hashable, now: float | None = None
    ) -> tuple[float, str]:
        """Seconds until ``replica`` can be elected in place of ``master`` (0: now), and
        why it cannot yet ('' when it can)."""
        now = time.monotonic() if now is None else now
        waits: list[tuple[float, str]] = [(0.0, "")]
        voted = self._voted.get(master)
        if voted is not None:
            waits.append((
                voted + self.vote_gap_s + self.margin_s - now,
                f"a replica of {master} was elected {now - voted:.1f} s ago: the masters "
                f"vote about {master} again {self.vote_gap_s:g} s after "
                "(2 x cluster-node-timeout)",
            ))  # fmt: skip
        ran = self._ran.get(replica)
        if ran is not None:
            waits.append((
                ran + self.retry_gap_s + self.margin_s - now,
                f"{replica} ran an election {now - ran:.1f} s ago: it runs a new one "
                f"{self.retry_gap_s:g} s after (4 x cluster-node-timeout) unless restarted",
            ))  # fmt: skip
        hold, why = max(waits)
        return (round(hold, 3), why) if hold > 0 else (0.0, "")


def slot_ranges(masters: int) -> list[tuple[int, int]]:
    """The 16384 slots split into ``masters`` contiguous ranges (first, last)."""
    step = SLOTS // masters
    out = []
    for i in range(masters):
        first = i * step
        last = SLOTS - 1 if i == masters - 1 else (i + 1) * step - 1
        out.append((first, last))
    return out


def cluster_view(port: int, timeout: float = 2.0) -> tuple[str, SlotTable]:
    """What the node on ``port`` says: its ``cluster_state`` and its slot table (first,
    last, master port, replica ports), sorted. Masters and ranges from ``CLUSTER SLOTS``,
    replicas from ``CLUSTER NODES`` (Redis 7 leaves a new replica out of CLUSTER SLOTS
    for seconds after it is linked). Raises RedisError / OSError when it does not answer."""
    info = _call(port, "CLUSTER", "INFO", timeout=timeout)
    state = ""
    for line in str(info).splitlines():
        if line.startswith("cluster_state:"):
            state = line.split(":", 1)[1].strip()
    replicas: dict[str, list[int]] = {}
    for line in str(_call(port, "CLUSTER", "NODES", timeout=timeout)).splitlines():
        parts = line.split()
        if len(parts) < 8:
            continue
        flags = set(parts[2].split(","))
        if "slave" in flags and not flags & {"fail", "fail?", "handshake", "noaddr"}:
            address = parts[1].split("@", 1)[0]
            replicas.setdefault(parts[3], []).append(int(address.rpartition(":")[2]))
    rows = []
    for r in _call(port, "CLUSTER", "SLOTS", timeout=timeout):
        first, last, master = r[:3]
        linked = tuple(sorted(replicas.get(str(master[2]), [])))
        rows.append((int(first), int(last), int(master[1]), linked))
    return state, tuple(sorted(rows))


def node_role(port: int) -> str:
    """``master`` / ``slave`` as the node on ``port`` says, or ``down``."""
    try:
        return str(_call(port, "ROLE", timeout=0.5)[0])
    except (RedisError, OSError):
        return "down"


def _until(ok: Any, timeout: float, what: str, ports: list[int]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if ok():
                return
        except (RedisError, OSError):
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{what} within {timeout:g}s: {cluster_snapshot(ports)}")


def form_cluster(masters: list[int], replicas: list[int], timeout: float = 60.0) -> SlotTable:
    """Make a cluster of the (started, empty) cluster-enabled nodes on these ports: the
    slots split among ``masters`` (CLUSTER ADDSLOTS), every node met (CLUSTER MEET),
    replica ``i`` a replica of master ``i % len(masters)`` (CLUSTER REPLICATE); returns
    the slot table once every node agrees on it (:func:`wait_cluster_ok`)."""
    ports = masters + replicas
    for port, (first, last) in zip(masters, slot_ranges(len(masters)), strict=True):
        _call(port, "CLUSTER", "ADDSLOTS", *map(str, range(first, last + 1)))
    for port in ports[1:]:
        _call(ports[0], "CLUSTER", "MEET", "127.0.0.1", str(port))

    def met() -> bool:
        for p in ports:
            lines = str(_call(p, "CLUSTER", "NODES")).strip().splitlines()
            if len(lines) != len(ports) or any("handshake" in x or "noaddr" in x for x in lines):
                return False
        return True

    _until(met, timeout, "the nodes did not meet", ports)
    for i, port in enumerate(replicas):
        master = masters[i % len(masters)]
        master_id = str(_call(master, "CLUSTER", "MYID"))
        _until(
            lambda port=port, mid=master_id: _replicate(port, mid),
            timeout,
            f"node {port} did not become a replica of {master}",
            ports,
        )
    return wait_cluster_ok(ports, timeout, replicas=len(replicas) // len(masters))


def cluster_snapshot(ports: list[int]) -> str:
    """What each node on ``ports`` says (for a timeout's message)."""
    out = []
    for p in ports:
        try:
            state, table = cluster_view(p)
            out.append(f"{p}: {state} {list(table)}")
        except (RedisError, OSError) as exc:
            out.append(f"{p}: {type(exc).__name__}")
    return "; ".join(out)


def cluster_agreed(
    live: list[int], dead: set[int] | frozenset[int] = frozenset(), replicas: int = 0
) -> SlotTable | None:
    """The slot table when every node on ``live`` says ``cluster_state:ok`` and the same
    table, the table covers every slot with masters that say they are masters, each with
    ``replicas`` replicas at least, and every replica it lists is linked to its master
    (none of them in ``dead``); else None."""
    tables = set()
    for p in live:
        try:
            state, table = cluster_view(p)
        except (RedisError, OSError):
            return None
        if state != "ok":
            return None
        tables.add(table)
    if len(tables) != 1:
        return None
    (table,) = tables
    if sum(last - first + 1 for first, last, _, _ in table) != SLOTS:
        return None
    for _, _, master, linked in table:
        if master in dead or node_role(master) != "master" or len(linked) < replicas:
            return None
        for r in linked:
            if r in dead:
                return None
            try:
                info = _call(r, "INFO", "replication")
            except (RedisError, OSError):
                return None
            if info.get("master_link_status") != "up":
                return None
    return table


def wait_cluster_ok(
    live: list[int],
    timeout: float = 60.0,
    dead: set[int] | frozenset[int] = frozenset(),
    replicas: int = 0,
) -> SlotTable:
    """Until :func:`cluster_agreed`; the table."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        table = cluster_agreed(live, dead, replicas)
        if table is not None:
            return table
        time.sleep(0.05)
    raise TimeoutError(f"the cluster did not settle within {timeout:g}s: {cluster_snapshot(live)}")


class Cluster:
    """A Redis Cluster on loopback: ``masters`` masters with ``replicas`` replicas each,
    real ``redis-server`` processes of the session's binary (CLUSTER ADDSLOTS / MEET /
    REPLICATE; every wait bounded).

        with Cluster() as c:
            client = rsjobs.connect(c.url)       # redis+cluster://127.0.0.1:p1,...
            new = c.failover(c.owner(slot))      # CLUSTER FAILOVER on a replica
            c.kill(c.owner(slot)); c.wait_ok()   # kill -9 a master; a replica takes over
            c.heal()                             # killed nodes back (as replicas)
    """

    def __init__(
        self,
        *,
        masters: int = 3,
        replicas: int = 1,
        node_timeout_ms: int = 1000,
        appendonly: bool = False,
        appendfsync: str = "everysec",
    ) -> None:
        self.n_masters = masters
        self.n_replicas = replicas
        self.nodes = [
            EmbeddedRedis(
                cluster_port(),
                repick=cluster_port,
                appendonly=appendonly,
                appendfsync=appendfsync,
                extra_args=cluster_args(node_timeout_ms),
            )
            for _ in range(masters * (1 + replicas))
        ]
        self.killed: set[int] = set()
        #: slot ranges each killed master served when it was killed
        self._served: dict[int, list[tuple[int, int]]] = {}
        #: when the cluster can elect each replica again (by port)
        self.elections = Elections(node_timeout_ms)

    # -- addresses -------------------------------------------------------------------------

    @property
    def ports(self) -> list[int]:
        return [n.port for n in self.nodes]

    @property
    def url(self) -> str:
        """The cluster URL rsjobs connects with (every node a seed)."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def node_url(self, port: int) -> str:
        """The plain URL of one node."""
        return f"redis://127.0.0.1:{port}/0"

    def node(self, port: int) -> EmbeddedRedis:
        for n in self.nodes:
            if n.port == port:
                return n
        raise KeyError(port)

    def live(self) -> list[int]:
        return [p for p in self.ports if p not in self.killed]

    def view(self) -> SlotTable:
        """The slot table as the first live node that answers says it."""
        for p in self.live():
            try:
                return cluster_view(p)[1]
            except (RedisError, OSError):
                continue
        raise RedisError("no cluster node answers")

    def masters(self) -> list[int]:
        """The masters' ports (by slot range)."""
        return [m for _, _, m, _ in self.view()]

    def owner(self, slot: int) -> int:
        """The port of the master that serves ``slot``."""
        for first, last, master, _ in self.view():
            if first <= slot <= last:
                return master
        raise KeyError(slot)

    def replicas_of(self, port: int) -> list[int]:
        for _, _, master, replicas in self.view():
            if master == port:
                return list(replicas)
        return []

    # -- life cycle ------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> Cluster:
        try:
            for n in self.nodes:
                n.start()
            form_cluster(
                [n.port for n in self.nodes[: self.n_masters]],
                [n.port for n in self.nodes[self.n_masters :]],
                timeout,
            )
        except BaseException:
            self.cleanup()
            raise
        return self

    def snapshot(self) -> str:
        """What every live node says (for a timeout's message)."""
        return cluster_snapshot(self.live())

    def agreed(self) -> SlotTable | None:
        """The slot table once the live nodes agree on it (:func:`cluster_agreed`; with
        no node killed, every master has its replicas)."""
        return cluster_agreed(self.live(), self.killed, self._replicas())

    def wait_ok(self, timeout: float = 60.0) -> SlotTable:
        """Until :meth:`agreed` (every live node ok and in agreement); the table."""
        return wait_cluster_ok(self.live(), timeout, self.killed, self._replicas())

    def _replicas(self) -> int:
        return 0 if self.killed else self.n_replicas

    @staticmethod
    def role(port: int) -> str:
        """``master`` / ``slave`` as the node says, or ``down``."""
        return node_role(port)

    # -- faults ----------------------------------------------------------------------------

    def failover(self, master: int, timeout: float = 60.0) -> int:
        """``CLUSTER FAILOVER`` on a replica of ``master`` (a coordinated switch: no write
        is lost); returns the new master's port once the whole cluster agrees on it.

        Asked only once the cluster can carry it out: every live node agrees on the
        slots and replicas (a master that still takes the replica for a master refuses
        its vote), and :attr:`elections` allows it (sleeps until then)."""
        deadline = time.monotonic() + timeout
        self.wait_ok(timeout)
        replicas = [r for r in self.replicas_of(master) if r not in self.killed]
        if not replicas:
            raise RuntimeError(f"master {master} has no live replica")
        new = replicas[0]
        hold, why = self.elections.wait(new, master)
        if hold > deadline - time.monotonic():
            raise TimeoutError(f"{new} cannot be elected within {timeout:g}s: {why}")
        time.sleep(hold)
        _call(new, "CLUSTER", "FAILOVER")
        try:
            while time.monotonic() < deadline:
                table = self.agreed()
                if table is not None and any(m == new for _, _, m, _ in table):
                    return new
                time.sleep(0.05)
        finally:
            self.elections.elected(new, master)
        raise TimeoutError(f"failover of {master} to {new} did not settle: {self.snapshot()}")

    def kill(self, port: int) -> None:
        """SIGKILL one node (a master's replica takes over once the others mark it failed:
        :meth:`wait_replaced`)."""
        try:
            self._served[port] = [(a, b) for a, b, m, _ in self.view() if m == port]
        except RedisError:
            pass
        node = self.node(port)
        if node.proc is not None:
            node.proc.kill()
            node.proc.wait(10)
            node.proc = None
        self.killed.add(port)

    def wait_replaced(self, old: int, timeout: float = 60.0) -> int:
        """After :meth:`kill` of a master: until another node serves its slots and the
        live nodes agree; the new master's port."""
        served = self._served.get(old, [])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            table = self.agreed()
            if table is not None and served:
                first = served[0][0]
                for a, b, m, _ in table:
                    if a <= first <= b and m != old:
                        self.elections.elected(m, old)
                        return m
            time.sleep(0.05)
        raise TimeoutError(f"no replica took over from {old}: {self.snapshot()}")

    def heal(self, timeout: float = 60.0) -> None:
        """Start every killed node again (it rejoins as a replica of its replacement) and
        wait until the cluster agrees, with every replica linked."""
        for port in sorted(self.killed):
            node = self.node(port)
            node.start()
            self.killed.discard(port)
            self.elections.restarted(port)
        self.wait_ok(timeout)

    # -- resharding (the steps of ``redis-cli --cluster reshard``, one at a time) -----------

    def begin_migration(self, slot: int, source: int, target: int) -> None:
        """``CLUSTER SETSLOT slot IMPORTING`` on ``target``, then ``MIGRATING`` on
        ``source`` (the master serving it): from now on, keys moved answer ``ASK``."""
        _call(target, "CLUSTER", "SETSLOT", str(slot), "IMPORTING", _node_id(source))
        _call(source, "CLUSTER", "SETSLOT", str(slot), "MIGRATING", _node_id(target))

    def migrate_keys(self, slot: int, source: int, target: int, count: int) -> int:
        """``MIGRATE`` up to ``count`` keys of ``slot`` from ``source`` to ``target``; how
        many were moved (0: none is left)."""
        keys = _call(source, "CLUSTER", "GETKEYSINSLOT", str(slot), str(count))
        if keys:
            _call(source, "MIGRATE", "127.0.0.1", str(target), "", "0", "5000", "KEYS", *keys)
        return len(keys)

    def end_migration(self, slot: int, target: int) -> None:
        """``CLUSTER SETSLOT slot NODE target`` on the target, then every other master;
        until the whole cluster agrees."""
        owner = _node_id(target)
        others = [m for m in self.masters() if m != target]
        for port in [target, *others]:  # the target first: it bumps its epoch (if importing)
            _call(port, "CLUSTER", "SETSLOT", str(slot), "NODE", owner)
        for port in others:  # what a migration left open elsewhere
            _call(port, "CLUSTER", "SETSLOT", str(slot), "STABLE")
        _until(
            lambda: (
                (table := self.agreed()) is not None
                and any(a <= slot <= b and m == target for a, b, m, _ in table)
            ),
            30.0,
            f"slot {slot} did not settle on {target}",
            self.live(),
        )

    def give_slot(self, slot: int, owner: int) -> None:
        """``slot`` served by ``owner`` with every key of it, whatever a migration left
        (keys split by an open one, or a finished one): for a test to heal what it moved."""
        current = self.owner(slot)
        if current != owner:  # moved away: move it back, as a reshard would
            for port in (owner, current):
                _call(port, "CLUSTER", "SETSLOT", str(slot), "STABLE")
            self.begin_migration(slot, current, owner)
        for port in self.masters():  # an open migration lets MIGRATE run on either side
            while port != owner and self.migrate_keys(slot, port, owner, 100):
                pass
        self.end_migration(slot, owner)

    def flush(self) -> None:
        """FLUSHALL on every master (the data of every test starts empty)."""
        for m in self.masters():
            _call(m, "FLUSHALL")

    def cleanup(self) -> None:
        for n in self.nodes:
            n.cleanup()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def _node_id(port: int) -> str:
    return str(_call(port, "CLUSTER", "MYID"))


def _replicate(port: int, master_id: str) -> bool:
    """CLUSTER REPLICATE (refused until the node has heard of the master; then retried)."""
    _call(port, "CLUSTER", "REPLICATE", master_id)
    return True


def _ephemeral_range() -> tuple[int, int]:
    from rsjobs.server import _ephemeral_range as ephemeral

    return ephemeral()
