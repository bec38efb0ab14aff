"""The reaper's CLI: ``workers``, ``queues-memory``, ``reaper --once`` and its errors."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest

from rsjobs import Client, Settings
from rsjobs.reaper import Reaper, ReaperConfig
from tests.support.processes import ROOT, stop_process, wait_for_state
from tests.support.reaper import spawn, wait_registered
from tests.support.waits import poll_until

pytestmark = pytest.mark.integration


@pytest.fixture
async def cclient(redis_url: str) -> AsyncIterator[Client]:
    c = Client.from_url(redis_url, namespace="cl")
    yield c
    await c.close()


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "rsjobs", "--url", url, "--namespace", "cl", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)


async def test_workers_memory_and_one_sweep_from_the_cli(cclient: Client, redis_url: str) -> None:
    live = spawn(redis_url, "cl", "live", lease_ms=1000, conc=1)
    gone = spawn(redis_url, "cl", "gone", lease_ms=1000, conc=1)
    try:
        await wait_registered(cclient, ["live", "gone"])
        ids = [await cclient.enqueue("sleep", {"s": 30}) for _ in range(2)]
        infos = [await wait_for_state(cclient, tid, "RUNNING") for tid in ids]
        held = {i.worker: i.id for i in infos}
        assert set(held) == {"live", "gone"}
        gone.send_signal(signal.SIGKILL)
        gone.wait(10)
        # mark it dead without recovering its task yet (a long min idle), so that
        # `rsjobs workers` shows what the dead worker still holds
        config = ReaperConfig(lease_ms=200, dead_after_leases=1, min_idle_ms=60_000, guard=False)
        reaper = Reaper(url=redis_url, settings=Settings(namespace="cl"), config=config)
        try:

            async def found_dead() -> bool:
                return "gone" in (await reaper.sweep_once()).workers_dead

            await poll_until(found_dead, 10, "the killed worker found dead")
        finally:
            await reaper.close()

        out = cli(redis_url, "workers", "--json")
        assert out.returncode == 0, out.stderr
        by_name = {w["name"]: w for w in json.loads(out.stdout)}
        assert by_name["gone"]["status"] == "dead" and by_name["gone"]["dead_since"] > 0
        assert by_name["gone"]["holding"] == [held["gone"]]
        assert by_name["live"]["status"] == "alive"
        assert by_name["live"]["holding"] == [held["live"]]
        assert by_name["live"]["running"] == [held["live"]]
        text = cli(redis_url, "workers").stdout
        assert "dead since" in text and held["gone"] in text and held["live"] in text

        mem = cli(redis_url, "queues-memory", "--json")
        assert mem.returncode == 0, mem.stderr
        report = json.loads(mem.stdout)
        (q,) = report["queues"]
        assert q["queue"] == "default" and q["pending"] == 2 and q["stream_bytes"] > 0
        assert q["live_tasks"] == 2 and q["sampled"] == 2 and q["task_bytes_avg"] > 0
        assert report["used_memory"] > 0
        assert "default" in cli(redis_url, "queues-memory").stdout

        # one sweep from the CLI: the dead worker's task goes back to its queue
        once = cli(redis_url, "reaper", "--once", "--no-guard", "--lease-ms", "1000",
                   "--min-idle-ms", "1")  # fmt: skip
        assert once.returncode == 0, once.stderr
        swept = json.loads(once.stdout)
        assert swept["retried"] == 1 and swept["alive"] == 1 and not swept["skipped"]
        assert (await cclient.get(held["gone"])).state in ("PENDING", "RUNNING")
        assert (await cclient.get(held["live"])).attempt == 1
    finally:
        stop_process(live)
        stop_process(gone)


def test_bad_settings_are_one_clear_line(redis_url: str) -> None:
    bad = cli(redis_url, "reaper", "--once", "--interval-ms", "0")
    assert bad.returncode == 2 and bad.stderr.strip() == "rsjobs: interval_ms must be >= 1"
    worse = cli(redis_url, "queues-memory", "--sample", "0")
    assert worse.returncode == 2 and "--sample" in worse.stderr
    assert len(worse.stderr.strip().splitlines()) == 1
