"""``rsjobs web``: refuses to start open, serves with --dev, and on SIGTERM ends open event
streams at once instead of waiting on them."""

from __future__ import annotations

import signal
import time

import httpx
import pytest

from rsjobs import Client
from rsjobs.server import free_port
from tests.support.web import wait_healthy, web

pytestmark = pytest.mark.integration


def test_refuses_to_start_without_tokens(redis_url: str) -> None:
    proc = web(redis_url, "--port", str(free_port()))
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert "no API tokens configured" in err and "--dev" in err


async def test_serves_with_tokens_and_stops_promptly_with_open_streams(
    redis_url: str, client: Client
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = web(redis_url, "--port", str(port), env={"RSJOBS_TOKENS": "tk=alice"})
    try:
        wait_healthy(base, proc)
        tid = await client.enqueue("x", owner="alice")
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            assert (await http.get(f"/tasks/{tid}")).status_code == 401
            auth = {"Authorization": "Bearer tk"}
            assert (await http.get(f"/tasks/{tid}", headers=auth)).json()["state"] == "PENDING"
            async with http.stream("GET", f"/tasks/{tid}/events", headers=auth) as r:
                assert r.status_code == 200
                lines = r.aiter_lines()
                async for line in lines:
                    if line.startswith("id: "):
                        break
                t0 = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                rest = [line async for line in lines]  # the server ends the stream cleanly
                assert not any(line.startswith("event: end") for line in rest)
        proc.communicate(timeout=10)
        assert time.monotonic() - t0 < 4  # not the 5 s graceful-shutdown timeout
        assert proc.returncode in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


async def test_durable_mode_of_the_command_line_reaches_the_app(redis_url: str) -> None:
    """``rsjobs --wait-replicas 1 web`` (here through RSJOBS_WAIT_REPLICAS): a submit the
    session's Redis (no replica) cannot confirm answers 503 not_replicated, not 202."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {"RSJOBS_TOKENS": "tk=alice", "RSJOBS_WAIT_REPLICAS": "1",
           "RSJOBS_WAIT_TIMEOUT_MS": "100"}  # fmt: skip
    proc = web(redis_url, "--port", str(port), env=env)
    try:
        wait_healthy(base, proc)
        auth = {"Authorization": "Bearer tk"}
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            r = await http.post("/tasks", json={"type": "x"}, headers=auth)
        assert r.status_code == 503 and r.json()["error"] == "not_replicated", r.text
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
