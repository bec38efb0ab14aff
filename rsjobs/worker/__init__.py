"""The worker side: handler registry, handler context and the worker loop."""

from .context import Context
from .registry import Handler, Registry
from .worker import Worker

__all__ = ["Context", "Handler", "Registry", "Worker"]
