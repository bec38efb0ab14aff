"""The namespace's layout: which encoding its data is in, checked once per store.

Layout 1 is the encoding of earlier releases: each task's history in a stream of its own
(``task:<id>:history``), every task hash field under its long name. Layout 2 is this one:
the history in the task hash, the common fields under short names (the README's Redis
layout). The key ``rsjobs:{ns}:layout`` holds the layout of a namespace; one of layout 1
has none. ``marker.lua`` reads it, and sets it on a namespace that holds no data yet: the
first process or client of a new namespace marks it. A namespace that holds data and no
marker is of layout 1 until ``rsjobs migrate`` (:mod:`.migrate`) converts its tasks and
sets the marker.

:meth:`rsjobs.store.scripts.Scripts.require_layout` runs the check before a store's first
script call and remembers that it passed (one round trip per store, not per call). The
worker, reaper, web app and workflow driver call it at start and refuse to run on a
namespace that is not migrated. A reader that meets a task hash still in layout 1 raises
:class:`rsjobs.NotMigrated` too (:func:`check_task`) instead of misreading it, the scripts
refuse one (``load`` in ``fsm.lua``) instead of taking it for a gone task, and quarantine
finds no defect in it: such a task (a producer of the earlier release wrote it after the
migration) waits, its work entry kept, for ``rsjobs migrate`` to run again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from ..errors import NotMigrated

__all__ = ["LAYOUT", "LayoutState", "check_task", "is_layout1", "read_reply", "refusal"]

#: the layout this rsjobs writes and reads
LAYOUT = 2


class LayoutState(NamedTuple):
    """What ``marker.lua`` found: the namespace's marker (``""``: none, and the namespace
    holds data), and whether this call marked it."""

    found: str
    marked: bool


def read_reply(reply: Any) -> LayoutState:
    raw, marked = reply
    return LayoutState(raw.decode() if isinstance(raw, bytes) else str(raw), bool(int(marked)))


def _migrate_command(namespace: str) -> str:
    ns = "" if namespace == "default" else f" --namespace {namespace}"
    return f"rsjobs{ns} migrate"


def refusal(namespace: str, state: LayoutState) -> NotMigrated | None:
    """The error to raise for a namespace in ``state`` (None: it is in this layout)."""
    if state.found == str(LAYOUT):
        return None
    what = f"namespace {namespace!r}"
    if not state.found:
        return NotMigrated(
            what,
            "holds data written by an earlier rsjobs (layout 1) and is not migrated: stop "
            f"every rsjobs process on it, run `{_migrate_command(namespace)}`, then start "
            "them again",
        )
    return NotMigrated(
        what,
        f"is marked as layout {state.found[:20]!r}, which this rsjobs (layout {LAYOUT}) "
        "cannot read",
    )


def is_layout1(h: Mapping[str, Any]) -> bool:
    """Whether the task hash ``h`` (text fields) is still in layout 1."""
    return "state" in h and "s" not in h


def check_task(h: Mapping[str, Any], task_id: str) -> None:
    """Raise :class:`rsjobs.NotMigrated` when the task hash ``h`` is still in layout 1."""
    if is_layout1(h):
        raise NotMigrated(
            f"task {task_id}",
            "is stored as an earlier rsjobs wrote it (layout 1): run `rsjobs migrate` on "
            "its namespace",
        )
