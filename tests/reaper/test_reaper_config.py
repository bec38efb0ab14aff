"""The reaper's settings and report, without Redis."""

from __future__ import annotations

import asyncio
import logging

import pytest

from rsjobs import Settings
from rsjobs.errors import ConfigError
from rsjobs.reaper import Reaper, ReaperConfig, SweepReport
from tests.support.waits import poll_until


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


@pytest.mark.integration
@pytest.mark.parametrize("log_idle", [False, True])
async def test_an_idle_reaper_is_quiet_unless_asked(
    redis_url: str, log_idle: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """By default a sweep that changed nothing logs nothing (a line a second otherwise);
    ``log_idle`` (``--log-idle``) logs every sweep."""
    reaper = Reaper(
        url=redis_url,
        settings=Settings(namespace=f"quiet{int(log_idle)}"),
        config=ReaperConfig(interval_ms=20, guard=False, log_idle=log_idle),
    )
    caplog.set_level(logging.DEBUG, logger="rsjobs.reaper")
    run = asyncio.create_task(reaper.run())
    try:

        async def swept() -> bool:
            return reaper.sweeps >= 5

        await poll_until(swept, 10, "five sweeps")
    finally:
        reaper.stop()
        await asyncio.wait_for(run, 10)
        await reaper.close()
    sweeps = [r for r in caplog.records if '"event":"sweep"' in r.getMessage()]
    assert (len(sweeps) >= 5) if log_idle else sweeps == []
    assert any('"event":"start"' in r.getMessage() for r in caplog.records)  # not silent
