"""The checks of the hostile-client mix (``tools.chaos.hostilecheck``) catch what they
claim: each kind of finding, fed to the checker as a corrupted run, is reported, and the
clean run is not. No Redis needed (the histories are what ``fsm.lua`` writes: a storm's
is elided past its ceiling, as docs/task-size.md says).
"""

from __future__ import annotations

import base64
from typing import Any

import msgspec
import pytest

from rsjobs.schemas import HistoryEntry
from rsjobs.store.history import HEAD, TAIL
from rsjobs.store.seal import seal_cursor
from tools.chaos import RunData, check
from tools.chaos.cursors import cursor_leaks
from tools.chaos.poisoncheck import refusals
from tools.chaos.records import (
    CallbackProbe,
    CancelAck,
    CursorProbe,
    FaultEvent,
    HostileTraces,
    PauseStorm,
    QueueFlood,
    Submission,
    TaskRecord,
)
from tools.chaos.replay import replay

T = "c" * 32
ACK = 1_000_000


def _entry(n: int, event: str, frm: str, to: str, **extra: str) -> HistoryEntry:
    return HistoryEntry(id=str(n), task_id=T, event=event, from_state=frm, to_state=to,
                        source="api", attempt=0, ts=ACK + n, extra=dict(extra))  # fmt: skip


def storm_history(cycles: int, *, ceiling: bool = True) -> list[HistoryEntry]:
    """ENQUEUE, ``cycles`` PAUSE / RESUME pairs, CANCEL: as the task's hash keeps it
    (its first HEAD and last TAIL entries, one ELIDED entry for those between)."""
    full = [_entry(1, "ENQUEUE", "", "PENDING")]
    for _ in range(cycles):
        full.append(_entry(len(full) + 1, "PAUSE", "PENDING", "PAUSED"))
        full.append(_entry(len(full) + 1, "RESUME", "PAUSED", "PENDING"))
    full.append(_entry(len(full) + 1, "CANCEL", "PENDING", "CANCELLED"))
    if not ceiling or len(full) <= HEAD + TAIL:
        return full
    gone = full[HEAD : len(full) - TAIL]
    counts: dict[str, int] = {}
    for e in gone:
        counts[e.event] = counts.get(e.event, 0) + 1
    last = gone[-1]
    elided = _entry(int(last.id), "ELIDED", gone[0].from_state, last.to_state,
                    elided=str(len(gone)), first=gone[0].id,
                    counts=",".join(f"{k}={v}" for k, v in counts.items()))  # fmt: skip
    return [*full[:HEAD], elided, *full[len(full) - TAIL :]]


def storm_run(cycles: int = 150, hist: list[HistoryEntry] | None = None, size: int = 3700,
              **storm: Any) -> RunData:  # fmt: skip
    """A run of one storm task: submitted, ``cycles`` cycles, cancelled; its stats and
    events stream as the scripts keep them (every entry, the elided ones too)."""
    hist = storm_history(cycles) if hist is None else hist
    fields = {"id": T, "queue": "chaos.hold", "state": "CANCELLED", "attempt": "0",
              "max_attempts": "1", "payload": '{"k": "hostile", "seq": 3000000}'}  # fmt: skip
    n = 2 * cycles + 2
    base: dict[str, Any] = {"seq": 3_000_000, "channel": "client", "task_id": T, "cycles": cycles,
            "paused": cycles, "resumed": cycles, "first_ms": ACK, "last_ms": ACK + n}  # fmt: skip
    base.update(storm)
    return RunData(
        fsync="always",
        lease_ms=2000,
        submissions=[Submission(seq=3_000_000, kind="hostile", task_id=T, ack_ms=ACK)],
        cancels=[CancelAck(task_id=T, phase="hostile", ack_ms=ACK + n, state="CANCELLED")],
        tasks={T: TaskRecord(task_id=T, fields=fields, history=hist)},
        stats={
            "chaos.hold:CANCELLED": 1,
            "ev:ENQUEUE": 1,
            "ev:PAUSE": cycles,
            "ev:RESUME": cycles,
            "ev:CANCEL": 1,
        },
        events={T: [str(i) for i in range(2, n + 1)]},
        storms=[PauseStorm(**base)],
        hostile_traces=HostileTraces(sizes={T: size}),
    )


def kinds(data: RunData) -> set[str]:
    return {v.kind for v in check(data).violations}


def _with(run: RunData, **changes: Any) -> RunData:
    return msgspec.structs.replace(run, **changes)


# -- pause/resume storms -------------------------------------------------------------------


def test_a_storm_under_its_ceiling_and_accounted_for_passes() -> None:
    """The elided history replays, its events and stats counters match (every entry,
    elided or kept), and the PAUSEs / RESUMEs add up to the cycles answered."""
    res = check(storm_run(150))
    assert res.ok, res.violations
    assert res.counts["storm_cycles"] == 150 and res.counts["storm_elided"] == 302 - 112
    assert res.states == {"CANCELLED": 1}


def test_storm_corruptions_are_reported() -> None:
    # more PAUSEs answered than the history holds (kept + elided)
    assert "STORM_UNACCOUNTED" in kinds(storm_run(150, paused=151))
    # unanswered ones may or may not be there
    assert check(storm_run(150, paused=149, unknown_pause=1)).ok
    # the elided counts do not add up to the entries elided
    hist = storm_history(150)
    i = next(i for i, e in enumerate(hist) if e.event == "ELIDED")
    short = msgspec.structs.replace(hist[i], extra={**hist[i].extra, "counts": "RESUME=95"})
    assert "STORM_UNACCOUNTED" in kinds(storm_run(150, [*hist[:i], short, *hist[i + 1 :]]))
    # a history that kept every entry, or a hash over the ceiling
    assert "TASK_OVER_CEILING" in kinds(storm_run(150, storm_history(150, ceiling=False)))
    assert "TASK_OVER_CEILING" in kinds(storm_run(150, size=7000))
    # a command answered with an error, or refused while the storm knew the state
    assert "HOSTILE_MISHANDLED" in kinds(storm_run(150, errors=1, error="HTTP 500"))
    assert "HOSTILE_MISHANDLED" in kinds(storm_run(150, refused=1))


def test_a_storm_command_lost_in_an_aof_window_is_reported_apart() -> None:
    """Redis SIGKILLed under appendfsync everysec mid-storm loses the last applied PAUSE:
    the history holds one fewer and the next RESUME is refused (the task was PENDING) —
    an AOF-window loss, reported apart with the kill; the same run under fsync always, or
    with the kill long after the storm, is a violation."""
    kill = FaultEvent(at_ms=ACK + 200, kind="redis_kill", target="redis")
    lost = storm_run(150, paused=151, refused=1, last_ms=ACK + 400)
    res = check(_with(lost, fsync="everysec", faults=[kill]))
    assert res.violations == []
    assert {v.kind for v in res.aof_window_losses} == {"STORM_UNACCOUNTED", "HOSTILE_MISHANDLED"}
    assert all("Redis SIGKILLed" in v.detail for v in res.aof_window_losses)
    assert "HOSTILE_MISHANDLED" in kinds(_with(lost, faults=[kill]))  # fsync always
    late = FaultEvent(at_ms=ACK + 60_000, kind="redis_kill", target="redis")
    assert "HOSTILE_MISHANDLED" in kinds(_with(lost, fsync="everysec", faults=[late]))


def test_an_elided_entry_must_chain() -> None:
    hist = storm_history(150)
    i = next(i for i, e in enumerate(hist) if e.event == "ELIDED")
    broken = msgspec.structs.replace(hist[i], from_state="PENDING")  # entry 16 left PAUSED
    assert [p.code for p in replay([*hist[:i], broken, *hist[i + 1 :]])] == ["BROKEN_CHAIN"]
    assert replay(hist) == []


def test_refusals_elided_from_a_history_are_counted() -> None:
    hist = [_entry(1, "ENQUEUE", "", "PENDING"),
            _entry(40, "ELIDED", "PENDING", "PENDING", elided="5", first="17",
                   counts="RESUME!=5")]  # fmt: skip
    assert refusals(hist, "RESUME") == 5
    assert refusals(hist, "PAUSE") == 0


# -- callbacks -----------------------------------------------------------------------------


def _probe(outcome: str = "refused", **kw: Any) -> CallbackProbe:
    base: dict[str, Any] = {"seq": 3_000_001, "variant": "cross_job", "task_id": T, "target": "chaos-x-a1",
            "signed_for": "chaos-y-a1", "marker": "hostile-3000001-0", "at_ms": ACK,
            "outcome": outcome, "status": 401}  # fmt: skip
    base.update(kw)
    return CallbackProbe(**base)


def test_refused_callbacks_that_wrote_nothing_pass() -> None:
    res = check(_with(storm_run(), callbacks=[_probe()]))
    assert res.ok, res.violations
    assert res.counts["hostile_callbacks_refused"] == 1


def test_callback_corruptions_are_reported() -> None:
    run = storm_run()
    assert "CALLBACK_ACCEPTED" in kinds(_with(run, callbacks=[_probe("accepted", status=200)]))
    assert "HOSTILE_MISHANDLED" in kinds(_with(run, callbacks=[_probe("mishandled", status=500)]))
    # a task holds the refused callback's result, or an entry the callback route wrote
    rec = run.tasks[T]
    holds = {T: msgspec.structs.replace(
        rec, fields={**rec.fields, "result": '{"hostile": "hostile-3000001-0"}'})}  # fmt: skip
    assert "HOSTILE_WROTE" in kinds(_with(run, callbacks=[_probe()], tasks=holds))
    by_route = [*rec.history[:-1], msgspec.structs.replace(rec.history[-1], source="callback")]
    wrote = {T: msgspec.structs.replace(rec, history=by_route)}
    assert "HOSTILE_WROTE" in kinds(_with(run, callbacks=[_probe()], tasks=wrote))


# -- queue-name floods ---------------------------------------------------------------------

NAMES = [f"hq3000002n{i:03d}" for i in range(10)]


def _flood_run(accepted: int = 8, owner_count: int | None = None,
               traces: dict[str, list[str]] | None = None, **kw: Any) -> RunData:  # fmt: skip
    flood = QueueFlood(
        seq=3_000_002,
        channel="http",
        owner="mallory-3000002",
        quota=8,
        sent=NAMES,
        accepted={n: f"{i:032x}" for i, n in enumerate(NAMES[:accepted])},
        refused=NAMES[accepted:],
        **kw,
    )
    found = {n: [f"key rsjobs:{{chaos}}:queue:{n}"] for n in NAMES[:accepted]}
    count = accepted if owner_count is None else owner_count
    hostile = HostileTraces(
        sizes={T: 3700}, queue_traces={**found, **(traces or {})},
        owner_counts={"mallory-3000002": count},
    )  # fmt: skip
    return _with(storm_run(), queue_floods=[flood], hostile_traces=hostile)


def test_a_flood_stopped_at_the_quota_without_traces_passes() -> None:
    res = check(_flood_run())
    assert res.ok, res.violations
    assert res.counts["queue_flood_refused"] == 2 and res.counts["queue_flood_accepted"] == 8


def test_queue_flood_corruptions_are_reported() -> None:
    assert "QUOTA_EXCEEDED" in kinds(_flood_run(accepted=9))
    assert "QUOTA_EXCEEDED" in kinds(_flood_run(accepted=5))  # refused short of the quota
    counted = kinds(_flood_run(owner_count=9))  # the owner got a queue it was refused
    assert {"QUOTA_EXCEEDED", "QUEUE_REFUSAL_WROTE"} <= counted
    stats = {NAMES[9]: [f"stats field {NAMES[9]}:PENDING"]}
    assert "QUEUE_REFUSAL_WROTE" in kinds(_flood_run(traces=stats))
    odd = _flood_run(accepted=8, mishandled={NAMES[9]: "HTTP 500"})
    assert "HOSTILE_MISHANDLED" in kinds(odd)


# -- cursors -------------------------------------------------------------------------------


def _cursor(variant: str, outcome: str = "refused", **kw: Any) -> CursorProbe:
    base: dict[str, Any] = {"seq": 3_000_003, "channel": "http", "variant": variant, "route": "/tasks",
            "at_ms": ACK, "outcome": outcome, "status": 400 if outcome == "refused" else 200}  # fmt: skip
    base.update(kw)
    return CursorProbe(**base)


CLEAN = [_cursor("genuine", "accepted"), _cursor("cross_owner"), _cursor("altered"),
         _cursor("crafted_stream_id", route="/deadletters")]  # fmt: skip


def test_refused_cursors_that_revealed_nothing_pass() -> None:
    res = check(_with(storm_run(), cursor_probes=CLEAN))
    assert res.ok, res.violations
    assert res.counts["cursor_probes_refused"] == 3


@pytest.mark.parametrize(
    ("probe", "kind"),
    [
        (_cursor("cross_owner", "accepted"), "CURSOR_ACCEPTED"),
        (_cursor("crafted_plain", "accepted"), "CURSOR_ACCEPTED"),
        (_cursor("cross_owner", leaked=["alice"]), "CURSOR_LEAK"),
        (_cursor("cursor_text", "accepted", leaked=[T]), "CURSOR_LEAK"),
        (_cursor("genuine", "accepted", leaked=["bob"]), "CURSOR_LEAK"),
        (_cursor("genuine", "refused"), "HOSTILE_MISHANDLED"),
        (_cursor("crafted_stream_id", "mishandled", status=503), "HOSTILE_MISHANDLED"),
    ],
)
def test_cursor_corruptions_are_reported(probe: CursorProbe, kind: str) -> None:
    assert kind in kinds(_with(storm_run(), cursor_probes=[*CLEAN, probe]))


def test_a_sealed_cursor_reveals_nothing_an_unsealed_one_does() -> None:
    plain = f"1700000000000:{T}"
    secrets = [T, "alice"]
    assert cursor_leaks(base64.urlsafe_b64encode(plain.encode()).decode(), secrets) == [T]
    assert cursor_leaks(plain, secrets) == [T]
    sealed = seal_cursor(b"k" * 32, "owner=alice", plain)
    assert cursor_leaks(sealed, secrets) == []
