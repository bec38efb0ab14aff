"""The bounded version of bench/dashboard.py, in two parts: with 5,000 finished tasks
kept, the console's calls (40 requests each) meet the same budgets (first screen and
filtered lists p95 <= 200 ms, a list page p95 <= 50 ms); with 5,000 that expire after
30 s, every call once, then DBSIZE comes back to the baseline and used_memory to
within a small margin of it (allocator slack).

Both are slow-tier (``make test-all``, ``make test-slow``): the budgets are wall-clock p95s,
which a machine running the suite's parallel workers measures as its own load, and the
memory run waits out a 30 s retention. ``make test`` keeps the bounds on what a finished
task costs (``tests/bench/test_memory*.py``) and on list calls
(``tests/bench/test_lists_bounded.py``)."""

from __future__ import annotations

import os

import pytest

from bench.dashboard import BUDGETS, run, verdicts

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.timeout(300)
def test_the_console_calls_meet_their_budgets(redis_url: str) -> None:
    # wall-clock budgets: on a machine whose run queue is several times its cores, a p95
    # measures the scheduler, not the code (the memory test below runs whatever the load)
    cores = os.cpu_count() or 1
    if os.getloadavg()[0] > 4 * cores:
        pytest.skip(f"load average {os.getloadavg()[0]:.1f} on {cores} cores: no timing budget")
    result = run(redis_url, tasks=5_000, requests=40, retention_s=0, namespace="dshort")
    rows = result["rows"]
    assert set(BUDGETS) <= set(rows)
    # the measured calls answered what they should: full pages, full series windows
    assert rows["tasks first page"]["items"] == 50 and rows["tasks pages 2..N"]["items"] == 50
    assert rows["filtered: state+queue"]["items"] == 50
    # (the last minutes have a point only once a reaper sampled them: none runs while the
    # calls are measured)
    assert 57 <= rows["series 60 min"]["items"] <= 60
    assert 1437 <= rows["series 1440 min"]["items"] <= 1440
    assert rows["first screen"]["n"] == 40
    assert not verdicts(result), verdicts(result)


@pytest.mark.timeout(300)
def test_memory_returns_to_the_baseline_after_retention(redis_url: str) -> None:
    result = run(redis_url, tasks=5_000, requests=1, retention_s=30, namespace="dmem")
    (base_keys, base_mem), (peak_keys, _), (end_keys, end_mem) = (
        result["memory"]["base"], result["memory"]["peak"], result["memory"]["end"]
    )  # fmt: skip
    assert peak_keys >= base_keys + 5_000  # the tasks were there...
    assert end_keys == base_keys  # ...and are gone, their index entries too
    assert end_mem <= base_mem + max(base_mem // 10, 256 * 1024), (base_mem, end_mem)
