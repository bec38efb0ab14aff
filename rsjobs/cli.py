"""The ``rsjobs`` command line: run workers, submit and inspect tasks.

Every error is one clear line on stderr and a non-zero exit status: 2 for bad input, 3
when Redis cannot be reached; 1 when a waited-for task did not succeed or a cancel or
pause changed nothing; 124 when ``enqueue --wait --timeout`` gave up (the task goes on).
The commands that print tables live in :mod:`rsjobs.console.commands`.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from .client import Client, connect
from .errors import (
    ConfigError,
    InvalidTransition,
    RedisUnavailable,
    RsjobsError,
    StoreError,
    WaitTimeout,
)
from .extras import require
from .logfmt import FORMATS, setup_logging
from .settings import Settings, queue_quota_from_env
from .store import Store
from .store.connection import moved_hint, redact_url
from .worker import Registry, Worker

__all__ = ["main"]

DEFAULT_URL = "redis://127.0.0.1:6379/0"


class CliError(RsjobsError):
    """Raised for a command-line mistake; printed as one line, exit status 2."""


def load_object(spec: str) -> Any:
    """Import ``module:attribute`` (e.g. ``examples.demo_tasks:tasks``)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CliError(f"expected MODULE:OBJECT, got {spec!r}")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CliError(f"cannot import {module_name!r}: {exc}") from None
    except Exception as exc:  # the module's own code failed while it was imported
        hint = ""
        if "asyncio.run() cannot be called" in str(exc):
            hint = (
                " (the module calls asyncio.run() when it is imported: put that call under "
                '`if __name__ == "__main__":`)'
            )
        raise CliError(
            f"importing {module_name!r} failed: {type(exc).__name__}: {exc}{hint}"
        ) from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise CliError(f"module {module_name!r} has no attribute {attr!r}") from None


def _log_format_default() -> str:
    # checked in main: argparse does not hold a default to its choices
    return os.environ.get("RSJOBS_LOG_FORMAT", "").strip().lower() or "text"


def settings_from_args(args: argparse.Namespace, **more: Any) -> Settings:
    """The :class:`Settings` the global options name (namespace, durable mode), the
    owners' queue quota (``RSJOBS_QUEUE_QUOTA``), plus ``more``; a bad value is a
    one-line CLI error."""
    raw = getattr(args, "shards", None)
    shards: int | None = None
    if raw not in (None, ""):
        try:
            shards = int(raw)
        except ValueError:
            raise CliError(f"--shards must be an integer between 1 and 256, not {raw!r}") from None
    try:
        more.setdefault("queue_quota", queue_quota_from_env(os.environ))
        return Settings(
            namespace=args.namespace,
            wait_replicas=args.wait_replicas,
            wait_timeout_ms=args.wait_timeout_ms,
            shards=shards,
            **more,
        )
    except ConfigError as exc:
        raise CliError(str(exc)) from None


_settings = settings_from_args


#: the source the history records for what the command line does
SOURCE = "cli"


def client_from_args(args: argparse.Namespace) -> Client:
    """The client the global options name (URL, namespace, durable mode); what it does is
    recorded with the source ``cli``."""
    return Client(connect(args.url), settings_from_args(args), source=SOURCE)


#: exit status of ``enqueue --wait --timeout`` when the time ran out (as timeout(1))
EXIT_TIMEOUT = 124
#: exit status of a cancel or pause that found the task already there (nothing changed)
EXIT_UNCHANGED = 1


def warn(text: str) -> None:
    """One line on stderr, prefixed as every message of the command line is."""
    print(f"rsjobs: {text}", file=sys.stderr, flush=True)


def add_metrics_options(p: argparse.ArgumentParser, whose: str) -> None:
    """``--metrics-port`` / ``--metrics-host`` of a long-running process (rsjobs.metrics)."""
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help=f"serve Prometheus metrics (the namespace's and {whose} own) at "
        "http://HOST:PORT/metrics (0: a free port)",
    )
    p.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="the address the metrics listen on (default 127.0.0.1; 0.0.0.0: every one)",
    )


def _charge_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--charge",
        action="append",
        metavar="UNIT=AMOUNT",
        help="what the outside job cost, added to the attempt's costs (repeatable; docs/costs.md)",
    )


def load_registry(spec: str) -> Registry:
    registry = load_object(spec)
    if not isinstance(registry, Registry):
        raise CliError(f"{spec} is a {type(registry).__name__}, not an rsjobs Registry")
    return registry


async def cmd_worker(args: argparse.Namespace) -> int:
    registry = load_registry(args.app)
    setup_logging(args.log_level, args.log_format, "%(asctime)s %(levelname)s %(message)s")
    worker = Worker(
        registry,
        url=args.url,
        settings=_settings(args, retention_ms=args.retention_ms),
        queues=args.queue or registry.queues(),
        concurrency=args.concurrency,
        lease_ms=args.lease_ms,
        grace_ms=args.grace_ms,
        name=args.name,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        priority_age_ms=args.priority_age_ms,
    )
    await worker.run()
    return 0


async def cmd_enqueue(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload) if args.payload is not None else None
    except json.JSONDecodeError as exc:
        raise CliError(f"--payload is not valid JSON: {exc}") from None
    if args.timeout is not None and not args.wait:
        raise CliError("--timeout needs --wait")
    if args.after_policy != "succeeded" and not args.after:
        raise CliError("--after-policy needs --after")
    if args.timeout is not None and not 0 < args.timeout <= 365 * 24 * 3600:
        raise CliError("--timeout must be a positive number of seconds")
    labels: dict[str, str] = {}
    for item in args.label or ():
        key, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"--label {item!r}: expected KEY=VALUE")
        if key in labels:
            raise CliError(f"--label {key!r} is given twice")
        labels[key] = value
    async with client_from_args(args) as client:
        tid = await client.enqueue(
            args.type,
            payload,
            queue=args.queue,
            max_attempts=args.max_attempts,
            timeout_ms=args.timeout_ms,
            delay_ms=args.delay_ms,
            dedup_key=args.dedup_key,
            owner=args.owner,
            labels=labels or None,
            after=args.after or None,
            after_policy=args.after_policy,
            priority=args.priority,
        )
        print(tid, flush=True)
        from .console.commands import live_workers

        if not (await live_workers(client)).get(args.queue):
            warn(
                f"no live worker serves queue {args.queue!r}: the task waits until one "
                f"does (rsjobs worker MODULE:REGISTRY -q {args.queue})"
            )
        if not args.wait:
            return 0
        from .console.progress import follow

        timeout_ms = None if args.timeout is None else max(1, int(args.timeout * 1000))
        try:
            info = await follow(client, tid, timeout_ms=timeout_ms)
        except WaitTimeout:
            state = (await client.get(tid)).state
            warn(
                f"task {tid} is still {state} after --timeout {args.timeout:g} s; it goes on "
                f"(rsjobs status {tid})"
            )
            return EXIT_TIMEOUT
        print(info.state)
        return 0 if info.state == "SUCCEEDED" else 1


#: the state each control command leads to
_TARGET = {"cancel": "CANCELLED", "pause": "PAUSED", "resume": "PENDING"}


async def cmd_control(args: argparse.Namespace) -> int:
    async with client_from_args(args) as client:
        op: Callable[[str, str], Coroutine[Any, Any, str]] = getattr(client, args.command)
        # the client answers a repeat with the state alone; the state before the call
        # tells a repeat (already there, or finished) from a change
        before = await client.get(args.id)
        state = await op(args.id, args.reason)
    print(state)
    target = _TARGET[args.command]
    if state != target or before.state == target or before.terminal:
        why = "a finished task accepts no " + args.command if before.terminal else ""
        warn(f"nothing changed: task {args.id} is already {state}" + (f" ({why})" if why else ""))
        return EXIT_UNCHANGED
    return 0


async def cmd_external(args: argparse.Namespace) -> int:
    """``rsjobs complete`` / ``rsjobs fail``: end a DEFERRED task's wait (by its id, or by
    the outside job's id with ``--provider``); prints the state after. A result the task
    refuses (it is not waiting on that job) exits 1, recorded in its history. ``--charge
    UNIT=AMOUNT`` (repeatable): what the outside job cost, added to the attempt's costs."""
    charges: dict[str, float] = {}
    for item in args.charge or ():
        unit, sep, amount = item.partition("=")
        try:
            charges[unit] = charges.get(unit, 0.0) + float(amount)
        except ValueError:
            sep = ""
        if not sep:
            raise CliError(f"--charge {item!r}: expected UNIT=AMOUNT, e.g. usd=0.40")
    async with client_from_args(args) as client:
        try:
            if args.command == "complete":
                try:
                    result = json.loads(args.result) if args.result is not None else None
                except json.JSONDecodeError as exc:
                    raise CliError(f"--result is not valid JSON: {exc}") from None
                state = await client.complete_external(
                    args.id, result, provider=args.provider, charges=charges
                )
            else:
                state = await client.fail_external(
                    args.id,
                    args.error,
                    retryable=not args.final,
                    provider=args.provider,
                    charges=charges,
                )
        except InvalidTransition as exc:
            warn(f"refused (recorded in the task's history): {exc}")
            return 1
    print(state)
    return 0


async def cmd_healthcheck(args: argparse.Namespace) -> int:
    """The Redis node serving the namespace answers within the timeout (exit 3
    otherwise); with ``--http``, that URL answers 200 too (exit 1 otherwise). Prints one
    line either way."""
    bound = args.timeout_ms / 1000
    if bound <= 0:
        raise CliError("--timeout-ms must be positive")
    store = Store(
        connect(args.url, socket_timeout=bound, connect_timeout=bound), settings_from_args(args)
    )
    try:
        async with asyncio.timeout(bound):
            await store.ping()
    except (RsjobsError, OSError) as exc:
        cause = exc.__cause__ or exc
        hint = moved_hint(exc, args.url)
        if hint is not None:
            print(f"unhealthy: {hint}")
            return 3
        print(f"unhealthy: redis at {redact_url(args.url)}: {type(cause).__name__}: {cause}")
        return 3
    finally:
        await store.close()
    if args.http:
        import urllib.error
        import urllib.request

        def get() -> int:
            with urllib.request.urlopen(args.http, timeout=bound) as resp:
                return int(resp.status)

        try:
            status = await asyncio.to_thread(get)
        except (urllib.error.URLError, OSError) as exc:
            print(f"unhealthy: {args.http}: {exc}")
            return 1
        if status != 200:
            print(f"unhealthy: {args.http} answered {status}")
            return 1
    print("ok")
    return 0


async def cmd_dev(args: argparse.Namespace) -> int:
    """Everything on an embedded Redis, in one process (see :mod:`rsjobs.dev`)."""
    require("web", "rsjobs dev", "starlette", "uvicorn")
    from .dev import DevError, DevOptions, run_dev
    from .web.cli import load_definitions

    registry = load_registry(args.app)
    definitions = load_definitions(args.workflows)
    setup_logging(
        args.log_level, args.log_format, "%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.concurrency < 1 or args.grace_ms < 0:
        raise CliError("--concurrency must be >= 1 and --grace-ms >= 0")
    options = DevOptions(
        settings=_settings(args),
        queues=args.queue or (),
        concurrency=args.concurrency,
        grace_ms=args.grace_ms,
        port=args.port,
        web_port=args.web_port if args.web_port is not None else 8000,
        web_port_given=args.web_port is not None,
        data_dir=args.data_dir,
        migrate=args.migrate,
    )
    try:
        return await run_dev(registry, definitions, options, sys.stdout)
    except DevError as exc:
        raise CliError(str(exc)) from None


# -- parser ----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    from .console import commands as show

    # no abbreviations: the top parser would read a command's `--wait` as an ambiguous
    # abbreviation of its own --wait-replicas / --wait-timeout-ms
    p = argparse.ArgumentParser(
        prog="rsjobs", description="rsjobs: Redis-Streams job system", allow_abbrev=False
    )
    p.add_argument("--version", action="version", version=f"rsjobs {__version__}")
    p.add_argument(
        "--url",
        default=os.environ.get("RSJOBS_URL", DEFAULT_URL),
        help="Redis URL (env RSJOBS_URL)",
    )
    p.add_argument("--namespace", default=os.environ.get("RSJOBS_NAMESPACE", "default"))
    p.add_argument(
        "--shards",
        default=os.environ.get("RSJOBS_SHARDS") or None,
        metavar="S",
        help="the namespace's shard count (1-256): the first process given one creates the "
        "namespace with it; another count than the namespace's is an error; none: read it "
        "(env RSJOBS_SHARDS)",
    )
    p.add_argument(
        "--log-level",
        default=os.environ.get("RSJOBS_LOG_LEVEL", "INFO"),
        help="DEBUG, INFO (the default), WARNING, ERROR or CRITICAL (env RSJOBS_LOG_LEVEL)",
    )
    p.add_argument(
        "--log-format",
        choices=FORMATS,
        default=_log_format_default(),
        help="log lines of worker, reaper, web and dev: text, or json (one object per line: "
        "ts, level, logger, message; task lines add task_id, task_type, queue, attempt); "
        "env RSJOBS_LOG_FORMAT",
    )
    p.add_argument(
        "--wait-replicas",
        type=int,
        default=int(os.environ.get("RSJOBS_WAIT_REPLICAS") or 0),
        metavar="N",
        help="durable mode: submits, cancels, pauses and resumes return once N replicas "
        "confirmed them (WAIT); env RSJOBS_WAIT_REPLICAS",
    )
    p.add_argument(
        "--wait-timeout-ms",
        type=int,
        default=int(os.environ.get("RSJOBS_WAIT_TIMEOUT_MS") or 1000),
        metavar="MS",
        help="how long durable mode waits for the replicas",
    )
    sub = p.add_subparsers(dest="command", required=True)

    w = sub.add_parser("worker", help="run a worker for a Registry (MODULE:OBJECT)")
    w.add_argument("app")
    w.add_argument(
        "-q",
        "--queue",
        action="append",
        help="queue to serve (repeatable; default: the queues the handlers declare)",
    )
    w.add_argument("-c", "--concurrency", type=int, default=16)
    w.add_argument("--lease-ms", type=int, default=30_000)
    w.add_argument("--grace-ms", type=int, default=10_000)
    w.add_argument(
        "--retention-ms",
        type=int,
        default=int(os.environ.get("RSJOBS_RETENTION_MS") or Settings().retention_ms),
        help="how long tasks this worker finishes are kept (env RSJOBS_RETENTION_MS; "
        "give the reapers the same)",
    )
    w.add_argument("--name", default=None)
    add_metrics_options(w, "this worker's")
    w.add_argument(
        "--priority-age-ms",
        type=int,
        default=30_000,
        metavar="MS",
        help="aging: a waiting task counts one priority level higher per MS it waited, so "
        "that none starves (0: never; see rsjobs.limits)",
    )
    w.set_defaults(func=cmd_worker)

    d = sub.add_parser(
        "dev",
        help="embedded Redis + worker + reaper + web, for local work",
        description="Everything in one process on an embedded Redis (AOF on). The worker "
        "serves every queue the handlers and workflow stages declare and every queue that "
        "has work, unless -q names them. Ctrl-C or SIGTERM stops it all cleanly.",
    )
    d.add_argument("app", metavar="MODULE:REGISTRY")
    d.add_argument("-q", "--queue", action="append", help="serve only these queues (repeatable)")
    d.add_argument("-c", "--concurrency", type=int, default=8)
    d.add_argument("--port", type=int, default=None, help="redis port (default: a free one)")
    d.add_argument(
        "--web-port",
        type=int,
        default=None,
        help="web port (default 8000, or a free one when 8000 is taken)",
    )
    d.add_argument(
        "--data-dir",
        metavar="DIR",
        help="keep Redis's data (AOF) here between runs (default: a temporary directory, "
        "removed at exit)",
    )
    d.add_argument(
        "--migrate",
        action="store_true",
        help="first convert data an earlier rsjobs left in --data-dir (as `rsjobs migrate`)",
    )
    d.add_argument(
        "--workflows",
        action="append",
        default=[],
        metavar="MODULE:OBJECT",
        help="workflow definitions the web app may start (as `rsjobs web --workflows`)",
    )
    d.add_argument(
        "--grace-ms",
        type=int,
        default=2000,
        help="at a stop, how long running handlers may finish before they are handed back",
    )
    d.set_defaults(func=cmd_dev)

    e = sub.add_parser("enqueue", help="submit a task")
    e.add_argument("type")
    e.add_argument("--payload", help="JSON payload")
    e.add_argument("--queue", default="default")
    e.add_argument("--max-attempts", type=int, default=3)
    e.add_argument(
        "--timeout-ms", type=int, default=0, help="execution deadline of one attempt (0 = none)"
    )
    e.add_argument("--delay-ms", type=int, default=0)
    e.add_argument("--dedup-key")
    e.add_argument("--owner")
    e.add_argument(
        "--priority", type=int, default=0, help="0 (the default) to 9: higher starts first"
    )
    e.add_argument(
        "--label", action="append", metavar="KEY=VALUE", help="a label (repeatable, at most 8)"
    )
    e.add_argument(
        "--after",
        action="append",
        metavar="ID",
        help="a predecessor (repeatable, at most 32): the task waits (WAITING) until they "
        "succeeded, and is cancelled when one does not",
    )
    e.add_argument(
        "--after-policy",
        choices=("succeeded", "always"),
        default="succeeded",
        help="with --after: run once every predecessor SUCCEEDED (default), or once every "
        "one finished, however it ended (always)",
    )
    e.add_argument(
        "--wait",
        action="store_true",
        help="follow the task to its end (progress on stderr); exit 0 when it SUCCEEDED",
    )
    e.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="with --wait: stop waiting after this long (exit 124; the task goes on)",
    )
    e.set_defaults(func=cmd_enqueue)

    s = sub.add_parser("status", help="show a task")
    s.add_argument("id")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=show.cmd_status)

    h = sub.add_parser("history", help="show a task's history")
    h.add_argument("id")
    h.set_defaults(func=show.cmd_history)

    for name in ("cancel", "pause", "resume"):
        c = sub.add_parser(name, help=f"{name} a task")
        c.add_argument("id")
        c.add_argument("--reason", default="")
        c.set_defaults(func=cmd_control)

    done = sub.add_parser(
        "complete", help="end a DEFERRED task's wait with its result (an outside job's)"
    )
    done.add_argument("id", help="the task id, or the outside job's id (with --provider)")
    done.add_argument("--result", help="the result (JSON)")
    done.add_argument("--provider", help="the outside job's provider (the id is its job id)")
    _charge_option(done)
    done.set_defaults(func=cmd_external)
    fail = sub.add_parser("fail", help="fail a DEFERRED task's wait (the retry policy decides)")
    fail.add_argument("id", help="the task id, or the outside job's id (with --provider)")
    fail.add_argument("--error", required=True, help="what went wrong")
    fail.add_argument("--final", action="store_true", help="no retry: FAILED at once")
    fail.add_argument("--provider", help="the outside job's provider (the id is its job id)")
    _charge_option(fail)
    fail.set_defaults(func=cmd_external)

    # retry, replay, queue pause|resume, bulk cancel|retry
    from .console import actions

    actions.register(sub)

    hc = sub.add_parser(
        "healthcheck",
        help="exit 0 when Redis answers (and --http URL answers 200); for container probes",
    )
    hc.add_argument("--http", metavar="URL", help="also GET this URL (e.g. the web /healthz)")
    hc.add_argument("--timeout-ms", type=int, default=2000)
    hc.set_defaults(func=cmd_healthcheck)

    t = sub.add_parser("tasks", help="list tasks, newest first (from the list indexes)")
    t.add_argument("--state", action="append", help="only these states (repeatable, or a,b)")
    t.add_argument("--queue", action="append", help="only these queues (repeatable, or a,b)")
    t.add_argument("--type", help="only tasks of this type")
    t.add_argument("--owner", help="only this owner's tasks")
    t.add_argument(
        "--label", action="append", metavar="KEY=VALUE", help="only tasks with this label"
    )
    t.add_argument(
        "--since", metavar="TIME", help="listed at or after: ms, ISO 8601, or a time ago (2h)"
    )
    t.add_argument(
        "--until", metavar="TIME", help="listed at or before: ms, ISO 8601, or a time ago (2h)"
    )
    t.add_argument("--limit", type=int, default=50, help="tasks per page (1-500)")
    t.add_argument("--cursor", help="the page after the one that printed this cursor")
    t.add_argument("--all", action="store_true", help="every page, not only the first")
    t.add_argument("--json", action="store_true", help="one JSON object per task and line")
    t.set_defaults(func=show.cmd_tasks)

    q = sub.add_parser("queues", help="queue depth and task counts per state")
    q.add_argument("--json", action="store_true")
    q.add_argument(
        "--series",
        metavar="NAME",
        help="one queue's per-minute series instead (the reaper samples it)",
    )
    q.add_argument("--minutes", type=int, default=60, help="minutes of --series (1-1440)")
    q.set_defaults(func=show.cmd_queues)

    # commands of the other parts (reaper, web, workflows) live beside them
    for module in _PLUGINS:
        try:
            plugin = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is None or not module.startswith(exc.name):
                raise  # a missing dependency inside the plugin is a real error
            continue
        plugin.register(sub)
    return p


#: modules with a ``register(subparsers)`` adding their commands (``rsjobs reaper`` ...)
_PLUGINS = (
    "rsjobs.reaper.cli",
    "rsjobs.web.cli",
    "rsjobs.workflows.cli",
    "rsjobs.console.migrate",
    "rsjobs.hooks.cli",
    "rsjobs.console.schedules",
    "rsjobs.console.costs",
    "rsjobs.console.limits",
)


#: the levels --log-level takes (any case)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.log_format not in FORMATS:
        print(
            f"rsjobs: RSJOBS_LOG_FORMAT={args.log_format!r}: expected one of {', '.join(FORMATS)}",
            file=sys.stderr,
        )
        return 2
    level = str(args.log_level).upper()
    if level not in LOG_LEVELS:
        print(
            f"rsjobs: log level {args.log_level!r} (--log-level, RSJOBS_LOG_LEVEL): expected "
            f"one of {', '.join(LOG_LEVELS)}",
            file=sys.stderr,
        )
        return 2
    args.log_level = level
    try:
        return int(asyncio.run(args.func(args)))
    except KeyboardInterrupt:
        return 130
    except RedisUnavailable as exc:
        hint = moved_hint(exc, args.url)
        if hint is not None:
            print(f"rsjobs: {hint}", file=sys.stderr)
            return 3
        # (what failed underneath, not which of rsjobs's reads met it first)
        why = exc.__cause__ if exc.__cause__ is not None else exc
        print(f"rsjobs: cannot reach redis at {redact_url(args.url)}: {why}", file=sys.stderr)
        return 3
    except StoreError as exc:
        print(f"rsjobs: redis error: {exc}", file=sys.stderr)
        return 3
    except (RsjobsError, ConfigError) as exc:
        print(f"rsjobs: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
