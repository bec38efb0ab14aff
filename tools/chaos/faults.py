"""The fault schedule (a pure function of the seed) and the injector that carries it out.

Faults:

* ``worker_kill`` — SIGKILL a worker; a new one takes its slot after ``hold_s``;
* ``worker_stop`` — SIGSTOP a worker for ``hold_s`` (1.3-3 leases: past its lease), then
  SIGCONT: it comes back as a zombie whose tasks the reaper has given away;
* ``worker_term`` — SIGTERM a worker: a graceful stop (running handlers get the grace
  period, the rest is handed back with REQUEUE); it must exit 0 within grace + 10 s; a new
  worker takes the slot after ``hold_s``;
* ``reaper_kill`` — SIGKILL a reaper; a new one starts after ``hold_s``;
* ``redis_drop`` — Redis drops every client connection (``CLIENT KILL TYPE normal`` and
  ``pubsub``): a network blip; replies in flight are lost, clients reconnect and retry;
* ``redis_term`` — SIGTERM Redis (a clean shutdown: the AOF is complete), down ``hold_s``;
* ``redis_kill`` — SIGKILL Redis (with ``appendfsync everysec`` the last second of
  acknowledged writes may be lost), down ``hold_s``;
* ``redis_freeze`` — SIGSTOP Redis for ``hold_s`` (0.5-3 s, sometimes past the lease),
  then SIGCONT: every connection hangs, heartbeats cannot get through;
* ``redis_failover`` — (sentinel topology) ``SENTINEL FAILOVER``; with the ``kill``
  variant the primary is SIGKILLed first and brought back after ``hold_s`` as a replica;
* ``cluster_failover`` — (cluster topology) ``CLUSTER FAILOVER`` on a replica of the
  master serving the namespace (a coordinated switch); with the ``kill`` variant that
  master is SIGKILLed first, its replica takes over (``CLUSTER FAILOVER FORCE``), and it
  is brought back after ``hold_s``, rejoining as a replica.

Redis faults act on the current primary (in a cluster: the namespace's master; with
``--shards``, the master of each shard in turn) and never overlap.

The same seed gives the same schedule (times, kinds, slots, holds); the interleaving with
the workload is up to the machine, so a replay re-creates the conditions, not the trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
from collections.abc import Awaitable, Callable

import msgspec

from .aio import stop_tasks
from .cluster import Cluster, Slot
from .supervisor import Child
from .transient import TRANSIENT

__all__ = ["FaultInjector", "PlannedFault", "plan_faults"]

#: relative frequency of each fault kind
WEIGHTS = {
    "worker_kill": 3.0,
    "worker_stop": 3.0,
    "worker_term": 1.0,
    "reaper_kill": 1.0,
    "redis_drop": 1.0,
    "redis_term": 1.2,
    "redis_kill": 0.6,
    "redis_freeze": 1.0,
    "redis_failover": 0.5,
    "cluster_failover": 0.6,
}


class PlannedFault(msgspec.Struct, frozen=True, kw_only=True):
    at_s: float  #: seconds after the run started
    kind: str
    slot: int  #: worker or reaper slot (0 for Redis)
    hold_s: float  #: stop duration, time down, or delay before the restart
    #: redis_failover / cluster_failover: "kill" (SIGKILL the primary first) or "" (a
    #: SENTINEL FAILOVER / CLUSTER FAILOVER only)
    variant: str = ""

    def describe(self) -> str:
        how = "SIGKILL the primary + " if self.variant == "kill" else ""
        back = f", old primary back after {self.hold_s:.2f}s" if how else ""
        what = {
            "worker_kill": f"SIGKILL worker slot {self.slot}, restart after {self.hold_s:.2f}s",
            "worker_stop": f"SIGSTOP worker slot {self.slot} for {self.hold_s:.2f}s",
            "worker_term": f"SIGTERM worker slot {self.slot}, restart after {self.hold_s:.2f}s",
            "reaper_kill": f"SIGKILL reaper slot {self.slot}, restart after {self.hold_s:.2f}s",
            "redis_drop": "Redis drops every client connection",
            "redis_term": f"SIGTERM Redis, down {self.hold_s:.2f}s",
            "redis_kill": f"SIGKILL Redis, down {self.hold_s:.2f}s",
            "redis_freeze": f"SIGSTOP Redis for {self.hold_s:.2f}s",
            "redis_failover": f"{how}SENTINEL FAILOVER{back}",
            "cluster_failover": f"{how}CLUSTER FAILOVER{' FORCE' if how else ''}{back}",
        }[self.kind]
        return f"t={self.at_s:7.2f}s  {what}"


def _hold(rng: random.Random, kind: str, lease_ms: int) -> float:
    if kind == "worker_stop":
        return round(lease_ms / 1000 * rng.uniform(1.3, 3.0), 3)
    if kind in ("worker_kill", "worker_term"):
        return round(rng.uniform(0.2, 1.5), 3)
    if kind == "reaper_kill":
        return round(rng.uniform(0.5, 3.0), 3)
    if kind == "redis_freeze":
        lease_s = lease_ms / 1000
        if rng.random() < 0.3:  # past the lease: heartbeats cannot have got through
            return round(lease_s * rng.uniform(1.05, 1.5), 3)
        return round(rng.uniform(0.5, max(0.6, min(3.0, lease_s))), 3)
    if kind in ("redis_failover", "cluster_failover"):
        return round(rng.uniform(0.2, 1.5), 3)
    return round(rng.uniform(0.0, 0.5), 3)  # Redis down time


def plan_faults(
    seed: int,
    duration_s: float,
    kinds: tuple[str, ...],
    *,
    workers: int,
    reapers: int,
    lease_ms: int,
    mean_gap_s: float,
) -> list[PlannedFault]:
    """Faults at exponential gaps from ~3 s in until 1 s before the end; every kind in
    ``kinds`` appears at least once. Pure: the same arguments give the same schedule."""
    if not kinds:
        return []
    rng = random.Random(f"{seed}:faults")
    start, end = min(3.0, duration_s * 0.1), duration_s - 1.0
    times: list[float] = []
    t = start
    while True:
        t += rng.expovariate(1.0 / mean_gap_s)
        if t >= end:
            break
        times.append(round(t, 3))
    while len(times) < len(kinds):
        times.append(round(rng.uniform(start, end), 3))
    times.sort()
    names = list(kinds)
    # each kind once, the rest by weight, in a random order
    chosen = names + rng.choices(names, [WEIGHTS[k] for k in names], k=len(times) - len(names))
    rng.shuffle(chosen)
    out = []
    for at, kind in zip(times, chosen, strict=True):
        slot = 0
        if kind.startswith("worker"):
            slot = rng.randrange(workers)
        elif kind.startswith("reaper"):
            slot = rng.randrange(reapers)
        hold = _hold(rng, kind, lease_ms)
        variant = ""
        if kind in ("redis_failover", "cluster_failover") and rng.random() < 0.4:
            variant = "kill"
        out.append(PlannedFault(at_s=at, kind=kind, slot=slot, hold_s=hold, variant=variant))
    return out


class FaultInjector:
    """Runs a schedule against a :class:`Cluster`. :meth:`heal` ends every fault early
    (stopped workers get SIGCONT, killed ones their replacement, Redis comes back)."""

    def __init__(
        self,
        cluster: Cluster,
        plan: list[PlannedFault],
        ready: Callable[[str], Awaitable[bool]] | None = None,
        *,
        shard_slots: list[int] | None = None,
    ) -> None:
        self.cluster = cluster
        self.plan = plan
        #: (a cluster, a sharded namespace) the slot of each shard: each Redis fault acts
        #: on the master serving the next shard in turn, so every master gets its share
        self.shard_slots = shard_slots or []
        self._next_shard = 0
        #: Redis faults one at a time here too: the shard they act on is set before each
        self._redis_turn = asyncio.Lock()
        #: whether the worker of that name is up (registered); gates worker_term
        self.ready = ready
        self.healing = asyncio.Event()
        self._active: set[asyncio.Task[None]] = set()
        self._killing: set[tuple[str, int]] = set()
        self.errors: list[str] = []

    async def run(self, t0: float) -> None:
        loop = asyncio.get_running_loop()
        for f in self.plan:
            wait = t0 + f.at_s - loop.time()
            if wait > 0 and not await self._sleep(wait):
                return
            if self.healing.is_set():
                return
            task = loop.create_task(self._apply(f))
            self._active.add(task)
            task.add_done_callback(self._active.discard)

    async def _sleep(self, seconds: float) -> bool:
        """Sleep unless healing starts first; True when the full time passed."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.healing.wait(), seconds)
            return False
        return True

    async def heal(self, timeout_s: float = 60.0) -> None:
        """Stop injecting; wait for the faults in progress to undo themselves (cancelled
        after ``timeout_s``: their ``finally`` blocks still run)."""
        self.healing.set()
        active = set(self._active)
        if active:
            await asyncio.wait(active, timeout=timeout_s)
        await stop_tasks(active)

    async def _apply(self, f: PlannedFault) -> None:
        c = self.cluster
        try:
            if f.kind.startswith(("worker_", "reaper_")):
                slots = c.workers if f.kind.startswith("worker_") else c.reapers
                slot = self._pick(slots, f.slot, allow_stopped=f.kind == "worker_kill")
                if slot is None:
                    c.note("fault_skipped", f.kind, 0, "every slot is busy with a fault")
                elif f.kind == "reaper_kill":
                    await self._kill(slot, f, "reaper_kill")
                else:
                    await self._worker(slot, f)
            else:
                async with self._redis_turn:
                    await self._next_shard_slot()
                    await self._redis(f)
        except Exception as exc:  # the run goes on; the report lists it
            self.errors.append(f"{f.describe()}: {type(exc).__name__}: {exc}")
            c.note("fault_error", f.kind, 0, str(exc))

    async def _redis(self, f: PlannedFault) -> None:
        c = self.cluster
        if f.kind == "redis_drop":
            await c.drop_clients()
        elif f.kind == "redis_freeze":
            await c.freeze(f.hold_s, self._sleep)
        elif f.kind == "redis_failover":
            await c.failover(f.variant == "kill", f.hold_s, self._sleep)
        elif f.kind == "cluster_failover":
            await c.cluster_failover(f.variant == "kill", f.hold_s, self._sleep)
        else:
            await c.restart_redis(kill=f.kind == "redis_kill", down_s=f.hold_s)

    async def _next_shard_slot(self) -> None:
        """(sharded, cluster) Point the Redis faults at the next shard's master."""
        if len(self.shard_slots) < 2:
            return
        topology = self.cluster.topology
        topology.slot = self.shard_slots[self._next_shard % len(self.shard_slots)]
        self._next_shard += 1
        with contextlib.suppress(*TRANSIENT, OSError):
            await topology.refresh_primary()

    def _pick(self, slots: list[Slot], i: int, *, allow_stopped: bool) -> Slot | None:
        """The planned slot or, when another fault is acting on it, the next free one."""
        for k in range(len(slots)):
            s = slots[(i + k) % len(slots)]
            if (s.role, s.index) in self._killing or (s.stopped and not allow_stopped):
                continue
            if s.alive:
                return s
        return None

    async def _worker(self, slot: Slot, f: PlannedFault) -> None:
        if f.kind == "worker_kill":
            await self._kill(slot, f, "worker_kill")
            return
        if f.kind == "worker_term":
            await self._term(slot, f)
            return
        child = slot.child
        if slot.stopped or child is None:
            self.cluster.note("fault_skipped", slot.name, 0, "worker_stop: already stopped")
            return
        slot.busy += 1
        try:
            if not self.cluster.signal(slot, signal.SIGSTOP, "worker_stop", f"{f.hold_s:.2f}s"):
                return
            slot.stopped = True
            await self._sleep(f.hold_s)
        finally:
            if slot.child is child:  # not replaced by a kill meanwhile
                self.cluster.signal(slot, signal.SIGCONT, "worker_cont")
                slot.stopped = False
            slot.busy -= 1
            self.cluster.refill_if_dead(slot)

    async def _wait_ready(self, slot: Slot, timeout_s: float = 10.0) -> Child | None:
        """The slot's process once it has registered (so its signal handlers are
        installed: a SIGTERM during the interpreter's start-up would only test Python's
        default), or None when it did not within ``timeout_s`` or was replaced meanwhile
        (the answer then is about a process that is gone)."""
        child = slot.child
        if child is None:
            return None
        if self.ready is None:
            return child
        name = slot.name
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while loop.time() < end and slot.child is child and not self.healing.is_set():
            with contextlib.suppress(*TRANSIENT):
                if await self.ready(name) and slot.child is child:
                    return child
            await asyncio.sleep(0.2)
        return None

    async def _term(self, slot: Slot, f: PlannedFault) -> None:
        """Graceful stop; it must end (status 0) within the worker's grace + 10 s."""
        key = (slot.role, slot.index)
        ready = await self._wait_ready(slot)
        if ready is None:
            self.cluster.note("fault_skipped", slot.name, 0, "worker_term: never ready")
            return
        if key in self._killing or slot.stopped or slot.child is not ready:
            self.cluster.note("fault_skipped", slot.name, 0, "worker_term: slot busy")
            return
        self._killing.add(key)
        slot.busy += 1
        try:
            child = slot.child
            if child is None or not self.cluster.signal(slot, signal.SIGTERM, "worker_term"):
                return
            sent = self.cluster.events[-1].at_ms
            bound = self.cluster.cfg.grace_ms / 1000 + 10
            code = await child.wait(bound)
            kind = "worker_term_done"
            if code is None:
                child.send(signal.SIGUSR1)  # stacks into its log
                await asyncio.sleep(1.0)
                child.send(signal.SIGKILL)
                code = await child.wait(10)
                kind = "worker_term_hung"
            took = (child.exit_ms or 0) - sent
            child.noted = True
            self.cluster.note(
                kind, slot.name, child.pid, f"in {took} ms", code, ran_ms=took, at_ms=child.exit_ms
            )
            await self._sleep(f.hold_s)
        finally:
            self.cluster.spawn(slot)
            slot.busy -= 1
            self._killing.discard(key)

    async def _kill(self, slot: Slot, f: PlannedFault, kind: str) -> None:
        key = (slot.role, slot.index)
        if key in self._killing:
            self.cluster.note("fault_skipped", slot.name, 0, f"{kind}: already being replaced")
            return
        self._killing.add(key)
        slot.busy += 1
        try:
            child = slot.child
            if self.cluster.signal(slot, signal.SIGKILL, kind) and child is not None:
                child.noted = True
                await child.wait(10)
            await self._sleep(f.hold_s)
        finally:
            self.cluster.spawn(slot)
            slot.busy -= 1
            self._killing.discard(key)
