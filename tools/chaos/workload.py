"""The workload: which tasks a chaos run submits, when, and what each one does.

Every task has a *kind* (its behaviour, carried in its payload as ``k``); the handlers in
:mod:`tools.chaos.handlers` act on it, and the checker knows from :data:`KINDS` which
final states each kind can honestly reach. The plan is a pure function of the seed.
"""

from __future__ import annotations

import random
from typing import Any, NamedTuple

import msgspec

from rsjobs.schemas import EnqueueRequest

__all__ = ["KINDS", "QUEUE", "Kind", "TaskSpec", "plan_tasks"]

#: the queue every chaos task goes to
QUEUE = "chaos"


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
    "poison": Kind(0, False, False, False, False, "SIGKILLs its own worker: dead-lettered"),
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

    def request(self, queue: str = QUEUE) -> EnqueueRequest:
        return EnqueueRequest(
            type="chaos",
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
    elif kind == "poison":
        # more attempts than the reaper's max deliveries: it must be dead-lettered
        opts["max_attempts"] = 10
    return TaskSpec(seq=seq, kind=kind, at_s=at_s, payload=p, **opts)


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
    return sorted(specs, key=lambda s: (s.at_s, s.seq))
