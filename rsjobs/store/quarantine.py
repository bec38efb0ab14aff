"""Quarantine: what becomes of a task whose data makes a script fail, for the reaper and
the worker alike.

A batch call that fails on the data is retried entry by entry
(:func:`rsjobs.store.isolation.each_alone`), so the other tasks of the batch are handled as
usual. For an entry that fails alone, the task's stored data is checked here
(:func:`defects_of`):

* a defect found (a hash without its id or queue, a field that does not parse, a key of
  the wrong type...; fields named as the README's glossary names them): ``quarantine.lua``
  moves the task to FAILED through the state machine (DEADLETTER, the reason in its
  history and on the dead-letter stream) when its state allows, else takes the reference
  out of the index that keeps bringing it back and records that on the dead-letter stream.
* no defect found: the failure is not the task's fault (a bug, or something this check
  does not know). Nothing is changed; the caller logs it and the next pass tries again.
  Work is never failed on a guess.

The store logs nothing: :meth:`Quarantine.isolate` says what it did with each suspect
(:class:`Verdict`), and the caller logs it its way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ..model import State
from . import layout
from .isolation import about_item
from .keys import split_level
from .layout import QuarantineArgs
from .marker import is_layout1
from .record import field
from .replies import QuarantineOutcome, text
from .scripts import Scripts
from .transient import boundary

__all__ = ["DEADLETTER_MAXLEN", "Quarantine", "Suspect", "Verdict", "defects_of"]

#: the default approximate bound (MAXLEN ~) of the dead-letter stream
DEADLETTER_MAXLEN = 10_000

_STATES = frozenset(s.value for s in State)

#: task hash fields that hold integers when present (by their long names: see field())
_NUMERIC = (
    "attempt",
    "failures",
    "max_attempts",
    "timeout_ms",
    "backoff_base_ms",
    "backoff_max_ms",
    "lease_expires_at",
    "deadline_at",
    "expires_at",
    "due_at",
    "deliveries",
    "created_at",
    "started_at",
    "hn",
)


def _is_number(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


def _named(name: str) -> str:
    """A field as a defect names it: its long name, and its name in Redis when shorter."""
    short = field(name)
    return name if short == name else f"{name} ({short})"


def defects_of(task_id: str, key_type: str, h: Mapping[str, str]) -> list[str]:
    """What is wrong with a stored task (its hash ``h``, fields by their names in Redis,
    and the type of its key)."""
    if key_type == "none":
        return []
    if key_type != "hash":
        return [f"its key is a {key_type}, not a hash"]
    if is_layout1(h):
        # not bad data: a task as an earlier rsjobs wrote it, left for `rsjobs migrate`
        # (quarantining it would take it out of its queue for good)
        return []
    found = []
    for name in ("state", "id", "queue", "type"):
        if not h.get(field(name)):
            found.append(f"no {_named(name)} field")
    state = h.get(field("state"))
    if h.get("id") and h["id"] != task_id:
        found.append(f"its id field says {h['id'][:64]!r}")
    if state and state not in _STATES:
        found.append(f"unknown state {state[:64]!r}")
    for name in _NUMERIC:
        value = h.get(field(name))
        if value is not None and not _is_number(value):
            found.append(f"{_named(name)}={value[:32]!r} is not a number")
    return found


class Suspect(NamedTuple):
    """One entry that failed alone: the task, where its reference is (``indexed_in``: queue,
    deadlines or scheduled; ``ref``: the entry id or zset member), and the error (None
    when it was set aside before the call: see :meth:`rsjobs.store.reaper.Reaping.screen`)."""

    task_id: str
    queue: str
    indexed_in: str
    ref: str
    error: BaseException | None


class Verdict(NamedTuple):
    """What :meth:`Quarantine.isolate` did with one suspect."""

    suspect: Suspect
    #: what quarantine.lua did; None when the task was not quarantined
    outcome: QuarantineOutcome | None
    #: the defects found ('' when none), and the error they explain
    why: str
    #: an error to report: the suspect's, when nothing was found wrong with its data, or
    #: the quarantine's own when it failed on the data; None otherwise
    error: BaseException | None


class Quarantine:
    """``store.quarantine``."""

    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts
        self.redis = scripts.redis
        self.keys = scripts.keys

    async def defects(self, task_id: str) -> list[str]:
        """What is wrong with the stored task ``task_id`` ([] when nothing is found)."""
        k = self.keys
        with boundary("inspect task"):
            key_type = await self.redis.type(k.task(task_id))
            h: dict[str, str] = {}
            if text(key_type) == "hash":
                raw: dict[Any, Any] = await self.redis.hgetall(k.task(task_id))
                h = {text(f): text(v) for f, v in raw.items()}
        return defects_of(task_id, text(key_type), h)

    async def quarantine(
        self, source: str, suspect: Suspect, step: str, why: str, deadletter_max: int
    ) -> QuarantineOutcome:
        """``quarantine.lua`` for one task (with its real dedup key)."""
        s = suspect
        with boundary("HMGET dedup"):
            dedup, pr = await self.redis.hmget(self.keys.task(s.task_id), ["dedup", "pr"])
        # (a zset's member names the task's level: the queue is its name's first part)
        queue, level = split_level(s.queue)
        priority = int(text(pr)) if text(pr).isdigit() and int(text(pr)) <= 9 else level
        keys = self.keys.task_keys(s.task_id, queue, text(dedup) or None, priority)
        args = QuarantineArgs(
            s.task_id, queue, s.indexed_in, s.ref, step, why[:800], deadletter_max
        )
        call = layout.quarantine(self.scripts.common, self.keys, source, keys, args)
        outcome, _state = await self.scripts.run(call)
        return QuarantineOutcome(text(outcome))

    async def isolate(
        self, source: str, step: str, suspects: Sequence[Suspect], deadletter_max: int
    ) -> list[Verdict]:
        """Quarantine the suspects whose data is defective; what was done with each (a
        suspect repaired meanwhile, with nothing found and no error, is left out). Errors
        of Redis itself are raised: the caller's pass is retried."""
        out: list[Verdict] = []
        for s in suspects:
            defects = await self.defects(s.task_id) if s.task_id else []
            if not defects:
                if s.error is not None:
                    out.append(Verdict(s, None, "", s.error))
                continue
            why = "; ".join(defects)
            if s.error is not None:
                why += f" ({type(s.error).__name__}: {s.error})"
            try:
                outcome = await self.quarantine(source, s, step, why, deadletter_max)
            except Exception as exc:
                if not about_item(exc):
                    raise
                out.append(Verdict(s, None, why, exc))
                continue
            out.append(Verdict(s, outcome, why, None))
        return out
