"""Errors are translated once, at the store's boundary: Redis out of reach is
RedisUnavailable (redis-py's error its cause), any other error reply a StoreError with
the reply in its message, stored data rsjobs cannot read CorruptData. No redis-py
exception reaches a caller (no Redis, and fakeredis)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import fakeredis
import pytest
from redis import exceptions as rx

from rsjobs import Client, CorruptData, RedisUnavailable, Settings, StoreError, connect
from rsjobs.store import Store
from rsjobs.store.isolation import about_item, about_server
from rsjobs.store.record import field
from rsjobs.store.work import Delivery
from rsjobs.workflows import WorkflowClient

TID = "a" * 32


def _calls(store: Store) -> dict[str, Callable[[], Awaitable[Any]]]:
    """One call of every part of the store."""
    stream = store.keys.queue("q")
    return {
        "tasks.get": lambda: store.tasks.get(TID),
        "tasks.stats": store.tasks.stats,
        "tasks.enqueue": lambda: Client(store.redis, store.settings).enqueue("t"),
        "work.read": lambda: store.work.read("w", {stream: "q"}, 10, 0),
        "work.take": lambda: store.work.take("w", ["q"], 10),
        "work.start": lambda: store.work.start("w", 1000, "n", [Delivery(stream, "q", "1-0", TID)]),
        "work.promote_due": lambda: store.work.promote_due("worker"),
        "reaper.queues": store.reaper.queues,
        "reaper.now_ms": store.reaper.now_ms,
        "quarantine.defects": lambda: store.quarantine.defects(TID),
        "workflows.record": lambda: store.workflows.record(TID),
        "workflows.open_tasks": lambda: store.workflows.open_tasks(TID),
        "events.last_id": store.events.last_id,
        "ping": store.ping,
    }


@pytest.fixture
async def unreachable() -> AsyncIterator[Store]:
    store = Store(connect("redis://127.0.0.1:1/0", connect_timeout=1), Settings())
    yield store
    await store.close()


@pytest.mark.parametrize("name", sorted(_calls(Store(fakeredis.FakeAsyncRedis())).keys()))
async def test_every_part_raises_redis_unavailable_when_redis_cannot_be_reached(
    unreachable: Store, name: str
) -> None:
    with pytest.raises(RedisUnavailable) as caught:
        await _calls(unreachable)[name]()
    assert isinstance(caught.value.__cause__, rx.ConnectionError | OSError)
    assert about_server(caught.value) and not about_item(caught.value)


async def test_the_clients_raise_redis_unavailable_too(unreachable: Store) -> None:
    c = Client(unreachable.redis, unreachable.settings)
    with pytest.raises(RedisUnavailable):
        await c.get(TID)
    with pytest.raises(RedisUnavailable):
        await c.cancel(TID)
    wf = WorkflowClient(unreachable.redis, unreachable.settings)
    with pytest.raises(RedisUnavailable):
        await wf.list()


@pytest.fixture
async def fake() -> AsyncIterator[Client]:
    c = Client(fakeredis.FakeAsyncRedis(decode_responses=True), Settings(namespace="t"))
    yield c
    await c.close()


async def test_a_reply_that_is_not_transient_is_a_store_error(fake: Client) -> None:
    await fake.redis.set(fake.keys.task(TID), "not a hash")
    with pytest.raises(StoreError, match="WRONGTYPE") as caught:
        await fake.get(TID)
    assert caught.value.code == "WRONGTYPE" and isinstance(caught.value.__cause__, rx.ResponseError)
    assert about_item(caught.value) and not about_server(caught.value)


async def test_a_script_refusing_its_arguments_is_a_store_error(fake: Client) -> None:
    from rsjobs.store.layout import NewTask

    bad = NewTask(TID, "t", "q", b"null", b'{"max_attempts": 0}')
    with pytest.raises(StoreError, match="rsjobs: invalid option max_attempts"):
        await fake.store.tasks.enqueue("api", [(fake.keys.task_keys(TID, "q"), bad)])
    assert not await fake.redis.exists(fake.keys.task(TID))


@pytest.mark.parametrize(
    "fields, why",
    [({"payload": "{"}, "payload"), ({"attempt": "two"}, "attempt"), ({"result": "[1,"}, "result")],
)
async def test_a_task_hash_that_does_not_read_is_corrupt_data(
    fake: Client, fields: dict[str, str], why: str
) -> None:
    """Client.get of a hash not written by rsjobs raises one clear error (it was msgspec's
    DecodeError, or a ValueError), for get and get_many alike."""
    tid = await fake.enqueue("t", {"ok": True})
    await fake.redis.hset(fake.keys.task(tid), mapping={field(k): v for k, v in fields.items()})
    with pytest.raises(CorruptData, match=why) as caught:
        await fake.get(tid)
    assert caught.value.kind == "task" and caught.value.id == tid
    with pytest.raises(CorruptData):
        await fake.get_many([tid])
