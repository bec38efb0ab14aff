"""Where a task's Redis time goes inside the state machine: inclusive CPU time per
``fsm.lua`` helper, per task, for enqueue (one task per call, as a client submits one by
one) and for start + finish (``--batch`` tasks per call, as a worker runs them).

A profiling copy of the function library (never the shipped one) wraps each of the larger
helpers of ``fsm.lua`` in an ``os.clock()`` timer (the server's CPU time, microsecond
resolution) and registers enqueue, start and finish beside a report function. Times are
inclusive (a helper's includes the helpers and the ``redis.call``\\ s it makes) and carry
the timer's own cost (about half a microsecond per wrapped call: the smallest helpers are
left unwrapped for it), so they rank where the time goes rather than add up to the total;
``@enqueue`` / ``@start`` / ``@finish`` are whole calls.

    .venv-bench/bin/python -m bench.lua_profile [--tasks 4000] [--batch 32] [--top 20]
"""

from __future__ import annotations

import argparse
import re
import uuid
from typing import Any

import redis

from bench.redis_server import RedisServer
from rsjobs.settings import Settings
from rsjobs.store import layout
from rsjobs.store import scripts as lua
from rsjobs.store.keys import GROUP, Keys
from rsjobs.store.layout import Common, Ending, Entry, NewTask, Packed, StartArgs, task_options

#: helpers left unwrapped: called many times per task for little work each (a timer
#: around them would cost more than they do), or the call's own frame
UNWRAPPED = frozenset(
    [
        "begin_call",
        "now_ms",
        "finish_call",
        "fld",
        "count",
        "cost",
        "esc",
        "sub_table",
        "task_keys",
        "allowed",
        "implied",
        "is_count",
        "is_number",
        "is_entry_id",
        "member",
        "priority_of",
        "load",
        "bad_arg",
        "layout",
        "is_level_key",
        "level_of",
        "fields_of",
        "hook_states",
        "running_field",
        "is_task_id",
        "list_len",
        "with_note",
        "elided",
        "tags_of",
        "dim_fields",
        "unit_fields",
        "shared_dims",
        "cost_dims",
    ]
)

_TIMER = """
local PROF = {}
local function prof(name, f)
  return function(...)
    local t0 = os.clock()
    local r = {f(...)}
    local e = PROF[name]
    if not e then e = {0, 0}; PROF[name] = e end
    e[1] = e[1] + os.clock() - t0
    e[2] = e[2] + 1
    return unpack(r)
  end
end
"""

_SCRIPT = """
redis.register_function{{function_name = 'prof_{name}', callback = (function()
local function main()
{body}
end
return function(keys, argv)
  begin_call(keys, argv)
  local t0 = os.clock()
  local r = finish_call(main)
  local e = PROF['@{name}'] or {{0, 0}}
  PROF['@{name}'] = e
  e[1] = e[1] + os.clock() - t0
  e[2] = e[2] + 1
  return r
end
end)()}}
"""

_REPORT = """
redis.register_function('prof_report', function(keys, argv)
  local out = {}
  for k, v in pairs(PROF) do out[#out + 1] = {k, tostring(v[1]), v[2]} end
  PROF = {}
  return out
end)
"""


def profiling_library() -> str:
    """The library with the larger ``fsm.lua`` helpers timed (see the module docstring)."""
    fsm = lua._prelude("fsm")
    names = re.findall(r"^local function ([A-Za-z_0-9]+)", fsm, re.M)
    timers = _TIMER + "".join(f"{n} = prof('{n}', {n})\n" for n in names if n not in UNWRAPPED)
    at = fsm.index("local function begin_call(")  # (the helpers are all defined above it)
    text = fsm[:at] + timers + fsm[at:]
    for name in ("enqueue", "start", "finish"):
        text += _SCRIPT.format(name=name, body=lua._text(f"scripts/{name}.lua"))
    return "#!lua name=rsjobs_profile\n" + text + _REPORT


def _run(r: redis.Redis, call: Packed) -> Any:
    return r.execute_command("FCALL", f"prof_{call.script}", len(call.keys), *call.keys, *call.argv)


def _report(r: redis.Redis) -> list[tuple[str, float, int]]:
    return [(n, float(s), int(c)) for n, s, c in r.execute_command("FCALL", "prof_report", 0)]


def profile(url: str, tasks: int, batch: int) -> dict[str, list[tuple[str, float, int]]]:
    """Enqueue ``tasks`` one by one, then start and finish them ``batch`` at a time; the
    timers of each phase: (helper, seconds, calls)."""
    r = redis.Redis.from_url(url, decode_responses=True)
    r.execute_command("FUNCTION", "LOAD", "REPLACE", profiling_library())
    settings = Settings(namespace="profile")
    k = Keys(settings.namespace)
    c = Common.of(k, settings.events_maxlen, settings.retention_ms)
    options = task_options(max_attempts=3, backoff_base_ms=1000, backoff_max_ms=300_000)
    qkey = k.queue("q")
    r.xgroup_create(qkey, GROUP, id="0", mkstream=True)  # (a client's queue_add makes it)
    _report(r)
    for _ in range(tasks):
        tid = uuid.uuid4().hex
        task = NewTask(tid, "noop", "q", '{"i":1}', options)
        _run(r, layout.enqueue(c, "api", [(k.task_keys(tid, "q"), task)]))
    enqueued = _report(r)
    while rows := r.xreadgroup(GROUP, "c1", {qkey: ">"}, count=batch):
        entries = rows[0][1]
        items = [(k.task_keys(f["id"], "q"), Entry(eid)) for eid, f in entries]
        started = _run(r, layout.start(c, k, "worker", StartArgs("c1", 30000, "n1", "q"), items))
        ends = [
            (k.task_keys(f["id"], "q"), Ending("COMPLETE", s[5], "null", "", 0, -1, 0.5, "", ""))
            for (_, f), s in zip(entries, started, strict=True)
        ]
        _run(r, layout.finish(c, k, "worker", ends))
    processed = _report(r)
    r.close()
    return {"enqueue, one per call": enqueued, f"start + finish, {batch} per call": processed}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=4000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--top", type=int, default=20)
    a = p.parse_args()
    server = RedisServer()
    server.start()
    try:
        phases = profile(server.url, a.tasks, a.batch)
    finally:
        server.stop()
    for phase, rows in phases.items():
        print(f"== {phase}: inclusive µs per task (calls per task)")
        for name, seconds, calls in sorted(rows, key=lambda row: -row[1])[: a.top]:
            print(f"   {name:22s} {seconds * 1e6 / a.tasks:8.2f}  ({calls / a.tasks:.2f})")


if __name__ == "__main__":
    main()
