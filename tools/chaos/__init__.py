"""Chaos runs with total accounting: a workload under faults, then every task checked.

``python -m tools.chaos --help``; see ``docs/chaos.md``. :func:`check` is the checker
(a pure function of :class:`RunData`), :func:`run_chaos` one whole run.
"""

from .checker import CheckResult, check
from .config import FAULT_KINDS, ChaosConfig
from .records import RunData, Violation
from .run import run_chaos

__all__ = [
    "FAULT_KINDS",
    "ChaosConfig",
    "CheckResult",
    "RunData",
    "Violation",
    "check",
    "run_chaos",
]
