"""``rsjobs cost ID [--workflow]`` and ``rsjobs costs [--by ...] [--owner ...]``: what a
task or a workflow cost, and the namespace's totals per dimension, as aligned tables
(``--json``: the documents the client returns). ``rsjobs.cli`` finds this module and
calls :func:`register`."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from ..cli import SOURCE, CliError, settings_from_args
from ..client import Client, connect
from ..costs import BUILTIN_UNITS, CATEGORIES, DIMENSIONS, CostTotals, TaskCost, WorkflowCost
from .tables import Column, print_table

__all__ = ["register"]

Amounts = Mapping[str, int | float]


def _client(args: argparse.Namespace) -> Client:
    return Client(connect(args.url), settings_from_args(args), source=SOURCE)


def _amount(v: int | float | None) -> str:
    """A charge as its decimal (to the millionth, no trailing zeros)."""
    if not v:
        return "0" if v == 0 else "-"
    return f"{v:.6f}".rstrip("0").rstrip(".")


def _units(totals: Iterable[CostTotals]) -> list[str]:
    """The charge units any of ``totals`` has, in order."""
    found = {u for t in totals for u in t.total if u not in BUILTIN_UNITS}
    return sorted(found)


def _columns(first: Sequence[Column], units: list[str], wait: bool) -> list[Column]:
    cols = [*first, Column("attempts", True), Column("run_ms", True)]
    if wait:
        cols.append(Column("wait_ms", True))
    return cols + [Column(u, True) for u in units]


def _cells(row: Amounts, units: list[str], wait: bool) -> list[object]:
    cells: list[object] = [row.get("attempts", 0), row.get("run_ms", 0)]
    if wait:
        cells.append(row.get("wait_ms", 0))
    return cells + [_amount(row.get(u, 0)) for u in units]


def _total_rows(
    label: Sequence[object], t: CostTotals, units: list[str], wait: bool
) -> list[list[object]]:
    """A row per category the totals have, then the waste when it is of several kinds."""
    rows = [[*label, c, *_cells(t.categories[c], units, wait)] for c in CATEGORIES
            if c in t.categories]  # fmt: skip
    if sum(1 for c in t.categories if c != "ok") > 1:
        rows.append([*label, "(waste)", *_cells(t.waste, units, wait)])
    return rows


def _has_wait(totals: Iterable[CostTotals]) -> bool:
    return any(t.total.get("wait_ms") for t in totals)


def print_task(cost: TaskCost) -> None:
    where = f"queue {cost.queue}" + (f", owner {cost.owner}" if cost.owner else "")
    if cost.stage:
        where += f", stage {cost.stage} of workflow {cost.workflow}"
    print(f"task {cost.id} ({cost.type}, {where}): {cost.state}"
          + (" (superseded by a regenerate)" if cost.superseded else ""))  # fmt: skip
    if not cost.attempts:
        print("(no attempt ended yet)")
        return
    units = _units([cost.totals])
    wait = any(a.deferred for a in cost.attempts)
    # (one row per attempt: its number stands where the attempts count would)
    cols = _columns([Column("attempt", True), Column("category"), Column("end")], units, wait)
    cols = [c for c in cols if c.name != "attempts"]
    rows: list[list[object]] = []
    for a in cost.attempts:
        row: dict[str, int | float] = {"run_ms": a.run_ms, "wait_ms": a.wait_ms, **a.charges}
        rows.append([a.attempt, a.category, a.end, *_cells(row, units, wait)[1:]])
    print_table(cols, rows)
    _print_sums(cost.totals, units, wait)


def _print_sums(t: CostTotals, units: list[str], wait: bool) -> None:
    def line(what: str, row: Amounts) -> str:
        parts = [f"{row.get('attempts', 0)} attempts", f"run {row.get('run_ms', 0)} ms"]
        if wait:
            parts.append(f"wait {row.get('wait_ms', 0)} ms")
        parts += [f"{u} {_amount(row.get(u, 0))}" for u in units]
        return f"{what}: " + ", ".join(parts)

    print(line("total", t.total))
    print(line("waste", t.waste) if t.waste.get("attempts") else "waste: none")


def print_workflow(cost: WorkflowCost) -> None:
    owner = f", owner {cost.owner}" if cost.owner else ""
    print(f"workflow {cost.id} ({cost.definition}{owner}): {cost.status}, "
          f"version {cost.version}, {len(cost.tasks)} tasks")  # fmt: skip
    every = [cost.totals, *cost.stages.values()]
    units, wait = _units(every), _has_wait(every)
    rows: list[list[object]] = []
    for name, t in cost.stages.items():
        rows += _total_rows([name], t, units, wait)
    rows += _total_rows(["(all)"], cost.totals, units, wait)
    print_table(_columns([Column("stage"), Column("category")], units, wait), rows)
    print()
    cols = _columns(
        [Column("task"), Column("stage"), Column("item"), Column("v", True), Column("state")],
        units,
        wait,
    )
    task_rows = [
        [t.id, t.stage, t.item, t.version, t.state + (" (superseded)" if t.superseded else ""),
         *_cells(t.totals.total, units, wait)]
        for t in cost.tasks
    ]  # fmt: skip
    print_table(cols, task_rows)
    _print_sums(cost.totals, units, wait)


async def cmd_cost(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        doc: Any
        if args.workflow:
            doc = await client.workflow_cost(args.id)
        else:
            doc = await client.task_cost(args.id)
    if args.json:
        print(msgspec.json.encode(doc).decode())
    elif args.workflow:
        print_workflow(doc)
    else:
        print_task(doc)
    return 0


async def cmd_costs(args: argparse.Namespace) -> int:
    by, name = args.by, args.name
    if args.owner is not None:
        if by not in (None, "owner") or name is not None:
            raise CliError("--owner reads the owner dimension: leave out --by and --name")
        by, name = "owner", args.owner
    async with _client(args) as client:
        report = await client.costs(by or "type", name=name)
    if args.json:
        print(msgspec.json.encode(report).decode())
        return 0
    if not report.rows:
        print(f"(no costs recorded per {report.by}" + (f" for {name!r})" if name else ")"))
        return 0
    every = [report.total, *(r.totals for r in report.rows)]
    units, wait = _units(every), _has_wait(every)
    rows: list[list[object]] = []
    for r in report.rows:
        rows += _total_rows([r.name], r.totals, units, wait)
    if len(report.rows) > 1:
        rows += _total_rows(["(all)"], report.total, units, wait)
    print_table(_columns([Column(report.by), Column("category")], units, wait), rows)
    return 0


def register(sub: Any) -> None:
    c = sub.add_parser(
        "cost",
        help="what a task (or --workflow) cost: its attempts, their run time and charges, "
        "and the waste",
    )
    c.add_argument("id", help="a task id (a workflow id with --workflow)")
    c.add_argument(
        "--workflow",
        action="store_true",
        help="the id is a workflow's: its tasks of every version and retry, per stage",
    )
    c.add_argument("--json", action="store_true", help="the document GET .../cost answers")
    c.set_defaults(func=cmd_cost)
    t = sub.add_parser(
        "costs",
        help="the namespace's cost totals per queue, type, owner or stage, per category",
    )
    t.add_argument("--by", choices=DIMENSIONS, help="the dimension (default: type)")
    t.add_argument("--owner", help="one owner's totals (the owner dimension)")
    t.add_argument("--name", help="one name of the dimension only")
    t.add_argument("--json", action="store_true", help="the document GET /costs answers")
    t.set_defaults(func=cmd_costs)
