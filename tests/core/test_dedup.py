"""A reused dedup key with a different request is refused the same way everywhere: the
asyncio client, the bulk submit, the SyncClient (``DedupKeyReused``); an identical repeat
answers the first task. The HTTP and CLI faces are tested with their components."""

from __future__ import annotations

from typing import Any

import pytest
import redis as sync_redis

from rsjobs import Client, DedupKeyReused, EnqueueRequest, RsjobsError, SyncClient
from rsjobs.dedup import check_batch, same_request
from rsjobs.schemas import TaskInfo


def _dbsize(url: str) -> int:
    r = sync_redis.Redis.from_url(url)
    try:
        return int(r.dbsize())
    finally:
        r.close()


def test_the_rule_compares_type_queue_and_decoded_payload_only() -> None:
    info = TaskInfo(id="a" * 32, type="render", queue="gpu", state="PENDING", payload=[1, 2])
    assert same_request(info, "render", "gpu", [1, 2])
    assert not same_request(info, "render", "gpu", [2, 1])
    assert not same_request(info, "upscale", "gpu", [1, 2])
    assert not same_request(info, "render", "cpu", [1, 2])
    check_batch([("k", ("t", "q", {"a": 1})), ("k", ("t", "q", {"a": 1})), ("j", ("t", "q", 2))])
    with pytest.raises(DedupKeyReused) as exc:
        check_batch([("k", ("t", "q", 1)), ("k", ("t", "q", 2))])
    assert exc.value.task_id is None and "another request of this batch" in str(exc.value)


async def test_identical_repeat_answers_the_first_task(client: Client) -> None:
    a = await client.enqueue("noop", {"n": (1, 2)}, queue="q", dedup_key="k", max_attempts=1)
    # options are not part of the rule: a retrying caller's recomputed delay is the same work
    b = await client.enqueue("noop", {"n": [1, 2]}, queue="q", dedup_key="k", delay_ms=5)
    assert a == b
    assert len(await client.history(a)) == 1


@pytest.mark.parametrize(
    "change",
    [{"payload": {"n": 2}}, {"type": "other"}, {"queue": "elsewhere"}, {"payload": None}],
)
async def test_a_different_request_raises_and_writes_nothing(
    client: Client, redis_url: str, change: dict[str, Any]
) -> None:
    first = await client.enqueue("noop", {"n": 1}, dedup_key="render-42")
    before = _dbsize(redis_url)
    req: dict[str, Any] = {"type": "noop", "payload": {"n": 1}, **change}
    with pytest.raises(DedupKeyReused) as exc:
        await client.enqueue(req.pop("type"), req.pop("payload"), dedup_key="render-42", **req)
    assert isinstance(exc.value, RsjobsError)
    assert exc.value.task_id == first and exc.value.dedup_key == "render-42"
    assert first in str(exc.value) and "render-42" in str(exc.value)
    assert _dbsize(redis_url) == before
    assert (await client.get(first)).payload == {"n": 1}
    assert (await client.stats())["default"]["stream_length"] == 1
    with pytest.raises(DedupKeyReused):  # submit (the web's path) applies it too
        await client.submit(EnqueueRequest(type="noop", payload=2, dedup_key="render-42"))


async def test_bulk_checks_every_key_before_the_first_write(client: Client, redis_url: str) -> None:
    first = await client.enqueue("noop", 1, dedup_key="a")
    before = _dbsize(redis_url)
    fresh = [EnqueueRequest(type="noop", payload=i) for i in range(5)]
    with pytest.raises(DedupKeyReused) as exc:  # against a live task
        await client.enqueue_many([*fresh, EnqueueRequest(type="noop", payload=2, dedup_key="a")])
    assert exc.value.task_id == first
    with pytest.raises(DedupKeyReused) as exc:  # two requests of the call
        await client.enqueue_many(
            [
                *fresh,
                EnqueueRequest(type="noop", payload=1, dedup_key="b"),
                EnqueueRequest(type="noop", payload=2, dedup_key="b"),
            ]
        )
    assert exc.value.task_id is None
    assert _dbsize(redis_url) == before  # neither call wrote anything
    ids = await client.enqueue_many(
        [
            EnqueueRequest(type="noop", payload=1, dedup_key="a"),
            EnqueueRequest(type="noop", payload=3, dedup_key="c"),
            EnqueueRequest(type="noop", payload=3, dedup_key="c"),
        ],
        chunk=1,
    )
    assert ids[0] == first and ids[1] == ids[2] != first


async def test_bulk_applies_the_rule_to_a_task_that_appeared_during_the_call(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await client.enqueue("noop", 1, dedup_key="a")

    async def saw_nothing(dedups: list[str]) -> list[None]:  # as if read before `first`
        return [None] * len(dedups)

    monkeypatch.setattr(client.store.tasks, "by_dedup_many", saw_nothing)
    with pytest.raises(DedupKeyReused) as exc:
        await client.enqueue_many(
            [
                EnqueueRequest(type="noop", payload=0),
                EnqueueRequest(type="noop", payload=2, dedup_key="a"),
            ]
        )
    assert exc.value.task_id == first


def test_sync_client_raises_it_too(redis_url: str) -> None:
    with SyncClient.from_url(redis_url, namespace="t") as c:
        tid = c.enqueue("noop", {"n": 1}, dedup_key="k")
        assert c.enqueue("noop", {"n": 1}, dedup_key="k") == tid
        with pytest.raises(DedupKeyReused) as exc:
            c.enqueue("noop", {"n": 2}, dedup_key="k")
        assert exc.value.task_id == tid
        with pytest.raises(DedupKeyReused):
            c.enqueue_many([EnqueueRequest(type="noop", payload=3, dedup_key="k")])
