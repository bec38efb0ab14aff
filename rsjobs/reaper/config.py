"""The reaper's settings: every timing in milliseconds, so tests can force a sweep."""

from __future__ import annotations

import msgspec

from ..errors import ConfigError
from ..store.quarantine import DEADLETTER_MAXLEN

__all__ = ["DAY_MS", "ReaperConfig"]

DAY_MS = 24 * 3600 * 1000


class ReaperConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How often the reaper sweeps and what it counts as lost, late or poisonous."""

    #: pause between two sweeps
    interval_ms: int = 1000
    #: the lease workers use (``rsjobs worker --lease-ms``); the default idle threshold, and
    #: the lease assumed for a worker registration that does not name its own
    lease_ms: int = 30_000
    #: an entry must be idle this long before recovery looks at it (0 = ``lease_ms``); the
    #: recovery script still checks each task's own lease against Redis TIME
    min_idle_ms: int = 0
    #: lost deliveries (consumer died holding it) after which a task is dead-lettered
    max_deliveries: int = 5
    #: how long past its execution deadline a RUNNING attempt is left to its own worker
    deadline_grace_ms: int = 1000
    #: a worker is dead after this many of its leases without a registration beat
    dead_after_leases: int = 3
    #: how long a dead worker stays listed (and an idle, empty consumer kept); 0 = forever
    forget_ms: int = DAY_MS
    #: approximate bound of the dead-letter stream (MAXLEN ~)
    deadletter_maxlen: int = DEADLETTER_MAXLEN
    #: entries / members handled per script call, and calls per queue per sweep
    batch: int = 200
    max_batches: int = 20
    #: take the guard key (SET NX PX) so that concurrent reapers do not repeat one sweep;
    #: correctness never depends on it (every script re-checks what it changes)
    guard: bool = True
    #: log sweeps that changed nothing too (one line each; off: a quiet reaper logs only
    #: sweeps that changed something or had errors)
    log_idle: bool = False
    #: how often the per-owner RUNNING counts of the queues are recounted from their
    #: pending lists (rsjobs.limits; recount.lua), so that a count a lost task left wrong
    #: heals; 0 = never
    recount_ms: int = 30_000

    def __post_init__(self) -> None:
        for name in (
            "interval_ms",
            "lease_ms",
            "batch",
            "max_batches",
            "max_deliveries",
            "dead_after_leases",
            "deadletter_maxlen",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1")
        for name in ("min_idle_ms", "deadline_grace_ms", "forget_ms", "recount_ms"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0")

    @property
    def idle_ms(self) -> int:
        """The idle threshold recovery uses."""
        return self.min_idle_ms or self.lease_ms

    @property
    def guard_ms(self) -> int:
        """How long one sweep's guard key lives: a little less than the interval."""
        return max(50, self.interval_ms * 4 // 5)
