"""The per-minute queue series: ``series.lua`` samples each queue's counters once a
minute (one entry per queue and minute however often it is called, nothing written for a
bad call), the counters it samples are the ones the transitions keep (``started:<queue>``
counted at START), and ``store.series.points`` turns samples into per-minute differences.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator

import pytest
import redis as sync_redis
from redis.exceptions import ResponseError

from rsjobs import Client
from rsjobs.store import layout
from rsjobs.store.layout import SeriesArgs, SeriesQueue
from rsjobs.store.series import KEEP_MS, STEP_MS
from tests.support.lua import LuaHarness

_ids = (f"{n:032x}" for n in itertools.count(1))


def sample(h: LuaHarness, queues: dict[str, int], keep: int | str = KEEP_MS) -> list[int]:
    items = [(h.k.series(q), SeriesQueue(q, ms)) for q, ms in queues.items()]
    return [int(v) for v in h.run(layout.series(h.c, "reaper", SeriesArgs(keep), items))]  # type: ignore[arg-type]


def test_a_sample_holds_the_queue_counters_once_per_minute() -> None:
    h = LuaHarness()
    h.group("q")
    ids = [next(_ids) for _ in range(5)]
    for tid in ids:
        h.enqueue(tid)
    entries = h.deliver()
    for tid, entry in zip(ids[:3], entries[:3], strict=True):
        h.start(tid, entry, nonce=tid[-4:])
    assert h.r.hget(h.k.stats, "started:q") == "3"
    h.finish(ids[0], "COMPLETE", f"1:{ids[0][-4:]}", '"ok"')
    h.finish(ids[1], "FAIL", f"1:{ids[1][-4:]}", "boom", retryable=False)
    h.control(ids[4], "CANCEL")
    now = int(h.r.time()[0]) * 1000
    done, minute = sample(h, {"q": now - 5000, "other": 0})
    assert done == 2 and minute % STEP_MS == 0
    rows = h.r.xrange(h.k.series("q"))
    assert [r[0] for r in rows] == [f"{minute}-0"]
    f = rows[0][1]
    assert (f["n"], f["st"], f["ok"], f["f"], f["c"], f["to"], f["p"]) == (
        "5", "3", "1", "1", "1", "0", "1"
    )  # fmt: skip
    assert 4000 <= int(f["age"]) <= 70_000
    assert h.r.xrange(h.k.series("other"))[0][1]["n"] == "0"
    # a second reaper in the same minute: nothing more
    assert sample(h, {"q": 0, "other": 0}) == [0, minute]
    assert h.r.xlen(h.k.series("q")) == 1


@pytest.mark.parametrize(
    ("queues", "keep"),
    [({"q": -1}, KEEP_MS), ({"q": 0}, 59_999), ({"q": 0}, "x"), ({"": 0}, KEEP_MS)],
)
def test_a_bad_call_writes_nothing(queues: dict[str, int], keep: int | str) -> None:
    h = LuaHarness()
    with pytest.raises(ResponseError, match="rsjobs: invalid"):
        sample(h, queues, keep)
    assert h.r.keys("*series*") == []


def test_samples_older_than_keep_are_trimmed() -> None:
    h = LuaHarness()
    key = h.k.series("q")
    now = int(h.r.time()[0]) * 1000
    minute = now - now % STEP_MS
    for m in range(200, 0, -1):  # two hundred old minutes, oldest first
        h.r.xadd(key, {"n": 0}, id=f"{minute - m * STEP_MS}-0")
    sample(h, {"q": 0}, keep=60 * STEP_MS)
    first = int(h.r.xrange(key, count=1)[0][0].split("-")[0])
    # MINID ~ trims whole nodes: nothing kept is much older than keep
    assert h.r.xlen(key) < 200 and first >= minute - 200 * STEP_MS
    assert h.r.xrevrange(key, count=1)[0][0] == f"{minute}-0"


# -- points, on a real Redis -------------------------------------------------------------------


@pytest.fixture
def r(redis_url: str) -> Iterator[sync_redis.Redis]:
    c = sync_redis.Redis.from_url(redis_url, decode_responses=True)
    yield c
    c.close()


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[Client]:
    c = Client.from_url(redis_url, namespace="t")
    await c.store.require_layout()
    yield c
    await c.close()


@pytest.mark.integration
async def test_points_are_differences_of_samples(client: Client, r: sync_redis.Redis) -> None:
    key = client.store.keys.series("q")
    now = await client.store.reaper.now_ms()
    minute = now - now % STEP_MS
    # samples at minute-5 (before the window), -4, -3, (none at -2), -1, 0
    samples = {
        -5: (10, 8, 5, 1, 0, 1, 2, 100),
        -4: (15, 10, 7, 2, 0, 1, 3, 2000),
        -3: (15, 12, 9, 2, 1, 1, 1, 0),
        -1: (30, 20, 14, 3, 1, 2, 10, 5000),
        0: (29, 20, 14, 3, 1, 2, 9, 0),  # a counter that went down (reset): no negative
    }
    for m, v in samples.items():
        fields = dict(zip(("n", "st", "ok", "f", "to", "c", "p", "age"), v, strict=True))
        r.xadd(key, fields, id=f"{minute + m * STEP_MS}-0")
    points = await client.store.series.points("q", 4, now)
    assert [p.t - minute for p in points] == [-3 * STEP_MS, -STEP_MS, 0]
    p3, p1, p0 = points
    assert (p3.enqueued, p3.started, p3.succeeded, p3.timed_out, p3.pending) == (0, 2, 2, 1, 1)
    # the gap: the point after it holds what moved over both minutes
    assert (p1.enqueued, p1.started, p1.succeeded, p1.failed, p1.cancelled) == (15, 8, 5, 1, 1)
    assert (p1.pending, p1.oldest_pending_ms) == (10, 5000)
    assert p0.enqueued == 0
    # minute -4 is the first of a 5-minute window: the sample of -5 gives its difference
    five = await client.store.series.points("q", 5, now)
    assert five[0].t == minute - 4 * STEP_MS and five[0].enqueued == 5
    # one minute: the last point only
    assert [p.t for p in await client.store.series.points("q", 1, now)] == [minute]
