"""The processes of a chaos run: Redis (one server, a primary + replica + sentinels, or a
Redis Cluster), workers, reapers and the web app, on loopback.

:class:`Cluster` keeps *slots* (worker 0..n-1, reaper 0..m-1, web 0); a fault replaces
the process in a slot, and an unplanned exit is logged — at the time the watcher saw it
(:mod:`.supervisor`), not when someone noticed — and the slot refilled at once. Every
wait is an await: nothing here blocks the event loop, so the times it stamps are true.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import rsjobs
from rsjobs.errors import RedisUnavailable
from rsjobs.server import free_port
from rsjobs.store.cluster import slot_of
from rsjobs.store.keys import Keys
from tools.topology import Elections

from .config import ChaosConfig
from .records import FaultEvent
from .supervisor import Child, Supervisor, now_ms
from .topology import SERVICE, RedisNode, Topology, ask
from .workload import QUEUE, QUEUE_QUOTA

__all__ = ["Cluster", "Slot"]

#: the workflow definitions the web app may start (``tools.chaos.flows``)
WEB_DEFINITIONS = "tools.chaos.flows:definitions"


class Slot:
    """One place for a worker, a reaper or the web app; ``gen`` counts its processes."""

    def __init__(self, role: str, index: int) -> None:
        self.role = role
        self.index = index
        self.gen = 0
        self.name = ""
        self.child: Child | None = None
        #: faults acting on the slot now (an exit then is theirs to handle)
        self.busy = 0
        self.stopped = False
        #: the harness is ending this process on purpose (SIGKILL / SIGTERM fault)
        self.expect_exit = False
        #: unplanned exits in a row, each soon after its start
        self.quick_exits = 0

    @property
    def alive(self) -> bool:
        return self.child is not None and self.child.alive


class Cluster:
    """Redis + worker, reaper and web slots, and the log of what happened to them."""

    def __init__(
        self, cfg: ChaosConfig, run_dir: Path, echo: Callable[[str], None] = print
    ) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.echo = echo
        self.sup = Supervisor(run_dir)
        self.topology = Topology(
            self.sup,
            run_dir,
            kind=cfg.topology,
            appendfsync=cfg.fsync,
            # longer than any freeze or restart: only the harness's failovers happen
            down_after_ms=max(10_000, cfg.lease_ms * 4),
            on_exit=self._node_exit,
            # (cluster) the faults act on the master serving the namespace's slot
            slot=slot_of(Keys(cfg.namespace).layout),
        )
        self.redis_lock = asyncio.Lock()
        #: (cluster) when the cluster can elect each replica again (by node name)
        self.elections = Elections(self.topology.down_after_ms)
        self.workers = [Slot("worker", i) for i in range(cfg.workers)]
        self.reapers = [Slot("reaper", i) for i in range(cfg.reapers)]
        self.webs = [Slot("web", 0)] if cfg.web else []
        self.web_port = free_port()
        self.web_token = secrets.token_hex(16)
        #: the web app's callback secret (the hostile mix signs callbacks with it) and the
        #: owners' tokens (it lists their tasks with them)
        self.callback_secret = secrets.token_hex(16)
        self.owner_tokens = {o: secrets.token_hex(16) for o in ("alice", "bob")}
        self.events: list[FaultEvent] = []
        #: False once the graceful stop began: exits are no longer refilled
        self.refill = True
        self._revivals: set[asyncio.Task[None]] = set()
        # the children import rsjobs and this harness (tools.chaos.handlers) from here
        roots = dict.fromkeys(
            [
                str(Path(rsjobs.__file__).resolve().parents[1]),
                str(Path(__file__).resolve().parents[2]),
            ]
        )
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join([*roots, self.env.get("PYTHONPATH", "")])
        self.env["RSJOBS_CHAOS_URL"] = self.url
        self.env["RSJOBS_CHAOS_NAMESPACE"] = cfg.namespace
        self.env["RSJOBS_ADMIN_TOKEN"] = self.web_token
        self.env["RSJOBS_CALLBACK_SECRET"] = self.callback_secret
        self.env["RSJOBS_TOKENS"] = ",".join(f"{t}={o}" for o, t in self.owner_tokens.items())
        self.env["RSJOBS_QUEUE_QUOTA"] = str(QUEUE_QUOTA)

    @property
    def url(self) -> str:
        return self.topology.url

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def slots(self) -> list[Slot]:
        return self.workers + self.reapers + self.webs

    def note(
        self,
        kind: str,
        target: str,
        pid: int = 0,
        detail: str = "",
        status: int | None = None,
        *,
        ran_ms: int = 0,
        at_ms: int | None = None,
    ) -> FaultEvent:
        ev = FaultEvent(
            at_ms=now_ms() if at_ms is None else at_ms,
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
        return ev

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
        if slot.role == "web":
            durable = ["--wait-replicas", "1"] if cfg.durable else []
            return [
                *base,
                *durable,
                "web",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.web_port),
                "--workflows",
                WEB_DEFINITIONS,
                "--max-streams",
                "0",
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
        short = {"worker": "w", "reaper": "r", "web": "web"}[slot.role]
        slot.name = f"chaos-{short}{slot.index}g{slot.gen}"
        slot.stopped = False
        slot.expect_exit = False
        slot.child = self.sup.spawn(
            self._argv(slot),
            log_name=f"{slot.name}.log",
            env=self.env,
            on_exit=lambda child: self._slot_exit(slot, child),
        )
        self.note(f"{slot.role}_start", slot.name, slot.child.pid)

    def _slot_exit(self, slot: Slot, child: Child) -> None:
        """A slot's process exited: a fault's doing (it handles the rest), or unplanned:
        logged at its exit time and refilled at once (unless a fault holds the slot)."""
        if child is not slot.child or slot.expect_exit or child.noted:
            return
        child.noted = True
        self.note(
            f"{slot.role}_exit",
            slot.name,
            child.pid,
            f"unplanned: exit status {child.returncode}",
            child.returncode,
            ran_ms=child.ran_ms,
            at_ms=child.exit_ms,
        )
        if not self.refill or slot.busy:
            return
        # a process that dies right after its start (a crash loop) is restarted with a
        # growing delay, so that one bad input cannot make the harness fork non-stop
        slot.quick_exits = slot.quick_exits + 1 if child.ran_ms < 5000 else 0
        if slot.quick_exits <= 1:
            self.spawn(slot)
            return
        delay = min(5.0, 0.25 * 2**slot.quick_exits)
        asyncio.get_running_loop().call_later(delay, self._respawn_later, slot, child)

    def _respawn_later(self, slot: Slot, child: Child) -> None:
        if slot.child is child and self.refill and not slot.busy and not self.sup.closed:
            self.spawn(slot)

    def refill_if_dead(self, slot: Slot) -> None:
        """After a fault let go of ``slot``: refill it if its process died meanwhile."""
        if self.refill and not slot.busy and not slot.alive:
            if slot.child is not None and not slot.child.noted:
                self._slot_exit(slot, slot.child)
            else:
                self.spawn(slot)

    def signal(self, slot: Slot, sig: int, kind: str, detail: str = "") -> bool:
        """Send ``sig`` to the slot's process and log it as ``kind`` (at the moment it was
        sent); False when the process was already gone (its exit was logged then)."""
        child = slot.child
        if child is None:
            return False
        ending = sig in (signal.SIGKILL, signal.SIGTERM)
        if ending:
            slot.expect_exit = True
        at = now_ms()
        if not child.send(sig):
            if ending:
                slot.expect_exit = False
                self._slot_exit(slot, child)  # logged once: the callback saw expect_exit
            return False
        self.note(kind, slot.name, child.pid, detail, at_ms=at)
        return True

    async def start(self) -> None:
        await self.topology.start()
        for n in self.topology.all_nodes:
            self.note("redis_up", n.name, n.child.pid if n.child else 0)
        for slot in self.slots:
            self.spawn(slot)

    # -- Redis faults --------------------------------------------------------------------

    async def restart_redis(self, kill: bool, down_s: float) -> None:
        """Stop the primary (SIGTERM: a clean shutdown that writes the AOF; or SIGKILL),
        keep it down ``down_s``, start it again on the same port and data directory.
        Redis faults never overlap: each holds ``redis_lock``."""
        async with self.redis_lock:
            node = await self.primary()
            try:
                pid = node.child.pid if node.child else 0
                kind = "redis_kill" if kill else "redis_term"
                node.expect_exit = True
                self.note(kind, node.name, pid, f"down {down_s:.2f}s")
                await node.stop(kill=kill)
                await asyncio.sleep(down_s)
            finally:
                await self._start_node(node)

    async def drop_clients(self) -> None:
        """The primary closes every client connection (a network blip); it keeps running."""
        async with self.redis_lock:
            node = await self.primary()
            n = 0
            for kind in ("normal", "pubsub"):
                reply = await ask(node.port, "CLIENT", "KILL", "TYPE", kind, "SKIPME", "yes")
                n += int(reply) if reply.isdigit() else 0
            self.note("redis_drop", node.name, 0, f"{n} connections closed")

    async def freeze(self, hold_s: float, sleep: Callable[[float], Awaitable[bool]]) -> None:
        """SIGSTOP the primary for ``hold_s`` (``sleep`` ends early when healing starts),
        then SIGCONT: every connection hangs, nothing is lost."""
        async with self.redis_lock:
            node = await self.primary()
            child = node.child
            if child is None or not child.send(signal.SIGSTOP):
                self.note("fault_skipped", node.name, 0, "redis_freeze: not running")
                return
            self.note("redis_freeze", node.name, child.pid, f"{hold_s:.2f}s")
            try:
                await sleep(hold_s)
            finally:
                child.send(signal.SIGCONT)
                self.note("redis_thaw", node.name, child.pid)

    async def failover(
        self, kill: bool, down_s: float, sleep: Callable[[float], Awaitable[bool]]
    ) -> None:
        """``SENTINEL FAILOVER`` (with ``kill``: SIGKILL the primary first, then bring it
        back after ``down_s`` as a replica of the new one). Logged as ``redis_failover``
        when it starts and ``redis_failover_done`` once every sentinel names the new
        primary and the old one is its replica: writes acknowledged in between may be lost
        without WAIT (the report lists them apart)."""
        topo = self.topology
        async with self.redis_lock:
            old = await self.primary()
            new = topo.other(old)
            if not await topo.wait_synced(10):
                self.note("fault_skipped", old.name, 0, "redis_failover: replica not in sync")
                return
            how = "SIGKILL + SENTINEL FAILOVER" if kill else "SENTINEL FAILOVER"
            self.note("redis_failover", old.name, old.child.pid if old.child else 0, how)
            try:
                if kill:
                    old.expect_exit = True
                    await old.stop(kill=True)
                await self._ask_failover()
                settled = await self._wait_primary(new, 30)
                if kill:
                    await sleep(down_s)
                    await self._start_node(old)
                else:
                    settled = settled and await self._wait_role(old, "slave", 30)
                self.note(
                    "redis_failover_done",
                    new.name,
                    new.child.pid if new.child else 0,
                    f"primary now {new.name}" + ("" if settled else " (not settled in 30 s)"),
                )
            finally:
                if not old.up:
                    await self._start_node(old)

    async def cluster_failover(
        self, kill: bool, down_s: float, sleep: Callable[[float], Awaitable[bool]]
    ) -> None:
        """``CLUSTER FAILOVER`` on a replica of the master serving the namespace (with
        ``kill``: SIGKILL that master first and ``CLUSTER FAILOVER FORCE``, then bring it
        back after ``down_s``: it rejoins as a replica of the new one). Logged as
        ``cluster_failover`` when it starts and ``cluster_failover_done`` once the live
        nodes agree that the replica serves the slot: without WAIT, writes acknowledged in
        between may be lost by the kill variant (the report lists them apart).

        Asked only when the cluster can elect the replica, as a real one must be: every
        live node agrees on the slots and replicas (the previous failover settled: a
        master that still takes the replica for a master refuses its vote), and the
        election limits of :class:`tools.topology.Elections` allow it. Until then it
        waits (``sleep``, without holding the Redis lock; logged as
        ``cluster_failover_wait``), and is skipped if the run ends first."""
        topo = self.topology
        loop = asyncio.get_running_loop()
        for _ in range(5):  # another failover may take the shard while this one waits
            async with self.redis_lock:
                began = loop.time()
                settled = await topo.wait_cluster(30)
                old = await self.primary()
                if not settled:
                    self.note("fault_skipped", old.name, 0, "cluster_failover: not settled")
                    return
                if loop.time() - began > 0.5:
                    took = loop.time() - began
                    self.note(
                        "cluster_failover_wait",
                        old.name,
                        0,
                        f"{took:.1f}s until every node agreed on the slots and replicas",
                    )
                new = await topo.cluster_replica(old)
                if new is None or not await topo.wait_synced(10):
                    self.note("fault_skipped", old.name, 0, "cluster_failover: replica not in sync")
                    return
                hold, why = self.elections.wait(new.name, old.name, loop.time())
                if hold <= 0:
                    await self._cluster_failover(old, new, kill, down_s, sleep)
                    return
            self.note("cluster_failover_wait", new.name, 0, f"{hold:.1f}s: {why}")
            if not await sleep(hold):
                self.note("fault_skipped", new.name, 0, "cluster_failover: the run ended first")
                return
        self.note("fault_skipped", topo.primary.name, 0, "cluster_failover: kept waiting")

    async def _cluster_failover(
        self,
        old: RedisNode,
        new: RedisNode,
        kill: bool,
        down_s: float,
        sleep: Callable[[float], Awaitable[bool]],
    ) -> None:
        """The failover itself (under the Redis lock); the election it ran is noted in
        :attr:`elections`, settled or not."""
        how = "SIGKILL + CLUSTER FAILOVER FORCE" if kill else "CLUSTER FAILOVER"
        self.note("cluster_failover", old.name, old.child.pid if old.child else 0, how)
        try:
            if kill:
                old.expect_exit = True
                await old.stop(kill=True)
            await self._ask_cluster_failover(new, kill)
            try:
                settled = await self._wait_master(new, 30)
            finally:
                self.elections.elected(new.name, old.name, asyncio.get_running_loop().time())
            if kill:
                await sleep(down_s)
                await self._start_node(old)
            else:
                settled = settled and await self._wait_role(old, "slave", 30)
            self.note(
                "cluster_failover_done",
                new.name,
                new.child.pid if new.child else 0,
                f"master now {new.name}" + ("" if settled else " (not settled in 30 s)"),
            )
        finally:
            if not old.up:
                await self._start_node(old)

    async def _ask_cluster_failover(self, replica: RedisNode, force: bool) -> None:
        """CLUSTER FAILOVER [FORCE] on ``replica``, retried while it refuses (e.g. its
        master is not yet seen as failing, or a previous switch is still in progress)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + 20
        last = ""
        while loop.time() < end:
            with contextlib.suppress(OSError, TimeoutError, ConnectionError):
                last = await ask(replica.port, "CLUSTER", "FAILOVER", *(["FORCE"] if force else []))
                if last == "OK":
                    return
            await asyncio.sleep(0.2)
        raise RedisUnavailable(f"CLUSTER FAILOVER refused: {last}")

    async def _wait_master(self, node: RedisNode, timeout_s: float) -> bool:
        """Until every live node names ``node`` as the namespace's master (and it says
        so)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while loop.time() < end:
            owners = await self.topology.slot_owners()
            if set(owners) == {node.port} and await self.topology.role(node) == "master":
                self.topology.primary = node
                return True
            await asyncio.sleep(0.1)
        return False

    async def primary(self) -> RedisNode:
        """The primary the sentinels name now; a switch the harness did not make (the
        sentinels failed over on their own) is logged as ``redis_failover_auto``."""
        known = self.topology.primary
        node = await self.topology.refresh_primary()
        if node is not known:
            self.note("redis_failover_auto", known.name, 0, f"the sentinels name {node.name}")
            if self.topology.kind == "cluster":  # an election the cluster ran
                self.elections.elected(node.name, known.name, asyncio.get_running_loop().time())
        return node

    async def _ask_failover(self) -> None:
        """SENTINEL FAILOVER on the first sentinel that accepts it (retried while one is
        busy or finds no replica good enough yet)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + 20
        last = ""
        while loop.time() < end:
            for s in self.topology.sentinels:
                with contextlib.suppress(OSError, TimeoutError, ConnectionError):
                    last = await ask(s.port, "SENTINEL", "FAILOVER", SERVICE)
                    if last == "OK":
                        return
            await asyncio.sleep(0.2)
        raise RedisUnavailable(f"SENTINEL FAILOVER refused: {last}")

    async def _wait_primary(self, node: RedisNode, timeout_s: float) -> bool:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while loop.time() < end:
            _, answers = await self.topology.sentinel_primary()
            if answers and all(a == node.port for a in answers):
                self.topology.primary = node
                return True
            await asyncio.sleep(0.05)
        return False

    async def _wait_role(self, node: RedisNode, role: str, timeout_s: float) -> bool:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while loop.time() < end:
            if await self.topology.role(node) == role:
                return True
            await asyncio.sleep(0.05)
        return False

    async def _start_node(self, node: RedisNode) -> None:
        """(Re)start a node: a data node as the primary, or as the replica of the primary
        the sentinels name; a sentinel from its own config. Three tries."""
        for attempt in range(3):
            replicaof = None
            if node in self.topology.nodes and self.topology.sentinels:
                primary = await self.primary()
                if primary is not node:
                    replicaof = primary.port
            try:
                child = await node.start(replicaof=replicaof)
                self.elections.restarted(node.name)
                break
            except RedisUnavailable as exc:
                self.note("redis_error", node.name, 0, f"start failed: {exc}")
                await node.stop(kill=True)
                if attempt == 2:
                    raise
        self.note("redis_up", node.name, child.pid, "replica" if replicaof else "")

    def _node_exit(self, node: RedisNode, child: Child) -> None:
        """A Redis or sentinel process exited without a fault: log it (at its exit
        time) and start it again."""
        if node.expect_exit:
            return
        kind = "sentinel_exit" if node.sentinel else "redis_exit"
        self.note(
            kind,
            node.name,
            child.pid,
            "unplanned",
            child.returncode,
            ran_ms=child.ran_ms,
            at_ms=child.exit_ms,
        )
        if self.refill:
            task = asyncio.get_running_loop().create_task(self._revive(node))
            self._revivals.add(task)
            task.add_done_callback(self._revivals.discard)

    async def _revive(self, node: RedisNode) -> None:
        async with self.redis_lock:
            if not node.up and not self.sup.closed:
                await self._start_node(node)

    # -- healing and stopping ------------------------------------------------------------

    async def heal(self) -> None:
        """SIGCONT what is stopped, restart what is down."""
        async with self.redis_lock:
            for node in self.topology.all_nodes:
                if not node.up:
                    await self._start_node(node)
            if self.topology.sentinels:
                await self.primary()
                await self.topology.wait_synced(30)
            if self.topology.kind == "cluster":
                await self.topology.wait_cluster(30)
                await self.primary()
                await self.topology.wait_synced(30)
        for slot in self.slots:
            if not slot.alive:
                self.spawn(slot)
            elif slot.stopped:
                self.signal(slot, signal.SIGCONT, f"{slot.role}_cont", "heal")
                slot.stopped = False

    async def stop_processes(self, timeout_s: float) -> list[str]:
        """Graceful stop of workers, reapers and the web app (SIGTERM); returns those
        that needed SIGKILL."""
        self.refill = False
        slots = [s for s in self.slots if s.alive]
        for s in slots:
            assert s.child is not None
            s.expect_exit = True
            s.child.send(signal.SIGCONT)
            s.child.send(signal.SIGTERM)
        await asyncio.gather(*(s.child.wait(timeout_s) for s in slots if s.child))
        forced: list[str] = []
        for s in slots:
            assert s.child is not None
            if s.child.alive:
                forced.append(s.name)
                s.child.send(signal.SIGUSR1)  # stacks into its log (workers)
        if forced:
            await asyncio.sleep(1.0)
            for s in slots:
                assert s.child is not None
                s.child.send(signal.SIGKILL)
            await asyncio.gather(*(s.child.wait(5) for s in slots if s.child))
        return forced

    async def aclose(self, keep_data: bool) -> None:
        self.refill = False
        for n in self.topology.all_nodes:  # the end of the run, not a crash
            n.expect_exit = True
        for s in self.slots:
            s.expect_exit = True
        for t in list(self._revivals):
            t.cancel()
        await self.sup.aclose()
        if not keep_data:
            for node in self.topology.all_nodes:
                shutil.rmtree(node.data_dir, ignore_errors=True)
