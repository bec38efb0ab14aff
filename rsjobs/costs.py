"""Cost accounting: what each attempt cost, summed per task, workflow, queue, type, owner
and stage, with the waste split out (``docs/costs.md``).

Every attempt is accounted once, by the transition that ends it (``account_attempt`` in
``fsm.lua``): one attempt, its worker's run time (``run_ms``, START to its end, Redis
TIME), a deferred attempt's wait (``wait_ms``) and what its handler charged
(:meth:`rsjobs.Context.charge`: any unit, e.g. GPU seconds or money), under the
*category* its end gives it: ``ok`` (COMPLETE) or a waste kind (``failed``, ``reclaimed``,
``timed_out``, ``cancelled``; ``superseded`` for the succeeded work a workflow's
regenerate replaced). The namespace's costs hash keeps the sums per dimension; a task's
own figures are read back from its history (the entry that ends an attempt carries its
charges), so that a task stores nothing more for this.

This module is the rules and the figures, no Redis: charges (checked, summed, formatted
as the scripts take them), the category of each end, the derivation of a task's attempts
from its history, and the structs the client, the web app and the CLI answer with.
Charges are kept as integers of millionths of their unit, so that sums are exact in any
order; they show as numbers of their unit.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

import msgspec

from .errors import ChargeError

__all__ = [
    "BUILTIN_UNITS",
    "CATEGORIES",
    "CATEGORY_OF",
    "DIMENSIONS",
    "MAX_AMOUNT",
    "MAX_UNITS",
    "NO_OWNER",
    "SCALE",
    "WASTE",
    "AttemptCost",
    "Charges",
    "CostReport",
    "CostRow",
    "CostTotals",
    "Tally",
    "TaskCost",
    "WorkflowCost",
    "WorkflowTaskCost",
    "attempt_costs",
    "format_charges",
    "from_micro",
    "parse_charges",
    "split_field",
    "to_micro",
]

#: what an attempt's end makes of it: ``ok``, then the waste kinds
CATEGORIES = ("ok", "failed", "reclaimed", "timed_out", "cancelled", "superseded")
WASTE = CATEGORIES[1:]
#: the dimensions of the costs hash (a workflow's task has a stage; a task an owner when
#: it was submitted with one)
DIMENSIONS = ("queue", "type", "owner", "stage")
#: the row of the owner dimension that sums the tasks submitted without an owner (no owner
#: name has a space or parentheses: rsjobs.names)
NO_OWNER = "(no owner)"
#: the units every attempt has; a charge's unit is none of them
BUILTIN_UNITS = ("attempts", "run_ms", "wait_ms")

#: the category of the attempt each event ends (``COST_CATEGORY`` in ``fsm.lua``): a
#: worker's hand-back at shutdown (REQUEUE) is lost work like a reclaim; a pause stops the
#: attempt like a cancel; a dead letter fails the task
CATEGORY_OF = {
    "COMPLETE": "ok",
    "FAIL": "failed",
    "TIMEOUT": "timed_out",
    "RECLAIM": "reclaimed",
    "REQUEUE": "reclaimed",
    "DEADLETTER": "failed",
    "CANCEL": "cancelled",
    "PAUSE": "cancelled",
}

#: charges are integers of millionths of their unit
SCALE = 1_000_000
#: at most this many units per attempt (``CHARGES_MAX`` in ``fsm.lua``)
MAX_UNITS = 8
#: the largest amount of one unit in one attempt, in millionths
MAX_MICRO = 10**9 * SCALE - 1
#: the largest amount of one unit in one attempt: 999,999,999.999999
MAX_AMOUNT = MAX_MICRO / SCALE
_UNIT = re.compile(r"[a-z][a-z0-9_]{0,15}")
_AMOUNT = re.compile(r"(\d{1,9})(?:\.(\d{0,6}))?")


def to_micro(amount: float) -> int:
    """``amount`` in millionths (rounded). Raises :class:`ChargeError` unless it is a finite
    number >= 0 and at most 999,999,999.999999."""
    if isinstance(amount, bool) or not isinstance(amount, (int, float)):
        raise ChargeError(f"a charge is a number, not {type(amount).__name__}")
    # (checked before any arithmetic: 1e308 * SCALE is inf, and an int past 1e308 cannot
    # become a float, so the bound is compared with the amount as given)
    if (isinstance(amount, float) and not math.isfinite(amount)) or amount < 0:
        raise ChargeError(f"a charge is a finite number >= 0, not {str(amount)[:40]}")
    if amount > MAX_AMOUNT:
        raise ChargeError(f"a charge of {str(amount)[:40]} is over the bound ({MAX_AMOUNT:.6f})")
    micro = round(amount * SCALE)
    if micro > MAX_MICRO:
        raise ChargeError(f"a charge of {amount!r} is over the bound ({MAX_AMOUNT:.6f})")
    return int(micro)


def from_micro(v: int) -> float:
    """Millionths of a unit as a number of the unit."""
    return v / SCALE


def check_unit(unit: object) -> str:
    """``unit`` when it names a charge unit; raises :class:`ChargeError` otherwise."""
    if not isinstance(unit, str) or not _UNIT.fullmatch(unit):
        raise ChargeError(
            f"a charge unit is a lowercase letter and up to 15 of a-z, 0-9, '_', not {unit!r}"
        )
    if unit in BUILTIN_UNITS:
        raise ChargeError(f"{unit!r} is a built-in unit: charge in a unit of your own")
    return unit


def format_charges(amounts: Mapping[str, int]) -> str:
    """The text the scripts take and the history keeps: ``"gpu_s:1.5,usd:0.02"`` (units in
    order, amounts in millionths written as decimals); ``""`` for none."""
    parts = []
    for unit in sorted(amounts):
        whole, frac = divmod(amounts[unit], SCALE)
        text = str(whole) if not frac else f"{whole}.{frac:06d}".rstrip("0")
        parts.append(f"{unit}:{text}")
    return ",".join(parts)


def parse_charges(text: str) -> dict[str, int]:
    """The amounts (millionths) of a charges text as :func:`format_charges` writes it (the
    rules of ``parse_charges`` in ``fsm.lua``). Raises :class:`ChargeError`."""
    out: dict[str, int] = {}
    if not text:
        return out
    if len(text) > 300:
        raise ChargeError("charges text too long")
    for item in text.split(","):
        unit, sep, amount = item.partition(":")
        m = _AMOUNT.fullmatch(amount)
        if not sep or m is None or unit in out:
            raise ChargeError(f"not a charge: {item[:40]!r}")
        check_unit(unit)
        out[unit] = int(m.group(1)) * SCALE + int((m.group(2) or "").ljust(6, "0"))
        if len(out) > MAX_UNITS:
            raise ChargeError(f"more than {MAX_UNITS} charge units")
    return out


class Charges:
    """One attempt's charges, summed per unit (what :meth:`rsjobs.Context.charge` adds to;
    sent with the attempt's end)."""

    __slots__ = ("_micro",)

    def __init__(self) -> None:
        self._micro: dict[str, int] = {}

    def add(self, amount: float, unit: str) -> None:
        """Add ``amount`` of ``unit``. Raises :class:`ChargeError` (nothing added) for an
        amount that is not a finite number >= 0, a unit that is not one, a ninth unit, or
        a sum over the bound."""
        check_unit(unit)
        micro = to_micro(amount)
        if unit not in self._micro and len(self._micro) >= MAX_UNITS:
            raise ChargeError(f"an attempt has at most {MAX_UNITS} charge units")
        total = self._micro.get(unit, 0) + micro
        if total > MAX_MICRO:
            raise ChargeError(f"the {unit} charged to this attempt would pass the bound")
        self._micro[unit] = total

    def amounts(self) -> dict[str, int]:
        """Unit -> millionths."""
        return dict(self._micro)

    def text(self) -> str:
        """What the end of the attempt sends (:func:`format_charges`)."""
        return format_charges(self._micro)

    def __bool__(self) -> bool:
        return bool(self._micro)


def split_field(name: str) -> tuple[str, str, str, str] | None:
    """A costs hash field ``<dim>|<name>|<unit>|<category>`` as its four parts (a name may
    hold '|': the dimension is the first part, the unit and category the last two); None
    when it is not one."""
    dim, sep, rest = name.partition("|")
    rest, sep2, category = rest.rpartition("|")
    label, sep3, unit = rest.rpartition("|")
    if not (sep and sep2 and sep3) or dim not in DIMENSIONS or category not in CATEGORIES:
        return None
    return dim, label, unit, category


class Tally:
    """Exact sums: category -> unit -> integer (attempts, ms, millionths of a charge)."""

    __slots__ = ("sums",)

    def __init__(self) -> None:
        self.sums: dict[str, dict[str, int]] = {}

    def add(self, category: str, unit: str, value: int) -> None:
        row = self.sums.setdefault(category, {})
        row[unit] = row.get(unit, 0) + value

    def add_attempt(self, a: AttemptCost) -> None:
        self.add(a.category, "attempts", 1)
        self.add(a.category, "run_ms", a.run_ms)
        if a.deferred:
            self.add(a.category, "wait_ms", a.wait_ms)
        for unit, micro in a.micro.items():
            self.add(a.category, unit, micro)

    def merge(self, other: Tally, sign: int = 1) -> None:
        for category, row in other.sums.items():
            for unit, v in row.items():
                self.add(category, unit, sign * v)

    def __bool__(self) -> bool:
        return any(v for row in self.sums.values() for v in row.values())

    def raw(self, categories: Iterable[str] = CATEGORIES) -> dict[str, int]:
        """Unit -> the exact sum over ``categories``."""
        out: dict[str, int] = {}
        for c in categories:
            for unit, v in self.sums.get(c, {}).items():
                out[unit] = out.get(unit, 0) + v
        return out

    def totals(self) -> CostTotals:
        by = {
            c: _shown(row)
            for c in CATEGORIES
            if (row := {u: v for u, v in self.sums.get(c, {}).items() if v})
        }
        return CostTotals(categories=by, total=_shown(self.raw()), waste=_shown(self.raw(WASTE)))


def _shown(raw: Mapping[str, int]) -> dict[str, int | float]:
    """Raw sums as shown: built-in units as they are, charges in their unit."""
    return {u: v if u in BUILTIN_UNITS else from_micro(v) for u, v in sorted(raw.items())}


class CostTotals(msgspec.Struct, frozen=True, kw_only=True):
    """Sums of attempts: per category (``ok`` and the waste kinds), in all (``total``) and
    of the waste kinds (``waste``). Each maps a unit to its sum: ``attempts``, ``run_ms``,
    ``wait_ms`` (whole numbers) and each charge unit (a number of the unit, exact to the
    millionth)."""

    categories: dict[str, dict[str, int | float]] = msgspec.field(default_factory=dict)
    total: dict[str, int | float] = msgspec.field(default_factory=dict)
    waste: dict[str, int | float] = msgspec.field(default_factory=dict)


class AttemptCost(msgspec.Struct, frozen=True, kw_only=True):
    """One attempt, as its task's history tells it."""

    attempt: int
    #: ok or a waste kind (see CATEGORIES)
    category: str
    #: the event that ended it (COMPLETE, FAIL, TIMEOUT, RECLAIM, CANCEL...)
    end: str
    #: its START and its end (Redis TIME, ms)
    started_at: int
    ended_at: int
    #: its worker's time: START to its end, or to its DEFER
    run_ms: int
    #: handed to an outside service (DEFER): ``wait_ms`` is DEFER to its end
    deferred: bool = False
    wait_ms: int = 0
    #: what it charged: unit -> amount of the unit
    charges: dict[str, float] = msgspec.field(default_factory=dict)

    @property
    def micro(self) -> dict[str, int]:
        """Its charges in millionths (exact)."""
        return {u: round(v * SCALE) for u, v in self.charges.items()}


class TaskCost(msgspec.Struct, frozen=True, kw_only=True):
    """A task's costs: every attempt it ran, and their sums."""

    id: str
    type: str
    queue: str
    state: str
    owner: str = ""
    #: a workflow's task: its workflow and stage ("<definition>/<stage>")
    workflow: str = ""
    stage: str = ""
    #: a regenerate replaced its work: its succeeded attempt counts as superseded
    superseded: bool = False
    attempts: list[AttemptCost] = msgspec.field(default_factory=list)
    totals: CostTotals = msgspec.field(default_factory=CostTotals)


class WorkflowTaskCost(msgspec.Struct, frozen=True, kw_only=True):
    """One task of a workflow, in its cost report."""

    id: str
    stage: str
    item: str
    version: int
    state: str
    superseded: bool = False
    totals: CostTotals = msgspec.field(default_factory=CostTotals)


class WorkflowCost(msgspec.Struct, frozen=True, kw_only=True):
    """A workflow's costs: the sums over its tasks of every version and retry, in all and
    per stage, and each task's."""

    id: str
    definition: str
    owner: str
    status: str
    version: int
    totals: CostTotals
    stages: dict[str, CostTotals] = msgspec.field(default_factory=dict)
    tasks: list[WorkflowTaskCost] = msgspec.field(default_factory=list)


class CostRow(msgspec.Struct, frozen=True, kw_only=True):
    """The sums of one name of a dimension (a queue, type, owner or stage)."""

    name: str
    totals: CostTotals


class CostReport(msgspec.Struct, frozen=True, kw_only=True):
    """The namespace's costs hash read along one dimension: a row per name, by name."""

    by: str
    rows: list[CostRow] = msgspec.field(default_factory=list)
    #: the sums of the rows
    total: CostTotals = msgspec.field(default_factory=CostTotals)


def attempt_costs(
    rows: Iterable[tuple[str, Mapping[str, str]]], *, superseded: bool = False
) -> list[AttemptCost]:
    """A task's attempts from its history entries (:func:`rsjobs.store.history.entries`),
    figured as ``account_attempt`` in ``fsm.lua`` figured them when each ended; with
    ``superseded``, its succeeded attempt counts as superseded (see ``supersede``)."""
    started: dict[str, int] = {}
    defers: dict[str, tuple[int, str]] = {}
    out: list[AttemptCost] = []
    for _, f in rows:
        if f.get("rej"):
            continue
        ev, frm, to, att, ts = f["ev"], f["from"], f["to"], f["att"], int(f["ts"])
        if ev == "START":
            started[att] = ts
            continue
        if frm == to or frm not in ("RUNNING", "DEFERRED"):
            continue
        charges = f.get("charges", "")
        if ev == "DEFER":
            defers[att] = (ts, charges)
            continue
        micro = _parse_lenient(charges)
        start = started.get(att, ts)  # (no START read: no run time, as the script counts)
        run, wait, deferred = max(0, ts - start), 0, frm == "DEFERRED"
        if deferred:
            at, ch = defers.get(att, (None, ""))
            if at is not None:
                run, wait = max(0, at - start), max(0, ts - at)
            for unit, v in _parse_lenient(ch).items():
                micro[unit] = micro.get(unit, 0) + v
        category = CATEGORY_OF.get(ev, "failed")
        if superseded and category == "ok":
            category = "superseded"
        out.append(
            AttemptCost(
                attempt=int(att),
                category=category,
                end=ev,
                started_at=start,
                ended_at=ts,
                run_ms=run,
                deferred=deferred,
                wait_ms=wait,
                charges={u: v / SCALE for u, v in sorted(micro.items())},
            )
        )
    return out


def _parse_lenient(text: str) -> dict[str, int]:
    """Charges as the scripts accepted them (a text they refused is never stored)."""
    try:
        return parse_charges(text)
    except ChargeError:
        return {}
