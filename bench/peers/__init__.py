"""Registry of the benchmarked systems.

This module imports no job system: the arq trial runs in its own venv where the
other systems are not installed, so drivers are imported only by name, on demand.
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
    venv: str  # venv directory (relative to the repo root) whose python runs the trial
    dists: tuple[str, ...]  # distributions whose versions go into the report


MAIN_VENV = ".venv-bench"
ARQ_VENV = ".venv-bench-arq"

SYSTEMS: dict[str, System] = {
    s.name: s
    for s in (
        System("rsjobs", "bench.peers.rsjobs_driver", MAIN_VENV, ("rsjobs", "redis", "hiredis")),
        System("taskiq", "bench.peers.taskiq_driver", MAIN_VENV, ("taskiq", "taskiq-redis", "redis")),
        System("bullmq", "bench.peers.bullmq_driver", MAIN_VENV, ("bullmq", "redis")),
        System("saq", "bench.peers.saq_driver", MAIN_VENV, ("saq", "redis")),
        System("arq", "bench.peers.arq_driver", ARQ_VENV, ("arq", "redis", "hiredis")),
        System("streaq", "bench.peers.streaq_driver", MAIN_VENV, ("streaq", "coredis")),
    )
}


def load_driver(name: str) -> Driver:
    module = importlib.import_module(SYSTEMS[name].module)
    driver: Driver = module.make_driver()
    return driver
