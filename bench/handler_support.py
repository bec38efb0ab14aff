"""What every system's no-op handler does, identically: wait for the start gate, then
leave proof it ran.

- Proof: each call INCRs a counter in Redis, so a run can prove every task ran exactly
  once, independently of the system's own bookkeeping. In latency runs
  (BENCH_RECORD_STARTS=1) the handler also pushes the wall time at which it started:
  that is how enqueue-to-start latency is measured.
- Gate: in processing runs (BENCH_GATED=1) the workers are already running, warm and
  idle, when the tasks are enqueued. The first tasks they pick up wait here until the
  harness opens the gate, so the processing window starts with all tasks queued and
  contains neither worker start-up nor the producer's enqueueing. At most
  ``concurrency`` tasks per worker wait, and nothing else in the worker is held up.

Why a hand-written client: the systems run with different redis-py versions (or
coredis), whose per-command overheads differ. This tiny pipelined RESP client costs the
same in every worker, so the instrumentation adds the same amount to every system.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from urllib.parse import urlparse

COUNTER_KEY = "bench:counter"
STARTS_KEY = "bench:starts"
GATE_KEY = "bench:go"  # set, then published on (same name), when the gate opens


def _encode(*args: str) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def _address(url: str) -> tuple[str, int]:
    parsed = urlparse(url)
    return parsed.hostname or "127.0.0.1", parsed.port or 6379


class _Connection:
    """One connection shared by all of a worker's handlers; requests are pipelined and
    Redis answers in order, so replies are matched to callers first-in, first-out."""

    def __init__(self, url: str) -> None:
        self._host, self._port = _address(url)
        self._writer: asyncio.StreamWriter | None = None
        self._waiters: deque[asyncio.Future[int]] = deque()
        self._connecting: asyncio.Lock | None = None

    async def _connect(self) -> asyncio.StreamWriter:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._writer is None:
                reader, writer = await asyncio.open_connection(self._host, self._port)
                # Kept on the instance so the reader task is not garbage-collected.
                self._read_task = asyncio.get_running_loop().create_task(self._read(reader))
                self._writer = writer
        return self._writer

    async def _read(self, reader: asyncio.StreamReader) -> None:
        while True:
            line = await reader.readline()
            if not line:
                break
            waiter = self._waiters.popleft()
            if line[:1] == b":":
                waiter.set_result(int(line[1:]))
            else:
                waiter.set_exception(RuntimeError(f"bench counter: {line!r}"))
        while self._waiters:
            self._waiters.popleft().set_exception(ConnectionError("bench counter: closed"))

    async def send(self, *commands: tuple[str, ...]) -> list[int]:
        """Send commands with integer replies in one write; wait for all replies."""
        writer = self._writer or await self._connect()
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in commands]
        self._waiters.extend(futures)
        writer.write(b"".join(_encode(*c) for c in commands))
        return [await f for f in futures]


async def _wait_for_gate(url: str, conn: _Connection) -> None:
    """Return once the harness has opened the gate: subscribe first, then check the key,
    so an opening between the two cannot be missed."""
    reader, writer = await asyncio.open_connection(*_address(url))
    try:
        writer.write(_encode("SUBSCRIBE", GATE_KEY))
        # The subscribe confirmation ends with the subscription count, 1.
        await _read_until(reader, b":1\r\n")
        if (await conn.send(("EXISTS", GATE_KEY)))[0]:
            return
        await _read_until(reader, b"message\r\n")
    finally:
        writer.close()


async def _read_until(reader: asyncio.StreamReader, wanted: bytes) -> None:
    while (line := await reader.readline()) != wanted:
        if not line:
            raise ConnectionError("bench gate: connection closed")


_conn: _Connection | None = None
_gate: asyncio.Task[None] | None = None
_record_starts = os.environ.get("BENCH_RECORD_STARTS") == "1"
_gated = os.environ.get("BENCH_GATED") == "1"


async def task_ran(i: int) -> None:
    """Called first thing by every benchmark handler with the task's index."""
    global _conn, _gate, _gated
    if _conn is None:
        # Created on first use, inside the worker's event loop and after any fork the
        # worker CLI does, never at import time.
        _conn = _Connection(os.environ["BENCH_REDIS_URL"])
    if _gated:
        if _gate is None:
            _gate = asyncio.create_task(_wait_for_gate(os.environ["BENCH_REDIS_URL"], _conn))
        await asyncio.shield(_gate)
        _gated = False
    started = time.time()
    if _record_starts:
        await _conn.send(("RPUSH", STARTS_KEY, f"{i} {started!r}"), ("INCR", COUNTER_KEY))
    else:
        await _conn.send(("INCR", COUNTER_KEY))
