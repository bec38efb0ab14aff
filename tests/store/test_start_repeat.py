"""A repeated START from the consumer that started the task, for the same entry and under
the same nonce (its first reply was lost), answers as the first did and writes nothing;
any other START of a RUNNING task is still refused and recorded (fakeredis)."""

from __future__ import annotations

from tests.support.lua import LuaHarness

A = "a" * 32


def test_a_lost_start_reply_is_answered_again_writing_nothing() -> None:
    h = LuaHarness()
    h.group()
    h.enqueue(A, timeout_ms=60_000)
    (entry,) = h.deliver()
    first = h.start(A, entry, nonce="n1")
    assert first[0] == 1 and first[4] == 1 and first[5] == "1:n1" and first[6] > 0
    before = h.snapshot()
    again = h.start(A, entry, nonce="n1")  # the worker never saw `first`
    assert list(again) == list(first)
    assert h.snapshot() == before
    assert [e.event for e in h.history(A)] == ["ENQUEUE", "START"]


def test_a_start_by_anyone_else_is_still_refused() -> None:
    h = LuaHarness()
    h.group()
    h.enqueue(A)
    (entry,) = h.deliver()
    assert h.start(A, entry, nonce="n1")[0] == 1
    assert list(h.start(A, entry, nonce="n2")) == [-2, "RUNNING"]  # another worker's nonce
    assert list(h.start(A, entry, nonce="n1", consumer="w2")) == [-2, "RUNNING"]
    assert list(h.start(A, "9-9", nonce="n1")) == [-2, "RUNNING"]  # another entry
    refused = [e for e in h.history(A) if e.rejected]
    assert [(e.event, e.repeats) for e in refused] == [("START", 2)]
    assert h.task(A)["lease"] == "1:n1"  # the holder's lease is untouched
