"""Handlers for the reaper's tests (``tests.support.reaper_apps:tasks``)."""

from __future__ import annotations

import os
import signal
from typing import Any

from rsjobs import Context, Registry
from tests.support import apps

tasks = Registry()
tasks.add("noop", apps.noop)
tasks.add("sleep", apps.sleep)


@tasks.handler("crash")
async def crash(ctx: Context, payload: Any) -> None:
    """A poison task: takes its worker down with it (SIGKILL, no clean-up at all)."""
    os.kill(os.getpid(), signal.SIGKILL)
