"""A task that kills every worker it is delivered to ends in the dead-letter stream, and
an operator can see it and re-queue it from the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest

from rsjobs import Client
from tests.support.processes import ROOT, stop_process
from tests.support.reaper import (
    reaper_loop,
    spawn,
    terminal_transitions,
    wait_registered,
)
from tests.support.reference import replay

pytestmark = pytest.mark.integration

MAX_DELIVERIES = 3


@pytest.fixture
async def pclient(redis_url: str) -> AsyncIterator[Client]:
    c = Client.from_url(redis_url, namespace="px")
    yield c
    await c.close()


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "rsjobs", "--url", url, "--namespace", "px", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)


async def test_poison_task_is_deadlettered_after_n_deliveries_and_requeued(
    pclient: Client, redis_url: str
) -> None:
    names = [f"victim{i}" for i in range(MAX_DELIVERIES)]
    procs = [spawn(redis_url, "px", n, lease_ms=1000, conc=1) for n in names]
    try:
        await wait_registered(pclient, names)
        async with reaper_loop(redis_url, "px", max_deliveries=MAX_DELIVERIES) as reaper:
            # plenty of attempts: the delivery count, not the retry policy, must stop it
            tid = await pclient.enqueue("crash", {"boom": 1}, max_attempts=50)
            info = await pclient.wait(tid, timeout_ms=30_000)
        assert reaper.totals["deadlettered"] == 1
        assert reaper.totals["retried"] == MAX_DELIVERIES - 1
    finally:
        for p in procs:
            stop_process(p)
    # every worker it reached died of it
    assert all(p.returncode == -9 for p in procs)
    assert info.state == "FAILED" and info.error_type == "DeadLetter"
    assert f"poison: delivered {MAX_DELIVERIES} times" in info.error
    entries = await pclient.history(tid)
    assert [e.event for e in entries if e.event in ("START", "RECLAIM", "DEADLETTER")] == [
        "START", "RECLAIM", "START", "RECLAIM", "START", "DEADLETTER",
    ]  # fmt: skip
    assert {e.extra["worker"] for e in entries if e.event in ("RECLAIM", "DEADLETTER")} == set(
        names
    )
    assert len(terminal_transitions(entries)) == 1 and replay(entries) == []

    # the operator's view
    out = cli(redis_url, "deadletter", "list", "--json")
    assert out.returncode == 0, out.stderr
    (letter,) = json.loads(out.stdout)
    assert letter["task_id"] == tid and letter["deliveries"] == MAX_DELIVERIES
    assert letter["reason"] == info.error and letter["queue"] == "default"
    text = cli(redis_url, "deadletter", "list")
    assert tid in text.stdout and "poison" in text.stdout

    # re-queue: a clone through the normal enqueue path, linked both ways; idempotent
    first = cli(redis_url, "deadletter", "requeue", tid)
    assert first.returncode == 0, first.stderr
    clone = first.stdout.split()[0]
    again = cli(redis_url, "deadletter", "requeue", tid)
    assert again.returncode == 0 and again.stdout.split()[0] == clone and "already" in again.stdout
    c = await pclient.get(clone)
    assert c.state == "PENDING" and c.type == "crash" and c.payload == {"boom": 1}
    assert c.max_attempts == 50 and c.attempt == 0
    assert await pclient.redis.hget(pclient.keys.task(clone), "requeued_from") == tid
    assert await pclient.redis.hget(pclient.keys.task(tid), "requeued_as") == clone
    assert [e.event for e in await pclient.history(clone)] == ["ENQUEUE"]
    listed = json.loads(cli(redis_url, "deadletter", "list", "--json").stdout)
    assert listed[0]["requeued_as"] == clone

    # bad input: one clear line, non-zero exit, nothing written
    bad = cli(redis_url, "deadletter", "requeue", clone)
    assert bad.returncode != 0 and bad.stderr.strip().count("\n") == 0
    assert "not dead-lettered" in bad.stderr
    missing = cli(redis_url, "deadletter", "requeue", "0" * 32)
    assert missing.returncode != 0 and "no such task" in missing.stderr
    malformed = cli(redis_url, "deadletter", "requeue", "nope")
    assert malformed.returncode != 0 and "invalid task id" in malformed.stderr
    assert not await pclient.redis.exists(pclient.keys.task("0" * 32))
