"""``--log-format json`` (and ``RSJOBS_LOG_FORMAT``): one JSON object per line from the
worker, the reaper, the web app and ``rsjobs dev``; the lines logged while a task runs
(async handler, sync handler's thread) name its id, type, queue and attempt."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from rsjobs import Client
from rsjobs.cli import main
from rsjobs.logfmt import JsonFormatter, TaskFields, task_scope
from rsjobs.server import free_port
from tests.cli.support import Dev
from tests.support.processes import ROOT, stop_process
from tests.support.waits import wait_until
from tests.support.web import wait_healthy, web

APP = "tests.cli.apps:tasks"
BASE = {"ts", "level", "logger", "message"}
TASK = {"task_id", "task_type", "queue", "attempt"}


def _record(msg: str, *args: Any, **extra: Any) -> logging.LogRecord:
    record = logging.LogRecord("rsjobs.x", logging.WARNING, __file__, 1, msg, args, None)
    record.__dict__.update(extra)
    return record


def test_a_line_is_one_json_object_and_names_the_bound_task() -> None:
    fmt = JsonFormatter()
    line = fmt.format(_record("hello %s", "world"))
    doc = json.loads(line)
    assert "\n" not in line and set(doc) == BASE
    assert (doc["level"], doc["logger"], doc["message"]) == ("WARNING", "rsjobs.x", "hello world")
    assert doc["ts"].endswith("Z") and doc["ts"][10] == "T" and len(doc["ts"]) == 24
    with task_scope(TaskFields("a" * 32, "render", "gpu", 2)):
        doc = json.loads(fmt.format(_record("in a task")))
    assert {k: doc[k] for k in TASK} == {
        "task_id": "a" * 32, "task_type": "render", "queue": "gpu", "attempt": 2
    }  # fmt: skip
    assert set(json.loads(fmt.format(_record("after")))) == BASE  # the scope ended
    # a call site's extra wins; a multi-line traceback stays inside the one line
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        record = _record("failed", task_id="b" * 32, attempt=1)
        record.exc_info = sys.exc_info()
    line = fmt.format(record)
    doc = json.loads(line)
    assert "\n" not in line and doc["task_id"] == "b" * 32 and doc["attempt"] == 1
    assert "ValueError: boom" in doc["exc"] and "task_type" not in doc
    # a value JSON cannot carry does not lose the line
    assert json.loads(fmt.format(_record("odd", task_id=object())))["message"] == "odd"


def _env(**more: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("RSJOBS_")}
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    e.update(more)
    return e


def _spawn(url: str, out: IO[bytes], *args: str, **env: str) -> subprocess.Popen[bytes]:
    """``rsjobs *args`` on namespace t, its log into ``out``."""
    return subprocess.Popen(
        [sys.executable, "-m", "rsjobs", "--url", url, "--namespace", "t", *args],
        cwd=ROOT, env=_env(**env), stderr=out, start_new_session=True,
    )  # fmt: skip


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


async def test_worker_lines_are_json_and_task_lines_name_the_task(
    redis_url: str, client: Client, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = _spawn(redis_url, out, "--log-format", "json", "worker", APP, "-q", "default")
        try:
            a = await client.enqueue("chatty", "hi")
            s = await client.enqueue("chatty_sync", "there", max_attempts=2)
            for tid in (a, s):
                assert (await client.wait(tid, timeout_ms=20_000)).state == "SUCCEEDED"
        finally:
            stop_process(proc, 15)
            proc.wait(timeout=20)
    lines = _json_lines(log.read_text())  # every line parses
    assert all(set(d) >= BASE for d in lines)
    assert any(d["logger"] == "rsjobs.worker" and d["level"] == "INFO" for d in lines)
    said = {d["message"]: d for d in lines if d["logger"] == "tests.app"}
    for tid, ttype, message in ((a, "chatty", "async handler says hi"),
                                (s, "chatty_sync", "sync handler says there")):  # fmt: skip
        d = said[message]
        assert (d["task_id"], d["task_type"], d["queue"], d["attempt"]) == (
            tid, ttype, "default", 1
        ), d  # fmt: skip
    # lines of the worker itself (start, stop) name no task
    assert all("task_id" not in d for d in lines if d["logger"] == "rsjobs.worker")


@pytest.mark.parametrize("fmt", ["text", "json"])
async def test_a_failed_attempt_is_logged_with_its_traceback(
    redis_url: str, client: Client, tmp_path: Path, fmt: str
) -> None:
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = _spawn(redis_url, out, "--log-format", fmt, "worker", APP, "-q", "default")
        try:
            tid = await client.enqueue("broken", 3, max_attempts=1)
            assert (await client.wait(tid, timeout_ms=20_000)).state == "FAILED"
        finally:
            stop_process(proc, 15)
            proc.wait(timeout=20)
    text = log.read_text()
    if fmt == "json":
        lines = _json_lines(text)
        (warning,) = [d for d in lines if d["level"] == "WARNING" and tid in d["message"]]
        assert "RuntimeError: broken at depth 3" in warning["message"]
        (tb,) = [d for d in lines if d["logger"] == "rsjobs.worker.traceback"]
        assert (tb["task_id"], tb["task_type"], tb["attempt"]) == (tid, "broken", 1)
        exc = tb["exc"]
    else:
        assert f"task {tid} (type broken, queue default) failed on attempt 1" in text
        exc = text
    assert "Traceback (most recent call last)" in exc and "in _deep" in exc
    assert "tests/cli/apps.py" in exc and "RuntimeError: broken at depth 3" in exc


def test_reaper_lines_are_json_through_the_env(redis_url: str, tmp_path: Path) -> None:
    log = tmp_path / "reaper.log"
    with log.open("wb") as out:
        proc = _spawn(
            redis_url, out, "reaper", "--interval-ms", "100", "--log-idle", RSJOBS_LOG_FORMAT="json"
        )
        try:
            wait_until(lambda: b'"sweep"' in log.read_bytes(), 20, "a sweep line")
        finally:
            stop_process(proc, 15)
            proc.wait(timeout=20)
    lines = _json_lines(log.read_text())
    assert all(set(d) >= BASE and d["logger"] == "rsjobs.reaper" for d in lines)
    events = [d["message"] for d in lines]
    assert events[0] == "start" and "sweep" in events and events[-1] == "stop", events
    # the sweep's fields are members, not text inside the message
    start = lines[0]
    assert start["namespace"] == "t" and isinstance(start["config"], dict)


def test_an_unknown_format_is_a_clear_error(redis_url: str) -> None:
    for how in (["--log-format", "xml"], []):
        out = subprocess.run(
            [sys.executable, "-m", "rsjobs", "--url", redis_url, *how, "reaper", "--once"],
            cwd=ROOT, env=_env(RSJOBS_LOG_FORMAT="xml"), capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip
        assert out.returncode == 2 and "xml" in out.stderr, out.stderr


def test_an_unknown_log_level_is_a_clear_error_before_anything_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """(it used to be accepted, and ignored by the commands that log nothing; here no Redis
    is reached: the URL is of a closed port)"""
    assert main(["--url", "redis://127.0.0.1:1", "--log-level", "LOUD", "queues"]) == 2
    assert "log level 'LOUD'" in capsys.readouterr().err
    assert main(["--url", "redis://127.0.0.1:1", "--log-level", "warning", "queues"]) == 3


def test_web_lines_are_json_uvicorn_access_lines_too(redis_url: str) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = web(
        redis_url, "--port", str(port),
        env={"RSJOBS_TOKENS": "tk=alice", "RSJOBS_LOG_FORMAT": "json"},
    )  # fmt: skip
    try:
        wait_healthy(base, proc)
        assert httpx.get(base + "/tasks/" + "0" * 32, headers={"Authorization": "Bearer tk"},
                         timeout=10).status_code == 404  # fmt: skip
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    lines = _json_lines(err)
    assert all(set(d) >= BASE for d in lines)
    loggers = {d["logger"] for d in lines}
    assert {"uvicorn.error", "uvicorn.access"} <= loggers, loggers
    assert any("/tasks/" in d["message"] and "404" in d["message"] for d in lines)


async def test_dev_lines_are_json(tmp_path: Path) -> None:
    dev = Dev(APP, "--grace-ms", "200", "--web-port", str(free_port()),
              RSJOBS_LOG_FORMAT="json")  # fmt: skip
    try:
        url, _, _ = dev.started()
        async with Client.from_url(url) as client:
            tid = await client.enqueue("chatty", "from dev")
            assert (await client.wait(tid, timeout_ms=20_000)).state == "SUCCEEDED"
        dev.expect("async handler says from dev", timeout=10)
    finally:
        dev.kill()
    # the banner is printed for people; every log line is one JSON object
    logged = [json.loads(line) for line in dev.lines if line.startswith("{")]
    said = [d for d in logged if d["message"] == "async handler says from dev"]
    assert len(said) == 1 and said[0]["task_id"] == tid and said[0]["queue"] == "default"
    assert not [line for line in dev.lines if " WARNING " in line or " INFO " in line]
