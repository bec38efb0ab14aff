"""``python -m tools.chaos``: a chaos run with total accounting; exit status 1 on any
violation (see ``docs/chaos.md``)."""

from __future__ import annotations

import argparse
import asyncio
import random
import signal
import sys

from rsjobs.errors import ConfigError, RsjobsError

from .config import FAULT_KINDS, TOPOLOGIES, ChaosConfig, faults_for

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tools.chaos",
        description="Run a workload under faults on a loopback Redis with AOF, heal, drain, "
        "and account for every task. Exit status: 0 no violation, 1 violations, 2 bad "
        "arguments or a harness failure.",
    )
    a = p.add_argument
    a("--duration", type=float, default=60.0, help="seconds of workload and faults (60)")
    a("--seed", type=int, default=None, help="seed of the workload and fault schedule (random)")
    a("--tasks", type=int, default=2000, help="tasks to submit (2000), plus poison tasks")
    a("--poison", type=int, default=-1, help="poison tasks (-1: one per 500 tasks)")
    a("--workers", type=int, default=3, help="worker processes (3)")
    a("--concurrency", type=int, default=8, help="handler slots per worker (8)")
    a("--reapers", type=int, default=2, help="reaper processes (2)")
    a(
        "--faults",
        default="all",
        help=f"comma-separated faults, 'all' or 'none' ({','.join(FAULT_KINDS)}; "
        "redis_failover needs --topology sentinel, cluster_failover --topology cluster)",
    )
    a(
        "--topology",
        choices=TOPOLOGIES,
        default="single",
        help="one Redis, a primary + replica + 3 sentinels that every process connects "
        "through, or a Redis Cluster of 3 masters + 3 replicas (single)",
    )
    a(
        "--durable",
        action="store_true",
        help="(sentinel, cluster) submits, cancels and workflow actions acknowledged only "
        "once a replica has them (WAIT): none may be lost in a failover",
    )
    a(
        "--shards",
        type=int,
        default=1,
        help="the namespace's shard count (1): its tasks spread over that many hash tags "
        "(in a cluster, over the masters); Redis faults pick a shard's node in turn",
    )
    a("--workflows", type=int, default=-1, help="workflows to start (-1: one per 40 tasks)")
    a(
        "--poison-inputs",
        type=int,
        default=-1,
        help="bad requests and refused-command floods (-1: one per 100 tasks)",
    )
    a(
        "--hostile",
        type=int,
        default=-1,
        help="hostile-client actions: forged callbacks, pause/resume storms, queue-name "
        "floods, crafted cursors (-1: each kind once plus one per 500 tasks; 0: none)",
    )
    a("--no-web", action="store_true", help="do not serve the HTTP app (no HTTP inputs)")
    a("--fault-gap", type=float, default=2.0, help="mean seconds between faults (2)")
    a("--fsync", choices=("everysec", "always"), default="everysec", help="appendfsync policy")
    a("--lease-ms", type=int, default=2000, help="the workers' lease (2000)")
    a("--drain-timeout", type=float, default=120.0, help="bound of the drain in seconds (120)")
    a("--report", default=None, metavar="FILE", help="write the JSON report here")
    a(
        "--worker-app",
        default="tools.chaos.handlers:tasks",
        metavar="MODULE:REGISTRY",
        help="registry the workers load: tools.chaos.handlers:tasks or a module wrapping it",
    )
    a("--keep", action="store_true", help="keep the run directory (logs, AOF) after a pass")
    a("--plan-only", action="store_true", help="print the fault schedule and exit")
    a(
        "--recheck",
        default=None,
        metavar="RUN_DIR",
        help="check a kept run's observations again (its rundata.json) and print the findings",
    )
    a("-v", "--verbose", action="store_true", help="echo process starts too")
    return p


def _faults(spec: str, topology: str) -> tuple[str, ...]:
    if spec == "all":
        return faults_for(topology)
    if spec in ("none", ""):
        return ()
    return tuple(x.strip() for x in spec.split(",") if x.strip())


def config_from(args: argparse.Namespace) -> ChaosConfig:
    return ChaosConfig(
        duration_s=args.duration,
        seed=args.seed if args.seed is not None else random.randrange(1, 2**31),
        tasks=args.tasks,
        poison=args.poison,
        workers=args.workers,
        concurrency=args.concurrency,
        reapers=args.reapers,
        faults=_faults(args.faults, args.topology),
        topology=args.topology,
        durable=args.durable,
        shards=args.shards,
        workflows=args.workflows,
        poison_inputs=args.poison_inputs,
        hostile=args.hostile,
        web=not args.no_web,
        fault_gap_s=args.fault_gap,
        fsync=args.fsync,
        lease_ms=args.lease_ms,
        drain_timeout_s=args.drain_timeout,
        report=args.report,
        worker_app=args.worker_app,
        keep=args.keep,
        verbose=args.verbose,
    )


async def _main(cfg: ChaosConfig) -> int:
    from .run import run_chaos

    # SIGTERM ends the run like Ctrl-C does: through the clean-up in run_chaos
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    report = await run_chaos(cfg, echo=lambda line: print(line, flush=True))
    return 0 if report.passed else 1


def _recheck(run_dir: str) -> int:
    from .run import recheck

    try:
        res = recheck(run_dir)
    except (OSError, ValueError) as exc:
        print(f"chaos: cannot recheck {run_dir}: {exc}", file=sys.stderr)
        return 2
    for label, found in (
        ("violation", res.violations),
        ("lost in an AOF window", res.aof_window_losses),
        ("lost in a failover window", res.failover_window_losses),
        ("warning", res.warnings),
    ):
        for v in found:
            print(f"{label}: {v.kind} {v.task_id} {v.detail}")
    print(f"violations {len(res.violations)}")
    return 0 if res.ok else 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        cfg = config_from(args)
    except ConfigError as exc:
        print(f"chaos: {exc}", file=sys.stderr)
        return 2
    if args.recheck:
        return _recheck(args.recheck)
    if args.plan_only:
        from .run import planned, replay_command

        print(replay_command(cfg))
        for f in planned(cfg):
            print(f"  {f.describe()}")
        return 0
    try:
        return asyncio.run(_main(cfg))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print(f"chaos: interrupted (seed {cfg.seed}); every process was stopped", file=sys.stderr)
        return 130
    except (RsjobsError, TimeoutError, OSError) as exc:
        print(f"chaos: harness failure (seed {cfg.seed}): {exc}", file=sys.stderr)
        return 2
