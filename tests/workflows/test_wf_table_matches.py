"""The workflow table in wf.lua and the Python mirror in rsjobs.workflows.model agree."""

from __future__ import annotations

from importlib import resources

import lupa.lua51 as lupa

from rsjobs.workflows.model import TERMINAL, TRANSITIONS, WfEvent, WfStatus


def _lua_table() -> tuple[dict[str, dict[str, set[str]]], set[str]]:
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    pkg = resources.files("rsjobs")
    src = (pkg / "fsm.lua").read_text(encoding="utf-8") + "\n"
    src += (pkg / "wf.lua").read_text(encoding="utf-8")
    lua.execute(
        "KEYS = {'e','s','c','d','w','h','t','a','o','x','i'}\n"
        "ARGV = {'test','1000','0','workers','chan','1000'}\n"
        "redis = {call = function() return {'1700000000', '0'} end}\n"
        "unpack = unpack or table.unpack\n"
    )
    fn = lua.execute(f"return function()\n{src}\nreturn WF_TRANSITIONS, WF_TERMINAL\nend")
    trans, term = fn()
    table: dict[str, dict[str, set[str]]] = {}
    for key in trans:
        status, event, target = str(key).split("|")
        table.setdefault(status, {}).setdefault(event, set()).add(target)
    for status in term:
        table.setdefault(str(status), {})
    return table, {str(s) for s in term}


def test_lua_workflow_table_equals_python_table() -> None:
    table, terminal = _lua_table()
    assert terminal == set(TERMINAL)
    assert table == {s: {e: set(t) for e, t in row.items()} for s, row in TRANSITIONS.items()}


def test_enums_cover_the_table() -> None:
    statuses = {s for s in TRANSITIONS if s} | {
        t for row in TRANSITIONS.values() for ts in row.values() for t in ts
    }
    events = {e for row in TRANSITIONS.values() for e in row}
    assert statuses == set(WfStatus)
    assert events == set(WfEvent)
    for status in TERMINAL:
        assert TRANSITIONS[status] == {}
