"""The commands that show things: ``status``, ``history``, ``queues``, and the aligned
tables of the reaper's ``workers``, ``queues-memory`` and ``deadletter list`` (their data
from ``rsjobs.reaper``'s public functions). ``rsjobs.cli`` wires them into its parser."""

from __future__ import annotations

import argparse
import json
import time

from ..cli import CliError, client_from_args, warn
from ..client import Client
from .actions import parse_time

__all__ = [
    "cmd_deadletter_list",
    "cmd_history",
    "cmd_queue_series",
    "cmd_queues",
    "cmd_queues_memory",
    "cmd_status",
    "cmd_tasks",
    "cmd_workers",
    "live_workers",
]


async def live_workers(client: Client) -> dict[str, int]:
    """queue -> live workers serving it (``rsjobs workers`` reads the same registry)."""
    from ..reaper import list_workers
    from .views import live_workers_by_queue

    return live_workers_by_queue(await list_workers(client.store))


# -- commands --------------------------------------------------------------------------------


async def cmd_status(args: argparse.Namespace) -> int:
    async with client_from_args(args) as client:
        info = await client.get(args.id)
    if args.json:
        import msgspec

        print(msgspec.json.encode(info).decode())
        return 0
    from .tables import print_table
    from .views import status_table

    columns, rows = status_table(info)
    print_table(columns, rows, header=False)
    if info.traceback:
        print("\ntraceback of the last failed attempt:")
        print(info.traceback.rstrip("\n"))
    return 0


async def cmd_history(args: argparse.Namespace) -> int:
    async with client_from_args(args) as client:
        entries = await client.history(args.id)
    from .tables import print_table
    from .views import history_table, tracebacks

    print_table(*history_table(entries))
    for line in tracebacks(entries):
        print(line)
    return 0


async def cmd_queue_series(args: argparse.Namespace) -> int:
    """``rsjobs queues --series NAME``: a row per minute, oldest first."""
    import msgspec

    from .tables import Column, print_table

    async with client_from_args(args) as client:
        series = await client.queue_series(args.series, minutes=args.minutes)
    if args.json:
        print(msgspec.json.encode(series).decode())
        return 0
    if not series.points:
        print(f"(no samples of queue {series.queue!r} yet: the reaper takes one a minute)")
        return 0
    names = ("enqueued", "started", "succeeded", "failed", "timed_out", "cancelled", "pending")
    columns = [Column("minute (UTC)"), *(Column(n, numeric=True) for n in names)]
    columns.append(Column("oldest_pending_s", numeric=True))
    rows = [
        [
            time.strftime("%Y-%m-%d %H:%M", time.gmtime(p.t / 1000)),
            *(getattr(p, n) for n in names),
            round(p.oldest_pending_ms / 1000, 1),
        ]
        for p in series.points
    ]
    print_table(columns, rows)
    return 0


async def cmd_queues(args: argparse.Namespace) -> int:
    from .views import unserved_queues

    if args.series is not None:
        return await cmd_queue_series(args)
    async with client_from_args(args) as client:
        stats = await client.stats()
        live = await live_workers(client)
        paused = await client.paused_queues()
        oldest = {v.name: v.oldest_pending_ms for v in await client.queues()}
    unserved = unserved_queues(stats, live)
    if args.json:
        doc = {
            q: {
                **counts,
                "workers": live.get(q, 0),
                "unserved": q in unserved,
                "oldest_pending_ms": oldest.get(q, 0),
                "paused": q in paused,
            }
            for q, counts in stats.items()
        }
        print(json.dumps(doc))
        return 0
    if not stats:
        print("(no queues yet)")
        return 0
    from .tables import print_table
    from .views import queues_table

    print_table(*queues_table(stats, live, paused, oldest))
    for q, n in sorted(unserved.items()):
        warn(
            f"queue {q!r} has {n} task(s) waiting and no live worker serves it "
            f"(rsjobs worker MODULE:REGISTRY -q {q})"
        )
    return 0


async def cmd_tasks(args: argparse.Namespace) -> int:
    """``rsjobs tasks``: a page of a task list (newest first), or every page with --all;
    the cursor of the next page goes to stderr."""
    import msgspec

    from ..schemas import TaskSummary

    states = [s for v in args.state or () for s in v.split(",") if s]
    queues = [q for v in args.queue or () for q in v.split(",") if q]
    # the one time syntax of every command: ms, ISO 8601, or a time ago (2h)
    since = parse_time(args.since) if args.since else 0
    until = parse_time(args.until) if args.until else 0
    items: list[TaskSummary] = []
    cursor = args.cursor
    async with client_from_args(args) as client:
        while True:
            page = await client.list_tasks(
                state=states,
                queue=queues,
                type=args.type,
                owner=args.owner,
                label=args.label or None,
                since=since,
                until=until,
                cursor=cursor,
                limit=args.limit,
            )
            if args.json:
                for s in page.items:
                    print(msgspec.json.encode(s).decode())
            items += page.items
            cursor = page.cursor
            if cursor is None or not args.all:
                break
    if not args.json:
        if items:
            from .tables import print_table
            from .views import tasks_table

            print_table(*tasks_table(items))
        else:
            print("(no tasks)")
    if cursor is not None:
        warn(f"more tasks follow: add --cursor {cursor}")
    return 0


async def cmd_workers(args: argparse.Namespace) -> int:
    """``rsjobs workers``: the reaper's registry of workers, as an aligned table."""
    import msgspec

    from ..reaper import list_workers
    from .tables import print_table
    from .views import workers_table

    async with client_from_args(args) as client:
        workers = await list_workers(client.store, default_lease_ms=args.lease_ms)
    if args.json:
        print(msgspec.json.encode(workers).decode())
        return 0
    if not workers:
        print("(no workers registered)")
        return 0
    table, details = workers_table(workers)
    print_table(*table)
    for line in details:
        print(line)
    return 0


async def cmd_queues_memory(args: argparse.Namespace) -> int:
    """``rsjobs queues-memory``: the reaper's memory report, as an aligned table."""
    import msgspec

    from ..reaper import memory_report
    from .tables import print_table
    from .views import memory_table

    if args.sample < 1:
        raise CliError("--sample must be >= 1")
    async with client_from_args(args) as client:
        report = await memory_report(client.store, sample=args.sample)
    if args.json:
        print(msgspec.json.encode(report).decode())
        return 0
    print(f"redis used_memory {report.used_memory_human} ({report.used_memory} bytes)")
    shared = "  ".join(f"{k}={v}" for k, v in report.namespace_keys.items() if v)
    print(f"namespace keys (bytes): {shared or '-'}")
    if not report.queues:
        print("(no queues yet)")
        return 0
    print_table(*memory_table(report))
    return 0


async def cmd_deadletter_list(args: argparse.Namespace) -> int:
    """``rsjobs deadletter list``: newest first, as an aligned table."""
    import msgspec

    from ..overview import deadletter_page
    from ..reaper import list_deadletters
    from .tables import print_table
    from .views import deadletters_table

    async with client_from_args(args) as client:
        if (await client.store.open()).count == 1:
            letters = await list_deadletters(client.store, count=args.count)
        else:  # every shard's, merged newest first
            count = max(1, min(args.count, 1000))
            letters = (await deadletter_page(client.store, limit=count)).items
    if args.json:
        print(msgspec.json.encode(letters).decode())
        return 0
    if not letters:
        print("(dead-letter stream is empty)")
        return 0
    print_table(*deadletters_table(letters))
    return 0
