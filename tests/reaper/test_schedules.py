"""Recurring schedules: tick arithmetic, exactly one task per tick however many callers
fire it, the catch-up policy, bad input, and three reaper processes (one SIGKILLed)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from rsjobs import Client
from rsjobs.errors import ConfigError
from rsjobs.schedules import Schedule, missed_ticks, next_tick
from rsjobs.schemas import EnqueueRequest
from tests.cli.support import rsjobs
from tests.support.processes import stop_process
from tests.support.reaper import spawn_reaper

REQ = EnqueueRequest(type="tick")


def test_every_ms_ticks_count_from_the_anchor() -> None:
    s = Schedule(name="s", every_ms=1000, anchor_ms=10_000, task=REQ)
    assert next_tick(s, 5_000) == 10_000
    assert next_tick(s, 10_000) == 11_000
    assert next_tick(s, 10_999) == 11_000
    assert missed_ticks(s, 11_000, 15_500) == 4  # 12, 13, 14, 15


def test_cron_ticks_are_utc_minutes() -> None:
    s = Schedule(name="s", cron="*/5 * * * *", task=REQ)
    t0 = 1_767_225_660_000  # 2026-01-01 00:01:00 UTC
    assert next_tick(s, t0) == 1_767_225_900_000  # 00:05
    assert missed_ticks(s, 1_767_225_900_000, 1_767_225_900_000 + 3_600_000) == 12


@pytest.mark.parametrize(
    "kw",
    [
        {"cron": "not cron"},
        {"cron": "61 * * * *"},
        {"cron": "* * * * *", "every_ms": 1000},
        {},
        {"every_ms": 10},
        {"every_ms": 1000, "name": "bad name!"},
        {"every_ms": 1000, "type": ""},
        {"every_ms": 1000, "queue": "no/slash"},
    ],
)
async def test_a_bad_schedule_is_refused_and_writes_nothing(
    client: Client, kw: dict[str, object]
) -> None:
    args: dict[str, object] = {"type": "tick"}
    args.update(kw)
    name = str(args.pop("name", "s"))
    with pytest.raises(ConfigError):
        await client.schedule(name, **args)  # type: ignore[arg-type]
    assert await client.redis.keys("*") == []


async def test_a_tick_fired_by_three_callers_at_once_enqueues_one_task(
    client: Client, redis_url: str
) -> None:
    first = await client.schedule("beat", type="tick", payload={"a": 1}, every_ms=1000)
    stores = [Client.from_url(redis_url, namespace="t") for _ in range(3)]
    try:
        # the callers' clock is an argument: they fire at the tick's own millisecond
        fired = await asyncio.gather(*(c.store.schedules.fire_due("reaper", first) for c in stores))
        assert sorted(fired) == [0, 0, 1]
        (info,) = await client.schedules()
        assert (info.fired, info.skipped, info.next_at) == (1, 0, first + 1000)
        task = await client.get(info.last_task)
        assert (task.type, task.payload, task.state) == ("tick", {"a": 1}, "PENDING")
        (entry,) = await client.history(info.last_task)
        assert entry.message == f"schedule beat tick {first}"
    finally:
        for c in stores:
            await c.close()


async def test_missed_ticks_run_once_on_catch_up_and_the_rest_are_counted(
    client: Client,
) -> None:
    await client.schedule("late", type="tick", every_ms=1000)
    now = await client.store.reaper.now_ms()
    # as if no reaper ran for 5.5 s past the tick
    await client.redis.zadd(client.keys.schedules_due, {"late": now - 5500})
    assert await client.store.schedules.fire_due("reaper", now) == 1
    assert await client.store.schedules.fire_due("reaper", now) == 0
    (info,) = await client.schedules()
    assert (info.fired, info.skipped) == (1, 5)
    assert now < info.next_at <= now + 1000
    assert await client.redis.xlen(client.keys.queue("default")) == 1


async def test_a_schedules_tasks_keep_its_priority(client: Client) -> None:
    """A recurring task's priority (rsjobs.limits): every tick's task has it, on its level's
    stream; a bad one is refused and writes nothing."""
    with pytest.raises(ConfigError, match="priority"):
        await client.schedule("urgent", type="tick", every_ms=1000, priority=11)
    assert await client.redis.keys("*") == []
    await client.schedule("urgent", type="tick", every_ms=1000, priority=6)
    now = await client.store.reaper.now_ms()
    await client.redis.zadd(client.keys.schedules_due, {"urgent": now - 10})
    assert await client.store.schedules.fire_due("reaper", now) == 1
    (info,) = await client.schedules()
    assert (await client.get(info.last_task)).priority == 6
    assert await client.redis.xlen(client.keys.queue("default", 6)) == 1


async def test_a_removed_schedule_fires_no_more(client: Client) -> None:
    await client.schedule("gone", type="tick", every_ms=1000)
    assert await client.unschedule("gone")
    assert not await client.unschedule("gone")
    now = await client.store.reaper.now_ms()
    assert await client.store.schedules.fire_due("reaper", now + 5000) == 0
    assert await client.schedules() == []


#: how many ticks (one a second, the shortest period) the three reapers run for;
#: ``make schedules-minute`` runs 60
TICKS = int(os.environ.get("RSJOBS_SCHEDULE_SECONDS", "3"))


async def _wait_tasks(client: Client, n: int, timeout: float) -> None:
    """Until the queue's stream holds ``n`` entries: a blocking read of the stream (the
    test waits on the reapers' ticks, not on a timer)."""
    stream = client.keys.queue("default")
    deadline = time.monotonic() + timeout
    cursor = "0-0"
    seen = 0
    while seen < n:
        left = deadline - time.monotonic()
        assert left > 0, f"{seen} of {n} ticks enqueued in {timeout} s"
        reply = await client.redis.xread({stream: cursor}, block=max(1, int(left * 1000)))
        if reply:
            rows = reply[0][1]
            seen += len(rows)
            cursor = rows[-1][0]


@pytest.mark.timeout(120)
async def test_three_reapers_enqueue_exactly_one_task_per_tick_across_a_sigkill(
    client: Client, redis_url: str, tmp_path: Path
) -> None:
    """A schedule every second, three reapers without the guard (every one sweeps, so the
    script alone keeps a tick to one task); one is SIGKILLed half-way. Every tick from the
    first to the last is accounted for once: fired (one task, its tick in its history) or,
    only if every live reaper was late past a whole tick, counted as skipped."""
    args = ("--interval-ms", "100", "--no-guard", "--quiet")
    procs = [spawn_reaper(redis_url, "t", str(tmp_path / f"r{n}.log"), *args) for n in range(3)]
    try:
        first = await client.schedule("beat", type="tick", every_ms=1000)
        await _wait_tasks(client, max(1, TICKS // 2), TICKS + 20)
        os.kill(procs[0].pid, signal.SIGKILL)
        await _wait_tasks(client, TICKS, TICKS + 20)
    finally:
        for p in procs:
            stop_process(p, signal.SIGTERM)
    # every reaper stopped: read what fired
    (info,) = await client.schedules()
    ids = [e[1]["id"] for e in await client.redis.xrange(client.keys.queue("default"))]
    ticks = []
    for tid in ids:
        (entry,) = await client.history(tid)
        ticks.append(int(entry.message.rsplit(" ", 1)[1]))
    assert len(ticks) == len(set(ticks)), "a tick enqueued two tasks"
    assert info.fired == len(ids)
    # each fire moves the schedule past its tick and the ticks it skipped: together they
    # are every tick from the first to the one before next_at, each exactly once
    assert len(ids) + info.skipped == (info.next_at - first) // 1000
    assert all((t - first) % 1000 == 0 and first <= t < info.next_at for t in ticks)
    assert len(ids) >= TICKS, ticks


def test_the_cli_adds_lists_and_removes_schedules_in_words(redis_url: str) -> None:
    """``schedules add`` says the first tick as a time, ``list`` prints a table (``--json``:
    the documents), ``remove`` of a missing one is a one-line error."""
    add = rsjobs(redis_url, "--namespace", "sch", "schedules", "add", "beat", "tick",
                 "--every-ms", "60000", "--queue", "cron")  # fmt: skip
    assert add.returncode == 0, add.stderr
    assert re.fullmatch(r"schedule beat: first tick at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\n",
                        add.stdout), add.stdout  # fmt: skip
    table = rsjobs(redis_url, "--namespace", "sch", "schedules", "list")
    header, row = table.stdout.splitlines()
    assert header.split() == ["name", "ticks", "type", "queue", "next", "fired", "skipped",
                              "last", "last", "task"]  # fmt: skip
    assert row.split()[:5] == ["beat", "every", "60s", "tick", "cron"]
    docs = rsjobs(redis_url, "--namespace", "sch", "schedules", "list", "--json")
    (doc,) = [json.loads(line) for line in docs.stdout.splitlines()]
    assert doc["schedule"]["every_ms"] == 60000 and doc["fired"] == 0
    assert rsjobs(redis_url, "--namespace", "sch", "schedules", "remove", "beat").returncode == 0
    gone = rsjobs(redis_url, "--namespace", "sch", "schedules", "remove", "beat")
    assert gone.returncode == 2 and "no schedule 'beat'" in gone.stderr
    empty = rsjobs(redis_url, "--namespace", "sch", "schedules", "list")
    assert empty.stdout.strip() == "(no schedules)"
