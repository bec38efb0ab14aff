"""The ``rsjobs`` command line: run workers, submit and inspect tasks.

Every error is one clear line on stderr and a non-zero exit status.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from .client import Client, connect
from .connection import redact_url
from .errors import ConfigError, RedisUnavailable, RsjobsError
from .settings import Settings
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
    try:
        return getattr(module, attr)
    except AttributeError:
        raise CliError(f"module {module_name!r} has no attribute {attr!r}") from None


def settings_from_args(args: argparse.Namespace, **more: Any) -> Settings:
    """The :class:`Settings` the global options name (namespace, durable mode), plus
    ``more``; a bad value is a one-line CLI error."""
    try:
        return Settings(
            namespace=args.namespace,
            wait_replicas=args.wait_replicas,
            wait_timeout_ms=args.wait_timeout_ms,
            **more,
        )
    except ConfigError as exc:
        raise CliError(str(exc)) from None


_settings = settings_from_args


def _client(args: argparse.Namespace) -> Client:
    return Client(connect(args.url), settings_from_args(args), source="user")


def _ms(ts: int) -> str:
    if not ts:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts / 1000)) + f".{ts % 1000:03d}"


# -- commands --------------------------------------------------------------------------------


async def cmd_worker(args: argparse.Namespace) -> int:
    registry = load_object(args.app)
    if not isinstance(registry, Registry):
        raise CliError(f"{args.app} is a {type(registry).__name__}, not an rsjobs Registry")
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(message)s")
    worker = Worker(
        registry,
        url=args.url,
        settings=_settings(args),
        queues=args.queue or ["default"],
        concurrency=args.concurrency,
        lease_ms=args.lease_ms,
        grace_ms=args.grace_ms,
        name=args.name,
    )
    await worker.run()
    return 0


async def cmd_enqueue(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload) if args.payload is not None else None
    except json.JSONDecodeError as exc:
        raise CliError(f"--payload is not valid JSON: {exc}") from None
    async with _client(args) as client:
        tid = await client.enqueue(
            args.type,
            payload,
            queue=args.queue,
            max_attempts=args.max_attempts,
            timeout_ms=args.timeout_ms,
            delay_ms=args.delay_ms,
            dedup_key=args.dedup_key,
            owner=args.owner,
        )
        print(tid)
        if args.wait:
            info = await client.wait(tid)
            print(info.state)
            return 0 if info.state == "SUCCEEDED" else 1
    return 0


async def cmd_status(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        info = await client.get(args.id)
    if args.json:
        import msgspec

        print(msgspec.json.encode(info).decode())
        return 0
    rows = [
        ("id", info.id), ("type", info.type), ("queue", info.queue), ("state", info.state),
        ("attempt", f"{info.attempt} (failures {info.failures}/{info.max_attempts})"),
        ("progress", f"{info.progress:g}% {info.progress_msg}".rstrip()),
        ("worker", info.worker or "-"), ("owner", info.owner or "-"),
        ("created", _ms(info.created_at)), ("started", _ms(info.started_at)),
        ("finished", _ms(info.finished_at)),
        ("result", json.dumps(info.result) if info.result is not None else "-"),
        ("error", info.error or "-"),
    ]  # fmt: skip
    for k, v in rows:
        print(f"{k:>9}  {v}")
    return 0


async def cmd_history(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        entries = await client.history(args.id)
    for e in entries:
        mark = "REFUSED " if e.rejected else ""
        arrow = f"{e.from_state or '-'} -> {e.to_state}"
        extra = " ".join(f"{k}={v}" for k, v in e.extra.items())
        print(
            f"{_ms(e.ts)}  {mark}{e.event:<10} {arrow:<24} att={e.attempt} src={e.source}"
            f"  {e.message} {extra}".rstrip()
        )
    return 0


async def cmd_control(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        op: Callable[[str, str], Coroutine[Any, Any, str]] = getattr(client, args.command)
        state = await op(args.id, args.reason)
    print(state)
    return 0


async def cmd_queues(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        stats = await client.stats()
    states = ["PENDING", "SCHEDULED", "RUNNING", "PAUSED",
              "SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"]  # fmt: skip
    if args.json:
        print(json.dumps(stats))
        return 0
    header = ["queue", "stream", *states]
    print("  ".join(f"{h:>9}" for h in header))
    for q, s in stats.items():
        row = [q, str(s.get("stream_length", 0)), *(str(s.get(st, 0)) for st in states)]
        print("  ".join(f"{c:>9}" for c in row))
    if not stats:
        print("(no queues yet)")
    return 0


async def cmd_healthcheck(args: argparse.Namespace) -> int:
    """Redis answers PING within the timeout (exit 3 otherwise); with ``--http``, that URL
    answers 200 too (exit 1 otherwise). Prints one line either way."""
    bound = args.timeout_ms / 1000
    if bound <= 0:
        raise CliError("--timeout-ms must be positive")
    redis = connect(args.url, socket_timeout=bound, connect_timeout=bound)
    try:
        async with asyncio.timeout(bound):
            await redis.ping()
    except (RedisError, OSError) as exc:
        print(f"unhealthy: redis at {redact_url(args.url)}: {type(exc).__name__}: {exc}")
        return 3
    finally:
        await redis.aclose()
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
    """Everything on an embedded Redis, in one process: the server (AOF on), a worker, a
    reaper and the web app in dev mode (no tokens), until Ctrl-C."""
    import uvicorn

    from .reaper import Reaper
    from .server import EmbeddedRedis
    from .web.app import create_app

    registry = load_object(args.app)
    if not isinstance(registry, Registry):
        raise CliError(f"{args.app} is not an rsjobs Registry")
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(message)s")
    settings = _settings(args)
    with EmbeddedRedis(port=args.port, appendonly=True) as server:
        worker = Worker(
            registry,
            url=server.url,
            settings=settings,
            queues=args.queue or ["default"],
            concurrency=args.concurrency,
            handle_signals=False,
        )
        reaper = Reaper(url=server.url, settings=settings)
        app = create_app(server.url, settings=settings, dev=True)
        service = app.state.rsjobs

        class Web(uvicorn.Server):
            def handle_exit(self, sig: int, frame: Any) -> None:
                worker.stop()
                reaper.stop()
                service.close_streams()
                super().handle_exit(sig, frame)

        web = Web(
            uvicorn.Config(
                app, host="127.0.0.1", port=args.web_port, log_level="warning", lifespan="on"
            )
        )
        print(
            f"rsjobs dev: redis {server.url} (data in {server.data_dir})\n"
            f"            web   http://127.0.0.1:{args.web_port}/ui/  (Ctrl-C stops all)",
            flush=True,
        )
        await asyncio.gather(worker.run(), reaper.run(), web.serve())
        await reaper.close()
    return 0


# -- parser ----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    p = argparse.ArgumentParser(prog="rsjobs", description="rsjobs: Redis-Streams job system")
    p.add_argument("--version", action="version", version=f"rsjobs {__version__}")
    p.add_argument(
        "--url",
        default=os.environ.get("RSJOBS_URL", DEFAULT_URL),
        help="Redis URL (env RSJOBS_URL)",
    )
    p.add_argument("--namespace", default=os.environ.get("RSJOBS_NAMESPACE", "default"))
    p.add_argument("--log-level", default=os.environ.get("RSJOBS_LOG_LEVEL", "INFO"))
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
    w.add_argument("-q", "--queue", action="append", help="queue to serve (repeatable)")
    w.add_argument("-c", "--concurrency", type=int, default=16)
    w.add_argument("--lease-ms", type=int, default=30_000)
    w.add_argument("--grace-ms", type=int, default=10_000)
    w.add_argument("--name", default=None)
    w.set_defaults(func=cmd_worker)

    d = sub.add_parser("dev", help="embedded Redis + worker + reaper + web, for local work")
    d.add_argument("app")
    d.add_argument("-q", "--queue", action="append")
    d.add_argument("-c", "--concurrency", type=int, default=8)
    d.add_argument("--port", type=int, default=None, help="redis port (default: a free one)")
    d.add_argument("--web-port", type=int, default=8000)
    d.set_defaults(func=cmd_dev)

    e = sub.add_parser("enqueue", help="submit a task")
    e.add_argument("type")
    e.add_argument("--payload", help="JSON payload")
    e.add_argument("--queue", default="default")
    e.add_argument("--max-attempts", type=int, default=3)
    e.add_argument("--timeout-ms", type=int, default=0)
    e.add_argument("--delay-ms", type=int, default=0)
    e.add_argument("--dedup-key")
    e.add_argument("--owner")
    e.add_argument("--wait", action="store_true", help="wait until the task is finished")
    e.set_defaults(func=cmd_enqueue)

    s = sub.add_parser("status", help="show a task")
    s.add_argument("id")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_status)

    h = sub.add_parser("history", help="show a task's history")
    h.add_argument("id")
    h.set_defaults(func=cmd_history)

    for name in ("cancel", "pause", "resume"):
        c = sub.add_parser(name, help=f"{name} a task")
        c.add_argument("id")
        c.add_argument("--reason", default="")
        c.set_defaults(func=cmd_control)

    hc = sub.add_parser(
        "healthcheck",
        help="exit 0 when Redis answers (and --http URL answers 200); for container probes",
    )
    hc.add_argument("--http", metavar="URL", help="also GET this URL (e.g. the web /healthz)")
    hc.add_argument("--timeout-ms", type=int, default=2000)
    hc.set_defaults(func=cmd_healthcheck)

    q = sub.add_parser("queues", help="queue depth and task counts per state")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_queues)

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
_PLUGINS = ("rsjobs.reaper.cli", "rsjobs.web.cli", "rsjobs.workflows.cli")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(asyncio.run(args.func(args)))
    except KeyboardInterrupt:
        return 130
    except (RedisConnectionError, RedisUnavailable) as exc:
        print(f"rsjobs: cannot reach redis at {redact_url(args.url)}: {exc}", file=sys.stderr)
        return 3
    except (RsjobsError, ConfigError) as exc:
        print(f"rsjobs: {exc}", file=sys.stderr)
        return 2
    except RedisError as exc:
        print(f"rsjobs: redis error: {exc}", file=sys.stderr)
        return 3


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
