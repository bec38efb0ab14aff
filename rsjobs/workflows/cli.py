"""``rsjobs workflows ...``: drive workflows, inspect them and act on them.
``rsjobs.cli`` finds this module and calls :func:`register`."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import msgspec

from ..cli import CliError, load_object, settings_from_args
from ..client import connect
from ..logfmt import setup_logging
from .client import WorkflowClient
from .definition import WorkflowDefinition
from .driver import WorkflowDriver
from .errors import ActionRefused

__all__ = ["register"]


def _client(args: argparse.Namespace) -> WorkflowClient:
    """The global options' client: namespace and durable mode (--wait-replicas)."""
    return WorkflowClient(connect(args.url), settings_from_args(args), source="user")


def _when(ts: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts / 1000)) if ts else "-"


def _print_json(value: Any) -> None:
    print(msgspec.json.encode(value).decode())


async def cmd_drive(args: argparse.Namespace) -> int:
    setup_logging(args.log_level, args.log_format, "%(asctime)s %(levelname)s %(message)s")
    driver = WorkflowDriver(
        url=args.url,
        settings=settings_from_args(args),
        interval_ms=args.interval_ms,
        handle_signals=True,
    )
    try:
        if args.once:
            _print_json(await driver.sweep_once())
        else:
            await driver.run()
    finally:
        await driver.close()
    return 0


async def cmd_list(args: argparse.Namespace) -> int:
    from . import listing

    async with _client(args) as c:
        page = await listing.page(
            c.store,
            state=args.state,
            name=args.name,
            owner=args.owner,
            cursor=args.cursor,
            limit=args.limit,
        )
    if args.json:
        _print_json(page)
        return 0
    for w in page.workflows:
        stages = " ".join(f"{s.name}:{s.state}" for s in w.stages)
        print(
            f"{w.id}  {w.name:<16} {w.state:<21} v{w.version}  owner={w.owner or '-'}  "
            f"started {_when(w.created_at)}  {stages}"
        )
    if not page.workflows:
        print("(no workflows)")
    if page.cursor:
        print(f"(more: --cursor {page.cursor})")
    return 0


async def cmd_status(args: argparse.Namespace) -> int:
    async with _client(args) as c:
        doc = await c.status(args.id)
    if args.json:
        _print_json(doc)
        return 0
    print(f"workflow  {doc.id} ({doc.definition}, owner {doc.owner or '-'})")
    print(f"status    {doc.status}  stage {doc.stage} ({doc.stage_index + 1}/{len(doc.stages)})")
    print(f"version   {doc.version}   progress {doc.progress}%")
    print(f"tasks     {doc.running_tasks} running, {doc.pending_tasks} waiting, "
          f"{doc.failed_tasks} failed")  # fmt: skip
    print(f"message   {doc.message}")
    for t in doc.tasks:
        print(f"  {t.item:<12} {t.id}  {t.state:<10} {t.progress:5.1f}%  {t.error[:60]}")
    for a in doc.completed_assets:
        carried = f" (from v{a.carried_from})" if a.carried_from else ""
        print(f"  asset {a.stage}/{a.item:<10} {a.kind:<6} v{a.version}{carried}  {a.ref}")
    return 0


async def cmd_history(args: argparse.Namespace) -> int:
    async with _client(args) as c:
        entries = await c.history(args.id)
    for e in entries:
        mark = "REFUSED " if e.rejected else ""
        message = e.message
        if e.event == "ASSET":
            message = f"{e.extra.get('item', '')}: {e.extra.get('ref', '')}"
        print(
            f"{_when(e.ts)}  {mark}{e.event:<11} {e.from_status or '-':>20} -> "
            f"{e.to_status:<20} v{e.version} {e.stage:<10} src={e.source:<6} {message}"
        )
    return 0


async def cmd_start(args: argparse.Namespace) -> int:
    definition = load_object(args.definition)
    if not isinstance(definition, WorkflowDefinition):
        raise CliError(f"{args.definition} is not a WorkflowDefinition")
    try:
        value = json.loads(args.input) if args.input is not None else None
    except json.JSONDecodeError as exc:
        raise CliError(f"--input is not valid JSON: {exc}") from None
    async with _client(args) as c:
        print(await c.start(definition, value, owner=args.owner))
    return 0


async def cmd_action(args: argparse.Namespace) -> int:
    async with _client(args) as c:
        try:
            if args.action == "confirm":
                status = await c.confirm(args.id)
            elif args.action == "retry":
                status = await c.retry(args.id)
            elif args.action == "publish":
                status = await c.publish(args.id)
            elif args.action == "regenerate":
                status = await c.regenerate(args.id, args.stage, reason=args.reason)
            else:
                status = await c.cancel(args.id, args.reason)
        except ActionRefused as exc:
            raise CliError(str(exc)) from None
    print(status)
    return 0


def register(sub: Any) -> None:
    """Add ``rsjobs workflows ...`` to the main parser's subcommands."""
    p = sub.add_parser("workflows", help="multi-stage workflows: drive, inspect, act")
    wsub = p.add_subparsers(dest="wf_command", required=True)

    d = wsub.add_parser("drive", help="re-drive active workflows forever (or --once)")
    d.add_argument("--interval-ms", type=int, default=1000)
    d.add_argument("--once", action="store_true", help="one pass, print its report")
    d.set_defaults(func=cmd_drive)

    ls = wsub.add_parser("list", help="workflows, newest first (a page)")
    ls.add_argument("--limit", type=int, default=20, help="workflows per page (1-200)")
    ls.add_argument("--owner", help="only this owner's")
    ls.add_argument("--state", help="only workflows in this state (RUNNING, PUBLISHED...)")
    ls.add_argument("--name", help="only workflows of this definition")
    ls.add_argument("--cursor", help="the page after the one that printed this cursor")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_list)

    s = wsub.add_parser("status", help="a workflow's status document")
    s.add_argument("id")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_status)

    h = wsub.add_parser("history", help="a workflow's history")
    h.add_argument("id")
    h.set_defaults(func=cmd_history)

    st = wsub.add_parser("start", help="start a workflow of a definition (MODULE:OBJECT)")
    st.add_argument("definition")
    st.add_argument("--input", help="JSON input")
    st.add_argument("--owner")
    st.set_defaults(func=cmd_start)

    for name in ("confirm", "retry", "publish"):
        a = wsub.add_parser(name, help=f"{name} a workflow")
        a.add_argument("id")
        a.set_defaults(func=cmd_action, action=name)
    r = wsub.add_parser("regenerate", help="open a new version from a stage")
    r.add_argument("id")
    r.add_argument("stage")
    r.add_argument("--reason", default="")
    r.set_defaults(func=cmd_action, action="regenerate")
    c = wsub.add_parser("cancel", help="cancel a workflow and its unfinished tasks")
    c.add_argument("id")
    c.add_argument("--reason", default="")
    c.set_defaults(func=cmd_action, action="cancel")
