"""``python -m bench.run --baseline HEAD`` end to end, small: the tree against its own
commit, so the two sides run the same code and the paired ratios must sit near 1; the
baseline's processes import the exported revision, not the tree."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # make test-slow, make test-all

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 2


@pytest.mark.timeout(600)
def test_the_tree_against_its_own_commit_gives_ratios_near_one(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench.run", "--systems", "rsjobs", "--baseline", "HEAD",
         "--python", sys.executable, "--experiments", "process1,process2,load",
         "--tasks", "300", "--rounds", str(ROUNDS), "--out-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=580,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads((tmp_path / "latest.json").read_text())
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    base = result["paired"]["baseline"]
    assert base == f"rsjobs@{head[:7]}" and result["paired"]["tree"] == "rsjobs"

    # each side imported its own rsjobs: the tree's, and the revision exported by sha
    sources = result["meta"]["sources"]
    assert Path(sources["rsjobs"]["imported_from"]) == ROOT / "rsjobs"
    assert sources[base]["sha"] == head
    assert Path(sources[base]["imported_from"]) == (
        ROOT / ".venv-bench" / "rev" / head / "src" / "rsjobs"
    )

    # back to back, the first of the two alternating
    runs = result["runs"]
    firsts = [next(r["system"] for r in runs if r["round"] == k) for k in (1, 2)]
    assert firsts == ["rsjobs", base]

    metrics = result["paired"]["metrics"]
    for key in ("proc_1w_per_s", "enqueue_one_per_s", "enqueue_bulk_per_s",
                "redis_cpu_us_per_task_1w", "worker_cpu_us_per_task_1w", "load50_p99_ms"):  # fmt: skip
        m = metrics[key]
        assert m["rounds"] == ROUNDS
        ratios = [row["ratio"] for row in m["per_round"]]
        for row in m["per_round"]:
            assert row["ratio"] == pytest.approx(row["tree"] / row["baseline"])
        assert m["median"] == pytest.approx(statistics.median(ratios))
        assert (m["min"], m["max"]) == (min(ratios), max(ratios))
    # the same code on both sides: the work per task matches; timings only roughly on a
    # shared machine (300 tasks, 2 rounds)
    assert 0.8 <= metrics["redis_cmds_per_task_1w"]["median"] <= 1.25
    for key in ("proc_1w_per_s", "redis_cpu_us_per_task_1w", "worker_cpu_us_per_task_1w"):
        assert 0.33 <= metrics[key]["median"] <= 3.0, (key, metrics[key])

    # latency under load is in the tables and the JSON
    md = (tmp_path / "latest.md").read_text()
    assert "Latency p99 at 80% of peak" in md and "## Tree / baseline, paired" in md
    load = [r for r in runs if r["experiment"] == "load"]
    assert len(load) == 2 * ROUNDS
    for r in load:
        assert set(r["raw"]["levels"]) == {"50", "80"}
        assert r["metrics"]["load50_p50_ms"] <= r["metrics"]["load50_p99_ms"]
