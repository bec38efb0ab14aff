"""Successors (``store.successors``): the submit of a task that waits for its predecessors
(``after.lua``), and the release step (``successors.lua``) that counts their ends.

A predecessor's first terminal transition appends an entry to the namespace's release
stream (``Keys.release``; ``note_release`` in ``fsm.lua``) in the same script call. The
release step reads the stream, the queue and dedup key of each successor an entry names
(its script keys), and runs ``successors.lua``, which releases, cancels or counts each one
exactly once and deletes the entry. The worker runs it after a finish that wrote an entry,
a cancel and an outside result run it when theirs did, and the reaper runs it every sweep
(what a crash left behind): it costs one XRANGE of an empty stream when there is nothing to
do. An entry whose call fails on its data stays (logged) and the others go on.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

from ..errors import RsjobsError
from . import layout
from .isolation import each_alone
from .keys import TaskKeys
from .layout import NewTask, SuccessorItem
from .replies import AfterReply, Released, ReleaseReply, stored_priority, text
from .scripts import Scripts
from .transient import boundary

__all__ = ["PAGE", "PredecessorRef", "ReleaseReport", "Successors"]

log = logging.getLogger("rsjobs.successors")

#: release entries read per XRANGE
PAGE = 100
#: the most successors one call of successors.lua takes (an entry is never split: one with
#: more successors is a call of its own)
CALL_MAX = 500
_TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"})
#: a task id as the scripts' lists hold them (``is_task_id`` in fsm.lua)
_TASK_ID = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


class PredecessorRef(NamedTuple):
    """What a submit checks of a predecessor before any write: its state, owner, workflow
    and how many successors it has."""

    state: str
    owner: str
    wf: str
    successors: int


class ReleaseReport(NamedTuple):
    """What one release step did: release entries handled (and deleted), successors
    released, cancelled and counted (still waiting for others), and entries left because
    their call failed on their data (logged; tried again by the next step)."""

    handled: int = 0
    released: int = 0
    cancelled: int = 0
    counted: int = 0
    failed: int = 0


class _Entry(NamedTuple):
    """A release entry as read: its id, its predecessor's queue and its successors."""

    id: str
    queue: str
    successors: list[str]


class Successors:
    """The successors of one namespace (``store.successors``)."""

    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts
        self.redis = scripts.redis
        self.keys = scripts.keys

    async def enqueue(
        self,
        source: str,
        keys: TaskKeys,
        task: NewTask,
        after: Sequence[str],
        *,
        durable: bool = False,
    ) -> AfterReply:
        """``after.lua``: the successor ``task`` of the tasks ``after``."""
        call = layout.after(self.scripts.common, self.keys, source, keys, task, after)
        return AfterReply.of(await self.scripts.run(call, durable=durable))

    async def predecessors(self, ids: Sequence[str]) -> list[PredecessorRef | None]:
        """State, owner, workflow and number of successors of each task (None: no such
        task), in one round trip per shard: what a batch submit checks before its first
        write."""
        groups: dict[Successors, list[int]] = {}
        for i, tid in enumerate(ids):
            other = await self.scripts.elsewhere(tid)
            groups.setdefault(other.successors if other is not None else self, []).append(i)
        if len(groups) > 1 or (groups and self not in groups):
            out: list[PredecessorRef | None] = [None] * len(ids)
            for part, where in groups.items():
                for i, ref in zip(where, await part._refs([ids[i] for i in where]), strict=True):
                    out[i] = ref
            return out
        return await self._refs(ids)

    async def _refs(self, ids: Sequence[str]) -> list[PredecessorRef | None]:
        names = ["s", "owner", "wf", "sc"]
        with boundary("HMGET predecessors"):
            async with self.redis.pipeline(transaction=False) as pipe:
                for tid in ids:
                    pipe.hmget(self.keys.task(tid), names)
                rows = await pipe.execute()
        out: list[PredecessorRef | None] = []
        for state, owner, wf, sc in rows:
            if state is None:
                out.append(None)
                continue
            n = len(text(sc).split(",")) if sc else 0
            out.append(PredecessorRef(text(state), text(owner), text(wf), n))
        return out

    async def pending(self) -> int:
        """How many release entries wait for the release step."""
        with boundary("XLEN release"):
            return int(await self.redis.xlen(self.keys.release))

    async def release_soon(self, source: str) -> ReleaseReport | None:
        """:meth:`release` right after a call that wrote a release entry (a cancel, an
        outside result): an error is logged, not raised, since that call was done; the
        reaper's next sweep runs the step then."""
        try:
            return await self.release(source)
        except RsjobsError as exc:
            log.warning(
                "release step after a %s call failed (the reaper will run it): %s", source, exc
            )
            return None

    async def release(self, source: str, *, rounds: int = 50) -> ReleaseReport:
        """The release step: every entry of the release stream (and those its calls write:
        a cancelled successor's own successors), at most ``rounds`` pages of :data:`PAGE`
        entries. Raises :class:`rsjobs.RedisUnavailable` when Redis is not there."""
        total: dict[str, int] = dict.fromkeys(ReleaseReport._fields, 0)
        start = "-"
        for _ in range(rounds):
            with boundary("XRANGE release"):
                rows: list[Any] = await self.redis.xrange(self.keys.release, start, "+", count=PAGE)
            if not rows:
                break
            start = _after(text(rows[-1][0]))
            entries, junk = _parse(rows)
            if junk:
                # not written by rsjobs (no predecessor, state or successors): it can never
                # be handled; left, it would be read by every step
                log.error("release entries that do not read, deleted: %s", ", ".join(junk))
                with boundary("XDEL release"):
                    await self.redis.xdel(self.keys.release, *junk)
            written = await self._handle(source, entries, total) if entries else 0
            # (entries the calls wrote come after this page: read on for them)
            if len(rows) < PAGE and not written:
                break
        return ReleaseReport(**total)

    async def _handle(self, source: str, entries: list[_Entry], total: dict[str, int]) -> int:
        """Handle one page of entries; how many release entries its calls wrote."""
        written = 0
        keys = await self._keys([s for e in entries for s in e.successors], entries)
        for batch in _batches(entries):

            async def call(part: Sequence[_Entry]) -> ReleaseReply:
                items = [
                    (keys[(e.id, sid)], SuccessorItem(e.id, sid))
                    for e in part
                    for sid in e.successors
                ]
                packed = layout.successors(self.scripts.common, self.keys, source, items)
                return ReleaseReply.of(await self.scripts.run(packed))

            done = await each_alone(call, batch, log, "release step")
            for entry, exc in done.failed:
                log.error("release entry %s cannot be handled: %s", entry.id, exc)
                total["failed"] += 1
            for reply in done.replies:
                written += reply.written
                total["handled"] += reply.handled
                total["released"] += reply.words.count(Released.RELEASED)
                total["cancelled"] += reply.words.count(Released.CANCELLED)
                total["counted"] += reply.words.count(Released.COUNTED)
        return written

    async def _keys(self, ids: list[str], entries: list[_Entry]) -> dict[tuple[str, str], TaskKeys]:
        """The script keys of each successor, from its hash (queue, dedup key and priority
        level: its queue key is its level's stream); a
        successor gone (or not readable) gets its predecessor's queue: the script finds it
        gone and writes nothing for it."""
        unique = list(dict.fromkeys(ids))
        with boundary("HMGET successors"):
            async with self.redis.pipeline(transaction=False) as pipe:
                for tid in unique:
                    pipe.hmget(self.keys.task(tid), ["q", "dedup", "pr"])
                rows = await pipe.execute(raise_on_error=False)
        found: dict[str, tuple[str, str, int]] = {}
        for tid, row in zip(unique, rows, strict=True):
            if isinstance(row, list) and row[0]:
                found[tid] = (text(row[0]), text(row[1]), stored_priority(row[2]))
        out: dict[tuple[str, str], TaskKeys] = {}
        for e in entries:
            for sid in e.successors:
                queue, dedup, level = found.get(sid, (e.queue, "", 0))
                out[(e.id, sid)] = self.keys.task_keys(sid, queue, dedup or None, level)
        return out


def _after(entry_id: str) -> str:
    """The first stream id after ``entry_id`` (an XRANGE start that excludes it)."""
    ms, _, seq = entry_id.partition("-")
    return f"{ms}-{int(seq) + 1}"


def _parse(rows: list[Any]) -> tuple[list[_Entry], list[str]]:
    """The entries that read, and the ids of those that do not."""
    entries: list[_Entry] = []
    junk: list[str] = []
    for raw_id, fields in rows:
        eid = text(raw_id)
        f = {text(k): text(v) for k, v in (fields or {}).items()}
        successors = f.get("sc", "").split(",")
        well_formed = all(_TASK_ID.fullmatch(s) for s in successors)
        if not f.get("id") or f.get("s") not in _TERMINAL or not well_formed:
            junk.append(eid)
            continue
        entries.append(_Entry(eid, f.get("q") or "default", successors))
    return entries, junk


def _batches(entries: list[_Entry]) -> list[list[_Entry]]:
    """The entries in calls of at most :data:`CALL_MAX` successors (an entry whole)."""
    out: list[list[_Entry]] = []
    size = CALL_MAX
    for e in entries:
        if size + len(e.successors) > CALL_MAX:
            out.append([])
            size = 0
        out[-1].append(e)
        size += len(e.successors)
    return out
