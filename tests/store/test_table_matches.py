"""The table in fsm.lua and the Python mirror in rsjobs.model are the same table."""

from __future__ import annotations

from importlib import resources

import lupa.lua51 as lupa

from rsjobs.model import TERMINAL, TRANSITIONS


def _lua_table() -> tuple[dict[str, dict[str, set[str]]], set[str]]:
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    src = (resources.files("rsjobs") / "fsm.lua").read_text(encoding="utf-8")
    # run the library with stand-ins for the Redis globals, then hand its tables back
    lua.execute(
        "KEYS = {'e','s','c','d'}; ARGV = {'test','1000','0','workers'}\n"
        "redis = {call = function() return {'1700000000', '0'} end}\n"
        "unpack = unpack or table.unpack\n"
    )
    fn = lua.execute(f"return function()\n{src}\nreturn TRANSITIONS, TERMINAL\nend")
    trans, term = fn()
    table: dict[str, dict[str, set[str]]] = {}
    for key in trans:
        state, event, target = str(key).split("|")
        table.setdefault(state, {}).setdefault(event, set()).add(target)
    for state in term:
        table.setdefault(str(state), {})
    return table, {str(s) for s in term}


def test_lua_table_equals_python_table() -> None:
    table, terminal = _lua_table()
    assert terminal == set(TERMINAL)
    assert table == {s: {e: set(t) for e, t in row.items()} for s, row in TRANSITIONS.items()}


def _lua_constants() -> tuple[str, int]:
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    src = (resources.files("rsjobs") / "fsm.lua").read_text(encoding="utf-8")
    lua.execute(
        "KEYS = {'e','s','c','d'}; ARGV = {'test','1000','0','workers'}\n"
        "redis = {call = function() return {'1700000000', '0'} end}\n"
        "unpack = unpack or table.unpack\n"
    )
    fn = lua.execute(f"return function()\n{src}\nreturn WAITING_CONSUMER, MAX_PRIORITY\nend")
    consumer, top = fn()
    return str(consumer), int(top)


def test_the_scripts_and_the_store_name_the_same_waiting_consumer_and_priorities() -> None:
    """The consumer that holds parked tasks' entries (the reaper passes it over) and the
    highest priority are one value for both languages."""
    from rsjobs.store.keys import MAX_PRIORITY, PRIORITIES, WAITING_CONSUMER

    assert _lua_constants() == (WAITING_CONSUMER, MAX_PRIORITY)
    assert list(PRIORITIES) == list(range(MAX_PRIORITY + 1))
