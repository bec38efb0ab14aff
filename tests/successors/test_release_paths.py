"""Every way a predecessor ends releases its successors promptly: a cancel, an outside
result of a deferred attempt, the reaper's deadlines (in the same sweep), and a release
entry a crashed worker left behind (the reaper's next sweep). And a worker SIGKILLed in
the middle of a 30-link chain: a reaper and a second worker finish it, each link once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Iterator

import pytest

from rsjobs import Client
from rsjobs.reaper import Reaper, ReaperConfig
from rsjobs.settings import Settings
from rsjobs.store.layout import Ending
from tests.support.processes import spawn_worker, start_as, stop_process, wait_for_state
from tests.support.reaper import spawn_reaper, wait_registered
from tests.support.reference import replay

pytestmark = pytest.mark.integration

APP = "tests.support.successor_apps:tasks"


def _reaper(url: str) -> Reaper:
    config = ReaperConfig(interval_ms=200, lease_ms=1000, deadline_grace_ms=0)
    return Reaper(url=url, settings=Settings(namespace="t"), config=config)


async def test_a_cancel_cancels_the_waiting_chain_at_once(client: Client) -> None:
    a = await client.enqueue("link", {"name": "A"})
    b = await client.enqueue("link", {"name": "B"}, after=[a])
    c = await client.enqueue("link", {"name": "C"}, after=[b])
    assert await client.cancel(a, "changed my mind") == "CANCELLED"
    # no worker, no reaper: the cancel ran the release step itself
    ib, ic = await client.get(b), await client.get(c)
    assert (ib.state, ic.state) == ("CANCELLED", "CANCELLED")
    assert "changed my mind" in ib.error and b in ic.error
    assert await client.store.successors.pending() == 0
    assert (await client.list_tasks(state="WAITING")).items == []


async def test_an_outside_result_releases_the_successor_at_once(client: Client) -> None:
    a = await client.enqueue("link", {"name": "A"})
    b = await client.enqueue("link", {"name": "B"}, after=[a])
    (started,) = await start_as(client, "ghost")
    keys = client.keys.task_keys(a, "default")
    await client.store.deferred.defer(keys, started.lease, "job-1", "gen", 60_000)
    assert await client.complete_external(a, {"url": "a.png"}) == "SUCCEEDED"
    info = await client.get(b)
    assert info.state == "PENDING" and info.predecessor_results == {a: {"url": "a.png"}}


async def test_the_reapers_deadline_cancels_the_successor_in_the_same_sweep(
    client: Client, redis_url: str
) -> None:
    a = await client.enqueue("link", {"name": "A"}, timeout_ms=50, max_attempts=1)
    b = await client.enqueue("link", {"name": "B"}, after=[a])
    await start_as(client, "ghost")  # started, never finished: its deadline passes
    await asyncio.sleep(0.1)
    reaper = _reaper(redis_url)
    try:
        report = await reaper.sweep_once()
    finally:
        await reaper.close()
    assert report.timed_out == 1 and report.successors_cancelled == 1
    info = await client.get(b)
    assert info.state == "CANCELLED" and info.error_type == "PredecessorTimedOut"


async def test_the_reaper_handles_what_a_crashed_worker_left(
    client: Client, redis_url: str
) -> None:
    a = await client.enqueue("link", {"name": "A"})
    b = await client.enqueue("link", {"name": "B"}, after=[a])
    (started,) = await start_as(client, "ghost")
    # the worker's finish is written, and it dies before its release step
    ending = Ending("COMPLETE", started.lease, '{"n": 1}', "", 1, -1, 0.5)
    (reply,) = await client.store.work.finish([(client.keys.task_keys(a, "default"), ending)])
    assert reply.released and (await client.get(b)).state == "WAITING"
    assert await client.store.successors.pending() == 1
    reaper = _reaper(redis_url)
    try:
        report = await reaper.sweep_once()
        idle = await reaper.sweep_once()
    finally:
        await reaper.close()
    assert (report.release_entries, report.successors_released) == (1, 1)
    assert (idle.release_entries, idle.successors_released) == (0, 0)
    assert (await client.get(b)).state == "PENDING"


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        stop_process(p)


@pytest.mark.timeout(180)
async def test_a_sigkilled_worker_mid_chain_a_reaper_and_another_worker_finish_it(
    client: Client, redis_url: str, procs: list[subprocess.Popen[bytes]], tmp_path: object
) -> None:
    links: list[str] = []
    for i in range(30):
        after = [links[-1]] if links else None
        links.append(await client.enqueue("link", {"name": f"L{i}", "s": 0.1}, after=after))
    lease = ("--lease-ms", "1000", "--grace-ms", "200")
    first = spawn_worker(redis_url, "t", "--name", "w1", *lease, app=APP)
    procs.append(first)
    # mid-chain: link 10 runs (or has just ended, its release step maybe not run yet)
    await wait_for_state(client, links[10], ("RUNNING", "SUCCEEDED"), timeout=60)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    log = os.path.join(str(tmp_path), "reaper.log")
    args = ("--interval-ms", "200", "--lease-ms", "1000", "--dead-after-leases", "2")
    procs.append(spawn_reaper(redis_url, "t", log, *args))
    second = spawn_worker(redis_url, "t", "--name", "w2", *lease, app=APP)
    procs.append(second)
    await wait_registered(client, ["w2"])
    last = await client.wait(links[-1], timeout_ms=120_000)
    assert last.state == "SUCCEEDED"
    infos = await client.get_many(links)
    prev = None
    for tid, info in zip(links, infos, strict=True):
        assert info is not None and info.state == "SUCCEEDED", (tid, info)
        entries = await client.history(tid)
        assert replay(entries) == []
        done = [e for e in entries if e.event == "COMPLETE" and not e.rejected]
        assert len(done) == 1, entries  # each link ended once
        released = [e for e in entries if e.event == "RELEASE"]
        assert len(released) == (0 if prev is None else 1)
        if prev is not None:
            # it got its predecessor's result, and started after that one ended
            assert info.result["got"] == {prev.id: prev.result}
            assert info.result["started"] >= prev.result["ended"]
        prev = info
    assert await client.store.successors.pending() == 0
    # both workers ran links: the first until it was killed, the second the rest
    assert {info.worker for info in infos if info is not None} == {"w1", "w2"}


async def test_release_entries_that_do_not_read_are_deleted_not_read_forever(
    client: Client,
) -> None:
    await client.redis.xadd(client.keys.release, {"id": "x", "s": "FAILED", "sc": "a b,c"})
    await client.redis.xadd(client.keys.release, {"id": "x", "s": "RUNNING", "sc": "c"})
    report = await client.store.successors.release("reaper")
    assert report.handled == 0 and await client.store.successors.pending() == 0


async def test_two_release_steps_at_once_release_twenty_successors_once_each(
    client: Client, redis_url: str
) -> None:
    a = await client.enqueue("link", {"name": "A"})
    succ = [await client.enqueue("link", {"name": f"S{i}"}, after=[a]) for i in range(20)]
    (started,) = await start_as(client, "ghost")
    ending = Ending("COMPLETE", started.lease, '{"n": 1}', "", 1, -1, 0.5)
    await client.store.work.finish([(client.keys.task_keys(a, "default"), ending)])
    async with Client.from_url(redis_url, namespace="t") as other:
        one, two = await asyncio.gather(
            client.store.successors.release("worker"), other.store.successors.release("reaper")
        )
    assert one.released + two.released == 20 and one.handled + two.handled == 1
    entries = await client.redis.xrange(client.keys.queue("default"))
    queued = sorted(f["id"] for _, f in entries)
    assert queued == sorted(succ)  # one queue entry each
    for tid in succ:
        assert [e.event for e in await client.history(tid)] == ["ENQUEUE", "RELEASE"]
