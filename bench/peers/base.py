"""The interface every system's driver implements, plus what they share.

A driver lives in the trial process (the producer side). It talks to its job system
only through that system's public API; the worker side is a separate process started
from ``worker_argv`` with the system's own worker entry point.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

# Every system uses the same number of tasks per bulk call: the peers' bulk APIs all
# pipeline one call's jobs, and a fixed chunk keeps "bulk" comparable across them.
BULK_CHUNK = 1000

# Name of the task/handler in every system, for log and key readability only.
TASK_NAME = "noop"


def redis_url() -> str:
    """The bench Redis URL, handed to trials and workers through the environment.

    The environment (not argv) is used so that app modules imported by a peer's
    worker CLI can read it at import time, as a real application reads its config.
    """
    return os.environ["BENCH_REDIS_URL"]


def concurrency() -> int:
    """Per-worker concurrency for app modules whose worker CLI has no flag for it.

    The producer imports the same app modules but never runs tasks, so it has none set.
    """
    return int(os.environ.get("BENCH_CONCURRENCY", "1"))


# Set by bench.run for rsjobs's trials: the directory whose rsjobs package the trial and
# its workers must import (the work tree, or a revision exported by bench.revision).
RSJOBS_ROOT_ENV = "BENCH_RSJOBS_ROOT"


def check_import_root(module_file: str | None) -> None:
    """Refuse to run when rsjobs was imported from elsewhere than the side being measured
    (a baseline process picking up the work tree's rsjobs would compare the tree with
    itself)."""
    expected = os.environ.get(RSJOBS_ROOT_ENV)
    if not expected:
        return
    if module_file is None or not Path(module_file).resolve().is_relative_to(
        Path(expected).resolve()
    ):
        raise RuntimeError(f"rsjobs imported from {module_file}, expected under {expected}")


def python() -> str:
    """The interpreter of the current venv, so workers run with the same packages."""
    return sys.executable


def chunks(indices: Sequence[int], size: int = BULK_CHUNK) -> list[Sequence[int]]:
    return [indices[i : i + size] for i in range(0, len(indices), size)]


class Driver(Protocol):
    """One job system as seen from the producer side of a benchmark trial."""

    name: str
    # Whether the system has a public bulk-enqueue API; if not, enqueue_bulk is unused.
    has_bulk: bool

    async def setup(self) -> None:
        """Open clients (untimed). Called after FLUSHALL and before workers start."""

    async def teardown(self) -> None:
        """Close clients."""

    async def enqueue_one(self, i: int) -> None:
        """Enqueue task ``i`` with one call of the system's single-enqueue API."""

    async def enqueue_bulk(self, indices: Sequence[int]) -> None:
        """Enqueue all ``indices`` with the system's bulk API (BULK_CHUNK per call)."""

    def worker_argv(self, concurrency: int) -> list[str]:
        """argv of ONE worker process with ``concurrency`` concurrent tasks."""

    async def outstanding(self) -> int:
        """Tasks enqueued but not finished, read from the system's own bookkeeping.

        The harness polls this to detect the end of the processing window, so it must
        be cheap (a few commands, independent of the number of tasks).
        """

    async def verify(self, n: int) -> list[str]:
        """Check with the system's own status API that exactly ``n`` tasks completed
        successfully. Returns a list of problems (empty when all is well)."""
