"""Total accounting of a chaos run: every accepted task, every history, every execution.

:func:`check` is a pure function of :class:`~tools.chaos.records.RunData`. Its findings:

* **violations** — the run broke a promise; the harness exits non-zero;
* **AOF-window losses** — acknowledged writes missing after a SIGKILL restart of Redis
  under ``appendfsync everysec`` within the window before the kill: reported apart,
  never hidden, and never excused under ``appendfsync always`` or a SIGTERM restart;
* **failover-window losses** — acknowledged writes the replica had not got when a
  failover promoted it (from ``failover_window_ms`` before it began until it settled):
  reported apart, except, in durable mode, the writes WAIT confirmed (the producer's
  submits, cancels, pauses, workflow starts and actions): their loss is a violation;
* **warnings** — not a broken promise, but worth a look (a bad input left unanswered).

Violation kinds (each one has a unit test in ``tests/chaos/test_checker.py``):

LOST                 an accepted id names no task (no hash, no history)
HASH_MISSING         history without hash / HISTORY_MISSING the reverse
NOT_TERMINAL         not in a terminal state after the drain
AFTER_TERMINAL, BROKEN_CHAIN, ILLEGAL_TRANSITION, BAD_REFUSAL   history replay (table)
STATE_MISMATCH       the hash's state / attempt disagree with the history
ATTEMPT_SEQUENCE     START attempts not numbered 1, 2, 3...
RETRY_POLICY         retried after max_attempts failed attempts
FOREIGN_RESULT       a SUCCEEDED result not produced by the attempt holding the lease
UNLEASED_EXECUTION   a handler ran without a matching accepted START
RERUN_UNDER_LEASE    a handler ran twice under one START
EXCESS_EXECUTIONS    more handler runs than STARTs
IMPOSSIBLE_OUTCOME   a final state the task's behaviour cannot lead to
CANCEL_NOT_HONOURED  a cancel answered CANCELLED, the task ended otherwise
TERMINAL_CHANGED     a state seen terminal by the producer changed afterwards (also: an
                     outside result of a deferred task answered SUCCEEDED, it ended else)
LATE_RESULT_ACCEPTED an outside result sent past its attempt's longest wait was accepted
DUPLICATE_RESULT_CHANGED  a repeat of an outside result answered otherwise than the first
DEDUP_SPLIT          one dedup key answered with two ids, or names another task
DEDUP_DUPLICATE      two tasks carry the same dedup key
PHANTOM_TASK         a task in Redis that no submit created
EVENTS_MISMATCH      the events stream does not name exactly the task's history entries
STATS_DRIFT          the stats hash's state counts or ev: / rej: counters disagree with
                     the tasks and histories (a fresh namespace: totals must match)
HEALTHY_TASK_RECLAIMED  a RECLAIM of an attempt whose worker no fault hit (no kill, stop,
                     exit, graceful stop or poison kill record of it during the attempt)
                     and no Redis disruption overlapped (restart, freeze, failover, drop):
                     "a healthy long task must never be stolen" (DESIGN.md)
SUCCESSOR_EARLY      a successor released (or started) before every predecessor ended,
                     or though one did not succeed (its policy not "always"), or released
                     twice
SUCCESSOR_CANCEL     a successor cancelled while it waited, by nobody (the producer did
                     not cancel it) and without naming a predecessor that ended otherwise
                     than SUCCEEDED (pred, pred_state of its CANCEL entry)
LIMIT_EXCEEDED       an owner had more RUNNING tasks on a queue than its concurrency
                     limit (from the histories: START to the entry leaving RUNNING, as
                     the state machine counts them; rejected entries ignored; a reclaimed
                     attempt's interval ends at its RECLAIM) (``poolcheck``)
COUNT_DRIFT          after the drain: an owner still counted RUNNING in the ``running``
                     hash, a terminal or missing task in ``parked:<q>`` / ``throttled:<q>``,
                     or a worker's claim on an owner still counting, written after that
                     owner's last task last moved (a claim left behind) or past CLAIM_MS
PRIORITY_LOST        a task's priority (its ``pr``, its ENQUEUE / RETRY / REPLAY entries'
                     ``pr``) is not the one it was submitted with
RATE_EXCEEDED        more starts of the rate-limited type in a 1 s window than burst +
                     rate allow, each counted when the bucket counted it (at the time
                     reserved for it when a sample saw it rate-held, else at its START;
                     widened by the tolerances: a reserved start may come 50 ms early,
                     an unseen one 250 ms late; a window right after a Redis outage or a
                     worker's SIGSTOP is counted apart: its reserved starts come late,
                     together), or more in all since the rate was set than the bucket held
SUCCESSOR_RESULTS    a successor ran without the results of exactly its predecessors
                     that SUCCEEDED (ctx.predecessors, as its result says)
SHUTDOWN_FAILED      a SIGTERMed worker exited non-zero, or not within grace + 10 s
PROCESS_CRASH        a worker, reaper, the web app, a Redis server or sentinel exited on
                     its own (a worker SIGKILLed by a poison task, status -9, is the
                     workload's doing and is not counted)
WF_*                 workflows (``wfcheck``): LOST, NOT_TERMINAL, ILLEGAL_HISTORY,
                     STATE_MISMATCH, TASKS_INCONSISTENT, IMPOSSIBLE_OUTCOME,
                     CANCEL_NOT_HONOURED, TERMINAL_CHANGED, PHANTOM, START_REFUSED
POISON_*, FLOOD_ACCEPTED, REFUSALS_UNACCOUNTED   bad inputs and floods (``poisoncheck``)
CALLBACK_ACCEPTED, HOSTILE_WROTE, STORM_UNACCOUNTED, TASK_OVER_CEILING, QUOTA_EXCEEDED,
QUEUE_REFUSAL_WROTE, CURSOR_ACCEPTED, CURSOR_LEAK, HOSTILE_MISHANDLED   the hostile-client
                     mix (``hostilecheck``)
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import msgspec

from rsjobs.codec import decode
from rsjobs.model import TERMINAL
from rsjobs.schemas import HistoryEntry
from rsjobs.successors import parse_after

from .hostilecheck import hostile_findings
from .poisoncheck import marker_of, poison_findings
from .poolcheck import pool_findings
from .records import Execution, FaultEvent, RunData, TaskRecord, Violation
from .recovery import RecoveryStats, recoveries, summarize
from .replay import final_state, replay
from .system import event_findings, fault_counts, process_findings, stats_findings
from .wfcheck import workflow_findings
from .workload import KINDS

__all__ = ["CheckResult", "Violation", "check", "fault_counts"]

#: events that end an attempt as a failure (they count against max_attempts)
FAILURE_EVENTS = frozenset({"FAIL", "TIMEOUT", "RECLAIM"})
#: Redis faults after which acknowledged writes may be missing (everysec only)
AOF_LOSS_FAULTS = frozenset({"redis_kill", "redis_exit"})
#: a kill this long before an ack still counts (harness clock vs. reply ordering)
AOF_SLACK_MS = 200
#: a failover the sentinels made on their own is taken to settle within this
AUTO_FAILOVER_MS = 15_000


class CheckResult(msgspec.Struct, kw_only=True):
    violations: list[Violation] = msgspec.field(default_factory=list)
    aof_window_losses: list[Violation] = msgspec.field(default_factory=list)
    #: acknowledged writes the replica had not got when a failover promoted it (not
    #: durable mode, or not an enqueue)
    failover_window_losses: list[Violation] = msgspec.field(default_factory=list)
    warnings: list[Violation] = msgspec.field(default_factory=list)
    counts: dict[str, int] = msgspec.field(default_factory=dict)
    states: dict[str, int] = msgspec.field(default_factory=dict)
    by_kind: dict[str, dict[str, int]] = msgspec.field(default_factory=dict)
    #: kind -> "<state>/<error_type>" -> count, for the tasks that did not succeed
    reasons: dict[str, dict[str, int]] = msgspec.field(default_factory=dict)
    recovery: RecoveryStats = msgspec.field(default_factory=RecoveryStats)

    @property
    def ok(self) -> bool:
        return not self.violations


class _Checker:
    def __init__(self, data: RunData) -> None:
        self.d = data
        self.r = CheckResult()
        self.kill_times = sorted(f.at_ms for f in data.faults if f.kind in AOF_LOSS_FAULTS)
        self.failovers = failover_windows(data.faults, data.failover_window_ms)
        #: when each worker process started (its name is never reused)
        self.worker_started = {f.target: f.at_ms for f in data.faults if f.kind == "worker_start"}
        self.cancelled = {a.task_id for a in data.cancels}
        self.resumed = {a.task_id: a.ack_ms for a in data.resumes}
        self.kind: dict[str, str] = {}
        self.ack: dict[str, int] = {}
        for s in data.submissions:
            self.kind.setdefault(s.task_id, s.kind)
            self.ack.setdefault(s.task_id, s.ack_ms)

    # -- helpers -------------------------------------------------------------------------

    def aof_kill(self, ts_ms: int) -> int | None:
        """The SIGKILL restart of Redis that may have lost a write made at ``ts_ms``."""
        if self.d.fsync != "everysec":
            return None
        for k in self.kill_times:
            if -AOF_SLACK_MS <= k - ts_ms <= self.d.aof_window_ms:
                return k
        return None

    def failover(self, ts_ms: int) -> tuple[int, int] | None:
        """The failover whose replication window holds a write made at ``ts_ms``."""
        for lo, hi in self.failovers:
            if lo <= ts_ms <= hi:
                return lo, hi
        return None

    def risk_point(self, lo: int, hi: int) -> int:
        """A time in ``[lo, hi]`` inside a window where acknowledged writes may be lost
        (an AOF window under everysec, or a failover window), else ``hi``: a loss during
        a span of writes is dated by the window it overlaps."""
        windows = list(self.failovers)
        if self.d.fsync == "everysec":
            windows += [(k - self.d.aof_window_ms, k + AOF_SLACK_MS) for k in self.kill_times]
        for a, b in sorted(windows):
            if a <= hi and b >= lo:
                return max(a, lo)
        return hi

    def at_risk(self, lo: int, hi: int) -> bool:
        """Whether writes acknowledged between ``lo`` and ``hi`` may be lost lawfully: an
        AOF window (everysec) or, without durable mode, a failover window overlaps."""
        if self.d.fsync == "everysec" and any(
            lo - AOF_SLACK_MS <= k and k - self.d.aof_window_ms <= hi for k in self.kill_times
        ):
            return True
        return not self.d.durable and any(a <= hi and b >= lo for a, b in self.failovers)

    def bad(
        self,
        kind: str,
        tid: str,
        detail: str,
        *,
        written_ms: int | None = None,
        durable_write: bool = False,
    ) -> None:
        """Record a violation, or a loss in a window where the lost write was at risk: an
        AOF window (SIGKILL under everysec) or a failover's replication window — except,
        in durable mode, a ``durable_write``: one the producer got acknowledged only after
        WAIT confirmed it on the replica (a submit, a cancel, a workflow start or action)."""
        v = Violation(kind=kind, task_id=tid, detail=detail)
        if written_ms is not None:
            k = self.aof_kill(written_ms)
            if k is not None:
                detail += f" [write at {written_ms}, Redis SIGKILLed {k - written_ms} ms later]"
                self.r.aof_window_losses.append(Violation(kind=kind, task_id=tid, detail=detail))
                return
            w = self.failover(written_ms)
            if w is not None:
                if self.d.durable and durable_write:
                    detail += f" [acknowledged after WAIT at {written_ms}, lost in a failover]"
                    self.r.violations.append(Violation(kind=kind, task_id=tid, detail=detail))
                    return
                detail += f" [write at {written_ms}, in the failover window {w[0]}..{w[1]}]"
                self.r.failover_window_losses.append(
                    Violation(kind=kind, task_id=tid, detail=detail)
                )
                return
        self.r.violations.append(v)

    # -- the checks ----------------------------------------------------------------------

    def run(self) -> CheckResult:
        d = self.d
        accepted = set(self.kind)
        c: Counter[str] = Counter()
        c["accepted"] = len(accepted)
        c["submissions"] = len(d.submissions)
        c["indeterminate_submits"] = len(d.indeterminate)
        present = {t: r for t, r in d.tasks.items() if r.fields or r.history}
        c["tasks_found"] = len(present)
        for tid in sorted(accepted):
            rec = d.tasks.get(tid)
            if rec is None or not (rec.fields or rec.history):
                self.bad(
                    "LOST",
                    tid,
                    f"accepted {self.kind[tid]} task has no hash and no history",
                    written_ms=self.ack[tid],
                    durable_write=True,
                )
        execs = self.executions_by_task(d.executions)
        for tid, rec in sorted(present.items()):
            self.check_task(rec, execs.get(tid, {}), c)
        self.check_found(present, accepted, c)
        workflow_findings(d, present, self.bad, c)
        poison_findings(d, present, self.bad, c, self.r.warnings, self.at_risk, self.risk_point)
        hostile_findings(d, present, self.bad, c, self.r.warnings, self.at_risk, self.risk_point)
        for err in d.wf_errors:
            self.bad("WF_START_REFUSED", "", f"a valid workflow start was refused: {err}")
        self.r.violations += process_findings(d.faults, c, self.r.warnings)
        if d.events is not None:
            self.r.violations += event_findings(d.events, present, trimmed=d.events_trimmed)
        if d.stats is not None:
            self.r.violations += stats_findings(d.stats, present, d.wf_records)
        self.check_cancels()
        self.check_successors(present, c)
        self.check_external(c)
        self.check_dedup(present)
        pool_findings(d, present, self.bad, c)
        kills = [(e.worker, e.ts) for e in d.executions if e.ev == "kill"]
        items = recoveries(present.values(), d.faults, d.lease_ms, kills)
        self.r.recovery = summarize(items)
        for it in items:
            if it.unexplained:
                self.bad(
                    "HEALTHY_TASK_RECLAIMED",
                    it.task_id,
                    f"attempt reclaimed at {it.reclaim_ms} from {it.worker}, which no fault "
                    f"hit during the attempt (and no Redis fault within a lease of it): "
                    f"its lease expired while its worker was alive",
                )
        c["execution_records"] = len(d.executions)
        self.r.counts = dict(sorted(c.items()))
        return self.r

    @staticmethod
    def executions_by_task(records: list[Execution]) -> dict[str, dict[str, list[Execution]]]:
        """task id -> exec id -> its records (start / end / stop), deduplicated."""
        out: dict[str, dict[str, list[Execution]]] = defaultdict(dict)
        seen: set[tuple[str, str]] = set()
        for e in records:
            if (e.exec_id, e.ev) in seen:
                continue  # a retried XADD that landed twice
            seen.add((e.exec_id, e.ev))
            out[e.task_id].setdefault(e.exec_id, []).append(e)
        return out

    def check_task(
        self, rec: TaskRecord, execs: dict[str, list[Execution]], c: Counter[str]
    ) -> None:
        tid, f, hist = rec.task_id, rec.fields, rec.history
        if not f:
            self.bad("HASH_MISSING", tid, f"history of {len(hist)} entries but no hash")
            return
        if not hist:
            self.bad("HISTORY_MISSING", tid, f"hash in state {f.get('state')} but no history")
            return
        for p in replay(hist):
            self.bad(p.code, tid, f"{p.entry_id}: {p.detail}")
        state = f.get("state", "")
        self.r.states[state] = self.r.states.get(state, 0) + 1
        kind = self.kind.get(tid) or ("wf" if f.get("wf") else "")
        kind = kind or str((decode(f.get("payload")) or {}).get("k", "?"))
        per_kind = self.r.by_kind.setdefault(kind, {})
        per_kind[state] = per_kind.get(state, 0) + 1
        if state != "SUCCEEDED":
            why = f"{state}/{f.get('error_type') or '-'}"
            reasons = self.r.reasons.setdefault(kind, {})
            reasons[why] = reasons.get(why, 0) + 1
        if state not in TERMINAL:
            resumed = self.resumed.get(tid) if state == "PAUSED" else None
            if resumed is not None:
                # paused by the producer, and its RESUME acknowledged: that write was lost
                self.bad(
                    "NOT_TERMINAL",
                    tid,
                    f"still PAUSED after the drain; its RESUME was acknowledged at {resumed}",
                    written_ms=resumed,
                    durable_write=True,
                )
            else:
                self.bad("NOT_TERMINAL", tid, f"still {state} after the drain")
        replayed = final_state(hist)
        if replayed != state:
            self.bad("STATE_MISMATCH", tid, f"hash says {state}, history leads to {replayed}")
        accepted = [e for e in hist if not e.rejected]
        starts = [e for e in accepted if e.event == "START"]
        c["starts"] += len(starts)
        c["refused_results"] += sum(
            e.count for e in hist if e.rejected and e.event in ("COMPLETE", "FAIL", "TIMEOUT")
        )
        c["reclaims"] += sum(1 for e in accepted if e.event == "RECLAIM")
        c["deadlettered"] += sum(1 for e in accepted if e.event == "DEADLETTER")
        c["reaper_timeouts"] += sum(
            1 for e in accepted if e.event == "TIMEOUT" and e.source == "reaper"
        )
        want = [e.attempt for e in starts]
        if want != list(range(1, len(starts) + 1)):
            self.bad("ATTEMPT_SEQUENCE", tid, f"START attempts {want}")
        if int(f.get("attempt") or 0) != len(starts):
            self.bad(
                "STATE_MISMATCH", tid, f"hash attempt {f.get('attempt')}, {len(starts)} STARTs"
            )
        self.check_retries(tid, f, accepted)
        self.check_outcome(tid, kind, state, accepted)
        if state == "SUCCEEDED":
            self.check_result(tid, f, accepted, execs)
        winner = ""
        if state == "SUCCEEDED":
            res = _result(f)
            winner = str(res.get("exec") or "") if res else ""
        self.check_executions(tid, starts, execs, winner, c, hist[0].ts)

    def check_retries(self, tid: str, f: dict[str, str], accepted: list[HistoryEntry]) -> None:
        max_attempts = int(f.get("max_attempts") or 1)
        failures = 0
        for e in accepted:
            if e.event in FAILURE_EVENTS:
                failures += 1
                if e.to_state not in TERMINAL and failures >= max_attempts:
                    self.bad(
                        "RETRY_POLICY",
                        tid,
                        f"{e.id}: {e.event} -> {e.to_state} after {failures}/{max_attempts} "
                        f"failed attempts",
                    )

    def check_outcome(self, tid: str, kind: str, state: str, acc: list[HistoryEntry]) -> None:
        k = KINDS.get(kind)
        if k is None:
            return
        why = ""
        if state == "SUCCEEDED" and not k.can_succeed:
            why = "succeeded, but its handler never returns"
        elif state == "TIMED_OUT" and not k.can_time_out:
            why = "timed out, but it has no deadline"
        elif (
            state == "CANCELLED"
            and tid not in self.cancelled
            and not self.wf_cancelled(tid)
            and not _cancelled_by_predecessor(acc)
        ):
            why = "cancelled, but nobody cancelled it"
        elif not k.raises and any(e.event == "FAIL" and e.source == "worker" for e in acc):
            why = "a worker reported FAIL, but its handler never raises"
        if why:
            self.bad("IMPOSSIBLE_OUTCOME", tid, f"{kind} task: {why}")

    def check_result(
        self,
        tid: str,
        f: dict[str, str],
        accepted: list[HistoryEntry],
        execs: dict[str, list[Execution]],
    ) -> None:
        res = _result(f)
        if res is None:
            self.bad("FOREIGN_RESULT", tid, f"result {f.get('result')!r} names no attempt")
            return
        att, worker = int(res.get("attempt") or 0), str(res.get("worker") or "")
        lease, holder = f.get("lease", ""), f.get("consumer", "")
        problems = []
        if att != int(f.get("attempt") or 0):
            problems.append(f"result of attempt {att}, task at attempt {f.get('attempt')}")
        if worker != holder or not lease.startswith(f"{att}:{worker}-"):
            problems.append(f"result from {worker} attempt {att}; lease {lease} held by {holder}")
        start = next((e for e in accepted if e.event == "START" and e.attempt == att), None)
        if start is None or start.extra.get("worker") != worker:
            problems.append(
                f"START of attempt {att} by {start.extra.get('worker') if start else 'nobody'}"
            )
        done = accepted[-1] if accepted else None
        if done is None or done.event != "COMPLETE" or done.attempt != att:
            problems.append("the last accepted entry is not the COMPLETE of that attempt")
        ex = execs.get(str(res.get("exec") or ""), [])
        record_lost = not ex
        if not ex or (ex[0].attempt, ex[0].worker) != (att, worker):
            problems.append(f"no execution record {res.get('exec')} of attempt {att} by {worker}")
        kind = self.kind.get(tid, "")
        fail = int((decode(f.get("payload")) or {}).get("fail") or 0)
        if kind == "flaky" and att <= fail:
            problems.append(f"attempt {att} succeeded, but attempts <= {fail} always fail")
        if len(problems) == 1 and record_lost and start is not None:
            # everything agrees but the handler's record is missing: the record (a
            # write of the handler, just after that START) may be what a loss took
            self.bad("FOREIGN_RESULT", tid, problems[0], written_ms=start.ts)
        elif problems:
            self.bad("FOREIGN_RESULT", tid, "; ".join(problems))

    def check_executions(
        self,
        tid: str,
        starts: list[HistoryEntry],
        execs: dict[str, list[Execution]],
        winner: str,
        c: Counter[str],
        created_ms: int = 0,
    ) -> None:
        by_lease = {(e.attempt, e.extra.get("worker", "")): e for e in starts}

        def lost_start(recs: list[Execution]) -> int:
            """When the START an execution ran under, missing now, was written: after its
            worker and the task existed, before the handler began — dated inside a loss
            window when one overlaps that span (a stopped worker begins its handler late,
            a retried record lands later still)."""
            worker = recs[0].worker
            lo = max(self.worker_started.get(worker, 0), created_ms)
            return self.risk_point(lo, max(lo, _began(recs)))

        runs: Counter[tuple[int, str]] = Counter()
        for xid, recs in execs.items():
            c["executions"] += 1
            att, worker = recs[0].attempt, recs[0].worker
            runs[(att, worker)] += 1
            if xid != winner and any(r.ev == "end" and r.outcome == "ok" for r in recs):
                c["discarded_results"] += 1  # ran to the end; its result was not kept
            start = by_lease.get((att, worker))
            if start is None:
                self.bad(
                    "UNLEASED_EXECUTION",
                    tid,
                    f"execution {xid} of attempt {att} on {worker}: no accepted START",
                    written_ms=lost_start(recs),
                )
                continue
            # alive after a later attempt started: two executions of one task at once
            nxt = next((e.ts for e in starts if e.attempt > att), None)
            last = max(recs, key=lambda r: r.ts)
            if nxt is not None and last.ts > nxt and last.ev in ("end", "stop"):
                c["duplicate_executions"] += 1
                c[f"duplicate_executions_{'finished' if last.ev == 'end' else 'stopped'}"] += 1
        for (att, worker), n in runs.items():
            if n > 1:
                again = sorted(
                    _began(v)
                    for v in execs.values()
                    if (v[0].attempt, v[0].worker) == (att, worker)
                )
                # two runs under one START number: the write that may have been lost is
                # the first run's START (a failover let the attempt start again) or its end
                # (the end and its XACK lost, the entry is still the worker's: the START
                # repeated for it is answered as the first) — written between the first
                # run's begin and the second's, dated by a loss window that span overlaps
                self.bad(
                    "RERUN_UNDER_LEASE",
                    tid,
                    f"attempt {att} on {worker} ran {n} times",
                    written_ms=self.risk_point(again[0], again[1]),
                )
        if len(execs) > len(starts):
            # the execution a START is missing for: one without any, else the first of
            # two runs under one START (a lost START lets an attempt start again)
            firsts = sorted((lost_start(v), (v[0].attempt, v[0].worker)) for v in execs.values())
            unmatched = [ts for ts, key in firsts if key not in by_lease]
            keys = [key for _, key in firsts]
            # two runs under one START: the first run's START or end was lost between its
            # begin and the second run's (see RERUN_UNDER_LEASE)
            twice = sorted(
                _began(v) for v in execs.values() if keys.count((v[0].attempt, v[0].worker)) > 1
            )
            self.bad(
                "EXCESS_EXECUTIONS",
                tid,
                f"{len(execs)} handler executions for {len(starts)} STARTs",
                written_ms=(
                    unmatched[0]
                    if unmatched
                    else self.risk_point(twice[0], twice[1])
                    if len(twice) > 1
                    else firsts[0][0]
                ),
            )

    def wf_cancelled(self, tid: str) -> bool:
        """A workflow task is cancelled with its workflow (cancelled, or failed: its open
        tasks are cancelled)."""
        rec = self.d.tasks.get(tid)
        wf = self.d.wf_records.get(rec.fields.get("wf", "")) if rec is not None else None
        return wf is not None and wf.fields.get("status") in ("CANCELLED", "FAILED")

    def check_found(
        self, present: dict[str, TaskRecord], accepted: set[str], c: Counter[str]
    ) -> None:
        """Tasks in Redis that no acknowledged submit returned."""
        maybe = set(self.d.indeterminate)
        for tid, rec in present.items():
            if tid in accepted:
                continue
            if rec.fields.get("wf") in self.d.wf_records:
                continue  # created by its workflow: the workflow checks account for it
            payload = decode(rec.fields.get("payload")) if rec.fields else None
            if marker_of(payload):
                continue  # what a bad input wrote: the poison checks report it
            if isinstance(payload, dict) and payload.get("hostile"):
                continue  # a hostile client's task whose submit got no answer
            seq = payload.get("seq") if isinstance(payload, dict) else None
            if seq in maybe:
                c["unacked_created"] += 1
            else:
                self.bad("PHANTOM_TASK", tid, f"task (seq {seq}) that no submit created")

    def check_cancels(self) -> None:
        for a in self.d.cancels:
            rec = self.d.tasks.get(a.task_id)
            state = rec.fields.get("state", "") if rec is not None else ""
            if a.state in TERMINAL and state != a.state:
                kind = "CANCEL_NOT_HONOURED" if a.state == "CANCELLED" else "TERMINAL_CHANGED"
                self.bad(
                    kind,
                    a.task_id,
                    f"cancel ({a.phase}) answered {a.state}, task ended {state or 'missing'}",
                    written_ms=a.ack_ms,
                    durable_write=True,
                )

    def check_external(self, c: Counter[str]) -> None:
        """The outside results of deferred tasks: one sent past its attempt's longest wait
        must be refused; a repeat must answer as the first did; a result answered
        SUCCEEDED must be the task's final state and result."""
        first: dict[tuple[str, int], str] = {}
        for a in self.d.external:
            c["external_results"] += 1
            c[f"external_{a.answer.lower()}"] += 1
            rec = self.d.tasks.get(a.task_id)
            state = rec.fields.get("state", "") if rec is not None else ""
            if a.late:
                c["external_late"] += 1
                if a.answer not in ("refused", "not_found"):
                    self.bad(
                        "LATE_RESULT_ACCEPTED",
                        a.task_id,
                        f"attempt {a.attempt}'s result, sent past its longest wait, answered "
                        f"{a.answer}",
                    )
                continue
            key = (a.task_id, a.attempt)
            if a.send > 1:
                c["external_duplicates"] += 1
                if first.get(key) == "SUCCEEDED" and a.answer != "SUCCEEDED":
                    self.bad(
                        "DUPLICATE_RESULT_CHANGED",
                        a.task_id,
                        f"attempt {a.attempt}'s result answered SUCCEEDED, its repeat {a.answer}",
                    )
            else:
                first[key] = a.answer
            if a.answer == "SUCCEEDED" and state != "SUCCEEDED":
                self.bad(
                    "TERMINAL_CHANGED",
                    a.task_id,
                    f"an outside result answered SUCCEEDED, task ended {state or 'missing'}",
                    written_ms=a.ack_ms,
                    durable_write=True,
                )
        for rec in self.d.tasks.values():
            deferred = [e for e in rec.history if e.event == "DEFER" and not e.rejected]
            c["deferred_waits"] += len(deferred)
            c["deferred_timeouts"] += sum(
                1
                for e in rec.history
                if e.event == "TIMEOUT" and not e.rejected and e.from_state == "DEFERRED"
            )

    def check_successors(self, present: dict[str, TaskRecord], c: Counter[str]) -> None:
        """Successors (``after``): released once, after every predecessor ended and only
        if each SUCCEEDED (or under "always"); cancelled while waiting only by the
        producer or by a predecessor that ended otherwise, named in the CANCEL entry;
        run with the results of exactly the predecessors that SUCCEEDED."""
        for tid, rec in sorted(present.items()):
            after = parse_after(rec.fields.get("after", ""))
            if not after:
                continue
            c["successors"] += 1
            policy = rec.fields.get("after_policy") or "succeeded"
            ends = {p: _end(present.get(p)) for p, _ in after}
            accepted = [e for e in rec.history if not e.rejected]
            released = [e for e in accepted if e.event == "RELEASE"]
            starts = [e for e in accepted if e.event == "START"]
            if len(released) > 1:
                self.bad("SUCCESSOR_EARLY", tid, f"released {len(released)} times")
            first = released[0] if released else starts[0] if starts else None
            if first is not None:
                c["successors_released"] += 1
                for p, (state, ts) in ends.items():
                    why = ""
                    if state not in TERMINAL:
                        why = f"while predecessor {p} was {state or 'missing'}"
                    elif ts > first.ts:
                        why = f"at {first.ts}, before predecessor {p} ended ({ts})"
                    elif state != "SUCCEEDED" and policy != "always":
                        why = f"though predecessor {p} ended {state} (policy {policy})"
                    if why:
                        self.bad("SUCCESSOR_EARLY", tid, f"{first.event} {why}")
            for e in accepted:
                if e.event != "CANCEL" or e.from_state != "WAITING":
                    continue
                c["successors_cancelled"] += 1
                if tid in self.cancelled:
                    continue
                pred, named = e.extra.get("pred", ""), e.extra.get("pred_state", "")
                state = ends.get(pred, ("", 0))[0]
                if not pred or state in ("", "SUCCEEDED") or named != state or policy == "always":
                    self.bad(
                        "SUCCESSOR_CANCEL",
                        tid,
                        f"cancelled while waiting, naming predecessor {pred or 'none'} "
                        f"({named or '-'}), which ended {state or 'missing'}",
                    )
            if rec.fields.get("state") == "SUCCEEDED":
                res = _result(rec.fields) or {}
                got = sorted(res.get("got") or [])
                want = sorted(p for p, (state, _) in ends.items() if state == "SUCCEEDED")
                if got != want:
                    self.bad(
                        "SUCCESSOR_RESULTS",
                        tid,
                        f"ran with the results of {got}, its predecessors that succeeded "
                        f"are {want}",
                    )

    def check_dedup(self, present: dict[str, TaskRecord]) -> None:
        ids: dict[str, list[tuple[int, str]]] = defaultdict(list)
        for s in self.d.submissions:
            if s.dedup:
                ids[s.dedup].append((s.ack_ms, s.task_id))
        holders: dict[str, list[str]] = defaultdict(list)
        for tid, rec in present.items():
            if rec.fields.get("dedup"):
                holders[rec.fields["dedup"]].append(tid)
        for key, acks in sorted(ids.items()):
            acks.sort()
            first_ms, first = acks[0]
            others = sorted({t for _, t in acks} - {first})
            stored = self.d.dedup.get(key, "")
            if others or stored != first:
                self.bad(
                    "DEDUP_SPLIT",
                    first,
                    f"dedup key {key} answered {first} then {others}; it names {stored!r}",
                    written_ms=first_ms,
                    durable_write=True,
                )
        for key, tids in sorted(holders.items()):
            if len(tids) > 1:
                self.bad("DEDUP_DUPLICATE", tids[0], f"dedup key {key} on tasks {sorted(tids)}")


def _cancelled_by_predecessor(accepted: list[HistoryEntry]) -> bool:
    """A successor cancelled while waiting, its CANCEL naming a predecessor (whether that
    is a lawful reason is check_successors' business)."""
    return any(
        e.event == "CANCEL" and e.from_state == "WAITING" and e.extra.get("pred") for e in accepted
    )


def _end(rec: TaskRecord | None) -> tuple[str, int]:
    """A predecessor's final state and when it reached it (its terminal entry's time);
    ('', 0) when it is missing, (its state, 0) when it is not terminal."""
    if rec is None or not rec.fields:
        return "", 0
    state = rec.fields.get("state", "")
    for e in rec.history:
        if not e.rejected and e.to_state in TERMINAL and e.from_state not in TERMINAL:
            return state, e.ts
    return state, 0


def _began(recs: list[Execution]) -> int:
    """When an execution began: the handler's own clock at its start (just after the
    START it ran under), else its first record's time."""
    return min((r.began_ms for r in recs if r.began_ms), default=min(r.ts for r in recs))


def _result(fields: dict[str, str]) -> dict[str, Any] | None:
    """What a SUCCEEDED task's result says about who made it (attempt, worker, exec):
    the result itself, or a workflow task's asset ``meta``; None when it says nothing."""
    try:
        res = decode(fields.get("result"))
    except msgspec.DecodeError:
        return None
    if isinstance(res, dict) and fields.get("wf") and isinstance(res.get("meta"), dict):
        return dict(res["meta"])
    return res if isinstance(res, dict) else None


def failover_windows(faults: list[FaultEvent], before_ms: int) -> list[tuple[int, int]]:
    """Where acknowledged writes may be lost to a failover: from ``before_ms`` before it
    began (the replica's lag) until it settled (the old primary a replica of the new:
    until then clients still connected to it are acknowledged)."""
    out: list[tuple[int, int]] = []
    start: int | None = None
    for f in sorted(faults, key=lambda f: f.at_ms):
        if f.kind in ("redis_failover", "cluster_failover"):
            start = f.at_ms
        elif f.kind in ("redis_failover_done", "cluster_failover_done") and start is not None:
            out.append((start - before_ms, f.at_ms))
            start = None
        elif f.kind == "redis_failover_auto":
            out.append((f.at_ms - AUTO_FAILOVER_MS, f.at_ms + AUTO_FAILOVER_MS))
    if start is not None:
        out.append((start - before_ms, 2**62))
    return out


def check(data: RunData) -> CheckResult:
    """Every finding about one run (see the module docstring)."""
    return _Checker(data).run()
