"""A namespace of 4 shards on the session's standalone Redis (which serves every slot):
its creation and metadata, placement, reads and writes routed by id, merged views."""

from __future__ import annotations

from collections import Counter

import pytest
import redis as sync_redis

from rsjobs import Client, ConfigError, EnqueueRequest, PredecessorRefused, Settings, connect
from rsjobs.store.shards import shard_of
from tests.support.web import redis_state

NS = "sh"
S = 4


def _client(url: str, shards: int | None = S, ns: str = NS) -> Client:
    return Client(connect(url), Settings(namespace=ns, shards=shards))


async def test_the_first_client_creates_the_shards_and_others_read_them(redis_url: str) -> None:
    async with _client(redis_url) as c:
        tid = await c.enqueue("t", {"x": 1})
        assert (await c.store.open()).count == S
    r = sync_redis.Redis.from_url(redis_url, decode_responses=True)
    meta = r.get(f"rsjobs:{{{NS}}}:shards")
    assert meta is not None and '"count":4' in meta
    async with _client(redis_url, shards=None) as c:
        assert (await c.get(tid)).id == tid  # reads the count, routes the id
        assert (await c.store.open()).count == S
    before = redis_state(r)
    for wrong in (1, 8):
        async with _client(redis_url, shards=wrong) as c:
            with pytest.raises(ConfigError, match=f"namespace {NS} has 4 shards"):
                await c.enqueue("t")
    assert redis_state(r) == before  # refused before any write


async def test_a_namespace_with_data_keeps_its_one_shard(redis_url: str) -> None:
    async with _client(redis_url, shards=None) as c:
        await c.enqueue("t")
    r = sync_redis.Redis.from_url(redis_url)
    before = redis_state(r)
    async with _client(redis_url, shards=4) as c:
        with pytest.raises(ConfigError, match="has 1 shard"):
            await c.enqueue("t")
    assert redis_state(r) == before


async def test_tasks_spread_and_are_read_and_controlled_on_their_shard(redis_url: str) -> None:
    async with _client(redis_url) as c:
        ids = [await c.enqueue("t", i, queue="q") for i in range(40)]
        assert Counter(shard_of(t) for t in ids) == {k: 10 for k in range(S)}  # round-robin
        infos = await c.get_many(ids)
        assert [i.payload for i in infos if i] == list(range(40))
        r = sync_redis.Redis.from_url(redis_url, decode_responses=True)
        shards = await c.store.open()
        for t in ids:
            tag = shards.tags[shard_of(t)]
            assert r.exists(f"rsjobs:{{{tag}}}:task:{t}")
        # control on the task's shard
        assert await c.cancel(ids[5]) == "CANCELLED"
        assert await c.pause(ids[6]) == "PAUSED"
        assert await c.resume(ids[6]) == "PENDING"
        hist = await c.history(ids[5])
        assert [e.event for e in hist] == ["ENQUEUE", "CANCEL"]
        stats = await c.stats()
        assert stats["q"]["PENDING"] == 39 and stats["q"]["CANCELLED"] == 1
        assert stats["q"]["stream_length"] == 39
        retried = await c.retry(ids[5])
        assert shard_of(retried.new_id) == shard_of(ids[5])
        assert (await c.wait(ids[5], timeout_ms=100)).state == "CANCELLED"


async def test_placement_by_owner_dedup_and_predecessors(redis_url: str) -> None:
    async with _client(redis_url) as c:
        owned = {shard_of(await c.enqueue("t", i, owner="alice")) for i in range(6)}
        assert len(owned) == 1
        first = await c.enqueue("t", {"a": 1}, dedup_key="k1")
        again = await c.enqueue("t", {"a": 1}, dedup_key="k1")
        assert first == again
        head = await c.enqueue("t", shard_key="diamond")
        left = await c.enqueue("t", after=[head])
        right = await c.enqueue("t", shard_key="diamond")
        assert shard_of(left) == shard_of(head) == shard_of(right)
        join = await c.enqueue("t", after=[left, right])
        assert shard_of(join) == shard_of(head)
        # predecessors on two shards: refused, nothing written
        a = await c.enqueue("t", shard_key="x1")
        b = next(
            t
            for t in [await c.enqueue("t", shard_key=f"y{i}") for i in range(20)]
            if shard_of(t) != shard_of(a)
        )
        r = sync_redis.Redis.from_url(redis_url)
        before = redis_state(r)
        with pytest.raises(PredecessorRefused, match="share a shard"):
            await c.enqueue("t", after=[a, b])
        with pytest.raises(ConfigError, match="shard_key"):
            await c.enqueue("t", shard_key="")
        assert redis_state(r) == before


async def test_bulk_enqueue_groups_by_shard_and_answers_in_order(redis_url: str) -> None:
    async with _client(redis_url) as c:
        reqs = [EnqueueRequest(type="t", payload=i, queue="b") for i in range(30)]
        reqs += [EnqueueRequest(type="t", payload=99, dedup_key="same")] * 2
        reqs.append(EnqueueRequest(type="t", payload=100, owner="o1"))
        ids = await c.enqueue_many(reqs, chunk=4)
        assert ids[30] == ids[31]
        infos = await c.get_many(ids)
        assert [i.payload for i in infos if i] == [*range(30), 99, 99, 100]
        assert len({shard_of(t) for t in ids[:30]}) == S
        together = await c.enqueue_many(reqs[:5], shard_key="one-shard")
        assert len({shard_of(t) for t in together}) == 1


async def test_lists_merge_the_shards_newest_first_with_a_checked_cursor(redis_url: str) -> None:
    async with _client(redis_url) as c:
        ids = [await c.enqueue("t", i, queue="l") for i in range(23)]
        seen: list[str] = []
        cursor = None
        for _ in range(10):
            page = await c.list_tasks(queue="l", limit=5, cursor=cursor)
            seen += [t.id for t in page.items]
            cursor = page.cursor
            if cursor is None:
                break
        assert sorted(seen) == sorted(ids) and len(seen) == len(ids)
        # newest first across shards (creation times are Redis ms: ties in any order)
        page = await c.list_tasks(queue="l", limit=23)
        times = [t.listed_at for t in page.items]
        assert times == sorted(times, reverse=True)
        for bad in ("nope", "eyJ4IjoxfQ", page.cursor or "Wz"):
            with pytest.raises(ConfigError, match="invalid cursor"):
                await c.list_tasks(queue="l", cursor=bad)
        first = await c.list_tasks(queue="l", limit=3)
        with pytest.raises(ConfigError, match="invalid cursor"):
            await c.list_tasks(queue="other", cursor=first.cursor)


async def test_queue_pause_reaches_every_shard_and_a_partial_one_says_so(redis_url: str) -> None:
    async with _client(redis_url) as c:
        await c.enqueue("t", queue="p")
        p = await c.pause_queue("p", "maintenance")
        assert p.paused and p.changed
        paused = await c.paused_queues()
        assert paused["p"].paused and paused["p"].shards == ""
        r = sync_redis.Redis.from_url(redis_url, decode_responses=True)
        tags = (await c.store.open()).tags
        assert all(r.hexists(f"rsjobs:{{{t}}}:paused", "p") for t in tags)
        r.hdel(f"rsjobs:{{{tags[2]}}}:paused", "p")  # a pause that did not reach shard 2
        assert (await c.paused_queues())["p"].shards == "3 of 4"
        again = await c.pause_queue("p", "maintenance")  # a repeat completes it
        assert again.changed and (await c.paused_queues())["p"].shards == ""
        assert (await c.resume_queue("p")).changed
        assert await c.paused_queues() == {}
