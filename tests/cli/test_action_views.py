"""The operator actions' pure parts (no Redis): times on the command line, filters, pause
records, who acts, and what the tables show of retries, paused queues and tracebacks."""

from __future__ import annotations

import datetime as dt

import pytest

from rsjobs import ConfigError, HistoryEntry, TaskFilter, TaskInfo
from rsjobs.bulk import check_filter
from rsjobs.cli import CliError
from rsjobs.console.actions import parse_time
from rsjobs.console.tables import render_table
from rsjobs.console.views import queues_table, status_table, tracebacks
from rsjobs.store.tasks import pause_record
from rsjobs.web.auth import ANONYMOUS, Principal

TID = "0123456789abcdef" * 2


def test_times_on_the_command_line() -> None:
    now = 1_764_590_000_000
    assert parse_time("1764590000123") == 1_764_590_000_123
    assert parse_time("90s", now_ms=now) == now - 90_000
    assert parse_time("2h", now_ms=now) == now - 7_200_000
    assert parse_time("1d", now_ms=now) == now - 86_400_000
    zoned = "2026-12-01T10:00:00+00:00"
    assert parse_time(zoned) == int(dt.datetime.fromisoformat(zoned).timestamp() * 1000)
    for bad in ("yesterday", "2h ago", "-5", "1e9", "12:99"):
        with pytest.raises(CliError, match="invalid time"):
            parse_time(bad)


@pytest.mark.parametrize(
    ("where", "why"),
    [
        (TaskFilter(), "empty filter"),
        (TaskFilter(queue="gpu\n"), "queue"),
        (TaskFilter(state="DONE"), "unknown state"),
        (TaskFilter(type=""), "type"),
        (TaskFilter(owner="a b"), "owner"),
        (TaskFilter(since=-1), "since"),
        (TaskFilter(until=True), "until"),  # type: ignore[arg-type]
        (TaskFilter(since=10, until=10), "before until"),
    ],
)
def test_bad_filters_are_refused(where: TaskFilter, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        check_filter(where)


def test_a_good_filter_passes() -> None:
    check_filter(TaskFilter(queue="gpu", state="PENDING", type="t", owner="alice", since=0,
                            until=5))  # fmt: skip


def test_pause_records() -> None:
    p = pause_record("gpu", '{"at": 1700000000000, "by": "cli", "reason": "drivers"}')
    assert (p.paused, p.since, p.by, p.reason) == (True, 1_700_000_000_000, "cli", "drivers")
    assert pause_record("gpu", "").paused is False
    garbled = pause_record("gpu", "not json")
    assert garbled.paused and garbled.since == 0 and garbled.by == ""


def test_who_acts() -> None:
    assert Principal(owner="alice").source == "owner:alice"
    assert Principal(owner="ops", admin=True).source == "admin:ops"
    assert ANONYMOUS.source == "anonymous"


def test_status_shows_the_links_and_a_paused_queue() -> None:
    info = TaskInfo(id=TID, type="t", queue="gpu", state="PENDING", retry_of="a" * 32,
                    queue_paused=True)  # fmt: skip
    text = render_table(*status_table(info), header=False)
    assert "gpu (PAUSED: workers start nothing of it)" in text
    assert f"retry of  {'a' * 32}" in text and "retried as" not in text


def test_queues_mark_a_paused_queue() -> None:
    stats = {"gpu": {"PENDING": 2, "stream_length": 2}, "cpu": {"PENDING": 1}}
    text = render_table(*queues_table(stats, {"cpu": 1}, {"gpu"}))
    gpu = next(line for line in text.splitlines() if line.startswith("gpu"))
    cpu = next(line for line in text.splitlines() if line.startswith("cpu"))
    assert gpu.endswith("PAUSED, NO LIVE WORKER") and not cpu.endswith("PAUSED")


def test_history_prints_each_traceback_under_the_table() -> None:
    def fail(n: str, att: int, tb: str | None) -> HistoryEntry:
        extra = {"error_type": "ValueError"} | ({"traceback": tb} if tb else {})
        return HistoryEntry(id=n, event="FAIL", from_state="RUNNING", to_state="SCHEDULED",
                            source="worker", attempt=att, ts=0, extra=extra)  # fmt: skip

    entries = [fail("2", 1, "Traceback...\nValueError: a\n"), fail("4", 2, None),
               fail("6", 3, "Traceback...\nValueError: c\n")]  # fmt: skip
    lines = tracebacks(entries)
    assert lines == [
        "", "entry 2, attempt 1 (-): ValueError", "Traceback...", "ValueError: a",
        "", "entry 6, attempt 3 (-): ValueError", "Traceback...", "ValueError: c",
    ]  # fmt: skip
