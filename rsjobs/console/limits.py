"""``rsjobs limits set|list|clear`` and ``rsjobs rate set|list|clear``: the per-owner
concurrency limits and the rate limits of shared queues (:mod:`rsjobs.limits`), changed at
run time. ``rsjobs.cli`` finds this module and calls :func:`register`."""

from __future__ import annotations

import argparse
from typing import Any

import msgspec

from ..cli import SOURCE, CliError, settings_from_args
from ..client import Client, connect
from ..errors import ConfigError
from ..limits import QueueLimits
from .tables import Column, print_table

__all__ = ["register"]


def _client(args: argparse.Namespace) -> Client:
    return Client(connect(args.url), settings_from_args(args), source=SOURCE)


async def _limits(args: argparse.Namespace) -> list[QueueLimits]:
    client = _client(args)
    try:
        return await client.limits(args.queue)
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    finally:
        await client.close()


async def cmd_limit_set(args: argparse.Namespace) -> int:
    client = _client(args)
    try:
        await client.set_limit(args.queue, args.limit, owner=args.owner)
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    finally:
        await client.close()
    who = f"owner {args.owner}" if args.owner else "every owner"
    print(f"queue {args.queue}: at most {args.limit} running tasks of {who}")
    return 0


async def cmd_limit_clear(args: argparse.Namespace) -> int:
    client = _client(args)
    try:
        found = await client.clear_limit(args.queue, owner=args.owner)
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    finally:
        await client.close()
    if not found:
        who = f"owner {args.owner!r}'s own" if args.owner else "a default"
        raise CliError(f"queue {args.queue!r} has no limit of {who}")
    return 0


async def cmd_limit_list(args: argparse.Namespace) -> int:
    rows = await _limits(args)
    if args.json:
        for q in rows:
            print(msgspec.json.encode(q).decode())
        return 0
    table = []
    for q in rows:
        owners = sorted(set(q.owners) | set(q.running))
        if q.default is None and not owners and not q.waiting:
            continue
        table.append([q.queue, "*", _n(q.default), sum(q.running.values()), q.waiting])
        for o in owners:
            limit = q.owners.get(o, q.default)
            table.append(["", o, _n(limit), q.running.get(o, 0), ""])
    columns = [Column("queue"), Column("owner"), Column("limit", numeric=True)]
    columns += [Column("running", numeric=True), Column("waiting", numeric=True)]
    print_table(columns, table)
    return 0


async def cmd_rate_set(args: argparse.Namespace) -> int:
    client = _client(args)
    try:
        r = await client.set_rate(
            args.queue, args.per_second, type=args.type, burst=args.burst, retries=args.retries
        )
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    finally:
        await client.close()
    what = f"type {r.type}" + (" (retries)" if r.retries else "") if r.type else "every task"
    print(f"queue {r.queue}: {r.per_second:g} starts/s of {what}, burst {r.burst}")
    return 0


async def cmd_rate_clear(args: argparse.Namespace) -> int:
    client = _client(args)
    try:
        found = await client.clear_rate(args.queue, type=args.type, retries=args.retries)
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    finally:
        await client.close()
    if not found:
        raise CliError(f"queue {args.queue!r} has no such rate limit")
    return 0


async def cmd_rate_list(args: argparse.Namespace) -> int:
    rows = await _limits(args)
    if args.json:
        for q in rows:
            for r in q.rates:
                print(msgspec.json.encode(r).decode())
        return 0
    table = [
        [r.queue, r.type or "*", "yes" if r.retries else "", f"{r.per_second:g}", r.burst]
        for q in rows
        for r in q.rates
    ]
    table_throttled = {q.queue: q.throttled for q in rows}
    for row in table:
        row.append(table_throttled.get(str(row[0]), 0))
    columns = [Column("queue"), Column("type"), Column("retries")]
    columns += [Column("per_second", numeric=True), Column("burst", numeric=True)]
    columns += [Column("held_back", numeric=True)]
    print_table(columns, table)
    return 0


def _n(v: int | None) -> str:
    return "-" if v is None else str(v)


def register(sub: Any) -> None:
    p = sub.add_parser("limits", help="per-owner concurrency limits of queues: set, list, clear")
    ps = p.add_subparsers(dest="limits_command", required=True)
    s = ps.add_parser("set", help="at most LIMIT running tasks of each owner (or of --owner)")
    s.add_argument("queue")
    s.add_argument("limit", type=int)
    s.add_argument("--owner", help="this owner's own limit (default: the queue's default)")
    s.set_defaults(func=cmd_limit_set)
    c = ps.add_parser("clear", help="remove the queue's default limit (or --owner's own)")
    c.add_argument("queue")
    c.add_argument("--owner")
    c.set_defaults(func=cmd_limit_clear)
    li = ps.add_parser("list", help="limits, running tasks per owner, tasks waiting on them")
    li.add_argument("queue", nargs="?")
    li.add_argument("--json", action="store_true")
    li.set_defaults(func=cmd_limit_list)

    r = sub.add_parser("rate", help="rate limits (token buckets) of queues: set, list, clear")
    rs = r.add_subparsers(dest="rate_command", required=True)
    s = rs.add_parser("set", help="at most PER_SECOND starts per second (of --type)")
    s.add_argument("queue")
    s.add_argument("per_second", type=float)
    s.add_argument("--type", help="only tasks of this type (default: every task)")
    s.add_argument("--burst", type=int, help="starts at once (default: one second's worth)")
    s.add_argument("--retries", action="store_true", help="only --type's retries")
    s.set_defaults(func=cmd_rate_set)
    c = rs.add_parser("clear", help="remove a rate limit")
    c.add_argument("queue")
    c.add_argument("--type")
    c.add_argument("--retries", action="store_true")
    c.set_defaults(func=cmd_rate_clear)
    li = rs.add_parser("list", help="rate limits, and the tasks they hold back")
    li.add_argument("queue", nargs="?")
    li.add_argument("--json", action="store_true")
    li.set_defaults(func=cmd_rate_list)
