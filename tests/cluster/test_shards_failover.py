"""Failovers of a cluster serving a namespace of 8 shards under load: a producer (durable
submits), worker processes and a reaper process run while each master in turn is failed
over (``CLUSTER FAILOVER``), then one master is killed (``kill -9``). No process exits;
every acknowledged task ends SUCCEEDED with exactly one accepted completion; a cancel
still reaches a handler at once afterwards."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path

from rsjobs import Client, Settings, connect
from rsjobs.store.cluster import slot_of
from rsjobs.store.shards import shard_of
from tests.cluster.test_shards import NS, S, running_worker
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


async def test_processes_ride_through_a_failover_of_each_master(
    redis_cluster: Cluster, cluster_url: str, tmp_path: Path
) -> None:
    client = Client(
        connect(cluster_url),
        Settings(namespace=NS, shards=S, wait_replicas=1, wait_timeout_ms=2000),
    )
    await client.store.require_layout()  # the namespace's 8 shards, before any process
    tags = (await client.store.open()).tags
    procs: dict[str, subprocess.Popen[bytes]] = {}
    for name in ("sw1", "sw2"):
        with (tmp_path / f"{name}.log").open("wb") as log:
            procs[name] = spawn_worker(
                cluster_url, NS, "--name", name, "--lease-ms", str(LEASE_MS), "-c", "8",
                "--grace-ms", "500", app="tests.support.reaper_apps:tasks", stderr=log,
            )  # fmt: skip
    procs["reaper"] = spawn_reaper(cluster_url, NS, str(tmp_path / "reaper.log"),
                                   "--interval-ms", "200", "--lease-ms", str(LEASE_MS))  # fmt: skip
    # a steady load, paced by the tasks' own ends; between two faults the test waits for
    # so many more acknowledged submits (the system's progress, not a timer)
    load = Load(client, "sleep", {"s": 0.05}, lanes=4)
    try:
        await wait_registered(client, ["sw1", "sw2"], timeout=30)
        async with running_worker(cluster_url, lease_ms=30_000, queues=["slow"]) as slow:
            load.start()
            await load.more(STEP)
            for master in list(redis_cluster.masters()):  # each master, one at a time
                await asyncio.to_thread(redis_cluster.failover, master)
                await load.more(STEP // 2)
            victim = redis_cluster.owner(slot_of(f"{{{tags[0]}}}"))
            async with load.outage():
                redis_cluster.kill(victim)
                await asyncio.to_thread(redis_cluster.wait_replaced, victim)
                await asyncio.to_thread(redis_cluster.heal)
            await load.more(STEP)
            await load.stop()
            _alive(procs, tmp_path)
            acked = load.acked

            assert len(acked) > 50, (len(acked), load.refused)
            assert {shard_of(t) for t in acked} == set(range(S))
            for tid in acked:
                info = await client.wait(tid, timeout_ms=30_000)
                assert info.state == "SUCCEEDED", info
                entries = await client.history(tid)
                assert len(terminal_transitions(entries)) == 1, entries
                assert replay(entries) == [], entries

            # the control channels are subscribed again: a cancel stops a handler at once
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
