"""Master failovers of the session's Redis Cluster while a producer, worker processes, an
in-process worker and a reaper process run: a coordinated ``CLUSTER FAILOVER``, then
``kill -9`` of the master serving the namespace (twice: the second time the node the
control channel is subscribed on). No process exits; every acknowledged task ends
SUCCEEDED with exactly one accepted completion; cancel notices reach handlers again."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path

from rsjobs import Client, Settings, connect
from rsjobs.store.cluster import slot_of
from rsjobs.store.keys import Keys
from tests.cluster.test_lifecycle import NS, running_worker
from tests.support.load import Load
from tests.support.processes import spawn_worker, stop_process, wait_for_state
from tests.support.reaper import spawn_reaper, terminal_transitions, wait_registered
from tests.support.reference import replay
from tools.topology import Cluster

LEASE_MS = 1500
#: acknowledged submits between two faults
STEP = 20


def _alive(procs: dict[str, subprocess.Popen[bytes]], logs: Path) -> None:
    dead = {n: p.returncode for n, p in procs.items() if p.poll() is not None}
    if dead:
        tails = {n: (logs / f"{n}.log").read_text()[-3000:] for n in dead}
        raise AssertionError(f"processes exited: {dead}\n{tails}")


async def test_processes_ride_through_failovers_and_kills(
    redis_cluster: Cluster, cluster_url: str, tmp_path: Path
) -> None:
    owner = redis_cluster.owner(slot_of(Keys(NS).layout))
    procs: dict[str, subprocess.Popen[bytes]] = {}
    for name in ("fw1", "fw2"):
        with (tmp_path / f"{name}.log").open("wb") as log:
            procs[name] = spawn_worker(
                cluster_url, NS, "--name", name, "--lease-ms", str(LEASE_MS), "-c", "4",
                "--grace-ms", "500", app="tests.support.reaper_apps:tasks", stderr=log,
            )  # fmt: skip
    procs["reaper"] = spawn_reaper(cluster_url, NS, str(tmp_path / "reaper.log"),
                                   "--interval-ms", "200", "--lease-ms", str(LEASE_MS))  # fmt: skip
    # submits confirmed by the replica (durable mode): without WAIT, a submit the killed
    # master acknowledged just before it died may be lost lawfully
    client = Client(
        connect(cluster_url), Settings(namespace=NS, wait_replicas=1, wait_timeout_ms=2000)
    )
    # a steady load, paced by the tasks' own ends; between two faults the test waits for
    # so many more acknowledged submits (the system's progress, not a timer)
    load = Load(client, "sleep", {"s": 0.05}, lanes=4)
    try:
        await wait_registered(client, ["fw1", "fw2"], timeout=30)
        # a long lease: only a notice, not a heartbeat, can stop its handler within 1 s
        async with running_worker(cluster_url, lease_ms=30_000, queues=["slow"]) as slow:
            load.start()
            await load.more(STEP)
            first = await asyncio.to_thread(redis_cluster.failover, owner)
            await load.more(STEP)
            async with load.outage():
                redis_cluster.kill(first)  # the namespace's master
                back = await asyncio.to_thread(redis_cluster.wait_replaced, first)
                await asyncio.to_thread(redis_cluster.heal)
            await load.more(STEP)
            async with load.outage():
                redis_cluster.kill(back)  # the node the control channel was subscribed on
                await asyncio.to_thread(redis_cluster.wait_replaced, back)
                await asyncio.to_thread(redis_cluster.heal)
            await load.more(STEP)
            await load.stop()
            _alive(procs, tmp_path)
            acked = load.acked

            assert len(acked) > 50, (len(acked), load.refused)
            for tid in acked:
                info = await client.wait(tid, timeout_ms=30_000)
                assert info.state == "SUCCEEDED", info
                entries = await client.history(tid)
                assert len(terminal_transitions(entries)) == 1, entries
                assert replay(entries) == [], entries

            # the control channel is subscribed again: a cancel stops a handler at once
            tid = await client.enqueue("sleep", {"s": 30}, queue="slow")
            await wait_for_state(client, tid, "RUNNING", timeout=15)
            t0 = time.monotonic()
            await client.cancel(tid)
            while tid in slow.jobs:
                await asyncio.sleep(0.01)
                assert time.monotonic() - t0 < 1.5, "the cancel notice did not arrive"
        _alive(procs, tmp_path)
    finally:
        await load.stop()
        for p in procs.values():
            stop_process(p, signal.SIGTERM)
        await client.close()
