"""Fixtures of the deferred-completion tests: the test provider, the web app with a
callback secret, and worker child processes that sign with the same secret."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rsjobs.web import WebConfig, create_app
from tests.support.processes import spawn_worker, stop_process
from tests.support.provider import Provider
from tests.support.reaper import spawn_reaper
from tests.support.web import ServerThread

NS = "t"
SECRET = "deferred-test-secret-0123456789"
ADMIN = "admin-token-for-deferred-tests"


@pytest.fixture
def provider() -> Iterator[Provider]:
    p = Provider(secret=SECRET).start()
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture
def web(redis_url: str) -> Iterator[ServerThread]:
    app = create_app(
        redis_url,
        namespace=NS,
        admin_token=ADMIN,
        env={},
        config=WebConfig(callback_secret=SECRET),
    )
    server = ServerThread(app).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def workers(
    redis_url: str, web: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start ``rsjobs worker tests.support.deferred_apps:tasks`` processes (args: CLI
    options), signing callbacks for ``web``; all stopped at the end."""
    monkeypatch.setenv("RSJOBS_CALLBACK_SECRET", SECRET)
    monkeypatch.setenv("RSJOBS_CALLBACK_URL", web.url)
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> subprocess.Popen[bytes]:
        proc = spawn_worker(redis_url, NS, *args, app="tests.support.deferred_apps:tasks")
        started.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in started:
            stop_process(proc)


@pytest.fixture
def reaper_proc(redis_url: str, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``rsjobs reaper`` sweeping every 100 ms (the longest waits are its deadlines)."""
    proc = spawn_reaper(redis_url, NS, str(tmp_path / "reaper.log"), "--interval-ms", "100")
    try:
        yield proc
    finally:
        stop_process(proc)
