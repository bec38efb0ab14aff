"""The bounded version of bench/dashboard.py: 5,000 finished tasks, the console's calls
measured (40 requests each) against the same budgets (first screen and filtered lists
p95 <= 200 ms, a list page p95 <= 50 ms), then the tasks expire and DBSIZE comes back to
the baseline, used_memory within a small margin of it (allocator slack)."""

from __future__ import annotations

import pytest

from bench.dashboard import BUDGETS, run, verdicts

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_the_console_calls_meet_their_budgets_and_memory_returns(redis_url: str) -> None:
    result = run(redis_url, tasks=5_000, requests=40, retention_s=60, namespace="dshort")
    rows = result["rows"]
    assert set(BUDGETS) <= set(rows)
    # the measured calls answered what they should: full pages, full series windows
    assert rows["tasks first page"]["items"] == 50 and rows["tasks pages 2..N"]["items"] == 50
    assert rows["filtered: state+queue"]["items"] == 50
    assert rows["series 60 min"]["items"] == 60 and rows["series 1440 min"]["items"] == 1440
    assert rows["first screen"]["n"] == 40
    assert not verdicts(result), verdicts(result)
    (base_keys, base_mem), (peak_keys, _), (end_keys, end_mem) = (
        result["memory"]["base"], result["memory"]["peak"], result["memory"]["end"]
    )  # fmt: skip
    assert peak_keys >= base_keys + 5_000  # the tasks were there...
    assert end_keys == base_keys  # ...and are gone, their index entries too
    assert end_mem <= base_mem + max(base_mem // 10, 256 * 1024), (base_mem, end_mem)
