"""What the soak reads about its tasks while they flow: how many Redis still holds, and
how long they waited to start. Both through ``Client.get_many`` only.

- ``Retained``: the ids of every task enqueued and not yet seen gone, oldest first.
  Finished tasks expire in about the order they finished, which is about the order they
  were enqueued, so the tasks Redis still holds are the tail of that list: each count
  reads the head in chunks, drops the leading run of tasks that are gone, and counts
  what is left, less the gone ones inside the first chunk that still holds a task
  (finishing slightly out of order). Reading an expired key makes Redis delete it on
  the spot, so the count and ``used_memory`` agree even where Redis' own expiry cycle
  lags behind; the sampling's reads are part of the run.
- ``LatencySampler``: every k-th task is read back once it has finished; its wait is
  ``started_at - created_at``, both Redis TIME in ms (so each figure is within ±1 ms),
  and its ``finished_at`` times the deciles' throughput.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from itertools import islice

from rsjobs import Client

_CHUNK = 500


class Retained:
    """Counts the soak's tasks that Redis still holds (see the module docstring)."""

    def __init__(self) -> None:
        self._ids: deque[str] = deque()
        self.gone = 0  # tasks seen gone and dropped from the list

    def add(self, ids: list[str]) -> None:
        self._ids.extend(ids)

    async def count(self, client: Client) -> int:
        while self._ids:
            chunk = list(islice(self._ids, 0, _CHUNK))
            infos = await client.get_many(chunk)
            lead = 0
            while lead < len(infos) and infos[lead] is None:
                lead += 1
            for _ in range(lead):
                self._ids.popleft()
            self.gone += lead
            if lead < len(infos):
                return len(self._ids) - sum(1 for i in infos[lead:] if i is None)
        return 0


@dataclass
class LatencySample:
    index: int  # the task's position in the run (0 = first enqueued)
    wait_ms: int  # started_at - created_at
    finished_at: int  # Redis TIME, ms


@dataclass
class LatencySampler:
    """Every ``every``-th task enqueued is read back once it has finished."""

    every: int
    _waiting: deque[tuple[int, str]] = field(default_factory=deque)
    samples: list[LatencySample] = field(default_factory=list)
    lost: int = 0  # sampled tasks that were gone before they could be read

    def add(self, first_index: int, ids: list[str]) -> None:
        for k, tid in enumerate(ids):
            if (first_index + k) % self.every == 0:
                self._waiting.append((first_index + k, tid))

    async def collect(self, client: Client) -> list[LatencySample]:
        """Read the sampled tasks that have finished by now; returns the new samples."""
        new: list[LatencySample] = []
        # Oldest first, a chunk at a time, up to the chunk where most have not finished:
        # the later ones were enqueued after those, so the reads per sample stay bounded
        # by the tasks finished since the last one, however long the queue gets.
        while self._waiting:
            part = list(islice(self._waiting, 0, _CHUNK))
            infos = await client.get_many([tid for _, tid in part])
            unfinished: list[tuple[int, str]] = []
            for (index, tid), info in zip(part, infos, strict=True):
                if info is None:
                    self.lost += 1
                elif info.finished_at:
                    wait = info.started_at - info.created_at
                    new.append(LatencySample(index, wait, info.finished_at))
                else:
                    unfinished.append((index, tid))  # next time
            for _ in part:
                self._waiting.popleft()
            self._waiting.extendleft(reversed(unfinished))
            if len(unfinished) > len(part) // 2:
                break
        self.samples += new
        return new
