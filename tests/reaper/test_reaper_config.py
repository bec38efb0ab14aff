"""The reaper's settings and report, without Redis."""

from __future__ import annotations

import pytest

from rsjobs.errors import ConfigError
from rsjobs.reaper import ReaperConfig, SweepReport


def test_defaults_derive_idle_and_guard_from_lease_and_interval() -> None:
    c = ReaperConfig(lease_ms=1500, interval_ms=200)
    assert c.idle_ms == 1500 and c.guard_ms == 160
    assert ReaperConfig(lease_ms=1500, min_idle_ms=10).idle_ms == 10
    assert ReaperConfig(interval_ms=10).guard_ms == 50  # never shorter than 50 ms


@pytest.mark.parametrize(
    "kw",
    [{"interval_ms": 0}, {"lease_ms": 0}, {"max_deliveries": 0}, {"batch": 0},
     {"min_idle_ms": -1}, {"deadline_grace_ms": -5}, {"forget_ms": -1}],
)  # fmt: skip
def test_bad_settings_are_refused(kw: dict[str, int]) -> None:
    with pytest.raises(ConfigError):
        ReaperConfig(**kw)


def test_report_counts_what_changed() -> None:
    r = SweepReport(reaper="r", sweep=1, retried=1, expired=2, promoted=3, alive=7, busy=1)
    assert r.changed == 6
