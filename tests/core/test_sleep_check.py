"""The suite's check on real-time sleeping (``tests/support/sleeps.py``), run on a suite of
its own in a child pytest: a test that sleeps past the limit fails with its total, time
and asyncio sleeps alike; a yield, a short sleep and a ``slow`` test pass; the totals are
listed at the end of the run."""

from __future__ import annotations

import os

import pytest

from tests.support.processes import ROOT

pytest_plugins = ["pytester"]

SUITE = """
import asyncio
import time

import pytest


def test_sleeps_too_long():
    time.sleep(0.2)
    time.sleep(0.2)


async def test_awaits_too_long():
    await asyncio.sleep(0.3)
    await asyncio.sleep(0.2)


async def test_yields_and_a_short_sleep():
    for _ in range(1000):
        await asyncio.sleep(0)
    time.sleep(0.05)


@pytest.mark.slow
def test_slow_may_sleep():
    time.sleep(0.45)
"""


def test_a_test_sleeping_past_the_limit_fails_naming_its_total(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.delenv("RSJOBS_SLEEP_LIMIT_S", raising=False)
    pytester.makeini(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\nsleep_limit_s = 0.3\nsleep_counted_dir = suite\n"
        "markers =\n    slow: long runs\n"
    )
    pytester.mkdir("suite")
    (pytester.path / "suite" / "test_suite.py").write_text(SUITE)
    result = pytester.runpytest_subprocess("-p", "tests.support.sleeps", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.re_match_lines(
        [
            r"_+ test_sleeps_too_long _+",
            r"slept 0\.[4-9]\d s in real time in all \(limit 0\.3 s, .*",
            r"_+ test_awaits_too_long _+",
            r"slept 0\.[5-9]\d s in real time in all \(limit 0\.3 s, .*",
            r"=+ real-time sleeps of 0\.5 s or more per test =+",
            r" +0\.[5-9]\d s  suite/test_suite\.py::test_awaits_too_long",
        ]
    )
