"""What a failed attempt leaves behind: a bounded traceback for its FAIL history entry, and
a log line naming the task.

The history entry keeps the exception's type and the traceback's last
:data:`TRACEBACK_FRAMES` frames, cut to its last ``chars`` characters with a line that says
so: the innermost frames and the exception's own message are what an operator reads first,
and a task hash stays small. The log gets the whole traceback, on its own logger
(``rsjobs.worker.traceback``, at INFO) so that it can be turned off apart from the line
that says which task failed (``rsjobs.worker``, WARNING).
"""

from __future__ import annotations

import logging
import traceback

__all__ = [
    "TRACEBACK_CHARS",
    "TRACEBACK_FRAMES",
    "TRACEBACK_MAX",
    "format_traceback",
    "log_failure",
]

#: characters of traceback a failed attempt keeps in its history entry, by default
TRACEBACK_CHARS = 2000
#: the most a worker may be told to keep (the scripts refuse a traceback over 8192 bytes,
#: and a character takes up to four of them)
TRACEBACK_MAX = 2048
#: frames kept, innermost first (each exception of a chain keeps as many)
TRACEBACK_FRAMES = 12

#: the logger of the whole tracebacks (INFO): turn it off to keep only the failure lines
traceback_log = logging.getLogger("rsjobs.worker.traceback")


def format_traceback(exc: BaseException, chars: int = TRACEBACK_CHARS) -> str:
    """The traceback of ``exc`` (its chain included) as its history entry keeps it: the
    last :data:`TRACEBACK_FRAMES` frames of each exception, at most ``chars`` characters
    (the end kept, a first line saying what was cut); '' when ``chars`` is 0."""
    if chars <= 0:
        return ""
    frames = _depth(exc)
    te = traceback.TracebackException.from_exception(exc, limit=-TRACEBACK_FRAMES)
    text = "".join(te.format())
    if frames > TRACEBACK_FRAMES:
        text = f"[{frames - TRACEBACK_FRAMES} outer frames left out]\n" + text
    if len(text) > chars:
        head = f"[traceback cut to its last {chars} of {len(text)} characters]\n"
        text = head + text[len(text) - max(0, chars - len(head)) :]
    return text


def _depth(exc: BaseException) -> int:
    n, tb = 0, exc.__traceback__
    while tb is not None:
        n, tb = n + 1, tb.tb_next
    return n


def log_failure(
    log: logging.Logger,
    worker: str,
    task_id: str,
    task_type: str,
    queue: str,
    attempt: int,
    error: str,
    exc: BaseException | None = None,
) -> None:
    """Log a failed attempt: one WARNING line naming the task, its type, queue and
    attempt, and the exception's whole traceback on :data:`traceback_log` (INFO)."""
    log.warning(
        "worker %s: task %s (type %s, queue %s) failed on attempt %d: %s",
        worker,
        task_id,
        task_type,
        queue,
        attempt,
        error,
    )
    if exc is not None and traceback_log.isEnabledFor(logging.INFO):
        traceback_log.info(
            "worker %s: traceback of task %s, attempt %d",
            worker,
            task_id,
            attempt,
            exc_info=(type(exc), exc, exc.__traceback__),
        )
