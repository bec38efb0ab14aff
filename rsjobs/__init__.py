"""rsjobs: a Redis-Streams-native job system where every task is in a known, true state.

The worker side (``Worker``, ``Registry``, ``Context``) is imported on first use, so that
``import rsjobs.web`` or a producer never loads the worker.
"""

from typing import TYPE_CHECKING, Any

from .client import Client
from .errors import (
    BadSignature,
    ChargeError,
    ConfigError,
    CorruptData,
    DedupKeyReused,
    InvalidTransition,
    LeaseLost,
    NonRetryable,
    NotMigrated,
    NotReplicated,
    PayloadError,
    PredecessorRefused,
    QueueInUse,
    QueueQuotaExceeded,
    RedisUnavailable,
    RsjobsError,
    SlotMigrating,
    StoreError,
    TaskNotFound,
    UnknownPredecessor,
    UnknownQueue,
    WaitTimeout,
)
from .limits import QueueLimits, RateLimit
from .model import Event, State
from .schemas import (
    BulkItem,
    BulkResult,
    EnqueueRequest,
    EnqueueResult,
    HistoryEntry,
    QueuePause,
    RetryResult,
    TaskFilter,
    TaskInfo,
    TaskPage,
    TaskSummary,
)
from .settings import Settings
from .store.connection import connect
from .sync import SyncClient

if TYPE_CHECKING:
    from .worker import Context, Registry, Worker

__all__ = [
    "BadSignature",
    "BulkItem",
    "BulkResult",
    "ChargeError",
    "Client",
    "ConfigError",
    "Context",
    "CorruptData",
    "DedupKeyReused",
    "EnqueueRequest",
    "EnqueueResult",
    "Event",
    "HistoryEntry",
    "InvalidTransition",
    "LeaseLost",
    "NonRetryable",
    "NotMigrated",
    "NotReplicated",
    "PayloadError",
    "PredecessorRefused",
    "QueueInUse",
    "QueueLimits",
    "QueuePause",
    "QueueQuotaExceeded",
    "RateLimit",
    "RedisUnavailable",
    "Registry",
    "RetryResult",
    "RsjobsError",
    "Settings",
    "SlotMigrating",
    "State",
    "StoreError",
    "SyncClient",
    "TaskFilter",
    "TaskInfo",
    "TaskNotFound",
    "TaskPage",
    "TaskSummary",
    "UnknownPredecessor",
    "UnknownQueue",
    "WaitTimeout",
    "Worker",
    "connect",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in ("Worker", "Registry", "Context"):
        from . import worker

        return getattr(worker, name)
    raise AttributeError(f"module 'rsjobs' has no attribute {name!r}")
