"""``rsjobs`` commands of the reaper: ``reaper``, ``workers``, ``deadletter``,
``queues-memory``. ``rsjobs.cli`` finds this module and calls :func:`register`."""

from __future__ import annotations

import argparse
import os
from typing import Any

import msgspec

from ..cli import SOURCE, CliError, add_metrics_options, settings_from_args
from ..client import Client, connect
from ..console import commands as show
from ..errors import ConfigError
from ..logfmt import setup_logging
from ..settings import Settings
from .config import ReaperConfig
from .deadletter import requeue
from .reaper import Reaper

__all__ = ["register"]


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise CliError(f"{name}={raw!r} is not an integer") from None


def _client(args: argparse.Namespace) -> Client:
    """The global options' client: namespace and durable mode (--wait-replicas); its
    writes are recorded with the command line's source."""
    return Client(connect(args.url), settings_from_args(args), source=SOURCE)


def _print_json(value: Any) -> None:
    print(msgspec.json.encode(value).decode())


# -- commands --------------------------------------------------------------------------------


async def cmd_reaper(args: argparse.Namespace) -> int:
    try:
        config = ReaperConfig(
            interval_ms=args.interval_ms,
            lease_ms=args.lease_ms,
            min_idle_ms=args.min_idle_ms,
            max_deliveries=args.max_deliveries,
            deadline_grace_ms=args.deadline_grace_ms,
            dead_after_leases=args.dead_after_leases,
            forget_ms=args.forget_ms,
            deadletter_maxlen=args.deadletter_maxlen,
            batch=args.batch,
            recount_ms=args.recount_ms,
            guard=not args.no_guard,
            log_idle=args.log_idle,
        )
        settings = settings_from_args(args, retention_ms=args.retention_ms)
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    # one JSON line per sweep: the message is the whole record
    setup_logging(args.log_level, args.log_format, "%(message)s")
    reaper = Reaper(
        url=args.url,
        settings=settings,
        config=config,
        name=args.name,
        handle_signals=not args.once,
        metrics_port=None if args.once else args.metrics_port,
        metrics_host=args.metrics_host,
    )
    try:
        if args.once:
            report = await reaper.sweep_once()
            _print_json(report)
        else:
            await reaper.run()
    finally:
        await reaper.close()
    return 0


async def cmd_deadletter_requeue(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        clone, created = await requeue(client, args.id)
    print(clone)
    if not created:
        print(f"(already requeued as {clone})", flush=True)
    return 0


# -- parser ----------------------------------------------------------------------------------


def register(sub: Any) -> None:
    """Add the reaper's commands to the ``rsjobs`` sub-parsers."""
    d = ReaperConfig()
    r = sub.add_parser("reaper", help="run the reaper sidecar (recovery, deadlines, dead letters)")
    r.add_argument(
        "--interval-ms",
        type=int,
        default=_env_int("RSJOBS_REAPER_INTERVAL_MS", d.interval_ms),
        help="pause between sweeps",
    )
    r.add_argument(
        "--lease-ms",
        type=int,
        default=_env_int("RSJOBS_LEASE_MS", d.lease_ms),
        help="the workers' lease (default idle threshold)",
    )
    r.add_argument(
        "--min-idle-ms",
        type=int,
        default=d.min_idle_ms,
        help="idle time before an entry is examined (0 = --lease-ms)",
    )
    r.add_argument(
        "--max-deliveries",
        type=int,
        default=d.max_deliveries,
        help="lost deliveries before a task is dead-lettered",
    )
    r.add_argument(
        "--deadline-grace-ms",
        type=int,
        default=d.deadline_grace_ms,
        help="time a worker gets to report its own timeout",
    )
    r.add_argument(
        "--dead-after-leases",
        type=int,
        default=d.dead_after_leases,
        help="silent leases before a worker is marked dead",
    )
    r.add_argument(
        "--forget-ms",
        type=int,
        default=d.forget_ms,
        help="how long dead workers stay listed (0 = forever)",
    )
    r.add_argument("--deadletter-maxlen", type=int, default=d.deadletter_maxlen)
    r.add_argument("--batch", type=int, default=d.batch)
    r.add_argument(
        "--recount-ms",
        type=int,
        default=d.recount_ms,
        help="how often the per-owner RUNNING counts are recounted (limits; 0 = never)",
    )
    r.add_argument(
        "--retention-ms",
        type=int,
        default=_env_int("RSJOBS_RETENTION_MS", Settings().retention_ms),
        help="how long tasks the reaper finishes are kept (match the workers')",
    )
    r.add_argument(
        "--no-guard",
        action="store_true",
        help="sweep even when another reaper just did (no SET NX guard)",
    )
    r.add_argument("--once", action="store_true", help="one sweep, print its report, exit")
    r.add_argument(
        "--log-idle",
        action="store_true",
        help="also log the sweeps that changed nothing (by default only those that changed "
        "something or had errors are logged)",
    )
    # (quiet is the default now: kept so that command lines that pass it still work)
    r.add_argument("--quiet", action="store_true", help=argparse.SUPPRESS)
    r.add_argument("--name", default=None)
    add_metrics_options(r, "this reaper's")
    r.set_defaults(func=cmd_reaper)

    w = sub.add_parser("workers", help="live and dead workers with their in-flight tasks")
    w.add_argument("--json", action="store_true")
    w.add_argument(
        "--lease-ms",
        type=int,
        default=_env_int("RSJOBS_LEASE_MS", d.lease_ms),
        help="lease assumed for workers that do not register theirs",
    )
    w.set_defaults(func=show.cmd_workers)

    dl = sub.add_parser("deadletter", help="list or requeue dead-lettered tasks")
    dls = dl.add_subparsers(dest="deadletter_command", required=True)
    lst = dls.add_parser("list", help="newest dead letters first")
    lst.add_argument("--count", type=int, default=50)
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(func=show.cmd_deadletter_list)
    rq = dls.add_parser("requeue", help="submit a dead-lettered task again, as a linked clone")
    rq.add_argument("id")
    rq.set_defaults(func=cmd_deadletter_requeue)

    m = sub.add_parser("queues-memory", help="memory per queue (MEMORY USAGE, sampled tasks)")
    m.add_argument("--sample", type=int, default=20, help="tasks measured per queue")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=show.cmd_queues_memory)
