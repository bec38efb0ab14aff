"""One rsjobs worker process for the soak:
``python -m bench.soak_worker URL NAMESPACE QUEUE RETENTION_MS CONCURRENCY``.

The soak needs finished tasks to expire inside the run, and the ``rsjobs worker`` CLI
has no retention option (its workers keep finished tasks for ``Settings``' default, 7
days). So this process runs rsjobs's own ``Worker`` through its public Python API, with
``Settings(retention_ms=...)`` and the benchmark's registry (``bench.peers.rsjobs_app``:
a no-op handler that INCRs the bench counter, so the run can prove every task ran once).
It stops gracefully on SIGTERM, as the CLI does.
"""

from __future__ import annotations

import asyncio
import logging
import sys

from bench.peers.rsjobs_app import tasks
from rsjobs import Settings, Worker


async def _run(url: str, namespace: str, queue: str, retention_ms: int, concurrency: int) -> None:
    worker = Worker(
        tasks,
        url=url,
        settings=Settings(namespace=namespace, retention_ms=retention_ms),
        queues=[queue],
        concurrency=concurrency,
    )
    try:
        await worker.run()
    finally:
        await worker.redis.aclose()


def main(argv: list[str]) -> int:
    if len(argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    url, namespace, queue, retention_ms, concurrency = argv
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(_run(url, namespace, queue, int(retention_ms), int(concurrency)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
