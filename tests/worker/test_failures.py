"""What a failed attempt leaves (no Redis): the bounded traceback and the log lines."""

from __future__ import annotations

import logging

import pytest

from rsjobs.worker.failures import (
    TRACEBACK_FRAMES,
    format_traceback,
    log_failure,
    traceback_log,
)


def _deep(n: int) -> None:
    if n == 0:
        raise ValueError("the innermost failure")
    _deep(n - 1)


def _caught(depth: int) -> BaseException:
    try:
        _deep(depth)
    except ValueError as exc:
        return exc
    raise AssertionError("unreachable")


def test_a_short_traceback_is_kept_whole() -> None:
    exc = _caught(2)
    tb = format_traceback(exc)
    assert tb.startswith("Traceback (most recent call last):")
    assert tb.rstrip().endswith("ValueError: the innermost failure")
    assert tb.count("in _deep") == 3 and "left out" not in tb


def test_only_the_innermost_frames_are_kept_and_it_says_so() -> None:
    exc = _caught(40)
    tb = format_traceback(exc, 100_000)
    frames = tb.count('File "')
    assert frames <= TRACEBACK_FRAMES
    assert tb.startswith("[") and "outer frames left out" in tb.splitlines()[0]
    assert tb.rstrip().endswith("ValueError: the innermost failure")


def test_a_long_traceback_is_cut_to_its_end_with_a_marker() -> None:
    try:
        raise RuntimeError("x" * 5000)
    except RuntimeError as exc:
        tb = format_traceback(exc, 300)
    assert len(tb) <= 300
    first, _, rest = tb.partition("\n")
    assert first.startswith("[traceback cut to its last 300 of ") and first.endswith("characters]")
    assert rest.endswith("x" * 10 + "\n")


def test_a_chain_keeps_each_exception() -> None:
    try:
        try:
            _deep(1)
        except ValueError as inner:
            raise KeyError("outer") from inner
    except KeyError as exc:
        tb = format_traceback(exc)
    assert "ValueError: the innermost failure" in tb and "KeyError: 'outer'" in tb
    assert "direct cause" in tb


def _boom() -> int:
    raise LookupError("nothing there")


def test_the_marker_lines_are_left_out() -> None:
    try:
        value = {"a": _boom()}  # a call inside a line: Python 3.11 marks it with ^^^^
    except LookupError as exc:
        tb = format_traceback(exc)
    else:
        raise AssertionError(value)
    assert 'value = {"a": _boom()}' in tb
    assert not any(set(line.strip()) <= {"^", "~"} for line in tb.splitlines() if line.strip())


def test_no_traceback_when_turned_off() -> None:
    assert format_traceback(_caught(1), 0) == ""


def test_the_failure_line_names_the_task_and_the_traceback_can_be_turned_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("rsjobs.worker")
    exc = _caught(1)
    with caplog.at_level(logging.INFO):
        log_failure(log, "w1", "t" * 32, "image.generate", "gpu", 2, "ValueError: bad", exc)
    lines = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert lines[0] == (
        "rsjobs.worker", logging.WARNING,
        f"worker w1: task {'t' * 32} (type image.generate, queue gpu) failed on attempt 2: "
        "ValueError: bad",
    )  # fmt: skip
    assert lines[1][0] == "rsjobs.worker.traceback" and caplog.records[1].exc_info is not None
    caplog.clear()
    traceback_log.setLevel(logging.WARNING)
    try:
        with caplog.at_level(logging.INFO):
            log_failure(log, "w1", "t" * 32, "image.generate", "gpu", 2, "ValueError: bad", exc)
    finally:
        traceback_log.setLevel(logging.NOTSET)
    assert [r.name for r in caplog.records] == ["rsjobs.worker"]
