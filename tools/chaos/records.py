"""What a chaos run observed, as plain data: the checker's only input.

Everything here is written either by the harness (submissions, cancels, faults, with the
harness's wall clock in ms) or read back from Redis after the run (task hashes, histories,
execution records, dedup keys, with Redis TIME in ms). Same host, so the clocks agree.
"""

from __future__ import annotations

import msgspec

from rsjobs.schemas import HistoryEntry
from rsjobs.workflows import WorkflowEvent

from .workload import PoolSettings

__all__ = [
    "CallbackProbe",
    "CancelAck",
    "CursorProbe",
    "Execution",
    "ExternalAck",
    "FaultEvent",
    "Flood",
    "HostileTraces",
    "PauseStorm",
    "PoisonInput",
    "PoolState",
    "QueueFlood",
    "RunData",
    "Submission",
    "TaskRecord",
    "Violation",
    "WorkflowRecord",
    "WorkflowStart",
]


class Violation(msgspec.Struct, frozen=True, kw_only=True):
    """One finding of the checker (a violation, an AOF-window loss or a warning)."""

    kind: str
    task_id: str = ""
    detail: str


class Submission(msgspec.Struct, frozen=True, kw_only=True):
    """One acknowledged submit: the producer got ``task_id`` back at ``ack_ms``."""

    seq: int  #: the workload's task number (a dedup task submitted twice has two records)
    kind: str  #: the behaviour (see ``tools.chaos.workload.KINDS``)
    task_id: str
    ack_ms: int
    dedup: str = ""
    #: True for the second submit of a dedup key (it must answer with the first's id)
    repeat: bool = False
    #: the priority it was submitted with (0-9)
    priority: int = 0


class CancelAck(msgspec.Struct, frozen=True, kw_only=True):
    """An acknowledged ``Client.cancel``: ``state`` is what the call answered."""

    task_id: str
    phase: str  #: "pending" (right after submit) or "running" (seen RUNNING first)
    ack_ms: int
    state: str


class ExternalAck(msgspec.Struct, frozen=True, kw_only=True):
    """An outside result the producer sent for a deferred task (as its provider would, by
    ``Client.complete_external`` with the outside job's id), and what it answered."""

    task_id: str
    attempt: int
    #: the task's mode (ok, dup, lost, late, never) and which send this was (1, 2)
    mode: str
    send: int
    #: sent past that attempt's longest wait (it must be refused)
    late: bool
    ack_ms: int
    #: the state answered, or "refused" (InvalidTransition) / "not_found"
    answer: str


class FaultEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One fault the harness injected (or observed: an unplanned process exit)."""

    at_ms: int
    #: worker_kill, worker_stop, worker_cont, worker_exit (unplanned), reaper_kill,
    #: redis_term, redis_kill, and the matching *_start / redis_up bookkeeping events
    kind: str
    target: str  #: worker / reaper name, or "redis"
    pid: int = 0
    detail: str = ""
    #: exit status of a process found dead (negative: killed by that signal)
    status: int | None = None
    #: how long the process had been running when it was found dead (ms)
    ran_ms: int = 0


class Execution(msgspec.Struct, frozen=True, kw_only=True):
    """One record a handler wrote (``tools.chaos.handlers``): a start, end or stop."""

    exec_id: str  #: unique per handler call; the start, end and stop records share it
    task_id: str
    attempt: int
    worker: str
    pid: int
    #: "start", "end" (the handler returned or raised), "stop" (it was cancelled) or
    #: "kill" (a poison task is about to SIGKILL its worker)
    ev: str
    ts: int  #: Redis TIME (ms) of the record (its stream entry id)
    outcome: str = ""  #: end: ok / fail / fatal; stop: why
    #: start: when the handler began (harness host clock, ms), before its record was
    #: written — the time of the START it ran under; 0 when not known
    began_ms: int = 0


class TaskRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A task as read back after the run: its hash (raw fields) and its history."""

    task_id: str
    fields: dict[str, str]  #: empty when the hash does not exist
    history: list[HistoryEntry]


class WorkflowStart(msgspec.Struct, frozen=True, kw_only=True):
    """An acknowledged workflow start (the producer chose the id: a retry is idempotent)."""

    seq: int
    kind: str  #: see ``tools.chaos.workload.WF_KINDS`` (or ``wf_next_over_limit``)
    wf_id: str
    ack_ms: int
    #: False when no call answered it (a lost reply, then an error): it may exist or not
    acked: bool = True


class WorkflowRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A workflow as read back: its hash, history, slots (``<v>:<stage>:<item>`` -> task
    id), assets (slot -> asset JSON) and the ids of its tasks it still counts as open."""

    wf_id: str
    fields: dict[str, str]
    history: list[WorkflowEvent]
    slots: dict[str, str] = msgspec.field(default_factory=dict)
    assets: dict[str, str] = msgspec.field(default_factory=dict)
    open: list[str] = msgspec.field(default_factory=list)


class PoisonInput(msgspec.Struct, frozen=True, kw_only=True):
    """What became of one bad input (``tools.chaos.workload.POISON_KINDS``)."""

    seq: int
    kind: str
    channel: str  #: "client" or "http"
    marker: str  #: carried by the input; nothing in Redis may hold it when refused
    at_ms: int
    #: refused (a clear error), accepted (an id came back), mishandled (an error that is
    #: not a clear refusal: a 5xx, an exception outside RsjobsError, no reason), or
    #: unanswered (no answer within the bound: Redis or the app was down throughout)
    outcome: str
    status: int = 0  #: HTTP status (http channel)
    error: str = ""  #: the exception type or the error code, and its reason
    #: what it created when accepted: a task or workflow id
    created: str = ""


class Flood(msgspec.Struct, frozen=True, kw_only=True):
    """A flood of refused commands (CANCEL or PAUSE) at one finished task."""

    seq: int
    channel: str
    event: str  #: CANCEL or PAUSE
    task_id: str
    state: str  #: the task's terminal state before the flood
    sent: int
    #: answered as refused: the state unchanged (cancel) / InvalidTransition (pause)
    refused: int = 0
    #: answered as if the command had changed something
    accepted: int = 0
    #: no answer (a broken connection): may or may not have reached Redis
    unknown: int = 0
    #: answered with an error that is not a refusal (5xx, an unexpected exception)
    errors: int = 0
    error: str = ""  #: the first such error
    first_ms: int = 0
    last_ms: int = 0


class CallbackProbe(msgspec.Struct, frozen=True, kw_only=True):
    """A hostile provider callback (``tools.chaos.hostile``): a body signed for another
    outside job, with a stale timestamp, or altered after it was signed, posted to the
    ``/callbacks/external/...`` URL of a task waiting on its outside job."""

    seq: int
    #: cross_job, stale or altered
    variant: str
    task_id: str  #: the DEFERRED task whose URL it was posted to
    target: str  #: the outside job id in that URL
    signed_for: str  #: the outside job id the signature names
    marker: str  #: carried by its body's result: no task may ever hold it
    at_ms: int
    #: refused (401 bad_signature), accepted (the signature let it through: 2xx, or a
    #: 404 / 409 from behind the check), mishandled (another answer), unanswered
    outcome: str
    status: int = 0
    error: str = ""


class PauseStorm(msgspec.Struct, frozen=True, kw_only=True):
    """PAUSE / RESUME cycles of one PENDING task (on a queue no worker reads), then a
    cancel: its history must stay under its ceiling and account for every cycle."""

    seq: int
    channel: str
    task_id: str
    cycles: int  #: PAUSEs sent
    #: answered as applied (PAUSED, PENDING)
    paused: int = 0
    resumed: int = 0
    #: answered as refused or unchanged (the task was not in the state the storm thought:
    #: only after a command whose answer was lost)
    refused: int = 0
    #: no answer (a broken connection): may or may not have been applied
    unknown_pause: int = 0
    unknown_resume: int = 0
    #: answered otherwise (a 5xx, an unexpected exception or state)
    errors: int = 0
    error: str = ""
    first_ms: int = 0
    last_ms: int = 0


class QueueFlood(msgspec.Struct, frozen=True, kw_only=True):
    """One owner submitting tasks to ever new queue names: it must stop at the owner's
    quota, and a refused name must leave no trace."""

    seq: int
    channel: str
    owner: str
    quota: int
    sent: list[str]  #: every queue name tried
    #: name -> the id of the task its accepted submit created
    accepted: dict[str, str] = msgspec.field(default_factory=dict)
    refused: list[str] = msgspec.field(default_factory=list)
    #: no answer within the bound: the name may or may not be registered
    unknown: list[str] = msgspec.field(default_factory=list)
    #: name -> an answer that is neither an acceptance nor the quota's refusal
    mishandled: dict[str, str] = msgspec.field(default_factory=dict)
    first_ms: int = 0
    last_ms: int = 0


class CursorProbe(msgspec.Struct, frozen=True, kw_only=True):
    """A crafted, altered, cross-owner or cross-filter list cursor and what it got (or
    ``genuine``: the cursor as handed out, by its owner, which must work)."""

    seq: int
    channel: str
    variant: str
    route: str  #: the list it was sent to (``/tasks``, ``/deadletters``, ``/workflows``)
    at_ms: int
    #: refused (400 invalid_cursor / ConfigError), accepted, mishandled, unanswered
    outcome: str
    status: int = 0
    error: str = ""
    #: what the answer (or the cursor itself) revealed that it must not: another owner's
    #: task ids or name, the ids of the page the cursor came from
    leaked: list[str] = msgspec.field(default_factory=list)


class HostileTraces(msgspec.Struct, frozen=True, kw_only=True):
    """What Redis held after the run of what the hostile mix touched."""

    #: storm task id -> MEMORY USAGE of its hash (bytes)
    sizes: dict[str, int] = msgspec.field(default_factory=dict)
    #: flooded queue name -> what holds it (keys, registry entries, stats fields)
    queue_traces: dict[str, list[str]] = msgspec.field(default_factory=dict)
    #: flooding owner -> the queues ``queues:owners`` counts for it
    owner_counts: dict[str, int] = msgspec.field(default_factory=dict)


class PoolState(msgspec.Struct, frozen=True, kw_only=True):
    """The run's shared-queue limits (docs/limits.md), what the harness saw held during
    the run, and what their keys held after the drain (once every process had stopped)."""

    settings: PoolSettings
    #: when the limits were set (harness clock, ms; before the first submit)
    set_ms: int
    #: Redis TIME (ms) when the keys below were read
    read_ms: int = 0
    #: the ``running`` hash: ``<queue>|<owner>`` -> RUNNING tasks
    running: dict[str, int] = msgspec.field(default_factory=dict)
    #: per queue: the members of ``parked:<queue>`` and ``throttled:<queue>``
    parked: dict[str, list[str]] = msgspec.field(default_factory=dict)
    throttled: dict[str, list[str]] = msgspec.field(default_factory=dict)
    #: per queue: ``claims:<queue>`` (consumer -> ``<expiry ms> <owner>=<n>:<its expiry> ...``)
    claims: dict[str, dict[str, str]] = msgspec.field(default_factory=dict)
    #: ids of the tasks a sample (every 250 ms) saw parked on their owner's limit
    parked_seen: list[str] = msgspec.field(default_factory=list)
    #: the tasks a sample saw held back by a rate limit: id -> (when first seen, harness
    #: clock ms; the start time reserved for it, its score) per reservation seen
    throttled_seen: dict[str, list[tuple[int, int]]] = msgspec.field(default_factory=dict)


class RunData(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the checker looks at."""

    fsync: str  #: appendfsync policy of the run: "everysec" or "always"
    lease_ms: int
    #: how long before a SIGKILL of Redis an acknowledged write may be lost (everysec)
    aof_window_ms: int = 2500
    submissions: list[Submission] = msgspec.field(default_factory=list)
    #: seq numbers of submits whose outcome is unknown (the call failed mid-way)
    indeterminate: list[int] = msgspec.field(default_factory=list)
    cancels: list[CancelAck] = msgspec.field(default_factory=list)
    #: the producer's acknowledged RESUMEs of the tasks it paused (``state``: the answer)
    resumes: list[CancelAck] = msgspec.field(default_factory=list)
    #: the outside results the producer sent for deferred tasks
    external: list[ExternalAck] = msgspec.field(default_factory=list)
    faults: list[FaultEvent] = msgspec.field(default_factory=list)
    #: every task found in the namespace, plus every accepted id (found or not)
    tasks: dict[str, TaskRecord] = msgspec.field(default_factory=dict)
    executions: list[Execution] = msgspec.field(default_factory=list)
    #: dedup key -> the task id its dedup string names now ('' = none)
    dedup: dict[str, str] = msgspec.field(default_factory=dict)
    #: the namespace's stats hash (state counts per queue, ev: / rej: counters); None =
    #: not read (the counter checks are skipped)
    stats: dict[str, int] | None = None
    #: task id -> the history entry ids the events stream names for it, in order; None =
    #: not read. ``events_trimmed``: the stream lost old entries to MAXLEN ~
    events: dict[str, list[str]] | None = None
    events_trimmed: bool = False
    #: the producer's writes acknowledged only after WAIT reached a replica (--durable)
    durable: bool = False
    #: acknowledged writes this long before a failover began may be lost (not durable)
    failover_window_ms: int = 1000
    workflows: list[WorkflowStart] = msgspec.field(default_factory=list)
    #: the producer's workflow cancels and publishes (``task_id`` holds the workflow id,
    #: ``phase`` the action, ``state`` the status it answered)
    wf_actions: list[CancelAck] = msgspec.field(default_factory=list)
    #: valid workflow starts that were refused
    wf_errors: list[str] = msgspec.field(default_factory=list)
    #: every workflow found in the namespace, plus every started id (found or not)
    wf_records: dict[str, WorkflowRecord] = msgspec.field(default_factory=dict)
    poison: list[PoisonInput] = msgspec.field(default_factory=list)
    floods: list[Flood] = msgspec.field(default_factory=list)
    #: ids of refused workflow starts the producer chose (none may exist)
    refused_wf_ids: list[str] = msgspec.field(default_factory=list)
    #: the shared-queue limits and their keys; None = not used (those checks skipped)
    pools: PoolState | None = None
    #: the hostile-client mix (``tools.chaos.hostile``)
    callbacks: list[CallbackProbe] = msgspec.field(default_factory=list)
    storms: list[PauseStorm] = msgspec.field(default_factory=list)
    queue_floods: list[QueueFlood] = msgspec.field(default_factory=list)
    cursor_probes: list[CursorProbe] = msgspec.field(default_factory=list)
    hostile_traces: HostileTraces | None = None
