"""``GET /queues/{queue}/series`` on a real Redis: the reaper samples the queues' counters
once a minute (two reapers sweeping in one minute take one sample), the route answers the
differences between samples, admin only, and bad input is a 400 or 404 that writes nothing;
``Client.queue_series`` and ``rsjobs queues --series`` answer the same."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import msgspec
import pytest
import redis as sync_redis

from rsjobs import Client, Settings, UnknownQueue
from rsjobs.overview import QueueSeries
from rsjobs.reaper import Reaper, ReaperConfig
from rsjobs.store.keys import Keys
from rsjobs.store.series import STEP_MS
from tests.support.web import ALICE, NAMESPACE, ROOT, TestClient, redis_state

pytestmark = pytest.mark.integration


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def _sweep(url: str) -> int:
    async def run() -> int:
        reaper = Reaper(
            url=url, settings=Settings(namespace=NAMESPACE), config=ReaperConfig(guard=False)
        )
        try:
            return (await reaper.sweep_once()).series_sampled
        finally:
            await reaper.close()

    return asyncio.run(run())


def _minute(r: sync_redis.Redis) -> int:
    secs, _ = r.time()
    ms = int(secs) * 1000
    return ms - ms % STEP_MS


def test_the_series_is_what_moved_since_the_sample_before(
    tc: TestClient, redis_url: str, rdb: sync_redis.Redis
) -> None:
    ids = [
        tc.post("/tasks", json={"type": "img", "queue": "gpu"}, headers=ALICE).json()["id"]
        for _ in range(4)
    ]
    tc.post(f"/tasks/{ids[0]}/cancel", headers=ALICE)
    key = Keys(NAMESPACE).series("gpu")
    minute = _minute(rdb)
    # the sample a reaper took a minute before, when the queue held one task
    rdb.xadd(
        key,
        {"n": 1, "st": 0, "ok": 0, "f": 0, "to": 0, "c": 0, "p": 1, "age": 0},
        id=f"{minute - STEP_MS}-0",
    )
    assert _sweep(redis_url) >= 1
    assert _sweep(redis_url) == 0  # a second reaper in the same minute samples nothing
    if _minute(rdb) != minute:  # the minute turned between the two sweeps: not comparable
        pytest.skip("the minute turned during the test")
    r = tc.get("/queues/gpu/series", params={"minutes": 5}, headers=ROOT)
    assert r.status_code == 200, r.text
    series = msgspec.json.decode(r.content, type=QueueSeries)  # the documented shape
    assert series.queue == "gpu" and series.step_ms == 60_000
    (p,) = series.points
    assert p.t == minute
    assert (p.enqueued, p.cancelled, p.started, p.succeeded, p.pending) == (3, 1, 0, 0, 3)
    assert p.oldest_pending_ms >= 0
    # the raw JSON names exactly the contract's fields
    assert set(r.json()["points"][0]) == {
        "t", "enqueued", "started", "succeeded", "failed", "timed_out", "cancelled",
        "pending", "oldest_pending_ms",
    }  # fmt: skip
    # one minute back: the same point; the default window too
    assert tc.get("/queues/gpu/series", headers=ROOT).json()["points"] == r.json()["points"]


def test_a_queue_without_samples_has_an_empty_series(tc: TestClient) -> None:
    tc.post("/tasks", json={"type": "img", "queue": "cpu"}, headers=ALICE)
    r = tc.get("/queues/cpu/series", headers=ROOT)
    assert r.status_code == 200 and r.json() == {"queue": "cpu", "step_ms": 60000, "points": []}


@pytest.mark.parametrize(
    ("path", "params", "headers", "status", "code"),
    [
        ("/queues/gpu/series", {}, ALICE, 403, "forbidden"),
        ("/queues/gpu/series", {}, {}, 401, None),
        ("/queues/nosuch/series", {}, ROOT, 404, "unknown_queue"),
        ("/queues/gpu/series", {"minutes": "0"}, ROOT, 400, "invalid_minutes"),
        ("/queues/gpu/series", {"minutes": "1441"}, ROOT, 400, "invalid_minutes"),
        ("/queues/gpu/series", {"minutes": "ten"}, ROOT, 400, "invalid_minutes"),
        ("/queues/gpu/series", {"minutes": "-1"}, ROOT, 400, "invalid_minutes"),
        ("/queues/gpu/series", {"other": "1"}, ROOT, 400, None),
        ("/queues/g%20u/series", {}, ROOT, 400, "invalid_queue"),
    ],
)
def test_bad_requests_are_refused_and_write_nothing(
    tc: TestClient,
    rdb: sync_redis.Redis,
    path: str,
    params: dict[str, str],
    headers: dict[str, str],
    status: int,
    code: str | None,
) -> None:
    tc.post("/tasks", json={"type": "img", "queue": "gpu"}, headers=ALICE)
    before = redis_state(rdb)
    r = tc.get(path, params=params, headers=headers)
    assert r.status_code == status, r.text
    if code is not None:
        assert r.json()["error"] == code
    assert redis_state(rdb) == before


async def test_client_and_cli(redis_url: str) -> None:
    async with Client.from_url(redis_url, namespace=NAMESPACE) as c:
        await c.enqueue("img", {}, queue="gpu")
        with pytest.raises(UnknownQueue):
            await c.queue_series("nosuch")
        key = c.store.keys.series("gpu")
        now = await c.store.reaper.now_ms()
        minute = now - now % STEP_MS
        for m, n in ((2, 0), (1, 1)):
            await c.redis.xadd(
                key,
                {"n": n, "st": 0, "ok": 0, "f": 0, "to": 0, "c": 0, "p": n, "age": 1500},
                id=f"{minute - m * STEP_MS}-0",
            )
        series = await c.queue_series("gpu", minutes=3)
        assert [(p.t, p.enqueued, p.pending) for p in series.points] == [(minute - STEP_MS, 1, 1)]
    base = [sys.executable, "-m", "rsjobs", "--url", redis_url, "--namespace", NAMESPACE, "queues"]
    out = await asyncio.to_thread(_run, [*base, "--series", "gpu", "--minutes", "3", "--json"])
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["points"][0]["enqueued"] == 1
    table = await asyncio.to_thread(_run, [*base, "--series", "gpu", "--minutes", "3"])
    assert (
        table.returncode == 0 and "enqueued" in table.stdout and "oldest_pending_s" in table.stdout
    )
    bad = await asyncio.to_thread(_run, [*base, "--series", "nosuch"])
    assert bad.returncode == 2 and "no such queue: nosuch" in bad.stderr


async def test_a_broken_queue_does_not_stop_the_sampling_of_the_others(redis_url: str) -> None:
    async with Client.from_url(redis_url, namespace=NAMESPACE) as c:
        await c.enqueue("img", {}, queue="gpu")
        k = c.store.keys
        await c.redis.sadd(k.queues, "broken")
        await c.redis.set(k.queue("broken"), "not a stream")
        reaper = Reaper(
            redis=c.redis, settings=Settings(namespace=NAMESPACE), config=ReaperConfig(guard=False)
        )
        report = await reaper.sweep_once()
        assert report.series_sampled == 2  # gpu and broken (its counters read; nothing waits)
        rows = await c.redis.xrange(k.series("gpu"))
        assert len(rows) == 1 and rows[0][1]["n"] == "1" and rows[0][1]["p"] == "1"


async def test_a_new_queue_is_sampled_at_the_next_sweep(redis_url: str) -> None:
    async with Client.from_url(redis_url, namespace=NAMESPACE) as c:
        await c.enqueue("img", {}, queue="gpu")
        reaper = Reaper(
            redis=c.redis, settings=Settings(namespace=NAMESPACE), config=ReaperConfig(guard=False)
        )
        assert (await reaper.sweep_once()).series_sampled == 1
        await c.enqueue("img", {}, queue="late")
        assert (await reaper.sweep_once()).series_sampled >= 1  # not a minute later
        assert await c.redis.xlen(c.store.keys.series("late")) == 1
