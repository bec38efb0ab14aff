"""A short chaos run on a Redis Cluster (3 masters + 3 replicas, AOF on every node) must end
with zero violations: master failovers of the namespace's slot (``CLUSTER FAILOVER``, and
SIGKILL of the master with ``CLUSTER FAILOVER FORCE``), restarts, freezes and worker kills
under appendfsync always and durable mode, with the harness's total accounting. The seed
is random unless ``RSJOBS_CHAOS_SEED`` is set (see ``test_short_runs``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.test_short_runs import _every_kind_applied_or_skipped, run_chaos
from tools.chaos.config import faults_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_cluster_is_a_topology_with_its_own_failover() -> None:
    assert "cluster_failover" in faults_for("cluster")
    assert "redis_failover" not in faults_for("cluster")
    assert "cluster_failover" not in faults_for("sentinel") + faults_for("single")


@pytest.mark.timeout(300)
def test_short_run_cluster_durable_fsync_always_loses_nothing(tmp_path: Path) -> None:
    rc, rep, out = run_chaos(
        tmp_path,
        "--duration", "18", "--tasks", "250", "--workers", "2", "--reapers", "1",
        "--topology", "cluster", "--durable", "--fsync", "always",
        "--faults", "redis_kill,redis_term,redis_freeze,cluster_failover,worker_kill",
        "--fault-gap", "1.5", "--drain-timeout", "120", "--poison-inputs", "0", "--no-web",
        timeout=280,
    )  # fmt: skip
    assert rc == 0, out[:8000]
    assert rep["violations"] == [] and rep["aof_window_losses"] == [], out[:8000]
    assert rep["failover_window_losses"] == [], out[:8000]
    faults = rep["fault_counts"]
    assert isinstance(faults, dict)
    kinds = ("redis_kill", "redis_term", "redis_freeze", "cluster_failover", "worker_kill")
    _every_kind_applied_or_skipped(rep, faults, kinds)
    events = rep["faults"]
    assert isinstance(events, list)
    done = [e for e in events if e["kind"] == "cluster_failover_done"]
    assert done and all("not settled" not in e["detail"] for e in done), done
    assert "redis+cluster://" in out  # every process connected to the cluster
