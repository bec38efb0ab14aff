"""The task commands on a real Redis with a real worker: ``enqueue --wait`` shows the way
to the end (plain lines off a terminal, a progress bar on one) and takes ``--timeout``;
a cancel or pause that changes nothing says so; ``queues`` flags work nobody serves; a
worker started without -q serves the queues its handlers declare."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator

import pytest
import redis as sync_redis

from rsjobs import Client
from tests.cli.support import rsjobs
from tests.support.processes import ROOT, spawn_worker, stop_process
from tests.support.waits import poll_until, wait_until

pytestmark = pytest.mark.integration

APP = "tests.cli.apps:tasks"


@pytest.fixture
def worker(redis_url: str) -> Iterator[None]:
    """A worker of tests.cli.apps, started without -q (in the default namespace)."""
    proc = spawn_worker(redis_url, "default", app=APP)
    try:
        r = sync_redis.Redis.from_url(redis_url, decode_responses=True)
        wait_until(lambda: r.hlen("rsjobs:{default}:workers"), 20, "the worker registered")
        r.close()
        yield
    finally:
        stop_process(proc)


def test_wait_shows_each_step_as_plain_lines_off_a_terminal(redis_url: str, worker: None) -> None:
    out = rsjobs(redis_url, "enqueue", "render", "--payload", '{"steps": 4, "step_s": 0.4}',
                 "--queue", "gpu", "--wait", "--timeout", "30")  # fmt: skip
    assert out.returncode == 0, out.stderr
    tid, state = out.stdout.split()  # stdout stays the id and the final state
    assert len(tid) == 32 and state == "SUCCEEDED"
    lines = out.stderr.splitlines()
    events = [w for line in lines for w in line.split()[1:2]]
    assert events[:2] == ["ENQUEUE", "START"] and "COMPLETE" in events
    # progress notes as the worker wrote them (coalesced to one per 200 ms): in order
    progress = [line.split()[1:] for line in lines if "%  step " in line]
    assert len(progress) >= 3, out.stderr
    assert progress[:3] == [["25.0%", "step", "1/4"], ["50.0%", "step", "2/4"],
                            ["75.0%", "step", "3/4"]]  # fmt: skip
    assert lines[-1].endswith("SUCCEEDED after 1 attempt(s)")
    assert "no live worker" not in out.stderr  # the worker serves gpu without -q


def test_wait_gives_up_after_the_timeout_and_the_task_goes_on(redis_url: str, worker: None) -> None:
    t0 = time.monotonic()
    out = rsjobs(redis_url, "enqueue", "wait", "--payload", '{"s": 60}', "--wait",
                 "--timeout", "1.5")  # fmt: skip
    assert out.returncode == 124, out.stderr
    assert time.monotonic() - t0 < 20
    tid = out.stdout.strip()
    assert f"task {tid} is still RUNNING after --timeout 1.5 s; it goes on" in out.stderr
    status = json.loads(rsjobs(redis_url, "status", tid, "--json").stdout)
    assert status["state"] == "RUNNING"


def test_timeout_without_wait_is_refused_before_anything_is_written(redis_url: str) -> None:
    r = sync_redis.Redis.from_url(redis_url)
    for args, says in ((("--timeout", "5"), "--timeout needs --wait"),
                       (("--wait", "--timeout", "0"), "--timeout must be a positive")):  # fmt: skip
        out = rsjobs(redis_url, "enqueue", "wait", *args)
        assert out.returncode == 2 and says in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
        assert r.dbsize() == 0
    r.close()


async def test_a_cancel_or_pause_that_changes_nothing_says_so(redis_url: str) -> None:
    async with Client.from_url(redis_url) as client:
        tid = await client.enqueue("wait", {"s": 1})
        done = await client.enqueue("wait", {"s": 1})
    first = rsjobs(redis_url, "cancel", tid, "--reason", "not needed")
    assert (first.returncode, first.stdout.strip(), first.stderr) == (0, "CANCELLED", "")
    again = rsjobs(redis_url, "cancel", tid)
    assert again.returncode == 1 and again.stdout.strip() == "CANCELLED"
    assert f"nothing changed: task {tid} is already CANCELLED" in again.stderr

    assert rsjobs(redis_url, "pause", done).returncode == 0
    paused = rsjobs(redis_url, "pause", done)
    assert paused.returncode == 1 and f"task {done} is already PAUSED" in paused.stderr
    assert rsjobs(redis_url, "resume", done).stdout.strip() == "PENDING"
    refused = rsjobs(redis_url, "resume", done)
    assert refused.returncode == 2 and "RESUME refused" in refused.stderr

    # a finished task: the cancel is refused by the state machine, and said to be
    proc = spawn_worker(redis_url, "default", app=APP)
    try:
        async with Client.from_url(redis_url) as client:
            assert (await client.wait(done, timeout_ms=30_000)).state == "SUCCEEDED"
        late = rsjobs(redis_url, "cancel", done)
        assert late.returncode == 1 and late.stdout.strip() == "SUCCEEDED"
        assert "already SUCCEEDED (a finished task accepts no cancel)" in late.stderr
    finally:
        stop_process(proc)
    history = rsjobs(redis_url, "history", tid).stdout
    assert "REFUSED" in history and "not needed" in history


async def test_queues_flags_work_that_no_live_worker_serves(redis_url: str) -> None:
    async with Client.from_url(redis_url) as client:
        await client.enqueue("wait", {"s": 0.01}, queue="lonely")
        await client.enqueue("wait", {"s": 0.01}, queue="lonely")
    out = rsjobs(redis_url, "queues")
    assert out.returncode == 0
    header, row = out.stdout.splitlines()
    assert header.split()[:5] == ["queue", "workers", "stream", "WAITING", "PENDING"]
    assert row.split()[:5] == ["lonely", "0", "2", "0", "2"] and row.endswith("NO LIVE WORKER")
    assert "queue 'lonely' has 2 task(s) waiting and no live worker serves it" in out.stderr
    doc = json.loads(rsjobs(redis_url, "queues", "--json").stdout)
    assert doc["lonely"]["unserved"] is True and doc["lonely"]["workers"] == 0

    proc = spawn_worker(redis_url, "default", "-q", "lonely", app=APP)
    try:
        async with Client.from_url(redis_url) as client:

            async def two_done() -> bool:
                return (await client.stats())["lonely"].get("SUCCEEDED", 0) >= 2

            await poll_until(two_done, 20, "two lonely tasks SUCCEEDED")
        served = rsjobs(redis_url, "queues")
        assert served.stdout.splitlines()[1].split()[:2] == ["lonely", "1"]
        assert "NO LIVE WORKER" not in served.stdout and served.stderr == ""
        doc = json.loads(rsjobs(redis_url, "queues", "--json").stdout)
        assert doc["lonely"]["unserved"] is False and doc["lonely"]["workers"] == 1
        workers = rsjobs(redis_url, "workers").stdout.splitlines()
        assert workers[0].split() == ["worker", "status", "host", "pid", "silent", "done",
                                      "queues", "in", "flight"]  # fmt: skip
        assert workers[1].split()[1] == "alive" and workers[1].split()[-2] == "lonely"
    finally:
        stop_process(proc)


async def test_wait_draws_a_progress_bar_on_a_terminal(redis_url: str, worker: None) -> None:
    pexpect = pytest.importorskip("pexpect")
    child = pexpect.spawn(
        sys.executable,
        ["-m", "rsjobs", "--url", redis_url, "enqueue", "render", "--queue", "gpu",
         "--payload", '{"steps": 10, "step_s": 0.1}', "--wait"],
        cwd=ROOT, encoding="utf-8", timeout=60, dimensions=(30, 140),
    )  # fmt: skip
    child.expect(pexpect.EOF)
    child.close()
    text = child.before
    assert child.exitstatus == 0, text
    assert "━" in text and "100%" in text  # rich's bar, filled
    assert "START" in text and "COMPLETE" in text
    assert text.rstrip().endswith("SUCCEEDED")
