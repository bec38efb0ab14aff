"""rsjobs: Client.enqueue / Client.enqueue_many and the ``rsjobs worker`` CLI."""

from __future__ import annotations

from collections.abc import Sequence

from bench.peers.base import TASK_NAME, chunks, python, redis_url
from bench.peers.rsjobs_app import NAMESPACE, QUEUE
from rsjobs import Client, EnqueueRequest, State

# States of a task that has not finished yet.
_UNFINISHED = (State.PENDING, State.SCHEDULED, State.RUNNING, State.PAUSED)


class RsjobsDriver:
    name = "rsjobs"
    has_bulk = True

    def __init__(self) -> None:
        self._client: Client | None = None
        self._ids: list[str] = []

    @property
    def client(self) -> Client:
        assert self._client is not None, "setup() not called"
        return self._client

    async def setup(self) -> None:
        self._client = Client.from_url(redis_url(), namespace=NAMESPACE)

    async def teardown(self) -> None:
        await self.client.close()

    async def enqueue_one(self, i: int) -> None:
        self._ids.append(await self.client.enqueue(TASK_NAME, {"i": i}, queue=QUEUE))

    async def enqueue_bulk(self, indices: Sequence[int]) -> None:
        for chunk in chunks(indices):
            requests = [
                EnqueueRequest(type=TASK_NAME, payload={"i": i}, queue=QUEUE) for i in chunk
            ]
            self._ids.extend(await self.client.enqueue_many(requests))

    def worker_argv(self, concurrency: int) -> list[str]:
        return [
            python(),
            "-m",
            "rsjobs",
            "--url",
            redis_url(),
            "--namespace",
            NAMESPACE,
            # per-task logging is off for every system
            "--log-level",
            "WARNING",
            "worker",
            "bench.peers.rsjobs_app:tasks",
            "--queue",
            QUEUE,
            "--concurrency",
            str(concurrency),
        ]

    async def outstanding(self) -> int:
        # Live per-state counts of the queue, from rsjobs's own stats.
        stats = (await self.client.stats()).get(QUEUE, {})
        return sum(stats.get(s, 0) for s in _UNFINISHED)

    async def verify(self, n: int) -> list[str]:
        problems: list[str] = []
        stats = (await self.client.stats()).get(QUEUE, {})
        succeeded_total = stats.get(State.SUCCEEDED, 0)
        if succeeded_total != n:
            problems.append(f"rsjobs: stats say {succeeded_total} succeeded, expected {n}")
        if len(self._ids) != n:
            problems.append(f"rsjobs: {len(self._ids)} tasks enqueued, expected {n}")
        states: dict[str, int] = {}
        for start in range(0, len(self._ids), 1000):
            for info in await self.client.get_many(self._ids[start : start + 1000]):
                state = "missing" if info is None else str(info.state)
                states[state] = states.get(state, 0) + 1
        succeeded = states.pop(State.SUCCEEDED, 0)
        if succeeded != len(self._ids) or states:
            problems.append(f"rsjobs: {succeeded} tasks SUCCEEDED, others: {states}")
        return problems


def make_driver() -> RsjobsDriver:
    return RsjobsDriver()
