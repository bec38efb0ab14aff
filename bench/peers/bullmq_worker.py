"""bullmq worker process. The Python port has no worker CLI, so this is the small
program its documentation shows: a Worker with a processor, closed on SIGTERM/SIGINT.

Run as ``python -m bench.peers.bullmq_worker CONCURRENCY``.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import Any

from bullmq import Job, Worker

from bench.handler_support import task_ran
from bench.peers.base import redis_url

QUEUE = "bench"


async def process(job: Job, token: str) -> Any:
    await task_ran(job.data["i"])
    return None


async def main(concurrency: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    worker = Worker(QUEUE, process, {"connection": redis_url(), "concurrency": concurrency})
    await stop.wait()
    await worker.close()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
