"""Client CPU per task on a Redis Cluster beside a standalone Redis: what the cluster
client (routing by slot, one pipelined script connection per master) costs the Python
process, over the hot path of a task (enqueue, start, finish).

Starts a standalone Redis and a local 3-master cluster (the session's ``redis-server``,
loopback; ``tools.topology.Cluster``), and per round and topology drives ``--tasks``
tasks through the store as a producer and a worker would: concurrent enqueues (100 in
flight), then deliveries read 32 at a time, started and finished in batches. It reports
``time.process_time()`` of this process per task (the servers' CPU is theirs): the
median over ``--rounds`` (topologies interleaved) and the fastest round (on a machine
shared with other load, the least disturbed one), each as a ratio cluster / standalone
(rsjobs's target: at most 1.3). Routing a script call costs the cluster client about
1.5 µs over the lane's own call; the rest of any difference is the machine's noise.
``--no-lanes`` adds the cluster without its pipelined connections (every script through
redis-py's pool), the cost the lanes save.

    .venv/bin/python -m bench.cluster_cpu [--tasks 2000] [--rounds 3] [--no-lanes]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any

from rsjobs import Client, Settings, connect
from rsjobs.server import EmbeddedRedis
from rsjobs.store.cluster import ClusterRedis
from rsjobs.store.layout import Ending
from tools.topology import Cluster

BATCH = 32
IN_FLIGHT = 100


async def one_round(redis: Any, namespace: str, tasks: int) -> float:
    """Client CPU seconds per task of ``tasks`` tasks through enqueue, start and finish."""
    client = Client(redis, Settings(namespace=namespace))
    work = client.store.work
    stream = client.keys.queue("default")
    await client.store.require_layout()
    await work.ensure_groups([stream])
    cpu0 = time.process_time()
    for first in range(0, tasks, IN_FLIGHT):
        last = min(first + IN_FLIGHT, tasks)
        await asyncio.gather(*(client.enqueue("noop", {"i": i}) for i in range(first, last)))
    finished = 0
    while finished < tasks:
        deliveries = await work.read("bench", {stream: "default"}, BATCH, None)
        if not deliveries:
            raise RuntimeError(f"only {finished} of {tasks} tasks were delivered")
        started = await work.start("bench", 60_000, "n", deliveries)
        items = [
            (client.keys.task_keys(d.task_id, d.queue), _done(s.lease))
            for d, s in zip(deliveries, started, strict=True)
        ]
        await work.finish(items)
        finished += len(items)
    return (time.process_time() - cpu0) / tasks


def _done(lease: str) -> Ending:
    return Ending("COMPLETE", lease, "{}", "", 0, -1, 0.5)


def _without_lanes(redis: ClusterRedis) -> ClusterRedis:
    """The cluster client with every node's lane taken away (scripts through the pool)."""
    make = redis.node_client

    def node_client(address: tuple[str, int]) -> Any:
        node = make(address)
        node.lane = None
        return node

    redis.node_client = node_client  # type: ignore[method-assign]
    return redis


async def measure(tasks: int, rounds: int, no_lanes: bool) -> dict[str, list[float]]:
    server = EmbeddedRedis()
    server.start()
    cluster = Cluster(masters=3, replicas=0)
    cluster.start()
    makers: dict[str, Callable[[], Any]] = {
        "standalone": lambda: connect(server.url),
        "cluster": lambda: connect(cluster.url),
    }
    if no_lanes:
        makers["cluster without lanes"] = lambda: _without_lanes(connect(cluster.url))
    out: dict[str, list[float]] = {name: [] for name in makers}
    try:
        for r in range(rounds):
            for name, make in makers.items():
                redis = make()
                try:
                    await one_round(redis, f"warm{r}", 200)  # connections, scripts loaded
                    out[name].append(await one_round(redis, f"cpu{r}", tasks))
                finally:
                    await redis.aclose()
    finally:
        cluster.cleanup()
        server.cleanup()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cluster_cpu", description=__doc__)
    p.add_argument("--tasks", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-lanes", action="store_true", help="also the cluster without lanes")
    args = p.parse_args(argv)
    results = asyncio.run(measure(args.tasks, args.rounds, args.no_lanes))
    base = statistics.median(results["standalone"])
    fast = min(results["standalone"])
    print(f"client CPU per task (enqueue + start + finish), {args.tasks} tasks, "
          f"{args.rounds} rounds: median (x standalone), fastest (x standalone)")  # fmt: skip
    for name, values in results.items():
        med, low = statistics.median(values), min(values)
        rounds = " ".join(f"{v * 1e6:.0f}" for v in values)
        print(f"  {name:<24} {med * 1e6:6.1f} µs ({med / base:.2f}x)  "
              f"{low * 1e6:6.1f} µs ({low / fast:.2f}x)   rounds: {rounds} µs")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
