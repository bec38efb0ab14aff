"""The list indexes as the transition scripts keep them (``index_move`` in fsm.lua) and as
``trim.lua`` trims them, on fakeredis: what each state costs in the indexes (nothing for
PENDING, RUNNING and SCHEDULED tasks: their stream and the scheduled zset are the index),
the owner and label members of tagged tasks only, and the trim with retention."""

from __future__ import annotations

import pytest

from rsjobs.labels import encode_labels
from rsjobs.store import layout
from rsjobs.store.index import label_tag, owner_tag
from rsjobs.store.keys import TERMINAL_STATES
from rsjobs.store.layout import TrimArgs
from tests.support.lua import LuaHarness

A, B, C = "a" * 32, "b" * 32, "c" * 32
#: the retention of the trim tests: the scripts' clock is moved past it (LuaHarness.advance)
RETENTION_MS = 60_000


def index_keys(h: LuaHarness) -> dict[str, object]:
    """What the list indexes hold (absent keys left out)."""
    k = h.k
    snap = h.snapshot()
    return {key: snap[key] for key in (*k.done, k.paused_tasks, k.tags, k.tags_trim) if key in snap}


def done(h: LuaHarness, state: str) -> list[dict[str, str]]:
    return [f for _, f in h.r.xrange(h.k.done_stream(state))]


def run_to_end(h: LuaHarness, tid: str, event: str = "COMPLETE", **kw: object) -> None:
    """Deliver and start the task, then end its attempt with ``event``."""
    h.group()
    (entry,) = h.deliver()
    started = h.start(tid, entry)
    h.finish(tid, event, started[5], **kw)  # type: ignore[arg-type]


def test_waiting_and_running_tasks_cost_the_indexes_nothing() -> None:
    h = LuaHarness()
    h.enqueue(A)
    h.enqueue(B, delay_ms=60_000)
    h.group()
    (entry,) = h.deliver()
    h.start(A, entry)
    assert index_keys(h) == {}  # the stream and the scheduled zset list them


@pytest.mark.parametrize(
    ("ending", "state"),
    [("COMPLETE", "SUCCEEDED"), ("FAIL", "FAILED"), ("CANCEL", "CANCELLED")],
)
def test_a_finished_task_is_one_entry_of_its_state_stream(ending: str, state: str) -> None:
    h = LuaHarness()
    h.enqueue(A, queue="gpu", max_attempts=1)
    if ending == "CANCEL":
        h.control(A, "CANCEL", queue="gpu")
    else:
        h.group("gpu")
        (entry,) = h.deliver(queue="gpu")
        started = h.start(A, entry, queue="gpu")
        h.finish(A, ending, started[5], queue="gpu", retryable=False)
    assert done(h, state) == [{"gpu": A}]  # the field is the queue, the value the task
    others = [s for s in TERMINAL_STATES if s != state]
    assert all(not h.r.exists(h.k.done_stream(s)) for s in others)


def test_an_expired_task_is_listed_timed_out() -> None:
    h = LuaHarness()
    h.enqueue(A, wait_timeout_ms=1)
    h.advance(5)
    h.group()
    (entry,) = h.deliver()
    assert h.start(A, entry)[0] == -4  # EXPIRE at START
    assert done(h, "TIMED_OUT") == [{"q": A}]


def test_a_retry_is_not_an_end() -> None:
    h = LuaHarness()
    h.enqueue(A, max_attempts=2)
    run_to_end(h, A, "FAIL")
    assert h.task(A)["state"] == "SCHEDULED" and index_keys(h) == {}


def test_paused_tasks_are_in_the_paused_tasks_zset_while_paused() -> None:
    h = LuaHarness()
    h.enqueue(A, queue="gpu")
    h.enqueue(B, queue="gpu")
    h.control(A, "PAUSE", queue="gpu")
    h.control(B, "PAUSE", queue="gpu")
    assert h.r.zrange(h.k.paused_tasks, 0, -1) == sorted([f"gpu:{A}", f"gpu:{B}"])
    h.control(A, "RESUME", queue="gpu")
    h.control(B, "CANCEL", queue="gpu")
    assert not h.r.exists(h.k.paused_tasks)
    assert done(h, "CANCELLED") == [{"gpu": B}]


def test_a_paused_task_of_a_paused_queue_is_in_both_keys() -> None:
    # the paused queues (a hash, queue.lua) and the paused tasks (a zset) are two keys
    h = LuaHarness()
    assert h.k.paused != h.k.paused_tasks
    assert h.queue_flag("PAUSE_QUEUE", "gpu")[0] == 1
    h.enqueue(A, queue="gpu")
    h.control(A, "PAUSE", queue="gpu")
    assert h.task(A)["state"] == "PAUSED"
    assert h.r.zrange(h.k.paused_tasks, 0, -1) == [f"gpu:{A}"]
    assert h.r.hexists(h.k.paused, "gpu")
    h.control(A, "RESUME", queue="gpu")
    assert h.queue_flag("RESUME_QUEUE", "gpu")[0] == 1
    assert not h.r.exists(h.k.paused_tasks) and not h.r.exists(h.k.paused)


def test_owner_and_labels_are_tags_members_from_enqueue_on() -> None:
    h = LuaHarness()
    labels = encode_labels({"user": "u_9", "character": "char_456"})
    h.run(layout.enqueue(h.c, "api", [(h.tk(A), h.new_task(A, owner="alice", labels=labels))]))
    created = h.task(A)["created_at"]
    assert h.task(A)["labels"] == '{"character":"char_456","user":"u_9"}'
    members = h.r.zrange(h.k.tags, 0, -1, withscores=True)
    expect = sorted(
        f"{tag}|{int(created):013d}|{A}"
        for tag in (owner_tag("alice"), label_tag("user", "u_9"), label_tag("character", "char_456"))
    )  # fmt: skip
    assert members == [(m, 0.0) for m in expect]
    assert owner_tag("alice") == "o5:alice" and label_tag("user", "u_9") == "l8:user=u_9"
    # a task without owner or labels has no member; a finished tagged one a trim entry
    run_to_end(h, A)
    h.enqueue(B)
    assert len(h.r.zrange(h.k.tags, 0, -1)) == 3
    ((_, trim),) = h.r.xrange(h.k.tags_trim)
    assert trim == {"id": A, "c": created, "o": "alice", "l": labels}


@pytest.mark.parametrize(
    "labels",
    [
        "[]",
        "{}",
        '{"a": 1}',
        '{"bad key": "v"}',
        '{"k": ""}',
        '{"k": "line\\nbreak"}',
        '{"k": "' + "x" * 257 + '"}',
        "{" + ",".join(f'"k{i}": "v"' for i in range(9)) + "}",
        "not json",
    ],
)
def test_labels_the_scripts_refuse_write_nothing(labels: str) -> None:
    h = LuaHarness()
    h.enqueue(C)
    before = h.snapshot()
    call = layout.enqueue(h.c, "api", [(h.tk(A), h.new_task(A, labels=labels))])
    with pytest.raises(Exception, match="option labels"):
        h.run(call)
    assert h.snapshot() == before


def test_trim_removes_what_retention_expired_and_deletes_emptied_keys() -> None:
    h = LuaHarness(retention_ms=RETENTION_MS)
    labels = encode_labels({"user": "u_9"})
    h.run(layout.enqueue(h.c, "api", [(h.tk(A), h.new_task(A, owner="bob", labels=labels))]))
    h.enqueue(B)
    h.group()
    for tid, entry in zip((A, B), h.deliver(), strict=True):
        h.finish(tid, "COMPLETE", h.start(tid, entry)[5])
    trim = layout.trim(h.c, "reaper", TrimArgs(100))
    assert h.run(trim) == [0, 0, 0, 0]  # not yet past the retention period
    assert len(done(h, "SUCCEEDED")) == 2 and h.r.zcard(h.k.tags) == 2
    h.advance(RETENTION_MS + 1)
    h.enqueue(C, owner="bob")  # live: its member stays
    assert h.run(trim) == [1, 2, 2, 0]
    assert index_keys(h) == {h.k.tags: [(f"o3:bob|{int(h.task(C)['created_at']):013d}|{C}", 0.0)]}


def test_one_finish_call_writes_one_trim_entry_naming_each_tagged_task() -> None:
    h = LuaHarness(retention_ms=RETENTION_MS)
    labels = encode_labels({"user": "u_9"})
    tasks = [
        (h.tk(A), h.new_task(A, owner="bob")),
        (h.tk(B), h.new_task(B)),  # untagged: named nowhere
        (h.tk(C), h.new_task(C, owner="al", labels=labels)),
    ]
    h.run(layout.enqueue(h.c, "api", tasks))
    created = {tid: h.task(tid)["created_at"] for tid in (A, C)}
    h.group()
    leases = [h.start(tid, e)[5] for tid, e in zip((A, B, C), h.deliver(), strict=True)]
    ends = [
        (h.tk(t), h.ending("COMPLETE", lease)) for t, lease in zip((A, B, C), leases, strict=True)
    ]
    assert [r[0] for r in h.run(layout.finish(h.c, h.k, "worker", ends))] == [1, 1, 1]
    # (through Lua: redis-py would answer the entry's fields as a dict)
    ((_, fields),) = h.r.eval("return redis.call('XRANGE', KEYS[1], '-', '+')", 1, h.k.tags_trim)
    assert fields == [
        "id", A, "c", created[A], "o", "bob",
        "id", C, "c", created[C], "o", "al", "l", labels,
    ]  # fmt: skip
    assert h.r.zcard(h.k.tags) == 3
    h.advance(RETENTION_MS + 1)
    assert h.run(layout.trim(h.c, "reaper", TrimArgs(100))) == [1, 3, 3, 0]
    assert index_keys(h) == {}


def test_a_big_finish_call_writes_bounded_trim_entries_and_the_trim_counts_tasks() -> None:
    h = LuaHarness(retention_ms=RETENTION_MS)
    ids = [f"{i:032x}" for i in range(60)]
    h.run(layout.enqueue(h.c, "api", [(h.tk(t), h.new_task(t, owner="bob")) for t in ids]))
    h.group()
    leases = [h.start(t, e)[5] for t, e in zip(ids, h.deliver(), strict=True)]
    ends = [(h.tk(t), h.ending("COMPLETE", lease)) for t, lease in zip(ids, leases, strict=True)]
    h.run(layout.finish(h.c, h.k, "worker", ends))
    # 6 fields a task, at most 192 an entry: 32 tasks, then 28
    entries = [f for _, f in h.r.xrange(h.k.tags_trim)]
    assert len(entries) == 2
    h.advance(RETENTION_MS + 1)
    # a call handles whole entries until `most` tasks were handled, then says more
    assert h.run(layout.trim(h.c, "reaper", TrimArgs(10))) == [1, 32, 60, 1]
    assert h.r.zcard(h.k.tags) == 28
    assert h.run(layout.trim(h.c, "reaper", TrimArgs(100))) == [1, 28, 0, 0]
    assert index_keys(h) == {}


def test_trim_reads_its_entries_a_page_at_a_time_to_the_end() -> None:
    h = LuaHarness(retention_ms=RETENTION_MS)
    ids = [f"{i:032x}" for i in range(40)]
    h.run(layout.enqueue(h.c, "api", [(h.tk(t), h.new_task(t, owner="bob")) for t in ids]))
    for t in ids:  # one-task entries: more than one page of them
        h.r.xadd(h.k.tags_trim, {"id": t, "c": h.task(t)["created_at"], "o": "bob"})
    h.advance(RETENTION_MS + 1)
    assert h.run(layout.trim(h.c, "reaper", TrimArgs(100))) == [40, 40, 0, 0]
    assert h.r.zcard(h.k.tags) == 0 and h.r.exists(h.k.tags_trim) == 0


def test_trim_reads_the_one_task_entries_of_older_releases_and_skips_foreign_fields() -> None:
    h = LuaHarness(retention_ms=RETENTION_MS)
    for tid, owner in ((A, "bob"), (B, "al")):
        h.run(layout.enqueue(h.c, "api", [(h.tk(tid), h.new_task(tid, owner=owner))]))
    created = {tid: h.task(tid)["created_at"] for tid in (A, B)}
    # as an older release wrote them: an entry per task (and one with a field before the
    # first id, written by something else: that field is passed over)
    h.r.xadd(h.k.tags_trim, {"id": A, "c": created[A], "o": "bob"})
    h.r.execute_command("XADD", h.k.tags_trim, "*", "x", "1", "id", B, "c", created[B], "o", "al")
    h.r.xadd(h.k.tags_trim, {"x": "1"})
    h.advance(RETENTION_MS + 1)
    assert h.run(layout.trim(h.c, "reaper", TrimArgs(100))) == [3, 2, 0, 0]
    assert h.r.zcard(h.k.tags) == 0 and h.r.exists(h.k.tags_trim) == 0


def test_trim_handles_at_most_what_it_is_asked_and_says_more() -> None:
    h = LuaHarness(retention_ms=RETENTION_MS)
    for tid in (A, B):
        h.run(layout.enqueue(h.c, "api", [(h.tk(tid), h.new_task(tid, owner="bob"))]))
        h.control(tid, "CANCEL")
    h.advance(RETENTION_MS + 1)
    assert h.run(layout.trim(h.c, "reaper", TrimArgs(1))) == [1, 1, 2, 1]
    assert h.run(layout.trim(h.c, "reaper", TrimArgs(1))) == [1, 1, 0, 1]
    assert h.run(layout.trim(h.c, "reaper", TrimArgs(1))) == [0, 0, 0, 0]
    assert index_keys(h) == {}


def test_trim_keeps_everything_without_retention_and_refuses_a_bad_count() -> None:
    h = LuaHarness(retention_ms=0)
    h.run(layout.enqueue(h.c, "api", [(h.tk(A), h.new_task(A, owner="bob"))]))
    h.control(A, "CANCEL")
    before = h.snapshot()
    assert h.run(layout.trim(h.c, "reaper", TrimArgs(10))) == [0, 0, 0, 0]
    for bad in ("0", "-1", "x", ""):
        with pytest.raises(Exception, match="invalid most"):
            h.run(layout.trim(h.c, "reaper", TrimArgs(bad)))
    assert h.snapshot() == before


def test_summaries_answers_only_tasks_true_to_their_index_and_the_filters() -> None:
    from rsjobs.store.layout import Expect, SummaryArgs

    h = LuaHarness()
    labels = encode_labels({"user": "u_9"})
    h.run(layout.enqueue(h.c, "api", [(h.tk(A), h.new_task(A, owner="al", labels=labels))]))
    h.enqueue(B)
    h.control(B, "CANCEL")
    entry = h.task(A)["entry"]
    fields = "s hn id q t owner labels e"

    def read(filter: str, *items: tuple[str, str]) -> list[object]:
        call = layout.summaries(
            h.c, "api", SummaryArgs(fields, filter), [(h.k.task(t), Expect(e)) for t, e in items]
        )
        return list(h.run(call))

    before = h.snapshot()
    rows = read("{}", (A, f"PENDING|{entry}"), (B, "CANCELLED|"), (C, "|"))
    assert rows[0] == ["PENDING", "1", A, "q", "img", "al", labels, entry]  # no history
    assert rows[1][:3] == ["CANCELLED", "2", B] and len(rows[1]) == 10  # then h1, h2
    assert rows[1][8].startswith("ENQUEUE") and rows[1][9].startswith("CANCEL")
    assert rows[2] is None  # no such task
    # not what its index says any more: another state, another entry
    assert read("{}", (A, "RUNNING|"), (A, "PENDING|1-1"), (B, "SUCCEEDED|")) == [None] * 3
    # the filters
    for f, kept in [
        ('{"states": ["PENDING"]}', [True, False]),
        ('{"queues": ["gpu"]}', [False, False]),
        ('{"type": "img", "owner": "al"}', [True, False]),
        ('{"labels": {"user": "u_9"}}', [True, False]),
        ('{"labels": {"user": "u_1"}}', [False, False]),
    ]:
        got = read(f, (A, "|"), (B, "|"))
        assert [r is not None for r in got] == kept, f
    for bad_fields, bad_filter, says in [("s hn", "{}", "q needed"), (fields, "[1", "filter")]:
        call = layout.summaries(h.c, "api", SummaryArgs(bad_fields, bad_filter), [])
        with pytest.raises(Exception, match=says):
            h.run(call)
    assert h.snapshot() == before  # it writes nothing
