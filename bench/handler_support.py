"""The one thing every system's no-op handler does, identically: leave proof it ran.

Each handler call INCRs a counter in Redis so that a run can prove every task ran
exactly once, independently of the system's own bookkeeping. In latency runs the
worker is started with BENCH_RECORD_STARTS=1 and the handler also pushes the wall
time at which it started, which is how enqueue-to-start latency is measured.

This uses redis-py's asyncio client, the same for every system (streaq included), so
the instrumentation cost per task is the same whichever system runs the handler.
"""

from __future__ import annotations

import os
import time

from redis.asyncio import Redis

COUNTER_KEY = "bench:counter"
STARTS_KEY = "bench:starts"

_client: Redis | None = None
_record_starts = os.environ.get("BENCH_RECORD_STARTS") == "1"


def _redis() -> Redis:
    # Created lazily inside the worker's running event loop (and after any fork the
    # worker CLI does), never at import time.
    global _client
    if _client is None:
        _client = Redis.from_url(os.environ["BENCH_REDIS_URL"])
    return _client


async def task_ran(i: int) -> None:
    """Called first thing by every benchmark handler with the task's index."""
    started = time.time()
    r = _redis()
    if _record_starts:
        async with r.pipeline(transaction=False) as pipe:
            pipe.rpush(STARTS_KEY, f"{i} {started!r}")
            pipe.incr(COUNTER_KEY)
            await pipe.execute()
    else:
        await r.incr(COUNTER_KEY)
