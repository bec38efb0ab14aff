"""A client of the session's Redis that answers every call with an error reply while told
to: the commands through its pool, the scripts over its lane, pipelines and pub/sub.
Used to check that each passing reply is treated as passing everywhere (worker, reaper,
web app, clients)."""

from __future__ import annotations

import asyncio
from typing import Any

from redis import exceptions as rx
from redis.asyncio.client import Pipeline, PubSub

from rsjobs.store.lane import LaneRedis, classify

#: every error reply the policy calls passing that a cluster, a failover or a restart
#: answers, as Redis words it
PASSING_REPLIES = {
    "MOVED": "MOVED 3999 127.0.0.1:6381",
    "ASK": "ASK 3999 127.0.0.1:6381",
    "TRYAGAIN": "TRYAGAIN Multiple keys request during rehashing of slot",
    "CLUSTERDOWN": "CLUSTERDOWN The cluster is down",
    "LOADING": "LOADING Redis is loading the dataset in memory",
    "READONLY": "READONLY You can't write against a read only replica.",
    "MASTERDOWN": "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
    "UNBLOCKED": "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)",
}


def error_for(reply: str, classed: bool) -> rx.RedisError:
    """The exception a client raises for ``reply``: with ``classed``, the class redis-py 8
    (and the lane) gives it; else a plain ``ResponseError`` with the code in its message,
    as redis-py 5.2 raises the cluster's replies."""
    err = classify(reply)
    if classed or type(err) is rx.ResponseError:
        return err
    if isinstance(err, rx.AskError | rx.TryAgainError | rx.ClusterDownError):
        return rx.ResponseError(reply)
    return err


class FaultyRedis(LaneRedis):  # type: ignore[misc]
    """:class:`LaneRedis` plus :attr:`fault`: while set, every call raises it."""

    fault: rx.RedisError | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.raised = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        lane = self.lane
        if lane is not None:
            call = lane.call

            async def faulty_call(*a: Any) -> Any:
                self.check()
                return await call(*a)

            lane.call = faulty_call  # type: ignore[method-assign]

    def check(self) -> None:
        if self.fault is not None:
            self.raised += 1
            for n, waiter in self._waiters:
                if self.raised >= n and not waiter.done():
                    waiter.set_result(None)
            raise self.fault

    async def met(self, n: int, timeout: float = 15.0) -> None:
        """Until ``n`` calls in all have met a fault: the calls of the code under test, as
        it makes them (no timer of the test's)."""
        if self.raised >= n:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (n, waiter)
        self._waiters.append(entry)
        try:
            await asyncio.wait_for(waiter, timeout)
        finally:
            self._waiters.remove(entry)

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        self.check()
        return await super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Pipeline:
        return _Pipeline(self, transaction)

    def pubsub(self, **kwargs: Any) -> PubSub:
        return _PubSub(self, **kwargs)


class _Pipeline(Pipeline):  # type: ignore[misc]
    def __init__(self, owner: FaultyRedis, transaction: bool) -> None:
        super().__init__(owner.connection_pool, owner.response_callbacks, transaction, None)
        self.owner = owner

    async def execute(self, raise_on_error: bool = True) -> Any:
        try:
            self.owner.check()
        except rx.RedisError:
            await self.reset()
            raise
        return await super().execute(raise_on_error)


class _PubSub(PubSub):  # type: ignore[misc]
    def __init__(self, owner: FaultyRedis, **kwargs: Any) -> None:
        super().__init__(owner.connection_pool, **kwargs)
        self.owner = owner

    async def subscribe(self, *args: Any, **kwargs: Any) -> Any:
        self.owner.check()
        return await super().subscribe(*args, **kwargs)

    async def parse_response(self, block: bool = True, timeout: float = 0) -> Any:
        self.owner.check()
        return await super().parse_response(block, timeout)
