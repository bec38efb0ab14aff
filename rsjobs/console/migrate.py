"""``rsjobs migrate``: convert a namespace written by an earlier rsjobs (layout 1) to this
layout, then mark it (:mod:`rsjobs.store.migrate`). ``rsjobs.cli`` finds this module and
calls :func:`register`.

Run it once per namespace while no rsjobs process uses it (the README's "Upgrading"):
stop the workers, reapers, web apps and drivers (and every producer of an earlier
release), run it, start the new ones. It refuses to start while the workers registry shows
a worker that beat within its lease (``--force`` runs anyway). It may be run again at any
time, also after it was killed: a converted task is not converted twice.

Exit status: 0 when the namespace is migrated (a dry run: would be), 1 when tasks of layout
1 were left (each is named with the reason; nothing of them was changed), 2 for bad input
or live workers, 3 when Redis cannot be reached.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from ..cli import CliError, settings_from_args
from ..store import MigrationReport, Store
from ..store.connection import connect, redact_url
from ..store.marker import LAYOUT
from ..store.migrate import MAX_BATCH

__all__ = ["cmd_migrate", "register"]

#: seconds between two progress lines on stderr
PROGRESS_S = 5.0


def register(sub: Any) -> None:
    """Add ``migrate`` to the ``rsjobs`` sub-parsers."""
    m = sub.add_parser(
        "migrate",
        help="convert a namespace an earlier rsjobs wrote to this layout (once per upgrade)",
        description="Converts every task of the namespace (--namespace) from layout 1 (each "
        "task's history in a stream of its own) to this layout (the history in the task "
        "hash), each task atomically, then marks the namespace so that the workers, reapers, "
        "web apps and drivers start on it. Run it while none of them runs. It finds the tasks "
        "with SCAN (a one-time operation), changes nothing but the task hashes and their "
        "history streams, keeps each task's TTL, and leaves (and names) a task it cannot "
        "convert. Repeating it is safe: converted tasks are counted as already new.",
    )
    m.add_argument(
        "--dry-run",
        action="store_true",
        help="check every task and count what would be converted; write nothing",
    )
    m.add_argument(
        "--batch",
        type=int,
        default=100,
        metavar="N",
        help=f"tasks per script call (1-{MAX_BATCH}; each call blocks Redis while it runs)",
    )
    m.add_argument(
        "--force",
        action="store_true",
        help="run even though the workers registry shows workers that beat within their lease",
    )
    m.set_defaults(func=cmd_migrate)


def _say(text: str) -> None:
    print(text, flush=True)


async def _refuse_live_workers(store: Store) -> None:
    from ..reaper import list_workers

    alive = [w.name for w in await list_workers(store) if w.status == "alive"]
    if alive:
        names = ", ".join(alive[:5]) + (f" and {len(alive) - 5} more" if len(alive) > 5 else "")
        raise CliError(
            f"{len(alive)} worker(s) of namespace {store.keys.namespace!r} beat within their "
            f"lease ({names}): stop every rsjobs process on it first (or pass --force)"
        )


async def cmd_migrate(args: argparse.Namespace) -> int:
    if not 1 <= args.batch <= MAX_BATCH:
        raise CliError(f"--batch must be between 1 and {MAX_BATCH}")
    store = Store(connect(args.url), settings_from_args(args))
    try:
        ns = store.keys.namespace
        if not args.force and not args.dry_run:
            await _refuse_live_workers(store)
        what = "checking" if args.dry_run else "migrating"
        _say(f"{what} namespace {ns!r} at {redact_url(args.url)} to layout {LAYOUT}")
        last = time.monotonic()

        def progress(r: MigrationReport) -> None:
            nonlocal last
            if time.monotonic() - last >= PROGRESS_S:
                last = time.monotonic()
                print(
                    f"rsjobs: ... {r.converted} converted, {r.already_new} already new, "
                    f"{len(r.skipped)} skipped",
                    file=sys.stderr,
                    flush=True,
                )

        report = await store.migration.run(
            dry_run=args.dry_run, batch=args.batch, progress=progress
        )
    finally:
        await store.close()
    _print(report, store.keys.layout)
    return 0 if report.complete else 1


def _print(r: MigrationReport, marker: str) -> None:
    _say(f"{'to convert' if r.dry_run else 'converted':<18}{r.converted}")
    _say(f"{'already new':<18}{r.already_new}")
    _say(f"{'gone':<18}{r.gone}  (expired during the run)")
    _say(f"{'skipped':<18}{len(r.skipped)}  (tasks of layout 1 that cannot be converted: left)")
    for tid, why in r.skipped:
        _say(f"  {tid}  {why}")
    _say(f"{'not tasks':<18}{len(r.foreign)}  (hashes under task: of neither layout: left)")
    for tid, what in r.foreign:
        _say(f"  {tid}  {what}")
    _say(
        f"{'orphan histories':<18}{r.orphan_histories}  "
        "(history streams of layout 1 without their task: left, they expire with their TTL)"
    )
    if r.marked:
        _say(f"marked {marker} = {LAYOUT}: the namespace is migrated")
    elif r.dry_run:
        _say("dry run: nothing written")
    else:
        _say(
            f"not marked: fix or delete the {len(r.skipped)} skipped task(s) "
            "(redis-cli HGETALL <key> shows one), then run rsjobs migrate again"
        )
