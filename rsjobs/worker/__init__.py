"""The worker side: handler registry, handler context and the worker loop."""

from .context import Context
from .deferral import Deferral, PollContext, PollResult
from .registry import Handler, Poller, Registry
from .worker import Worker

__all__ = [
    "Context",
    "Deferral",
    "Handler",
    "PollContext",
    "PollResult",
    "Poller",
    "Registry",
    "Worker",
]
