"""CPU the whole machine and this process used, so a measurement can tell how much of
the machine other work took meanwhile (the bench's machine-load check)."""

from __future__ import annotations

import psutil

# Above this much CPU (in cores) used by other processes during a measurement window,
# the machine was not quiet enough for the figures to be trusted.
OTHER_LOAD_WARN_CORES = 0.15


def busy_cpu_s() -> float:
    """CPU seconds the whole machine spent busy (all cores), so far. Steal time counts:
    a hypervisor taking the CPU away disturbs the figures as much as a local process.
    (Guest time is already inside user time on Linux, so it is not added.)"""
    t = psutil.cpu_times()
    parts = ("user", "nice", "system", "irq", "softirq", "steal")
    return float(sum(getattr(t, p, 0.0) for p in parts))


def own_cpu_s() -> float:
    """CPU seconds this process used, so far."""
    t = psutil.Process().cpu_times()
    return float(t.user + t.system)
