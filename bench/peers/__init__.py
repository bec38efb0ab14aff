"""Registry of the benchmarked systems.

This module imports no job system: each system's trial runs in its own venv, where
the other systems are not installed, so drivers are imported only by name, on demand.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.peers.base import Driver


@dataclass(frozen=True)
class System:
    name: str
    module: str  # driver module, exposing make_driver() -> Driver
    venv: str  # venv (relative to the repo root) whose python runs the trial and workers
    dists: tuple[str, ...]  # distributions whose versions go into the report


# rsjobs runs from the main bench venv (installed there editable from the work tree);
# each peer from a venv of its own, because their redis-py pins have no common version.
MAIN_VENV = ".venv-bench"


def _peer(name: str, *dists: str) -> System:
    return System(name, f"bench.peers.{name}_driver", f"{MAIN_VENV}/peers/{name}", dists)


SYSTEMS: dict[str, System] = {
    s.name: s
    for s in (
        System("rsjobs", "bench.peers.rsjobs_driver", MAIN_VENV, ("rsjobs", "redis", "hiredis")),
        # rsjobs with priorities and per-owner limits in use (bench.peers.rsjobs_pools_driver)
        System(
            "rsjobs-pools",
            "bench.peers.rsjobs_pools_driver",
            MAIN_VENV,
            ("rsjobs", "redis", "hiredis"),
        ),
        _peer("taskiq", "taskiq", "taskiq-redis", "redis", "hiredis"),
        _peer("bullmq", "bullmq", "redis", "hiredis"),
        _peer("saq", "saq", "redis", "hiredis"),
        _peer("arq", "arq", "redis", "hiredis"),
        _peer("streaq", "streaq", "coredis"),
    )
}


def load_driver(name: str) -> Driver:
    module = importlib.import_module(SYSTEMS[name].module)
    driver: Driver = module.make_driver()
    return driver
