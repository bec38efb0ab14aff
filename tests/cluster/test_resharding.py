"""A slot migration and a failover of the session's Redis Cluster under clients: the
namespace's slot moved to another master step by step (``CLUSTER SETSLOT IMPORTING`` /
``MIGRATING``, ``MIGRATE`` of a few keys at a time, ``SETSLOT NODE``) while a producer
enqueues and a reader reads tasks in pipelines; and clients left idle while the
namespace's master is killed and replaced. Each test gives the cluster back as it found
it (the slot to its master, the killed node back as a replica)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from rsjobs import Client, ConfigError, RedisUnavailable, Settings, SlotMigrating, connect
from rsjobs.cli import main as cli_main
from rsjobs.store.cluster import slot_of
from rsjobs.store.keys import Keys
from tools.topology import Cluster

NS = "t"
#: an enqueue to the moving slot ends (done or refused) within this long
ENQUEUE_BOUND = 2.0


async def _until(
    progress: asyncio.Condition, ok: Callable[[], bool], timeout: float, what: str
) -> None:
    """Until ``ok()``, rechecked each time ``progress`` is notified (bounded)."""
    async with progress:
        try:
            await asyncio.wait_for(progress.wait_for(ok), timeout)
        except TimeoutError:
            raise AssertionError(what) from None


async def test_reads_and_enqueues_ride_through_a_slot_migration(
    redis_cluster: Cluster, cluster_url: str
) -> None:
    slot = slot_of(Keys(NS).layout)
    source = redis_cluster.owner(slot)
    target = next(m for m in redis_cluster.masters() if m != source)
    client = Client(connect(cluster_url), Settings(namespace=NS))
    acked = [await client.enqueue("sleep", {"s": 0}) for _ in range(40)]
    reads = 0
    read_failures: list[BaseException] = []
    enqueued = 0
    refused: list[tuple[float, BaseException]] = []
    stop = asyncio.Event()
    #: notified when the reader or the producer ends a call, and at the stop
    progress = asyncio.Condition()

    async def moved_on() -> None:
        async with progress:
            progress.notify_all()

    async def halt() -> None:
        stop.set()
        await moved_on()

    async def produce() -> None:
        """One enqueue per read of the reader: paced by the reader's progress."""
        nonlocal enqueued
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                acked.append(await client.enqueue("sleep", {"s": 0}))
                enqueued += 1
            except RedisUnavailable as exc:
                refused.append((time.monotonic() - t0, exc))
            r = reads

            def read_since() -> bool:
                return reads > r or stop.is_set()  # noqa: B023 - awaited right here

            await moved_on()
            await _until(progress, read_since, 10, "reader stalled")

    async def read() -> None:
        nonlocal reads
        while not stop.is_set():
            ids = list(acked)
            try:
                found = await client.get_many(ids)  # one pipeline of HGETALLs
                assert all(info is not None for info in found), ids
                assert (await client.get(ids[reads % len(ids)])).id == ids[reads % len(ids)]
            except (RedisUnavailable, AssertionError) as exc:
                read_failures.append(exc)
            reads += 1
            await moved_on()
            await asyncio.sleep(0)  # a yield: a failing call may not have waited

    async def both_moved_on() -> None:
        """Until the reader and the producer each finished calls since now."""
        r, e = reads, enqueued + len(refused)
        await _until(
            progress, lambda: reads >= r + 2 and enqueued + len(refused) > e, 10, "stalled"
        )

    tasks = [asyncio.create_task(produce()), asyncio.create_task(read())]
    try:
        await both_moved_on()
        await asyncio.to_thread(redis_cluster.begin_migration, slot, source, target)
        moved = 0
        while True:  # a few keys at a time, the clients running in between
            await both_moved_on()
            n = await asyncio.to_thread(redis_cluster.migrate_keys, slot, source, target, 8)
            if not n:
                break
            moved += n
        await asyncio.to_thread(redis_cluster.end_migration, slot, target)
        await both_moved_on()
        await both_moved_on()
        await halt()
        await asyncio.gather(*tasks)

        assert moved > 40  # the tasks' hashes, streams and indexes went over
        assert redis_cluster.owner(slot) == target
        assert read_failures == [], read_failures[:3]
        # an enqueue the migration refused said so clearly, within the bound
        for took, exc in refused:
            assert isinstance(exc, SlotMigrating), exc
            assert exc.slot == slot and "TRYAGAIN" in str(exc)
            assert took < ENQUEUE_BOUND, took
        assert enqueued > 0
        for info in await client.get_many(acked):  # nothing acknowledged was lost
            assert info is not None
    finally:
        await halt()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await client.close()
        await asyncio.to_thread(redis_cluster.give_slot, slot, source)


async def test_a_client_idle_through_a_failover_succeeds_on_its_first_call(
    redis_cluster: Cluster, cluster_url: str
) -> None:
    """The namespace's master is killed and a replica takes over while two clients are
    idle: the first call of each (a read over the pool, an enqueue script over the lane)
    meets a refused connection, which sent nothing: it is sent again to the new master."""
    slot = slot_of(Keys(NS).layout)
    # acknowledged once the replica has it: the kill loses nothing
    durable = Client(connect(cluster_url), Settings(namespace=NS, wait_replicas=1))
    tid = await durable.enqueue("sleep", {"s": 0})
    await durable.close()
    reader = Client(connect(cluster_url), Settings(namespace=NS))
    writer = Client(connect(cluster_url), Settings(namespace=NS))
    old = redis_cluster.owner(slot)
    try:
        await writer.enqueue("sleep", {"s": 0})  # both have connections to the master
        assert (await reader.get(tid)).id == tid
        redis_cluster.kill(old)
        new = await asyncio.to_thread(redis_cluster.wait_replaced, old)
        assert new != old
        assert (await reader.get(tid)).id == tid
        other = await writer.enqueue("sleep", {"s": 0})
        assert (await reader.get(other)).id == other
    finally:
        await reader.close()
        await writer.close()
        await asyncio.to_thread(redis_cluster.heal)


def test_a_database_on_a_cluster_nodes_url_is_a_configuration_error(
    redis_cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """``redis://node/3`` names a cluster node (a cluster has database 0 only): one line,
    exit 2, not "cannot reach Redis" (exit 3)."""
    port = redis_cluster.masters()[0]
    url = f"redis://127.0.0.1:{port}/3"
    assert cli_main(["--url", url, "queues"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "only database 0" in err, err
    with pytest.raises(ConfigError, match="only database 0"):
        connect(f"redis://127.0.0.1:{port}/0?db=2")
