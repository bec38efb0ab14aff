"""Shared queues: priorities, per-owner concurrency limits and rate limits.

**Priorities.** A task has a priority from 0 (the default) to 9, given at submit
(``priority=``: :meth:`rsjobs.Client.enqueue`, bulk enqueue, workflow stages, schedules,
``POST /tasks``, ``rsjobs enqueue --priority``). A worker takes the highest first and,
within a level, the oldest first; a retry, a requeue, a reclaim or a resume keeps the
task's priority. No task starves: a waiting task's priority rises by one level for every
``priority_age_ms`` (a worker setting, 30 s by default) it has waited, so a priority-0 task
under a steady flood of priority-9 work is taken within about ten such periods
(``take.lua``).

**Per-owner concurrency limits** (per queue): a default for every owner of the queue and
per-owner overrides, at most that many RUNNING tasks of one owner in the queue. A task
without an owner has none. Enforced in ``start.lua`` (atomically, as the task starts); a
task over its owner's limit waits without holding up other owners' tasks behind it: it is
*parked* (it stays PENDING; nothing is written to its history) until its owner is under
the limit, then a worker takes it (``take.lua``), with no polling in between.

**Rate limits**: token buckets of ``per_second`` starts with a ``burst``, for a queue, a
task type on a queue, or the retries (attempts after the first) of a type on a queue. A
start no bucket lets through now is given the earliest time every bucket allows and
parked until then (its buckets count it from that time on: the tasks a bucket holds back
start one interval apart, in the order they reached a worker).

Settings live in Redis (the ``limits`` hash, see :mod:`rsjobs.store.keys`) and change at
run time (:meth:`rsjobs.Client.set_limit`, ``rsjobs limits``, ``PUT /queues/{q}/limits``);
this module checks them: a bad value raises :class:`rsjobs.ConfigError` and writes
nothing.
"""

from __future__ import annotations

import math

import msgspec

from .errors import ConfigError
from .names import is_owner, validate_name, validate_type
from .store.keys import MAX_PRIORITY

__all__ = [
    "BURST_MAX",
    "LIMIT_MAX",
    "MAX_PRIORITY",
    "PER_SECOND_MAX",
    "PER_SECOND_MIN",
    "QueueLimits",
    "RateLimit",
    "check_owner",
    "check_owner_limit",
    "check_priority",
    "check_rate",
    "check_type",
]

#: the largest per-owner concurrency limit
LIMIT_MAX = 1_000_000
#: the fastest rate (starts per second) and the largest burst
PER_SECOND_MAX = 100_000.0
#: the slowest rate: one start in 1,000 s (a slower one is a pause: ``rsjobs pause``)
PER_SECOND_MIN = 0.001
BURST_MAX = 1_000_000


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_priority(priority: object) -> int:
    """``priority`` when it is an integer from 0 to 9, else :class:`ConfigError`."""
    if not _is_int(priority) or not 0 <= priority <= MAX_PRIORITY:  # type: ignore[operator]
        raise ConfigError(f"priority must be an integer from 0 to {MAX_PRIORITY}, not {priority!r}")
    return priority  # type: ignore[return-value]


def check_owner_limit(limit: object) -> int:
    """``limit`` when it is an integer from 1 to :data:`LIMIT_MAX`."""
    if not _is_int(limit) or not 1 <= limit <= LIMIT_MAX:  # type: ignore[operator]
        raise ConfigError(
            f"a concurrency limit must be an integer from 1 to {LIMIT_MAX}, not {limit!r}"
        )
    return limit  # type: ignore[return-value]


def check_owner(owner: object) -> str:
    if not is_owner(owner):
        raise ConfigError(f"invalid owner {owner!r}: 1-128 letters, digits or '_.@-'")
    return owner  # type: ignore[return-value]


def check_type(type_: object) -> str:
    """``type_`` when it follows the task type rule (:func:`rsjobs.names.validate_type`)."""
    return validate_type(type_)


def check_rate(per_second: object, burst: object) -> tuple[float, int]:
    """``(per_second, burst)`` when ``per_second`` is a number in [0.001, 100000] and
    ``burst`` an integer from 1 to 1,000,000 (None: one second's worth, at least 1)."""
    if (
        not isinstance(per_second, int | float)
        or isinstance(per_second, bool)
        or not math.isfinite(per_second)
        or not PER_SECOND_MIN <= per_second <= PER_SECOND_MAX
    ):
        raise ConfigError(
            f"a rate must be a number of starts per second from {PER_SECOND_MIN:g} to "
            f"{PER_SECOND_MAX:g}, not {str(per_second)[:40]}"
        )
    if burst is None:
        burst = max(1, math.floor(per_second))
    if not _is_int(burst) or not 1 <= burst <= BURST_MAX:  # type: ignore[operator]
        raise ConfigError(f"a burst must be an integer from 1 to {BURST_MAX}, not {burst!r}")
    return float(per_second), burst  # type: ignore[return-value]


class RateLimit(msgspec.Struct, frozen=True, kw_only=True):
    """A token bucket: ``per_second`` starts, up to ``burst`` at once, of the queue's
    tasks (``type`` ''), of one type's, or of one type's retries (``retries``)."""

    queue: str
    type: str = ""
    retries: bool = False
    per_second: float
    burst: int


class QueueLimits(msgspec.Struct, frozen=True, kw_only=True):
    """A queue's limits and how they hold now: the default per-owner limit (None: none),
    the owners' own limits, the rate limits; the RUNNING tasks of each owner with some,
    and the tasks parked on a limit (``waiting``) or a rate (``throttled``)."""

    queue: str
    default: int | None = None
    owners: dict[str, int] = msgspec.field(default_factory=dict)
    rates: list[RateLimit] = msgspec.field(default_factory=list)
    running: dict[str, int] = msgspec.field(default_factory=dict)
    waiting: int = 0
    throttled: int = 0


def queue_name(queue: object) -> str:
    if not isinstance(queue, str):
        raise ConfigError(f"invalid queue {queue!r}")
    return validate_name("queue", queue)


def rate_field(queue: str, type_: str | None, retries: bool) -> str:
    """The limits hash field of a rate (see ``pools`` in ``fsm.lua``)."""
    if retries:
        if type_ is None:
            raise ConfigError("a retries rate is a task type's: name the type")
        return f"rr|{queue}|{type_}"
    return f"r|{queue}" if type_ is None else f"r|{queue}|{type_}"
