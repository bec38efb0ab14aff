"""The settings of one chaos run. Times in seconds where a person types them (duration),
milliseconds where they reach rsjobs (lease, intervals)."""

from __future__ import annotations

import msgspec

from rsjobs.errors import ConfigError

__all__ = [
    "CLUSTER_FAULTS",
    "FAULT_KINDS",
    "SENTINEL_FAULTS",
    "TOPOLOGIES",
    "ChaosConfig",
    "faults_for",
]

#: every fault the schedule can inject
FAULT_KINDS = (
    "worker_kill",
    "worker_stop",
    "worker_term",
    "reaper_kill",
    "redis_drop",
    "redis_term",
    "redis_kill",
    "redis_freeze",
    "redis_failover",
    "cluster_failover",
)
#: faults that need the sentinel topology
SENTINEL_FAULTS = frozenset({"redis_failover"})
#: faults that need the cluster topology
CLUSTER_FAULTS = frozenset({"cluster_failover"})
TOPOLOGIES = ("single", "sentinel", "cluster")


def faults_for(topology: str) -> tuple[str, ...]:
    """What ``--faults all`` means in ``topology``."""
    return tuple(
        k
        for k in FAULT_KINDS
        if (topology == "sentinel" or k not in SENTINEL_FAULTS)
        and (topology == "cluster" or k not in CLUSTER_FAULTS)
    )


class ChaosConfig(msgspec.Struct, frozen=True, kw_only=True):
    #: seconds of workload and faults (the drain comes after)
    duration_s: float = 60.0
    seed: int = 0
    #: tasks the producer submits (plus the poison tasks)
    tasks: int = 2000
    #: poison tasks (they SIGKILL their worker): -1 = one per 500 tasks, at least one
    poison: int = -1
    workers: int = 3
    concurrency: int = 8
    reapers: int = 2
    faults: tuple[str, ...] = faults_for("single")
    #: mean gap between two faults (seconds; exponential gaps)
    fault_gap_s: float = 2.0
    fsync: str = "everysec"
    lease_ms: int = 2000
    grace_ms: int = 1000
    reaper_interval_ms: int = 250
    #: the reaper's dead-letter threshold (lost deliveries)
    max_deliveries: int = 4
    #: how long the drain may take before unfinished tasks are violations
    drain_timeout_s: float = 120.0
    #: SIGKILL of Redis under everysec may lose writes acknowledged this long before it
    aof_window_ms: int = 2500
    #: "single" (one server), "sentinel" (primary + replica + 3 sentinels) or
    #: "cluster" (3 masters + 3 replicas)
    topology: str = "single"
    #: the producer's writes are acknowledged only once WAIT saw them on the replica
    durable: bool = False
    #: durable mode: how long an enqueue waits for the replica's confirmation
    wait_timeout_ms: int = 1000
    #: without --durable, writes acknowledged this long before a failover began (and
    #: until it settled) may be lost: the replica had not got them yet
    failover_window_ms: int = 1000
    #: serve the HTTP app (rsjobs web) and send part of the poison inputs through it
    web: bool = True
    #: poison inputs (bad requests, refused-command floods); -1 = one per 100 tasks
    poison_inputs: int = -1
    #: hostile-client actions (tools.chaos.hostile); -1 = every kind once, plus one per
    #: 500 tasks; 0 = none
    hostile: int = -1
    #: workflows started (2 stages, no gates); -1 = one per 40 tasks
    workflows: int = -1
    namespace: str = "chaos"
    #: the namespace's shards (rsjobs.store.shards); 1: one, as before shards
    shards: int = 1
    #: the Registry the workers load; another one must wrap ``tools.chaos.handlers``
    #: (e.g. to try a patched worker build without touching the package)
    worker_app: str = "tools.chaos.handlers:tasks"
    report: str | None = None
    #: keep the run directory (logs, AOF) even when the run passes
    keep: bool = False
    verbose: bool = False

    def __post_init__(self) -> None:
        if self.duration_s < 5:
            raise ConfigError("--duration must be at least 5 seconds")
        if self.tasks < 1 or self.workers < 1 or self.reapers < 1 or self.concurrency < 1:
            raise ConfigError("--tasks, --workers, --reapers and --concurrency must be >= 1")
        if self.fsync not in ("everysec", "always"):
            raise ConfigError("--fsync must be 'everysec' or 'always'")
        if self.topology not in TOPOLOGIES:
            raise ConfigError(f"--topology must be one of {', '.join(TOPOLOGIES)}")
        if self.topology != "sentinel" and set(self.faults) & SENTINEL_FAULTS:
            raise ConfigError("redis_failover needs --topology sentinel")
        if self.topology != "cluster" and set(self.faults) & CLUSTER_FAULTS:
            raise ConfigError("cluster_failover needs --topology cluster")
        if self.durable and self.topology == "single":
            raise ConfigError(
                "--durable needs --topology sentinel or cluster (a replica to WAIT for)"
            )
        unknown = set(self.faults) - set(FAULT_KINDS)
        if unknown:
            raise ConfigError(
                f"unknown faults {sorted(unknown)}; choose from {', '.join(FAULT_KINDS)}"
            )
        if not 1 <= self.shards <= 256:
            raise ConfigError("--shards must be between 1 and 256")
        if self.lease_ms < 300 or self.fault_gap_s <= 0 or self.drain_timeout_s <= 0:
            raise ConfigError("--lease-ms >= 300, --fault-gap > 0 and --drain-timeout > 0")

    @property
    def active_s(self) -> float:
        """Submissions happen in the first 80% of the run, so faults hit work in flight."""
        return self.duration_s * 0.8
