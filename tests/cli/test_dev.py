"""``rsjobs dev`` as a real process: a clean stop on SIGTERM (running work handed back,
its Redis stopped, its temporary files gone, exit 0), data kept with --data-dir, the
queues it serves and the ones it says nobody serves, quiet logs, --workflows."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from rsjobs import Client
from rsjobs.server import EmbeddedRedis
from tests.cli.support import Dev, gone, rsjobs
from tests.support.processes import wait_for_state
from tests.support.waits import on_keys

pytestmark = pytest.mark.integration

APP = "tests.cli.apps:tasks"


async def test_sigterm_hands_running_work_back_stops_redis_and_exits_0(tmp_path: Path) -> None:
    data = tmp_path / "data"
    dev = Dev(APP, "--data-dir", str(data), "--grace-ms", "200", "-c", "2")
    try:
        url, redis_pid, shown_dir = dev.started()
        assert Path(shown_dir) == data.resolve()
        async with Client.from_url(url, source="user") as client:
            tid = await client.enqueue("wait", {"s": 60})
            done = await client.enqueue("render", {"steps": 2}, queue="gpu")
            await wait_for_state(client, tid, "RUNNING", timeout=20)
            assert (await client.wait(done, timeout_ms=20_000)).state == "SUCCEEDED"
        code = dev.stop(signal.SIGTERM)
    finally:
        dev.kill()
    assert code == 0, dev.output[-4000:]
    assert gone(redis_pid)
    assert "Traceback" not in dev.output
    assert "stopped: worker, reaper, web and redis" in dev.output
    assert (data / "rsjobs-dev.lock").exists()  # the data directory is kept

    # what the stop wrote is in the AOF: read it with a server on the data directory
    with EmbeddedRedis(appendonly=True, data_dir=str(data)) as server:
        async with Client.from_url(server.url) as client:
            info = await client.get(tid)
            history = await client.history(tid)
            assert (await client.get(done)).state == "SUCCEEDED"
    assert info.state == "PENDING" and info.attempt == 1
    requeue = [e for e in history if e.event == "REQUEUE"]
    assert len(requeue) == 1 and requeue[0].source == "worker"
    assert requeue[0].from_state == "RUNNING" and requeue[0].to_state == "PENDING"

    # a second run on the same data directory finds the first's tasks and runs the one
    # handed back again
    again = Dev(APP, "--data-dir", str(data), "--grace-ms", "200")
    try:
        url2, pid2, _ = again.started()
        async with Client.from_url(url2) as client:
            assert (await client.get(done)).state == "SUCCEEDED"
            info = await wait_for_state(client, tid, "RUNNING", timeout=20)
            assert info.attempt == 2
        status = rsjobs(url2, "status", done)
        assert status.returncode == 0 and "SUCCEEDED" in status.stdout
        assert again.stop(signal.SIGINT) == 0, again.output[-4000:]
    finally:
        again.kill()
    assert gone(pid2)


def test_without_a_data_dir_nothing_is_left_behind(tmp_path: Path) -> None:
    # the default web port taken (here, or by a dev another suite runs): another is used
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    held = False
    with contextlib.suppress(OSError):
        holder.bind(("127.0.0.1", 8000))
        holder.listen(1)
        held = True
    dev = Dev(APP)
    try:
        url, redis_pid, data_dir = dev.started()
        web_port = int(dev.expect(r"web    http://127\.0\.0\.1:(\d+)/").group(1))
        assert web_port != 8000 or not held
        assert httpx.get(f"http://127.0.0.1:{web_port}/healthz", timeout=10).status_code == 200
        assert "removed at exit" in dev.output
        assert Path(data_dir).is_dir()
        assert rsjobs(url, "queues").returncode == 0
        assert dev.stop(signal.SIGTERM) == 0, dev.output[-4000:]
    finally:
        holder.close()
        dev.kill()
    assert gone(redis_pid)
    assert not Path(data_dir).exists()


def test_it_serves_the_declared_queues_and_names_the_ones_nobody_serves(tmp_path: Path) -> None:
    # the handlers declare gpu (render) and none (wait: default)
    dev = Dev(APP)
    try:
        url, _, _ = dev.started()
        dev.expect(r"worker queues default, gpu ")
        out = rsjobs(url, "enqueue", "render", "--queue", "gpu", "--wait", "--timeout", "20")
        assert out.returncode == 0 and out.stdout.split()[1] == "SUCCEEDED", out.stderr
        # work on a queue nobody serves is named as soon as it is seen
        lost = rsjobs(url, "enqueue", "wait", "--queue", "elsewhere")
        assert "no live worker serves queue 'elsewhere'" in lost.stderr
        dev.expect(r"WARNING .*queue 'elsewhere' has 1 task\(s\) waiting and no live worker")
        assert dev.stop(signal.SIGTERM) == 0
    finally:
        dev.kill()
    # quiet: no reaper line for the sweeps that changed nothing
    assert not [line for line in dev.lines if '"event":"sweep"' in line], dev.output

    # -q names the queues: the declared one left out is said out loud at start
    only = Dev(APP, "-q", "default")
    try:
        only.started()
        only.expect(r"WARNING .*not serving queues gpu ")
        assert only.stop(signal.SIGTERM) == 0
    finally:
        only.kill()


def test_a_second_dev_on_one_data_dir_and_a_taken_port_are_clear_errors(tmp_path: Path) -> None:
    data = tmp_path / "d"
    first = Dev(APP, "--data-dir", str(data))
    try:
        first.started()
        second = rsjobs("redis://unused", "dev", APP, "--data-dir", str(data))
        assert second.returncode == 2
        assert f"is in use by another rsjobs dev (pid {first.proc.pid})" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1
        web_port = int(first.expect(r"web    http://127\.0\.0\.1:(\d+)/").group(1))
        taken = rsjobs("redis://unused", "dev", APP, "--web-port", str(web_port))
        assert taken.returncode == 2 and f"web port {web_port} is in use" in taken.stderr
        assert first.stop(signal.SIGTERM) == 0
    finally:
        first.kill()
    bad = rsjobs("redis://unused", "dev", "tests.cli.apps:nothing")
    assert bad.returncode == 2 and "has no attribute 'nothing'" in bad.stderr


async def test_workflows_are_served_with_their_stage_queues(tmp_path: Path) -> None:
    dev = Dev(
        "examples.character.generators:tasks",
        "--workflows", "examples.character.pipeline:character",
        RSJOBS_DEMO_OUT=str(tmp_path),
    )  # fmt: skip
    try:
        url, _, _ = dev.started()
        dev.expect(r"worker queues actions, default, emotions, images, params ")
        dev.expect(r"workflows character")
        port = int(dev.expect(r"web    http://127\.0\.0\.1:(\d+)/").group(1))
        async with (
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http,
            Client.from_url(url) as client,
        ):
            r = await http.post(
                "/workflows", json={"definition": "character", "input": {"name": "Mei"}}
            )
            assert r.status_code == 202, r.text
            wid = r.json()["id"]

            async def waiting() -> dict[str, Any] | None:
                doc: dict[str, Any] = (await http.get(f"/workflows/{wid}")).json()
                return doc if doc["status"] == "WAITING_CONFIRMATION" else None

            # read again each time the dev's Redis tells of a write to the workflow
            doc = await on_keys(
                client.redis, [client.keys.workflow(wid)], waiting, 30, f"workflow {wid} waiting"
            )
            assert doc["stage"] == "params"  # the params stage ran on its own queue
        assert dev.stop(signal.SIGTERM) == 0, dev.output[-4000:]
    finally:
        dev.kill()


async def test_a_registry_that_declares_hooks_gets_a_hook_runner(tmp_path: Path) -> None:
    log = tmp_path / "hooked.log"
    dev = Dev("tests.cli.apps:hooked", RSJOBS_TEST_HOOK_LOG=str(log))
    try:
        url, _, _ = dev.started()
        dev.expect(r"hooks  log_done; webhooks none")
        out = rsjobs(url, "enqueue", "done", "--wait", "--timeout", "20")
        tid = out.stdout.split()[0]
        deadline = time.monotonic() + 20
        while not (log.exists() and tid in log.read_text()):
            assert time.monotonic() < deadline, dev.output[-4000:]
            await asyncio.sleep(0.05)
        assert dev.stop(signal.SIGTERM) == 0, dev.output[-4000:]
    finally:
        dev.kill()
    assert log.read_text().split() == [tid]  # once
    assert "Traceback" not in dev.output


async def test_configured_webhooks_get_a_hook_runner_and_none_without(redis_url: str) -> None:
    from rsjobs import Settings
    from rsjobs.dev import DevOptions, DevStack
    from tests.cli.apps import tasks

    out: list[str] = []

    class Out:
        def write(self, text: str) -> None:
            out.append(text)

        def flush(self) -> None:
            pass

    opts = DevOptions(settings=Settings(namespace="t"))
    stack = DevStack(tasks, (), opts, Out(), socket.socket())  # type: ignore[arg-type]
    async with Client.from_url(redis_url, namespace="t") as client:
        assert await stack.hooks(client) is None  # no hooks, no webhooks: no runner
        await client.store.hooks.put_webhook(
            "frontend", b'{"url": "http://127.0.0.1:9/x"}', ["SUCCEEDED"]
        )
        runner = await stack.hooks(client)
        assert runner is not None and len(runner.hooks) == 0
        await runner.close()
    stack.web_sock.close()
    assert "hooks  none; webhooks frontend\n" in "".join(out)
