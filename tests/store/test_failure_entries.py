"""finish.lua on fakeredis: each failed attempt's FAIL entry keeps its exception type and
bounded traceback; the task shows the last one while its error stands."""

from __future__ import annotations

import pytest
import redis

from rsjobs.store import layout
from rsjobs.store.history import last_traceback
from rsjobs.store.layout import Ending
from tests.support.lua import LuaHarness

A = "a" * 32
TB = 'Traceback (most recent call last):\n  File "h.py", line 3, in run\nValueError: 50% | off\n'


def _attempt(h: LuaHarness, event: str, body: str, etype: str, tb: str) -> list[object]:
    (entry,) = h.deliver()
    lease = h.start(A, entry)[5]
    ending = Ending(event, lease, body, etype, 1, 0, 0.5, tb)
    result: list[object] = h.run(layout.finish(h.c, h.k, "worker", [(h.tk(A), ending)]))[0]
    h.promote()
    return result


def test_every_failed_attempt_keeps_its_own_traceback() -> None:
    h = LuaHarness()
    h.group()
    h.enqueue(A, max_attempts=4)
    assert _attempt(h, "FAIL", "ValueError: 1", "ValueError", TB + "one") == [1, "SCHEDULED"]
    assert _attempt(h, "FAIL", "KeyError: 2", "KeyError", TB + "two") == [1, "SCHEDULED"]
    assert _attempt(h, "TIMEOUT", "too slow", "TimeoutError", "") == [1, "SCHEDULED"]
    fails = [e for e in h.history(A) if e.event in ("FAIL", "TIMEOUT")]
    assert [e.extra.get("traceback") for e in fails] == [TB + "one", TB + "two", None]
    assert [e.extra.get("error_type") for e in fails] == ["ValueError", "KeyError", None]
    # the last failed attempt timed out: it left no traceback, and the task says so
    assert h.record(A).traceback == ""
    assert _attempt(h, "FAIL", "KeyError: 4", "KeyError", TB + "four") == [1, "FAILED"]
    assert h.record(A).traceback == TB + "four"
    assert last_traceback(h.r.hgetall(h.k.task(A))) == TB + "four"


def test_a_success_after_failures_shows_no_traceback_but_keeps_them_in_history() -> None:
    h = LuaHarness()
    h.group()
    h.enqueue(A, max_attempts=3)
    _attempt(h, "FAIL", "ValueError: 1", "ValueError", TB)
    assert h.record(A).traceback == TB  # SCHEDULED for a retry, its error stands
    _attempt(h, "COMPLETE", '"ok"', "", "")
    assert h.record(A).traceback == "" and h.record(A).error == ""
    assert [e.extra.get("traceback") for e in h.history(A) if e.event == "FAIL"] == [TB]


def test_a_traceback_over_the_bound_is_refused_before_any_write() -> None:
    h = LuaHarness()
    h.group()
    h.enqueue(A)
    (entry,) = h.deliver()
    lease = h.start(A, entry)[5]
    before = h.snapshot()
    ending = Ending("FAIL", lease, "x", "E", 1, 0, 0.5, "x" * 8193)
    with pytest.raises(redis.ResponseError, match="rsjobs: invalid traceback length"):
        h.run(layout.finish(h.c, h.k, "worker", [(h.tk(A), ending)]))
    assert h.snapshot() == before
