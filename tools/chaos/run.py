"""One chaos run, start to end: processes up, workload + faults for ``duration_s``, heal,
drain, graceful stop, read everything back, check, report. Every process it starts is
ended in ``finally`` (and by ``atexit`` as a last resort)."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import msgspec

from rsjobs.client import Client, connect
from rsjobs.settings import Settings
from rsjobs.store.cluster import slot_of
from rsjobs.store.keys import Keys
from rsjobs.store.shards import shard_tags
from rsjobs.workflows import WorkflowClient

from .aio import stop_tasks
from .checker import CheckResult, Violation, check, fault_counts
from .cluster import Cluster
from .collect import (
    read_dedup,
    read_events,
    read_executions,
    read_hostile,
    read_pools,
    read_stats,
    read_tasks,
    read_workflows,
    sample_held,
    scan_task_ids,
    scan_workflow_ids,
    tracebacks,
)
from .config import ChaosConfig
from .faults import FaultInjector, PlannedFault, plan_faults
from .flows import definitions
from .producer import Producer
from .records import PoolState, RunData
from .report import ChaosReport, format_history, format_report
from .supervisor import now_ms
from .transient import TRANSIENT
from .workload import (
    HOSTILE_KINDS,
    QUEUE_QUOTA,
    PoolSettings,
    plan_hostile,
    plan_poison,
    plan_tasks,
    plan_workflows,
    pool_settings,
)

__all__ = ["drain", "planned", "replay_command", "run_chaos"]

Echo = Callable[[str], None]


def replay_command(cfg: ChaosConfig) -> str:
    return (
        f"python -m tools.chaos --seed {cfg.seed} --duration {cfg.duration_s:g} "
        f"--tasks {cfg.tasks} --workers {cfg.workers} --concurrency {cfg.concurrency} "
        f"--reapers {cfg.reapers} --faults {','.join(cfg.faults) or 'none'} "
        f"--fault-gap {cfg.fault_gap_s:g} --fsync {cfg.fsync} --lease-ms {cfg.lease_ms}"
        + (f" --poison {cfg.poison}" if cfg.poison >= 0 else "")
        + (f" --topology {cfg.topology}" if cfg.topology != "single" else "")
        + (" --durable" if cfg.durable else "")
        + (f" --shards {cfg.shards}" if cfg.shards > 1 else "")
        + (f" --workflows {cfg.workflows}" if cfg.workflows >= 0 else "")
        + (f" --poison-inputs {cfg.poison_inputs}" if cfg.poison_inputs >= 0 else "")
        + (f" --hostile {cfg.hostile}" if cfg.hostile >= 0 else "")
        + ("" if cfg.web else " --no-web")
        + (f" --worker-app {cfg.worker_app}" if cfg.worker_app != ChaosConfig().worker_app else "")
    )


async def shard_keys(client: Client) -> list[Keys]:
    """The keys of every shard of the client's namespace."""
    return [s.keys for s in await client.store.each()]


async def _wait_registered(client: Client, names: list[str], timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while not set(names) <= set(await client.redis.hkeys(client.keys.workers)):
        if time.monotonic() > end:
            raise TimeoutError(f"workers {names} did not register within {timeout_s:g}s")
        await asyncio.sleep(0.1)


async def set_pools(client: Client, pools: PoolSettings) -> int:
    """Set the run's limits on its queue (before the first submit); returns when (ms)."""
    at = now_ms()
    q = pools.queue
    await client.set_limit(q, pools.default_limit)
    for owner, n in pools.owner_limits.items():
        await client.set_limit(q, n, owner=owner)
    await client.set_rate(q, pools.per_second, type=pools.rated_type, burst=pools.burst)
    return at


async def _sample_held(
    client: Client, queue: str, parked: set[str], throttled: dict[str, list[tuple[int, int]]]
) -> None:
    """Every 250 ms: which tasks are parked on their owner's limit, and which are rate-held
    with the time reserved for them (evidence that the limits bound; the checker holds
    the rate to the reserved times: a task may start after its time, when its worker
    was late)."""
    every: list[Keys] = []
    while True:
        try:
            every = every or await shard_keys(client)
            p: set[str] = set()
            t: dict[str, int] = {}
            for keys in every:  # (a sharded namespace: every shard's)
                pk, th = await sample_held(client.redis, keys, queue)
                p |= pk
                t |= th
            at = now_ms()
            parked |= p
            for tid, reserved in t.items():
                seen = throttled.setdefault(tid, [])
                if not seen or seen[-1][1] != reserved:
                    seen.append((at, reserved))
        except TRANSIENT:
            pass
        await asyncio.sleep(0.25)


async def _progress(client: Client, producer: Producer, total: int, echo: Echo) -> None:
    t0 = time.monotonic()
    while True:
        await asyncio.sleep(10)
        try:
            stats = await client.stats()
        except TRANSIENT:
            continue
        states: dict[str, int] = {}
        for q in stats.values():
            for k, v in q.items():
                if k.isupper() and v:
                    states[k] = states.get(k, 0) + v
        echo(
            f"  t={time.monotonic() - t0:5.0f}s submitted {len(producer.accepted_ids)}/{total} "
            + " ".join(f"{k}={v}" for k, v in sorted(states.items()))
        )


#: the observations of a run, in its run dir (JSON of RunData)
RUNDATA = "rundata.json"


def recheck(run_dir: str) -> CheckResult:
    """The checker's findings on a kept run's observations (``--recheck``)."""
    raw = (Path(run_dir) / RUNDATA).read_bytes()
    return check(msgspec.json.decode(raw, type=RunData))


def run_settings(cfg: ChaosConfig) -> Settings:
    """The Settings of the harness's clients (durable mode: acknowledged writes WAIT for
    the replica)."""
    wait = 1 if cfg.durable else 0
    return Settings(
        namespace=cfg.namespace,
        queue_quota=QUEUE_QUOTA,
        wait_replicas=wait,
        wait_timeout_ms=cfg.wait_timeout_ms,
        shards=cfg.shards if cfg.shards > 1 else None,
    )


def shard_slots(cfg: ChaosConfig) -> list[int]:
    """The cluster slot of each shard of the run's namespace (the tags it is created
    with: rsjobs.store.shards)."""
    return [slot_of(f"{{{tag}}}") for tag in shard_tags(cfg.namespace, cfg.shards)]


async def _wait_web(http: httpx.AsyncClient, timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if (await http.get("/healthz")).status_code == 200:
                return
        if time.monotonic() > end:
            raise TimeoutError(f"the web app did not answer /healthz within {timeout_s:g}s")
        await asyncio.sleep(0.2)


async def drain(
    client: Client,
    ids: list[str],
    timeout_s: float,
    echo: Echo,
    resumed: frozenset[str] = frozenset(),
) -> tuple[bool, list[str]]:
    """Wait until every task (the accepted ones, then any other in the namespace) is
    terminal; returns (done, ids still unfinished at the bound). A task PAUSED although
    the producer's RESUME of it was acknowledged (``resumed``) lost that RESUME and will
    not move again: it is not waited for (the checker reports it, dated by the RESUME)."""
    end = time.monotonic() + timeout_s
    pending, scanned, last_echo = list(ids), False, 0.0
    while True:
        try:
            still: list[str] = []
            for i in range(0, len(pending), 500):
                part = pending[i : i + 500]
                infos = await client.get_many(part)
                still += [
                    t
                    for t, info in zip(part, infos, strict=True)
                    if info and not info.terminal and not (info.state == "PAUSED" and t in resumed)
                ]
            pending = still
            if not pending and not scanned:
                every = await shard_keys(client)
                pending = sorted(await scan_task_ids(client.redis, every) - set(ids))
                scanned = True
                continue
            if not pending:
                return True, []
        except TRANSIENT:
            pass
        now = time.monotonic()
        if now > end:
            return False, pending
        if now - last_echo > 5:
            echo(f"  draining: {len(pending)} tasks not finished yet")
            last_echo = now
        await asyncio.sleep(0.5)


class ChaosRun:
    """One run's state, phase by phase: :meth:`run` is the whole of it."""

    def __init__(self, cfg: ChaosConfig, echo: Echo) -> None:
        self.cfg = cfg
        self.echo = echo
        self.specs = plan_tasks(cfg.seed, cfg.tasks, cfg.active_s, cfg.lease_ms, cfg.poison)
        self.pools = pool_settings(self.specs, cfg.active_s)
        self.pools_set_ms = 0
        self.parked_seen: set[str] = set()
        self.throttled_seen: dict[str, list[tuple[int, int]]] = {}
        n_wf = cfg.workflows if cfg.workflows >= 0 else max(1, cfg.tasks // 40)
        self.wf_specs = plan_workflows(cfg.seed, n_wf, cfg.active_s)
        n_poison = cfg.poison_inputs if cfg.poison_inputs >= 0 else max(1, cfg.tasks // 100)
        self.poison_specs = plan_poison(cfg.seed, n_poison, cfg.active_s, http=cfg.web)
        n_hostile = cfg.hostile if cfg.hostile >= 0 else len(HOSTILE_KINDS) + cfg.tasks // 500
        self.hostile_specs = plan_hostile(cfg.seed, n_hostile, cfg.active_s, http=cfg.web)
        self.plan = planned(cfg)
        self.run_dir = Path(tempfile.mkdtemp(prefix="rsjobs-chaos-"))
        self.cluster = Cluster(cfg, self.run_dir, echo)
        if cfg.shards > 1:  # every process is given the shard count (the CLI reads it)
            self.cluster.env["RSJOBS_SHARDS"] = str(cfg.shards)
        self.injector = FaultInjector(
            self.cluster,
            self.plan,
            self._registered,
            shard_slots=shard_slots(cfg) if cfg.topology == "cluster" else None,
        )
        self.background: list[asyncio.Task[None]] = []
        self.client: Client | None = None
        self.http: httpx.AsyncClient | None = None
        self.passed = False

    async def _registered(self, worker: str) -> bool:
        if self.client is None:
            return False
        return bool(await self.client.redis.hexists(self.client.keys.workers, worker))

    def announce(self) -> None:
        cfg, echo = self.cfg, self.echo
        echo(
            f"rsjobs chaos: seed {cfg.seed}, {len(self.specs)} tasks, {len(self.wf_specs)} "
            f"workflows, {len(self.poison_specs)} poison inputs, {len(self.hostile_specs)} "
            f"hostile actions, {len(self.plan)} faults, "
            f"fsync {cfg.fsync}, topology {cfg.topology}" + (" (durable)" if cfg.durable else "")
        )
        p = self.pools
        owned = sum(1 for s in self.specs if s.owner)
        echo(
            f"shared queue {p.queue}: {owned} tasks with owners (limit {p.default_limit}, "
            + ", ".join(f"{o} {n}" for o, n in p.owner_limits.items())
            + f"), {sum(1 for s in self.specs if s.priority)} with a priority, "
            f"{sum(1 for s in self.specs if s.type == p.rated_type)} of type {p.rated_type} "
            f"at {p.per_second:g}/s (burst {p.burst})"
        )
        echo(f"replay with: {replay_command(cfg)}")
        echo(f"run dir: {self.run_dir}")
        echo(f"every process connects to {self.cluster.url}")
        echo("fault schedule:")
        for f in self.plan:
            echo(f"  {f.describe()}")

    async def run(self) -> ChaosReport:
        self.announce()
        atexit.register(self.cluster.sup.cleanup)
        try:
            return await self._run()
        finally:
            try:
                await self._teardown()
            finally:  # whatever happened above: no process of ours outlives the run
                await self.cluster.aclose(keep_data=self.cfg.keep or not self.passed)
                atexit.unregister(self.cluster.sup.cleanup)
                if self.passed and not self.cfg.keep:
                    shutil.rmtree(self.run_dir, ignore_errors=True)

    async def _teardown(self) -> None:
        # first the faults in progress: their clean-up may start processes
        await self.injector.heal(timeout_s=0.5)
        await stop_tasks(self.background)
        if self.client is not None:
            with contextlib.suppress(Exception):
                await self.client.close()
        if self.http is not None:
            with contextlib.suppress(Exception):
                await self.http.aclose()

    async def _run(self) -> ChaosReport:
        cfg, cluster, echo = self.cfg, self.cluster, self.echo
        started = time.monotonic()
        settings = run_settings(cfg)
        await cluster.start()
        client = self.client = Client(
            connect(cluster.url, socket_timeout=10, socket_connect_timeout=5), settings
        )
        await _wait_registered(client, [s.name for s in cluster.workers], 60)
        if cfg.web:
            self.http = httpx.AsyncClient(
                base_url=cluster.web_url,
                headers={"Authorization": f"Bearer {cluster.web_token}"},
                timeout=20,
            )
            await _wait_web(self.http, 60)
        self.pools_set_ms = await set_pools(client, self.pools)
        producer = Producer(
            client,
            self.specs,
            echo,
            wf=WorkflowClient(client.redis, settings, definitions=definitions, source="api"),
            workflows=self.wf_specs,
            poison=self.poison_specs,
            http=self.http,
            hostile=self.hostile_specs,
            callback_secret=cluster.callback_secret,
            tokens=cluster.owner_tokens,
        )
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        submit = loop.create_task(producer.run(t0))
        self.background += [
            submit,
            loop.create_task(self.injector.run(t0)),
            loop.create_task(_progress(client, producer, len(self.specs), echo)),
            loop.create_task(
                _sample_held(client, self.pools.queue, self.parked_seen, self.throttled_seen)
            ),
        ]
        await asyncio.sleep(cfg.duration_s)

        echo("healing: faults stop, stopped processes continue, dead ones restart")
        await self.injector.heal()
        await cluster.heal()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(submit), 60)
        dropped = await producer.finish(60)
        echo(f"draining (bound {cfg.drain_timeout_s:g}s)")
        d0 = time.monotonic()
        resumed = frozenset(a.task_id for a in producer.resumes)
        drained, stuck = await drain(
            client, producer.accepted_ids, cfg.drain_timeout_s, echo, resumed
        )
        # the workflows' users publish, retry, cancel until each one is finished
        untended = await producer.finish_workflows(
            max(5.0, cfg.drain_timeout_s - (time.monotonic() - d0))
        )
        if untended:
            drained = False
            echo(f"  {untended} workflows not finished at the drain bound")
        else:  # their last tasks may have been created just now
            more, stuck2 = await drain(
                client, [], max(5.0, cfg.drain_timeout_s - (time.monotonic() - d0)), echo, resumed
            )
            drained, stuck = drained and more, stuck + stuck2
        drain_s = time.monotonic() - d0
        for t in self.background:
            t.cancel()
        forced = await cluster.stop_processes(cfg.grace_ms / 1000 + 10)

        data = await self._collect(client, producer)
        # what the checker saw, kept with the run dir: `--recheck DIR` checks it again
        body = msgspec.json.encode(data)
        await asyncio.to_thread((self.run_dir / RUNDATA).write_bytes, body)
        result = check(data)
        for tb in await asyncio.to_thread(tracebacks, self.run_dir):
            result.warnings.append(Violation(kind="LOG_TRACEBACK", detail=tb))
        for what in producer.hostile.unanswered:
            result.warnings.append(Violation(kind="HOSTILE_UNANSWERED", detail=what))
        self.passed = result.ok and drained
        evidence: dict[str, list[str]] = {}
        for v in result.violations + result.aof_window_losses + result.failover_window_losses:
            if v.task_id and v.task_id in data.tasks and len(evidence) < 10:
                evidence.setdefault(v.task_id, format_history(data.tasks[v.task_id]))
        report = ChaosReport(
            passed=self.passed,
            seed=cfg.seed,
            config=msgspec.to_builtins(cfg),
            replay=replay_command(cfg),
            elapsed_s=round(time.monotonic() - started, 1),
            drain_s=round(drain_s, 1),
            drained=drained,
            run_dir=str(self.run_dir),
            fsync=cfg.fsync,
            schedule=self.plan,
            faults=cluster.events,
            fault_counts=fault_counts(cluster.events),
            counts=result.counts,
            states=result.states,
            by_kind=result.by_kind,
            reasons=result.reasons,
            recovery=msgspec.to_builtins(result.recovery),
            violations=result.violations,
            aof_window_losses=result.aof_window_losses,
            failover_window_losses=result.failover_window_losses,
            warnings=result.warnings,
            harness={
                "producer_retries": producer.retries,
                "cancel_running_missed": producer.cancel_missed,
                "paused_and_resumed": producer.paused,
                "pause_missed": producer.pause_missed,
                "successors_unsubmitted": producer.successors_unsubmitted,
                "side_tasks_dropped": dropped,
                "stuck_at_drain_bound": stuck[:100],
                "forced_stops": forced,
                "workflows_untended": untended,
                "fault_errors": self.injector.errors,
                "redis_starts": {n.name: n.starts for n in cluster.topology.all_nodes},
            },
            evidence=evidence,
        )
        if cfg.report:
            body = msgspec.json.format(msgspec.json.encode(report))
            await asyncio.to_thread(Path(cfg.report).write_bytes, body)
        echo(format_report(report))
        return report

    async def _collect(self, client: Client, producer: Producer) -> RunData:
        redis, cfg = client.redis, self.cfg
        keys = await shard_keys(client)
        ids = set(producer.accepted_ids) | await scan_task_ids(redis, keys)
        wf_ids = {s.wf_id for s in producer.all_workflow_starts}
        wf_ids |= set(producer.poison.refused_wf_ids) | await scan_workflow_ids(redis, keys)
        dedup = [s.dedup for s in producer.submissions if s.dedup]
        hostile = producer.hostile
        tasks = await read_tasks(redis, keys, ids)
        events, n_events = await read_events(redis, keys)
        return RunData(
            fsync=cfg.fsync,
            lease_ms=cfg.lease_ms,
            aof_window_ms=cfg.aof_window_ms,
            submissions=producer.submissions + hostile.submissions,
            indeterminate=producer.indeterminate,
            cancels=producer.cancels + hostile.cancels,
            resumes=producer.resumes,
            external=producer.external,
            faults=self.cluster.events,
            tasks=tasks,
            executions=await read_executions(redis, cfg.namespace),
            dedup=await read_dedup(redis, keys, dedup),
            stats=await read_stats(redis, keys),
            events=events,
            # MAXLEN ~ drops whole old entries: fewer events than history entries
            events_trimmed=n_events < sum(len(t.history) for t in tasks.values()),
            durable=cfg.durable,
            failover_window_ms=cfg.failover_window_ms,
            workflows=producer.all_workflow_starts,
            wf_actions=producer.wf_actions,
            wf_errors=producer.wf_errors,
            wf_records=await read_workflows(redis, keys, wf_ids),
            poison=producer.poison.inputs,
            floods=producer.poison.floods,
            refused_wf_ids=producer.poison.refused_wf_ids,
            callbacks=hostile.callbacks,
            storms=hostile.storms,
            queue_floods=hostile.queue_floods,
            cursor_probes=hostile.cursors.probes,
            hostile_traces=await read_hostile(
                redis,
                keys,
                [s.task_id for s in hostile.storms],
                [n for f in hostile.queue_floods for n in f.sent],
                [f.owner for f in hostile.queue_floods],
            ),
            pools=await read_pools(
                redis,
                keys,
                PoolState(
                    # a sharded namespace's rate is split R/S per shard, each shard's burst
                    # ceil(B/S) (rsjobs.limits): together up to S * ceil(B/S) at once
                    settings=msgspec.structs.replace(
                        self.pools, burst=cfg.shards * -(-self.pools.burst // cfg.shards)
                    ),
                    set_ms=self.pools_set_ms,
                    parked_seen=sorted(self.parked_seen),
                    throttled_seen=self.throttled_seen,
                ),
            ),
        )


async def run_chaos(cfg: ChaosConfig, echo: Echo = print) -> ChaosReport:
    """One whole chaos run; every process it started is gone when it returns or raises."""
    return await ChaosRun(cfg, echo).run()


def planned(cfg: ChaosConfig) -> list[PlannedFault]:
    """The fault schedule ``cfg`` would run (for ``--plan-only``)."""
    return plan_faults(
        cfg.seed,
        cfg.duration_s,
        cfg.faults,
        workers=cfg.workers,
        reapers=cfg.reapers,
        lease_ms=cfg.lease_ms,
        mean_gap_s=cfg.fault_gap_s,
    )
