"""Real processes on a namespace an earlier rsjobs wrote (layout 1): the worker, reaper,
web app and workflow driver refuse to start with one line naming ``rsjobs migrate`` and
write nothing; a client's writes raise :class:`rsjobs.NotMigrated`; ``rsjobs migrate
--dry-run`` counts, ``rsjobs migrate`` converts and marks, after which they start and run
the work. An empty namespace is marked by its first process. ``rsjobs migrate`` refuses to
run beside a live worker, and ``rsjobs dev`` refuses a data directory of layout 1 unless
started with ``--migrate``."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import redis as sync_redis

from rsjobs import Client, NotMigrated
from rsjobs.server import EmbeddedRedis, free_port
from rsjobs.store.layout import Ending
from tests.cli.support import Dev, rsjobs
from tests.support.layout1 import writing_layout1
from tests.support.processes import spawn_worker, start_as, stop_process

pytestmark = pytest.mark.integration

NS = "up"


def snapshot(url: str) -> dict[str, Any]:
    """Every key with its dumped value: to show that a refused process wrote nothing."""
    r = sync_redis.Redis.from_url(url)
    try:
        return {k: r.dump(k) for k in r.scan_iter(count=1000)}
    finally:
        r.close()


async def _layout1(url: str, namespace: str = NS) -> list[str]:
    """Two tasks of layout 1: one waiting, one running under a lease."""
    with writing_layout1():
        async with Client.from_url(url, namespace=namespace) as c:
            waiting = await c.enqueue("noop", {"x": 1})
            running = await c.enqueue("noop", {"x": 2}, queue="held")
            (s,) = await start_as(c, "old-worker", queue="held")
            assert s.id == running
    return [waiting, running, s.lease]


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


@pytest.mark.parametrize(
    "command",
    [
        ["worker", "tests.support.apps:tasks"],
        ["reaper", "--interval-ms", "50"],
        ["web", "--dev", "--port", "{port}"],
        ["workflows", "drive", "--interval-ms", "50"],
    ],
    ids=["worker", "reaper", "web", "drive"],
)
async def test_a_process_refuses_a_namespace_that_is_not_migrated(
    redis_url: str, command: list[str]
) -> None:
    await _layout1(redis_url)
    before = snapshot(redis_url)
    args = [a.replace("{port}", str(free_port())) for a in command]
    t0 = time.monotonic()
    done = rsjobs(redis_url, "--namespace", NS, *args, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    line = one_line(done.stderr)
    assert line == (
        "rsjobs: namespace 'up' holds data written by an earlier rsjobs (layout 1) and is not "
        "migrated: stop every rsjobs process on it, run `rsjobs --namespace up migrate`, then "
        "start them again"
    )
    assert time.monotonic() - t0 < 30
    assert snapshot(redis_url) == before


async def test_migrate_then_the_processes_start_and_run_the_work(redis_url: str) -> None:
    waiting, running, lease = await _layout1(redis_url)
    async with Client.from_url(redis_url, namespace=NS) as client:
        before = snapshot(redis_url)
        with pytest.raises(NotMigrated):
            await client.enqueue("noop", None)
        with pytest.raises(NotMigrated):
            await client.cancel(waiting)
        assert snapshot(redis_url) == before

        for command in ("status", "history"):
            shown = rsjobs(redis_url, "--namespace", NS, command, waiting)
            assert shown.returncode == 2, shown.stdout
            assert one_line(shown.stderr) == (
                f"rsjobs: task {waiting} is stored as an earlier rsjobs wrote it (layout 1): "
                "run `rsjobs migrate` on its namespace"
            )

        dry = rsjobs(redis_url, "--namespace", NS, "migrate", "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert "to convert        2" in dry.stdout and "dry run: nothing written" in dry.stdout
        assert snapshot(redis_url) == before

        done = rsjobs(redis_url, "--namespace", NS, "migrate")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "converted         2" in done.stdout
        assert "marked rsjobs:{up}:layout = 2" in done.stdout

        worker = spawn_worker(redis_url, NS)
        try:
            info = await client.wait(waiting, timeout_ms=20_000)
            assert (info.state, info.result) == ("SUCCEEDED", {"x": 1})
            keys = client.keys.task_keys(running, "held")
            ending = Ending("COMPLETE", lease, '{"x": 2}', "", 1, -1, 0.5)
            (reply,) = await client.store.work.finish([(keys, ending)])
            assert reply.state == "SUCCEEDED"
            tid = await client.enqueue("noop", {"x": 3})
            assert (await client.wait(tid, timeout_ms=20_000)).result == {"x": 3}
        finally:
            stop_process(worker, signal.SIGTERM)
        once = rsjobs(redis_url, "--namespace", NS, "reaper", "--once")
        assert once.returncode == 0, once.stderr
        assert json.loads(once.stdout)["errors"] == 0


async def test_the_first_process_of_an_empty_namespace_marks_it(redis_url: str) -> None:
    once = rsjobs(redis_url, "--namespace", "fresh", "reaper", "--once")
    assert once.returncode == 0, once.stderr
    r = sync_redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        assert r.get("rsjobs:{fresh}:layout") == "2"
        r.set("rsjobs:{fresh}:layout", "3")  # written by a later rsjobs
        again = rsjobs(redis_url, "--namespace", "fresh", "reaper", "--once")
        assert again.returncode == 2
        assert "is marked as layout '3', which this rsjobs (layout 2) cannot read" in again.stderr
        migrate = rsjobs(redis_url, "--namespace", "fresh", "migrate")
        assert migrate.returncode == 2 and "cannot read or migrate" in migrate.stderr
        assert r.get("rsjobs:{fresh}:layout") == "3"
    finally:
        r.close()


async def test_migrate_refuses_to_run_beside_a_live_worker(redis_url: str) -> None:
    await _layout1(redis_url)
    r = sync_redis.Redis.from_url(redis_url, decode_responses=True)
    beat = {"beat_at": int(time.time() * 1000), "lease_ms": 60_000, "queues": ["default"]}
    r.hset("rsjobs:{up}:workers", "old-1", json.dumps(beat))
    r.close()
    before = snapshot(redis_url)
    refused = rsjobs(redis_url, "--namespace", NS, "migrate")
    assert refused.returncode == 2
    assert "1 worker(s) of namespace 'up' beat within their lease (old-1)" in one_line(
        refused.stderr
    )
    assert snapshot(redis_url) == before
    forced = rsjobs(redis_url, "--namespace", NS, "migrate", "--force")
    assert forced.returncode == 0 and "converted         2" in forced.stdout


async def test_a_task_left_unconverted_keeps_the_namespace_unmarked(redis_url: str) -> None:
    waiting, *_ = await _layout1(redis_url)
    r = sync_redis.Redis.from_url(redis_url, decode_responses=True)
    r.hset(f"rsjobs:{{up}}:task:{waiting}", "created_at", "never")
    done = rsjobs(redis_url, "--namespace", NS, "migrate")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"  {waiting}  created_at never is not a time" in done.stdout
    assert "converted         1" in done.stdout and "not marked" in done.stdout
    assert r.get("rsjobs:{up}:layout") is None
    assert r.hget(f"rsjobs:{{up}}:task:{waiting}", "state") == "PENDING"  # left whole
    r.hset(f"rsjobs:{{up}}:task:{waiting}", "created_at", "1")  # fixed by hand
    again = rsjobs(redis_url, "--namespace", NS, "migrate")
    assert again.returncode == 0 and "converted         1" in again.stdout
    assert "already new       1" in again.stdout and r.get("rsjobs:{up}:layout") == "2"
    r.close()


async def test_dev_refuses_a_data_dir_of_layout_1_unless_asked_to_migrate(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with EmbeddedRedis(appendonly=True, data_dir=str(data)) as server, writing_layout1():
        async with Client.from_url(server.url) as c:
            tid = await c.enqueue("render", {"steps": 1}, queue="gpu")
    app = "tests.cli.apps:tasks"
    refused = rsjobs("redis://unused", "dev", app, "--data-dir", str(data))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert one_line(refused.stderr) == (
        f"rsjobs: the data in {data} was written by an earlier rsjobs (layout 1): start "
        "once with --migrate to convert it"
    )
    dev = Dev(app, "--data-dir", str(data), "--migrate")
    try:
        url, _, _ = dev.started()
        dev.expect(r"migrated: 1 task\(s\) converted, 0 already in this layout, 0 left")
        async with Client.from_url(url) as client:
            info = await client.wait(tid, timeout_ms=20_000)
            events = [e.event for e in await client.history(tid)]
            assert info.state == "SUCCEEDED" and events[:2] == ["ENQUEUE", "START"]
        assert dev.stop(signal.SIGTERM) == 0, dev.output[-4000:]
    finally:
        dev.kill()
