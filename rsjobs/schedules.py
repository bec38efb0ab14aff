"""Recurring tasks: a schedule enqueues one task per tick (``client.schedule(...)``,
``rsjobs schedules add``).

A schedule ticks on a cron expression (UTC; five fields, or six with seconds first as
croniter reads them: the ``cron`` extra) or every ``every_ms`` from the moment it was
added. The reaper fires
due ticks (``schedule.lua``): one script call per tick checks that the schedule is still
due at that tick and moves it to the next one as it enqueues the task, so however many
reapers run, each tick enqueues exactly one task. Schedules live in Redis: they survive
restarts of every process.

Missed ticks (no reaper ran, Redis was down): the first sweep after finds the schedule due
at its oldest missed tick, fires that one (a catch-up run, at once), skips the others up to
now and counts them (``skipped``), and moves the schedule to the first tick after now. A
job that must not run late at all checks ``ctx`` / its payload's time itself.
"""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from .errors import ConfigError
from .extras import MissingExtra

try:  # the cron extra: schedules on a cron expression
    from croniter import croniter
except ImportError:  # pragma: no cover - installed without it (every_ms schedules work)
    croniter = None
from .names import validate_name
from .schemas import EnqueueRequest

__all__ = ["MAX_COUNTED", "Schedule", "ScheduleInfo", "missed_ticks", "next_tick"]

#: the most missed ticks counted one by one (a cron schedule idle for years is not walked
#: tick by tick: the count stops here)
MAX_COUNTED = 10_000


class Schedule(msgspec.Struct, frozen=True, kw_only=True):
    """A recurring schedule's settings (JSON in ``rsjobs:{ns}:schedules``)."""

    name: str
    #: a cron expression (UTC), or '' with every_ms
    cron: str = ""
    every_ms: int = 0
    #: the time every_ms counts from (ms; when it was added)
    anchor_ms: int = 0
    #: the task each tick enqueues (delay_ms 0, no dedup key)
    task: EnqueueRequest


class ScheduleInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A schedule and what it did: its next tick, ticks fired and skipped, the last task."""

    schedule: Schedule
    next_at: int = 0
    fired: int = 0
    skipped: int = 0
    last_task: str = ""
    last_at: int = 0


def check(s: Schedule) -> None:
    """Raise :class:`rsjobs.ConfigError` unless ``s`` is a schedule that can tick."""
    validate_name("schedule name", s.name)
    if bool(s.cron) == bool(s.every_ms):
        raise ConfigError("a schedule needs exactly one of cron or every_ms")
    if s.cron:
        if croniter is None:
            raise MissingExtra("cron", "a schedule on a cron expression")
        if not isinstance(s.cron, str) or len(s.cron) > 200 or not croniter.is_valid(s.cron):
            raise ConfigError(f"bad cron expression {s.cron!r}")
    elif not isinstance(s.every_ms, int) or not 1000 <= s.every_ms <= 366 * 24 * 3600 * 1000:
        raise ConfigError("every_ms must be an integer between 1000 and one year")
    if s.task.delay_ms or s.task.dedup_key:
        raise ConfigError("a schedule's task takes no delay_ms or dedup_key (a tick runs now)")


def next_tick(s: Schedule, after_ms: int) -> int:
    """The schedule's first tick strictly after ``after_ms`` (ms)."""
    if s.every_ms:
        if after_ms < s.anchor_ms:
            return s.anchor_ms
        return s.anchor_ms + ((after_ms - s.anchor_ms) // s.every_ms + 1) * s.every_ms
    if croniter is None:
        raise MissingExtra("cron", f"schedule {s.name} (cron {s.cron!r})")
    start = datetime.fromtimestamp(after_ms / 1000, tz=UTC)
    nxt = int(croniter(s.cron, start).get_next(float) * 1000)
    return max(nxt, after_ms + 1)


def missed_ticks(s: Schedule, due_ms: int, now_ms: int) -> int:
    """How many ticks fall in (``due_ms``, ``now_ms``]: the ones a catch-up skips."""
    if now_ms <= due_ms:
        return 0
    if s.every_ms:
        return (now_ms - due_ms) // s.every_ms
    n, t = 0, due_ms
    while n < MAX_COUNTED:
        t = next_tick(s, t)
        if t > now_ms:
            break
        n += 1
    return n
