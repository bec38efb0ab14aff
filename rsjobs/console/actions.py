"""The operator's actions: ``retry`` / ``replay`` a finished task, ``queue pause`` /
``queue resume`` a whole queue, ``bulk cancel`` / ``bulk retry`` the tasks a filter
selects. Each goes through the client (the state machine's scripts), with ``cli`` as its
source in the history (:func:`rsjobs.cli.client_from_args`). ``rsjobs.cli`` wires them
into its parser (:func:`register`).

Exit status as for every command: 0 done, 1 nothing changed (a task already started over,
a queue already paused), 2 bad input or a refused action, 3 Redis unreachable.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import time
from typing import Any

import msgspec

from ..errors import ConfigError
from ..labels import parse_label
from ..model import State
from ..schemas import BulkResult, QueuePause, TaskFilter
from .views import when

__all__ = ["cmd_bulk", "cmd_queue", "cmd_restart", "parse_time", "register"]

_AGO = re.compile(r"(\d+)([smhd])")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_time(text: str, *, now_ms: int | None = None) -> int:
    """A ``--since`` / ``--until`` value as Redis TIME in ms: milliseconds since the epoch
    (``1764590000000``), an ISO 8601 time (``2026-12-01T10:00``, local time unless it names
    its zone) or a time ago (``90s``, ``30m``, ``2h``, ``1d``); a one-line CLI error
    otherwise."""
    from ..cli import CliError

    value = text.strip()
    if value.isascii() and value.isdigit() and len(value) <= 15:
        return int(value)
    if m := _AGO.fullmatch(value):
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return max(0, now - int(m[1]) * _UNIT_MS[m[2]])
    try:
        when_ = dt.datetime.fromisoformat(value)
    except ValueError:
        raise CliError(
            f"invalid time {text!r}: milliseconds, an ISO 8601 time (2026-12-01T10:00) or "
            "a time ago (90s, 30m, 2h, 1d)"
        ) from None
    return int(when_.timestamp() * 1000)


def _filter(args: argparse.Namespace) -> TaskFilter:
    from ..cli import CliError

    try:
        return TaskFilter(
            queue=args.queue,
            state=args.state,
            type=args.type,
            owner=args.owner,
            since=parse_time(args.since) if args.since is not None else None,
            until=parse_time(args.until) if args.until is not None else None,
            labels=dict(parse_label(x) for x in args.label) if args.label else None,
        )
    except ConfigError as exc:
        raise CliError(str(exc)) from None


# -- commands ----------------------------------------------------------------------------------


async def cmd_restart(args: argparse.Namespace) -> int:
    """``rsjobs retry ID`` / ``rsjobs replay ID``."""
    from ..cli import EXIT_UNCHANGED, client_from_args, warn

    async with client_from_args(args) as client:
        op = client.retry if args.command == "retry" else client.replay
        result = await op(args.id, args.reason)
    if args.json:
        print(msgspec.json.encode(result).decode())
    else:
        print(result.new_id)
    if not result.created:
        warn(
            f"nothing changed: task {args.id} was already started over as {result.new_id} "
            f"({result.state or 'gone'}); {args.command} that one to go on"
        )
        return EXIT_UNCHANGED
    return 0


def _pause_line(p: QueuePause) -> str:
    if not p.paused:
        return f"queue {p.queue}: not paused"
    why = f": {p.reason}" if p.reason else ""
    return f"queue {p.queue}: paused since {when(p.since)} by {p.by or '?'}{why}"


async def cmd_queue(args: argparse.Namespace) -> int:
    """``rsjobs queue pause|resume QUEUE``."""
    from ..cli import EXIT_UNCHANGED, client_from_args, warn

    if args.action == "delete":
        async with client_from_args(args) as client:
            gone = await client.delete_queue(args.name)
        if args.json:
            print(msgspec.json.encode({"queue": args.name, "deleted": gone}).decode())
        else:
            print(f"deleted queue {args.name} ({gone} keys and fields)")
        return 0
    async with client_from_args(args) as client:
        if args.action == "pause":
            p = await client.pause_queue(args.name, args.reason)
        else:
            p = await client.resume_queue(args.name, args.reason)
    if args.json:
        print(msgspec.json.encode(p).decode())
    else:
        print(_pause_line(p))
    if not p.changed:
        warn(f"nothing changed: queue {args.name} was already {'paused' if p.paused else 'going'}")
        return EXIT_UNCHANGED
    return 0


def _bulk_lines(r: BulkResult, limit: int) -> list[str]:
    verb = {"cancel": "cancel", "retry": "retry"}[r.action]
    lines: list[str] = []
    if r.dry_run:
        shown = f" (the oldest {len(r.ids)})" if r.matched > len(r.ids) else ""
        lines.append(f"{r.matched} task(s) match; {verb} would act on {len(r.ids)}{shown}:")
        lines += r.ids
        return lines
    lines.append(
        f"{r.matched} task(s) matched; {verb} acted on {len(r.ids)}, changed {r.changed}"
        + (f" (limit {limit}: run it again for the rest)" if r.matched > len(r.ids) else "")
    )
    return lines


async def cmd_bulk(args: argparse.Namespace) -> int:
    """``rsjobs bulk cancel|retry [filter] [--dry-run] [--limit N]``."""
    from ..cli import CliError, client_from_args
    from .tables import Column, print_table

    where = _filter(args)
    async with client_from_args(args) as client:
        op = client.bulk_cancel if args.action == "cancel" else client.bulk_retry
        try:
            result = await op(where, dry_run=args.dry_run, limit=args.limit, reason=args.reason)
        except ConfigError as exc:
            raise CliError(str(exc)) from None
    if args.json:
        print(msgspec.json.encode(result).decode())
        return 0
    lines = _bulk_lines(result, args.limit)
    print(lines[0])
    if result.dry_run:
        for line in lines[1:]:
            print(line)
        return 0
    if result.items:
        columns = [Column("task"), Column("state"), Column("changed"), Column("new task"),
                   Column("detail")]  # fmt: skip
        rows: list[list[object]] = [
            [i.id, i.state, "yes" if i.changed else "no", i.new_id, i.detail] for i in result.items
        ]
        print_table(columns, rows)
    return 0


# -- parser ------------------------------------------------------------------------------------


def register(sub: Any) -> None:
    """Add the action commands to the ``rsjobs`` sub-parsers."""
    for name, what in (
        ("retry", "start a FAILED, TIMED_OUT or CANCELLED task over as a new task"),
        ("replay", "start a SUCCEEDED task over as a new task"),
    ):
        r = sub.add_parser(name, help=what, description=what + " (same type, queue, payload, "
                           "options and owner; the two are linked both ways)")  # fmt: skip
        r.add_argument("id")
        r.add_argument("--reason", default="")
        r.add_argument("--json", action="store_true", help="print the result as JSON")
        r.set_defaults(func=cmd_restart)

    q = sub.add_parser(
        "queue",
        help="pause or resume a whole queue, or delete an unused one",
        description="A paused queue still takes tasks (they stay PENDING) and its running "
        "tasks go on; workers start nothing of it until it is resumed. delete removes a "
        "queue that holds no live task, that no registered worker serves and no schedule "
        "enqueues to: its streams, "
        "counters, per-minute series, limit bookkeeping, pause record and name (its "
        "finished tasks stay until their retention ends); it refuses (exit 2) otherwise.",
    )
    q.add_argument("action", choices=("pause", "resume", "delete"))
    q.add_argument("name", metavar="QUEUE")
    q.add_argument("--reason", default="")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_queue)

    b = sub.add_parser(
        "bulk",
        help="cancel or retry the tasks a filter selects",
        description="Select tasks by queue, state, type, owner and creation time (a scan "
        "of the namespace's tasks), then cancel or retry each (at most --limit, oldest "
        "first). --dry-run only counts and lists them.",
    )
    b.add_argument("action", choices=("cancel", "retry"))
    b.add_argument("--queue")
    b.add_argument("--state", choices=[s.value for s in State])
    b.add_argument("--type")
    b.add_argument("--owner")
    b.add_argument(
        "--label", action="append", metavar="KEY=VALUE", help="only tasks with this label"
    )
    b.add_argument("--since", metavar="TIME", help="created at or after: ms, ISO 8601, or 2h")
    b.add_argument("--until", metavar="TIME", help="created before: ms, ISO 8601, or 30m")
    b.add_argument("--limit", type=int, default=100, help="act on at most this many (1-1000)")
    b.add_argument("--dry-run", action="store_true", help="count and list, change nothing")
    b.add_argument("--reason", default="")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bulk)
