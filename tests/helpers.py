"""Alias of :mod:`tests.support.processes` (kept for tests that still import it)."""

from tests.support.processes import ROOT, spawn_worker, start_as, stop_process, wait_for_state

__all__ = ["ROOT", "spawn_worker", "start_as", "stop_process", "wait_for_state"]
