"""rsjobs with its shared-queue features in use (``rsjobs-pools``): every task has one of
eight owners and one of four priority levels, and the queue holds each owner to its
share of the run's worker slots (workers x concurrency / 8: 4 for one worker of 32, 8
for two), so that the limits bind all along (an owner at its limit has its next tasks
held back while the others' run) without capping the run below its slots. The same
client calls, worker CLI and checks as :mod:`bench.peers.rsjobs_driver`; only the
tasks' owner and priority and the queue's limit differ."""

from __future__ import annotations

from collections.abc import Sequence

from bench.peers.base import TASK_NAME, chunks
from bench.peers.rsjobs_app import QUEUE
from bench.peers.rsjobs_driver import RsjobsDriver
from rsjobs import EnqueueRequest

#: owners, and the priority levels used
OWNERS = 8
LEVELS = (0, 3, 6, 9)


def owner_of(i: int) -> str:
    # (every level gets every owner: owners go round within a level)
    return f"o{(i // len(LEVELS)) % OWNERS}"


def priority_of(i: int) -> int:
    return LEVELS[i % len(LEVELS)]


class RsjobsPoolsDriver(RsjobsDriver):
    name = "rsjobs-pools"

    def __init__(self) -> None:
        super().__init__()
        #: each owner's limit on the queue (see prepare)
        self.limit = 4

    def prepare(self, workers: int, concurrency: int) -> None:
        """Size the owners' limit by the run's slots (bench.measure calls this first)."""
        self.limit = max(1, workers * concurrency // OWNERS)

    async def setup(self) -> None:
        await super().setup()
        await self.client.set_limit(QUEUE, self.limit)

    async def enqueue_one(self, i: int) -> None:
        self._ids.append(
            await self.client.enqueue(
                TASK_NAME, {"i": i}, queue=QUEUE, owner=owner_of(i), priority=priority_of(i)
            )
        )

    async def enqueue_bulk(self, indices: Sequence[int]) -> None:
        for chunk in chunks(indices):
            requests = [
                EnqueueRequest(
                    type=TASK_NAME,
                    payload={"i": i},
                    queue=QUEUE,
                    owner=owner_of(i),
                    priority=priority_of(i),
                )
                for i in chunk
            ]
            self._ids.extend(await self.client.enqueue_many(requests))


def make_driver() -> RsjobsPoolsDriver:
    return RsjobsPoolsDriver()
