"""A steady load for the failover tests: a few lanes, each submitting a task and waiting
for it to finish before the next (a closed loop: the pace is the system's, no timer), and
a way to wait until so many more submits were acknowledged."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from rsjobs import Client, NotReplicated, RsjobsError

__all__ = ["Load"]


class Load:
    """``lanes`` producers of ``type`` tasks with ``payload`` on ``client``. ``acked``:
    the ids of the acknowledged submits; ``refused``: the submits refused while Redis
    settled (a refused submit is retried after ``backoff`` seconds, by one lane at a time:
    the others wait for it to get through)."""

    def __init__(
        self,
        client: Client,
        type: str,
        payload: dict[str, object],
        *,
        lanes: int = 4,
        backoff: float = 0.05,
    ) -> None:
        self.client, self.type, self.payload = client, type, payload
        self.lanes, self.backoff = lanes, backoff
        self.acked: list[str] = []
        self.refused = 0
        self._stop = asyncio.Event()
        self._up = asyncio.Event()
        self._up.set()
        self._probing = False
        self._acks = asyncio.Condition()
        self._down = asyncio.Event()  # within outage()
        self._back = asyncio.Event()  # set when it ends
        self._back.set()
        self._tasks: list[asyncio.Task[None]] = []

    @contextlib.asynccontextmanager
    async def outage(self) -> AsyncIterator[None]:
        """A fault the test makes and ends (a master killed until its replica takes over):
        within it, a lane whose submit is refused waits for its end, not on a timer."""
        self._down.set()
        self._back.clear()
        try:
            yield
        finally:
            self._down.clear()
            self._back.set()

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._lane()) for _ in range(self.lanes)]

    async def stop(self) -> None:
        self._stop.set()
        self._up.set()
        self._back.set()
        await asyncio.gather(*self._tasks)

    async def more(self, n: int, timeout: float = 60) -> None:
        """Until ``n`` more submits than now are acknowledged."""
        target = len(self.acked) + n
        async with self._acks:
            await asyncio.wait_for(self._acks.wait_for(lambda: len(self.acked) >= target), timeout)

    async def _lane(self) -> None:
        while not self._stop.is_set():
            await self._up.wait()  # another lane is getting a refused submit through
            if self._stop.is_set():
                return
            try:
                tid = await self.client.enqueue(self.type, dict(self.payload))
            except (OSError, NotReplicated):  # while the cluster settles
                self.refused += 1
                if self._down.is_set():
                    await self._back.wait()  # the test ends the fault, then it is retried
                    continue
                if self._probing:
                    continue  # (the prober's backoff is the only one)
                self._probing = True
                self._up.clear()
                await asyncio.sleep(self.backoff)
                self._probing = False
                self._up.set()
                continue
            async with self._acks:
                self.acked.append(tid)
                self._acks.notify_all()
            # its end (or a bounded wait: a lane is not held up by one task)
            with contextlib.suppress(RsjobsError, OSError):
                await self.client.wait(tid, timeout_ms=2000)
