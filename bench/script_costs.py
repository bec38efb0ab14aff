"""Redis time per task of rsjobs's transition scripts, and what each part of them costs.

Runs the real scripts (enqueue in calls of 250 tasks; start and finish in calls of
``--batch`` deliveries, as a worker does) on a throwaway loopback Redis with its default
configuration, and reports Δ ``INFO commandstats`` EVALSHA microseconds / task: the time
Redis spent inside the scripts, including the commands they call. Variants with one part
of ``fsm.lua`` taken out show what that part costs (they are measurements, not options:
rsjobs always does all of it). Medians over ``--rounds``, variants interleaved, and the
fastest round of each (on a machine shared with other load, the least disturbed one), and
Redis's CPU time while the tasks are processed (``INFO cpu``, user + system, XREADGROUP
and socket I/O included): unlike EVALSHA's wall-clock time it does not count the time
Redis waited for a core that other processes held.

    .venv-bench/bin/python -m bench.script_costs [--tasks 4000] [--rounds 5] [--batch 32]
"""

from __future__ import annotations

import argparse
import statistics
import uuid
from collections.abc import Callable
from typing import Any

import redis

from bench.redis_server import RedisServer
from rsjobs.settings import Settings
from rsjobs.store import layout
from rsjobs.store.keys import GROUP, Keys
from rsjobs.store.layout import Common, Ending, Entry, NewTask, Packed, StartArgs, task_options
from rsjobs.store.scripts import script_source

_EVENTS_XADD = (
    "redis.call('XADD', EVENTS_KEY, 'MAXLEN', '~', EVENTS_MAX, '*', 'id', t.id, 'hid', hid)"
)

# name -> how the variant changes a script's source ("" = unchanged)
VARIANTS: dict[str, Callable[[str], str]] = {
    "all of it": lambda src: src,
    "without the events stream": lambda src: _cut(src, _EVENTS_XADD, ""),
    "without the task history": lambda src: _cut(src, "f[#f + 1] = 'h' .. n; f[#f + 1] = v", ""),
    "without the entry's XDEL": lambda src: _cut(
        src, "redis.call('XDEL', qkey, unpack(entries))", ""
    ),
    "without retention (PEXPIRE)": lambda src: _cut(
        src, "    retain(t)\n  end\n  return hid", "  end\n  return hid"
    ),
    "without the duration histogram": lambda src: _cut(
        src, "if t.started then observe_duration(t, to) end", ""
    ),
    "without the list indexes": lambda src: _cut(src, "    index_move(t, from, to)\n", ""),
    "without the cost accounting": lambda src: _cut(
        src, "    extra = account_attempt(t, event, from, to, extra)\n", ""
    ),
    "all of it, 2 charges per attempt": lambda src: src,
}
#: the charges each finish sends in a variant (none in the others)
CHARGES = {"all of it, 2 charges per attempt": "gpu_s:1.5,usd:0.02"}


def _cut(src: str, old: str, new: str) -> str:
    if old not in src:
        raise SystemExit(f"script_costs: fsm.lua changed; update the variant cutting {old!r}")
    return src.replace(old, new)


def _run(r: redis.Redis, shas: dict[str, str], call: Packed) -> Any:
    return r.evalsha(shas[call.script], len(call.keys), *call.keys, *call.argv)


def _enqueue(r: redis.Redis, shas: dict[str, str], k: Keys, c: Common, n: int) -> None:
    options = task_options(max_attempts=3, backoff_base_ms=1000, backoff_max_ms=300_000)
    for _ in range(0, n, 250):
        tasks = []
        for _ in range(250):
            tid = uuid.uuid4().hex
            tasks.append((k.task_keys(tid, "q"), NewTask(tid, "noop", "q", '{"i":1}', options)))
        _run(r, shas, layout.enqueue(c, "api", tasks))


def _process(
    r: redis.Redis, shas: dict[str, str], k: Keys, c: Common, batch: int, charges: str = ""
) -> int:
    qkey, done = k.queue("q"), 0
    while rows := r.xreadgroup(GROUP, "c1", {qkey: ">"}, count=batch):
        entries = rows[0][1]
        items = [(k.task_keys(f["id"], "q"), Entry(eid)) for eid, f in entries]
        started = _run(
            r, shas, layout.start(c, k, "worker", StartArgs("c1", 30000, "n1", "q"), items)
        )
        ends = [
            (
                k.task_keys(f["id"], "q"),
                Ending("COMPLETE", s[5], "null", "", 0, -1, 0.5, "", charges),
            )
            for (_, f), s in zip(entries, started, strict=True)
        ]
        finished = _run(r, shas, layout.finish(c, k, "worker", ends))
        done += sum(1 for f in finished if f[0] == 1)
    return done


def _evalsha_us(r: redis.Redis) -> float:
    return float(r.info("commandstats")["cmdstat_evalsha"]["usec"])


def _cpu_us(r: redis.Redis) -> float:
    cpu = r.info("cpu")
    return (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])) * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=4000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--batch", type=int, default=32)
    a = p.parse_args()
    n = a.tasks // 250 * 250
    server = RedisServer()
    server.start()
    try:
        r = redis.Redis.from_url(server.url, decode_responses=True)
        settings = Settings(namespace="cost")
        k = Keys(settings.namespace)
        c = Common.of(k, settings.events_maxlen, settings.retention_ms)
        enq: dict[str, list[float]] = {v: [] for v in VARIANTS}
        proc: dict[str, list[float]] = {v: [] for v in VARIANTS}
        cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for _ in range(a.rounds):
            for name, change in VARIANTS.items():
                r.flushall()
                r.script_flush()
                shas = {
                    s: r.script_load(change(script_source(s)))
                    for s in ("enqueue", "start", "finish")
                }
                r.config_resetstat()
                _enqueue(r, shas, k, c, n)
                enq[name].append(_evalsha_us(r) / n)
                r.xgroup_create(k.queue("q"), GROUP, id="0")
                r.config_resetstat()
                before = _cpu_us(r)
                done = _process(r, shas, k, c, a.batch, CHARGES.get(name, ""))
                cpu[name].append((_cpu_us(r) - before) / n)
                if done != n:
                    raise SystemExit(f"script_costs: {done} of {n} tasks finished ({name})")
                proc[name].append(_evalsha_us(r) / n)
        print(
            f"Redis {server.version()}, default config; {n} tasks x {a.rounds} rounds; "
            f"start/finish in calls of {a.batch}; EVALSHA µs per task (median; fastest round)"
        )
        print(
            f"| {'variant':40s} | enqueue | start + finish | enqueue, min | start + finish, min "
            "| Redis CPU, processing |"
        )
        print(
            f"|{'-' * 42}|--------:|---------------:|-------------:|--------------------:"
            "|----------------------:|"
        )
        for name in VARIANTS:
            e, s = statistics.median(enq[name]), statistics.median(proc[name])
            print(
                f"| {name:40s} | {e:7.1f} | {s:14.1f} | {min(enq[name]):12.1f} | "
                f"{min(proc[name]):19.1f} | {statistics.median(cpu[name]):21.1f} |"
            )
        r.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
