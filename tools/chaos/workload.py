"""The workload: which tasks a chaos run submits, when, and what each one does.

Every task has a *kind* (its behaviour, carried in its payload as ``k``); the handlers in
:mod:`tools.chaos.handlers` act on it, and the checker knows from :data:`KINDS` which
final states each kind can honestly reach. The plan is a pure function of the seed.
"""

from __future__ import annotations

import math
import random
from typing import Any, NamedTuple

import msgspec

from rsjobs.schemas import EnqueueRequest

__all__ = [
    "KINDS",
    "OWNERS",
    "QUEUE",
    "RATED_TYPE",
    "Kind",
    "PoolSettings",
    "TaskSpec",
    "plan_tasks",
    "pool_settings",
]

#: the queue every chaos task goes to
QUEUE = "chaos"
#: the task type of most tasks, and of the share held to a rate limit (same handler)
TYPE = "chaos"
RATED_TYPE = "chaos.rated"
#: the owners a share of the tasks get, and each one's weight among them: alice submits
#: the most (her own limit is above the default, and still binds), dave the least
OWNERS: dict[str, float] = {"alice": 5, "bob": 3, "carol": 2, "dave": 1}
#: share of the tasks with an owner, with a priority (1-9), and of the kinds that may be
#: rate-limited (RATED_KINDS) given the rated type
OWNER_SHARE = 0.4
PRIORITY_SHARE = 0.4
RATED_SHARE = 0.2
RATED_KINDS = frozenset({"fast", "flaky"})


class Kind(NamedTuple):
    """What a kind of task does, and so which outcomes are possible for it."""

    weight: float  #: share of the workload
    raises: bool  #: its handler may raise (FAIL events from a worker are expected)
    can_succeed: bool  #: SUCCEEDED is a possible outcome
    can_time_out: bool  #: TIMED_OUT is a possible outcome (it has a deadline)
    cancelled: bool  #: the producer cancels it
    doc: str


KINDS: dict[str, Kind] = {
    "fast": Kind(50, False, True, False, False, "returns within 30 ms (20% delayed first)"),
    "slow": Kind(6, False, True, False, False, "runs 1.3-2.5 leases, kept alive by heartbeats"),
    "flaky": Kind(12, True, True, False, False, "fails its first 1-2 attempts, then succeeds"),
    "fatal": Kind(5, True, False, False, False, "raises NonRetryable: FAILED at once"),
    "dedup": Kind(12, False, True, False, False, "fast, with a dedup key; half submitted twice"),
    "cancel_pending": Kind(6, False, True, False, True, "cancelled right after submit"),
    "cancel_running": Kind(3, False, True, False, True, "runs 20 s; cancelled once RUNNING"),
    "pause_resume": Kind(3, False, True, False, False, "runs 1-3 s; paused, then resumed"),
    "timeout": Kind(3, False, False, True, False, "outlives its 800 ms deadline: TIMED_OUT"),
    "expire": Kind(2, False, True, True, False, "delayed 3 s with a 1 s queue-wait deadline"),
    "deferred": Kind(5, False, True, True, False, "defers to an outside job the producer ends"),
    "poison": Kind(0, False, False, False, False, "SIGKILLs its own worker: dead-lettered"),
    # a link of a successor chain of 2-4 (each after the one before it; see _chains): fast,
    # or fails for good; cancelled when a predecessor did not succeed (policy "succeeded")
    "chain": Kind(6, True, True, False, False, "a link of a successor chain (after=[...])"),
    # created by a workflow (tools.chaos.flows), not submitted; cancelled with it
    "wf": Kind(0, True, True, False, False, "a task of a workflow (chaos.wf handler)"),
    # submitted by the hostile mix (tools.chaos.hostile) to queues no worker reads: a
    # pause/resume storm's task, a queue flood's; cancelled once it is done with them
    "hostile": Kind(0, False, False, False, True, "a hostile client's task; cancelled"),
}


class TaskSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One planned task."""

    seq: int
    kind: str
    at_s: float  #: submit time, seconds after the run started
    payload: dict[str, Any]
    max_attempts: int = 3
    timeout_ms: int = 0
    delay_ms: int = 0
    wait_timeout_ms: int = 0
    dedup: str = ""
    #: seconds after the first submit to submit it again (dedup kind); < 0 = only once
    repeat_after_s: float = -1.0
    #: a successor (chain kind): the seq numbers of its predecessors, and its policy
    after: tuple[int, ...] = ()
    after_policy: str = "succeeded"
    #: shared-queue features (docs/limits.md): its owner ('' = none: no limit), priority
    #: (0-9) and type (RATED_TYPE: held to the run's rate limit)
    owner: str = ""
    priority: int = 0
    type: str = TYPE

    def request(self, queue: str = QUEUE, after: list[str] | None = None) -> EnqueueRequest:
        """The submit of this task (``after``: its predecessors' ids, as acknowledged)."""
        return EnqueueRequest(
            after=after,
            after_policy=self.after_policy,
            type=self.type,
            owner=self.owner or None,
            priority=self.priority,
            payload=self.payload,
            queue=queue,
            max_attempts=self.max_attempts,
            timeout_ms=self.timeout_ms,
            delay_ms=self.delay_ms,
            dedup_key=self.dedup or None,
            wait_timeout_ms=self.wait_timeout_ms,
            # short backoffs keep the drain short
            backoff_base_ms=100,
            backoff_max_ms=1000,
        )


def _spec(rng: random.Random, seq: int, kind: str, at_s: float, lease_ms: int) -> TaskSpec:
    p: dict[str, Any] = {"k": kind, "seq": seq, "ms": 0}
    opts: dict[str, Any] = {"max_attempts": rng.randint(3, 5)}
    if kind == "fast":
        p["ms"] = rng.randint(0, 30)
        if rng.random() < 0.2:
            opts["delay_ms"] = rng.randint(200, 2000)
    elif kind == "slow":
        p["ms"] = int(lease_ms * rng.uniform(1.3, 2.5))
    elif kind == "flaky":
        p["ms"] = rng.randint(0, 20)
        p["fail"] = rng.randint(1, 2)
        opts["max_attempts"] = p["fail"] + rng.randint(2, 3)
    elif kind == "fatal":
        p["ms"] = rng.randint(0, 20)
    elif kind == "dedup":
        p["ms"] = rng.randint(0, 30)
        opts["dedup"] = f"chaos-{seq}"
        if rng.random() < 0.5:
            opts["repeat_after_s"] = rng.choice([0.0, rng.uniform(0, 3)])
    elif kind == "cancel_pending":
        p["ms"] = 200
        if rng.random() < 0.5:
            opts["delay_ms"] = rng.randint(1000, 3000)
    elif kind == "cancel_running":
        p["ms"] = 20_000
    elif kind == "pause_resume":
        p["ms"] = rng.randint(1000, 3000)
        p["hold"] = rng.randint(200, 2000)  # ms between PAUSE and RESUME
    elif kind == "timeout":
        p["ms"] = 2400
        opts.update(timeout_ms=800, max_attempts=2)
    elif kind == "expire":
        p["ms"] = 10
        opts.update(delay_ms=3000, wait_timeout_ms=1000)
    elif kind == "deferred":
        # the outside job's result: sent once, twice, lost on the first attempt, late past
        # the first attempt's longest wait, or never (see Producer._provide)
        p["mode"] = rng.choices(["ok", "dup", "lost", "late", "never"], [4, 3, 2, 2, 1])[0]
        p["wait"] = 1500  # the longest wait (ms)
        opts["max_attempts"] = rng.randint(2, 3)
    elif kind == "poison":
        # more attempts than the reaper's max deliveries: it must be dead-lettered
        opts["max_attempts"] = 10
    elif kind == "chain":
        p["ms"] = rng.randint(0, 30)
        p["fail"] = rng.random() < 0.15  # fails for good (NonRetryable)
    return TaskSpec(seq=seq, kind=kind, at_s=at_s, payload=p, **opts)


def _chains(rng: random.Random, specs: list[TaskSpec], active_s: float) -> list[TaskSpec]:
    """The chain specs linked into chains of 2-4, in seq order: each link after the one
    before it (the third also after the head, at times: a successor of two), submitted
    just after its predecessors; a link's policy is "always" one time in four; a head is
    cancelled right after its submit one time in seven (its successors then are too)."""
    out: list[TaskSpec] = []
    chain: list[TaskSpec] = []
    size = rng.randint(2, 4)
    for s in sorted(specs, key=lambda s: s.seq):
        if not chain:
            payload = {**s.payload, "cancel": rng.random() < 1 / 7}
            chain.append(msgspec.structs.replace(s, payload=payload))
        else:
            after: tuple[int, ...] = (chain[-1].seq,)
            if len(chain) == 2 and rng.random() < 0.3:
                after = (chain[-1].seq, chain[0].seq)
            policy = "always" if rng.random() < 0.25 else "succeeded"
            at = min(active_s, round(chain[-1].at_s + 0.02, 3))
            # (a successor is of its predecessors' owner: rsjobs.successors)
            chain.append(
                msgspec.structs.replace(
                    s, at_s=at, after=after, after_policy=policy, owner=chain[0].owner
                )
            )
        if len(chain) == size:
            out += chain
            chain, size = [], rng.randint(2, 4)
    return out + chain


def plan_tasks(
    seed: int, n: int, active_s: float, lease_ms: int, poison: int = -1
) -> list[TaskSpec]:
    """``n`` tasks (plus ``poison`` poison tasks; -1 = one per 500, at least one) spread
    over the first ``active_s`` seconds, sorted by submit time. Pure: same seed, same plan."""
    rng = random.Random(f"{seed}:tasks")
    kinds = [k for k, v in KINDS.items() if v.weight > 0]
    weights = [KINDS[k].weight for k in kinds]
    chosen = rng.choices(kinds, weights, k=n)
    if poison < 0:
        poison = max(1, n // 500)
    chosen += ["poison"] * poison
    specs = [
        _spec(rng, seq, kind, round(rng.uniform(0, active_s), 3), lease_ms)
        for seq, kind in enumerate(chosen)
    ]
    specs = _pooled([s for s in specs if s.kind != "chain"], f"{seed}:pools") + _chains(
        rng, _pooled([s for s in specs if s.kind == "chain"], f"{seed}:chains"), active_s
    )
    return sorted(specs, key=lambda s: (s.at_s, s.seq))


def _pooled(specs: list[TaskSpec], seed: str) -> list[TaskSpec]:
    """Give a share of ``specs`` an owner, a priority, and (of the RATED_KINDS) the rated
    type, from a random stream of their own (the rest of the plan is as without them)."""
    rng = random.Random(seed)
    owners, weights = list(OWNERS), list(OWNERS.values())
    out = []
    for s in specs:
        owner = rng.choices(owners, weights)[0] if rng.random() < OWNER_SHARE else ""
        priority = rng.randint(1, 9) if rng.random() < PRIORITY_SHARE else 0
        rated = s.kind in RATED_KINDS and rng.random() < RATED_SHARE
        out.append(
            msgspec.structs.replace(
                s, owner=owner, priority=priority, type=RATED_TYPE if rated else TYPE
            )
        )
    return out


class PoolSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The limits a run sets on its queue before the first submit (docs/limits.md)."""

    queue: str = QUEUE
    #: every owner's concurrency limit, and the owners' own (over the default)
    default_limit: int = 2
    owner_limits: dict[str, int] = msgspec.field(default_factory=lambda: {"alice": 3})
    #: the rate of RATED_TYPE's starts on the queue (a token bucket)
    rated_type: str = RATED_TYPE
    per_second: float = 4.0
    burst: int = 2

    def limit_of(self, owner: str) -> int:
        return self.owner_limits.get(owner, self.default_limit)


def pool_settings(specs: list[TaskSpec], active_s: float) -> PoolSettings:
    """The run's limits, from its plan: the rate is about 1.6 times the rated tasks'
    mean submit rate (it binds on their bursts and after outages, and the backlog it
    makes drains well within the run), its burst half of that."""
    rated = sum(1 for s in specs if s.type == RATED_TYPE)
    per_second = float(max(2, math.ceil(1.6 * rated / max(active_s, 1.0))))
    return PoolSettings(per_second=per_second, burst=max(1, int(per_second) // 2))


# -- workflows ----------------------------------------------------------------------------

#: what each kind of workflow does (its input tells the ``chaos.wf`` handler) and how it
#: may end
WF_KINDS: dict[str, tuple[float, str]] = {
    "wf_ok": (6, "every task succeeds (some after a retryable failure): PUBLISHED"),
    "wf_partial": (3, "item b fails for good on its first run: PARTIALLY_FAILED, retried"),
    "wf_cancel": (2, "cancelled 0-1.5 s after its start: CANCELLED (or done first)"),
}


class WorkflowSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One planned workflow (the 2-stage ``tools.chaos.flows`` pipeline)."""

    seq: int
    kind: str
    at_s: float
    input: dict[str, Any]
    #: seconds after the start to cancel it (< 0: never)
    cancel_after_s: float = -1.0


def plan_workflows(seed: int, n: int, active_s: float) -> list[WorkflowSpec]:
    """``n`` workflows over the first ``active_s`` seconds; pure, like :func:`plan_tasks`.
    Their seq numbers start at 1,000,000 (apart from tasks')."""
    rng = random.Random(f"{seed}:workflows")
    kinds = list(WF_KINDS)
    chosen = rng.choices(kinds, [WF_KINDS[k][0] for k in kinds], k=n)
    out = []
    for i, kind in enumerate(chosen):
        seq = 1_000_000 + i
        inp: dict[str, Any] = {"wk": kind, "seq": seq, "ms": rng.randint(0, 300)}
        if rng.random() < 0.3:
            inp["flaky"] = True  # the first attempt of item a raises (retryable)
        if kind == "wf_partial":
            inp["fail_item"] = "b"
        cancel = round(rng.uniform(0, 1.5), 3) if kind == "wf_cancel" else -1.0
        at = round(rng.uniform(0, active_s), 3)
        out.append(WorkflowSpec(seq=seq, kind=kind, at_s=at, input=inp, cancel_after_s=cancel))
    return sorted(out, key=lambda s: (s.at_s, s.seq))


# -- poison inputs ------------------------------------------------------------------------

#: bad inputs sent through the public APIs; each must be refused with a clear error and
#: write nothing (``wf_next_over_limit`` is accepted: it must end FAILED with a reason)
POISON_KINDS: dict[str, tuple[tuple[str, ...], str]] = {
    "task_over_limit": (("client", "http"), "a task payload just over the payload limit"),
    "task_deep": (("client", "http"), "a task payload of JSON nested 1,000 deep"),
    "wf_over_limit": (("client", "http"), "a workflow input over the payload limit"),
    "wf_deep": (("client", "http"), "a workflow input of JSON nested 1,000 deep"),
    "wf_next_over_limit": (
        ("client",),
        "a workflow whose first stage fits but whose second stage's payload (input + the "
        "first stage's asset references) would be over the limit",
    ),
    "flood_cancel": (("client", "http"), "1,000-3,000 cancels of one finished task"),
    "flood_pause": (("client",), "1,000-3,000 pauses of one finished task"),
}
#: how deep the nested inputs are
DEEP = 1000


class PoisonSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One planned bad input."""

    seq: int
    kind: str
    channel: str  #: "client" (Client / WorkflowClient) or "http" (the web app)
    at_s: float
    #: commands in a flood
    count: int = 0

    @property
    def marker(self) -> str:
        """Carried by the input: anything in Redis holding it was written by it."""
        return f"poison-{self.seq}"


def plan_poison(seed: int, n: int, active_s: float, *, http: bool) -> list[PoisonSpec]:
    """``n`` bad inputs (every kind at least once when ``n`` allows), over the first
    ``active_s`` seconds (from 2 s in: there are finished tasks to flood by then); seq
    numbers from 2,000,000. Without ``http`` every input goes through the Python API."""
    rng = random.Random(f"{seed}:poison")
    kinds = list(POISON_KINDS)
    chosen = kinds[:n] + rng.choices(kinds, k=max(0, n - len(kinds)))
    out = []
    for i, kind in enumerate(chosen):
        channels = POISON_KINDS[kind][0]
        channel = rng.choice(channels) if http else "client"
        count = rng.randint(1000, 3000) if kind.startswith("flood") else 0
        at = round(rng.uniform(min(2.0, active_s / 2), active_s), 3)
        out.append(PoisonSpec(seq=2_000_000 + i, kind=kind, channel=channel, at_s=at, count=count))
    return sorted(out, key=lambda s: (s.at_s, s.seq))


# -- the hostile-client mix ---------------------------------------------------------------

#: what a hostile client tries (``tools.chaos.hostile``), through which channels
HOSTILE_KINDS: dict[str, tuple[tuple[str, ...], str]] = {
    "cb_cross_job": (("http",), "callbacks signed for another outside job"),
    "cb_stale": (("http",), "callbacks signed past the tolerance (old or future time)"),
    "cb_altered": (("http",), "callbacks whose body was changed after signing"),
    "pause_storm": (("client", "http"), "150-400 pause/resume cycles of one PENDING task"),
    "queue_flood": (("client", "http"), "one owner submitting to new queue names past its quota"),
    "cursor_probe": (("client", "http"), "crafted, altered, cross-owner and cross-filter cursors"),
}
#: the queue of the hostile mix's tasks (no worker reads it)
HOLD_QUEUE = "chaos.hold"
#: the queues one owner may make in a chaos run (Settings.queue_quota; small, so a flood
#: reaches it at once)
QUEUE_QUOTA = 8


class HostileSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One planned hostile action."""

    seq: int
    kind: str
    channel: str
    at_s: float
    #: callbacks sent, storm cycles, or queue names past the quota
    count: int = 0

    @property
    def marker(self) -> str:
        """Carried by what it sends: a task holding it was written by it."""
        return f"hostile-{self.seq}"


def plan_hostile(seed: int, n: int, active_s: float, *, http: bool) -> list[HostileSpec]:
    """``n`` hostile actions (every kind at least once when ``n`` allows; the callbacks
    need the web app), between 30% and 95% of ``active_s`` (deferred tasks wait on their
    outside jobs, owners have tasks to list by then); seq numbers from 3,000,000."""
    rng = random.Random(f"{seed}:hostile")
    kinds = [k for k, (ch, _) in HOSTILE_KINDS.items() if http or "client" in ch]
    chosen = kinds[:n] + rng.choices(kinds, k=max(0, n - len(kinds)))
    out = []
    for i, kind in enumerate(chosen):
        channels = [c for c in HOSTILE_KINDS[kind][0] if http or c == "client"]
        count = {"pause_storm": rng.randint(150, 400), "queue_flood": rng.randint(4, 12)}.get(
            kind, rng.randint(3, 6)
        )
        at = round(rng.uniform(0.3 * active_s, 0.95 * active_s), 3)
        out.append(
            HostileSpec(
                seq=3_000_000 + i, kind=kind, channel=rng.choice(channels), at_s=at, count=count
            )
        )
    return sorted(out, key=lambda s: (s.at_s, s.seq))
