"""A task hash the scripts did not write, in a reaper batch: the rest of the batch is
handled as usual, the bad task is quarantined (FAILED through DEADLETTER, on the
dead-letter stream, counted), and no error, expected or not, ends the reaper."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from rsjobs import Client, StoreError
from rsjobs.reaper import CannotRequeue, Reaper, ReaperConfig, list_deadletters, requeue
from rsjobs.reaper.reaper import SweepReport
from rsjobs.store.layout import Packed
from rsjobs.store.record import field

pytestmark = pytest.mark.integration

NS = "rq"


@pytest.fixture
async def qc(redis_url: str) -> AsyncIterator[Client]:
    c = Client.from_url(redis_url, namespace=NS)
    yield c
    await c.close()


def reaper(c: Client, **cfg: Any) -> Reaper:
    opts: dict[str, Any] = {"guard": False, "deadline_grace_ms": 0}
    opts.update(cfg)
    return Reaper(redis=c.redis, settings=c.settings, config=ReaperConfig(**opts))


async def started(c: Client, n: int, *, lease_ms: int, **kw: Any) -> list[str]:
    """``n`` tasks started by a consumer that then vanished (never beats, unregistered)."""
    ids = [await c.enqueue("noop", {"i": i}, **kw) for i in range(n)]
    stream = c.keys.queue("default")
    work = c.store.work
    await work.ensure_groups([stream])
    deliveries = await work.read("ghost", {stream: "default"}, n, None)
    replies = await work.start("ghost", lease_ms, "g", deliveries)
    assert [r.code for r in replies] == [1] * n
    return ids


async def corrupt(c: Client, tid: str) -> None:
    """What a hand edit or a foreign writer can leave: the hash lost its queue field."""
    await c.redis.hdel(c.keys.task(tid), field("queue"))


async def check_quarantined(c: Client, tid: str, step: str, was: str) -> None:
    t = await c.redis.hgetall(c.keys.task(tid))
    assert t[field("state")] == "FAILED" and t["error_type"] == "DeadLetter"
    assert t[field("queue")] == "default"
    assert t["error"].startswith(f"quarantined: {step} failed on this task: no queue (q) field")
    last = (await c.history(tid))[-1]
    assert (last.from_state, last.event, last.to_state) == (was, "DEADLETTER", "FAILED")
    (letter,) = await list_deadletters(c.store)
    assert (letter.task_id, letter.step, letter.action) == (tid, step, "DEADLETTER")


async def test_recovery_quarantines_the_bad_task_and_recovers_the_rest(qc: Client) -> None:
    ids = await started(qc, 5, lease_ms=100)
    bad = ids[2]
    await corrupt(qc, bad)
    # a queue whose key is not a stream: that queue is skipped, the others recovered
    await qc.redis.sadd(qc.keys.queues, "broken")
    await qc.redis.set(qc.keys.queue("broken"), "junk")
    await asyncio.sleep(0.3)
    report = await reaper(qc, lease_ms=100).sweep_once()
    assert (report.retried, report.quarantined, report.errors) == (4, 1, 1)
    for tid in ids:
        if tid != bad:
            assert (await qc.get(tid)).state == "PENDING"
    await check_quarantined(qc, bad, "recovery", "RUNNING")
    # it is an ordinary dead letter now: the operator can requeue it
    clone, created = await requeue(Client(qc.redis, qc.settings, source="user"), bad)
    assert created and (await qc.get(clone)).payload == {"i": 2}
    # the next sweep finds nothing more to do with it
    again = await reaper(qc, lease_ms=100).sweep_once()
    assert again.quarantined == 0


async def test_deadlines_quarantine_the_bad_task_and_time_out_the_rest(qc: Client) -> None:
    ids = await started(qc, 4, lease_ms=60_000, timeout_ms=50)
    bad = ids[0]
    await corrupt(qc, bad)
    await asyncio.sleep(0.2)
    report = await reaper(qc).sweep_once()
    assert (report.timeout_retried, report.quarantined, report.errors) == (3, 1, 0)
    await check_quarantined(qc, bad, "deadlines", "RUNNING")
    assert await qc.redis.zscore(qc.keys.deadlines, f"default:{bad}") is None


async def test_promotion_quarantines_the_bad_task_and_promotes_the_rest(qc: Client) -> None:
    ids = [await qc.enqueue("noop", {"i": i}, delay_ms=50) for i in range(4)]
    bad = ids[3]
    await corrupt(qc, bad)
    await asyncio.sleep(0.2)
    report = await reaper(qc).sweep_once()
    assert (report.promoted, report.quarantined, report.errors) == (3, 1, 0)
    await check_quarantined(qc, bad, "promotion", "SCHEDULED")
    assert await qc.redis.zcard(qc.keys.scheduled) == 0


async def test_a_failure_its_data_does_not_explain_fails_no_task(qc: Client) -> None:
    """The batch is split and the rest recovered; the task the script keeps failing on,
    with nothing wrong found in its data, is left as it is (counted as an error)."""
    ids = await started(qc, 3, lease_ms=100)
    victim = ids[1]
    await asyncio.sleep(0.3)
    r = reaper(qc, lease_ms=100)
    real = r.store.scripts.run

    async def buggy(call: Packed, **kw: Any) -> Any:
        if call.script == "reclaim" and qc.keys.task(victim) in call.keys:
            raise StoreError("reclaim.lua", "ERR", "user_script:1: a bug")
        return await real(call, **kw)

    r.store.scripts.run = buggy  # type: ignore[method-assign]
    before = await qc.redis.hgetall(qc.keys.task(victim))
    report = await r.sweep_once()
    assert (report.retried, report.quarantined, report.errors) == (2, 0, 1)
    assert await qc.redis.hgetall(qc.keys.task(victim)) == before
    assert await list_deadletters(qc.store) == []


async def test_no_error_ends_the_reaper_loop(qc: Client, caplog: pytest.LogCaptureFixture) -> None:
    r = reaper(qc, interval_ms=20)
    real = r.sweep_once
    calls = 0
    swept = asyncio.Event()

    async def flaky() -> SweepReport:
        nonlocal calls
        calls += 1
        if calls <= 2:
            raise RuntimeError(f"unexpected #{calls}")
        report = await real()
        swept.set()
        return report

    r.sweep_once = flaky  # type: ignore[method-assign]
    tid = await qc.enqueue("noop", {}, delay_ms=1)
    with caplog.at_level(logging.INFO, logger="rsjobs.reaper"):
        task = asyncio.create_task(r.run())
        try:
            await asyncio.wait_for(swept.wait(), 10)  # the loop went on past both errors
            assert not task.done()
            assert r.sweeps >= 1 and r.totals["sweep_errors"] == 2
            assert (await qc.get(tid)).state == "PENDING"  # promoted by a later sweep
        finally:
            r.stop()
            await asyncio.wait_for(task, 5)
    errors = [m for m in caplog.messages if '"event":"sweep_error"' in m]
    assert len(errors) == 2 and "Traceback" in errors[0] and "unexpected #1" in errors[0]


async def test_requeue_of_a_dead_letter_too_damaged_to_clone_writes_nothing(qc: Client) -> None:
    (tid,) = await started(qc, 1, lease_ms=100)
    await corrupt(qc, tid)
    await asyncio.sleep(0.3)
    assert (await reaper(qc, lease_ms=100).sweep_once()).quarantined == 1
    user = Client(qc.redis, qc.settings, source="user")
    for damage, says in (
        ({field("payload"): "{not json"}, "its payload does not decode"),
        ({field("payload"): "{}", field("max_attempts"): "lots"}, "a number field does not parse"),
    ):
        await qc.redis.hset(qc.keys.task(tid), mapping=damage)
        before = {k: await qc.redis.dump(k) for k in sorted(await qc.redis.keys("*"))}
        with pytest.raises(CannotRequeue, match=says):
            await requeue(user, tid)
        after = {k: await qc.redis.dump(k) for k in sorted(await qc.redis.keys("*"))}
        assert after == before
