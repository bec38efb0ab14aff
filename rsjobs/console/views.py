"""The rows of every table the command line prints, built from the public types (pure
functions: no Redis, no printing), so that each table's layout is tested on its own."""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from ..model import State
from ..schemas import HistoryEntry, TaskInfo, TaskSummary
from .tables import Column

if TYPE_CHECKING:
    from ..reaper import DeadLetter, MemoryReport, WorkerInfo

__all__ = [
    "ACTIVE_STATES",
    "QUEUE_STATES",
    "Table",
    "deadletters_table",
    "history_table",
    "live_workers_by_queue",
    "memory_table",
    "queues_table",
    "status_table",
    "tasks_table",
    "tracebacks",
    "unserved_queues",
    "waiting",
    "when",
    "workers_table",
]

Table = tuple[list[Column], list[list[object]]]

#: the state columns of ``rsjobs queues``, in the order a task passes through them
QUEUE_STATES = [s.value for s in State]
#: states whose tasks still need a worker (a RUNNING one whose worker died is reclaimed
#: by the reaper and run again)
ACTIVE_STATES = ("PENDING", "SCHEDULED", "RUNNING")


def when(ts_ms: int) -> str:
    """A Redis TIME in milliseconds as local time, ``-`` for 0."""
    if not ts_ms:
        return "-"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts_ms / 1000))
    return f"{stamp}.{ts_ms % 1000:03d}"


def age(ms: int) -> str:
    if ms < 1000:
        return f"{ms}ms"
    if ms < 120_000:
        return f"{ms / 1000:.1f}s"
    if ms < 7_200_000:
        return f"{ms // 60_000}m"
    return f"{ms // 3_600_000}h"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def status_table(info: TaskInfo) -> Table:
    """``rsjobs status``: one row per field."""
    rows: list[list[object]] = [
        ["id", info.id], ["type", info.type], ["queue", info.queue], ["state", info.state],
        ["priority", info.priority],
        ["attempt", f"{info.attempt} (failures {info.failures}/{info.max_attempts})"],
        ["progress", f"{info.progress:g}% {info.progress_msg}".rstrip()],
        ["worker", info.worker], ["owner", info.owner], ["labels", labels_text(info.labels)],
        ["created", when(info.created_at)], ["started", when(info.started_at)],
        ["finished", when(info.finished_at)],
        ["result", json.dumps(info.result) if info.result is not None else ""],
        ["error", _one_line(info.error)],
    ]  # fmt: skip
    if info.queue_paused:
        rows[2][1] = f"{info.queue} (PAUSED: workers start nothing of it)"
    if info.retry_of:
        rows.append(["retry of", info.retry_of])
    if info.retried_as:
        rows.append(["retried as", info.retried_as])
    if info.after:
        # a successor: each predecessor with the state its end was counted in
        states = info.predecessor_states
        after = " ".join(f"{p}:{states.get(p, 'awaited')}" for p in info.after)
        rows.append([f"after ({info.after_policy})", after])
    if info.successors:
        rows.append(["successors", " ".join(info.successors)])
    return [Column("field"), Column("value")], rows


def tracebacks(entries: Iterable[HistoryEntry]) -> list[str]:
    """The tracebacks of the failed attempts in ``entries``, for under ``rsjobs history``
    (a table cell cannot hold one): a heading line per attempt, then its traceback."""
    lines: list[str] = []
    for e in entries:
        tb = e.extra.get("traceback")
        if not tb or e.rejected:
            continue
        kind = e.extra.get("error_type", "")
        lines.append("")
        lines.append(f"entry {e.id}, attempt {e.attempt} ({when(e.ts)}): {kind or e.event}")
        lines += tb.rstrip("\n").splitlines()
    return lines


def error_text(error_type: str, error: str) -> str:
    """A task's error with its type before it, unless the error names it already
    ("RuntimeError: boom", "non-retryable: empty prompt" of a NonRetryable)."""
    said = error.lower().replace("-", "")
    if not error_type or error_type.lower() in said:
        return error
    return f"{error_type}: {error}"


def labels_text(labels: Mapping[str, str]) -> str:
    """Labels as ``key=value`` words (what ``--label`` takes)."""
    return " ".join(f"{k}={v}" for k, v in labels.items())


def tasks_table(items: Iterable[TaskSummary]) -> Table:
    """``rsjobs tasks``: one row per task, in the list's order (newest first)."""
    columns = [
        Column("listed"), Column("id"), Column("state"), Column("queue"),
        Column("pri", numeric=True), Column("type"), Column("att", numeric=True),
        Column("owner"), Column("labels"), Column("error"),
    ]  # fmt: skip
    rows: list[list[object]] = []
    for s in items:
        error = error_text(s.error_type, s.error)
        rows.append(
            [when(s.listed_at), s.id, s.state, s.queue, s.priority, s.type,
             f"{s.attempt}/{s.max_attempts}", s.owner, labels_text(s.labels),
             _one_line(error)[:80]]
        )  # fmt: skip
    return columns, rows


def history_table(entries: Iterable[HistoryEntry]) -> Table:
    """``rsjobs history``: one row per transition, note or refusal (with its repeats)."""
    columns = [
        Column("time"), Column("event"), Column("refused"), Column("from"), Column("to"),
        Column("att", numeric=True), Column("src"), Column("message"),
    ]  # fmt: skip
    rows: list[list[object]] = []
    for e in entries:
        refused = ""
        if e.rejected:
            refused = "REFUSED" if e.count == 1 else f"REFUSED x{e.count}"
        # (a traceback is printed under the table: see tracebacks())
        extra = " ".join(f"{k}={v}" for k, v in e.extra.items() if k != "traceback")
        message = f"{_one_line(e.message)} {extra}".strip()
        rows.append(
            [when(e.ts), e.event, refused, e.from_state, e.to_state, e.attempt, e.source, message]
        )
    return columns, rows


def live_workers_by_queue(workers: Iterable[WorkerInfo]) -> dict[str, int]:
    """queue -> how many workers serving it are alive (late and dead ones serve nothing)."""
    out: dict[str, int] = {}
    for w in workers:
        if w.status == "alive":
            for q in w.queues:
                out[q] = out.get(q, 0) + 1
    return out


def waiting(counts: Mapping[str, int]) -> int:
    """Tasks of a queue that still need a worker."""
    return sum(int(counts.get(s, 0)) for s in ACTIVE_STATES)


def unserved_queues(
    stats: Mapping[str, Mapping[str, int]], live: Mapping[str, int]
) -> dict[str, int]:
    """queue -> tasks waiting, for every queue with work and no live worker."""
    return {q: waiting(c) for q, c in stats.items() if waiting(c) and not live.get(q)}


def queues_table(
    stats: Mapping[str, Mapping[str, int]],
    live: Mapping[str, int],
    paused: Collection[str] = (),
    oldest: Mapping[str, int] | None = None,
) -> Table:
    """``rsjobs queues``: live workers, stream depth and tasks per state, per queue, and
    how long its oldest undelivered task has waited (``oldest``: queue -> ms); a paused
    queue, and a queue with work and no live worker, say so in the last column."""
    columns = [
        Column("queue"),
        Column("workers", numeric=True),
        Column("stream", numeric=True),
        *(Column(s, numeric=True) for s in QUEUE_STATES),
        Column("oldest", numeric=True),
        Column("note"),
    ]
    rows: list[list[object]] = []
    for q, counts in stats.items():
        notes = ["PAUSED"] if q in paused else []
        if waiting(counts) and not live.get(q):
            notes.append("NO LIVE WORKER")
        note = ", ".join(notes)
        rows.append(
            [
                q,
                live.get(q, 0),
                counts.get("stream_length", 0),
                *(counts.get(s, 0) for s in QUEUE_STATES),
                age((oldest or {}).get(q, 0)) if (oldest or {}).get(q) else "",
                note,
            ]
        )
    return columns, rows


def workers_table(workers: Sequence[WorkerInfo]) -> tuple[Table, list[str]]:
    """``rsjobs workers``: one row per worker, then a line per dead worker and per task a
    worker holds (the table stays aligned; ids are never cut)."""
    columns = [
        Column("worker"), Column("status"), Column("host"), Column("pid", numeric=True),
        Column("silent", numeric=True), Column("done", numeric=True), Column("queues"),
        Column("in flight", numeric=True),
    ]  # fmt: skip
    rows: list[list[object]] = []
    details: list[str] = []
    for w in workers:
        tasks = list(dict.fromkeys([*w.holding, *w.running]))
        rows.append(
            [
                w.name,
                w.status,
                w.host,
                w.pid or "",
                age(w.silent_ms) if w.beat_at else "",
                w.processed,
                ",".join(w.queues),
                len(tasks),
            ]
        )
        if w.dead_since:
            details.append(f"{w.name}: dead since {when(w.dead_since)}")
        for tid in tasks:
            where = "delivery held" if tid in w.holding else "last reported running"
            details.append(f"{w.name}: {tid}  ({where})")
    return (columns, rows), details


def deadletters_table(letters: Iterable[DeadLetter]) -> Table:
    """``rsjobs deadletter list``: newest first, the reason last (on one line)."""
    columns = [
        Column("time"), Column("task"), Column("queue"), Column("type"),
        Column("deliveries", numeric=True), Column("worker"), Column("note"), Column("reason"),
    ]  # fmt: skip
    rows: list[list[object]] = []
    for d in letters:
        notes = []
        if d.step:
            notes.append(f"quarantined by {d.step}: {d.action}")
        if d.requeued_as:
            notes.append(f"requeued as {d.requeued_as}")
        elif not d.exists:
            notes.append("task expired; cannot requeue")
        rows.append(
            [
                when(d.ts),
                d.task_id,
                d.queue,
                d.type,
                d.deliveries,
                d.worker,
                "; ".join(notes),
                _one_line(d.reason),
            ]
        )
    return columns, rows


def memory_table(report: MemoryReport) -> Table:
    """``rsjobs queues-memory``: bytes per queue (MEMORY USAGE, sampled task means)."""
    columns = [Column("queue")] + [
        Column(name, numeric=True)
        for name in ("stream_B", "entries", "pending", "live", "sampled", "task_B",
                     "history_B", "live_est_B")
    ]  # fmt: skip
    rows: list[list[object]] = [
        [q.queue, q.stream_bytes, q.stream_length, q.pending, q.live_tasks, q.sampled,
         q.task_bytes_avg, q.history_bytes_avg, q.live_bytes_est]
        for q in report.queues
    ]  # fmt: skip
    return columns, rows
