"""``history.span`` (a finished task's start, end and worker, read lean for lists and
``decode_task``) says what the full reading of its history (``history.entries``) says, for
histories with retries, refusals after the end, and escaped worker names."""

from __future__ import annotations

from typing import Any

import pytest

from rsjobs.model import TERMINAL
from rsjobs.store import layout
from rsjobs.store.history import entries, span
from rsjobs.store.layout import StartArgs
from tests.support.lua import LuaHarness

A = "a" * 32


def by_entries(h: dict[str, str]) -> tuple[int, int, str]:
    """What decode_task read from the whole history before span existed."""
    started = finished = 0
    worker = ""
    for _, e in entries(h, A):
        if e.get("rej"):
            continue
        if e.get("ev") == "START":
            started, worker = int(e["ts"]), e.get("worker", "")
        if e.get("to") in TERMINAL and e.get("from") not in TERMINAL:
            finished = int(e["ts"])
    return started, finished, worker


def start(h: LuaHarness, consumer: str) -> Any:
    (entry,) = h.deliver(consumer)
    call = layout.start(
        h.c, h.k, "worker", StartArgs(consumer, 30_000, "n1", "q"), [(h.tk(A), h_entry(entry))]
    )
    return h.run(call)[0]


def h_entry(entry: str) -> layout.Entry:
    return layout.Entry(entry)


@pytest.mark.parametrize("worker", ["w1", "gpu box|1 100%", "w=x"])
@pytest.mark.parametrize("ending", ["COMPLETE", "FAIL", "CANCEL"])
def test_span_reads_what_the_entries_say(worker: str, ending: str) -> None:
    h = LuaHarness()
    h.enqueue(A, max_attempts=2)
    h.group()
    first = start(h, "first")
    h.finish(A, "FAIL", first[5])  # a retry
    h.r.zadd(h.k.scheduled, {f"q:{A}": 0})
    h.promote()
    second = start(h, worker)
    if ending == "CANCEL":
        h.control(A, "CANCEL")
    else:
        h.finish(A, ending, second[5], retryable=False)
    for _ in range(3):  # refusals after the end: entries, and repeats
        h.control(A, "CANCEL")
        h.finish(A, "COMPLETE", "9:late")
    raw = h.r.hgetall(h.k.task(A))
    assert h.task(A)["state"] in TERMINAL
    got = span(raw, A)
    assert got == by_entries(raw)
    assert got[2] == worker and got[0] and got[1] >= got[0]


def test_progress_is_a_number_on_its_notes_and_100_on_success() -> None:
    """A PROGRESS note carries the percent as a number (``progress``, beside its text in
    ``extra["p"]``); the entry that made the task SUCCEEDED says 100; the others null."""
    h = LuaHarness("prog")
    tid = "p" * 32
    h.enqueue(tid)
    h.group()
    (entry,) = h.deliver()
    token = h.start(tid, entry)[5]
    h.heartbeat(tid, token, entry, progress="42.5")
    h.finish(tid, "COMPLETE", token)
    by_event = {e.event: e for e in h.history(tid)}
    assert by_event["PROGRESS"].progress == 42.5 and by_event["PROGRESS"].extra["p"]
    assert by_event["COMPLETE"].progress == 100.0 and by_event["COMPLETE"].to_state == "SUCCEEDED"
    assert by_event["ENQUEUE"].progress is None and by_event["START"].progress is None
