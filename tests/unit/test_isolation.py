"""Which errors are one item's, and how a batch that fails on one item is split."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from redis.exceptions import (
    BusyLoadingError,
    ConnectionError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
)

from rsjobs.errors import PayloadError
from rsjobs.isolation import about_item, about_server, each_alone


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionError("gone"),
        BusyLoadingError("loading"),
        ReadOnlyError("replica"),
        OutOfMemoryError("command not allowed when used memory > 'maxmemory'"),
        ResponseError("BUSY Redis is busy running a script"),
        ResponseError("MISCONF Redis is configured to save RDB snapshots"),
        OSError("network"),
    ],
)
def test_errors_of_redis_itself_are_no_items_fault(exc: Exception) -> None:
    assert about_server(exc) and not about_item(exc)


@pytest.mark.parametrize(
    "exc",
    [
        ResponseError("user_script:12: rsjobs: corrupt task hash x: no id or queue field"),
        ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
        PayloadError("payload is 2000000 bytes, over the limit"),
        ValueError("bad"),
        KeyError("type"),
    ],
)
def test_errors_about_the_data_are_the_items(exc: Exception) -> None:
    assert about_item(exc) and not about_server(exc)


def test_cancellation_is_never_an_item_error() -> None:
    assert not about_item(asyncio.CancelledError())
    assert not about_item(KeyboardInterrupt())


async def test_a_batch_that_succeeds_is_one_call() -> None:
    calls: list[list[int]] = []

    async def call(items: Sequence[int]) -> list[int]:
        calls.append(list(items))
        return [i * 10 for i in items]

    done = await each_alone(call, [1, 2, 3])
    assert done.replies == [[10, 20, 30]] and done.failed == [] and not done.split
    assert calls == [[1, 2, 3]]


async def test_a_batch_that_fails_on_one_item_is_split() -> None:
    async def call(items: Sequence[int]) -> list[int]:
        if 2 in items:
            raise ResponseError("user_script:1: bad item")
        return [i * 10 for i in items]

    done = await each_alone(call, [1, 2, 3])
    assert done.replies == [[10], [30]] and done.split
    assert [(i, str(e)) for i, e in done.failed] == [(2, "user_script:1: bad item")]


async def test_an_error_of_redis_itself_is_raised_as_it_is() -> None:
    async def call(items: Sequence[int]) -> list[int]:
        raise ConnectionError("down")

    with pytest.raises(ConnectionError):
        await each_alone(call, [1, 2])

    seen: list[list[int]] = []

    async def later(items: Sequence[int]) -> list[int]:
        seen.append(list(items))
        if len(items) > 1:
            raise ValueError("bad data somewhere")
        raise OutOfMemoryError("oom")  # the server, while splitting: not the item's fault

    with pytest.raises(OutOfMemoryError):
        await each_alone(later, [1, 2])
    assert seen == [[1, 2], [1]]
