"""The chaos harness's supervision: deaths are timed when they happen, and waiting for a
process never blocks the event loop (real processes, a real redis-server).

A chaos run once reported two healthy tasks stolen because the harness stamped a worker's
death seconds after it happened (its loop was busy); the checker then saw reclaims of a
dead worker's tasks as thefts from a live one.
"""

from __future__ import annotations

import asyncio
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.waits import poll_until
from tools.chaos.supervisor import Child, Supervisor, now_ms
from tools.chaos.topology import RedisNode, ask

pytestmark = pytest.mark.integration


#: how long the loop is kept busy (the one real sleep of these tests, on purpose)
BUSY_S = 0.9


@pytest.mark.timeout(30)
async def test_an_exit_is_stamped_when_it_happened_even_while_the_loop_is_busy(
    tmp_path: Path,
) -> None:
    sup = Supervisor(tmp_path)
    seen: list[int] = []
    try:
        spawned = now_ms()
        child = sup.spawn(
            ["sh", "-c", "sleep 0.1; kill -9 $$"],
            log_name="self-kill.log",
            on_exit=lambda c: seen.append(now_ms()),
        )
        time.sleep(BUSY_S)  # noqa: ASYNC251 - on purpose: the loop is busy, nobody polls
        code = await child.wait(5)
    finally:
        await sup.aclose()
    assert code == -signal.SIGKILL
    assert child.exit_ms is not None
    # stamped at the death (~0.1 s), not when the loop could look (>= 0.9 s)
    assert child.exit_ms - spawned < BUSY_S * 1000 - 200, child.exit_ms - spawned
    assert seen and seen[0] - spawned >= BUSY_S * 1000  # the callback ran once the loop was free


@pytest.mark.timeout(30)
async def test_a_signal_never_reaches_a_process_that_is_gone(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path)
    try:
        child: Child = sup.spawn(["true"], log_name="true.log")
        assert await child.wait(5) == 0
        assert not child.alive
        assert child.send(signal.SIGKILL) is False
        slow = sup.spawn(["sleep", "30"], log_name="sleep.log")
        assert await slow.wait(0.2) is None  # a wait that times out says so
        assert slow.send(signal.SIGTERM) is True
        assert await slow.wait(5) == -signal.SIGTERM
    finally:
        await sup.aclose()


@pytest.mark.timeout(90)
async def test_waiting_for_redis_to_load_its_aof_does_not_block_the_loop(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path)
    node = RedisNode(sup, "redis", data_dir=tmp_path / "redis", appendfsync="everysec")
    loop = asyncio.get_running_loop()
    try:
        await node.start()
        # enough data that loading the AOF takes a while: 350k SETs (a script's effects,
        # logged one by one: no rewrite, no RDB preamble, the slow way to load)
        # (a script, not DEBUG POPULATE: Redis 7 refuses DEBUG unless enable-debug-command is set)
        fill = (
            "for i = 1, 350000 do redis.call('SET', 'k:' .. i, string.rep('x', 64)) end return 'OK'"
        )
        assert await ask(node.port, "EVAL", fill, "0", timeout_s=60) == "OK"
        await node.stop(kill=True)  # (the AOF is written before the reply: nothing lost)

        # the loop's pulse: a callback every 10 ms (not a wait of the test: it only
        # notes how late the loop runs it)
        gaps: list[float] = []
        pulse: list[asyncio.TimerHandle] = []

        def beat(last: float) -> None:
            now = time.monotonic()
            gaps.append(now - last)
            pulse[:] = [loop.call_later(0.01, beat, now)]

        pulse.append(loop.call_later(0.01, beat, time.monotonic()))
        t0 = time.monotonic()
        try:
            await node.start()
            took = time.monotonic() - t0
        finally:
            pulse[0].cancel()
        # answered at once, not "-LOADING": the start waited for the whole load
        assert await ask(node.port, "DBSIZE") == "350000"
    finally:
        await sup.aclose()
    log = (node.data_dir / "redis.log").read_text()
    loads = re.findall(r"DB loaded from append only file: ([0-9.]+) seconds", log)
    assert loads, log[-2000:]
    loaded_s = float(loads[-1])  # Redis's own measure of the load
    assert took >= loaded_s, (took, loaded_s)
    # the loop kept running all along: no pause near the length of the wait (a start
    # that blocked the loop while Redis loaded would show one as long as the load)
    beats = len(gaps)
    assert beats >= 5, (beats, took)
    assert max(gaps) < max(loaded_s, took) / 2, (max(gaps), loaded_s, took)


async def on_replica(topo: Any, primary: Any, value: str) -> None:
    """Until the node that is not ``primary`` answers ``value`` for ``k`` (10 s at most)."""
    (replica,) = [n for n in topo.nodes if n is not primary]

    async def has_it() -> bool:
        return bool(await ask(replica.port, "GET", "k") == value)

    await poll_until(has_it, 10, f"{replica.name} to get k={value}", every=0.05)


@pytest.mark.timeout(120)
async def test_a_failover_fault_promotes_the_replica_and_brings_the_old_primary_back(
    tmp_path: Path,
) -> None:
    """The sentinel topology (primary + replica + 3 sentinels, AOF on both) and both
    variants of redis_failover: SENTINEL FAILOVER alone, and SIGKILL of the primary first
    (it comes back as a replica of the new one). Writes on the primary reach the replica."""
    from tools.chaos.cluster import Cluster
    from tools.chaos.config import ChaosConfig

    cfg = ChaosConfig(topology="sentinel", web=False, faults=("redis_failover",))
    cluster = Cluster(cfg, tmp_path, echo=lambda line: None)
    topo = cluster.topology

    async def no_wait(s: float) -> bool:
        await asyncio.sleep(s)
        return True

    try:
        await topo.start()
        assert cluster.url.startswith("redis+sentinel://127.0.0.1:")
        first = await cluster.primary()
        assert await ask(first.port, "SET", "k", "v1") == "OK"
        # on the replica before the failover (replication is asynchronous: a write just
        # before it may be lost lawfully); not WAIT: ask() opens a connection per command,
        # and WAIT counts only its own connection's writes (none: it answers at once)
        await on_replica(topo, first, "v1")
        await cluster.failover(kill=False, down_s=0, sleep=no_wait)
        second = await cluster.primary()
        assert second is not first
        assert await topo.role(first) == "slave"
        assert await ask(second.port, "GET", "k") == "v1"

        assert await ask(second.port, "SET", "k", "v2") == "OK"
        assert await topo.wait_synced(20)
        await on_replica(topo, second, "v2")
        await cluster.failover(kill=True, down_s=0.2, sleep=no_wait)
        third = await cluster.primary()
        assert third is first
        assert await topo.role(second) == "slave"  # back, as the new primary's replica
        assert await ask(third.port, "GET", "k") == "v2"
    finally:
        await cluster.aclose(keep_data=False)
    kinds = [e.kind for e in cluster.events]
    assert kinds.count("redis_failover") == 2 and kinds.count("redis_failover_done") == 2
    assert "redis_exit" not in kinds and "redis_failover_auto" not in kinds
    done = [e for e in cluster.events if e.kind == "redis_failover_done"]
    assert all("not settled" not in e.detail for e in done), done
