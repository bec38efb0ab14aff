"""Alias of :mod:`tests.support.reference` (kept for tests that still import it)."""

from tests.support.reference import TaskModel, replay

__all__ = ["TaskModel", "replay"]
