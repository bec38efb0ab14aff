"""Cost accounting in the scripts (``account_attempt`` in ``fsm.lua``) on fakeredis: every
end of an attempt adds its run time, its charges and one attempt under its category, per
queue, type and owner; a deferred attempt splits its worker's time from its wait; a
refused end adds nothing; the figures read back from the task's history are the hash's.
The Lua rules (categories, charges) are the Python mirror's (``rsjobs.costs``)."""

from __future__ import annotations

import time
from importlib import resources
from typing import Any

import lupa.lua51 as lupa
import pytest

from rsjobs.costs import CATEGORY_OF, SCALE, Tally, attempt_costs, parse_charges
from rsjobs.errors import ChargeError
from rsjobs.model import TRANSITIONS
from rsjobs.store import layout
from rsjobs.store.history import entries
from rsjobs.store.layout import DeadlineArgs, DeadlineItem, DeferArgs, Ending, ResolveArgs
from tests.support.lua import LuaHarness

A, B = "a" * 32, "b" * 32


def _costs(h: LuaHarness) -> dict[str, int]:
    return {k: int(v) for k, v in h.r.hgetall(h.k.costs).items()}


def _running(h: LuaHarness, tid: str = A, **kw: Any) -> str:
    h.group()
    h.enqueue(tid, **kw)
    started = h.start(tid, h.deliver()[-1])
    assert started[0] == 1
    return str(started[5])


def _finish(h: LuaHarness, tid: str, event: str, lease: str, charges: str = "") -> Any:
    body = '"ok"' if event == "COMPLETE" else "boom"
    etype = "" if event == "COMPLETE" else "E"
    ending = Ending(event, lease, body, etype, 1, -1, 0.5, "", charges)
    return h.run(layout.finish(h.c, h.k, "worker", [(h.tk(tid), ending)]))[0]


def _derived(h: LuaHarness, tid: str) -> Tally:
    """The task's costs as rsjobs.costs reads them back from its history."""
    raw = h.r.hgetall(h.k.task(tid))
    tally = Tally()
    for a in attempt_costs(entries(raw, tid)):
        tally.add_attempt(a)
    return tally


def _dim(h: LuaHarness, dim: str) -> dict[str, dict[str, int]]:
    """The costs hash of one dimension and name, as category -> unit -> value."""
    out: dict[str, dict[str, int]] = {}
    for field, v in _costs(h).items():
        d, _, rest = field.partition("|")
        if d + "|" + rest.split("|")[0] != dim:
            continue
        _, unit, category = rest.rsplit("|", 2)
        out.setdefault(category, {})[unit] = v
    return out


def test_an_ended_attempt_adds_its_run_time_charges_and_category_per_dimension() -> None:
    h = LuaHarness()
    lease = _running(h, owner="ana")
    time.sleep(0.02)
    assert _finish(h, A, "FAIL", lease, "gpu_s:1.5,usd:0.25") == [1, "SCHEDULED"]
    h.r.zadd(h.k.scheduled, {f"q:{A}": 0})
    h.promote()
    lease = str(h.start(A, h.deliver()[-1])[5])
    assert _finish(h, A, "COMPLETE", lease, "gpu_s:2") == [1, "SUCCEEDED"]
    derived = _derived(h, A)
    failed_ms = derived.sums["failed"]["run_ms"]
    assert failed_ms >= 20
    for dim in ("queue|q", "type|img", "owner|ana"):
        assert _dim(h, dim) == {
            "failed": {"attempts": 1, "run_ms": failed_ms, "gpu_s": 1_500_000, "usd": 250_000},
            "ok": {"attempts": 1, "run_ms": derived.sums["ok"]["run_ms"], "gpu_s": 2 * SCALE},
        }, dim
    assert derived.sums == _dim(h, "queue|q")
    # the charges are on the entries that ended the attempts
    ends = [e for e in h.history(A) if e.event in ("FAIL", "COMPLETE")]
    assert [e.extra.get("charges") for e in ends] == ["gpu_s:1.5,usd:0.25", "gpu_s:2"]
    # the stats hash: the attempts' durations and the retry, per queue and type (no owner)
    stats = h.r.hgetall(h.k.stats)
    assert stats["retry:queue|q"] == stats["retry:type|img"] == "1"
    assert "retry:owner|ana" not in stats
    assert int(stats["adur:queue|q|100"]) + int(stats.get("adur:queue|q|500", 0)) == 2
    assert int(stats["adur_ms:type|img"]) == failed_ms + derived.sums["ok"]["run_ms"]
    # a task without charges stores nothing for this
    assert "xh" not in h.r.hgetall(h.k.task(A))


def test_a_refused_end_adds_nothing() -> None:
    h = LuaHarness()
    lease = _running(h)
    assert h.control(A, "CANCEL") == [1, "CANCELLED"]
    before = _costs(h)
    assert before["queue|q|attempts|cancelled"] == 1
    # the late end of the cancelled attempt: refused, its charges lost
    assert _finish(h, A, "COMPLETE", lease, "gpu_s:9") == [-2, "CANCELLED"]
    assert _costs(h) == before
    assert "gpu_s" not in str(h.r.hgetall(h.k.task(A)))


def test_a_deferred_attempt_splits_its_workers_time_from_its_wait() -> None:
    h = LuaHarness()
    lease = _running(h)
    time.sleep(0.03)
    args = DeferArgs(lease, "prov-1", "gen", 60_000, 0, "", "gpu_s:0.5")
    xkey = h.k.external("gen", "prov-1")
    assert h.run(layout.defer(h.c, h.k, "worker", h.tk(A), xkey, args)) == [1, "DEFERRED"]
    assert _costs(h) == {}  # accounted when the wait ends
    hid = h.r.hget(h.k.task(A), "xh")
    assert hid is not None and h.r.hget(h.k.task(A), f"h{hid}").startswith("DEFER ")
    time.sleep(0.03)
    res = ResolveArgs("COMPLETE", "", "", '"done"', "", 1, 0.5, "callback", "usd:1.25")
    assert h.run(layout.resolve(h.c, h.k, "api", h.tk(A), xkey, res)) == [1, "SUCCEEDED"]
    (attempt,) = attempt_costs(entries(h.r.hgetall(h.k.task(A)), A))
    assert attempt.deferred and attempt.run_ms >= 30 and attempt.wait_ms >= 30
    assert attempt.charges == {"gpu_s": 0.5, "usd": 1.25}
    assert _dim(h, "type|img") == {
        "ok": {"attempts": 1, "run_ms": attempt.run_ms, "wait_ms": attempt.wait_ms,
               "gpu_s": 500_000, "usd": 1_250_000},
    }  # fmt: skip
    assert "xh" not in h.r.hgetall(h.k.task(A))
    stats = h.r.hgetall(h.k.stats)
    assert int(stats["adur_ms:queue|q"]) == attempt.run_ms + attempt.wait_ms


def test_a_deferred_attempt_timed_out_by_the_reaper_counts_its_wait() -> None:
    h = LuaHarness()
    lease = _running(h, max_attempts=1)
    xkey = h.k.external("gen", "prov-1")
    args = DeferArgs(lease, "prov-1", "gen", 1, 0, "", "gpu_s:3")
    assert h.run(layout.defer(h.c, h.k, "worker", h.tk(A), xkey, args))[0] == 1
    time.sleep(0.01)
    call = layout.deadline(h.c, "reaper", DeadlineArgs(0), [(h.tk(A), DeadlineItem(f"q:{A}", 0.5))])
    assert h.run(call) == ["TIMED_OUT"]
    (attempt,) = attempt_costs(entries(h.r.hgetall(h.k.task(A)), A))
    assert (attempt.category, attempt.end, attempt.charges) == (
        "timed_out",
        "TIMEOUT",
        {"gpu_s": 3},
    )
    assert _dim(h, "queue|q")["timed_out"]["gpu_s"] == 3 * SCALE
    assert _dim(h, "queue|q")["timed_out"]["wait_ms"] == attempt.wait_ms


@pytest.mark.parametrize(
    "charges",
    ["usd:-1", "usd:1e3", "usd", ":1", "run_ms:1", "attempts:1", "Usd:1", "usd:1,usd:2",
     "x:1.1234567", "x:1234567890", "a" * 17 + ":1", ",".join(f"u{i}:1" for i in range(9)),
     "x:1,", "x:nan", "x:inf"],
)  # fmt: skip
def test_bad_charges_are_refused_before_anything_is_written(charges: str) -> None:
    h = LuaHarness()
    lease = _running(h)
    before = h.snapshot()
    with pytest.raises(Exception, match="invalid charges"):
        _finish(h, A, "COMPLETE", lease, charges)
    assert h.snapshot() == before
    with pytest.raises(ChargeError):
        parse_charges(charges)


def _lua_fsm() -> Any:
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    src = (resources.files("rsjobs") / "fsm.lua").read_text(encoding="utf-8")
    lua.execute(
        "KEYS = {'e','s','c','d'}; ARGV = {'test','1000','0','workers'}\n"
        "redis = {call = function() return {'1700000000', '0'} end}\n"
        "unpack = unpack or table.unpack\n"
    )
    return lua.execute(f"return function()\n{src}\nreturn COST_CATEGORY, parse_charges\nend")()


def test_the_lua_categories_are_the_python_mirror_and_cover_every_end() -> None:
    categories, _ = _lua_fsm()
    assert dict(categories) == CATEGORY_OF
    ends = {
        event
        for state in ("RUNNING", "DEFERRED")
        for event, targets in TRANSITIONS[state].items()
        if targets != {state}
    }
    assert ends - {"DEFER"} == set(CATEGORY_OF)


@pytest.mark.parametrize(
    "text",
    ["", "gpu_s:1.5", "usd:0.000001,gpu_s:999999999.999999", "a:0", "b:007.5", "x:1.",
     "usd:-1", "usd:1e3", "x:1.1234567", "Usd:1", "x:1,x:2", "wait_ms:1", "x:1,"],
)  # fmt: skip
def test_the_lua_charges_rules_are_the_python_ones(text: str) -> None:
    _, parse = _lua_fsm()
    lua_out, _why = parse(text)
    try:
        py = parse_charges(text)
    except ChargeError:
        py = None
    assert (None if lua_out is None else dict(lua_out)) == py
