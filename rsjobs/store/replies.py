"""What the scripts answer, typed: an enum for every reply code and word, a Struct (or
NamedTuple) for every compound reply, and one map from codes to exceptions.

The codes and words are those of the script headers (``rsjobs/scripts/*.lua``); a test
checks every enum against the header that defines it. Callers switch on the members;
:func:`error_of` is the only place where a code becomes an exception.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum, StrEnum
from typing import Any, NamedTuple

from ..errors import (
    ActionRefused,
    InvalidTransition,
    RsjobsError,
    TaskNotFound,
    WorkflowNotFound,
)
from ..model import State

__all__ = [
    "AfterReply",
    "Beat",
    "Code",
    "Conversion",
    "DeadlineOutcome",
    "LinkCode",
    "PollClaim",
    "Promoted",
    "QuarantineOutcome",
    "QueueReply",
    "Recovery",
    "ReleaseReply",
    "Released",
    "RetryReply",
    "Started",
    "TaskReply",
    "WfCode",
    "WfFinishReply",
    "WfReply",
    "WfView",
    "WorkersSweep",
    "error_of",
    "stored_priority",
    "text",
]


def text(v: Any) -> str:
    """A reply value as text (replies are str with decode_responses; bytes otherwise)."""
    if type(v) is str:  # the usual case first: this runs several times per task
        return v
    if v is None:
        return ""
    return v.decode() if isinstance(v, bytes) else str(v)


def stored_priority(raw: Any) -> int:
    """A stored priority (task field ``pr``; none: 0). One that does not read is left to
    the script, which refuses the task's keys."""
    v = text(raw)
    return int(v) if v.isdigit() and len(v) < 3 else 0


class Code(IntEnum):
    """The codes of the task scripts (``control``, ``start``, ``finish``, ``release``,
    ``retry``, ``queue``, ``defer``, ``resolve``, ``poll``, ``after``). ``resolve``:
    REPEATED is a repeat of the outside result that ended the wait, LEASE_LOST a result for
    another attempt or external id. ``after``: NOTHING is a duplicate (its dedup key names
    a live task), NOT_FOUND an unknown predecessor, REFUSED a predecessor that cannot take
    the successor."""

    #: finish: a repeated COMPLETE of the lease holder, nothing written
    REPEATED = 2
    #: applied (start: started, with its lease)
    APPLIED = 1
    #: control: already in the state asked for (idempotent repeat); release: stale entry;
    #: retry: already started over (the task its retried_as names); queue: already so
    NOTHING = 0
    #: the task does not exist
    NOT_FOUND = -1
    #: refused: the table does not allow it (finish: the task is no longer RUNNING)
    REFUSED = -2
    #: finish: RUNNING under another lease (fencing)
    LEASE_LOST = -3
    #: start: never started and past its queue-wait deadline: EXPIRE instead
    EXPIRED = -4
    #: start: the task's queue is paused: the delivery was handed back (the task waits)
    QUEUE_PAUSED = -5
    #: defer: the external id is the wait of another task (recorded)
    EXTERNAL_TAKEN = -6
    #: start: its owner is at its concurrency limit: parked until it is under (the task
    #: waits, PENDING; nothing recorded)
    WAITING = -7
    #: start: a rate limit holds it back: parked until the time reserved for it
    THROTTLED = -8


class WfCode(IntEnum):
    """The codes of the workflow scripts (``wf_*``)."""

    #: wf_finish: a repeated COMPLETE of the lease holder, nothing written
    REPEATED = 2
    APPLIED = 1
    #: already done / exists (a repeated start, spawn, publish, cancel)
    NOTHING = 0
    NOT_FOUND = -1
    #: refused by the workflow's table (recorded); wf_finish: the task is no longer RUNNING
    REFUSED = -2
    #: wf_abort: dropped from the active set without a transition; wf_finish: lease lost
    QUARANTINED = -3
    #: wf_finish: the result was refused by the workflow, the task is CANCELLED
    RESULT_REFUSED = -4
    #: the workflow changed since the caller read it: nothing written
    STALE = -5


class LinkCode(IntEnum):
    """``link.lua``."""

    LINKED = 1
    ALREADY = 0
    NO_ORIGINAL = -1
    NO_CLONE = -2


class Beat(StrEnum):
    """``heartbeat.lua``'s word per task: OK, LOST, GONE, or the state the task left
    RUNNING for (``UNKNOWN`` for a state word rsjobs does not know)."""

    OK = "OK"
    LOST = "LOST"
    GONE = "GONE"
    WAITING = State.WAITING.value
    PENDING = State.PENDING.value
    SCHEDULED = State.SCHEDULED.value
    PAUSED = State.PAUSED.value
    DEFERRED = State.DEFERRED.value
    SUCCEEDED = State.SUCCEEDED.value
    FAILED = State.FAILED.value
    CANCELLED = State.CANCELLED.value
    TIMED_OUT = State.TIMED_OUT.value
    UNKNOWN = "UNKNOWN"

    @classmethod
    def of(cls, word: Any) -> Beat:
        try:
            return cls(text(word))
        except ValueError:
            return cls.UNKNOWN


class Recovery(StrEnum):
    """``reclaim.lua``'s word per entry."""

    RETRIED = "RETRIED"
    FAILED = "FAILED"
    DEADLETTERED = "DEADLETTERED"
    REDELIVERED = "REDELIVERED"
    ALIVE = "ALIVE"
    BUSY = "BUSY"
    WAITING = "WAITING"
    STALE = "STALE"


class DeadlineOutcome(StrEnum):
    """``deadline.lua``'s word per member."""

    RETRY = "RETRY"
    TIMED_OUT = "TIMED_OUT"
    EXPIRED = "EXPIRED"
    LATER = "LATER"
    STALE = "STALE"


_CODES = {int(c): c for c in Code}


def code_of(raw: Any) -> Code:
    """A task script's code (a dict lookup: ``Code(...)`` costs about 0.7 µs, twice per
    task); an unknown code raises ValueError as ``Code(...)`` would."""
    try:
        return _CODES[int(raw)]
    except KeyError:
        raise ValueError(f"{raw!r} is not a valid Code") from None


class QuarantineOutcome(StrEnum):
    """``quarantine.lua``'s outcome."""

    DEADLETTERED = "DEADLETTERED"
    REMOVED = "REMOVED"
    GONE = "GONE"


class Conversion(StrEnum):
    """``migrate.lua``'s outcome for one task (see its header)."""

    CONVERTED = "CONVERTED"
    WOULD_CONVERT = "WOULD_CONVERT"
    NEW = "NEW"
    GONE = "GONE"
    SKIPPED = "SKIPPED"
    FOREIGN = "FOREIGN"


class TaskReply(NamedTuple):
    """``{code, state}`` (``control``, ``finish``, ``defer``, ``resolve``); ``released``:
    the call wrote a release entry (the task had successors: run the release step,
    :meth:`rsjobs.store.successors.Successors.release`). The scripts append a 1 to such a
    reply; it still reads as ``(code, state)``."""

    code: Code
    state: str

    @property
    def released(self) -> bool:
        return False

    @classmethod
    def of(cls, raw: Sequence[Any]) -> TaskReply:
        n = len(raw)
        reply = (code_of(raw[0]), text(raw[1]) if n > 1 else "")
        if n > 2 and int(raw[2]) > 0:
            return _Releasing(*reply)
        return cls(*reply)


class _Releasing(TaskReply):
    """A :class:`TaskReply` of a call that wrote a release entry."""

    __slots__ = ()

    @property
    def released(self) -> bool:
        return True


class AfterReply(NamedTuple):
    """``after.lua``: ``{code, id, state, message}``: APPLIED (the new task), NOTHING (the
    live task its dedup key or id names; state '' when named by the key), NOT_FOUND
    (message: the unknown predecessor's id), REFUSED (message: why)."""

    code: Code
    id: str
    state: str
    message: str

    @classmethod
    def of(cls, raw: Sequence[Any]) -> AfterReply:
        return cls(code_of(raw[0]), text(raw[1]), text(raw[2]), text(raw[3]))


class Released(StrEnum):
    """``successors.lua``'s word per successor."""

    RELEASED = "RELEASED"
    CANCELLED = "CANCELLED"
    COUNTED = "COUNTED"
    STALE = "STALE"
    GONE = "GONE"
    DONE = "DONE"


class ReleaseReply(NamedTuple):
    """``successors.lua``: a word per successor, the entries handled (and deleted), the
    release entries the call wrote (successors cancelled that have successors)."""

    words: list[Released]
    handled: int
    written: int

    @classmethod
    def of(cls, raw: Sequence[Any]) -> ReleaseReply:
        return cls([Released(text(w)) for w in raw[0]], int(raw[1]), int(raw[2]))


class RetryReply(NamedTuple):
    """``retry.lua``: ``{code, id, state, message}`` (APPLIED: the new task; NOTHING: the
    task the old one was already started over as, state ''; REFUSED: the old task's state
    and the reason)."""

    code: Code
    id: str
    state: str
    message: str

    @classmethod
    def of(cls, raw: Sequence[Any]) -> RetryReply:
        code = Code(int(raw[0]))
        if code is Code.REFUSED:
            return cls(code, "", text(raw[1]), text(raw[2]))
        return cls(code, text(raw[1]), text(raw[2]), text(raw[3]))


class QueueReply(NamedTuple):
    """``queue.lua``: whether the call changed the flag, and the pause record in force
    after it (JSON, '' when the queue is not paused)."""

    changed: bool
    record: str

    @classmethod
    def of(cls, raw: Sequence[Any]) -> QueueReply:
        return cls(int(raw[0]) == 1, text(raw[1]))


class Started(NamedTuple):
    """``start.lua``'s reply for one delivery: ``code`` APPLIED with the task's values, or
    NOT_FOUND / REFUSED / EXPIRED with only ``state``."""

    code: Code
    state: str = ""
    id: str = ""
    type: str = ""
    #: the stored payload, as JSON text
    payload: str = ""
    attempt: int = 0
    lease: str = ""
    deadline_at: int = 0
    dedup: str = ""
    timeout_ms: int = 0
    #: the workflow the task belongs to ('' = a plain task)
    wf: str = ""
    owner: str = ""
    #: the W3C trace context it was submitted in ('' = none; rsjobs.tracing)
    traceparent: str = ""
    tracestate: str = ""
    #: a successor's predecessors and their results, as its hash keeps them ('' = none:
    #: see after.lua; rsjobs.worker.context.predecessors_of reads them)
    after: str = ""
    predecessors: str = ""

    @classmethod
    def of(cls, raw: Sequence[Any]) -> Started:
        code = code_of(raw[0])
        if code is not Code.APPLIED:
            return cls(code, text(raw[1]) if len(raw) > 1 else "")
        _, tid, ttype, payload, attempt, lease, deadline, dedup, timeout, wf, owner, tp, ts = raw[
            :13
        ]
        return cls(
            code,
            State.RUNNING.value,
            text(tid),
            text(ttype),
            text(payload),
            int(attempt),
            text(lease),
            int(deadline),
            text(dedup),
            int(timeout),
            text(wf),
            text(owner),
            text(tp),
            text(ts),
            text(raw[13]) if len(raw) > 13 else "",
            text(raw[14]) if len(raw) > 14 else "",
        )


class PollClaim(NamedTuple):
    """``poll.lua``'s reply for one candidate: APPLIED (claimed, with what the poller
    needs), NOTHING (not due) or NOT_FOUND (stale member, dropped)."""

    code: Code
    id: str = ""
    type: str = ""
    attempt: int = 0
    external_id: str = ""
    provider: str = ""
    #: the stored payload, as JSON text
    payload: str = ""

    @classmethod
    def of(cls, raw: Sequence[Any]) -> PollClaim:
        code = code_of(raw[0])
        if code is not Code.APPLIED:
            return cls(code)
        _, tid, ttype, attempt, ext, provider, payload = raw
        return cls(
            code, text(tid), text(ttype), int(attempt), text(ext), text(provider), text(payload)
        )


class Promoted(NamedTuple):
    """``promote.lua``: how many were promoted; the earliest due time left (-1 = none)."""

    promoted: int
    next_due_ms: int

    @classmethod
    def of(cls, raw: Sequence[Any]) -> Promoted:
        return cls(int(raw[0]), int(raw[1]))


class WorkersSweep(NamedTuple):
    """``workers.lua``: what one pass over the registry did."""

    newly_dead: list[str]
    forgotten: list[str]
    consumers_deleted: int

    @classmethod
    def of(cls, raw: Sequence[Any]) -> WorkersSweep:
        return cls([text(n) for n in raw[0]], [text(n) for n in raw[1]], int(raw[2]))


class WfReply(NamedTuple):
    """``{code, status, drive, message}`` of the workflow scripts: the workflow's status
    after the call, whether the driver has work on it now, and a reason for refusals."""

    code: WfCode
    status: str
    drive: bool
    message: str

    @classmethod
    def of(cls, raw: Sequence[Any]) -> WfReply:
        return cls(WfCode(int(raw[0])), text(raw[1]), bool(int(raw[2])), text(raw[3]))


class WfFinishReply(NamedTuple):
    """``wf_finish.lua``: ``{code, task state, workflow status, drive, message}``."""

    code: WfCode
    state: str
    status: str
    drive: bool
    message: str

    @classmethod
    def of(cls, raw: Sequence[Any]) -> WfFinishReply:
        return cls(WfCode(int(raw[0])), text(raw[1]), text(raw[2]), bool(int(raw[3])), text(raw[4]))


def _pairs(flat: Sequence[Any]) -> dict[str, str]:
    """A field/value list (HGETALL in a script) as a dict of texts."""
    return {text(flat[i]): text(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}


class WfView(NamedTuple):
    """``wf_read.lua``: ``{workflow, slots, assets, open}``, a workflow's keys as of one
    moment; its hash (empty: no such workflow), slots (``<version>:<stage>:<item>`` -> task
    id), assets (slot -> asset JSON) and open task ids; a part the view did not read is
    empty."""

    workflow: dict[str, str]
    slots: dict[str, str]
    assets: dict[str, str]
    open: set[str]

    @classmethod
    def of(cls, raw: Sequence[Any]) -> WfView:
        return cls(_pairs(raw[0]), _pairs(raw[1]), _pairs(raw[2]), {text(i) for i in raw[3]})


def error_of(
    code: Code | WfCode, *, subject: str, action: str, state: str = "", message: str = ""
) -> RsjobsError:
    """The exception a refusing ``code`` stands for: ``subject`` is the task or workflow
    id, ``action`` the event, ``state`` its state (or status) after the call, ``message``
    the script's reason. Callers decide which codes are answers rather than errors (a
    cancel of a finished task answers its state)."""
    # by type first: the two enums share values (IntEnum members compare as ints)
    if isinstance(code, WfCode):
        match code:
            case WfCode.NOT_FOUND:
                return WorkflowNotFound(subject)
            case WfCode.STALE:
                return ActionRefused(
                    subject, action, state, "the workflow kept changing; try again"
                )
            case WfCode.REFUSED | WfCode.QUARANTINED | WfCode.RESULT_REFUSED:
                return ActionRefused(subject, action, state, message)
    else:
        match code:
            case Code.NOT_FOUND:
                return TaskNotFound(subject)
            case Code.REFUSED | Code.LEASE_LOST | Code.EXPIRED | Code.EXTERNAL_TAKEN:
                return InvalidTransition(subject, action, state, message)
    raise ValueError(f"{code!r} is not a refusal")
