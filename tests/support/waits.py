"""Waits driven by the system under test, not by the clock: a condition is checked again
each time the namespace's events stream gets an entry (XREAD BLOCK), so a test waits
exactly as long as the thing it waits for takes, and burns no fixed sleep.

Every task transition (enqueue, start, finish, retry, reclaim, cancel...) adds an entry
to the events stream of the task's shard, so a condition on tasks' states, counts or
histories becomes true right after such an entry. For a condition that no event marks,
use :func:`poll_until` (:func:`wait_until` in synchronous code): it polls with short
sleeps, bounded by a timeout. These helpers are the suite's one way to wait on a condition
(the real-time sleep check, ``tests/support/sleeps.py``, counts the sleeps of test modules,
not theirs): a test never sleeps a fixed time in their place."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

from redis.asyncio import Redis
from redis.asyncio.client import PubSub

from rsjobs import Client, TaskInfo
from rsjobs.store.events import Events

T = TypeVar("T")

__all__ = [
    "keyspace",
    "notified",
    "on_events",
    "on_keys",
    "poll_until",
    "wait_for_state",
    "wait_until",
]


async def on_events(
    events: Events,
    check: Callable[[], Awaitable[T | None]],
    timeout: float,
    what: str = "condition",
) -> T:
    """The first truthy value of ``check()``, evaluated now and again after each batch of
    new entries on ``events`` (a blocking read: no entry, no wake-up). AssertionError
    after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    cursor = await events.last_id()  # before the check: a later change is an entry after it
    while True:
        value = await check()
        if value:
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{what}: not reached in {timeout} s")
        rows = await events.read(cursor, 1000, max(1, int(left * 1000)))
        if rows:
            cursor = rows[-1][0]


async def wait_for_state(
    client: Client, task_id: str, states: Sequence[str] | str, timeout: float = 10.0
) -> TaskInfo:
    """Until the task is in one of ``states`` (any state, terminal or not): read again
    each time its shard's events stream gets an entry."""
    wanted = {states} if isinstance(states, str) else set(states)
    events = (await client.store.at(task_id)).events

    async def check() -> TaskInfo | None:
        info = await client.get(task_id)
        return info if info.state in wanted else None

    try:
        return await on_events(events, check, timeout)
    except AssertionError:
        info = await client.get(task_id)
        raise AssertionError(f"task {task_id} is {info.state}, expected {sorted(wanted)}") from None


async def poll_until(
    check: Callable[[], Awaitable[T | None]],
    timeout: float,
    what: str = "condition",
    every: float = 0.01,
) -> T:
    """The first truthy value of ``check()``, polled every ``every`` seconds: for what no
    event marks (a process's registration, a subscription). Its sleeps are real sleeps
    of the test: keep what it waits for short."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached in {timeout} s")
        await asyncio.sleep(every)


@contextlib.asynccontextmanager
async def keyspace(redis: Redis, flags: str, *channels: str) -> AsyncIterator[PubSub]:
    """Subscribed to keyspace notifications (``CONFIG SET notify-keyspace-events flags``)
    of ``redis`` on ``channels`` (e.g. ``__keyevent@0__:expired``): what Redis does to its
    keys, told as it happens. Subscribed before the body runs: nothing is missed. The
    server's setting is put back afterwards (notifications cost Redis a little on every
    write)."""
    before = (await redis.config_get("notify-keyspace-events"))["notify-keyspace-events"]
    await redis.config_set("notify-keyspace-events", "".join(sorted(set(before + flags))))
    pubsub = redis.pubsub()
    try:
        await pubsub.subscribe(*channels)
        yield pubsub
    finally:
        await pubsub.aclose()
        await redis.config_set("notify-keyspace-events", before)


async def notified(pubsub: PubSub, count: Callable[[str], int], n: int, timeout: float) -> None:
    """Until the messages on ``pubsub`` add up to ``n`` by ``count`` (of each message's
    data, as text), blocking on the subscription (no polling)."""
    deadline = time.monotonic() + timeout
    seen = 0
    while seen < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{seen} of {n} notifications in {timeout} s")
        msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=left)
        if msg is not None:
            data = msg["data"]
            seen += count(data.decode() if isinstance(data, bytes) else str(data))


async def on_keys(
    redis: Redis,
    keys: Sequence[str],
    check: Callable[[], Awaitable[T | None]],
    timeout: float,
    what: str = "condition",
) -> T:
    """The first truthy value of ``check()``, evaluated now and again each time Redis
    tells of a write to one of ``keys`` (keyspace notifications, all events): for what
    the events stream does not mark (a hook's runs, a registration)."""
    db = redis.connection_pool.connection_kwargs.get("db", 0)
    channels = [f"__keyspace@{db}__:{key}" for key in keys]
    deadline = time.monotonic() + timeout
    async with keyspace(redis, "KA", *channels) as told:
        while True:
            value = await check()
            if value:
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{what}: not reached in {timeout} s")
            if await told.get_message(ignore_subscribe_messages=True, timeout=left):
                while await told.get_message(ignore_subscribe_messages=True, timeout=0):
                    pass  # (the batch so far: one check for all of them)


def wait_until(check: Callable[[], T | None], timeout: float, what: str = "condition") -> T:
    """The first truthy value of ``check()``, polled every 20 ms (synchronous code: a
    process's registration, a line in its log); AssertionError naming ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached in {timeout} s")
        time.sleep(0.02)
