"""Accounting of the workflows of a chaos run: every started workflow found, finished,
its history a path through the workflow table, its tasks consistent with its status.

A pure function of what was observed, like the rest of the checker; findings go through
the checker's ``bad`` (so losses inside an AOF or failover window are reported apart).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from rsjobs.codec import decode
from rsjobs.workflows.model import NOTES, TERMINAL, allowed

from .flows import FIRST_ITEMS, SECOND_ITEMS
from .records import RunData, TaskRecord, WorkflowRecord

__all__ = ["Bad", "workflow_findings", "workflow_of"]

#: the items of each stage of ``tools.chaos.flows.pipeline``, by stage index (a slot is
#: ``<version>:<stage index>:<item>``)
STAGES = (FIRST_ITEMS, SECOND_ITEMS)

Bad = Callable[..., None]


def workflow_of(rec: TaskRecord) -> str:
    """The workflow a task belongs to ('' for a plain task)."""
    return rec.fields.get("wf", "")


def _replay(wf: WorkflowRecord) -> tuple[list[str], str]:
    """Problems of the workflow's history against the table, and the status it leads to."""
    problems: list[str] = []
    status = ""
    for e in wf.history:
        if e.rejected or e.event in NOTES:
            continue
        if status in TERMINAL:
            problems.append(f"{e.id}: {e.event} accepted after terminal {status}")
        if e.from_status != status:
            problems.append(f"{e.id}: {e.event} from {e.from_status!r}, but it was {status!r}")
        if not allowed(e.from_status, e.event, e.to_status):
            problems.append(
                f"{e.id}: {e.from_status or '-'} -{e.event}-> {e.to_status} is not in the table"
            )
        status = e.to_status
    return problems, status


def _reason(wf: WorkflowRecord) -> str:
    """Why a FAILED workflow failed: its FAILED entry's message, or the hash's reason."""
    for e in reversed(wf.history):
        if not e.rejected and e.to_status == "FAILED":
            return e.message or wf.fields.get("reason", "")
    return wf.fields.get("reason", "")


def workflow_findings(
    d: RunData,
    present: dict[str, TaskRecord],
    bad: Bad,
    c: Counter[str],
) -> None:
    """Check every started workflow (and flag workflows nobody started)."""
    tasks_of: dict[str, list[TaskRecord]] = {}
    for rec in present.values():
        wid = workflow_of(rec)
        if wid:
            tasks_of.setdefault(wid, []).append(rec)
    started = {s.wf_id: s for s in d.workflows}
    # the last answer of each workflow's cancel ("unknown": no answer came back)
    cancels = {
        a.task_id: a for a in sorted(d.wf_actions, key=lambda a: a.ack_ms) if a.phase == "cancel"
    }
    published = {a.task_id: a for a in d.wf_actions if a.phase == "publish"}
    c["workflows_started"] = sum(1 for s in started.values() if s.acked)
    for wid, s in sorted(started.items()):
        wf = d.wf_records.get(wid)
        if (wf is None or not (wf.fields or wf.history)) and not s.acked:
            c["workflows_never_created"] += 1  # its start got no answer and did not land
            continue
        if wf is None or not (wf.fields or wf.history):
            bad(
                "WF_LOST",
                wid,
                f"started {s.kind} workflow has no hash and no history",
                written_ms=s.ack_ms,
                durable_write=True,
            )
            continue
        status = wf.fields.get("status", "")
        c[f"workflows_{status or 'no_status'}"] += 1
        for p in _replay(wf)[0]:
            bad("WF_ILLEGAL_HISTORY", wid, p)
        replayed = _replay(wf)[1]
        if replayed != status:
            bad("WF_STATE_MISMATCH", wid, f"hash says {status}, history leads to {replayed}")
        if status not in TERMINAL:
            bad("WF_NOT_TERMINAL", wid, f"{s.kind} workflow still {status} after the drain")
        _tasks_consistent(wid, wf, status, tasks_of.get(wid, []), bad)
        a = cancels.get(wid)
        _outcome(wid, s.kind, wf, status, a.state if a else "", bad, a.ack_ms if a else 0)
        pub = published.get(wid)
        if pub is not None and pub.state == "PUBLISHED" and status != "PUBLISHED":
            bad(
                "WF_TERMINAL_CHANGED",
                wid,
                f"publish answered PUBLISHED, the workflow ended {status}",
                written_ms=pub.ack_ms,
                durable_write=True,
            )
    for wid, wf in sorted(d.wf_records.items()):
        if wid in started or not (wf.fields or wf.history):
            continue
        inp = decode(wf.fields.get("input")) if wf.fields.get("input") else None
        if isinstance(inp, dict) and "poison" in inp:
            continue  # a bad input's doing: the poison check reports it
        bad("WF_PHANTOM", wid, "a workflow that no start created")
    c["workflow_tasks"] = sum(len(v) for k, v in tasks_of.items() if k in started)


def _tasks_consistent(
    wid: str, wf: WorkflowRecord, status: str, tasks: list[TaskRecord], bad: Bad
) -> None:
    by_id = {t.task_id: t for t in tasks}
    version = int(wf.fields.get("version") or 0)
    problems: list[str] = []
    # every recorded asset of the current version comes from a task that succeeded
    for slot, raw in sorted(wf.assets.items()):
        if not slot.startswith(f"{version}:"):
            continue
        asset = decode(raw) or {}
        t = by_id.get(str(asset.get("task") or ""))
        if t is None or t.fields.get("state") != "SUCCEEDED":
            state = t.fields.get("state") if t is not None else "missing"
            problems.append(f"asset {slot} from task {asset.get('task')} ({state})")
    if status == "PUBLISHED":
        for stage, items in enumerate(STAGES):
            for item in items:
                slot = f"{version}:{stage}:{item}"
                if slot not in wf.assets:
                    problems.append(f"published without an asset for {slot}")
                t = by_id.get(wf.slots.get(slot, ""))
                if t is None or t.fields.get("state") != "SUCCEEDED":
                    problems.append(f"published, but the task of {slot} did not succeed")
        if int(wf.fields.get("published_version") or 0) != version:
            problems.append(f"published_version {wf.fields.get('published_version')} != {version}")
    if status == "FAILED":
        current = [t for t in tasks if t.fields.get("wf_version") == str(version)]
        failed = [t for t in current if t.fields.get("state") != "SUCCEEDED"]
        if not failed and not _reason(wf):
            problems.append("FAILED with every task succeeded and no reason")
    if status in TERMINAL:
        still = sorted(t.task_id for t in tasks if t.fields.get("state") not in _TASK_TERMINAL)
        if still:
            problems.append(f"{status}, but its tasks {still[:3]} are not finished")
    for p in problems:
        bad("WF_TASKS_INCONSISTENT", wid, p)


_TASK_TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"})


def _outcome(
    wid: str, kind: str, wf: WorkflowRecord, status: str, cancel: str, bad: Bad, ack_ms: int
) -> None:
    if kind == "wf_next_over_limit":
        # its second stage cannot be created: it must fail, and say why
        if status != "FAILED" or not _reason(wf):
            bad(
                "POISON_NOT_FAILED",
                wid,
                f"workflow whose next stage is over the payload limit ended {status or '-'} "
                f"(reason {_reason(wf)!r}); it must end FAILED with a reason",
            )
        return
    if status == "CANCELLED" and not cancel:
        bad("WF_IMPOSSIBLE_OUTCOME", wid, f"{kind} workflow CANCELLED, but nobody cancelled it")
    if cancel == "CANCELLED" and status != "CANCELLED":
        bad(
            "WF_CANCEL_NOT_HONOURED",
            wid,
            f"cancel answered CANCELLED, the workflow ended {status}",
            written_ms=ack_ms,
            durable_write=True,
        )
