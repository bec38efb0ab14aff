"""The command line's tables (no Redis): every table has one layout — a header, text
columns aligned left, numbers right, two spaces between columns, no cell cut — and the
rows say what the data says (unserved queues, refusal counts, dead workers)."""

from __future__ import annotations

import io
from collections.abc import Sequence

import pytest

from rsjobs import HistoryEntry, TaskInfo
from rsjobs.console.tables import Column, print_table, render_table
from rsjobs.console.views import (
    deadletters_table,
    history_table,
    live_workers_by_queue,
    memory_table,
    queues_table,
    status_table,
    unserved_queues,
    workers_table,
)
from rsjobs.reaper import DeadLetter, MemoryReport, QueueMemory, WorkerInfo

TID = "0123456789abcdef0123456789abcdef"


def expected(columns: Sequence[Column], rows: Sequence[Sequence[object]], header: bool) -> str:
    """The one layout, written out by hand."""
    cells = [[("-" if v in (None, "") else str(v)) for v in row] for row in rows]
    lines = ([[c.name for c in columns]] if header else []) + cells
    widths = [max(len(line[i]) for line in lines) for i in range(len(columns))]
    out = []
    for line in lines:
        parts = [
            v.rjust(w) if c.numeric else v.ljust(w)
            for v, w, c in zip(line, widths, columns, strict=True)
        ]
        out.append("  ".join(parts).rstrip() + "\n")
    return "".join(out)


def workers() -> list[WorkerInfo]:
    return [
        WorkerInfo(name="gpu-box-1", status="alive", host="gpu-box", pid=4242, queues=["gpu"],
                   beat_at=1, silent_ms=1500, processed=12345, running=[TID], holding=[TID]),
        WorkerInfo(name="old-worker-with-a-long-name", status="dead", queues=["gpu", "cpu"],
                   beat_at=1, silent_ms=9_000_000, dead_since=1_700_000_000_000, holding=["f" * 32]),
        WorkerInfo(name="slow", status="late", queues=["cpu"], beat_at=1, silent_ms=40_000),
    ]  # fmt: skip


def tables() -> dict[str, tuple[list[Column], list[list[object]], bool]]:
    info = TaskInfo(id=TID, type="image.generate", queue="gpu", state="FAILED", attempt=3,
                    failures=3, max_attempts=3, progress=42.5, progress_msg="step 17/40",
                    error="RuntimeError: out of\nmemory", created_at=1_700_000_000_123)  # fmt: skip
    history = [
        HistoryEntry(id="1-0", event="ENQUEUE", from_state="", to_state="PENDING", source="user",
                     attempt=0, ts=1_700_000_000_000, extra={"type": "image.generate"}),
        HistoryEntry(id="2-0", event="CANCEL", from_state="FAILED", to_state="FAILED",
                     source="user", attempt=3, ts=1_700_000_000_500, message="already FAILED",
                     rejected=True, repeats=2),
    ]  # fmt: skip
    stats = {
        "gpu": {"PENDING": 3, "RUNNING": 1, "SUCCEEDED": 120_000, "stream_length": 4},
        "cpu": {"SUCCEEDED": 7, "stream_length": 0},
    }
    letters = [
        DeadLetter(entry="1-0", task_id=TID, queue="gpu", type="crash", worker="w1",
                   reason="lost 5 deliveries:\n  the consumer died", deliveries=5, attempt=5,
                   ts=1_700_000_000_000, requeued_as="a" * 32),
        DeadLetter(entry="2-0", task_id="b" * 32, queue="cpu", type="x", worker="w2",
                   reason="bad data", deliveries=1, attempt=1, ts=1_700_000_000_000,
                   exists=False, step="deadlines", action="DEADLETTER"),
    ]  # fmt: skip
    (wc, wr), _ = workers_table(workers())
    memory = MemoryReport(
        used_memory=1 << 20, used_memory_human="1.00M", namespace_keys={},
        queues=[QueueMemory(queue="gpu", stream_bytes=1_234_567, stream_length=4, pending=1,
                            live_tasks=4, sampled=4, task_bytes_avg=1000,
                            history_bytes_avg=400, live_bytes_est=1_240_167)],
    )  # fmt: skip
    return {
        "queues-memory": (*memory_table(memory), True),
        "status": (*status_table(info), False),
        "history": (*history_table(history), True),
        "queues": (*queues_table(stats, {"cpu": 1}), True),
        "workers": (wc, wr, True),
        "deadletters": (*deadletters_table(letters), True),
    }


@pytest.mark.parametrize(
    "name", ["status", "history", "queues", "workers", "deadletters", "queues-memory"]
)
def test_every_table_has_the_one_layout(name: str) -> None:
    columns, rows, header = tables()[name]
    assert rows
    text = render_table(columns, rows, header=header)
    assert text == expected(columns, rows, header)
    first = text.splitlines()[0]
    if header:
        assert first.split() == [w for c in columns for w in c.name.split()]


def test_rows_say_what_the_data_says() -> None:
    t = tables()
    status = dict((r[0], r[1]) for r in t["status"][1])
    assert status["state"] == "FAILED" and status["error"] == "RuntimeError: out of memory"
    assert status["attempt"] == "3 (failures 3/3)" and status["progress"] == "42.5% step 17/40"
    assert [r[2] for r in t["history"][1]] == ["", "REFUSED x3"]  # first refusal + 2 repeats
    queues = {r[0]: r for r in t["queues"][1]}
    assert queues["gpu"][-1] == "NO LIVE WORKER" and queues["cpu"][-1] == ""
    assert queues["gpu"][1:5] == [0, 4, 0, 3]  # workers, stream, WAITING, PENDING
    letters = t["deadletters"][1]
    assert letters[0][6] == f"requeued as {'a' * 32}"
    assert letters[1][6] == "quarantined by deadlines: DEADLETTER; task expired; cannot requeue"
    assert letters[0][7] == "lost 5 deliveries: the consumer died"  # one line


def test_workers_detail_dead_ones_and_what_each_holds() -> None:
    (_, rows), details = workers_table(workers())
    assert [r[1] for r in rows] == ["alive", "dead", "late"]
    assert [r[-1] for r in rows] == [1, 1, 0]
    assert details[0] == f"gpu-box-1: {TID}  (delivery held)"
    assert details[1].startswith("old-worker-with-a-long-name: dead since ")
    assert details[2] == f"old-worker-with-a-long-name: {'f' * 32}  (delivery held)"
    # only live workers serve: the dead and the late one do not count
    assert live_workers_by_queue(workers()) == {"gpu": 1}
    stats = {"gpu": {"PENDING": 1}, "cpu": {"SCHEDULED": 2, "RUNNING": 1}, "idle": {"FAILED": 9}}
    assert unserved_queues(stats, live_workers_by_queue(workers())) == {"cpu": 3}


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_narrow_terminal_no_cell_is_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    columns, rows, _ = tables()["deadletters"]
    out = Terminal()
    print_table(columns, rows, file=out)
    text = out.getvalue()
    assert "\x1b[" in text  # styled: it is a terminal
    for row in rows:
        for cell in row:
            assert str(cell) in text or cell == ""
    plain = io.StringIO()
    print_table(columns, rows, file=plain)
    assert plain.getvalue() == render_table(columns, rows)  # no colour off a terminal
