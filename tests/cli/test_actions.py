"""The operator's commands against a real Redis: retry / replay, queue pause / resume
(shown by ``rsjobs queues``), bulk cancel / retry, tracebacks in ``history`` and
``status``; each recorded with the source ``cli``, bad input a one-line error (exit 2)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from rsjobs import Client
from tests.support.processes import ROOT
from tests.support.web import running_worker

pytestmark = pytest.mark.integration


def rsjobs(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rsjobs", "--url", url, "--namespace", "t", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=60, check=False,
    )  # fmt: skip


async def _failed(client: Client, redis_url: str) -> str:
    tid = await client.enqueue("needs_file", {"path": "/nonexistent/in"}, max_attempts=2,
                               backoff_base_ms=0, backoff_max_ms=0)  # fmt: skip
    async with running_worker(redis_url):
        assert (await client.wait(tid, timeout_ms=10_000)).state == "FAILED"
    return tid


async def test_retry_replay_history_and_status(client: Client, redis_url: str) -> None:
    tid = await _failed(client, redis_url)
    hist = await asyncio.to_thread(rsjobs, redis_url, "history", tid)
    assert hist.returncode == 0, hist.stderr
    # both attempts' tracebacks, under the table
    assert hist.stdout.count("FileNotFoundError: [Errno 2]") >= 2
    assert "entry 3, attempt 1" in hist.stdout and "in _open_input" in hist.stdout
    status = await asyncio.to_thread(rsjobs, redis_url, "status", tid)
    assert "traceback of the last failed attempt:" in status.stdout
    out = await asyncio.to_thread(rsjobs, redis_url, "retry", tid, "--reason", "try again")
    assert out.returncode == 0, out.stderr
    new = out.stdout.strip()
    assert (await client.get(new)).retry_of == tid
    last = (await client.history(tid))[-1]
    assert (last.event, last.source, last.message) == ("RETRY", "cli", "try again")
    status = await asyncio.to_thread(rsjobs, redis_url, "status", tid)
    assert f"retried as  {new}" in status.stdout
    # again: the same task, nothing changed (exit 1)
    again = await asyncio.to_thread(rsjobs, redis_url, "retry", tid, "--json")
    assert again.returncode == 1 and json.loads(again.stdout)["new_id"] == new
    assert "already started over" in again.stderr
    # an unfinished task, a replay of a failed one: one line, exit 2
    for cmd in (("retry", new), ("replay", tid), ("retry", "nothex")):
        bad = await asyncio.to_thread(rsjobs, redis_url, *cmd)
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1, (cmd, bad.stderr)


async def test_queue_pause_resume_and_queues(client: Client, redis_url: str) -> None:
    await client.enqueue("noop", {}, queue="gpu")
    out = await asyncio.to_thread(rsjobs, redis_url, "queue", "pause", "gpu", "--reason", "drivers")
    assert out.returncode == 0 and "paused since" in out.stdout and "by cli: drivers" in out.stdout
    again = await asyncio.to_thread(rsjobs, redis_url, "queue", "pause", "gpu")
    assert again.returncode == 1 and "already paused" in again.stderr
    table = await asyncio.to_thread(rsjobs, redis_url, "queues")
    gpu = next(line for line in table.stdout.splitlines() if line.startswith("gpu"))
    assert "PAUSED" in gpu
    doc = json.loads((await asyncio.to_thread(rsjobs, redis_url, "queues", "--json")).stdout)
    assert doc["gpu"]["paused"] is True
    out = await asyncio.to_thread(rsjobs, redis_url, "queue", "resume", "gpu", "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["paused"] is False
    assert (await client.paused_queues()) == {}
    bad = await asyncio.to_thread(rsjobs, redis_url, "queue", "pause", "g pu")
    assert bad.returncode == 2 and "queue" in bad.stderr


async def test_bulk_cancel_dry_run_then_for_real(client: Client, redis_url: str) -> None:
    ids = [await client.enqueue("noop", {"i": i}, queue="gpu") for i in range(3)]
    other = await client.enqueue("noop", {}, queue="cpu")
    dry = await asyncio.to_thread(
        rsjobs, redis_url, "bulk", "cancel", "--queue", "gpu", "--state", "PENDING", "--dry-run"
    )
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[0] == "3 task(s) match; cancel would act on 3:"
    assert set(dry.stdout.split()[-3:]) == set(ids)
    assert {(await client.get(t)).state for t in ids} == {"PENDING"}
    out = await asyncio.to_thread(
        rsjobs, redis_url, "bulk", "cancel", "--queue", "gpu", "--since", "1h", "--limit", "2"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("3 task(s) matched; cancel acted on 2, changed 2")
    assert [(await client.get(t)).state for t in ids].count("CANCELLED") == 2
    assert (await client.get(other)).state == "PENDING"
    retry = await asyncio.to_thread(rsjobs, redis_url, "bulk", "retry", "--queue", "gpu", "--json")
    assert json.loads(retry.stdout)["changed"] == 2
    for args in (
        ("bulk", "cancel"),
        ("bulk", "cancel", "--since", "soon"),
        ("bulk", "retry", "--state", "RUNNING"),
        ("bulk", "cancel", "--limit", "0"),
    ):
        bad = await asyncio.to_thread(rsjobs, redis_url, *args)
        assert bad.returncode == 2 and bad.stderr.startswith("rsjobs: "), (args, bad.stderr)
