"""The chaos checker catches what it claims: each kind of broken promise, fed to it as a
corrupted run, is reported (and a clean run is not). No Redis needed.

Breaking fencing for real would need a Lua switch that skips the lease check; these
corrupted inputs are what such a build would produce.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from rsjobs.schemas import HistoryEntry
from rsjobs.workflows import WorkflowEvent
from tests.support.reference import replay as reference_replay
from tools.chaos import RunData, check
from tools.chaos.poolcheck import CLAIM_MS, admissions, rate_bound
from tools.chaos.records import (
    CancelAck,
    Execution,
    ExternalAck,
    FaultEvent,
    Flood,
    PoisonInput,
    PoolState,
    Submission,
    TaskRecord,
    WorkflowRecord,
    WorkflowStart,
)
from tools.chaos.recovery import percentile, recoveries
from tools.chaos.replay import replay
from tools.chaos.system import stats_findings
from tools.chaos.workload import RATED_TYPE, PoolSettings

T1 = "a" * 32
T2 = "b" * 32
W1, W2 = "chaos-w0g1", "chaos-w1g1"
ACK = 1_000_000


def entry(
    n: int,
    event: str,
    frm: str,
    to: str,
    att: int = 0,
    *,
    src: str = "worker",
    rej: bool = False,
    tid: str = T1,
    **extra: str,
) -> HistoryEntry:
    return HistoryEntry(
        id=f"{ACK + n}-0",
        task_id=tid,
        event=event,
        from_state=frm,
        to_state=to,
        source=src,
        attempt=att,
        ts=ACK + n,
        rejected=rej,
        extra=dict(extra),
    )


def fields(
    state: str, attempt: int, *, worker: str = W1, kind: str = "fast", **kw: Any
) -> dict[str, str]:
    f = {
        "id": T1,
        "queue": "chaos",
        "state": state,
        "attempt": str(attempt),
        "max_attempts": "3",
        "payload": json.dumps({"k": kind, "seq": 0}),
        "consumer": worker,
        "lease": f"{attempt}:{worker}-0123abcd",
    }
    f.update({k: str(v) for k, v in kw.items()})
    return f


def result(attempt: int, worker: str, xid: str = "x1") -> str:
    return json.dumps({"attempt": attempt, "worker": worker, "pid": 1, "exec": xid})


def execution(xid: str, att: int, worker: str, ev: str, ts: int, outcome: str = "") -> Execution:
    return Execution(
        exec_id=xid, task_id=T1, attempt=att, worker=worker, pid=1, ev=ev, ts=ts, outcome=outcome
    )


def good_history() -> list[HistoryEntry]:
    return [
        entry(1, "ENQUEUE", "", "PENDING", src="api"),
        entry(10, "START", "PENDING", "RUNNING", 1, worker=W1),
        entry(20, "COMPLETE", "RUNNING", "SUCCEEDED", 1),
    ]


def good_run(**over: Any) -> RunData:
    """One fast task, submitted, run once by W1, succeeded with W1's result."""
    base: dict[str, Any] = {
        "fsync": "always",
        "lease_ms": 2000,
        "submissions": [Submission(seq=0, kind="fast", task_id=T1, ack_ms=ACK)],
        "tasks": {
            T1: TaskRecord(
                task_id=T1,
                fields=fields("SUCCEEDED", 1, result=result(1, W1)),
                history=good_history(),
            )
        },
        "executions": [
            execution("x1", 1, W1, "start", ACK + 11),
            execution("x1", 1, W1, "end", ACK + 15, "ok"),
        ],
    }
    base.update(over)
    return RunData(**base)


def task(hist: list[HistoryEntry], **kw: Any) -> dict[str, TaskRecord]:
    state = next(e.to_state for e in reversed(hist) if not e.rejected)
    att = max((e.attempt for e in hist if e.event == "START" and not e.rejected), default=0)
    kw.setdefault("result", result(att, W1))
    return {T1: TaskRecord(task_id=T1, fields=fields(state, att, **kw), history=hist)}


def kinds(data: RunData) -> set[str]:
    return {v.kind for v in check(data).violations}


GOOD_STATS = {
    "chaos:SUCCEEDED": 1,
    "ev:ENQUEUE": 1,
    "ev:START": 1,
    "ev:COMPLETE": 1,
    "started:chaos": 1,
    # the attempt's START to COMPLETE, 10 ms, in the histogram per queue (account_attempt)
    "adur:queue|chaos|100": 1,
    "adur_ms:queue|chaos": 10,
}


def test_a_clean_run_passes() -> None:
    res = check(good_run(stats=GOOD_STATS, events={T1: [e.id for e in good_history()[1:]]}))
    assert res.ok, res.violations
    assert res.counts["accepted"] == 1
    assert res.counts["executions"] == 1
    assert res.counts["starts"] == 1
    assert res.states == {"SUCCEEDED": 1}


def test_replay_agrees_with_the_reference_replay() -> None:
    hist = [*good_history(), entry(30, "CANCEL", "SUCCEEDED", "CANCELLED", 1, src="api")]
    assert [p.code for p in replay(hist)] == ["AFTER_TERMINAL", "ILLEGAL_TRANSITION"]
    assert len(reference_replay(hist)) == 2


CORRUPTIONS: dict[str, tuple[Callable[[], RunData], str]] = {
    # history replay
    "transition not in the table": (
        lambda: good_run(
            tasks=task(
                [
                    entry(1, "ENQUEUE", "", "PENDING", src="api"),
                    entry(2, "COMPLETE", "PENDING", "SUCCEEDED", 0),
                ]
            )
        ),
        "ILLEGAL_TRANSITION",
    ),
    "duplicate terminal transition": (
        lambda: good_run(
            tasks=task([*good_history(), entry(30, "COMPLETE", "SUCCEEDED", "SUCCEEDED", 1)])
        ),
        "AFTER_TERMINAL",
    ),
    "transition after a terminal state": (
        lambda: good_run(tasks=task([*good_history(), entry(30, "FAIL", "RUNNING", "FAILED", 1)])),
        "AFTER_TERMINAL",
    ),
    "broken chain": (
        lambda: good_run(
            tasks=task(
                [
                    entry(1, "ENQUEUE", "", "PENDING", src="api"),
                    entry(10, "START", "SCHEDULED", "RUNNING", 1, worker=W1),
                    entry(20, "COMPLETE", "RUNNING", "SUCCEEDED", 1),
                ]
            )
        ),
        "BROKEN_CHAIN",
    ),
    "refusal that changed the state": (
        lambda: good_run(
            tasks=task([*good_history(), entry(30, "FAIL", "RUNNING", "FAILED", 1, rej=True)])
        ),
        "BAD_REFUSAL",
    ),
    # the result must come from the lease holder
    "result from a worker that lost its lease": (
        lambda: good_run(
            tasks={
                T1: TaskRecord(
                    task_id=T1,
                    fields=fields("SUCCEEDED", 2, worker=W2, result=result(1, W1)),
                    history=[
                        entry(1, "ENQUEUE", "", "PENDING", src="api"),
                        entry(10, "START", "PENDING", "RUNNING", 1, worker=W1),
                        entry(3000, "RECLAIM", "RUNNING", "PENDING", 1, src="reaper", worker=W1),
                        entry(3010, "START", "PENDING", "RUNNING", 2, worker=W2),
                        # fencing broken: the zombie's COMPLETE accepted
                        entry(3020, "COMPLETE", "RUNNING", "SUCCEEDED", 2),
                    ],
                )
            },
            executions=[
                execution("x1", 1, W1, "start", ACK + 11),
                execution("x1", 1, W1, "end", ACK + 3015, "ok"),
                execution("x2", 2, W2, "start", ACK + 3011),
            ],
        ),
        "FOREIGN_RESULT",
    ),
    "result without an execution record": (
        lambda: good_run(executions=[]),
        "FOREIGN_RESULT",
    ),
    # executions vs. STARTs
    "execution without a START": (
        lambda: good_run(
            executions=[
                execution("x1", 1, W1, "start", ACK + 11),
                execution("x1", 1, W1, "end", ACK + 15, "ok"),
                execution("x9", 2, W2, "start", ACK + 12),
            ]
        ),
        "UNLEASED_EXECUTION",
    ),
    "handler ran twice under one START": (
        lambda: good_run(
            executions=[
                execution("x1", 1, W1, "start", ACK + 11),
                execution("x1", 1, W1, "end", ACK + 15, "ok"),
                execution("x0", 1, W1, "start", ACK + 12),
            ]
        ),
        "RERUN_UNDER_LEASE",
    ),
    # accounting
    "lost task (appendfsync always)": (
        lambda: good_run(tasks={}, executions=[]),
        "LOST",
    ),
    "task left running": (
        lambda: good_run(
            tasks=task(
                [
                    entry(1, "ENQUEUE", "", "PENDING", src="api"),
                    entry(10, "START", "PENDING", "RUNNING", 1, worker=W1),
                ]
            ),
            executions=[execution("x1", 1, W1, "start", ACK + 11)],
        ),
        "NOT_TERMINAL",
    ),
    "hash disagrees with history": (
        lambda: good_run(
            tasks={
                T1: TaskRecord(
                    task_id=T1,
                    fields=fields("FAILED", 1, result=result(1, W1)),
                    history=good_history(),
                )
            }
        ),
        "STATE_MISMATCH",
    ),
    "retried past max_attempts": (
        lambda: good_run(
            tasks=task(
                [
                    entry(1, "ENQUEUE", "", "PENDING", src="api"),
                    entry(10, "START", "PENDING", "RUNNING", 1, worker=W1),
                    entry(11, "RECLAIM", "RUNNING", "PENDING", 1, src="reaper", worker=W1),
                    entry(12, "START", "PENDING", "RUNNING", 2, worker=W1),
                    entry(13, "RECLAIM", "RUNNING", "PENDING", 2, src="reaper", worker=W1),
                    entry(14, "START", "PENDING", "RUNNING", 3, worker=W1),
                    entry(15, "RECLAIM", "RUNNING", "PENDING", 3, src="reaper", worker=W1),
                    entry(16, "START", "PENDING", "RUNNING", 4, worker=W1),
                    entry(20, "COMPLETE", "RUNNING", "SUCCEEDED", 4),
                ]
            ),
            executions=[
                execution("x1", 4, W1, "start", ACK + 17),
                execution("x1", 4, W1, "end", ACK + 18, "ok"),
            ],
        ),
        "RETRY_POLICY",
    ),
    "cancel acknowledged, task ended otherwise": (
        lambda: good_run(
            cancels=[CancelAck(task_id=T1, phase="pending", ack_ms=ACK + 5, state="CANCELLED")]
        ),
        "CANCEL_NOT_HONOURED",
    ),
    "cancelled although nobody cancelled it": (
        lambda: good_run(
            tasks=task(
                [
                    entry(1, "ENQUEUE", "", "PENDING", src="api"),
                    entry(2, "CANCEL", "PENDING", "CANCELLED", src="api"),
                ]
            ),
            executions=[],
        ),
        "IMPOSSIBLE_OUTCOME",
    ),
    "dedup key answered with two ids": (
        lambda: good_run(
            submissions=[
                Submission(seq=0, kind="dedup", task_id=T1, ack_ms=ACK, dedup="k"),
                Submission(seq=0, kind="dedup", task_id=T2, ack_ms=ACK + 9, dedup="k", repeat=True),
            ],
            dedup={"k": T1},
        ),
        "DEDUP_SPLIT",
    ),
    "a task nobody submitted": (
        lambda: good_run(
            tasks={
                **good_run().tasks,
                T2: TaskRecord(task_id=T2, fields=fields("SUCCEEDED", 0), history=[]),
            }
        ),
        "PHANTOM_TASK",
    ),
    "events stream disagrees with the history": (
        lambda: good_run(events={T1: [e.id for e in good_history()[1:-1]]}),
        "EVENTS_MISMATCH",
    ),
    "stats counters drifted": (
        lambda: good_run(stats={**GOOD_STATS, "chaos:RUNNING": 1, "ev:START": 2}),
        "STATS_DRIFT",
    ),
    "a queue's started counter drifted": (
        lambda: good_run(stats={**GOOD_STATS, "started:chaos": 2}),
        "STATS_DRIFT",
    ),
    # the attempt histogram and retry counters (stats hash) against the attempts' entries
    "an attempt counted in the wrong duration bucket": (
        lambda: good_run(
            stats={
                **{k: v for k, v in GOOD_STATS.items() if k != "adur:queue|chaos|100"},
                "adur:queue|chaos|500": 1,
            }
        ),
        "STATS_DRIFT",
    ),
    "an attempt's time summed wrong": (
        lambda: good_run(stats={**GOOD_STATS, "adur_ms:queue|chaos": 11}),
        "STATS_DRIFT",
    ),
    "a retry counted that no attempt's end made": (
        lambda: good_run(stats={**GOOD_STATS, "retry:queue|chaos": 1}),
        "STATS_DRIFT",
    ),
    "a healthy worker's task reclaimed": (
        lambda: good_run(
            tasks=task(
                [
                    entry(1, "ENQUEUE", "", "PENDING", src="api"),
                    entry(10, "START", "PENDING", "RUNNING", 1, worker=W1),
                    entry(2100, "RECLAIM", "RUNNING", "PENDING", 1, src="reaper", worker=W1),
                    entry(2110, "START", "PENDING", "RUNNING", 2, worker=W1),
                    entry(2200, "COMPLETE", "RUNNING", "SUCCEEDED", 2),
                ]
            ),
            executions=[
                execution("x1", 2, W1, "start", ACK + 2111),
                execution("x1", 2, W1, "end", ACK + 2150, "ok"),
            ],
            # W1 was stopped before this attempt, not during it
            faults=[
                FaultEvent(at_ms=ACK - 5000, kind="worker_stop", target=W1),
                FaultEvent(at_ms=ACK - 2000, kind="worker_cont", target=W1),
            ],
        ),
        "HEALTHY_TASK_RECLAIMED",
    ),
    "a late outside result accepted": (
        lambda: _deferred_run(
            [
                ExternalAck(
                    task_id=T1,
                    attempt=1,
                    mode="late",
                    send=1,
                    late=True,
                    ack_ms=ACK + 40,
                    answer="SUCCEEDED",
                )
            ]
        ),
        "LATE_RESULT_ACCEPTED",
    ),
    "a repeated outside result answered otherwise": (
        lambda: _deferred_run(
            [
                ExternalAck(
                    task_id=T1,
                    attempt=1,
                    mode="dup",
                    send=1,
                    late=False,
                    ack_ms=ACK + 30,
                    answer="SUCCEEDED",
                ),
                ExternalAck(
                    task_id=T1,
                    attempt=1,
                    mode="dup",
                    send=2,
                    late=False,
                    ack_ms=ACK + 31,
                    answer="refused",
                ),
            ]
        ),
        "DUPLICATE_RESULT_CHANGED",
    ),
    "an accepted outside result lost": (
        lambda: _deferred_run(
            [
                ExternalAck(
                    task_id=T1,
                    attempt=1,
                    mode="ok",
                    send=1,
                    late=False,
                    ack_ms=ACK + 30,
                    answer="SUCCEEDED",
                )
            ],
            state="TIMED_OUT",
        ),
        "TERMINAL_CHANGED",
    ),
    "a worker crashed": (
        lambda: good_run(
            faults=[
                FaultEvent(at_ms=ACK, kind="worker_exit", target=W1, detail="status 1", status=1)
            ]
        ),
        "PROCESS_CRASH",
    ),
}


def _deferred_history(state: str = "SUCCEEDED") -> list[HistoryEntry]:
    end = (
        entry(30, "COMPLETE", "DEFERRED", "SUCCEEDED", 1, src="api", via="api")
        if state == "SUCCEEDED"
        else entry(30, "TIMEOUT", "DEFERRED", "TIMED_OUT", 1, src="reaper")
    )
    return [
        entry(1, "ENQUEUE", "", "PENDING", src="api"),
        entry(10, "START", "PENDING", "RUNNING", 1, worker=W1),
        entry(20, "DEFER", "RUNNING", "DEFERRED", 1, x="chaos-x-a1", xp="chaos"),
        end,
    ]


def _deferred_run(external: list[ExternalAck], state: str = "SUCCEEDED") -> RunData:
    """One deferred task, run by W1, ended by its outside job's result (or timed out)."""
    hist = _deferred_history(state)
    extra = {"result": result(1, W1)} if state == "SUCCEEDED" else {}
    return good_run(
        submissions=[Submission(seq=0, kind="deferred", task_id=T1, ack_ms=ACK)],
        tasks={
            T1: TaskRecord(
                task_id=T1, fields=fields(state, 1, kind="deferred", **extra), history=hist
            )
        },
        executions=[
            execution("x1", 1, W1, "start", ACK + 11),
            execution("x1", 1, W1, "end", ACK + 15, "deferred"),
        ],
        external=external,
    )


def test_a_deferred_task_ended_by_its_outside_result_passes() -> None:
    acks = [
        ExternalAck(task_id=T1, attempt=1, mode="dup", send=n, late=False, ack_ms=ACK + 30 + n,
                    answer="SUCCEEDED")
        for n in (1, 2)
    ]  # fmt: skip
    res = check(_deferred_run(acks))
    assert res.ok, res.violations
    assert res.counts["deferred_waits"] == 1 and res.counts["external_duplicates"] == 1
    late = ExternalAck(task_id=T1, attempt=1, mode="late", send=1, late=True, ack_ms=ACK + 40,
                       answer="refused")  # fmt: skip
    res = check(_deferred_run([late], state="TIMED_OUT"))
    assert res.ok, res.violations
    assert res.counts["external_late"] == 1 and res.counts["deferred_timeouts"] == 1


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_each_corruption_is_reported(name: str) -> None:
    make, kind = CORRUPTIONS[name]
    assert kind in kinds(make()), check(make()).violations


def test_a_poison_kill_is_not_a_crash() -> None:
    run = good_run(
        faults=[FaultEvent(at_ms=ACK, kind="worker_exit", target=W1, detail="-9", status=-9)]
    )
    res = check(run)
    assert res.ok, res.violations
    assert res.counts["poison_kills"] == 1


def test_lost_task_in_the_aof_window_is_reported_apart() -> None:
    kill = FaultEvent(at_ms=ACK + 800, kind="redis_kill", target="redis")
    run = good_run(fsync="everysec", tasks={}, executions=[], faults=[kill])
    res = check(run)
    assert res.ok
    assert [v.kind for v in res.aof_window_losses] == ["LOST"]
    assert "SIGKILLed 800 ms later" in res.aof_window_losses[0].detail


@pytest.mark.parametrize(
    ("fsync", "kind", "delay_ms"),
    [
        ("always", "redis_kill", 800),  # fsync always: nothing may be lost
        ("everysec", "redis_term", 800),  # a clean shutdown writes everything
        ("everysec", "redis_kill", 10_000),  # the loss is older than the window
    ],
)
def test_lost_task_outside_the_aof_window_is_a_violation(
    fsync: str, kind: str, delay_ms: int
) -> None:
    f = FaultEvent(at_ms=ACK + delay_ms, kind=kind, target="redis")
    run = good_run(fsync=fsync, tasks={}, executions=[], faults=[f])
    assert "LOST" in kinds(run)


def test_zombie_execution_is_counted_not_hidden() -> None:
    """W1 froze, the reaper gave the task to W2; W1 woke, finished, and was refused."""
    hist = [
        entry(1, "ENQUEUE", "", "PENDING", src="api"),
        entry(10, "START", "PENDING", "RUNNING", 1, worker=W1),
        entry(2500, "RECLAIM", "RUNNING", "PENDING", 1, src="reaper", worker=W1, idle_ms="2400"),
        entry(2600, "START", "PENDING", "RUNNING", 2, worker=W2),
        entry(2700, "COMPLETE", "RUNNING", "SUCCEEDED", 2),
        entry(5000, "COMPLETE", "SUCCEEDED", "SUCCEEDED", 2, rej=True),
    ]
    run = good_run(
        tasks={
            T1: TaskRecord(
                task_id=T1,
                fields=fields("SUCCEEDED", 2, worker=W2, result=result(2, W2, "x2")),
                history=hist,
            )
        },
        executions=[
            execution("x1", 1, W1, "start", ACK + 11),
            execution("x2", 2, W2, "start", ACK + 2601),
            execution("x2", 2, W2, "end", ACK + 2690, "ok"),
            execution("x1", 1, W1, "end", ACK + 4990, "ok"),
        ],
        faults=[FaultEvent(at_ms=ACK + 100, kind="worker_stop", target=W1)],
    )
    res = check(run)
    assert res.ok, res.violations
    assert res.counts["duplicate_executions"] == 1
    assert res.counts["duplicate_executions_finished"] == 1
    assert res.counts["discarded_results"] == 1
    assert res.counts["refused_results"] == 1
    assert res.counts["executions"] == 2
    assert res.recovery.reclaims == 1
    # owner lost at the SIGSTOP (ACK+100), new START at ACK+2600
    assert res.recovery.p50_ms == 2500
    assert not res.warnings


def test_recovery_without_a_fault_uses_the_lease_expiry_and_warns() -> None:
    hist = [
        entry(1, "ENQUEUE", "", "PENDING", src="api"),
        entry(10, "START", "PENDING", "RUNNING", 1, worker=W1),
        entry(3000, "RECLAIM", "RUNNING", "PENDING", 1, src="reaper", worker=W1, idle_ms="2500"),
        entry(3100, "START", "PENDING", "RUNNING", 2, worker=W2),
    ]
    rec = TaskRecord(task_id=T1, fields={}, history=hist)
    (r,) = recoveries([rec], [], lease_ms=2000)
    # last heartbeat at 3000 - 2500 = 500; lease expired at 2500; START at 3100
    assert (r.basis, r.total_ms, r.unexplained) == ("lease", 600, True)
    near = FaultEvent(at_ms=ACK + 400, kind="redis_term", target="redis")
    (r,) = recoveries([rec], [near], lease_ms=2000)
    assert not r.unexplained


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 50) == 0
    assert percentile([5], 99) == 5
    values = list(range(1, 101))
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile(values, 100) == 100


def test_a_worker_started_while_redis_was_down_is_a_warning_not_a_crash() -> None:
    down = FaultEvent(at_ms=ACK + 100, kind="redis_term", target="redis")
    up = FaultEvent(at_ms=ACK + 600, kind="redis_up", target="redis")
    early = FaultEvent(
        at_ms=ACK + 450, kind="worker_exit", target=W2, status=3, ran_ms=200, detail="3"
    )
    res = check(good_run(faults=[down, up, early]))
    assert res.ok, res.violations
    assert [w.kind for w in res.warnings] == ["START_WITHOUT_REDIS"]
    # the same exit of a worker that had been running for a minute is a crash
    late = FaultEvent(
        at_ms=ACK + 450, kind="worker_exit", target=W2, status=3, ran_ms=60_000, detail="3"
    )
    assert "PROCESS_CRASH" in kinds(good_run(faults=[down, up, late]))


# -- the plans are pure functions of the seed -------------------------------------------


def test_fault_schedule_is_replayable_and_has_every_kind() -> None:
    from tools.chaos import FAULT_KINDS
    from tools.chaos.faults import plan_faults

    args = {"workers": 3, "reapers": 2, "lease_ms": 2000, "mean_gap_s": 2.0}
    a = plan_faults(42, 30, FAULT_KINDS, **args)
    assert a == plan_faults(42, 30, FAULT_KINDS, **args)
    assert a != plan_faults(43, 30, FAULT_KINDS, **args)
    assert {f.kind for f in a} == set(FAULT_KINDS)
    assert all(0 < f.at_s < 29 for f in a)
    assert [f.at_s for f in a] == sorted(f.at_s for f in a)
    for f in a:
        if f.kind == "worker_stop":  # past the lease
            assert f.hold_s > 2.0
    many = plan_faults(5, 600, ("redis_freeze", "redis_failover"), **args)
    freezes = [f.hold_s for f in many if f.kind == "redis_freeze"]
    assert all(0.5 <= h <= 3.0 for h in freezes)
    assert any(h > 2.0 for h in freezes)  # sometimes longer than the lease
    assert {f.variant for f in many if f.kind == "redis_failover"} == {"", "kill"}
    assert plan_faults(42, 30, (), **args) == []
    few = plan_faults(1, 6, FAULT_KINDS, **{**args, "mean_gap_s": 100.0})
    assert {f.kind for f in few} == set(FAULT_KINDS)


def test_workload_plan_is_replayable() -> None:
    from tools.chaos.workload import KINDS, plan_tasks

    a = plan_tasks(7, 1000, 30.0, 2000)
    assert a == plan_tasks(7, 1000, 30.0, 2000)
    assert len(a) == 1000 + 2  # one poison task per 500
    # workflows create "wf" tasks, the hostile mix its own
    assert {s.kind for s in a} == set(KINDS) - {"wf", "hostile"}
    assert len({s.seq for s in a}) == len(a)
    assert all(0 <= s.at_s <= 30 for s in a)
    dedup = [s for s in a if s.kind == "dedup"]
    assert all(s.dedup for s in dedup) and any(s.repeat_after_s >= 0 for s in dedup)
    assert not any(s.dedup for s in a if s.kind != "dedup")


def test_tracebacks_in_process_logs_are_found(tmp_path: Any) -> None:
    from tools.chaos.collect import tracebacks

    (tmp_path / "chaos-w0g1.log").write_text(
        "ok\nTraceback (most recent call last):\n  File 'x', line 1\n    boom()\n"
        "RuntimeError: boom\nINFO later\n"
    )
    (tmp_path / "chaos-w1g1.log").write_text("INFO nothing\n")
    # a handler's exception, logged by its worker on purpose: no finding
    (tmp_path / "chaos-w2g1.log").write_text(
        "INFO worker chaos-w2g1: traceback of task abc, attempt 1\n"
        "Traceback (most recent call last):\n  File 'h', line 2\n    raise Flaky()\n"
        "tools.chaos.handlers.Flaky: attempt 1 fails on purpose\n"
    )
    assert tracebacks(tmp_path) == ["chaos-w0g1.log:5: RuntimeError: boom"]


# -- a poison task's SIGKILL is its worker's death, from the moment of the kill ----------


def _poison_kill_run(*, kill_record: bool) -> RunData:
    """The timeline of a false HEALTHY_TASK_RECLAIMED seen in a 10-minute run (seed
    1213479249): a poison task started on chaos-w1g51 at ...894811 and SIGKILLed it at
    once; the reaper reclaimed that worker's two tasks at ...896342 and ...896851; the old
    harness noticed the exit only at ...897330 and stamped the death then."""
    w, w2 = "chaos-w1g51", "chaos-w0g7"
    base = 1796117890000
    poison, other = "c" * 32, "d" * 32

    def e(tid: str, ts: int, event: str, frm: str, to: str, att: int, **kw: Any) -> HistoryEntry:
        src = kw.pop("src", "worker")
        return HistoryEntry(
            id=f"{ts}-0",
            task_id=tid,
            event=event,
            from_state=frm,
            to_state=to,
            source=src,
            attempt=att,
            ts=ts,
            extra={k: str(v) for k, v in kw.items()},
        )

    def f(tid: str, state: str, att: int, kind: str, worker: str, **kw: Any) -> dict[str, str]:
        out = fields(state, att, worker=worker, kind=kind, **kw)
        out["id"] = tid
        return out

    p_hist = [
        e(poison, base + 100, "ENQUEUE", "", "PENDING", 0, src="api"),
        e(poison, 1796117894811, "START", "PENDING", "RUNNING", 1, worker=w),
        # max_attempts 1: the reclaim ends it
        e(poison, 1796117896342, "RECLAIM", "RUNNING", "FAILED", 1, src="reaper", worker=w,
          idle_ms=1531),
    ]  # fmt: skip
    o_hist = [
        e(other, base + 200, "ENQUEUE", "", "PENDING", 0, src="api"),
        e(other, 1796117893900, "START", "PENDING", "RUNNING", 1, worker=w),
        e(other, 1796117896851, "RECLAIM", "RUNNING", "PENDING", 1, src="reaper", worker=w,
          idle_ms=2200),
        e(other, 1796117896900, "START", "PENDING", "RUNNING", 2, worker=w2),
        e(other, 1796117896950, "COMPLETE", "RUNNING", "SUCCEEDED", 2),
    ]  # fmt: skip
    execs = [
        Execution(exec_id="xp", task_id=poison, attempt=1, worker=w, pid=51, ev="start",
                  ts=1796117894812),
        Execution(exec_id="xo1", task_id=other, attempt=1, worker=w, pid=51, ev="start",
                  ts=1796117893901),
        Execution(exec_id="xo2", task_id=other, attempt=2, worker=w2, pid=7, ev="start",
                  ts=1796117896901),
        Execution(exec_id="xo2", task_id=other, attempt=2, worker=w2, pid=7, ev="end",
                  ts=1796117896940, outcome="ok"),
    ]  # fmt: skip
    if kill_record:
        execs.append(
            Execution(exec_id="xp", task_id=poison, attempt=1, worker=w, pid=51, ev="kill",
                      ts=1796117894813)
        )  # fmt: skip
    return RunData(
        fsync="always",
        lease_ms=2000,
        submissions=[
            Submission(seq=1, kind="poison", task_id=poison, ack_ms=base + 101),
            Submission(seq=2, kind="fast", task_id=other, ack_ms=base + 201),
        ],
        tasks={
            poison: TaskRecord(
                task_id=poison,
                fields=f(poison, "FAILED", 1, "poison", w, max_attempts=1),
                history=p_hist,
            ),
            other: TaskRecord(
                task_id=other,
                fields=f(other, "SUCCEEDED", 2, "fast", w2, result=result(2, w2, "xo2")),
                history=o_hist,
            ),
        },
        executions=execs,
        # the exit as the old harness stamped it, 2.5 s after the kill
        faults=[FaultEvent(at_ms=1796117897330, kind="worker_exit", target=w, pid=51, status=-9)],
    )


def test_a_poison_kill_explains_the_reclaims_of_its_worker_however_late_the_exit_is_seen() -> None:
    res = check(_poison_kill_run(kill_record=True))
    assert res.ok, res.violations
    assert res.recovery.reclaims == 2 and res.recovery.by_basis == {"fault": 2}
    # the loss is the kill (Redis TIME of the record), not when the exit was noticed
    assert res.counts["poison_kills"] == 1


def test_without_the_kill_time_the_same_reclaims_look_like_thefts() -> None:
    """What the checker concluded when it only had the late exit stamp: the check itself
    still catches a reclaim no fault explains."""
    kinds_found = [v.kind for v in check(_poison_kill_run(kill_record=False)).violations]
    assert kinds_found == ["HEALTHY_TASK_RECLAIMED", "HEALTHY_TASK_RECLAIMED"]


def test_redis_disruptions_are_intervals() -> None:
    from tools.chaos.recovery import redis_intervals

    ev = [
        FaultEvent(at_ms=100, kind="redis_freeze", target="redis"),
        FaultEvent(at_ms=2600, kind="redis_thaw", target="redis"),
        FaultEvent(at_ms=3000, kind="redis_failover", target="redis0"),
        FaultEvent(at_ms=3500, kind="redis_up", target="redis0"),  # the old primary back
        FaultEvent(at_ms=14000, kind="redis_failover_done", target="redis1"),
        FaultEvent(at_ms=15000, kind="redis_drop", target="redis1"),
        FaultEvent(at_ms=16000, kind="redis_kill", target="redis1"),
    ]
    assert redis_intervals(ev) == [(100, 2600), (3000, 14000), (15000, 15000), (16000, 2**62)]


# -- Redis freezes and failovers ----------------------------------------------------------


def _reclaimed_run(faults: list[FaultEvent], **over: Any) -> RunData:
    """W1's attempt (START at ACK+10) reclaimed at ACK+3000, W2 finishes it; no fault
    hit W1."""
    return good_run(
        tasks={
            T1: TaskRecord(
                task_id=T1,
                fields=fields("SUCCEEDED", 2, worker=W2, result=result(2, W2, "x2")),
                history=[
                    entry(1, "ENQUEUE", "", "PENDING", src="api"),
                    entry(10, "START", "PENDING", "RUNNING", 1, worker=W1),
                    entry(3000, "RECLAIM", "RUNNING", "PENDING", 1, src="reaper", worker=W1,
                          idle_ms="2600"),
                    entry(3010, "START", "PENDING", "RUNNING", 2, worker=W2),
                    entry(3100, "COMPLETE", "RUNNING", "SUCCEEDED", 2),
                ],
            )
        },
        executions=[
            execution("x1", 1, W1, "start", ACK + 11),
            execution("x2", 2, W2, "start", ACK + 3011),
            execution("x2", 2, W2, "end", ACK + 3090, "ok"),
        ],
        faults=faults,
        **over,
    )  # fmt: skip


def test_a_reclaim_after_a_redis_freeze_is_lawful() -> None:
    """Heartbeats could not get through while Redis was stopped: like any Redis fault
    near the attempt, not a theft."""
    freeze = [
        FaultEvent(at_ms=ACK + 300, kind="redis_freeze", target="redis"),
        FaultEvent(at_ms=ACK + 2700, kind="redis_thaw", target="redis"),
    ]
    res = check(_reclaimed_run(freeze))
    assert res.ok, res.violations
    # a freeze that ended well before the attempt began explains nothing
    early = [
        FaultEvent(at_ms=ACK - 9000, kind="redis_freeze", target="redis"),
        FaultEvent(at_ms=ACK - 8000, kind="redis_thaw", target="redis"),
    ]
    assert "HEALTHY_TASK_RECLAIMED" in kinds(_reclaimed_run(early))
    assert check(_reclaimed_run(freeze)).counts.get("reclaims") == 1


def test_a_reclaim_during_a_failover_is_lawful() -> None:
    """A failover that began before the attempt and settled after it started still
    overlaps it: the attempt's heartbeats may have gone to the old primary."""
    fo = [
        FaultEvent(at_ms=ACK - 4000, kind="redis_failover", target="redis0"),
        FaultEvent(at_ms=ACK + 500, kind="redis_failover_done", target="redis1"),
    ]
    assert check(_reclaimed_run(fo)).ok
    assert "HEALTHY_TASK_RECLAIMED" in kinds(_reclaimed_run([]))


def _failover(start: int, done: int) -> list[FaultEvent]:
    return [
        FaultEvent(at_ms=start, kind="redis_failover", target="redis0"),
        FaultEvent(at_ms=done, kind="redis_failover_done", target="redis1"),
    ]


def test_an_enqueue_lost_in_a_failover_window_is_reported_apart_without_durable_mode() -> None:
    lost = good_run(tasks={}, executions=[], faults=_failover(ACK + 300, ACK + 9000))
    res = check(lost)
    assert res.ok, res.violations
    assert [v.kind for v in res.failover_window_losses] == ["LOST"]
    assert "failover window" in res.failover_window_losses[0].detail
    # acknowledged while the old primary still took writes (before it was demoted)
    during = good_run(tasks={}, executions=[], faults=_failover(ACK - 5000, ACK + 100))
    assert [v.kind for v in check(during).failover_window_losses] == ["LOST"]


def test_durable_mode_excuses_no_lost_enqueue_in_a_failover() -> None:
    lost = good_run(tasks={}, executions=[], durable=True, faults=_failover(ACK + 300, ACK + 9000))
    res = check(lost)
    assert [v.kind for v in res.violations] == ["LOST"]
    assert "WAIT" in res.violations[0].detail
    assert not res.failover_window_losses


def test_a_loss_outside_every_failover_window_is_a_violation() -> None:
    # the failover began 5 s after the ack: beyond the replica's lag (1 s)
    lost = good_run(tasks={}, executions=[], faults=_failover(ACK + 5000, ACK + 9000))
    assert "LOST" in kinds(lost)
    assert not check(lost).failover_window_losses


def test_durable_mode_covers_acknowledged_cancels_not_the_workers_writes() -> None:
    """A cancel answered after WAIT may not be lost in a failover; a handler's record
    whose START was lost is a worker-side write durable mode does not confirm: reported
    apart, never hidden."""
    cancel = [CancelAck(task_id=T1, phase="pending", ack_ms=ACK + 5, state="CANCELLED")]
    fo = _failover(ACK + 300, ACK + 9000)
    assert "CANCEL_NOT_HONOURED" in kinds(good_run(durable=True, cancels=cancel, faults=fo))
    res = check(good_run(cancels=cancel, faults=fo))  # not durable: reported apart
    assert res.ok and [v.kind for v in res.failover_window_losses] == ["CANCEL_NOT_HONOURED"]
    unleased = good_run(
        durable=True,
        faults=fo,
        executions=[*good_run().executions, execution("x9", 2, W2, "start", ACK + 400)],
    )
    res = check(unleased)
    assert res.ok, res.violations
    lost = sorted(v.kind for v in res.failover_window_losses)
    assert lost == ["EXCESS_EXECUTIONS", "UNLEASED_EXECUTION"]


def test_a_redis_node_or_sentinel_or_the_web_app_exiting_is_a_crash() -> None:
    for kind, target in [("redis_exit", "redis1"), ("sentinel_exit", "sentinel2"),
                         ("web_exit", "chaos-web0g1")]:  # fmt: skip
        ev = FaultEvent(at_ms=ACK, kind=kind, target=target, status=1, detail="status 1")
        assert "PROCESS_CRASH" in kinds(good_run(faults=[ev])), kind


# -- workflows ----------------------------------------------------------------------------

WF = "e" * 32
WF_TASKS = {"1:0:a": "1" * 32, "1:0:b": "2" * 32, "1:1:c": "3" * 32}


def wf_entry(
    n: int, event: str, frm: str, to: str, *, rej: bool = False, msg: str = ""
) -> WorkflowEvent:
    return WorkflowEvent(
        id=f"{ACK + n}-0",
        event=event,
        from_status=frm,
        to_status=to,
        source="api",
        version=1,
        stage="first",
        ts=ACK + n,
        message=msg,
        rejected=rej,
    )


def wf_task(slot: str, state: str = "SUCCEEDED") -> TaskRecord:
    tid = WF_TASKS[slot]
    _, stage, item = slot.split(":")
    worker = W1
    xid = f"x{tid[0]}"
    f = fields(state, 1, worker=worker)
    f.update(
        id=tid,
        payload=json.dumps({"workflow": WF, "item": item, "input": {"wk": "wf_ok"}}),
        wf=WF,
        wf_version="1",
        wf_stage=stage,
        wf_item=item,
        result=json.dumps(
            {"ref": f"r/{item}", "meta": {"attempt": 1, "worker": worker, "exec": xid}}
        ),
    )
    hist = [
        entry(1, "ENQUEUE", "", "PENDING", src="api", tid=tid),
        entry(10, "START", "PENDING", "RUNNING", 1, worker=worker, tid=tid),
        entry(20, "COMPLETE", "RUNNING", state, 1, tid=tid),
    ]
    return TaskRecord(task_id=tid, fields=f, history=hist)


def wf_run(status: str = "PUBLISHED", **over: Any) -> RunData:
    """One 2-stage workflow, its three tasks succeeded, published."""
    hist = [
        wf_entry(1, "START", "", "RUNNING"),
        wf_entry(2, "SPAWN", "RUNNING", "RUNNING"),
        wf_entry(30, "ADVANCE", "RUNNING", "RUNNING"),
        wf_entry(60, "READY", "RUNNING", "READY_TO_PUBLISH"),
        wf_entry(70, "PUBLISH", "READY_TO_PUBLISH", "PUBLISHED"),
    ]
    hist = [h for h in hist if status == "PUBLISHED" or h.event != "PUBLISH"]
    assets = {
        slot: json.dumps({"ref": f"r/{slot}", "task": tid, "version": 1})
        for slot, tid in WF_TASKS.items()
    }
    tasks = {t.task_id: t for t in (wf_task(slot) for slot in WF_TASKS)}
    base: dict[str, Any] = {
        "fsync": "always",
        "lease_ms": 2000,
        "workflows": [WorkflowStart(seq=1_000_000, kind="wf_ok", wf_id=WF, ack_ms=ACK)],
        "wf_records": {
            WF: WorkflowRecord(
                wf_id=WF,
                fields={"id": WF, "status": status, "version": "1", "published_version": "1"},
                history=hist,
                slots=dict(WF_TASKS),
                assets=assets,
            )
        },
        "tasks": tasks,
        "executions": [
            Execution(exec_id=f"x{tid[0]}", task_id=tid, attempt=1, worker=W1, pid=1, ev=ev,
                      ts=ACK + 11 + (ev == "end"), outcome="ok" if ev == "end" else "")
            for tid in WF_TASKS.values()
            for ev in ("start", "end")
        ],
    }  # fmt: skip
    base.update(over)
    return RunData(**base)


def test_a_clean_workflow_passes() -> None:
    res = check(wf_run())
    assert res.ok, res.violations
    assert res.counts["workflows_started"] == 1
    assert res.counts["workflows_PUBLISHED"] == 1
    assert res.counts["workflow_tasks"] == 3
    assert "PHANTOM_TASK" not in kinds(wf_run())  # its tasks were made by the workflow


def _without(run: RunData, **changes: Any) -> RunData:
    return msgspec.structs.replace(run, **changes)


def _wf(run: RunData, **changes: Any) -> dict[str, WorkflowRecord]:
    return {WF: msgspec.structs.replace(run.wf_records[WF], **changes)}


WF_CORRUPTIONS: dict[str, tuple[Callable[[], RunData], str]] = {
    "a started workflow that is gone": (
        lambda: _without(wf_run(), wf_records={}),
        "WF_LOST",
    ),
    "a workflow left running": (
        lambda: wf_run(status="RUNNING"),
        "WF_NOT_TERMINAL",
    ),
    "a transition not in the workflow table": (
        lambda: _without(
            wf_run(),
            wf_records=_wf(
                wf_run(),
                history=[
                    wf_entry(1, "START", "", "RUNNING"),
                    wf_entry(70, "PUBLISH", "RUNNING", "PUBLISHED"),
                ],
            ),
        ),
        "WF_ILLEGAL_HISTORY",
    ),
    "the hash disagrees with the history": (
        lambda: wf_run(status="CANCELLED"),
        "WF_STATE_MISMATCH",
    ),
    "published without every asset": (
        lambda: _without(
            wf_run(), wf_records=_wf(wf_run(), assets={"1:0:a": json.dumps({"task": "1" * 32})})
        ),
        "WF_TASKS_INCONSISTENT",
    ),
    "published, but a task failed": (
        lambda: _without(wf_run(), tasks={**wf_run().tasks, "3" * 32: wf_task("1:1:c", "FAILED")}),
        "WF_TASKS_INCONSISTENT",
    ),
    "cancelled although nobody cancelled it": (
        lambda: _without(
            wf_run(),
            wf_records=_wf(
                wf_run(),
                fields={"id": WF, "status": "CANCELLED", "version": "1"},
                history=[
                    wf_entry(1, "START", "", "RUNNING"),
                    wf_entry(5, "CANCEL", "RUNNING", "CANCELLED"),
                ],
                assets={},
            ),
        ),
        "WF_IMPOSSIBLE_OUTCOME",
    ),
    "a workflow nobody started": (
        lambda: _without(wf_run(), workflows=[]),
        "WF_PHANTOM",
    ),
    "a valid start refused": (
        lambda: _without(wf_run(), wf_errors=["x (wf_ok): ConfigError: no"]),
        "WF_START_REFUSED",
    ),
}


@pytest.mark.parametrize("name", sorted(WF_CORRUPTIONS))
def test_each_workflow_corruption_is_reported(name: str) -> None:
    make, kind = WF_CORRUPTIONS[name]
    assert kind in kinds(make()), check(make()).violations


def test_a_workflow_whose_next_stage_is_over_the_limit_must_fail_with_a_reason() -> None:
    start = [WorkflowStart(seq=2_000_004, kind="wf_next_over_limit", wf_id=WF, ack_ms=ACK)]
    # still RUNNING in its second stage with no tasks: what the driver could not spawn
    stuck = _without(wf_run(status="RUNNING"), workflows=start)
    assert {"POISON_NOT_FAILED", "WF_NOT_TERMINAL"} <= kinds(stuck)
    failed_hist = [
        wf_entry(1, "START", "", "RUNNING"),
        wf_entry(30, "ADVANCE", "RUNNING", "RUNNING"),
        wf_entry(31, "TASK_FAILED", "RUNNING", "FAILED", msg="stage second: payload over limit"),
    ]
    failed = _without(
        wf_run(),
        workflows=start,
        wf_records=_wf(
            wf_run(),
            fields={"id": WF, "status": "FAILED", "version": "1"},
            history=failed_hist,
            slots={k: v for k, v in WF_TASKS.items() if k.startswith("1:0:")},
            assets={},
        ),
        tasks={t: r for t, r in wf_run().tasks.items() if t != "3" * 32},
    )
    assert check(failed).ok, check(failed).violations
    # FAILED without a word of why is not enough
    mute = [*failed_hist[:2], wf_entry(31, "TASK_FAILED", "RUNNING", "FAILED")]
    silent = _without(failed, wf_records=_wf(failed, history=mute))
    assert "POISON_NOT_FAILED" in kinds(silent)


# -- poison inputs and floods -------------------------------------------------------------


def _poison(outcome: str, kind: str = "task_over_limit", **kw: Any) -> PoisonInput:
    return PoisonInput(
        seq=2_000_000, kind=kind, channel="http", marker="poison-2000000", at_ms=ACK,
        outcome=outcome, **kw,
    )  # fmt: skip


def test_a_refused_poison_input_that_wrote_nothing_passes() -> None:
    res = check(good_run(poison=[_poison("refused", status=413, error="payload_too_large")]))
    assert res.ok, res.violations
    assert res.counts["poison_refused"] == 1


def test_poison_inputs_accepted_or_mishandled_are_violations() -> None:
    assert "POISON_ACCEPTED" in kinds(good_run(poison=[_poison("accepted", status=202)]))
    mishandled = good_run(poison=[_poison("mishandled", kind="task_deep", status=500)])
    assert "POISON_MISHANDLED" in kinds(mishandled)
    unanswered = check(good_run(poison=[_poison("unanswered")]))
    assert unanswered.ok and [w.kind for w in unanswered.warnings] == ["POISON_UNANSWERED"]


def test_a_refused_input_must_have_written_nothing() -> None:
    """Answered 413, but a task carrying its marker exists: the refusal wrote."""
    t2 = TaskRecord(
        task_id=T2,
        fields={**fields("PENDING", 0), "id": T2,
                "payload": json.dumps({"k": "fast", "poison": "poison-2000000"})},
        history=[entry(1, "ENQUEUE", "", "PENDING", src="api", tid=T2)],
    )  # fmt: skip
    run = good_run(poison=[_poison("refused", status=413)], tasks={**good_run().tasks, T2: t2})
    found = kinds(run)
    assert "POISON_WROTE" in found
    assert "PHANTOM_TASK" not in found  # reported once, as what it is


def test_a_refused_workflow_start_must_leave_no_workflow() -> None:
    left = WorkflowRecord(
        wf_id=WF,
        fields={"id": WF, "status": "RUNNING", "input": json.dumps({"poison": "poison-2000000"})},
        history=[wf_entry(1, "START", "", "RUNNING")],
    )
    run = good_run(
        poison=[_poison("refused", kind="wf_over_limit", error="PayloadError: over")],
        refused_wf_ids=[WF],
        wf_records={WF: left},
    )
    assert "POISON_WROTE" in kinds(run)
    assert "WF_PHANTOM" not in kinds(run)


def _flood(**kw: Any) -> Flood:
    base = {"seq": 2_000_006, "channel": "client", "event": "CANCEL", "task_id": T1,
            "state": "SUCCEEDED", "sent": 3, "refused": 3, "first_ms": ACK + 100,
            "last_ms": ACK + 200}  # fmt: skip
    base.update(kw)
    return Flood(**base)


def _flooded(n_entries: int, repeats: int = 0, **stats: int) -> RunData:
    """A flood of 3 CANCELs of T1, recorded as ``n_entries`` refusal entries with
    ``repeats`` coalesced into each."""
    refusals = [
        msgspec.structs.replace(
            entry(100 + i, "CANCEL", "SUCCEEDED", "SUCCEEDED", 1, src="api", rej=True),
            repeats=repeats,
            last_ts=ACK + 150 if repeats else 0,
        )
        for i in range(n_entries)
    ]
    hist = [*good_history(), *refusals]
    st = {**GOOD_STATS, "rej:CANCEL": stats.get("rej", n_entries * (1 + repeats))}
    return good_run(
        tasks=task(hist), floods=[_flood()], stats=st, events={T1: [e.id for e in hist[1:]]}
    )


def test_a_flood_answered_and_recorded_passes() -> None:
    res = check(_flooded(3))
    assert res.ok, res.violations
    assert res.counts["flood_refused"] == 3


def test_a_flood_whose_repeats_are_coalesced_into_one_entry_passes() -> None:
    """A bounded history records the first refusal and counts the repeats on the task
    hash: the checker counts both, and the rej: counter counts every refusal."""
    res = check(_flooded(1, repeats=2))
    assert res.ok, res.violations
    # the same entry without its repeats accounts for one refusal of the three answered
    assert "REFUSALS_UNACCOUNTED" in kinds(_flooded(1, repeats=0, rej=3))


def test_floods_that_were_not_accounted_for_are_violations() -> None:
    # the history records more refusals than were sent, or fewer than were answered
    assert "REFUSALS_UNACCOUNTED" in kinds(_flooded(5))
    assert "REFUSALS_UNACCOUNTED" in kinds(_flooded(2))
    # the stats counted fewer refusals than the floods were answered
    assert "REFUSALS_UNACCOUNTED" in kinds(_flooded(3, rej=2))
    # a command of the flood changed the task
    changed = _without(_flooded(3), floods=[_flood(accepted=1, refused=2)])
    assert "FLOOD_ACCEPTED" in kinds(changed)
    # the flood's answers were errors
    errors = _without(_flooded(3), floods=[_flood(errors=3, refused=0, error="HTTP 500")])
    assert "POISON_MISHANDLED" in kinds(errors)


def test_a_publish_lost_in_a_failover_counts_only_without_durable_mode() -> None:
    """The producer was told PUBLISHED; the workflow ended READY_TO_PUBLISH (the write
    was lost with the old primary)."""
    ack = [CancelAck(task_id=WF, phase="publish", ack_ms=ACK + 50, state="PUBLISHED")]
    fo = _failover(ACK + 300, ACK + 9000)
    lost = _without(wf_run(status="READY_TO_PUBLISH"), wf_actions=ack, faults=fo)
    res = check(lost)
    assert "WF_TERMINAL_CHANGED" in {v.kind for v in res.failover_window_losses}
    assert "WF_TERMINAL_CHANGED" not in {v.kind for v in res.violations}
    assert "WF_TERMINAL_CHANGED" in kinds(_without(lost, durable=True))


def test_flood_refusals_lost_in_a_failover_window() -> None:
    """Without durable mode a failover may take refusals with it (reported apart, and the
    flood is left out of the counter check); with it, refusals were answered after WAIT
    and may not be lost."""
    fo = _failover(ACK + 150, ACK + 9000)  # the flood ran ACK+100..ACK+200
    short = _without(_flooded(2), faults=fo)  # 3 answered, 2 recorded
    res = check(short)
    assert res.ok, res.violations
    assert [v.kind for v in res.failover_window_losses] == ["REFUSALS_UNACCOUNTED"]
    assert "REFUSALS_UNACCOUNTED" in kinds(_without(short, durable=True))


def test_a_start_that_was_in_flight_when_its_worker_died_is_not_a_theft() -> None:
    """Seen in a 10-minute run: chaos-w1g7 was SIGKILLed, and Redis ran the START it had
    sent just before 2 ms later; its lease expired and the task was reclaimed. A worker's
    name is never reused, so any START under it after its death was in flight."""
    kill = [FaultEvent(at_ms=ACK + 8, kind="worker_kill", target=W1)]
    res = check(_reclaimed_run(kill))  # START at ACK+10, RECLAIM at ACK+3000
    assert res.ok, res.violations
    assert res.recovery.by_basis == {"fault": 1}


def test_a_stop_counts_while_it_lasts() -> None:
    """SIGSTOP just before the START (in flight) and SIGCONT during the attempt: the
    worker was frozen when it should have heartbeated; a stop that ended before the START
    explains nothing."""
    during = [
        FaultEvent(at_ms=ACK + 5, kind="worker_stop", target=W1),
        FaultEvent(at_ms=ACK + 2900, kind="worker_cont", target=W1),
    ]
    assert check(_reclaimed_run(during)).ok
    before = [
        FaultEvent(at_ms=ACK - 3000, kind="worker_stop", target=W1),
        FaultEvent(at_ms=ACK + 5, kind="worker_cont", target=W1),
    ]
    assert "HEALTHY_TASK_RECLAIMED" in kinds(_reclaimed_run(before))


def test_handler_records_lost_with_a_failover_are_reported_apart() -> None:
    """A failover took a START (the handler's record of it survived: it was retried on
    the new primary) and, for another result, the handler's record itself: both are
    losses of unconfirmed writes inside the window, dated by the write that was lost."""
    fo = _failover(ACK + 9000, ACK + 20000)
    # the first run under W1's START 1 is fine; a second, unleased run at ACK+9500
    extra = good_run(
        faults=fo,
        executions=[*good_run().executions, execution("x9", 2, W1, "start", ACK + 9500)],
    )
    res = check(extra)
    assert res.ok, res.violations
    assert sorted(v.kind for v in res.failover_window_losses) == [
        "EXCESS_EXECUTIONS",
        "UNLEASED_EXECUTION",
    ]
    # the same excess long before the failover is a violation
    early = _without(extra, faults=_failover(ACK + 60_000, ACK + 70_000))
    assert "EXCESS_EXECUTIONS" in kinds(early)
    # a result whose handler record is missing, the START inside the window
    no_record = good_run(executions=[], faults=_failover(ACK + 500, ACK + 9000))
    res = check(no_record)
    assert res.ok, res.violations
    assert [v.kind for v in res.failover_window_losses] == ["FOREIGN_RESULT"]
    assert "FOREIGN_RESULT" in kinds(good_run(executions=[]))


def test_an_attempt_started_again_after_a_failover_lost_its_start() -> None:
    """Seen in a 10-minute run: W1 started attempt 1 on the old primary, the failover lost
    that START, the new primary delivered the task again and W1 started attempt 1 again
    just after the window: two runs under one START. The write lost is the first START,
    inside the window; the same two runs with no failover are a violation."""
    runs = [
        execution("x0", 1, W1, "start", ACK + 5),
        execution("x1", 1, W1, "start", ACK + 11),
        execution("x1", 1, W1, "end", ACK + 15, "ok"),
    ]
    fo = _failover(ACK - 5000, ACK + 8)  # settled between the two runs
    res = check(good_run(executions=runs, faults=fo))
    assert res.ok, res.violations
    assert {v.kind for v in res.failover_window_losses} == {
        "RERUN_UNDER_LEASE",
        "EXCESS_EXECUTIONS",
    }
    assert "RERUN_UNDER_LEASE" in kinds(good_run(executions=runs))


def test_an_unleased_execution_is_dated_by_the_span_its_start_was_written_in() -> None:
    """A worker STARTed an attempt on a primary about to be demoted, was frozen, began its
    handler after the window and its record landed later still: the START it ran under,
    the write lost, was made after the worker started and before the handler began — a
    span that overlaps the window. A worker started after the window could not have
    written that START inside it."""
    fo = _failover(ACK + 100, ACK + 5000)
    late = Execution(
        exec_id="x9", task_id=T1, attempt=2, worker=W2, pid=1, ev="start", ts=ACK + 7000,
        began_ms=ACK + 6500,
    )  # fmt: skip
    born = FaultEvent(at_ms=ACK + 50, kind="worker_start", target=W2)
    run = good_run(faults=[*fo, born], executions=[*good_run().executions, late])
    res = check(run)
    assert res.ok, res.violations
    assert "UNLEASED_EXECUTION" in {v.kind for v in res.failover_window_losses}
    after = _without(run, faults=[*fo, msgspec.structs.replace(born, at_ms=ACK + 6000)])
    assert "UNLEASED_EXECUTION" in kinds(after)


def test_a_workflow_cancel_without_an_answer_still_counts_as_a_cancel() -> None:
    ask = [CancelAck(task_id=WF, phase="cancel", ack_ms=ACK + 5, state="unknown")]
    cancelled = _without(
        wf_run(),
        workflows=[WorkflowStart(seq=1_000_001, kind="wf_cancel", wf_id=WF, ack_ms=ACK)],
        wf_actions=ask,
        wf_records=_wf(
            wf_run(),
            fields={"id": WF, "status": "CANCELLED", "version": "1"},
            history=[
                wf_entry(1, "START", "", "RUNNING"),
                wf_entry(5, "CANCEL", "RUNNING", "CANCELLED"),
            ],
            assets={},
        ),
    )
    assert "WF_IMPOSSIBLE_OUTCOME" not in kinds(cancelled)
    assert "WF_IMPOSSIBLE_OUTCOME" in kinds(_without(cancelled, wf_actions=[]))


def test_a_kept_run_can_be_checked_again(tmp_path: Any) -> None:
    """The run dir keeps what the checker saw (rundata.json): --recheck gives the same
    findings, so a fix to the checker can be tried on a failed run."""
    from tools.chaos.cli import main
    from tools.chaos.run import RUNDATA, recheck

    run = _reclaimed_run([])  # one HEALTHY_TASK_RECLAIMED
    (tmp_path / RUNDATA).write_bytes(msgspec.json.encode(run))
    assert recheck(str(tmp_path)).violations == check(run).violations
    assert main(["--recheck", str(tmp_path)]) == 1
    (tmp_path / RUNDATA).write_bytes(msgspec.json.encode(good_run()))
    assert main(["--recheck", str(tmp_path)]) == 0
    assert main(["--recheck", str(tmp_path / "nowhere")]) == 2


def test_a_rerun_after_an_end_lost_in_a_failover_is_reported_apart() -> None:
    """The first run began before the failover and ended during it: its end (and the
    entry's XACK) went to the old primary and was lost; the worker found the entry still
    its own and its START, repeated, was answered as the first: the handler ran again under
    that START. The loss is dated by the window the span between the two runs overlaps,
    not by the first run's START; a rerun with no window in between stays a violation."""

    def rerun(faults: list[FaultEvent]) -> RunData:
        return good_run(
            executions=[
                execution("x1", 1, W1, "start", ACK + 11),
                execution("x0", 1, W1, "start", ACK + 9000),
                execution("x0", 1, W1, "end", ACK + 9005, "ok"),
            ],
            durable=True,
            faults=faults,
        )

    res = check(rerun(_failover(ACK + 2000, ACK + 8000)))
    assert res.ok, res.violations
    assert {v.kind for v in res.failover_window_losses} == {
        "RERUN_UNDER_LEASE",
        "EXCESS_EXECUTIONS",
    }
    assert {"RERUN_UNDER_LEASE", "EXCESS_EXECUTIONS"} <= set(kinds(rerun([])))
    # a failover that settled before the first run began explains nothing
    assert "RERUN_UNDER_LEASE" in kinds(rerun(_failover(ACK - 9000, ACK - 8000)))


def test_a_task_left_paused_by_a_lost_resume_is_dated_by_the_resume() -> None:
    """The producer paused a running task and its RESUME was acknowledged, yet the task is
    PAUSED after the drain: the RESUME was lost. In a failover window without durable mode
    that is reported apart; in durable mode (the RESUME waited for the replica), or with no
    window, it stays NOT_TERMINAL; a PAUSED task never resumed is NOT_TERMINAL whatever."""

    def paused(resumed: bool, faults: list[FaultEvent], durable: bool = False) -> RunData:
        hist = [
            entry(1, "ENQUEUE", "", "PENDING", src="api"),
            entry(10, "START", "PENDING", "RUNNING", 1, worker=W1),
            entry(20, "PAUSE", "RUNNING", "PAUSED", 1, src="api"),
        ]
        acks = [CancelAck(task_id=T1, phase="resume", ack_ms=ACK + 3000, state="PENDING")]
        return good_run(
            tasks=task(hist, result=None),
            executions=[execution("x1", 1, W1, "start", ACK + 11)],
            resumes=acks if resumed else [],
            faults=faults,
            durable=durable,
        )

    window = _failover(ACK + 2500, ACK + 9000)
    res = check(paused(True, window))
    assert "NOT_TERMINAL" not in {v.kind for v in res.violations}, res.violations
    assert "NOT_TERMINAL" in {v.kind for v in res.failover_window_losses}
    assert "NOT_TERMINAL" in kinds(paused(True, window, durable=True))
    assert "NOT_TERMINAL" in kinds(paused(True, []))
    assert "NOT_TERMINAL" in kinds(paused(False, window))


# -- successors ---------------------------------------------------------------------------


def _chain_run(
    head: str = "SUCCEEDED",
    *,
    released_at: int = 25,
    got: list[str] | None = None,
    cancel: dict[str, str] | None = None,
    policy: str = "",
    cancels: list[CancelAck] | None = None,
) -> RunData:
    """A chain of two: T1 (run by W1, ends ``head`` at ACK+20) and its successor T2, which
    waits, is released at ``released_at`` and succeeds with the results it says it ``got``
    (default: those of T1 if it succeeded); or, with ``cancel``, is cancelled while it
    waits with those history fields."""
    head_end = (
        entry(20, "COMPLETE", "RUNNING", "SUCCEEDED", 1)
        if head == "SUCCEEDED"
        else entry(20, "FAIL", "RUNNING", "FAILED", 1)
    )
    head_hist = [
        entry(1, "ENQUEUE", "", "PENDING", src="api"),
        entry(10, "START", "PENDING", "RUNNING", 1, worker=W1),
        head_end,
    ]
    succ_hist = [entry(2, "ENQUEUE", "", "WAITING", src="api", tid=T2)]
    extra: dict[str, Any] = {"id": T2, "after": f"{T1}:{head}"}
    if policy:
        extra["after_policy"] = policy
    execs = [
        execution("x1", 1, W1, "start", ACK + 11),
        execution("x1", 1, W1, "end", ACK + 15, "ok" if head == "SUCCEEDED" else "fatal"),
    ]
    if cancel is not None:
        succ_hist.append(
            entry(30, "CANCEL", "WAITING", "CANCELLED", src="worker", tid=T2, **cancel)
        )
        succ = fields("CANCELLED", 0, kind="chain", **extra)
    else:
        got = [T1] if got is None and head == "SUCCEEDED" else got or []
        succ_hist += [
            entry(released_at, "RELEASE", "WAITING", "PENDING", src="worker", tid=T2),
            entry(released_at + 5, "START", "PENDING", "RUNNING", 1, tid=T2, worker=W1),
            entry(released_at + 10, "COMPLETE", "RUNNING", "SUCCEEDED", 1, tid=T2),
        ]
        res = json.dumps({"attempt": 1, "worker": W1, "pid": 1, "exec": "x2", "got": got})
        succ = fields("SUCCEEDED", 1, kind="chain", result=res, **extra)
        execs += [
            Execution(exec_id="x2", task_id=T2, attempt=1, worker=W1, pid=1, ev="start",
                      ts=ACK + released_at + 6),
            Execution(exec_id="x2", task_id=T2, attempt=1, worker=W1, pid=1, ev="end",
                      ts=ACK + released_at + 8, outcome="ok"),
        ]  # fmt: skip
    head_fields = fields(head, 1, kind="chain", successors=T2)
    if head == "SUCCEEDED":
        head_fields["result"] = result(1, W1)
    return good_run(
        submissions=[
            Submission(seq=0, kind="chain", task_id=T1, ack_ms=ACK),
            Submission(seq=1, kind="chain", task_id=T2, ack_ms=ACK + 2),
        ],
        tasks={
            T1: TaskRecord(task_id=T1, fields=head_fields, history=head_hist),
            T2: TaskRecord(task_id=T2, fields=succ, history=succ_hist),
        },
        executions=execs,
        cancels=cancels or [],
    )


def test_a_clean_chain_passes() -> None:
    res = check(_chain_run())
    assert res.ok, res.violations
    assert res.counts["successors"] == res.counts["successors_released"] == 1
    # a failed head cancels its successor, which names it
    failed = check(_chain_run("FAILED", cancel={"pred": T1, "pred_state": "FAILED"}))
    assert failed.ok, failed.violations
    assert failed.counts["successors_cancelled"] == 1
    # under "always" the successor runs after the failure, with no results
    always = check(_chain_run("FAILED", policy="always"))
    assert always.ok, always.violations
    # a successor the producer cancelled while it waited need name no predecessor
    mine = CancelAck(task_id=T2, phase="pending", ack_ms=ACK + 30, state="CANCELLED")
    by_hand = check(_chain_run(cancel={}, cancels=[mine]))
    assert by_hand.ok, by_hand.violations


SUCCESSOR_CORRUPTIONS: dict[str, tuple[Callable[[], RunData], str]] = {
    "released before its predecessor ended": (
        lambda: _chain_run(released_at=15),
        "SUCCESSOR_EARLY",
    ),
    "released though its predecessor failed": (
        lambda: _chain_run("FAILED"),
        "SUCCESSOR_EARLY",
    ),
    "cancelled while waiting, naming no predecessor": (
        lambda: _chain_run(cancel={}),
        "SUCCESSOR_CANCEL",
    ),
    "cancelled naming a predecessor that succeeded": (
        lambda: _chain_run(cancel={"pred": T1, "pred_state": "SUCCEEDED"}),
        "SUCCESSOR_CANCEL",
    ),
    "ran without its predecessor's result": (
        lambda: _chain_run(got=[]),
        "SUCCESSOR_RESULTS",
    ),
}


@pytest.mark.parametrize("name", sorted(SUCCESSOR_CORRUPTIONS))
def test_each_successor_corruption_is_reported(name: str) -> None:
    make, kind = SUCCESSOR_CORRUPTIONS[name]
    assert kind in kinds(make()), check(make()).violations


def test_the_workload_links_chains_of_successors() -> None:
    from tools.chaos.workload import plan_tasks

    plan = plan_tasks(11, 2000, 30.0, 2000)
    by_seq = {s.seq: s for s in plan}
    links = [s for s in plan if s.after]
    assert links and all(by_seq[p].kind == "chain" and p < s.seq for s in links for p in s.after)
    assert all(by_seq[p].at_s <= s.at_s for s in links for p in s.after)
    assert {s.after_policy for s in links} == {"succeeded", "always"}
    assert any(len(s.after) == 2 for s in links)
    assert any(s.payload.get("cancel") for s in plan if s.kind == "chain" and not s.after)


def test_the_attempt_and_workflow_histograms_are_checked_against_the_records() -> None:
    """A retried attempt (FAIL -> SCHEDULED), then a deferred one: one histogram count per
    ended attempt (its START to its end, the wait included; a DEFER ends nothing) per
    queue, type and stage, a retry per retrying end; a finished workflow's start to
    finish per definition and status. Any drift of them is reported."""
    hist = [
        entry(1, "ENQUEUE", "", "PENDING", src="api"),
        entry(10, "START", "PENDING", "RUNNING", 1, worker=W1),
        entry(40, "FAIL", "RUNNING", "SCHEDULED", 1),
        entry(50, "PROMOTE", "SCHEDULED", "PENDING", 1),
        entry(60, "START", "PENDING", "RUNNING", 2, worker=W1),
        entry(200, "DEFER", "RUNNING", "DEFERRED", 2),
        entry(900, "COMPLETE", "DEFERRED", "SUCCEEDED", 2, src="api"),
    ]
    rec = TaskRecord(
        task_id=T1,
        fields={"queue": "chaos", "type": "gen", "wf_stage_name": "character/images",
                "state": "SUCCEEDED"},
        history=hist,
    )  # fmt: skip
    wf = WorkflowRecord(
        wf_id=WF,
        fields={"def": "character", "status": "PUBLISHED", "created_at": "1000",
                "finished_at": "4000"},
        history=[],
    )  # fmt: skip
    stats = {
        "chaos:SUCCEEDED": 1, "ev:ENQUEUE": 1, "ev:START": 2, "ev:FAIL": 1, "ev:PROMOTE": 1,
        "ev:DEFER": 1, "ev:COMPLETE": 1, "started:chaos": 2,
        "wfdur:character|PUBLISHED|5000": 1, "wfdur_ms:character|PUBLISHED": 3000,
    }  # fmt: skip
    for dim in ("queue|chaos", "type|gen", "stage|character/images"):
        stats.update({f"adur:{dim}|100": 1, f"adur:{dim}|1000": 1,  # 30 ms, then 840 ms
                      f"adur_ms:{dim}": 30 + 840, f"retry:{dim}": 1})  # fmt: skip
    assert stats_findings(stats, {T1: rec}, {WF: wf}) == []
    for key, value in [
        ("adur:type|gen|1000", 0),
        ("adur:type|gen|2500", 1),
        ("adur_ms:stage|character/images", 869),
        ("retry:queue|chaos", 2),
        ("adur:owner|ana|100", 1),
        ("wfdur:character|PUBLISHED|5000", 2),
        ("wfdur_ms:character|PUBLISHED", 2999),
    ]:
        drift = stats_findings({**stats, key: value}, {T1: rec}, {WF: wf})
        assert [v.kind for v in drift] and {v.kind for v in drift} == {"STATS_DRIFT"}, key


# -- shared queues: per-owner limits, the counts they are kept with, priorities, a rate --

POOLS = PoolSettings(default_limit=1, owner_limits={"alice": 2}, per_second=2.0, burst=1)
POOL_KINDS = {"LIMIT_EXCEEDED", "COUNT_DRIFT", "PRIORITY_LOST", "RATE_EXCEEDED"}


def _pool_task(
    tid: str,
    spans: list[tuple[int, int]],
    *,
    owner: str = "",
    type: str = "chaos",
    pr: int = 0,
    reclaimed: bool = False,
) -> tuple[TaskRecord, list[Execution]]:
    """A fast task RUNNING over ``spans`` (ms after ACK): the first attempt's interval on
    W2 ended by a RECLAIM when ``reclaimed`` (W2 is killed in _pool_run), the last one
    COMPLETEs on W1."""
    extra = {"pr": str(pr)} if pr else {}
    hist = [entry(1, "ENQUEUE", "", "PENDING", src="api", tid=tid, **extra)]
    execs: list[Execution] = []
    for att, (a, b) in enumerate(spans, 1):
        last = att == len(spans)
        worker = W1 if last or not reclaimed else W2
        hist.append(entry(a, "START", "PENDING", "RUNNING", att, tid=tid, worker=worker))
        if last:
            hist.append(entry(b, "COMPLETE", "RUNNING", "SUCCEEDED", att, tid=tid))
        else:
            hist.append(
                entry(b, "RECLAIM", "RUNNING", "PENDING", att, src="reaper", tid=tid, worker=W2)
            )
        xid = f"x{att}-{tid}"
        execs.append(
            Execution(exec_id=xid, task_id=tid, attempt=att, worker=worker, pid=1, ev="start",
                      ts=ACK + a + 1)
        )  # fmt: skip
        if last:
            execs.append(
                Execution(exec_id=xid, task_id=tid, attempt=att, worker=worker, pid=1, ev="end",
                          ts=ACK + b - 1, outcome="ok")
            )  # fmt: skip
    att = len(spans)
    kw: dict[str, Any] = {"id": tid, "type": type, "result": result(att, W1, f"x{att}-{tid}")}
    if owner:
        kw["owner"] = owner
    if pr:
        kw["priority"] = pr
    return TaskRecord(task_id=tid, fields=fields("SUCCEEDED", att, **kw), history=hist), execs


def _tid(n: int) -> str:
    return f"{n:032x}"


def _pool_run(
    tasks: list[tuple[TaskRecord, list[Execution]]],
    **pools: Any,
) -> RunData:
    """``tasks`` submitted (with the priority they have), the limits POOLS set long
    before, the keys read 5 s after (as over ``pools``); W2 killed at ACK + 45."""
    state: dict[str, Any] = {"settings": POOLS, "set_ms": ACK - 100_000, "read_ms": ACK + 5000}
    state.update(pools)
    return good_run(
        submissions=[
            Submission(
                seq=i,
                kind="fast",
                task_id=rec.task_id,
                ack_ms=ACK,
                priority=int(rec.fields.get("priority", 0)),
            )
            for i, (rec, _) in enumerate(tasks)
        ],
        tasks={rec.task_id: rec for rec, _ in tasks},
        executions=[e for _, execs in tasks for e in execs],
        faults=[FaultEvent(at_ms=ACK + 45, kind="worker_kill", target=W2)],
        pools=PoolState(**state),
    )


def _clean_pool_tasks() -> list[tuple[TaskRecord, list[Execution]]]:
    """bob (limit 1): one after the other, one starting at the very ms the one before it
    ended, and one after a reclaimed attempt ended at its RECLAIM; alice (limit 2): two at
    once; four starts of the rated type (2/s, burst 1: at most 1 + ceil(2 * 1.3) = 4 in a
    1 s window with the tolerances) within one second; a task of priority 7."""
    return [
        _pool_task(_tid(1), [(10, 20)], owner="bob"),
        _pool_task(_tid(2), [(20, 30)], owner="bob"),
        _pool_task(_tid(3), [(40, 50), (60, 70)], owner="bob", reclaimed=True),
        _pool_task(_tid(4), [(50, 60)], owner="bob"),
        _pool_task(_tid(5), [(10, 30)], owner="alice"),
        _pool_task(_tid(6), [(15, 25)], owner="alice", pr=7),
        *(_pool_task(_tid(10 + i), [(100 + 200 * i, 110 + 200 * i)], type=RATED_TYPE)
          for i in range(4)),
    ]  # fmt: skip


def _pool_clean(**pools: Any) -> RunData:
    return _pool_run(_clean_pool_tasks(), **pools)


def test_a_clean_shared_queue_run_passes() -> None:
    res = check(_pool_clean())
    assert res.ok, res.violations
    c = res.counts
    assert c["owner_starts"] == 7 and c["owner_peak_bob"] == 1 and c["owner_peak_alice"] == 2
    assert c["owners_at_limit"] == 2 and c["rated_starts"] == 4 and c["rated_peak_per_s"] == 4
    assert c["prioritized_tasks"] == 1 and c["priority_levels_started"] == 1
    assert rate_bound(2.0, 1) == 4


def test_an_expired_claim_or_one_taken_before_the_last_start_is_no_drift() -> None:
    """A claim no longer counted (expired: take.lua drops it), or written while the owner
    still had a task to start (before its last task last moved), is no drift."""
    expired = f"{ACK + 4000} bob=1"  # read at ACK + 5000
    before = f"{ACK + 20 + CLAIM_MS} alice=1"  # written at ACK + 20, alice's last end at 30
    res = check(_pool_clean(claims={"chaos": {W1: expired, W2: before}}))
    assert res.ok, res.violations
    assert res.counts["claims_expired_left"] == 1
    # the same with each owner's own expiry (take.lua's claims since): bob's expired
    # while the field (alice's) still runs
    both = f"{ACK + 20 + CLAIM_MS} bob=1:{ACK + 4000} alice=1:{ACK + 20 + CLAIM_MS}"
    res = check(_pool_clean(claims={"chaos": {W1: both}}))
    assert res.ok, res.violations
    assert res.counts["claims_expired_left"] == 1


def test_an_excess_window_right_after_an_outage_is_counted_apart() -> None:
    """Five rated starts within 1 s just after a Redis freeze ended: the times the bucket
    reserved during the freeze come due together; counted, not a violation (the total
    since the rate was set still holds them)."""
    five = [_pool_task(_tid(20 + i), [(100 + 10 * i, 200)], type=RATED_TYPE) for i in range(5)]
    data = _pool_run(five)
    assert kinds(data) == {"RATE_EXCEEDED"}
    thawed = msgspec.structs.replace(
        data,
        faults=[
            *data.faults,
            FaultEvent(at_ms=ACK - 3000, kind="redis_freeze", target="redis"),
            FaultEvent(at_ms=ACK + 90, kind="redis_thaw", target="redis"),
        ],
    )
    res = check(thawed)
    assert res.ok, res.violations
    assert res.counts["rate_windows_after_outage"] == 1


def test_rated_tasks_starting_late_together_count_at_their_reserved_times() -> None:
    """Five rated tasks held back with times reserved 500 ms apart (2/s), all started
    together at ACK + 2200 when their workers came back (a 10-minute run's pattern: the
    workers that took them killed, the new ones still booting): the bucket counted them
    at the reserved times, which the samples saw: no excess. Without the samples the
    same starts are five in one window."""
    five = [_pool_task(_tid(30 + i), [(2200, 2210)], type=RATED_TYPE) for i in range(5)]
    seen = {rec.task_id: [(ACK + 50, ACK + 100 + 500 * i)] for i, (rec, _) in enumerate(five)}
    res = check(_pool_run(five, throttled_seen=seen))
    assert res.ok, res.violations
    assert res.counts["rated_late_starts"] == 4 and res.counts["rated_peak_per_s"] == 2
    assert kinds(_pool_run(five)) == {"RATE_EXCEEDED"}
    # a reservation seen before an earlier START was that START's: not this one's
    twice = _pool_task(_tid(40), [(1000, 1100), (2200, 2210)], type=RATED_TYPE)
    ((admitted, _), (again, _)) = admissions(twice[0], [(ACK + 50, ACK + 900)])
    assert (admitted, again) == (ACK + 900, ACK + 2200)


def _replace_task(data: RunData, tid: str, **fields_over: str) -> RunData:
    rec = data.tasks[tid]
    return msgspec.structs.replace(
        data, tasks={**data.tasks, tid: msgspec.structs.replace(rec, fields={**rec.fields,
                                                                             **fields_over})}
    )  # fmt: skip


def _pr_entry(data: RunData, tid: str, pr: str) -> RunData:
    rec = data.tasks[tid]
    first = msgspec.structs.replace(rec.history[0], extra={"pr": pr})
    hist = [first, *rec.history[1:]]
    return msgspec.structs.replace(
        data, tasks={**data.tasks, tid: msgspec.structs.replace(rec, history=hist)}
    )


POOL_CORRUPTIONS: dict[str, tuple[Callable[[], RunData], str]] = {
    "bob over his limit of 1": (
        lambda: _pool_run([*_clean_pool_tasks(), _pool_task(_tid(7), [(25, 45)], owner="bob")]),
        "LIMIT_EXCEEDED",
    ),
    "alice over her own limit of 2": (
        lambda: _pool_run([*_clean_pool_tasks(), _pool_task(_tid(8), [(20, 22)], owner="alice")]),
        "LIMIT_EXCEEDED",
    ),
    "a RUNNING count left after the drain": (
        lambda: _pool_clean(running={"chaos|bob": 1}),
        "COUNT_DRIFT",
    ),
    "a terminal task still parked": (
        lambda: _pool_clean(parked={"chaos": [f"bob|90001700000000000-0000000000|{_tid(1)}"]}),
        "COUNT_DRIFT",
    ),
    "a missing task still throttled": (
        lambda: _pool_clean(throttled={"chaos": [f"00001700000000000-0000000000|{_tid(99)}"]}),
        "COUNT_DRIFT",
    ),
    "a claim kept alive after its owner's last task moved": (
        lambda: _pool_clean(claims={"chaos": {W1: f"{ACK + 200 + CLAIM_MS} bob=1"}}),
        "COUNT_DRIFT",
    ),
    "a claim kept alive (its owner's own expiry)": (
        lambda: _pool_clean(
            claims={"chaos": {W1: f"{ACK + 200 + CLAIM_MS} bob=1:{ACK + 200 + CLAIM_MS}"}}
        ),
        "COUNT_DRIFT",
    ),
    "a claim expiring past CLAIM_MS": (
        lambda: _pool_clean(claims={"chaos": {W1: f"{ACK + 5001 + CLAIM_MS} alice=1"}}),
        "COUNT_DRIFT",
    ),
    "a priority lost from the hash": (
        lambda: _replace_task(_pool_clean(), _tid(6), priority="0"),
        "PRIORITY_LOST",
    ),
    "a priority not on the ENQUEUE entry": (
        lambda: _pr_entry(_pool_clean(), _tid(6), "3"),
        "PRIORITY_LOST",
    ),
    "a priority given to a task submitted without one": (
        lambda: _replace_task(_pool_clean(), _tid(1), priority="4"),
        "PRIORITY_LOST",
    ),
    "five rated starts in one second": (
        lambda: _pool_run(
            [_pool_task(_tid(20 + i), [(100 + 10 * i, 200)], type=RATED_TYPE) for i in range(5)]
        ),
        "RATE_EXCEEDED",
    ),
    "more rated starts since the rate was set than the bucket held": (
        # 4 starts in the first 600 ms (burst 1 + 1 per 500 ms: at most 2), after an outage
        lambda: msgspec.structs.replace(
            _pool_clean(set_ms=ACK + 100),
            faults=[FaultEvent(at_ms=ACK + 150, kind="redis_drop", target="redis")],
        ),
        "RATE_EXCEEDED",
    ),
}


@pytest.mark.parametrize("name", sorted(POOL_CORRUPTIONS))
def test_each_shared_queue_corruption_is_reported(name: str) -> None:
    make, kind = POOL_CORRUPTIONS[name]
    found = kinds(make()) & POOL_KINDS
    assert found == {kind}, check(make()).violations


def test_the_workload_uses_owners_priorities_and_a_rate() -> None:
    from tools.chaos.workload import OWNERS, TYPE, plan_tasks, pool_settings

    a = plan_tasks(7, 1000, 30.0, 2000)
    assert a == plan_tasks(7, 1000, 30.0, 2000)
    owners = {s.owner for s in a}
    assert owners == {"", *OWNERS}
    assert {s.priority for s in a} == set(range(10))
    assert {s.type for s in a} == {TYPE, RATED_TYPE}
    assert 0.3 < sum(1 for s in a if s.owner) / len(a) < 0.5
    # a successor is of its predecessors' owner
    by_seq = {s.seq: s for s in a}
    assert all(by_seq[p].owner == s.owner for s in a for p in s.after)
    p = pool_settings(a, 30.0)
    rated = sum(1 for s in a if s.type == RATED_TYPE)
    assert p.per_second >= 1.6 * rated / 30 and p.burst >= 1
    assert p.limit_of("alice") == 3 and p.limit_of("bob") == 2
    # the plan without the shared-queue fields is the one of before (own random streams)
    assert [(s.seq, s.kind, s.at_s) for s in a][:5] == [
        (s.seq, s.kind, s.at_s) for s in plan_tasks(7, 1000, 30.0, 2000)
    ][:5]
