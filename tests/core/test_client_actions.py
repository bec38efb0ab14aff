"""The operator's actions through the asyncio client on a real Redis with a worker: retry
and replay, tracebacks of every failed attempt, bulk cancel and retry, queue pause."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rsjobs import Client, ConfigError, InvalidTransition, TaskFilter, TaskNotFound
from rsjobs.model import TERMINAL
from tests.support.processes import wait_for_state
from tests.support.reference import replay
from tests.support.web import running_worker

pytestmark = pytest.mark.integration


async def test_a_failed_task_is_retried_after_its_cause_is_fixed(
    client: Client, redis_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "input.txt"
    tid = await client.enqueue(
        "needs_file", {"path": str(path)}, queue="default", max_attempts=2,
        backoff_base_ms=0, backoff_max_ms=0, dedup_key="render-1", owner="alice",
    )  # fmt: skip
    async with running_worker(redis_url):
        failed = await client.wait(tid, timeout_ms=10_000)
        assert failed.state == "FAILED" and failed.error_type == "FileNotFoundError"
        # every attempt's FAIL entry keeps its traceback; the task shows the last one
        fails = [e for e in await client.history(tid) if e.event == "FAIL"]
        assert len(fails) == 2
        for e in fails:
            assert e.extra["error_type"] == "FileNotFoundError"
            tb = e.extra["traceback"]
            assert "in _open_input" in tb and tb.rstrip().endswith(f"'{path}'")
            assert "rsjobs/worker" not in tb  # from the handler down
        assert failed.traceback == fails[-1].extra["traceback"]
        # the operator fixes the cause and retries: a new task, linked both ways
        path.write_text("ready")
        r = await client.retry(tid, "input uploaded", source="admin:ops")
        assert r.created and r.id == tid and r.new_id != tid and r.event == "RETRY"
        done = await client.wait(r.new_id, timeout_ms=10_000)
    assert done.state == "SUCCEEDED" and done.result == {"read": "ready", "attempt": 1}
    assert (done.retry_of, done.owner, done.max_attempts) == (tid, "alice", 2)
    old = await client.get(tid)
    assert old.state == "FAILED" and old.retried_as == r.new_id
    last = (await client.history(tid))[-1]
    assert (last.event, last.source, last.message, last.extra) == (
        "RETRY", "admin:ops", "input uploaded", {"as": r.new_id},
    )  # fmt: skip
    assert replay(await client.history(tid)) == [] and replay(await client.history(r.new_id)) == []
    # the old task's dedup key names the new task; a second retry answers it
    assert await client.enqueue("needs_file", {"path": str(path)}, dedup_key="render-1") == r.new_id
    again = await client.retry(tid)
    assert (again.created, again.new_id, again.state) == (False, r.new_id, "SUCCEEDED")
    # the new task SUCCEEDED: retry refuses it (recorded), replay starts it over
    with pytest.raises(InvalidTransition, match="REPLAY starts it over") as refused:
        await client.retry(r.new_id)
    assert refused.value.state == "SUCCEEDED"
    assert (await client.history(r.new_id))[-1].rejected
    replayed = await client.replay(r.new_id)
    assert replayed.created and (await client.get(replayed.new_id)).retry_of == r.new_id


async def test_an_unfinished_task_is_not_retried(client: Client) -> None:
    tid = await client.enqueue("noop", {})
    with pytest.raises(InvalidTransition, match="only a finished task can be started over"):
        await client.retry(tid)
    info = await client.get(tid)
    assert info.state == "PENDING" and info.retried_as == ""
    with pytest.raises(TaskNotFound):
        await client.retry("f" * 32)


async def test_bulk_cancel_counts_lists_and_cancels_within_the_limit(client: Client) -> None:
    gpu = [await client.enqueue("noop", {"i": i}, queue="gpu") for i in range(5)]
    cpu = await client.enqueue("noop", {}, queue="cpu")
    later = await client.enqueue("noop", {}, queue="gpu", delay_ms=60_000)
    # the oldest first (by creation time, then id: tasks of one millisecond by id)
    created = {t: (await client.get(t)).created_at for t in gpu}
    gpu.sort(key=lambda t: (created[t], t))
    where = TaskFilter(queue="gpu", state="PENDING")
    dry = await client.bulk_cancel(where, dry_run=True, limit=3)
    assert (dry.matched, dry.ids, dry.items) == (5, gpu[:3], [])
    assert {(await client.get(t)).state for t in gpu} == {"PENDING"}
    done = await client.bulk_cancel(where, limit=3, reason="maintenance", source="admin:ops")
    assert (done.matched, done.changed, done.ids) == (5, 3, gpu[:3])
    assert [(await client.get(t)).state for t in gpu] == ["CANCELLED"] * 3 + ["PENDING"] * 2
    cancel = (await client.history(gpu[0]))[-1]
    assert (cancel.event, cancel.source, cancel.message) == ("CANCEL", "admin:ops", "maintenance")
    # the rest of the queue's unfinished tasks, whatever their state (a filter on queue)
    rest = await client.bulk_cancel(TaskFilter(queue="gpu"))
    assert rest.changed == 3 and (await client.get(later)).state == "CANCELLED"
    assert (await client.get(cpu)).state == "PENDING"
    assert (await client.bulk_cancel(TaskFilter(queue="gpu"), dry_run=True)).matched == 0


async def test_bulk_selection_reads_the_indexes_and_filters_by_label(
    client: Client, redis_url: str
) -> None:
    mine = [
        await client.enqueue("noop", {"i": i}, queue="gpu", labels={"character": "c_1"})
        for i in range(3)
    ]
    await client.enqueue("noop", {}, queue="gpu", labels={"character": "c_2"})
    await client.enqueue("noop", {}, queue="cpu", labels={"character": "c_1"})
    # a hash shaped like a task but in no index is not selected: the selection reads the
    # indexes the transition scripts keep, not the keyspace
    stray = "f" * 32
    await client.redis.hset(
        client.store.keys.task(stray),
        mapping={"id": stray, "s": "PENDING", "q": "gpu", "t": "noop"},
    )
    calls_before = await _scan_calls(client)
    where = TaskFilter(queue="gpu", labels={"character": "c_1"})
    dry = await client.bulk_cancel(where, dry_run=True)
    assert dry.matched == 3 and set(dry.ids) == set(mine)
    assert await _scan_calls(client) == calls_before  # no SCAN
    done = await client.bulk_cancel(where)
    assert done.changed == 3
    assert {(await client.get(t)).state for t in mine} == {"CANCELLED"}
    with pytest.raises(ConfigError, match="label key"):
        await client.bulk_cancel(TaskFilter(labels={"a b": "x"}))
    with pytest.raises(ConfigError, match="at least one"):
        await client.bulk_cancel(TaskFilter(labels={}))


async def _scan_calls(client: Client) -> int:
    stats = await client.redis.info("commandstats")
    return int(stats.get("cmdstat_scan", {}).get("calls", 0))


async def test_bulk_retry_takes_failed_tasks_not_yet_retried(
    client: Client, redis_url: str
) -> None:
    failed = [await client.enqueue("fatal", {"i": i}, queue="gpu") for i in range(3)]
    ok = await client.enqueue("noop", {}, queue="gpu")
    async with running_worker(redis_url, queues=["gpu"]):
        for t in [*failed, ok]:
            assert (await client.wait(t, timeout_ms=10_000)).state in TERMINAL
    where = TaskFilter(queue="gpu")
    dry = await client.bulk_retry(where, dry_run=True)
    assert dry.matched == 3 and set(dry.ids) == set(failed)  # the SUCCEEDED one is left out
    done = await client.bulk_retry(where, reason="after the fix")
    assert done.changed == 3 and all(i.new_id for i in done.items)
    for item in done.items:
        assert (await client.get(item.new_id)).retry_of == item.id
    # a second bulk retry finds nothing left to retry (each was started over once)
    assert (await client.bulk_retry(where)).matched == 0
    with pytest.raises(Exception, match="replay a SUCCEEDED task by its id"):
        await client.bulk_retry(TaskFilter(state="SUCCEEDED"))


async def test_a_paused_queue_starts_nothing_until_resumed(client: Client, redis_url: str) -> None:
    running = await client.enqueue("sleep", {"s": 1.0, "steps": 10}, queue="gpu")
    # (a lease of 30 s: the worker reads the flags again only every 10 s, so a prompt
    # start after the resume is the notice's doing)
    async with running_worker(redis_url, queues=["gpu"], block_ms=1000, lease_ms=30_000):
        await wait_for_state(client, running, "RUNNING")
        p = await client.pause_queue("gpu", "driver update", source="admin:ops")
        assert p.paused and p.changed and p.by == "admin:ops" and p.since > 0
        waiting = await client.enqueue("noop", {"x": 1}, queue="gpu")
        # the running task goes on; the new one waits
        assert (await client.wait(running, timeout_ms=10_000)).state == "SUCCEEDED"
        await asyncio.sleep(0.5)
        info = await client.get(waiting)
        assert info.state == "PENDING" and info.queue_paused
        assert (await client.paused_queues())["gpu"].reason == "driver update"
        repeat = await client.pause_queue("gpu")
        assert repeat.paused and not repeat.changed and repeat.reason == "driver update"
        resumed = await client.resume_queue("gpu")
        assert resumed.changed and not resumed.paused
        # at once, not after the worker's block time
        t0 = asyncio.get_running_loop().time()
        assert (await client.wait(waiting, timeout_ms=5000)).state == "SUCCEEDED"
        assert asyncio.get_running_loop().time() - t0 < 0.9
    assert not (await client.get(waiting)).queue_paused
