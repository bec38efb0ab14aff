"""``rsjobs hooks`` and ``rsjobs webhooks``: run hooks, inspect and requeue their dead
letters, configure webhooks and read a task's deliveries. ``rsjobs.cli`` finds this
module and calls :func:`register`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from typing import Any

import msgspec

from ..cli import CliError, load_object, settings_from_args
from ..client import connect
from ..errors import ConfigError
from ..store import Store
from .registry import Hooks
from .runner import HookRunner
from .webhooks import FINISHED, make_webhook

__all__ = ["register"]


def _store(args: argparse.Namespace) -> Store:
    return Store(connect(args.url), settings_from_args(args))


def _print_json(value: Any) -> None:
    print(msgspec.json.encode(value).decode())


def _csv(raw: str) -> list[str]:
    return [p.strip() for p in raw.split(",") if p.strip()]


async def cmd_hooks_run(args: argparse.Namespace) -> int:
    hooks = Hooks()
    if args.app:
        hooks = load_object(args.app)
        if not isinstance(hooks, Hooks):
            raise CliError(f"{args.app} is not an rsjobs.hooks.Hooks")
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(message)s")
    store = _store(args)
    try:
        runner = HookRunner(
            store,
            hooks,
            name=args.name,
            batch=args.batch,
            claim_idle_ms=args.claim_idle_ms,
            retry_claim_ms=args.retry_claim_ms,
            block_ms=args.block_ms,
        )
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await store.require_layout()
        await runner.start()
        logging.getLogger("rsjobs.hooks").info(
            "hook runner %s: %d hooks, %d webhooks", runner.name, len(hooks), runner.webhook_count
        )
        await runner.run(stop)
    finally:
        await runner.close()
        await store.close()
    return 0


async def cmd_hooks_list(args: argparse.Namespace) -> int:
    store = _store(args)
    try:
        _print_json(
            {
                "listeners": await store.hooks.listeners(),
                "backlog": await store.hooks.backlog(),
            }
        )
    finally:
        await store.close()
    return 0


async def cmd_hooks_forget(args: argparse.Namespace) -> int:
    """Stop writing the states a hook listened for (its runner gone for good)."""
    store = _store(args)
    try:
        if not await store.hooks.unlisten(f"hook:{args.hook}"):
            raise CliError(f"no hook {args.hook!r} listens here")
    finally:
        await store.close()
    return 0


async def cmd_hooks_dead(args: argparse.Namespace) -> int:
    store = _store(args)
    try:
        for d in await store.hooks.dead(args.limit):
            _print_json({"id": d.id, **msgspec.structs.asdict(d.retry)})
    finally:
        await store.close()
    return 0


async def cmd_hooks_requeue(args: argparse.Namespace) -> int:
    if not args.ids and not args.all:
        raise CliError("name dead-letter ids, or --all")
    store = _store(args)
    try:
        ids = list(args.ids)
        if args.all:
            ids = [d.id for d in await store.hooks.dead(100_000)]
        n = await store.hooks.requeue(ids, await store.hooks.now_ms())
        print(f"requeued {n} of {len(ids)}")
    finally:
        await store.close()
    return 0 if n == len(ids) else 1


async def cmd_webhooks_add(args: argparse.Namespace) -> int:
    secret = args.secret or os.environ.get("RSJOBS_WEBHOOK_SECRET", "")
    try:
        hook = make_webhook(
            args.name,
            args.webhook_url,
            secret,
            _csv(args.on) if args.on else FINISHED,
            _csv(args.types or ""),
            max_attempts=args.max_attempts,
            backoff_base_ms=args.backoff_base_ms,
            backoff_max_ms=args.backoff_max_ms,
            timeout_ms=args.timeout_ms,
        )
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    store = _store(args)
    try:
        await store.hooks.put_webhook(hook.name, msgspec.json.encode(hook), hook.on)
    finally:
        await store.close()
    print(f"webhook {hook.name} -> {hook.url} on {','.join(hook.on)}")
    return 0


async def cmd_webhooks_list(args: argparse.Namespace) -> int:
    store = _store(args)
    try:
        for name, raw in sorted((await store.hooks.webhooks()).items()):
            settings = msgspec.json.decode(raw)
            if isinstance(settings, dict):
                settings["secret"] = "***"
            _print_json({"name": name, "settings": settings})
    finally:
        await store.close()
    return 0


async def cmd_webhooks_remove(args: argparse.Namespace) -> int:
    store = _store(args)
    try:
        if not await store.hooks.remove_webhook(args.name):
            raise CliError(f"no webhook {args.name!r}")
    finally:
        await store.close()
    return 0


async def cmd_webhooks_log(args: argparse.Namespace) -> int:
    store = _store(args)
    try:
        for raw in await store.hooks.deliveries(args.task_id):
            print(raw.decode())
    finally:
        await store.close()
    return 0


def register(sub: Any) -> None:
    h = sub.add_parser("hooks", help="run hooks; their listeners, dead letters")
    hs = h.add_subparsers(dest="hooks_command", required=True)
    r = hs.add_parser("run", help="run the hook runner (hooks of MODULE:OBJECT, and webhooks)")
    r.add_argument("app", nargs="?", default="", help="an rsjobs.hooks.Hooks (MODULE:OBJECT)")
    r.add_argument("--name", default=None, help="consumer name (default: host-pid)")
    r.add_argument("--batch", type=int, default=50)
    r.add_argument("--block-ms", type=int, default=1000)
    r.add_argument(
        "--claim-idle-ms",
        type=int,
        default=60_000,
        help="take over entries a runner held this long (it died); bounds each run too",
    )
    r.add_argument("--retry-claim-ms", type=int, default=60_000)
    r.set_defaults(func=cmd_hooks_run)
    ls = hs.add_parser("list", help="who listens for which states; backlog")
    ls.set_defaults(func=cmd_hooks_list)
    fg = hs.add_parser("forget", help="stop noting the states a hook listened for")
    fg.add_argument("hook")
    fg.set_defaults(func=cmd_hooks_forget)
    d = hs.add_parser("dead", help="hook runs that failed every attempt (JSON lines)")
    d.add_argument("--limit", type=int, default=100)
    d.set_defaults(func=cmd_hooks_dead)
    rq = hs.add_parser("requeue", help="run dead-lettered hook runs again")
    rq.add_argument("ids", nargs="*")
    rq.add_argument("--all", action="store_true")
    rq.set_defaults(func=cmd_hooks_requeue)

    w = sub.add_parser("webhooks", help="configure webhooks; a task's deliveries")
    ws = w.add_subparsers(dest="webhooks_command", required=True)
    a = ws.add_parser("add", help="add or replace a webhook")
    a.add_argument("name")
    a.add_argument("webhook_url", metavar="URL")
    a.add_argument("--secret", default="", help="signing secret (env RSJOBS_WEBHOOK_SECRET)")
    a.add_argument("--on", default="", help="states, comma-separated (default: terminal ones)")
    a.add_argument("--types", default="", help="task type patterns, comma-separated")
    a.add_argument("--max-attempts", type=int, default=8)
    a.add_argument("--backoff-base-ms", type=int, default=1000)
    a.add_argument("--backoff-max-ms", type=int, default=600_000)
    a.add_argument("--timeout-ms", type=int, default=10_000)
    a.set_defaults(func=cmd_webhooks_add)
    wl = ws.add_parser("list", help="the webhooks (secrets hidden)")
    wl.set_defaults(func=cmd_webhooks_list)
    wr = ws.add_parser("remove", help="remove a webhook")
    wr.add_argument("name")
    wr.set_defaults(func=cmd_webhooks_remove)
    lg = ws.add_parser("log", help="a task's webhook deliveries, newest first (JSON lines)")
    lg.add_argument("task_id")
    lg.set_defaults(func=cmd_webhooks_log)
