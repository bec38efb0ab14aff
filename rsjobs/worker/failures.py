"""What a failed attempt leaves behind: a bounded traceback for its FAIL history entry, and
a log line naming the task.

The history entry keeps the exception's type and the traceback's last
:data:`TRACEBACK_FRAMES` frames (from the handler down: the worker's own frames above it
are left out, and so are the ``^^^^`` marker lines), cut to its last ``chars``
characters with a line that says so: the innermost frames and the exception's own
message are what an operator reads first, and a task hash stays small. The log gets the
whole traceback, on its own logger (``rsjobs.worker.traceback``, at INFO) so that it can
be turned off apart from the line that says which task failed (``rsjobs.worker``,
WARNING).
"""

from __future__ import annotations

import logging
import os
import re
import traceback
from types import TracebackType

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
    tb = _past_the_worker(exc.__traceback__)
    frames = _depth(tb)
    te = traceback.TracebackException(type(exc), exc, tb, limit=-TRACEBACK_FRAMES)
    # (the marker lines under a frame's code, ^^^^, say nothing the line above does not)
    lines = "".join(te.format()).splitlines(keepends=True)
    text = "".join(line for line in lines if not _MARKERS.fullmatch(line))
    if frames > TRACEBACK_FRAMES:
        text = f"[{frames - TRACEBACK_FRAMES} outer frames left out]\n" + text
    if len(text) > chars:
        head = f"[traceback cut to its last {chars} of {len(text)} characters]\n"
        text = head + text[len(text) - max(0, chars - len(head)) :]
    return text


def _depth(tb: TracebackType | None) -> int:
    n = 0
    while tb is not None:
        n, tb = n + 1, tb.tb_next
    return n


def _past_the_worker(tb: TracebackType | None) -> TracebackType | None:
    """The traceback from the first frame that is not the worker's own (the frames that
    called the handler are the same for every task)."""
    start = tb
    while start is not None and start.tb_frame.f_code.co_filename.startswith(_WORKER_DIR):
        start = start.tb_next
    return start if start is not None else tb


#: the directory of the worker's own modules
_WORKER_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
#: a line of ^ and ~ only (Python 3.11's markers of where in a line the error is)
_MARKERS = re.compile(r"[ \t]*[\^~]+[ \t]*\n?")


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
