"""Settings shared by the client, the worker and the reaper. Times are in milliseconds."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from .codec import DEFAULT_PAYLOAD_LIMIT
from .errors import ConfigError
from .names import validate_name

__all__ = ["Settings", "queue_quota_from_env"]

DAY_MS = 24 * 3600 * 1000


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """Where tasks live and how long they are kept."""

    #: every key of this namespace shares the hash tag ``{namespace}``
    namespace: str = "default"
    #: approximate bound on the events stream (MAXLEN ~); the reaper also drops its
    #: entries once they are older than ``retention_ms``
    events_maxlen: int = 100_000
    #: how long a finished task (hash, history, dedup key) is kept; 0 = forever
    retention_ms: int = 7 * DAY_MS
    #: largest accepted encoded payload or result, in bytes
    payload_limit: int = DEFAULT_PAYLOAD_LIMIT
    #: durable mode: a write the client acknowledges (submit, cancel, pause, resume) returns
    #: only once this many replicas confirmed it (``WAIT``); 0 = off
    wait_replicas: int = 0
    #: how long durable mode waits for the replicas before raising ``NotReplicated``
    wait_timeout_ms: int = 1000
    #: the namespace's shard count (``rsjobs.store.shards``): the first process given one
    #: creates the namespace with it, a process given another count than the namespace's
    #: stops with ``ConfigError``; None: read it (a namespace without one has one shard)
    shards: int | None = None
    #: the most queues one owner may make: a submit naming a queue the namespace does not
    #: have yet, for a task with an owner, counts for that owner, and one past this is
    #: refused (``QueueQuotaExceeded``, nothing written); 0 = no quota. Queues made by
    #: workers, workflows and owner-less tasks count for no one (``rsjobs queue delete``)
    queue_quota: int = 100

    def __post_init__(self) -> None:
        validate_name("namespace", self.namespace)
        if self.events_maxlen < 100:
            raise ConfigError("events_maxlen must be at least 100")
        if self.retention_ms < 0:
            raise ConfigError("retention_ms must be >= 0")
        if self.payload_limit < 1:
            raise ConfigError("payload_limit must be positive")
        if not 0 <= self.wait_replicas <= 100:
            raise ConfigError("wait_replicas must be between 0 and 100")
        if not 1 <= self.wait_timeout_ms <= 600_000:
            raise ConfigError("wait_timeout_ms must be between 1 and 600000")
        if not 0 <= self.queue_quota <= 1_000_000:
            raise ConfigError("queue_quota must be between 0 and 1000000")
        if self.shards is not None:
            from .store.shards import check_count

            check_count(self.shards)


def queue_quota_from_env(env: Mapping[str, str]) -> int:
    """``RSJOBS_QUEUE_QUOTA``: the most queues one owner may make (0 = no quota)."""
    raw = env.get("RSJOBS_QUEUE_QUOTA", "")
    if not raw:
        return Settings().queue_quota
    if not (raw.isascii() and raw.isdigit()):
        raise ConfigError(f"RSJOBS_QUEUE_QUOTA must be a whole number, not {raw!r}")
    return int(raw)
