"""The reaper sidecar: recovers work from dead workers, enforces deadlines, dead-letters
poison tasks, promotes delayed work and keeps the workers registry (``rsjobs reaper``)."""

from .config import ReaperConfig
from .deadletter import CannotRequeue, DeadLetter, NotDeadLettered, list_deadletters, requeue
from .memory import MemoryReport, QueueMemory, memory_report
from .reaper import Reaper, SweepReport
from .registry import WorkerInfo, list_workers

__all__ = [
    "CannotRequeue",
    "DeadLetter",
    "MemoryReport",
    "NotDeadLettered",
    "QueueMemory",
    "Reaper",
    "ReaperConfig",
    "SweepReport",
    "WorkerInfo",
    "list_deadletters",
    "list_workers",
    "memory_report",
    "requeue",
]
