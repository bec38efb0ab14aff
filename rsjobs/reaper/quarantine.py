"""Quarantine: what the reaper does with a task whose data makes one of its scripts fail.

A batch call that fails on the data is retried entry by entry (:func:`rsjobs.isolation.
each_alone`), so the other tasks of the batch are handled as usual. For an entry that
fails alone, the task's stored data is checked here (:func:`task_defects`):

* a defect found (a hash without its id or queue, a field that does not parse, a key of
  the wrong type...): ``quarantine.lua`` moves the task to FAILED through the state
  machine (DEADLETTER, the reason in its history and on the dead-letter stream) when its
  state allows, else takes the reference out of the index that keeps bringing it back and
  records that on the dead-letter stream. Counted as ``quarantined``.
* no defect found: the failure is not the task's fault (a bug, or something this check
  does not know). Nothing is changed; it is logged with its traceback and counted as an
  ``error``, and the next sweep tries again. Work is never failed on a guess.
"""

from __future__ import annotations

import json
import logging
import time
import traceback
from collections.abc import Mapping
from typing import Any

from ..isolation import about_item
from ..model import State
from .calls import ReaperScripts
from .config import ReaperConfig

__all__ = [
    "QUARANTINE_OUTCOMES",
    "Suspect",
    "isolate",
    "log_error",
    "log_event",
    "quarantine",
    "task_defects",
]

log = logging.getLogger("rsjobs.reaper")

#: the words quarantine.lua answers (see its header)
QUARANTINE_OUTCOMES = ("DEADLETTERED", "REMOVED", "GONE")

_STATES = frozenset(s.value for s in State)

#: task hash fields that hold integers when present
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
)


def _is_number(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


def defects_of(task_id: str, key_type: str, history_type: str, h: Mapping[str, str]) -> list[str]:
    """What is wrong with a stored task (its hash ``h`` and the types of its two keys)."""
    if key_type == "none":
        return []
    if key_type != "hash":
        return [f"its key is a {key_type}, not a hash"]
    found = []
    if history_type not in ("stream", "none"):
        found.append(f"its history is a {history_type}, not a stream")
    for name in ("state", "id", "queue", "type"):
        if not h.get(name):
            found.append(f"no {name} field")
    if h.get("id") and h["id"] != task_id:
        found.append(f"its id field says {h['id'][:64]!r}")
    if h.get("state") and h["state"] not in _STATES:
        found.append(f"unknown state {h['state'][:64]!r}")
    for name in _NUMERIC:
        if name in h and not _is_number(h[name]):
            found.append(f"{name}={h[name][:32]!r} is not a number")
    return found


async def task_defects(rs: ReaperScripts, task_id: str) -> list[str]:
    """What is wrong with the stored task ``task_id`` ([] when nothing is found)."""
    k = rs.keys
    async with rs.redis.pipeline(transaction=False) as pipe:
        pipe.type(k.task(task_id))
        pipe.type(k.history(task_id))
        key_type, history_type = await pipe.execute()
    h: dict[str, str] = {}
    if key_type == "hash":
        h = await rs.redis.hgetall(k.task(task_id))
    return defects_of(task_id, str(key_type), str(history_type), h)


async def quarantine(
    rs: ReaperScripts,
    cfg: ReaperConfig,
    *,
    task_id: str,
    queue: str,
    index: str,
    ref: str,
    step: str,
    why: str,
) -> str:
    """Run ``quarantine.lua`` for one task; returns its outcome word."""
    (dedup,) = await rs.dedup_keys([task_id])
    outcome, _state = await rs.call(
        "quarantine",
        [rs.task_keys(task_id, queue, dedup)],
        [task_id, queue, index, ref, step, why[:800], cfg.deadletter_maxlen],
        extra_keys=[rs.keys.deadletter],
    )
    return str(outcome)


def log_event(event: str, level: int, **fields: Any) -> None:
    """One JSON line, as the reaper's own log lines."""
    line = {"ts": round(time.time(), 3), "event": event, **fields}
    log.log(level, json.dumps(line, separators=(",", ":"), default=str))


def log_error(step: str, exc: BaseException, **fields: Any) -> None:
    """Log an unexpected error of one step or item, with its traceback (one JSON line)."""
    log_event(
        "item_error",
        logging.ERROR,
        step=step,
        **fields,
        error=f"{type(exc).__name__}: {exc}",
        traceback="".join(traceback.format_exception(exc)),
    )


class Suspect:
    """One entry that failed alone: the task, where its reference is, and the error (None
    when it was set aside before the call: see :meth:`ReaperScripts.screen`)."""

    __slots__ = ("error", "index", "queue", "ref", "task_id")

    def __init__(
        self, task_id: str, queue: str, index: str, ref: str, error: BaseException | None
    ) -> None:
        self.task_id, self.queue, self.index, self.ref = task_id, queue, index, ref
        self.error = error


async def isolate(
    rs: ReaperScripts, cfg: ReaperConfig, step: str, suspects: list[Suspect]
) -> tuple[int, int]:
    """Quarantine the suspects whose data is defective; returns ``(quarantined, errors)``.

    The others are logged with their traceback and left as they are (see the module)."""
    quarantined = errors = 0
    for s in suspects:
        defects = await task_defects(rs, s.task_id) if s.task_id else []
        if not defects:
            if s.error is None:  # repaired meanwhile: the next sweep handles it as usual
                continue
            errors += 1
            log_error(step, s.error, task=s.task_id, queue=s.queue, ref=s.ref)
            continue
        why = "; ".join(defects)
        if s.error is not None:
            why += f" ({type(s.error).__name__}: {s.error})"
        try:
            outcome = await quarantine(
                rs,
                cfg,
                task_id=s.task_id,
                queue=s.queue,
                index=s.index,
                ref=s.ref,
                step=step,
                why=why,
            )
        except Exception as exc:
            if not about_item(exc):
                raise
            errors += 1
            log_error(step, exc, task=s.task_id, queue=s.queue, ref=s.ref, why=why)
            continue
        if outcome != "GONE":
            quarantined += 1
        log_event(
            "quarantined",
            logging.WARNING,
            step=step,
            task=s.task_id,
            queue=s.queue,
            index=s.index,
            ref=s.ref,
            outcome=outcome,
            why=why,
        )
    return quarantined, errors
