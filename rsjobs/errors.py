"""The exception tree: every error rsjobs raises derives from :class:`RsjobsError`."""

from __future__ import annotations

__all__ = [
    "ActionRefused",
    "BadSignature",
    "ChargeError",
    "ConfigError",
    "CorruptData",
    "CorruptWorkflow",
    "DedupKeyReused",
    "InvalidTransition",
    "LeaseLost",
    "NonRetryable",
    "NotMigrated",
    "NotReplicated",
    "PayloadError",
    "PredecessorRefused",
    "QueueInUse",
    "QueueQuotaExceeded",
    "RedisUnavailable",
    "RsjobsError",
    "SlotMigrating",
    "StoreError",
    "TaskNotFound",
    "UnknownDefinition",
    "UnknownPredecessor",
    "UnknownQueue",
    "WaitTimeout",
    "WorkflowError",
    "WorkflowNotFound",
]


class RsjobsError(Exception):
    """Root of every exception raised by rsjobs."""


class ConfigError(RsjobsError, ValueError):
    """Raised when a setting or argument is invalid (bad queue name, negative timeout...)."""


class ChargeError(ConfigError):
    """Raised when a handler's charge (:meth:`rsjobs.Context.charge`), or the charges of an
    outside result, cannot be recorded: an amount that is not a finite number >= 0 or
    passes the bound, a unit name that is not one, too many units in one attempt. Nothing
    of the bad charge is kept; the attempt's other charges stand."""


class PayloadError(RsjobsError, ValueError):
    """Raised when a payload or result cannot be encoded, or exceeds the size limit."""


class DedupKeyReused(RsjobsError, ValueError):
    """Raised when a dedup key already names a live task submitted with a different
    request (type, queue or payload: the rule of :func:`rsjobs.dedup.same_request`).
    Nothing was written; ``task_id`` is the task the key names (None when the conflict
    is between two requests of one :meth:`rsjobs.Client.enqueue_many` call). An identical
    repeat is not an error: it answers that task's id."""

    def __init__(self, dedup_key: str, task_id: str | None) -> None:
        named = f"task {task_id}" if task_id else "another request of this batch"
        super().__init__(
            f"dedup key {dedup_key!r} already names {named}, submitted with a different "
            "type, queue or payload"
        )
        self.dedup_key, self.task_id = dedup_key, task_id


class TaskNotFound(RsjobsError, LookupError):
    """Raised when a task id names no task (never existed, or expired after retention)."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"no such task: {task_id}")
        self.task_id = task_id


class UnknownQueue(RsjobsError, LookupError):
    """Raised when a queue name names no queue of the namespace (no task was ever
    submitted to it)."""

    def __init__(self, queue: str) -> None:
        super().__init__(f"no such queue: {queue}")
        self.queue = queue


class QueueQuotaExceeded(RsjobsError):
    """Raised when a submit names a new queue for an owner that has made as many queues as
    ``Settings.queue_quota`` allows (nothing is written; ``rsjobs queue delete`` of an
    unused one gives its place back)."""

    def __init__(self, owner: str, quota: int, queue: str) -> None:
        super().__init__(
            f"owner {owner!r} may make at most {quota} queues (queue_quota): queue {queue!r} "
            "would be one more"
        )
        self.owner, self.quota, self.queue = owner, quota, queue


class QueueInUse(RsjobsError):
    """Raised when a queue to delete still holds live tasks (pending, scheduled, running,
    paused, waiting, deferred), is served by a registered worker or is the queue of a
    schedule; nothing is deleted."""

    def __init__(self, queue: str, why: str) -> None:
        super().__init__(f"queue {queue!r} is in use: {why}")
        self.queue, self.why = queue, why


class UnknownPredecessor(ConfigError, LookupError):
    """Raised when a predecessor named in ``after`` names no task the submitter may wait
    for: no task has that id (never existed, or expired after retention), or the task is
    another owner's. The two are answered alike, so that an owner cannot learn the ids of
    another owner's tasks. Nothing was written."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"unknown predecessor: {task_id}")
        self.task_id = task_id


class PredecessorRefused(ConfigError):
    """Raised when a predecessor named in ``after`` cannot take one more successor: it is a
    workflow's task (its workflow orders its tasks by stages), or it has the most
    successors a task may have (1000). Nothing was written; ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class InvalidTransition(RsjobsError):
    """Raised when the state machine refuses an event (e.g. RESUME of a task not PAUSED).

    The refusal is also recorded in the task's history; ``reason`` says why, where the
    state alone does not (e.g. a RETRY of a workflow's task).
    """

    def __init__(self, task_id: str, event: str, state: str, reason: str = "") -> None:
        message = f"{event} refused: task {task_id} is {state}"
        if reason:
            message = f"{event} refused: task {task_id}: {reason}"
        super().__init__(message)
        self.task_id, self.event, self.state, self.reason = task_id, event, state, reason


class LeaseLost(RsjobsError):
    """Raised by :meth:`rsjobs.Context.progress` and :meth:`rsjobs.Context.report` once the
    worker has stopped the handler: its task left the worker's hands (cancelled, paused,
    timed out, taken back by the reaper, handed back at shutdown), so nothing the handler
    does now is recorded. A sync handler that ignores ``ctx.cancelled`` but reports
    progress ends at its next report (a thread cannot be stopped from outside)."""

    def __init__(self, task_id: str, reason: str) -> None:
        super().__init__(f"task {task_id} is no longer this handler's to run ({reason})")
        self.task_id, self.reason = task_id, reason


class WaitTimeout(RsjobsError, TimeoutError):
    """Raised when :meth:`Client.wait` gives up before the task reached a terminal state."""


class RedisUnavailable(RsjobsError, ConnectionError):
    """Raised when Redis cannot be reached, or answers with a passing error (loading, a
    failover's ``READONLY``...; see :mod:`rsjobs.store.transient`), after the retries the
    caller allowed. The redis-py error is its cause."""


class SlotMigrating(RedisUnavailable):
    """Raised on a Redis Cluster when a command's keys stayed split between two nodes by a
    slot migration (``TRYAGAIN``) for longer than the client tries again (with backoff,
    :data:`rsjobs.store.cluster.TRYAGAIN_WAIT` seconds): the command did not run. A passing
    error like its parent: it ends once the operator's resharding of that slot is done.
    ``slot``: the slot being moved; ``waited``: how long the client kept trying (s)."""

    def __init__(self, slot: int, waited: float) -> None:
        super().__init__(
            f"slot {slot} is being migrated between two cluster nodes and the command's keys "
            f"are split between them (TRYAGAIN): not run, still refused after {waited:.1f} s"
        )
        self.slot, self.waited = slot, waited


class StoreError(RsjobsError):
    """Raised when Redis answers an error that is not a passing one: a script refused its
    arguments or failed on stored data it cannot handle (``rsjobs: ...``, ``WRONGTYPE``),
    or Redis refuses the work for its own condition (``OOM``, ``BUSY``, ``MISCONF``,
    ``NOPERM``...). ``code`` is the reply's first word (``ERR`` when it has none), ``reply``
    the reply; the redis-py error is its cause."""

    def __init__(self, what: str, code: str, reply: str) -> None:
        super().__init__(f"{what}: {reply}")
        self.what, self.code, self.reply = what, code, reply


class CorruptData(RsjobsError, ValueError):
    """Raised when stored data does not read as what rsjobs wrote there (a task hash whose
    payload does not decode, a field that does not parse: written by something else). The
    reaper and the workflow driver move such a task or workflow to FAILED."""

    def __init__(self, kind: str, key_id: str, why: str) -> None:
        super().__init__(f"{kind} {key_id} is corrupt: {why}")
        self.kind, self.id, self.why = kind, key_id, why


class NotReplicated(RsjobsError):
    """Raised in durable mode (``Settings.wait_replicas``) when a write was applied on the
    primary but fewer replicas than asked confirmed it within ``Settings.wait_timeout_ms``:
    it may be lost if the primary fails now. The write is not undone; repeating it is safe
    (a submit with the same dedup key answers the same task, a repeated cancel changes
    nothing)."""

    def __init__(self, what: str, acked: int, wanted: int, timeout_ms: int) -> None:
        super().__init__(
            f"{what}: applied on the primary, but {acked} of {wanted} replicas confirmed it "
            f"within {timeout_ms} ms"
        )
        self.acked, self.wanted = acked, wanted


class NotMigrated(RsjobsError):
    """Raised when rsjobs meets data of an earlier layout of the namespace: a namespace
    that holds such data and is not migrated yet (the worker, reaper, web app and driver
    refuse to start, and script calls raise it), a task hash still in the previous
    encoding, or a namespace marked with a layout newer than this rsjobs knows. Nothing
    was written. The fix is ``rsjobs migrate`` (see the README's "Upgrading")."""

    def __init__(self, what: str, why: str) -> None:
        super().__init__(f"{what} {why}")
        self.what, self.why = what, why


class BadSignature(RsjobsError):
    """Raised when a callback's token or signature does not verify (forged, altered,
    expired, or signed with another secret): nothing is written."""


class NonRetryable(RsjobsError):
    """Raised by a handler to fail its task at once, skipping the remaining attempts."""


# -- workflows (rsjobs.workflows) --------------------------------------------------------------


class WorkflowError(RsjobsError):
    """Root of the errors of :mod:`rsjobs.workflows`."""


class WorkflowNotFound(WorkflowError, LookupError):
    """Raised when a workflow id names no workflow (never existed, or expired)."""

    def __init__(self, wf_id: str) -> None:
        super().__init__(f"no such workflow: {wf_id}")
        self.wf_id = wf_id


class ActionRefused(WorkflowError):
    """Raised when the workflow's state machine refuses an action (confirm of a workflow
    that waits for nothing, anything on a PUBLISHED one...). The refusal is recorded in
    the workflow's history; ``status`` is the workflow's status, unchanged."""

    def __init__(self, wf_id: str, action: str, status: str, reason: str) -> None:
        super().__init__(f"{action} refused: workflow {wf_id} is {status}: {reason}")
        self.wf_id, self.action, self.status, self.reason = wf_id, action, status, reason


class UnknownDefinition(WorkflowError, ConfigError):
    """Raised when a workflow is started with a definition name the client does not know."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown workflow definition: {name!r}")
        self.name = name


class CorruptWorkflow(WorkflowError, CorruptData):
    """Raised when a workflow's stored hash does not read as a workflow (a field that does
    not parse, a plan that does not decode: written by something else than rsjobs). The
    driver moves such a workflow to FAILED (see :mod:`rsjobs.workflows.abort`)."""

    def __init__(self, wf_id: str, why: str) -> None:
        CorruptData.__init__(self, "workflow", wf_id, why)
        self.wf_id = wf_id
