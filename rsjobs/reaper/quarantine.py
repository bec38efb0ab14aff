"""The reaper's side of quarantine (:mod:`rsjobs.store.quarantine` does it): what it logs.

Every step of a sweep hands the entries that failed alone to :func:`isolate`, which
quarantines those whose data is defective and logs each verdict as one JSON line, as the
reaper's own log lines: ``quarantined`` (what was done, and why) or ``item_error`` (nothing
wrong found with the data: logged with its traceback, counted as an error, left as it is).
"""

from __future__ import annotations

import json
import logging
import time
import traceback
from typing import Any

from ..store import Store, Suspect
from .config import ReaperConfig

__all__ = ["SOURCE", "Suspect", "isolate", "log_error", "log_event"]

log = logging.getLogger("rsjobs.reaper")

#: what history records as the actor of the reaper's transitions
SOURCE = "reaper"


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


async def isolate(
    store: Store, cfg: ReaperConfig, step: str, suspects: list[Suspect]
) -> tuple[int, int]:
    """Quarantine the suspects whose data is defective; returns ``(quarantined, errors)``.

    The others are logged with their traceback and left as they are."""
    quarantined = errors = 0
    verdicts = await store.quarantine.isolate(SOURCE, step, suspects, cfg.deadletter_maxlen)
    for v in verdicts:
        s = v.suspect
        where = {"task": s.task_id, "queue": s.queue, "ref": s.ref}
        if v.error is not None:
            errors += 1
            log_error(step, v.error, **where, **({"why": v.why} if v.why else {}))
            continue
        if v.outcome != "GONE":
            quarantined += 1
        log_event(
            "quarantined",
            logging.WARNING,
            step=step,
            task=s.task_id,
            queue=s.queue,
            index=s.indexed_in,
            ref=s.ref,
            outcome=v.outcome,
            why=v.why,
        )
    return quarantined, errors
