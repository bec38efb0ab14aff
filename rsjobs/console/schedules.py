"""``rsjobs schedules add|list|remove``: recurring tasks (:mod:`rsjobs.schedules`).
``rsjobs.cli`` finds this module and calls :func:`register`."""

from __future__ import annotations

import argparse
import json
from typing import Any

import msgspec

from ..cli import SOURCE, CliError, settings_from_args
from ..client import Client, connect
from ..errors import ConfigError, PayloadError
from .tables import Column, print_table
from .views import when

__all__ = ["register"]


def _client(args: argparse.Namespace) -> Client:
    return Client(connect(args.url), settings_from_args(args), source=SOURCE)


async def cmd_add(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as exc:
        raise CliError(f"--payload is not JSON: {exc}") from None
    client = _client(args)
    try:
        first = await client.schedule(
            args.name,
            type=args.type,
            payload=payload,
            cron=args.cron,
            every_ms=args.every_ms,
            queue=args.queue,
            max_attempts=args.max_attempts,
            timeout_ms=args.timeout_ms,
            priority=args.priority,
        )
    except (ConfigError, PayloadError) as exc:
        raise CliError(str(exc)) from None
    finally:
        await client.close()
    print(f"schedule {args.name}: first tick at {when(first)}")
    return 0


async def cmd_list(args: argparse.Namespace) -> int:
    client = _client(args)
    try:
        infos = await client.schedules()
    finally:
        await client.close()
    if args.json:
        for info in infos:
            print(msgspec.json.encode(info).decode())
        return 0
    if not infos:
        print("(no schedules)")
        return 0
    columns = [
        Column("name"), Column("ticks"), Column("type"), Column("queue"), Column("next"),
        Column("fired", numeric=True), Column("skipped", numeric=True), Column("last"),
        Column("last task"),
    ]  # fmt: skip
    rows: list[list[object]] = []
    for i in infos:
        s = i.schedule
        ticks = f"cron {s.cron}" if s.cron else f"every {s.every_ms / 1000:g}s"
        rows.append([s.name, ticks, s.task.type, s.task.queue, when(i.next_at), i.fired,
                     i.skipped, when(i.last_at), i.last_task])  # fmt: skip
    print_table(columns, rows)
    return 0


async def cmd_remove(args: argparse.Namespace) -> int:
    client = _client(args)
    try:
        if not await client.unschedule(args.name):
            raise CliError(f"no schedule {args.name!r}")
    finally:
        await client.close()
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("schedules", help="recurring tasks: add, list, remove")
    ps = p.add_subparsers(dest="schedules_command", required=True)
    a = ps.add_parser("add", help="add or replace a schedule (one task per tick)")
    a.add_argument("name")
    a.add_argument("type", help="the task type each tick enqueues")
    tick = a.add_mutually_exclusive_group(required=True)
    tick.add_argument("--cron", default="", help="cron expression, UTC ('*/5 * * * *')")
    tick.add_argument("--every-ms", type=int, default=0)
    a.add_argument("--payload", default="null", help="JSON")
    a.add_argument("--queue", default="default")
    a.add_argument("--max-attempts", type=int, default=3)
    a.add_argument("--timeout-ms", type=int, default=0)
    a.add_argument("--priority", type=int, default=0, help="of each tick's task (0-9)")
    a.set_defaults(func=cmd_add)
    ls = ps.add_parser("list", help="schedules: their ticks, task, next tick, fired, skipped")
    ls.add_argument("--json", action="store_true", help="one JSON document per schedule")
    ls.set_defaults(func=cmd_list)
    rm = ps.add_parser("remove", help="remove a schedule (its tasks stay)")
    rm.add_argument("name")
    rm.set_defaults(func=cmd_remove)
