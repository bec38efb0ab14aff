"""``migrate.lua`` on fakeredis: tasks written by the scripts of layout 1 (the previous
release, vendored in ``tests/store/fixtures/layout1``) read back, once converted, as that
release read them: every field and every history entry, refusals with their repeats;
whatever the history (a property test over random sequences of calls), and whatever the
texts in it. A task that cannot be converted is left whole; a second run changes nothing;
``marker.lua`` marks only a namespace without data."""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rsjobs.model import TERMINAL
from rsjobs.schemas import HistoryEntry, TaskInfo
from rsjobs.store import layout
from rsjobs.store.history import entries
from rsjobs.store.layout import Layout1Task, MigrateArgs, Packed
from rsjobs.store.marker import LAYOUT
from rsjobs.store.record import TASK_FIELDS, decode_task
from rsjobs.store.replies import Conversion
from tests.support.layout1 import old_history, old_info, run_sync
from tests.support.lua import LuaHarness

TID = "0" * 31 + "1"


class Layout1Harness(LuaHarness):
    """The Lua harness with its calls run by the scripts of layout 1 (``new`` runs one by
    this release's scripts)."""

    def run(self, call: Packed) -> Any:
        return run_sync(self.r, call)

    def new(self, call: Packed) -> Any:
        return super().run(call)

    def migrate(self, *tids: str, dry_run: bool = False) -> list[list[str]]:
        tasks = [Layout1Task(self.k.task(t), self.k.history(t)) for t in tids]
        call = layout.migrate(self.c, "migrate", MigrateArgs(int(dry_run)), tasks)
        return [list(r) for r in self.new(call)]

    def old(self, tid: str) -> tuple[TaskInfo, list[HistoryEntry], dict[str, str]]:
        """The task as layout 1 read it: its info, its history, its raw hash."""
        h = self.r.hgetall(self.k.task(tid))
        rows = self.r.xrange(self.k.history(tid))
        return old_info(h), old_history(rows, h), h

    def now(self, tid: str) -> tuple[TaskInfo, list[HistoryEntry]]:
        """The task as this release reads it."""
        raw = self.r.hgetall(self.k.task(tid))
        info = TaskInfo.from_record(decode_task(raw))
        return info, [HistoryEntry.from_entry(i, f, tid, raw) for i, f in entries(raw, tid)]


def as_numbered(history: list[HistoryEntry]) -> list[HistoryEntry]:
    """A history of layout 1 with its entry ids as this layout numbers them."""
    return [msgspec.structs.replace(e, id=str(n)) for n, e in enumerate(history, 1)]


def as_migrated(info: TaskInfo) -> TaskInfo:
    """What a terminal task's info keeps: its lease expiry and execution deadline mean
    nothing once it ended, and this layout drops them (TERMINAL_DROP in fsm.lua)."""
    if info.state not in TERMINAL:
        return info
    return msgspec.structs.replace(info, lease_expires_at=0, deadline_at=0)


def check_converted(h: Layout1Harness, tid: str) -> None:
    """Migrate ``tid`` and check it reads back as it was, in this layout's encoding."""
    info, history, raw = h.old(tid)
    assert h.migrate(tid) == [["CONVERTED", str(len(history))]]
    got_info, got_history = h.now(tid)
    assert got_history == as_numbered(history)
    assert got_info == as_migrated(info)
    new = h.r.hgetall(h.k.task(tid))
    assert not set(new) & (set(TASK_FIELDS) - set(TASK_FIELDS.values())), new
    assert new["s"] == raw["state"] and int(new.get("hn", 0)) == len(history)
    assert not h.r.exists(h.k.history(tid))
    assert_encoded_as_layout_2(new)
    # a second run changes nothing
    assert h.migrate(tid) == [["NEW", ""]]
    assert h.r.hgetall(h.k.task(tid)) == new


#: what a task hash of layout 2 leaves out: fields at their default, and what a terminal
#: task drops (its history gives them back: see record.py)
DEFAULTS = {"a": "0", "f": "0", "ma": "3", "timeout_ms": "0", "progress": "0",
            "backoff_base_ms": "1000", "backoff_max_ms": "300000"}  # fmt: skip
ENDED = ("e", "b", "u", "consumer", "lease_expires_at", "deadline_at", "finished_at")


def assert_encoded_as_layout_2(new: dict[str, str]) -> None:
    for name, default in DEFAULTS.items():
        assert new.get(name) != default, (name, new)
    if new["s"] in TERMINAL:
        assert not set(ENDED) & set(new), new
    if new["s"] == "SUCCEEDED":
        assert "progress" not in new and new.get("r") != "null", new
    starts = [v for k, v in new.items() if re.fullmatch(r"h\d+", k) and v.startswith("START ")]
    assert all(" worker=" not in v for v in starts), starts  # START names its worker w=


@pytest.fixture
def h() -> Layout1Harness:
    harness = Layout1Harness()
    harness.group()
    return harness


# -- every state ------------------------------------------------------------------------------


def _running(h: Layout1Harness, tid: str, consumer: str = "w1", **kw: Any) -> str:
    h.enqueue(tid, **kw)
    (entry,) = [e for e in h.deliver(consumer) if h.task(tid).get("entry") == e]
    reply = h.start(tid, entry, consumer=consumer)
    assert reply[0] == 1, reply
    return str(reply[5])


def test_every_state_reads_back_as_it_was(h: Layout1Harness) -> None:
    ids = {name: f"{n:032x}" for n, name in enumerate(
        ["pending", "scheduled", "running", "paused", "succeeded", "failed", "cancelled",
         "timed_out", "retried", "dedup"], 1)}  # fmt: skip
    h.enqueue(ids["pending"])
    h.enqueue(ids["scheduled"], delay_ms=60_000)
    lease = _running(h, ids["running"], timeout_ms=60_000)
    assert h.heartbeat(ids["running"], lease, h.task(ids["running"])["entry"], "40") == "OK"
    h.enqueue(ids["paused"])
    h.control(ids["paused"], "PAUSE", message="hold | on % please\nsecond line")
    lease = _running(h, ids["succeeded"])
    h.finish(ids["succeeded"], "COMPLETE", lease, body='{"url": "s3://a b"}')
    for _ in range(3):  # a late result of the same lease: one refusal, two repeats
        h.finish(ids["succeeded"], "COMPLETE", "1:other", body="null")
    lease = _running(h, ids["failed"], max_attempts=1)
    h.finish(ids["failed"], "FAIL", lease, body="CUDA out of memory", retryable=False)
    h.enqueue(ids["cancelled"])
    h.control(ids["cancelled"], "CANCEL", message="user asked")
    h.control(ids["cancelled"], "CANCEL", message="again")
    h.control(ids["cancelled"], "RESUME")
    h.enqueue(ids["timed_out"], wait_timeout_ms=1)
    h.advance(5)
    h.deliver()
    h.start(ids["timed_out"], h.task(ids["timed_out"])["entry"])  # EXPIRE at START
    lease = _running(h, ids["retried"], consumer="gpu 7|a%b")
    h.finish(ids["retried"], "FAIL", lease, body="flaky")  # SCHEDULED, backoff 0
    h.advance(2)
    h.promote()
    lease = _running(h, ids["retried"], consumer="w2")
    h.finish(ids["retried"], "COMPLETE", lease, body="null")
    h.enqueue(ids["dedup"], dedup="k1")
    h.enqueue(ids["dedup"], dedup="k1")  # the duplicate writes nothing
    states = {name: h.task(tid)["state"] for name, tid in ids.items()}
    assert states == {
        "pending": "PENDING", "scheduled": "SCHEDULED", "running": "RUNNING",
        "paused": "PAUSED", "succeeded": "SUCCEEDED", "failed": "FAILED",
        "cancelled": "CANCELLED", "timed_out": "TIMED_OUT", "retried": "SUCCEEDED",
        "dedup": "PENDING",
    }  # fmt: skip
    for tid in ids.values():
        check_converted(h, tid)
    # a refusal's repeats followed it, under the entry's number
    refused = [e for e in h.now(ids["succeeded"])[1] if e.rejected]
    assert [(e.event, e.repeats) for e in refused] == [("COMPLETE", 2)]
    assert h.r.get(h.k.dedup("k1")) == ids["dedup"]


def test_a_running_task_is_completed_by_its_lease_after_the_migration(h: Layout1Harness) -> None:
    lease = _running(h, TID, timeout_ms=60_000)
    entry = h.task(TID)["entry"]
    check_converted(h, TID)
    # this release's scripts, the lease of the attempt started in layout 1
    beat = layout.heartbeat(
        h.c,
        "worker",
        layout.BeatArgs("w1", 30_000),
        [(h.tk(TID), layout.BeatItem(lease, entry, "", ""))],
    )
    assert h.new(beat) == ["OK"]
    done = layout.finish(h.c, h.k, "worker", [(h.tk(TID), h.ending("COMPLETE", lease, '"ok"'))])
    assert [list(r) for r in h.new(done)] == [[1, "SUCCEEDED"]]
    info, history = h.now(TID)
    assert info.state == "SUCCEEDED" and info.result == "ok" and info.worker == "w1"
    assert [e.event for e in history] == ["ENQUEUE", "START", "COMPLETE"]
    assert h.r.xlen(h.k.queue("q")) == 0  # its work entry acked and deleted


def test_the_ttl_of_a_finished_task_is_kept() -> None:
    h = Layout1Harness(retention_ms=600_000)
    h.group()
    h.enqueue(TID, dedup="k")
    args = layout.ControlArgs("CANCEL", "", h.k.control)
    h.run(layout.control(h.c, h.k, "user", h.tk(TID, "q", "k"), args))
    ttl = h.r.pttl(h.k.task(TID))
    assert 0 < ttl <= 600_000 and h.r.pttl(h.k.history(TID)) > 0
    check_converted(h, TID)
    assert ttl - 5_000 < h.r.pttl(h.k.task(TID)) <= ttl
    assert 0 < h.r.pttl(h.k.dedup("k")) <= 600_000


def test_a_long_history_is_written_in_chunks(h: Layout1Harness) -> None:
    lease = _running(h, TID)
    entry = h.task(TID)["entry"]
    for n in range(700):  # 700 progress entries: more fields than one HSET of the script
        assert h.heartbeat(TID, lease, entry, str(n / 10)) == "OK"
    check_converted(h, TID)
    assert len(h.now(TID)[1]) == 702


def test_a_dry_run_writes_nothing(h: Layout1Harness) -> None:
    h.enqueue(TID)
    before = h.snapshot()
    assert h.migrate(TID, dry_run=True) == [["WOULD_CONVERT", "1"]]
    assert h.snapshot() == before


# -- what is left -----------------------------------------------------------------------------


def _broken(h: Layout1Harness, how: str) -> None:
    h.enqueue(TID)
    if how == "created_at":
        h.r.hset(h.k.task(TID), "created_at", "soon")
    elif how == "from":
        h.r.xadd(h.k.history(TID), {"ev": "START", "from": "RUNNING", "to": "RUNNING",
                                    "src": "worker", "att": "1", "ts": "1"})  # fmt: skip
    elif how == "last state":
        h.r.hset(h.k.task(TID), "state", "PAUSED")
    elif how == "history type":
        h.r.delete(h.k.history(TID))
        h.r.set(h.k.history(TID), "x")
    elif how == "both names":
        h.r.hset(h.k.task(TID), "q", "other")
    elif how == "extra name":
        h.r.xadd(h.k.history(TID), {"ev": "NOTE", "from": "PENDING", "to": "PENDING",
                                    "src": "api", "att": "0", "ts": "1", "a=b": "1"})  # fmt: skip


@pytest.mark.parametrize(
    "how, why",
    [
        ("created_at", r"created_at soon is not a time"),
        ("from", r"from RUNNING, but the entry before left PENDING"),
        ("last state", r"its history ends in PENDING, its state is PAUSED"),
        ("history type", r"its history is a string"),
        ("both names", r"it has both queue and q"),
        ("extra name", r"extra field \"a=b\""),
    ],
)
def test_a_task_that_cannot_be_converted_is_left_whole(
    h: Layout1Harness, how: str, why: str
) -> None:
    _broken(h, how)
    before = h.snapshot()
    ((outcome, detail),) = h.migrate(TID)
    assert outcome == "SKIPPED" and re.search(why, detail), detail
    assert h.snapshot() == before


def test_what_is_no_task_of_layout_1_is_left(h: Layout1Harness) -> None:
    h.r.hset(h.k.task(TID), mapping={"id": TID, "note": "not a task"})
    h.r.set(h.k.task("b" * 32), "a string")
    before = h.snapshot()
    assert h.migrate(TID, "b" * 32, "c" * 32) == [
        ["FOREIGN", "no state field: not a task of either layout"],
        ["FOREIGN", "its key is a string, not a hash"],
        ["GONE", ""],
    ]
    assert h.snapshot() == before


def test_a_task_of_this_layout_is_left(h: Layout1Harness) -> None:
    h.new(layout.enqueue(h.c, "api", [(h.tk(TID), h.new_task(TID))]))
    before = h.snapshot()
    assert h.migrate(TID) == [["NEW", ""]]
    h.r.xadd(h.k.history(TID), {"ev": "X"})  # an old history beside a new hash
    ((outcome, detail),) = h.migrate(TID)
    assert outcome == "FOREIGN" and "both left as they are" in detail
    assert h.snapshot() == {**before, h.k.history(TID): h.r.xrange(h.k.history(TID))}


def test_a_malformed_call_writes_nothing(h: Layout1Harness) -> None:
    h.enqueue(TID)
    before = h.snapshot()
    call = layout.migrate(
        h.c, "migrate", MigrateArgs("yes"), [Layout1Task(h.k.task(TID), h.k.history(TID))]
    )
    with pytest.raises(Exception, match="invalid dry_run"):
        h.new(call)
    with pytest.raises(Exception, match="invalid layout"):
        h.new(call._replace(keys=call.keys[:-1]))
    assert h.snapshot() == before


def test_the_outcomes_are_the_enum() -> None:
    src = (resources.files("rsjobs") / "scripts" / "migrate.lua").read_text(encoding="utf-8")
    header = src[: src.index("]]")]
    returns = header[header.index("Returns:") : header.index("An error")]
    assert set(re.findall(r"^  ([A-Z_]+) {2,}", returns, re.M)) == {c.value for c in Conversion}


# -- the marker -------------------------------------------------------------------------------


def _marker(h: Layout1Harness) -> list[Any]:
    return list(h.new(layout.marker(h.c, h.k, "api", LAYOUT)))


def test_the_marker_is_set_on_an_empty_namespace_only(h: Layout1Harness) -> None:
    assert _marker(h) == ["2", 1]
    assert h.r.get(h.k.layout) == "2"
    assert _marker(h) == ["2", 0]
    other = Layout1Harness(namespace="old")
    other.enqueue(TID)  # layout 1 data: stats, events, a task
    assert _marker(other) == ["", 0]
    assert other.r.get(other.k.layout) is None
    other.r.set(other.k.layout, "3")
    assert _marker(other) == ["3", 0]


# -- any history ------------------------------------------------------------------------------

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
_START = st.tuples(st.just("start"), st.sampled_from(["w1", "gpu 1|x", "w=2%"]))
_PROGRESS = st.tuples(st.just("progress"), st.integers(0, 100), TEXT)
_FINISH = st.tuples(
    st.just("finish"),
    st.sampled_from(["COMPLETE", "FAIL", "TIMEOUT", "REQUEUE"]),
    TEXT,
    st.booleans(),
    st.sampled_from(["current", "current", "stale", "foreign"]),
)
_CONTROL = st.tuples(st.just("control"), st.sampled_from(["CANCEL", "PAUSE", "RESUME"]), TEXT)
_PROMOTE = st.tuples(st.just("promote"))
#: the calls of a task's life, weighted so that histories reach every state (a CANCEL
#: ends one: control calls are the rarest)
OPS = st.one_of(_START, _START, _START, _PROGRESS, _FINISH, _FINISH, _PROMOTE, _PROMOTE, _CONTROL)


def _apply(h: Layout1Harness, op: tuple[Any, ...], leases: list[str]) -> None:
    kind = op[0]
    t = h.task(TID)
    if kind == "start" and t["state"] == "SCHEDULED":  # due at once (delays are 1 ms)
        h.advance(2)
        h.promote()
        t = h.task(TID)
    if kind == "start" and t["state"] == "PENDING":
        h.deliver(op[1])
        reply = h.start(TID, t.get("entry", "1-1"), nonce=f"n{len(leases)}", consumer=op[1])
        if reply[0] == 1:
            leases.append(str(reply[5]))
    elif kind == "progress":
        lease = leases[-1] if leases else "1:none"
        h.heartbeat(TID, lease, t.get("entry") or "1-1", str(op[1]))
        if op[2]:  # a message too
            item = layout.BeatItem(lease, t.get("entry") or "1-1", str(op[1]), op[2])
            h.run(
                layout.heartbeat(h.c, "worker", layout.BeatArgs("w1", 30_000), [(h.tk(TID), item)])
            )
    elif kind == "finish":
        _, event, body, retryable, which = op
        lease = {"current": leases[-1] if leases else "1:none", "stale": leases[0] if leases else "0:x",
                 "foreign": "9:never"}[which]  # fmt: skip
        h.finish(
            TID, event, lease, body=body if event != "COMPLETE" else '"r"', retryable=retryable
        )
    elif kind == "control":
        h.control(TID, op[1], message=op[2])
    elif kind == "promote" and t["state"] == "SCHEDULED":
        h.advance(2)
        h.promote()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    max_attempts=st.integers(1, 3),
    delayed=st.booleans(),
    owner=st.sampled_from([None, "alice"]),
    ops=st.lists(OPS, min_size=4, max_size=16),
)
def test_any_history_of_layout_1_reads_back_as_it_was(
    max_attempts: int, delayed: bool, owner: str | None, ops: list[tuple[Any, ...]]
) -> None:
    h = Layout1Harness()
    h.group()
    task = h.new_task(
        TID, max_attempts=max_attempts, delay_ms=1 if delayed else 0, timeout_ms=60_000
    )
    if owner:
        options = msgspec.json.decode(task.options)
        task = task._replace(options=msgspec.json.encode({**options, "owner": owner}))
    h.run(layout.enqueue(h.c, "api", [(h.tk(TID), task)]))
    leases: list[str] = []
    for op in ops:
        _apply(h, op, leases)
    check_converted(h, TID)


def test_the_scripts_refuse_a_task_of_layout_1_and_keep_its_entry(h: Layout1Harness) -> None:
    """A task an earlier release's producer submits after the migration: this release's
    scripts refuse it (load raises) instead of taking it for a gone task and dropping its
    work entry, and write nothing; ``rsjobs migrate`` converts it later."""
    h.enqueue(TID)
    (entry,) = h.deliver()
    before = h.snapshot(), h.r.xpending(h.k.queue("q"), "workers")["pending"]
    calls = [
        layout.start(
            h.c,
            h.k,
            "worker",
            layout.StartArgs("w1", 30_000, "n", "q"),
            [(h.tk(TID), layout.Entry(entry))],
        ),
        layout.control(h.c, h.k, "user", h.tk(TID), layout.ControlArgs("CANCEL", "", h.k.control)),
        layout.finish(h.c, h.k, "worker", [(h.tk(TID), h.ending("COMPLETE", "1:n", '"x"'))]),
        layout.release(h.c, "worker", [(h.tk(TID), layout.Entry(entry))]),
    ]
    for call in calls:
        with pytest.raises(Exception, match="is of layout 1"):
            h.new(call)
    assert (h.snapshot(), h.r.xpending(h.k.queue("q"), "workers")["pending"]) == before
    check_converted(h, TID)
    assert h.new(calls[0])[0][0] == 1  # started now, from the entry it kept


def test_a_task_of_layout_1_is_no_bad_data() -> None:
    """Quarantine finds no defect in it (it would take it out of its queue), and isolation
    blames no item for NotMigrated."""
    from rsjobs import NotMigrated
    from rsjobs.store.isolation import about_item
    from rsjobs.store.quarantine import defects_of

    old = {"state": "PENDING", "id": TID, "queue": "q", "type": "t", "attempt": "0"}
    assert defects_of(TID, "hash", old) == []
    assert defects_of(TID, "hash", {"id": TID}) != []  # a hash of neither layout is
    assert not about_item(NotMigrated("task x", "is of layout 1"))


async def test_the_reaper_sets_a_task_of_layout_1_aside_before_a_batch() -> None:
    """Its screen tells the task apart (load would raise on it half-way through a batch,
    whose reply would be lost), as it does a hash without its id or queue."""
    import fakeredis

    from rsjobs.settings import Settings
    from rsjobs.store import Store

    r = fakeredis.aioredis.FakeRedis(decode_responses=True)
    store = Store(r, Settings(namespace="t"))
    await r.hset(store.keys.task(TID), mapping={"state": "PENDING", "id": TID, "queue": "q"})
    other = "b" * 32
    await r.hset(store.keys.task(other), mapping={"s": "PENDING", "id": other, "q": "q"})
    assert [s.intact for s in await store.reaper.screen([TID, other, "c" * 32])] == [
        False,
        True,
        True,
    ]
    await r.aclose()
