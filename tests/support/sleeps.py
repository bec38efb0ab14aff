"""The suite's check on real-time sleeping (a pytest plugin, loaded by ``tests/conftest.py``).

``time.sleep`` and ``asyncio.sleep`` are wrapped for the whole session; the seconds slept
(measured, not asked for: a cancelled sleep counts what it lasted) by calls made directly
from a test module or a conftest under the run's ``tests/`` are summed per test, fixtures' setup
included. A test that slept more than the limit in all fails, naming its total. The limit
is the ini setting ``sleep_limit_s`` (1.0), or ``RSJOBS_SLEEP_LIMIT_S`` in the environment.

Not counted: ``asyncio.sleep(0)`` (a yield, not a wait); calls from ``tests/support/``,
whose sleeps are the poll intervals of bounded waits on a condition and the work the test
task handlers stand for; child processes (workers, reapers, tools started by a test). A
test marked ``slow`` is not checked (the slow tier runs chaos, soaks and long fuzzing at
length, and ``make test`` deselects it): there is no other way out.

Every test's total is noted in its report (``slept_s``), and the end of the run lists the
tests that slept 0.5 s or more, so the cost stays visible under the limit too.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Coroutine, Generator
from pathlib import Path
from typing import Any

import pytest

#: where counted calls come from: ``tests/`` but its ``support/`` (set at configure)
_dirs = ["", ""]
#: a test's total from which the end of the run lists it
SHOWN_FROM_S = 0.5

_sleep = time.sleep
_asleep = asyncio.sleep
_slept = [0.0]
#: (seconds, test) of the tests that slept SHOWN_FROM_S or more (workers' reports included)
_over: list[tuple[float, str]] = []


def _counted(filename: str) -> bool:
    return filename.startswith(_dirs[0]) and not filename.startswith(_dirs[1])


def _timed_sleep(seconds: float) -> None:
    if not _counted(sys._getframe(1).f_code.co_filename):
        return _sleep(seconds)
    t0 = time.monotonic()
    try:
        return _sleep(seconds)
    finally:
        _slept[0] += time.monotonic() - t0


async def _measured(coro: Coroutine[Any, Any, Any]) -> Any:
    t0 = time.monotonic()
    try:
        return await coro
    finally:
        _slept[0] += time.monotonic() - t0


def _timed_asleep(delay: float, result: Any = None) -> Coroutine[Any, Any, Any]:
    coro = _asleep(delay, result)
    if delay <= 0 or not _counted(sys._getframe(1).f_code.co_filename):
        return coro
    return _measured(coro)


def limit_s(config: pytest.Config) -> float:
    """The per-test limit in seconds (environment first, then the ini setting)."""
    raw = os.environ.get("RSJOBS_SLEEP_LIMIT_S") or str(config.getini("sleep_limit_s"))
    try:
        return float(raw)
    except ValueError:
        raise pytest.UsageError(f"sleep limit: a number of seconds, not {raw!r}") from None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "sleep_limit_s",
        "seconds a test may sleep in real time in all (tests/support/sleeps.py)",
        default="1.0",
    )
    parser.addini(
        "sleep_counted_dir",
        "the folder (from the rootdir) whose sleeps count, but its support/",
        default="tests",
    )


def pytest_configure(config: pytest.Config) -> None:
    limit_s(config)  # a bad setting is said at once
    tests = str(Path(config.rootpath, str(config.getini("sleep_counted_dir"))).resolve()) + os.sep
    _dirs[:] = [tests, tests + "support" + os.sep]
    time.sleep = _timed_sleep
    asyncio.sleep = _timed_asleep  # type: ignore[assignment]


def pytest_unconfigure(config: pytest.Config) -> None:
    time.sleep = _sleep
    asyncio.sleep = _asleep


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _slept[0] = 0.0


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    yield  # a test that failed already is not checked
    total = _slept[0]
    item.user_properties.append(("slept_s", round(total, 3)))
    limit = limit_s(item.config)
    if total > limit and item.get_closest_marker("slow") is None:
        pytest.fail(
            f"slept {total:.2f} s in real time in all (limit {limit:g} s, "
            "tests/support/sleeps.py): inject the time or wait on a condition",
            pytrace=False,
        )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call":
        return
    for name, value in report.user_properties:
        if name == "slept_s" and isinstance(value, float | int) and value >= SHOWN_FROM_S:
            _over.append((float(value), report.nodeid))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if not _over:
        return
    terminalreporter.section(f"real-time sleeps of {SHOWN_FROM_S} s or more per test")
    for total, nodeid in sorted(_over, reverse=True):
        terminalreporter.write_line(f"{total:7.2f} s  {nodeid}")
