"""Successor chains end to end, on the session's Redis with an in-process worker: results
passed on in order, a failure cancelling what waits on it (with the reason), the policy
"always", a diamond released once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from rsjobs import Client, Settings, Worker
from rsjobs.model import TERMINAL
from tests.support.reference import replay
from tests.support.successor_apps import tasks

pytestmark = pytest.mark.integration


@contextlib.asynccontextmanager
async def running_worker(url: str, **kw: object) -> AsyncIterator[Worker]:
    opts: dict[str, object] = {
        "concurrency": 4,
        "lease_ms": 2000,
        "handle_signals": False,
        "promote_ms": 20,
        "settings": Settings(namespace="t"),
    }
    opts.update(kw)
    w = Worker(tasks, url=url, **opts)  # type: ignore[arg-type]
    task = asyncio.create_task(w.run())
    try:
        yield w
    finally:
        w.stop()
        await asyncio.wait_for(task, 20)
        await w.redis.aclose()


async def test_a_chain_runs_in_order_with_results_passed_on(client: Client, redis_url: str) -> None:
    a = await client.enqueue("link", {"name": "A", "n": 1, "s": 0.2})
    b = await client.enqueue("link", {"name": "B", "n": 10}, after=[a])
    c = await client.enqueue("link", {"name": "C", "n": 100}, after=[b])
    assert (await client.get(b)).state == "WAITING"
    assert (await client.get(c)).after == [b]
    assert (await client.get(a)).successors == [b]
    async with running_worker(redis_url):
        infos = [await client.wait(t, timeout_ms=15_000) for t in (a, b, c)]
    assert [i.state for i in infos] == ["SUCCEEDED"] * 3
    ra, rb, rc = (i.result for i in infos)
    assert ra["got"] == {} and rb["got"] == {a: ra} and rc["got"] == {b: rb}
    assert (rb["n"], rc["n"]) == (11, 111)
    assert rb["states"] == {a: "SUCCEEDED"} and rc["states"] == {b: "SUCCEEDED"}
    # each link started only after the one before it ended
    assert ra["ended"] <= rb["started"] and rb["ended"] <= rc["started"]
    for tid in (a, b, c):
        entries = await client.history(tid)
        assert replay(entries) == []
    events = [(e.event, e.to_state) for e in await client.history(c)]
    assert events[:3] == [("ENQUEUE", "WAITING"), ("RELEASE", "PENDING"), ("START", "RUNNING")]
    assert (await client.get(c)).predecessor_states == {b: "SUCCEEDED"}


async def test_a_failure_cancels_the_rest_of_the_chain_with_the_reason(
    client: Client, redis_url: str
) -> None:
    a = await client.enqueue("boom", "A", max_attempts=1)
    b = await client.enqueue("link", {"name": "B"}, after=[a])
    c = await client.enqueue("link", {"name": "C"}, after=[b])
    async with running_worker(redis_url):
        ia, ib, ic = [await client.wait(t, timeout_ms=15_000) for t in (a, b, c)]
    assert (ia.state, ib.state, ic.state) == ("FAILED", "CANCELLED", "CANCELLED")
    assert ib.attempt == ic.attempt == 0  # never started
    assert ib.error_type == "PredecessorFailed" and ic.error_type == "PredecessorCancelled"
    (cancel_b,) = [e for e in await client.history(b) if e.event == "CANCEL"]
    assert cancel_b.extra == {"pred": a, "pred_state": "FAILED"}
    assert a in cancel_b.message and "planned failure" in cancel_b.message
    (cancel_c,) = [e for e in await client.history(c) if e.event == "CANCEL"]
    assert cancel_c.extra == {"pred": b, "pred_state": "CANCELLED"}
    assert cancel_c.from_state == "WAITING"


async def test_the_policy_always_runs_a_successor_after_a_failure(
    client: Client, redis_url: str
) -> None:
    a = await client.enqueue("boom", "A", max_attempts=1)
    ok = await client.enqueue("link", {"name": "OK", "n": 5})
    b = await client.enqueue("link", {"name": "B"}, after=[a, ok], after_policy="always")
    async with running_worker(redis_url):
        ib = await client.wait(b, timeout_ms=15_000)
    assert ib.state == "SUCCEEDED"
    assert ib.result["states"] == {a: "FAILED", ok: "SUCCEEDED"}
    assert list(ib.result["got"]) == [ok]  # the results of those that succeeded
    assert ib.after_policy == "always"


async def test_a_diamond_releases_its_last_task_once(client: Client, redis_url: str) -> None:
    top = await client.enqueue("link", {"name": "top", "n": 1})
    left = await client.enqueue("link", {"name": "left", "n": 2, "s": 0.1}, after=[top])
    right = await client.enqueue("link", {"name": "right", "n": 3}, after=[top])
    bottom = await client.enqueue("link", {"name": "bottom", "n": 0}, after=[left, right])
    async with running_worker(redis_url):
        info = await client.wait(bottom, timeout_ms=15_000)
    assert info.state == "SUCCEEDED" and info.result["n"] == (1 + 2) + (1 + 3)
    releases = [e for e in await client.history(bottom) if e.event == "RELEASE"]
    assert len(releases) == 1 and info.attempt == 1
    assert (await client.counters())["ev:RELEASE"] == 3
    for tid in (top, left, right, bottom):
        assert all(e.to_state in TERMINAL or not e.rejected for e in await client.history(tid))
