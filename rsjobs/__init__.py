"""rsjobs: a Redis-Streams-native job system where every task is in a known, true state."""

from .client import Client, connect
from .errors import (
    ConfigError,
    InvalidTransition,
    LeaseLost,
    NonRetryable,
    PayloadError,
    RedisUnavailable,
    RsjobsError,
    TaskNotFound,
    WaitTimeout,
)
from .model import Event, State
from .schemas import EnqueueRequest, HistoryEntry, TaskInfo
from .settings import Settings
from .worker import Context, Registry, Worker

__all__ = [
    "Client",
    "ConfigError",
    "Context",
    "EnqueueRequest",
    "Event",
    "HistoryEntry",
    "InvalidTransition",
    "LeaseLost",
    "NonRetryable",
    "PayloadError",
    "RedisUnavailable",
    "Registry",
    "RsjobsError",
    "Settings",
    "State",
    "TaskInfo",
    "TaskNotFound",
    "WaitTimeout",
    "Worker",
    "connect",
]

__version__ = "0.1.0"
