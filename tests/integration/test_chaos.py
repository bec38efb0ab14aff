"""Short chaos runs (``python -m tools.chaos``) must end with zero violations.

Each runs as a child process (its own Redis with AOF, workers, reapers, the web app; every
pid cleaned up by the harness). The seed is random unless ``RSJOBS_CHAOS_SEED`` is set; it
is in the output and in the report, so a failure can be replayed with ``--seed``.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT
from tools.chaos.config import faults_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def run_chaos(tmp_path: Path, *args: str, timeout: float) -> tuple[int, dict[str, object], str]:
    seed = os.environ.get("RSJOBS_CHAOS_SEED") or str(random.randrange(1, 2**31))
    report = tmp_path / "report.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "tools.chaos", "--seed", seed, "--report", str(report), *args]
    proc = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    out = proc.stdout + proc.stderr
    data = json.loads(report.read_text()) if report.exists() else {}
    return proc.returncode, data, out


@pytest.mark.timeout(300)
def test_short_run_everysec_has_no_violation(tmp_path: Path) -> None:
    """Every fault of the single topology, workflows, the web app serving; no poison
    inputs (their own run is below)."""
    rc, rep, out = run_chaos(
        tmp_path,
        "--duration", "25", "--tasks", "500", "--workers", "3", "--reapers", "2",
        "--lease-ms", "2000", "--fault-gap", "1.3", "--fsync", "everysec",
        "--drain-timeout", "150", "--poison-inputs", "0",
        timeout=280,
    )  # fmt: skip
    assert rc == 0, out[-6000:]
    assert rep["passed"] and rep["violations"] == [], out[-6000:]
    counts = rep["counts"]
    assert isinstance(counts, dict)
    # total accounting: every accepted task was found and is terminal
    assert counts["accepted"] >= 500
    assert counts["tasks_found"] == (
        counts["accepted"] + counts.get("unacked_created", 0) + counts["workflow_tasks"]
    )
    assert sum(rep["states"].values()) == counts["tasks_found"]  # type: ignore[attr-defined]
    faults = rep["fault_counts"]
    assert isinstance(faults, dict)
    _every_kind_applied_or_skipped(rep, faults)
    assert counts["executions"] <= counts["starts"]
    # every started workflow was accounted for (terminal, its tasks consistent)
    assert counts["workflows_started"] >= 8
    assert counts["workflows_started"] == sum(
        v for k, v in counts.items() if k.startswith("workflows_") and k != "workflows_started"
    )


@pytest.mark.timeout(240)
def test_short_run_fsync_always_loses_nothing(tmp_path: Path) -> None:
    rc, rep, out = run_chaos(
        tmp_path,
        "--duration", "15", "--tasks", "250", "--workers", "2", "--reapers", "1",
        "--faults", "redis_kill,redis_term,redis_freeze,worker_kill", "--fault-gap", "1.5",
        "--fsync", "always", "--drain-timeout", "120", "--poison-inputs", "0", "--no-web",
        timeout=220,
    )  # fmt: skip
    assert rc == 0, out[-6000:]
    assert rep["violations"] == [] and rep["aof_window_losses"] == [], out[-6000:]
    assert rep["fault_counts"]["redis_kill"] >= 1  # type: ignore[index]
    assert rep["fault_counts"]["redis_freeze"] >= 1  # type: ignore[index]


class OpenDefects(Exception):
    """The run found only violations of defects known to be open (listed below)."""


#: what the poison inputs find in this build, each a defect of rsjobs itself: JSON
#: nested 1,000 deep raises RecursionError in Client.enqueue / WorkflowClient.start and
#: is a 500 in the web app (POISON_MISHANDLED); a workflow start over the payload limit
#: is refused but leaves a RUNNING workflow (POISON_WROTE); a workflow whose next stage is
#: over the limit stays RUNNING (POISON_NOT_FAILED, WF_NOT_TERMINAL) and every reaper
#: driving it exits with status 2 (PROCESS_CRASH), so other work is not recovered
#: (NOT_TERMINAL, HEALTHY_TASK_RECLAIMED cannot be judged). When they are fixed this test
#: passes, strict xfail fails it, and the marker goes.
OPEN = frozenset(
    {"POISON_MISHANDLED", "POISON_WROTE", "POISON_NOT_FAILED", "WF_NOT_TERMINAL"}
    | {"PROCESS_CRASH", "NOT_TERMINAL"}
)


@pytest.mark.xfail(raises=OpenDefects, strict=True, reason="poison-input defects are open")
@pytest.mark.timeout(200)
def test_short_run_poison_inputs_are_refused_and_stop_nothing(tmp_path: Path) -> None:
    """Every kind of bad input, through the Python API and the web app: each refused with
    a clear error and nothing written, the floods answered and recorded, and no worker,
    reaper or web app stopped by any of them."""
    rc, rep, out = run_chaos(
        tmp_path,
        "--duration", "10", "--tasks", "150", "--workers", "2", "--reapers", "2",
        "--faults", "redis_drop,worker_kill", "--fault-gap", "3", "--poison-inputs", "10",
        "--workflows", "3", "--drain-timeout", "15",
        timeout=180,
    )  # fmt: skip
    assert rep, out[-6000:]
    counts = rep["counts"]
    assert isinstance(counts, dict)
    assert counts["poison_inputs"] == 10 and counts["floods"] >= 1, counts
    violations = rep["violations"]
    assert isinstance(violations, list)
    found = {str(v["kind"]) for v in violations}
    if found and found <= OPEN:
        raise OpenDefects(sorted(found))
    assert rc == 0 and not violations, out[-6000:]


def _every_kind_applied_or_skipped(rep: dict[str, object], faults: dict[str, int]) -> None:
    """The schedule places every kind at least once; the injector may skip a fault whose
    target is busy with another one (a stopped worker cannot be SIGTERMed), and says so."""
    planned = {str(f["kind"]) for f in rep["schedule"]}  # type: ignore[attr-defined]
    kinds = faults_for("single")
    assert planned == set(kinds), planned
    events = rep["faults"]
    assert isinstance(events, list)
    skipped = " ".join(
        f"{e['target']} {e['detail']}" for e in events if e["kind"] == "fault_skipped"
    )
    for kind in kinds:
        assert faults.get(kind, 0) >= 1 or kind in skipped, (kind, faults, skipped)
    # skips are the exception, not the rule
    assert sum(faults.get(k, 0) for k in kinds) >= len(kinds), faults
