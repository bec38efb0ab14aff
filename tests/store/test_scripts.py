"""Individual transition scripts on fakeredis: dedup, fencing, backoff, retention, events."""

from __future__ import annotations

from tests.support.lua import LuaHarness

A, B = "a" * 32, "b" * 32


def test_dedup_returns_first_task_and_writes_nothing() -> None:
    h = LuaHarness()
    assert h.enqueue(A, dedup="job-1") == [A, "PENDING", 0]
    keys_before = sorted(h.r.keys("*"))
    assert h.enqueue(B, dedup="job-1") == [A, "", 1]
    assert sorted(h.r.keys("*")) == keys_before
    assert h.r.xlen(h.k.queue("q")) == 1


def test_same_id_twice_is_idempotent() -> None:
    h = LuaHarness()
    h.enqueue(A)
    assert h.enqueue(A) == [A, "PENDING", 1]
    assert len(h.history(A)) == 1


def test_late_completion_from_an_old_lease_is_refused_and_recorded() -> None:
    h = LuaHarness()
    h.group()
    h.enqueue(A)
    first = h.start(A, h.deliver()[0], nonce="zombie")
    lease1 = first[5]
    assert list(h.control(A, "PAUSE")) == [1, "PAUSED"]
    assert list(h.control(A, "RESUME")) == [1, "PENDING"]
    second = h.start(A, h.deliver()[0], nonce="owner")
    lease2 = second[5]
    assert second[4] == 2 and lease1 != lease2
    assert list(h.finish(A, "COMPLETE", lease1, body='"zombie"')) == [-3, "RUNNING"]
    assert list(h.finish(A, "COMPLETE", lease2, body='"owner"')) == [1, "SUCCEEDED"]
    assert list(h.finish(A, "COMPLETE", lease2, body='"owner"')) == [2, "SUCCEEDED"]
    assert list(h.finish(A, "COMPLETE", lease1, body='"zombie"')) == [-2, "SUCCEEDED"]
    assert h.task(A)["result"] == '"owner"'
    refused = [e for e in h.history(A) if e.rejected]
    assert [(e.event, e.to_state) for e in refused] == [
        ("COMPLETE", "RUNNING"),
        ("COMPLETE", "SUCCEEDED"),
    ]
    assert "lease lost" in refused[0].message


def test_fail_backs_off_exponentially_then_fails() -> None:
    h = LuaHarness()
    h.group()
    h.enqueue(A, payload="{}", backoff=1000, backoff_max=3000)
    delays = []
    for attempt in (1, 2, 3):
        r = h.start(A, h.deliver()[0], nonce=f"n{attempt}")
        assert r[0] == 1, r
        code, state = h.finish(A, "FAIL", r[5], body="boom")
        if attempt < 3:
            assert state == "SCHEDULED"
            t = h.task(A)
            delays.append(int(t["due_at"]) - int(t["updated_at"]))
            h.r.zadd(h.k.scheduled, {f"q:{A}": 0})
            h.r.hset(h.k.task(A), "due_at", 0)
            assert h.promote()[0] == 1
        else:
            assert state == "FAILED"
    # equal jitter with jitter=0.5: 3/4 of base * 2^(n-1)
    assert delays == [750, 1500]
    t = h.task(A)
    assert t["failures"] == "3" and "attempts exhausted (3/3)" in h.history(A)[-1].message


def test_a_backoff_of_zero_is_kept_not_taken_for_the_default() -> None:
    """A task asking for no backoff retries at once: the options leave a 0 out, and a
    missing backoff field means the default (1 s), so the 0 must be stored."""
    h = LuaHarness()
    h.group()
    h.enqueue(A, backoff=0)
    assert (h.record(A).backoff_base_ms, h.record(A).backoff_max_ms) == (0, 0)
    r = h.start(A, h.deliver()[0])
    assert h.finish(A, "FAIL", r[5], body="boom")[1] == "SCHEDULED"
    assert h.history(A)[-1].extra["retry_in_ms"] == "0"
    h.enqueue(B, backoff=1000, backoff_max=300_000)  # the defaults: not stored
    assert "backoff_base_ms" not in h.task(B) and "backoff_max_ms" not in h.task(B)


def test_success_after_a_failure_clears_the_error_but_history_keeps_it() -> None:
    h = LuaHarness()
    h.group()
    h.enqueue(A, backoff=0)
    r = h.start(A, h.deliver()[0], nonce="n1")
    assert h.finish(A, "FAIL", r[5], body="boom")[1] == "SCHEDULED"
    assert h.task(A)["error"] == "boom" and h.task(A)["error_type"] == "E"
    h.r.zadd(h.k.scheduled, {f"q:{A}": 0})
    h.r.hset(h.k.task(A), "due_at", 0)
    assert h.promote()[0] == 1
    r = h.start(A, h.deliver()[0], nonce="n2")
    assert list(h.finish(A, "COMPLETE", r[5], body='"ok"')) == [1, "SUCCEEDED"]
    t = h.task(A)
    assert "error" not in t and "error_type" not in t and t["failures"] == "1"
    assert [e.message for e in h.history(A) if e.event == "FAIL"] == ["boom"]


def test_non_retryable_failure_skips_retries() -> None:
    h = LuaHarness()
    h.group()
    h.enqueue(A, max_attempts=5)
    r = h.start(A, h.deliver()[0])
    assert list(h.finish(A, "FAIL", r[5], body="bad", retryable=False)) == [1, "FAILED"]
    assert h.history(A)[-1].message.startswith("non-retryable")


def test_cancel_is_idempotent_and_terminal_accepts_nothing() -> None:
    h = LuaHarness()
    h.group()
    h.enqueue(A)
    assert list(h.control(A, "CANCEL")) == [1, "CANCELLED"]
    assert list(h.control(A, "CANCEL")) == [0, "CANCELLED"]
    assert list(h.control(A, "RESUME")) == [-2, "CANCELLED"]
    assert h.r.xlen(h.k.queue("q")) == 0
    assert h.task(A)["state"] == "CANCELLED"


def test_cancel_of_running_task_notifies_worker_and_frees_entry() -> None:
    h = LuaHarness()
    h.group()
    h.enqueue(A)
    pubsub = h.r.pubsub()
    pubsub.subscribe(h.k.control)
    pubsub.get_message(timeout=0.1)
    entry = h.deliver()[0]
    r = h.start(A, entry)
    assert list(h.control(A, "CANCEL")) == [1, "CANCELLED"]
    msg = pubsub.get_message(timeout=1)
    assert msg is not None and msg["data"] == f"CANCEL {A}"
    assert h.r.xpending(h.k.queue("q"), "workers")["pending"] == 0
    assert h.heartbeat(A, r[5], entry) == "CANCELLED"
    assert list(h.finish(A, "COMPLETE", r[5])) == [-2, "CANCELLED"]


def test_finished_tasks_expire_after_retention() -> None:
    h = LuaHarness(retention_ms=60_000)
    h.group()
    h.enqueue(A, dedup="d")
    r = h.start(A, h.deliver()[0])
    assert r[7] == "d"  # START hands the worker the dedup key to pass back
    h.finish(A, "COMPLETE", r[5], body="1", dedup=r[7])
    for key in (h.k.task(A), h.k.dedup("d")):  # the hash holds the history
        ttl = h.r.pttl(key)
        assert 0 < ttl <= 60_000, key
    # a refusal after the end (an entry of the hash) keeps the expiry
    assert list(h.control(A, "CANCEL")) == [-2, "SUCCEEDED"]
    assert list(h.control(A, "CANCEL")) == [-2, "SUCCEEDED"]
    assert 0 < h.r.pttl(h.k.task(A)) <= 60_000
    assert [e.event for e in h.history(A)][-1] == "CANCEL"
    assert not h.r.exists(h.k.history(A))


def test_events_stream_mirrors_history() -> None:
    h = LuaHarness()
    h.group()
    h.enqueue(A)
    r = h.start(A, h.deliver()[0])
    h.finish(A, "COMPLETE", "bad-lease")
    h.finish(A, "COMPLETE", r[5])
    events = h.r.xrange(h.k.events)
    hist = h.history(A)
    # every entry but the first (ENQUEUE: no one watches a task that did not exist) is told
    # by task id and entry id; readers read the entry from the task
    assert [e.event for e in hist] == ["ENQUEUE", "START", "COMPLETE", "COMPLETE"]
    assert [f for _, f in events] == [{"id": A, "hid": e.id} for e in hist[1:]]
    assert hist[2].rejected and not hist[3].rejected


def test_heartbeat_renews_lease_and_progress_is_recorded() -> None:
    h = LuaHarness()
    h.group()
    h.enqueue(A)
    entry = h.deliver()[0]
    r = h.start(A, entry, lease_ms=1000)
    before = int(h.task(A)["lease_expires_at"])
    assert h.heartbeat(A, r[5], entry, progress="42") == "OK"
    t = h.task(A)
    assert int(t["lease_expires_at"]) >= before and t["progress"] == "42"
    assert h.history(A)[-1].event == "PROGRESS" and h.history(A)[-1].extra["p"] == "42"
    assert h.heartbeat(A, "9:other", entry) == "LOST"
