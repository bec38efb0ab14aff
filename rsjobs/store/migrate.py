"""Converting a namespace from layout 1 to this layout (``rsjobs migrate``, ``store.migration``).

Every task hash of the namespace goes through ``migrate.lua``, a small batch per call and
each task atomically (its header says what changes): a run killed half-way leaves each
task in one layout or the other, and a second run converts the rest (a converted task
answers NEW). A task that cannot be converted is reported with the reason and left as it
is; nothing is ever deleted but a converted task's history stream. The namespace is marked
(:mod:`.marker`) once no task of layout 1 is left.

Finding the tasks SCANs the namespace's keys (``MATCH rsjobs:{ns}:task:*``, ``TYPE hash``,
``COUNT`` in batches), as no index lists every task: a one-time operation of an operator,
run while no rsjobs process uses the namespace, never by the processes themselves. SCAN
may name a key twice (answered NEW the second time) and misses keys created during the
scan (nothing creates them then: every process is stopped, and the new ones refuse an
unmigrated namespace).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError, NotMigrated
from . import layout
from .layout import Layout1Task, MigrateArgs
from .marker import LAYOUT
from .replies import Conversion, text
from .scripts import Scripts
from .transient import boundary

__all__ = ["MAX_BATCH", "Migration", "MigrationReport", "Outcome"]

SOURCE = "migrate"
#: keys per SCAN call
SCAN_COUNT = 1000
#: the most tasks of one migrate.lua call (each is read whole, history included: a call
#: blocks Redis while it runs)
MAX_BATCH = 1000


@dataclass(frozen=True)
class Outcome:
    """What ``migrate.lua`` did with one task."""

    task_id: str
    conversion: Conversion
    #: the number of history entries it has (converted), or why it was left
    detail: str


@dataclass
class MigrationReport:
    """The counts of a run (``dry_run``: what it would do), and the tasks it left."""

    dry_run: bool = False
    converted: int = 0
    #: in this layout already (converted by an earlier run, or written by this rsjobs)
    already_new: int = 0
    #: gone between the scan and the call (expired)
    gone: int = 0
    #: tasks of layout 1 that could not be converted: (task id, why); left as they are
    skipped: list[tuple[str, str]] = field(default_factory=list)
    #: hashes under ``task:`` that are no task of layout 1: (task id, what they are)
    foreign: list[tuple[str, str]] = field(default_factory=list)
    #: history streams of layout 1 whose task hash is gone (left; they expire by TTL)
    orphan_histories: int = 0
    #: the namespace was marked as layout 2 by this run
    marked: bool = False

    @property
    def complete(self) -> bool:
        """Whether no task of layout 1 is left (in a dry run: would be left)."""
        return not self.skipped


class Migration:
    """``store.migration``: the conversion of a namespace of layout 1."""

    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts
        self.redis = scripts.redis
        self.keys = scripts.keys
        self._task_prefix = self.keys.task("")

    async def _scan(self, match: str, key_type: str) -> AsyncIterator[list[str]]:
        """The namespace's keys matching ``match`` of type ``key_type``, a SCAN reply at
        a time. (Namespace names hold no glob characters: see rsjobs.names.)"""
        cursor: Any = 0
        while True:
            with boundary("SCAN tasks"):
                cursor, found = await self.redis.scan(
                    cursor, match=match, count=SCAN_COUNT, _type=key_type
                )
            if found:
                yield [text(k) for k in found]
            if int(cursor) == 0:
                return

    async def task_ids(self) -> AsyncIterator[list[str]]:
        """Ids of the namespace's task hashes, in SCAN batches."""
        n = len(self._task_prefix)
        async for found in self._scan(self._task_prefix + "*", "hash"):
            yield [k[n:] for k in found]

    async def convert(self, task_ids: list[str], *, dry_run: bool = False) -> list[Outcome]:
        """``migrate.lua`` for these tasks, in one call."""
        if not task_ids:
            return []
        k = self.keys
        tasks = [Layout1Task(k.task(t), k.history(t)) for t in task_ids]
        call = layout.migrate(self.scripts.common, SOURCE, MigrateArgs(int(dry_run)), tasks)
        replies = await self.scripts.run(call)
        return [
            Outcome(t, Conversion(text(r[0])), text(r[1]))
            for t, r in zip(task_ids, replies, strict=True)
        ]

    async def orphan_histories(self) -> int:
        """History streams of layout 1 left without their task hash."""
        suffix = ":history"
        n = 0
        async for found in self._scan(self._task_prefix + "*" + suffix, "stream"):
            with boundary("EXISTS tasks"):
                async with self.redis.pipeline(transaction=False) as pipe:
                    for key in found:
                        pipe.exists(key[: -len(suffix)])
                    there = await pipe.execute()
            n += sum(1 for e in there if not int(e))
        return n

    async def mark(self) -> None:
        """Mark the namespace as this layout (what a complete run ends with)."""
        with boundary("SET layout"):
            await self.redis.set(self.keys.layout, str(LAYOUT))
        self.scripts.layout_ok = True

    async def run(
        self,
        *,
        dry_run: bool = False,
        batch: int = 100,
        progress: Callable[[MigrationReport], None] | None = None,
    ) -> MigrationReport:
        """Convert every task of the namespace, ``batch`` per script call (at most
        ``MAX_BATCH``); then mark the namespace, unless a task of layout 1 is left: a
        task this rsjobs would misread keeps the processes from starting until it is
        fixed or removed, and the run repeated. ``progress`` is called after each call."""
        if not 1 <= batch <= MAX_BATCH:
            raise ConfigError(f"batch must be between 1 and {MAX_BATCH}")
        with boundary("GET layout"):
            found = text(await self.redis.get(self.keys.layout))
        if found and found != str(LAYOUT):
            # a newer rsjobs's data: converting it "back" would misread it
            raise NotMigrated(
                f"namespace {self.keys.namespace!r}",
                f"is marked as layout {found[:20]!r}, which this rsjobs (layout {LAYOUT}) "
                "cannot read or migrate",
            )
        report = MigrationReport(dry_run=dry_run)
        pending: list[str] = []

        async def flush() -> None:
            for o in await self.convert(pending, dry_run=dry_run):
                _count(report, o)
            pending.clear()
            if progress is not None:
                progress(report)

        async for ids in self.task_ids():
            for tid in ids:
                pending.append(tid)
                if len(pending) >= batch:
                    await flush()
        if pending:
            await flush()
        report.orphan_histories = await self.orphan_histories()
        if not dry_run and report.complete:
            await self.mark()
            report.marked = True
        return report


def _count(report: MigrationReport, o: Outcome) -> None:
    c = o.conversion
    if c in (Conversion.CONVERTED, Conversion.WOULD_CONVERT):
        report.converted += 1
    elif c is Conversion.NEW:
        report.already_new += 1
    elif c is Conversion.GONE:
        report.gone += 1
    elif c is Conversion.SKIPPED:
        report.skipped.append((o.task_id, o.detail))
    else:
        report.foreign.append((o.task_id, o.detail))
