"""Every Redis key rsjobs uses is built here, and only here.

All keys of one namespace share the hash tag ``{namespace}``, so every script touches a
single slot and the same code runs unchanged on Redis Cluster. Lua scripts never build a
key name: they receive every key through ``KEYS``.

Layout (namespace ``default``), readable with plain ``redis-cli``::

    rsjobs:{default}:task:<id>            hash    the task: state, attempt, lease, payload,
                                                  result, and its history (h<n>: every
                                                  transition, and the first refusal of each
                                                  kind in a state; repeats are counted in
                                                  rep:<entry id>; see store/history.py);
                                                  at most 112 entries: the first 16 and
                                                  the last 96, the ones between counted in
                                                  hx (docs/task-size.md)
    rsjobs:{default}:queue:<name>         stream  work entries (field ``id``; ``o``: the task's
                                                  owner, when it has one), group
                                                  ``workers``: priority 0 (the default)
    rsjobs:{default}:queue:<name>|p<N>    stream  the same for priority N (1..9): one stream per
                                                  level a queue uses (see below)
    rsjobs:{default}:queues               set     names of the queues in use (``rsjobs queue
                                                  delete`` removes one: scripts/queue_delete.lua)
    rsjobs:{default}:queues:owners        hash    ``q|<queue>`` -> the owner whose task first
                                                  named it, ``o|<owner>`` -> how many queues
                                                  that owner made: held to
                                                  ``Settings.queue_quota`` (scripts/queue_add.lua)
    rsjobs:{default}:paused               hash    queue name -> its pause record (JSON: at,
                                                  by, reason): workers start nothing of it
    rsjobs:{default}:scheduled            zset    ``<queue>:<id>`` by due time (ms): delay, backoff
    rsjobs:{default}:deadlines            zset    ``<queue>:<id>`` by execution deadline (ms)
    rsjobs:{default}:events               stream  task id and entry number of every history
                                                  entry but a task's first (MAXLEN ~)
    rsjobs:{default}:stats                hash    ``<queue>:<STATE>`` counts, transition counters,
                                                  duration histograms (task, attempt per
                                                  queue/type/stage, workflow) and retries
    rsjobs:{default}:costs                hash    ``<dim>|<name>|<unit>|<category>`` -> an
                                                  integer: attempts, run_ms, wait_ms and
                                                  charges (millionths) per queue, type,
                                                  owner and stage, per category (ok or a
                                                  waste kind); cumulative (docs/costs.md)
    rsjobs:{default}:dedup:<key>          string  id of the task submitted with that dedup key
    rsjobs:{default}:workers              hash    worker name -> JSON of its registration
    rsjobs:{default}:control              pubsub  cancel / pause notices to workers
    rsjobs:{default}:deadletter           stream  dead-lettered tasks (MAXLEN ~), by the reaper
    rsjobs:{default}:workers:dead         hash    worker name -> JSON {beat_at, since}: reaper marks
    rsjobs:{default}:reaper:guard         string  name of the reaper sweeping now (SET NX PX)
    rsjobs:{default}:series:<queue>       stream  the queue's counters sampled once a minute
                                                  by the reaper, id ``<minute ms>-0``, the
                                                  last 24 h (``scripts/series.lua``)
    rsjobs:{default}:polls                zset    ``<queue>:<id>`` of DEFERRED tasks completed
                                                  by polling, by next poll time (ms)
    rsjobs:{default}:external:<p>:<id>    string  ``<attempt> <queue> <task id>`` of the task
                                                  waiting on outside job ``<id>`` of provider
                                                  ``<p>`` (scripts/defer.lua); expires with
                                                  the task
    rsjobs:{default}:release              stream  per finished predecessor that has successors:
                                                  id, q, s (its state), sc (its successors),
                                                  r (result) or err; deleted once its
                                                  successors counted it (scripts/successors.lua)
    rsjobs:{default}:waiting              zset    ``<queue>:<id>`` of each WAITING task (a
                                                  successor waiting for its predecessors), by
                                                  the time it was created (ms)
    rsjobs:{default}:limits               hash    per-owner concurrency limits and rate limits
                                                  (``rsjobs.limits``): ``c|<queue>|*`` the
                                                  queue's default per-owner limit, ``c|<queue>|
                                                  <owner>`` an owner's own; ``r|<queue>`` the
                                                  queue's rate, ``r|<queue>|<type>`` a type's,
                                                  ``rr|<queue>|<type>`` its retries' (``<per
                                                  second> <burst>``)
    rsjobs:{default}:rates                hash    the token buckets' state: the same ``r|`` /
                                                  ``rr|`` fields -> theoretical arrival time
                                                  (ms, GCRA; see scripts/start.lua)
    rsjobs:{default}:running              hash    ``<queue>|<owner>`` -> its RUNNING tasks (kept
                                                  by ``transition`` in fsm.lua; a field at 0
                                                  is deleted)
    rsjobs:{default}:parked:<queue>       zset    tasks of the queue parked on their owner's
                                                  limit: ``<owner>|<9-priority><entry>|<id>``,
                                                  score 0 (text order: by owner, then highest
                                                  priority, then oldest); their work entries
                                                  are held by the consumer ``~waiting``
    rsjobs:{default}:throttled:<queue>    zset    tasks of the queue waiting on a rate limit:
                                                  ``<priority><entry>|<id>`` scored by the
                                                  start time reserved for them (ms); their
                                                  entries are held by ``~waiting`` too
    rsjobs:{default}:claims:<queue>       hash    consumer -> ``<expiry ms> <owner>=<n>:<its
                                                  expiry> ...``: the tasks take.lua handed a
                                                  worker that start.lua has not seen yet,
                                                  per owner with a limit (counted against
                                                  it; an owner's claim expires 10 s after
                                                  the take that first handed one out)
    rsjobs:{default}:wake                 stream  an entry ``q=<queue>`` when a task whose owner
                                                  has a limit ends (finish.lua): idle workers
                                                  wait on it with XREAD and take again
                                                  (MAXLEN ~ 100)
    rsjobs:{default}:layout               string  the layout the namespace's data is in (``2``;
                                                  none: empty, or written before it had one;
                                                  see store/marker.py)
    rsjobs:{default}:shards               string  the namespace's shards, JSON ``{"count": S,
                                                  "tags": [...]}`` (store/shards.py); none:
                                                  one shard (S = 1 writes no key of its own)

A namespace of S > 1 shards has every key above once per shard, with the shard's hash tag
in place of ``{default}`` (``rsjobs:{default#3}:task:<id>``, ``rsjobs:{default#3}:queue:
<name>``...; shard 0 keeps ``{default}``), except what only shard 0 holds: the queue
names, the schedules, the webhooks' settings, the layout marker, the shards metadata and
the reaper's schedule guard. Settings that scripts read in a task's slot (``paused``,
``hooks:on``) are written to every shard; so are the workers' registrations (``workers``:
reclaim.lua and workers.lua read them in the slot of the shard they sweep, and mark dead
in that shard's ``workers:dead``). Each shard has its own ``reaper:guard`` (several
reapers split the shards).

Recurring tasks (``rsjobs.schedules``; the reaper fires their ticks with ``schedule.lua``)::

    rsjobs:{default}:schedules            hash    schedule name -> its settings (JSON)
    rsjobs:{default}:schedules:due        zset    schedule name by its next tick (ms)
    rsjobs:{default}:schedules:log        hash    ``<name>:fired`` / ``:skipped`` counts,
                                                  ``<name>:last`` task id, ``:last_at`` tick

The list indexes (``rsjobs.store.index`` reads them; ``index_move`` in ``fsm.lua`` keeps
them; the reaper trims them with retention). PENDING and RUNNING tasks are listed from
their queue's stream, SCHEDULED ones from ``scheduled``, WAITING ones from ``waiting``
(kept by the scripts that move a task in or out of WAITING): nothing else is kept for
them::

    rsjobs:{default}:done:<STATE>         stream  per terminal state, one entry per task that
                                                  reached it: field = its queue, value = its id
                                                  (trimmed by time: MINID ~ now - retention)
    rsjobs:{default}:paused:tasks         zset    ``<queue>:<id>`` of each PAUSED task, by the
                                                  time it was paused (``paused`` holds the
                                                  paused queues)
    rsjobs:{default}:tags                 zset    owner and label index, score 0, read in text
                                                  order: ``<tag>|<created ms>|<id>``, tag
                                                  ``o<n>:<owner>`` or ``l<n>:<key>=<value>``
    rsjobs:{default}:tags:trim            stream  per call that finished tasks with tags:
                                                  each one's id, created time, owner, labels;
                                                  the reaper removes their tags entries once
                                                  past retention

Hooks and webhooks (``rsjobs.hooks``; see ``docs/hooks.md``)::

    rsjobs:{default}:hooks                stream  id, q, s (state), e (event), hid of each
                                                  change of state a listener wants (group
                                                  ``hooks``; deleted once handled, no MAXLEN)
    rsjobs:{default}:hooks:on             hash    listener -> states it listens for ("*")
    rsjobs:{default}:hooks:retry          zset    JSON of a pending retry, by due time (ms)
    rsjobs:{default}:hooks:dead           stream  hook runs that failed every attempt
    rsjobs:{default}:webhooks             hash    webhook name -> its settings (JSON)
    rsjobs:{default}:webhooks:log:<id>    list    a task's webhook deliveries (JSON), newest
                                                  first, capped, kept as long as the task

Workflows (``rsjobs.workflows``; the scripts ``scripts/wf_*.lua`` get these seven keys, in
this order, after their task keys; see ``wf.lua``)::

    rsjobs:{default}:wf:<id>              hash    the workflow: status, stage, version, plan
    rsjobs:{default}:wf:<id>:history      stream  every workflow transition and refused action
    rsjobs:{default}:wf:<id>:tasks        hash    slot ``<version>:<stage>:<item>`` -> task id
    rsjobs:{default}:wf:<id>:assets       hash    slot ``<version>:<stage>:<item>`` -> asset JSON
    rsjobs:{default}:wf:<id>:open         set     ids of its tasks whose end it has not seen yet
    rsjobs:{default}:workflows:active     set     ids of workflows the driver must visit
    rsjobs:{default}:workflows            zset    every workflow id by creation time (ms),
                                                  in start order (see wf_start.lua)

Tasks of a workflow are ordinary task hashes with the extra fields ``wf``, ``wf_version``,
``wf_stage``, ``wf_item``, ``wf_kind`` and ``wf_stage_name`` (``<definition>/<stage>``: its
stage in the costs hash).

Priorities (0..9, higher first): a task of priority N > 0 has its work entries on its
level's stream ``queue:<name>|p<N>`` (the field ``pr`` of its hash says N; a priority-0
task stores nothing new), and its members in the ``scheduled``, ``deadlines``,
``paused:tasks`` and ``polls`` zsets name its level, ``<name>|p<N>:<id>``: whoever reads a
member builds the task's keys from it (:meth:`Keys.task_keys` takes the level name as a
queue). Every script refuses a task whose queue key is not its level's stream.

The ``deadlines`` zset also holds the queue-wait deadline (``expires_at``) of a task that
was enqueued with ``wait_timeout_ms`` and has not started yet; ``start.lua`` replaces that
score with the execution deadline (or removes it, for a task without one). The reaper
(``scripts/deadline.lua``) tells them apart by the task's state; ``start.lua`` and
``promote.lua`` enforce the queue-wait deadline themselves too.
"""

from __future__ import annotations

from typing import NamedTuple

from ..names import validate_name

__all__ = [
    "GROUP",
    "MAX_PRIORITY",
    "PRIORITIES",
    "TERMINAL_STATES",
    "WAITING_CONSUMER",
    "Keys",
    "TaskKeys",
    "WorkflowKeys",
    "level_name",
    "member",
    "parse_member",
    "split_level",
    "split_member",
    "validate_name",
]

#: The consumer group every queue stream is read through.
GROUP = "workers"

#: The priority levels a task may have: 0 (the default) to 9, higher first.
PRIORITIES = range(10)
MAX_PRIORITY = PRIORITIES[-1]

#: The consumer of the queue groups that holds the work entries of tasks waiting on a
#: limit (``parked:<queue>``, ``throttled:<queue>``): no worker is named so (a worker
#: refuses the name), and the reaper leaves its entries alone.
WAITING_CONSUMER = "~waiting"

#: The terminal states, in the order of their ``done:<STATE>`` streams among the common KEYS.
TERMINAL_STATES = ("SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT")


class TaskKeys(NamedTuple):
    """The three KEYS of one task in a script call, in their order (``fsm.lua``)."""

    task: str
    queue: str
    dedup: str


class WorkflowKeys(NamedTuple):
    """The seven KEYS every workflow script ends with, in their order (``wf.lua``)."""

    wf: str
    wf_history: str
    wf_tasks: str
    wf_assets: str
    wf_open: str
    wf_active: str
    wf_index: str


def level_name(queue: str, priority: int = 0) -> str:
    """The name of a queue's priority level: the queue's own for 0, ``<queue>|p<N>`` for
    N > 0 (queue names have no ``|``). Its stream is ``queue:<level name>``."""
    return f"{queue}|p{priority}" if priority else queue


def split_level(name: str) -> tuple[str, int]:
    """Inverse of :func:`level_name`: ``(queue, priority)``."""
    queue, sep, level = name.partition("|p")
    if sep and level.isdigit():
        return queue, int(level)
    return name, 0


def member(queue: str, task_id: str, priority: int = 0) -> str:
    """The zset member for a task: carries its queue's level so a sweeper can build its
    keys (``member`` in ``fsm.lua``)."""
    return f"{level_name(queue, priority)}:{task_id}"


def split_member(value: str) -> tuple[str, str]:
    """Inverse of :func:`member`: ``(level name, task_id)`` (the level name is the queue's
    for priority 0; :meth:`Keys.task_keys` takes either)."""
    queue, _, task_id = value.rpartition(":")
    return queue, task_id


def parse_member(value: str) -> tuple[str, int, str]:
    """A member as ``(queue, priority, task_id)``."""
    name, task_id = split_member(value)
    queue, priority = split_level(name)
    return queue, priority, task_id


class Keys:
    """Key names for one namespace, or for one shard of it: ``tag`` (a shard's hash tag,
    :mod:`rsjobs.store.shards`) replaces ``{namespace}`` in every key; the namespace's name
    stays what users see."""

    __slots__ = (
        "control",
        "costs",
        "cursor_key",
        "deadletter",
        "deadlines",
        "done",
        "events",
        "hooks",
        "hooks_dead",
        "hooks_on",
        "hooks_retry",
        "layout",
        "limits",
        "namespace",
        "nodedup",
        "paused",
        "paused_tasks",
        "polls",
        "prefix",
        "queue_owners",
        "queues",
        "rates",
        "reaper_guard",
        "release",
        "running",
        "scheduled",
        "schedules",
        "schedules_due",
        "schedules_log",
        "shards",
        "stats",
        "tag",
        "tags",
        "tags_trim",
        "waiting",
        "wake",
        "webhooks",
        "workers",
        "workers_dead",
        "workflows",
        "workflows_active",
    )

    def __init__(self, namespace: str = "default", *, tag: str | None = None) -> None:
        validate_name("namespace", namespace)
        self.namespace = namespace
        #: the hash tag: the namespace's own (shard 0), or a shard's (rsjobs.store.shards)
        self.tag = tag or namespace
        self.prefix = f"rsjobs:{{{self.tag}}}:"
        p = self.prefix
        #: the namespace's shards (rsjobs.store.shards): meaningful on shard 0's tag only
        self.shards = p + "shards"
        self.events = p + "events"
        self.stats = p + "stats"
        self.scheduled = p + "scheduled"
        self.deadlines = p + "deadlines"
        self.queues = p + "queues"
        #: who made which queue, and how many each owner made (the per-owner quota)
        self.queue_owners = p + "queues:owners"
        self.paused = p + "paused"
        self.workers = p + "workers"
        self.control = p + "control"
        self.deadletter = p + "deadletter"
        self.workers_dead = p + "workers:dead"
        self.reaper_guard = p + "reaper:guard"
        self.layout = p + "layout"
        self.polls = p + "polls"
        self.workflows = p + "workflows"
        self.workflows_active = p + "workflows:active"
        #: the list indexes: one stream per terminal state (TERMINAL_STATES' order), the
        #: paused tasks, the owner and label index and its trim queue
        self.done = tuple(f"{p}done:{s}" for s in TERMINAL_STATES)
        self.paused_tasks = p + "paused:tasks"
        self.tags = p + "tags"
        self.tags_trim = p + "tags:trim"
        #: the key that seals the lists' cursors (rsjobs.store.seal): 32 random bytes as
        #: hex, set once (SET NX) by the first page that hands out a cursor
        self.cursor_key = p + "cursor:key"
        #: hooks (rsjobs.hooks): the stream the scripts write changes of state to when a
        #: listener wants them, who listens for what, the retries by due time, the dead
        #: letters, the webhooks' settings
        self.hooks = p + "hooks"
        self.hooks_on = p + "hooks:on"
        self.hooks_retry = p + "hooks:retry"
        self.hooks_dead = p + "hooks:dead"
        self.webhooks = p + "webhooks"
        #: successors (the finished predecessors whose successors wait), costs (run time,
        #: attempts and charges), per-owner RUNNING counts (limits)
        self.release = p + "release"
        self.costs = p + "costs"
        self.running = p + "running"
        #: the WAITING tasks (successors waiting for their predecessors; the list index of
        #: that state)
        self.waiting = p + "waiting"
        #: limits (rsjobs.limits): their settings, the token buckets' state
        self.limits = p + "limits"
        self.rates = p + "rates"
        self.wake = p + "wake"
        #: recurring tasks (rsjobs.schedules): settings, next tick, what fired
        self.schedules = p + "schedules"
        self.schedules_due = p + "schedules:due"
        self.schedules_log = p + "schedules:log"
        # Passed in KEYS where a script expects a dedup key but the task has none; never
        # written (the script checks its flag first), it only keeps KEYS positional.
        self.nodedup = p + "dedup:"

    def task(self, task_id: str) -> str:
        return f"{self.prefix}task:{task_id}"

    def history(self, task_id: str) -> str:
        """The history stream earlier releases kept per task: nothing writes it now (a
        task's history is in its hash); the memory report still measures what is left."""
        return f"{self.prefix}task:{task_id}:history"

    def queue(self, name: str, priority: int = 0) -> str:
        """The stream of a queue's priority level (``name`` may be a level name already:
        :func:`level_name`). The one place a task's queue key is built from its queue and
        priority."""
        queue, level = split_level(name)
        return f"{self.prefix}queue:{level_name(queue, priority or level)}"

    def queue_streams(self, name: str) -> tuple[str, ...]:
        """The streams of every priority level of a queue, level 0 first."""
        return tuple(self.queue(name, p) for p in PRIORITIES)

    def parked(self, queue: str) -> str:
        """The queue's tasks parked on their owner's concurrency limit."""
        return f"{self.prefix}parked:{queue}"

    def claims(self, queue: str) -> str:
        """The queue's entries handed out and not started yet, of owners with a limit."""
        return f"{self.prefix}claims:{queue}"

    def throttled(self, queue: str) -> str:
        """The queue's tasks waiting on a rate limit, by the start time reserved them."""
        return f"{self.prefix}throttled:{queue}"

    def series(self, queue: str) -> str:
        """The queue's per-minute samples (``scripts/series.lua``)."""
        return f"{self.prefix}series:{queue}"

    def dedup(self, key: str) -> str:
        return f"{self.prefix}dedup:{key}"

    def external(self, provider: str, external_id: str) -> str:
        """The key mapping an outside job (its provider and id) to its DEFERRED task."""
        return f"{self.prefix}external:{provider}:{external_id}"

    def workflow(self, wf_id: str) -> str:
        return f"{self.prefix}wf:{wf_id}"

    def workflow_history(self, wf_id: str) -> str:
        return f"{self.prefix}wf:{wf_id}:history"

    def workflow_tasks(self, wf_id: str) -> str:
        return f"{self.prefix}wf:{wf_id}:tasks"

    def workflow_assets(self, wf_id: str) -> str:
        return f"{self.prefix}wf:{wf_id}:assets"

    def workflow_open(self, wf_id: str) -> str:
        return f"{self.prefix}wf:{wf_id}:open"

    def workflow_keys(self, wf_id: str) -> WorkflowKeys:
        """The seven keys every workflow script takes after its items' keys (``wf.lua``)."""
        return WorkflowKeys(
            self.workflow(wf_id),
            self.workflow_history(wf_id),
            self.workflow_tasks(wf_id),
            self.workflow_assets(wf_id),
            self.workflow_open(wf_id),
            self.workflows_active,
            self.workflows,
        )

    def done_stream(self, state: str) -> str:
        """The ``done:<STATE>`` stream of a terminal state."""
        return self.done[TERMINAL_STATES.index(state)]

    def webhook_log(self, task_id: str) -> str:
        """The delivery log of the webhooks of one task (newest first, capped)."""
        return f"{self.prefix}webhooks:log:{task_id}"

    def common(self) -> tuple[str, ...]:
        """The sixteen KEYS every transition script starts with (see ``fsm.lua``): events,
        stats, scheduled, deadlines, the four ``done:<STATE>`` streams, paused:tasks, tags,
        tags:trim, hooks, hooks:on, release, costs, running."""
        return (
            self.events,
            self.stats,
            self.scheduled,
            self.deadlines,
            *self.done,
            self.paused_tasks,
            self.tags,
            self.tags_trim,
            self.hooks,
            self.hooks_on,
            self.release,
            self.costs,
            self.running,
        )

    def task_keys(
        self, task_id: str, queue: str, dedup: str | None = None, priority: int = 0
    ) -> TaskKeys:
        """The three KEYS of one task in a script call (``fsm.lua``): its queue key is the
        stream of its priority level (``queue`` may be a level name, as a zset member
        carries it); the unused ``dedup:`` key when the task has no dedup key."""
        p = self.prefix
        return TaskKeys(
            f"{p}task:{task_id}",
            self.queue(queue, priority),
            f"{p}dedup:{dedup}" if dedup else self.nodedup,
        )
