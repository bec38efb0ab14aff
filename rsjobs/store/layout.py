"""How each script's KEYS and ARGV are laid out, and one packer per script.

Every call of a script is: the common KEYS (``fsm.lua``: events, stats, scheduled,
deadlines and the list indexes: ``Keys.common``), then each item's keys (a task's three:
:class:`TaskKeys`), then the script's own keys (workflow scripts: :class:`WorkflowKeys`);
the common ARGV (source, events_max, retention, group; workflow scripts then channel,
history_max), then the script's own values, then each item's values. A script's header
names all of them; the :class:`Layout` of its packer below names the same, from the
NamedTuples the packer takes, and a test parses every header and checks the two agree
(``tests/store/test_layout.py``). Each script checks ``#KEYS`` and ``#ARGV`` against its
header before anything else.

Packers are pure functions: they only place values (no Redis, no checks: the scripts
check everything before their first write), so the Lua tests run the scripts through them.
Hot batches (start, finish, heartbeat) are positional tuples, flattened as they are; a new
task's rarely used options travel as one JSON object (:func:`task_options`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import msgspec

from .keys import GROUP, Keys, TaskKeys, WorkflowKeys

__all__ = [
    "LAYOUTS",
    "TASK_OPTIONS",
    "WF_COMMON",
    "BeatArgs",
    "BeatItem",
    "Common",
    "ControlArgs",
    "DeadlineArgs",
    "DeadlineItem",
    "DeferArgs",
    "Ending",
    "Entry",
    "Expect",
    "HookConsumer",
    "HooksDueArgs",
    "Layout",
    "Layout1Task",
    "Member",
    "MigrateArgs",
    "NewTask",
    "OpenTask",
    "Packed",
    "PollArgs",
    "Predecessor",
    "QuarantineArgs",
    "QueueAddArgs",
    "QueueArgs",
    "ReclaimArgs",
    "RecountArgs",
    "RegenerateTask",
    "ResolveArgs",
    "RetryArgs",
    "ScheduleArgs",
    "SeriesArgs",
    "SeriesQueue",
    "StartArgs",
    "SuccessorItem",
    "SummaryArgs",
    "TakeArgs",
    "TrimArgs",
    "WfAbortArgs",
    "WfCancelArgs",
    "WfGateArgs",
    "WfReadArgs",
    "WfRegenerateArgs",
    "WfRetryArgs",
    "WfRetryItem",
    "WfSpawnArgs",
    "WfStartArgs",
    "WfSyncArgs",
    "WfTask",
    "WorkersArgs",
    "task_options",
]

Value = str | int | float | bytes


class Common(NamedTuple):
    """What every call of one namespace and settings starts with (see ``fsm.lua``)."""

    keys: tuple[str, ...]
    #: events_max, retention, group (ARGV[2..4]; ARGV[1] is the call's source)
    argv: tuple[Value, ...]
    #: the control channel (the first of the workflow scripts' common ARGV)
    channel: str

    @classmethod
    def of(cls, keys: Keys, events_maxlen: int, retention_ms: int) -> Common:
        return cls(keys.common(), (str(events_maxlen), str(retention_ms), GROUP), keys.control)


class Packed(NamedTuple):
    """One script call: the script's name, its KEYS and its ARGV."""

    script: str
    keys: list[str]
    argv: list[Any]


class Layout(NamedTuple):
    """The names of a script's KEYS and ARGV after the common ones, as its header names
    them: its own values, then per item (``item`` names what one is) values and keys,
    then its own keys; ``exact`` when it takes exactly that many items."""

    script: str
    args: tuple[str, ...] = ()
    item: str = ""
    item_args: tuple[str, ...] = ()
    item_keys: tuple[str, ...] = ()
    tail_keys: tuple[str, ...] = ()
    exact: int | None = None


def _pack(
    layout: Layout,
    c: Common,
    source: str,
    args: Iterable[Value],
    items: Iterable[tuple[Sequence[str], Sequence[Value]]],
    tail: Sequence[str] = (),
) -> Packed:
    keys = list(c.keys)
    argv: list[Any] = [source, *c.argv, *args]
    for item_keys, values in items:
        keys += item_keys
        argv += values
    keys += tail
    return Packed(layout.script, keys, argv)


#: the ARGV every workflow script has after the common ones (``wf.lua``)
WF_COMMON = ("channel", "history_max")

# -- new tasks -------------------------------------------------------------------------------

#: the names a new task's options object may have (``task_options`` in ``fsm.lua``)
TASK_OPTIONS = (
    "max_attempts",
    "timeout_ms",
    "delay_ms",
    "wait_timeout_ms",
    "backoff_base_ms",
    "backoff_max_ms",
    "dedup",
    "owner",
    "labels",
    "traceparent",
    "tracestate",
    "after_policy",
    "priority",
)
_options = msgspec.json.Encoder()


def task_options(
    *,
    max_attempts: int,
    backoff_base_ms: int,
    backoff_max_ms: int,
    timeout_ms: int = 0,
    delay_ms: int = 0,
    wait_timeout_ms: int = 0,
    dedup: str | None = None,
    owner: str | None = None,
    labels: str | None = None,
    traceparent: str = "",
    tracestate: str = "",
    after_policy: str = "",
    priority: int = 0,
) -> bytes:
    """A new task's options as the one JSON object the scripts take; 0 and empty values
    are left out (the scripts read a missing name as 0 or ''). ``labels``: the JSON text
    :func:`rsjobs.labels.encode_labels` makes; ``traceparent`` / ``tracestate``: the
    submitter's W3C trace context (:mod:`rsjobs.tracing`), stored only when given;
    ``after_policy``: a successor's (``after.lua``), left out for the default
    ("succeeded"). ``priority``: 0-9 (the task's queue key is that level's stream:
    ``Keys.task_keys``)."""
    o: dict[str, Any] = {"max_attempts": max_attempts}
    if timeout_ms:
        o["timeout_ms"] = timeout_ms
    if delay_ms:
        o["delay_ms"] = delay_ms
    if wait_timeout_ms:
        o["wait_timeout_ms"] = wait_timeout_ms
    if backoff_base_ms:
        o["backoff_base_ms"] = backoff_base_ms
    if backoff_max_ms:
        o["backoff_max_ms"] = backoff_max_ms
    if dedup:
        o["dedup"] = dedup
    if owner:
        o["owner"] = owner
    if labels:
        o["labels"] = labels
    if traceparent:
        o["traceparent"] = traceparent
        if tracestate:
            o["tracestate"] = tracestate
    if after_policy and after_policy != "succeeded":
        o["after_policy"] = after_policy
    if priority:
        o["priority"] = priority
    return _options.encode(o)


class NewTask(NamedTuple):
    """One task for ``enqueue.lua`` (options: :func:`task_options`)."""

    id: str
    type: str
    queue: str
    payload: bytes | str
    options: bytes | str


ENQUEUE = Layout("enqueue", item="task", item_args=NewTask._fields, item_keys=TaskKeys._fields)


def enqueue(c: Common, source: str, tasks: Iterable[tuple[TaskKeys, NewTask]]) -> Packed:
    return _pack(ENQUEUE, c, source, (), tasks)


# -- successors ------------------------------------------------------------------------------


class Predecessor(NamedTuple):
    """One predecessor of a new successor (``after.lua``): its id (its key: its hash)."""

    id: str


AFTER = Layout(
    "after",
    NewTask._fields,
    "predecessor",
    Predecessor._fields,
    ("predecessor",),
    (*TaskKeys._fields, "waiting"),
)


def after(
    c: Common, k: Keys, source: str, keys: TaskKeys, task: NewTask, predecessors: Iterable[str]
) -> Packed:
    """``after.lua``: the successor ``task`` (its keys ``keys``) of ``predecessors``."""
    items = (((k.task(p),), Predecessor(p)) for p in predecessors)
    return _pack(AFTER, c, source, task, items, (*keys, k.waiting))


class SuccessorItem(NamedTuple):
    """One successor of a release entry (``successors.lua``)."""

    #: the release entry naming its predecessor
    entry: str
    id: str


SUCCESSORS = Layout(
    "successors", (), "successor", SuccessorItem._fields, TaskKeys._fields, ("waiting",)
)


def successors(
    c: Common, k: Keys, source: str, items: Iterable[tuple[TaskKeys, SuccessorItem]]
) -> Packed:
    return _pack(SUCCESSORS, c, source, (), items, (k.waiting,))


# -- the worker's hot path -------------------------------------------------------------------


class StartArgs(NamedTuple):
    consumer: str
    lease_ms: int | str
    nonce: str
    #: the queue of every task of the call
    queue: str


class Entry(NamedTuple):
    """A delivered stream entry (``start.lua``, ``release.lua``, ``reclaim.lua``)."""

    entry: str


#: the keys ``start.lua`` takes after its tasks' (the last three: the call's queue's)
START_TAIL = ("paused", "limits", "rates", "parked", "throttled", "claims")

START = Layout("start", StartArgs._fields, "task", Entry._fields, TaskKeys._fields, START_TAIL)


def start(
    c: Common, k: Keys, source: str, args: StartArgs, items: Iterable[tuple[TaskKeys, Entry]]
) -> Packed:
    q = args.queue
    tail = (k.paused, k.limits, k.rates, k.parked(q), k.throttled(q), k.claims(q))
    return _pack(START, c, source, args, items, tail)


class TakeArgs(NamedTuple):
    """``take.lua``: what a worker takes."""

    consumer: str
    #: the most entries to hand out
    most: int | str
    #: aging: a waiting task's priority rises by one level per age_ms (0: never)
    age_ms: int | str
    #: the most new entries one call parks
    park_max: int | str


class TakeQueue(NamedTuple):
    queue: str


#: the keys of one queue in a ``take.lua`` call
TAKE_QUEUE_KEYS = ("parked", "throttled", "claims", *(f"level{p}" for p in range(10)))

TAKE = Layout(
    "take",
    TakeArgs._fields,
    "queue",
    TakeQueue._fields,
    TAKE_QUEUE_KEYS,
    ("limits", "rates", "wake"),
)


def take(c: Common, k: Keys, source: str, args: TakeArgs, queues: Iterable[str]) -> Packed:
    items = (
        ((k.parked(q), k.throttled(q), k.claims(q), *k.queue_streams(q)), (q,)) for q in queues
    )
    return _pack(TAKE, c, source, args, items, (k.limits, k.rates, k.wake))


class Ending(NamedTuple):
    """The end of one attempt (``finish.lua``, ``wf_finish.lua``)."""

    event: str
    lease: str
    body: str | bytes
    error_type: str
    #: 1 or 0 (FAIL only)
    retryable: int | str
    #: -1 = the task's exponential backoff
    delay_ms: int | str
    jitter: float | str
    #: FAIL: the bounded traceback of the handler's exception (rsjobs.worker.failures)
    traceback: str = ""
    #: what the handler charged to the attempt ('' = nothing; rsjobs.costs.format_charges)
    charges: str = ""


FINISH = Layout("finish", (), "task", Ending._fields, TaskKeys._fields, ("limits", "wake"))


def finish(c: Common, k: Keys, source: str, items: Iterable[tuple[TaskKeys, Ending]]) -> Packed:
    return _pack(FINISH, c, source, (), items, (k.limits, k.wake))


class BeatArgs(NamedTuple):
    consumer: str
    lease_ms: int | str


class BeatItem(NamedTuple):
    lease: str
    entry: str
    #: '' = no change, else 0-100
    progress: str
    message: str


HEARTBEAT = Layout("heartbeat", BeatArgs._fields, "task", BeatItem._fields, TaskKeys._fields)


def heartbeat(
    c: Common, source: str, args: BeatArgs, items: Iterable[tuple[TaskKeys, BeatItem]]
) -> Packed:
    return _pack(HEARTBEAT, c, source, args, items)


RELEASE = Layout("release", (), "task", Entry._fields, TaskKeys._fields)


def release(c: Common, source: str, items: Iterable[tuple[TaskKeys, Entry]]) -> Packed:
    return _pack(RELEASE, c, source, (), items)


class Member(NamedTuple):
    """A zset member ``<queue>:<id>`` (``promote.lua``)."""

    member: str


PROMOTE = Layout("promote", (), "candidate", Member._fields, TaskKeys._fields)


def promote(c: Common, source: str, items: Iterable[tuple[TaskKeys, Member]]) -> Packed:
    return _pack(PROMOTE, c, source, (), items)


# -- deferred attempts -----------------------------------------------------------------------


class DeferArgs(NamedTuple):
    """``defer.lua``: the lease holder hands its attempt to an outside job."""

    lease: str
    external_id: str
    provider: str
    max_wait_ms: int | str
    #: 0 = no polls
    poll_every_ms: int | str
    message: str
    #: what the handler charged before deferring ('' = nothing; rsjobs.costs)
    charges: str = ""


#: the keys a deferred task's calls take after its task keys
DEFER_TAIL = ("external", "polls")

DEFER = Layout("defer", DeferArgs._fields, "task", (), TaskKeys._fields, DEFER_TAIL, exact=1)


def defer(
    c: Common, k: Keys, source: str, keys: TaskKeys, external: str, args: DeferArgs
) -> Packed:
    return _pack(DEFER, c, source, args, [(keys, ())], (external, k.polls))


class ResolveArgs(NamedTuple):
    """``resolve.lua``: an outside result (COMPLETE, FAIL) or a poller's AGAIN."""

    event: str
    #: '' = the task's current attempt
    attempt: int | str
    #: '' = any
    external_id: str
    body: str | bytes
    error_type: str
    retryable: int | str
    jitter: float | str
    #: callback | poll | api
    via: str
    #: COMPLETE / FAIL: what the outside job cost ('' = nothing; rsjobs.costs)
    charges: str = ""


RESOLVE = Layout("resolve", ResolveArgs._fields, "task", (), TaskKeys._fields, DEFER_TAIL, exact=1)


def resolve(
    c: Common, k: Keys, source: str, keys: TaskKeys, external: str, args: ResolveArgs
) -> Packed:
    return _pack(RESOLVE, c, source, args, [(keys, ())], (external, k.polls))


class PollArgs(NamedTuple):
    claim_ms: int | str


POLL = Layout("poll", PollArgs._fields, "candidate", Member._fields, TaskKeys._fields, ("polls",))


def poll(
    c: Common, k: Keys, source: str, args: PollArgs, items: Iterable[tuple[TaskKeys, Member]]
) -> Packed:
    return _pack(POLL, c, source, args, items, (k.polls,))


# -- control ---------------------------------------------------------------------------------


class ControlArgs(NamedTuple):
    event: str
    message: str
    channel: str


CONTROL = Layout(
    "control", ControlArgs._fields, "task", (), TaskKeys._fields, ("waiting",), exact=1
)


def control(c: Common, k: Keys, source: str, keys: TaskKeys, args: ControlArgs) -> Packed:
    return _pack(CONTROL, c, source, args, [(keys, ())], (k.waiting,))


class RetryArgs(NamedTuple):
    """``retry.lua``: RETRY or REPLAY of a finished task as the new task ``new_id``."""

    event: str
    new_id: str
    message: str
    #: the task the old one's ``retried_as`` named when the caller found it gone ('' = none)
    replaces: str


RETRY = Layout("retry", RetryArgs._fields, "task", (), TaskKeys._fields, exact=2)


def retry(c: Common, source: str, old: TaskKeys, new: TaskKeys, args: RetryArgs) -> Packed:
    return _pack(RETRY, c, source, args, [(old, ()), (new, ())])


class QueueArgs(NamedTuple):
    """``queue.lua``: PAUSE_QUEUE or RESUME_QUEUE of one queue."""

    event: str
    queue: str
    reason: str
    channel: str


QUEUE = Layout("queue", QueueArgs._fields, tail_keys=("queues", "paused"))


def queue(c: Common, k: Keys, source: str, args: QueueArgs) -> Packed:
    return _pack(QUEUE, c, source, args, (), (k.queues, k.paused))


class QueueAddArgs(NamedTuple):
    """``queue_add.lua``: register queue names for an owner, held to its quota."""

    owner: str
    quota: int | str
    #: JSON array of the names
    queues: str


QUEUE_ADD = Layout("queue_add", QueueAddArgs._fields, tail_keys=("queues", "owners"))


def queue_add(c: Common, k: Keys, source: str, args: QueueAddArgs) -> Packed:
    return _pack(QUEUE_ADD, c, source, args, (), (k.queues, k.queue_owners))


QUEUE_DELETE = Layout(
    "queue_delete",
    ("queue", "dry"),
    "level",
    (),
    ("stream",),
    ("queues", "owners", "paused", "workers", "series", "parked", "throttled", "claims"),
)


def queue_delete(c: Common, k: Keys, source: str, queue: str, *, dry: bool) -> Packed:
    """``queue_delete.lua`` for one queue on one shard (``k``: that shard's keys)."""
    return _pack(
        QUEUE_DELETE,
        c,
        source,
        (queue, "1" if dry else "0"),
        (((s,), ()) for s in k.queue_streams(queue)),
        (
            k.queues,
            k.queue_owners,
            k.paused,
            k.workers,
            k.series(queue),
            k.parked(queue),
            k.throttled(queue),
            k.claims(queue),
        ),
    )


LINK = Layout("link", (), "task", (), TaskKeys._fields, exact=2)


def link(c: Common, source: str, original: TaskKeys, clone: TaskKeys) -> Packed:
    return _pack(LINK, c, source, (), [(original, ()), (clone, ())])


# -- the reaper's ----------------------------------------------------------------------------


class ReclaimArgs(NamedTuple):
    min_idle_ms: int | str
    max_deliveries: int | str
    dead_leases: int | str
    default_lease_ms: int | str
    deadletter_max: int | str


RECLAIM = Layout(
    "reclaim",
    ReclaimArgs._fields,
    "entry",
    Entry._fields,
    TaskKeys._fields,
    ("deadletter", "workers"),
)


def reclaim(
    c: Common, k: Keys, source: str, args: ReclaimArgs, items: Iterable[tuple[TaskKeys, Entry]]
) -> Packed:
    return _pack(RECLAIM, c, source, args, items, (k.deadletter, k.workers))


class RecountArgs(NamedTuple):
    queue: str


#: the tail keys of ``recount.lua``: the queue's level streams
LEVEL_KEYS = tuple(f"level{p}" for p in range(10))

RECOUNT = Layout(
    "recount", RecountArgs._fields, "entry", Entry._fields, TaskKeys._fields, LEVEL_KEYS
)


def recount(
    c: Common, k: Keys, source: str, queue: str, items: Iterable[tuple[TaskKeys, Entry]]
) -> Packed:
    return _pack(RECOUNT, c, source, (queue,), items, k.queue_streams(queue))


class DeadlineArgs(NamedTuple):
    grace_ms: int | str


class DeadlineItem(NamedTuple):
    member: str
    jitter: float | str


DEADLINE = Layout(
    "deadline", DeadlineArgs._fields, "candidate", DeadlineItem._fields, TaskKeys._fields
)


def deadline(
    c: Common, source: str, args: DeadlineArgs, items: Iterable[tuple[TaskKeys, DeadlineItem]]
) -> Packed:
    return _pack(DEADLINE, c, source, args, items)


class WorkersArgs(NamedTuple):
    dead_leases: int | str
    default_lease_ms: int | str
    forget_ms: int | str


WORKERS = Layout(
    "workers", WorkersArgs._fields, "queue", (), ("queue",), ("workers", "workers_dead")
)


def workers(c: Common, k: Keys, source: str, args: WorkersArgs, queues: Iterable[str]) -> Packed:
    return _pack(
        WORKERS, c, source, args, (((k.queue(q),), ()) for q in queues), (k.workers, k.workers_dead)
    )


class QuarantineArgs(NamedTuple):
    task_id: str
    queue: str
    indexed_in: str
    ref: str
    step: str
    why: str
    deadletter_max: int | str


QUARANTINE = Layout(
    "quarantine", QuarantineArgs._fields, "task", (), TaskKeys._fields, ("deadletter",), exact=1
)


def quarantine(c: Common, k: Keys, source: str, keys: TaskKeys, args: QuarantineArgs) -> Packed:
    return _pack(QUARANTINE, c, source, args, [(keys, ())], (k.deadletter,))


class TrimArgs(NamedTuple):
    #: tags:trim entries one call handles, until this many tasks of theirs were handled
    most: int | str


TRIM = Layout("trim", TrimArgs._fields)


def trim(c: Common, source: str, args: TrimArgs) -> Packed:
    return _pack(TRIM, c, source, args, ())


class SummaryArgs(NamedTuple):
    #: the hash fields to read, separated by spaces
    fields: str
    #: the list's filters, a JSON object (see summaries.lua)
    filter: str


class Expect(NamedTuple):
    """What a task's index says of it: ``"<states>|<entry>"`` (``summaries.lua``)."""

    expect: str


SUMMARIES = Layout("summaries", SummaryArgs._fields, "task", Expect._fields, ("task",))


def summaries(
    c: Common, source: str, args: SummaryArgs, tasks: Iterable[tuple[str, Expect]]
) -> Packed:
    return _pack(SUMMARIES, c, source, args, (((key,), item) for key, item in tasks))


class SeriesArgs(NamedTuple):
    #: how long samples are kept (ms)
    keep_ms: int


class SeriesQueue(NamedTuple):
    """One queue of a ``series.lua`` call."""

    queue: str
    #: when its oldest undelivered work entry was queued (ms; 0: none)
    oldest: int


SERIES = Layout("series", SeriesArgs._fields, "queue", SeriesQueue._fields, ("series",))


def series(
    c: Common, source: str, args: SeriesArgs, queues: Iterable[tuple[str, SeriesQueue]]
) -> Packed:
    return _pack(SERIES, c, source, args, (((key,), item) for key, item in queues))


# -- workflows -------------------------------------------------------------------------------


def _wf(
    layout: Layout,
    c: Common,
    source: str,
    history_max: int,
    wf: WorkflowKeys,
    args: Iterable[Value],
    items: Iterable[tuple[Sequence[str], Sequence[Value]]] = (),
) -> Packed:
    return _pack(layout, c, source, (c.channel, history_max, *args), items, wf)


class WfStartArgs(NamedTuple):
    id: str
    definition: str
    owner: str
    input: bytes | str
    plan: bytes | str
    n_stages: int
    first_stage: str
    need: int
    restarted_from: str


WF_START = Layout("wf_start", WF_COMMON + WfStartArgs._fields, tail_keys=WorkflowKeys._fields)


def wf_start(
    c: Common, source: str, history_max: int, wf: WorkflowKeys, args: WfStartArgs
) -> Packed:
    return _wf(WF_START, c, source, history_max, wf, args)


class WfTask(NamedTuple):
    """One task for a workflow to create (``create_task`` in ``wf.lua``): a
    :class:`NewTask`'s values and its item and asset kind."""

    id: str
    type: str
    queue: str
    payload: bytes | str
    options: bytes | str
    item: str
    kind: str


class WfSpawnArgs(NamedTuple):
    version: int
    stage: int


WF_SPAWN = Layout(
    "wf_spawn",
    WF_COMMON + WfSpawnArgs._fields,
    "task",
    WfTask._fields,
    TaskKeys._fields,
    WorkflowKeys._fields,
)


def wf_spawn(
    c: Common,
    source: str,
    history_max: int,
    wf: WorkflowKeys,
    args: WfSpawnArgs,
    tasks: Iterable[tuple[TaskKeys, WfTask]],
) -> Packed:
    return _wf(WF_SPAWN, c, source, history_max, wf, args, tasks)


WF_FINISH = Layout(
    "wf_finish",
    WF_COMMON,
    "task",
    Ending._fields,
    TaskKeys._fields,
    WorkflowKeys._fields,
    exact=1,
)


def wf_finish(
    c: Common, source: str, history_max: int, wf: WorkflowKeys, keys: TaskKeys, ending: Ending
) -> Packed:
    return _wf(WF_FINISH, c, source, history_max, wf, (), [(keys, ending)])


class WfGateArgs(NamedTuple):
    event: str
    #: '' = any
    expect_version: int | str
    #: a stage index, '' = any
    expect_stage: int | str
    message: str


WF_GATE = Layout("wf_gate", WF_COMMON + WfGateArgs._fields, tail_keys=WorkflowKeys._fields)


def wf_gate(c: Common, source: str, history_max: int, wf: WorkflowKeys, args: WfGateArgs) -> Packed:
    return _wf(WF_GATE, c, source, history_max, wf, args)


class WfRetryArgs(NamedTuple):
    version: int
    stage: int
    message: str


class WfRetryItem(NamedTuple):
    """A failed slot: its failed task's id, then the new task (:class:`WfTask`)."""

    failed_id: str
    id: str
    type: str
    queue: str
    payload: bytes | str
    options: bytes | str
    item: str
    kind: str


#: a failed slot's KEYS: the failed task's four, then the new task's four
RETRY_KEYS = tuple(f"failed_{n}" for n in TaskKeys._fields) + TaskKeys._fields

WF_RETRY = Layout(
    "wf_retry",
    WF_COMMON + WfRetryArgs._fields,
    "failed slot",
    WfRetryItem._fields,
    RETRY_KEYS,
    WorkflowKeys._fields,
)


def wf_retry(
    c: Common,
    source: str,
    history_max: int,
    wf: WorkflowKeys,
    args: WfRetryArgs,
    slots: Iterable[tuple[TaskKeys, TaskKeys, WfRetryItem]],
) -> Packed:
    items = (((*failed, *new), item) for failed, new, item in slots)
    return _wf(WF_RETRY, c, source, history_max, wf, args, items)


class OpenTask(NamedTuple):
    """An open task of a workflow, as the caller read the open set."""

    id: str


def _open_layout(script: str, own: tuple[str, ...]) -> Layout:
    return Layout(
        script,
        WF_COMMON + own,
        "open task",
        OpenTask._fields,
        TaskKeys._fields,
        WorkflowKeys._fields,
    )


class RegenerateTask(NamedTuple):
    """A task a regenerate replaces: an open task (``role`` open: cancelled), or the task
    of a slot it leaves behind (``left``: superseded, see ``wf_regenerate.lua``)."""

    id: str
    role: str


class WfRegenerateArgs(NamedTuple):
    stage: int
    reason: str
    max_versions: int
    #: '' = any
    expect_version: int | str


class WfCancelArgs(NamedTuple):
    reason: str


class WfSyncArgs(NamedTuple):
    wf_id: str


class WfAbortArgs(NamedTuple):
    wf_id: str
    reason: str


WF_REGENERATE = Layout(
    "wf_regenerate",
    WF_COMMON + WfRegenerateArgs._fields,
    "task",
    RegenerateTask._fields,
    TaskKeys._fields,
    WorkflowKeys._fields,
)
WF_CANCEL = _open_layout("wf_cancel", WfCancelArgs._fields)
WF_SYNC = _open_layout("wf_sync", WfSyncArgs._fields)
WF_ABORT = _open_layout("wf_abort", WfAbortArgs._fields)


def wf_regenerate(
    c: Common,
    source: str,
    history_max: int,
    wf: WorkflowKeys,
    args: WfRegenerateArgs,
    tasks: Iterable[tuple[TaskKeys, RegenerateTask]],
) -> Packed:
    return _wf(WF_REGENERATE, c, source, history_max, wf, args, tasks)


def wf_cancel(
    c: Common,
    source: str,
    history_max: int,
    wf: WorkflowKeys,
    args: WfCancelArgs,
    open_tasks: Iterable[tuple[TaskKeys, OpenTask]],
) -> Packed:
    return _wf(WF_CANCEL, c, source, history_max, wf, args, open_tasks)


def wf_sync(
    c: Common,
    source: str,
    history_max: int,
    wf: WorkflowKeys,
    args: WfSyncArgs,
    open_tasks: Iterable[tuple[TaskKeys, OpenTask]],
) -> Packed:
    return _wf(WF_SYNC, c, source, history_max, wf, args, open_tasks)


def wf_abort(
    c: Common,
    source: str,
    history_max: int,
    wf: WorkflowKeys,
    args: WfAbortArgs,
    open_tasks: Iterable[tuple[TaskKeys, OpenTask]],
) -> Packed:
    return _wf(WF_ABORT, c, source, history_max, wf, args, open_tasks)


class WfReadArgs(NamedTuple):
    #: "state": the hash, slots and assets; "open": the slots and the open set
    view: str


WF_READ = Layout("wf_read", WF_COMMON + WfReadArgs._fields, tail_keys=WorkflowKeys._fields)


def wf_read(c: Common, source: str, history_max: int, wf: WorkflowKeys, args: WfReadArgs) -> Packed:
    """``wf_read.lua``: a workflow's keys as of one moment (the store calls it read-only)."""
    return _wf(WF_READ, c, source, history_max, wf, args)


# -- the namespace's layout (store/marker.py, store/migrate.py) ------------------------------

MARKER = Layout("marker", ("current",), tail_keys=("layout", "deadletter"))


def marker(c: Common, k: Keys, source: str, current: int | str) -> Packed:
    return _pack(MARKER, c, source, (str(current),), (), (k.layout, k.deadletter))


SHARDS = Layout("shards", ("wanted",), tail_keys=("deadletter", "shards"))


def shards(c: Common, k: Keys, source: str, wanted: str) -> Packed:
    """``shards.lua`` on shard 0: read the namespace's shards, setting ``wanted`` (JSON)
    on a namespace that holds no data yet ('' : read only)."""
    return _pack(SHARDS, c, source, (wanted,), (), (k.deadletter, k.shards))


class Layout1Task(NamedTuple):
    """The two KEYS of one task in a ``migrate.lua`` call: its hash and the history stream
    it had in layout 1."""

    task: str
    history: str


class MigrateArgs(NamedTuple):
    #: 1: check and count only
    dry_run: int | str


MIGRATE = Layout("migrate", MigrateArgs._fields, "task", (), Layout1Task._fields)


def migrate(c: Common, source: str, args: MigrateArgs, tasks: Iterable[Layout1Task]) -> Packed:
    return _pack(MIGRATE, c, source, args, ((t, ()) for t in tasks))


#: every script's layout, by name (``rsjobs.store.scripts.SCRIPT_NAMES``)
class HooksDueArgs(NamedTuple):
    #: the most retries to claim
    most: int
    #: how long a claim holds (ms)
    claim_ms: int


HOOKS_DUE = Layout("hooks_due", HooksDueArgs._fields, tail_keys=("hooks_retry",))


def hooks_due(c: Common, k: Keys, source: str, args: HooksDueArgs) -> Packed:
    return _pack(HOOKS_DUE, c, source, args, (), (k.hooks_retry,))


class HookConsumer(NamedTuple):
    """A consumer of the hook stream's group (``hooks_forget.lua``)."""

    name: str


HOOKS_FORGET = Layout("hooks_forget", ("group",), "consumer", HookConsumer._fields, (), ("hooks",))


def hooks_forget(c: Common, k: Keys, source: str, group: str, names: Iterable[str]) -> Packed:
    return _pack(HOOKS_FORGET, c, source, (group,), (((), (n,)) for n in names), (k.hooks,))


class ScheduleArgs(NamedTuple):
    """A tick of a recurring schedule (``schedule.lua``)."""

    name: str
    #: its settings as read (JSON text)
    settings: str
    #: the tick fired, and the next one after now (ms)
    due: int
    next: int
    #: ticks missed and not fired
    skipped: int


SCHEDULE = Layout(
    "schedule",
    ScheduleArgs._fields,
    "task",
    NewTask._fields,
    TaskKeys._fields,
    ("schedules", "schedules_due", "schedules_log"),
    exact=1,
)


def schedule(
    c: Common, k: Keys, source: str, args: ScheduleArgs, keys: TaskKeys, task: NewTask
) -> Packed:
    return _pack(
        SCHEDULE, c, source, args, [(keys, task)], (k.schedules, k.schedules_due, k.schedules_log)
    )


LAYOUTS: dict[str, Layout] = {
    lay.script: lay
    for lay in (
        ENQUEUE,
        AFTER,
        SUCCESSORS,
        START,
        TAKE,
        FINISH,
        HEARTBEAT,
        CONTROL,
        RETRY,
        QUEUE,
        QUEUE_ADD,
        QUEUE_DELETE,
        PROMOTE,
        RELEASE,
        DEFER,
        RESOLVE,
        POLL,
        RECLAIM,
        RECOUNT,
        DEADLINE,
        WORKERS,
        LINK,
        QUARANTINE,
        MARKER,
        SHARDS,
        MIGRATE,
        TRIM,
        SUMMARIES,
        SERIES,
        WF_START,
        WF_SPAWN,
        WF_FINISH,
        WF_GATE,
        WF_RETRY,
        WF_REGENERATE,
        WF_CANCEL,
        WF_SYNC,
        WF_ABORT,
        WF_READ,
        HOOKS_DUE,
        HOOKS_FORGET,
        SCHEDULE,
    )
}
