"""Alias of :mod:`tests.support.reaper` (kept for tests that still import it)."""

from tests.support.reaper import (
    APP,
    reaper_loop,
    spawn,
    spawn_reaper,
    terminal_transitions,
    wait_history,
    wait_registered,
    wait_terminal,
)

__all__ = [
    "APP",
    "reaper_loop",
    "spawn",
    "spawn_reaper",
    "terminal_transitions",
    "wait_history",
    "wait_registered",
    "wait_terminal",
]
