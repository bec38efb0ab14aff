"""The paired comparison of the tree with a revision (``bench.run --baseline REV``), in
pieces that need no Redis: the order of a round, the per-round ratios and their median,
the report's section, the import guard, and the load experiment's paced producer."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from bench import paired, report
from bench.load import paced_enqueue
from bench.paired import Pair
from bench.peers.base import RSJOBS_ROOT_ENV, check_import_root

pytestmark = pytest.mark.unit

PAIR = Pair("rsjobs", "rsjobs@abc1234")


def _rec(
    system: str, rnd: int, problems: list[str] | None = None, **metrics: float
) -> dict[str, Any]:
    return {"system": system, "round": rnd, "experiment": "process1", "metrics": metrics,
            "problems": problems or [], "raw": {}, "versions": {}}  # fmt: skip


def test_the_pair_runs_back_to_back_and_alternates_which_goes_first() -> None:
    orders = [paired.round_order(["rsjobs"], rnd, PAIR) for rnd in range(4)]
    assert orders == [["rsjobs", PAIR.baseline], [PAIR.baseline, "rsjobs"]] * 2
    # with peers: the order still rotates, the pair stays adjacent and alternates
    systems = ["rsjobs", "taskiq", "bullmq"]
    for rnd in range(6):
        order = paired.round_order(systems, rnd, PAIR)
        assert sorted(order) == sorted([*systems, PAIR.baseline])
        at = order.index("rsjobs")
        first = min(at, order.index(PAIR.baseline))
        assert order[first] == ("rsjobs" if rnd % 2 == 0 else PAIR.baseline)
        assert abs(at - order.index(PAIR.baseline)) == 1
    firsts = {paired.round_order(systems, rnd, PAIR)[0] for rnd in range(3)}
    assert len(firsts) == 3
    # without a baseline: the plain rotation bench.run always had
    assert paired.round_order(systems, 1) == ["taskiq", "bullmq", "rsjobs"]


def test_the_median_is_of_the_per_round_ratios_not_a_ratio_of_medians() -> None:
    # a machine whose load changes from round to round: per round the tree is 2x, 1.5x
    # and 1.1x; the medians of each side (66 / 60) would say 1.1x
    tree = {1: 200.0, 2: 45.0, 3: 66.0}
    base = {1: 100.0, 2: 30.0, 3: 60.0}
    records = [_rec("rsjobs", r, proc_1w_per_s=v) for r, v in tree.items()]
    records += [_rec(PAIR.baseline, r, proc_1w_per_s=v) for r, v in base.items()]
    records.append(_rec("taskiq", 1, proc_1w_per_s=1.0))  # no part of the pair
    got = paired.paired(records, PAIR)["proc_1w_per_s"]
    assert [row["ratio"] for row in got["per_round"]] == pytest.approx([2.0, 1.5, 1.1])
    assert [row["round"] for row in got["per_round"]] == [1, 2, 3]
    assert got["median"] == 1.5
    assert (got["min"], got["max"], got["rounds"]) == (pytest.approx(1.1), 2.0, 3)
    assert statistics.median(tree.values()) / statistics.median(base.values()) == 1.1


def test_a_failed_run_or_a_zero_baseline_drops_that_rounds_ratio_only() -> None:
    records = [
        _rec("rsjobs", 1, proc_1w_per_s=10.0, redis_cpu_us_per_task_1w=5.0),
        _rec(PAIR.baseline, 1, proc_1w_per_s=5.0, redis_cpu_us_per_task_1w=0.0),
        _rec("rsjobs", 2, proc_1w_per_s=9.0),
        _rec(PAIR.baseline, 2, ["handler ran 2 times"], proc_1w_per_s=3.0),
        _rec("rsjobs", 3, proc_1w_per_s=12.0),
        _rec(PAIR.baseline, 3, proc_1w_per_s=4.0),
    ]
    got = paired.paired(records, PAIR)
    assert [r["round"] for r in got["proc_1w_per_s"]["per_round"]] == [1, 3]
    assert got["proc_1w_per_s"]["median"] == 2.5
    assert "redis_cpu_us_per_task_1w" not in got


def test_the_report_has_the_paired_section_with_both_sources() -> None:
    records = [_rec("rsjobs", 1, proc_1w_per_s=30.0), _rec(PAIR.baseline, 1, proc_1w_per_s=20.0)]
    meta: dict[str, Any] = {
        "redis_version": "7.0", "tasks": 300, "concurrency": 32, "latency_samples": 200,
        "rounds": 1, "cpus": 2, "python": "3.11", "systems": ["rsjobs", PAIR.baseline],
        "experiments": ["process1"], "versions": {},
        "baseline": {"label": PAIR.baseline, "rev": "v1", "sha": "abc1234" * 5},
        "sources": {
            "rsjobs": {"sha": "f" * 40, "dirty": True, "imported_from": "/tree/rsjobs"},
            PAIR.baseline: {"sha": "abc1234" * 5, "dirty": False, "rev": "v1",
                            "imported_from": "/rev/src/rsjobs"},
        },
    }  # fmt: skip
    med = report.medians(records, meta["systems"])
    md = report.markdown(meta, med, {}, records, paired.paired(records, PAIR))
    assert f"## Tree / baseline, paired: rsjobs / {PAIR.baseline}" in md
    assert "| Processing, 1 worker | higher | 1.500 | 1.500 | 1.500 | 1 |" in md
    assert "uncommitted changes" in md and "`/rev/src/rsjobs`" in md and "(`v1`)" in md
    # a revision is not a peer: no rsjobs / peer table for it
    assert "Ratios rsjobs / peer" not in md


def test_a_process_that_imported_the_wrong_rsjobs_refuses_to_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(RSJOBS_ROOT_ENV, str(tmp_path / "rev" / "src"))
    with pytest.raises(RuntimeError, match="expected under"):
        check_import_root(str(tmp_path / "tree" / "rsjobs" / "__init__.py"))
    check_import_root(str(tmp_path / "rev" / "src" / "rsjobs" / "__init__.py"))
    monkeypatch.delenv(RSJOBS_ROOT_ENV)
    check_import_root(str(tmp_path / "tree" / "rsjobs" / "__init__.py"))  # no pairing: any


class _Recorder:
    """A driver that only records what the producer asked for."""

    name = "fake"

    def __init__(self, has_bulk: bool) -> None:
        self.has_bulk = has_bulk
        self.calls: list[list[int]] = []

    async def enqueue_one(self, i: int) -> None:
        self.calls.append([i])

    async def enqueue_bulk(self, indices: Sequence[int]) -> None:
        self.calls.append(list(indices))


@pytest.mark.parametrize("has_bulk", [True, False])
async def test_the_paced_producer_sends_every_task_once_in_order(has_bulk: bool) -> None:
    driver = _Recorder(has_bulk)
    # fast enough that the test waits well under a millisecond per task
    sent_at, producer = await paced_enqueue(driver, range(100, 300), rate=1e6)  # type: ignore[arg-type]
    assert [i for call in driver.calls for i in call] == list(range(100, 300))
    assert set(sent_at) == set(range(100, 300))
    times = [sent_at[i] for i in range(100, 300)]
    assert times == sorted(times)
    assert producer["calls"] == len(driver.calls)
    if not has_bulk:
        assert all(len(call) == 1 for call in driver.calls)
    else:  # behind its schedule from the start: whatever is due goes in one call
        assert len(driver.calls) < 200
