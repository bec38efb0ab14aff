"""``rsjobs web`` bounds how long a connection may hold a socket without sending a request:
raw sockets against a real process. A connection that sends nothing, or trickles its
headers, is closed after ``--request-timeout-ms``; a keep-alive connection idle after a
response is closed after ``--idle-timeout-ms``; neither bound touches a request whose
headers arrived in time, such as a long event stream."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest

from rsjobs import Client
from rsjobs.server import free_port
from tests.support.web import wait_healthy, web

pytestmark = pytest.mark.integration

REQUEST_MS, IDLE_MS = 1000, 1500
#: the header deadline of the trickle test's server: short, so the trickle is short
TRICKLE_MS = 300
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.fixture
def port(redis_url: str) -> Iterator[int]:
    yield from serve(redis_url, REQUEST_MS)


@pytest.fixture
def trickle_port(redis_url: str) -> Iterator[int]:
    yield from serve(redis_url, TRICKLE_MS)


def serve(redis_url: str, request_ms: int) -> Iterator[int]:
    """``rsjobs web`` on a free port with a header deadline of ``request_ms``."""
    port = free_port()
    proc = web(redis_url, "--port", str(port), "--keepalive-ms", "200",
               "--request-timeout-ms", str(request_ms), "--idle-timeout-ms", str(IDLE_MS),
               env={"RSJOBS_TOKENS": "tk=alice"})  # fmt: skip
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        yield port
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate(timeout=10)


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.settimeout(10)
    return s


def closed_after(s: socket.socket, t0: float) -> float:
    """Seconds from ``t0`` until the server closed ``s`` (reading what it sends)."""
    while s.recv(65536):
        pass
    return time.monotonic() - t0


def read_response(s: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(v) for k, _, v in (h.partition(b": ") for h in head.split(b"\r\n"))
                  if k.lower() == b"content-length")  # fmt: skip
    while len(body) < length:
        body += s.recv(65536)
    return head


def test_a_connection_that_sends_nothing_is_closed(port: int) -> None:
    with connect(port) as s:
        took = closed_after(s, time.monotonic())
    assert REQUEST_MS / 1000 - 0.1 <= took < REQUEST_MS / 1000 + 3


def test_trickled_headers_do_not_extend_the_deadline(trickle_port: int) -> None:
    """A byte every TRICKLE_MS / 6: the connection is closed TRICKLE_MS after it opened,
    however long the trickle would go on."""
    with connect(trickle_port) as s:
        t0 = time.monotonic()
        s.sendall(b"GET /healthz HTTP/1.1\r\n")
        sent = 0
        try:
            while time.monotonic() - t0 < 6:
                s.sendall(b"X")  # a header name that never ends
                sent += 1
                time.sleep(TRICKLE_MS / 1000 / 6)
        except (BrokenPipeError, ConnectionResetError):
            pass
        took = closed_after(s, t0) if sent else 0.0
        assert sent >= 5 and TRICKLE_MS / 1000 - 0.1 <= took < TRICKLE_MS / 1000 + 3


def test_an_idle_keep_alive_connection_is_closed(port: int) -> None:
    with connect(port) as s:
        s.sendall(HEALTHZ)
        assert read_response(s).startswith(b"HTTP/1.1 200")
        t0 = time.monotonic()
        s.sendall(HEALTHZ)  # the connection is kept alive between requests
        assert read_response(s).startswith(b"HTTP/1.1 200")
        took = closed_after(s, time.monotonic())
        assert IDLE_MS / 1000 - 0.1 <= took < IDLE_MS / 1000 + 3
        assert time.monotonic() - t0 >= IDLE_MS / 1000 - 0.1


def test_the_next_request_after_a_response_is_bounded_too(port: int) -> None:
    with connect(port) as s:
        s.sendall(HEALTHZ)
        assert read_response(s).startswith(b"HTTP/1.1 200")
        s.sendall(b"GET /healthz HTTP/1.1\r\nHo")  # then nothing more
        took = closed_after(s, time.monotonic())
        assert REQUEST_MS / 1000 - 0.1 <= took < REQUEST_MS / 1000 + 3


async def test_requests_in_time_and_long_streams_are_untouched(port: int, client: Client) -> None:
    with connect(port) as s:  # headers in two parts, well within the bound
        s.sendall(HEALTHZ[:10])
        await asyncio.sleep(REQUEST_MS / 1000 / 3)
        s.sendall(HEALTHZ[10:])
        assert read_response(s).startswith(b"HTTP/1.1 200")
    tid = await client.enqueue("x", owner="alice")
    auth = {"Authorization": "Bearer tk"}
    async with (
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http,
        http.stream("GET", f"/tasks/{tid}/events", headers=auth) as r,
    ):
        assert r.status_code == 200
        t0, comments, lines = time.monotonic(), 0, r.aiter_lines()
        async for line in lines:
            comments += line == ": keep-alive"
            if time.monotonic() - t0 > (REQUEST_MS + IDLE_MS) / 1000 + 0.5:
                break
        assert comments >= 3  # the stream outlived both bounds
        await client.cancel(tid)
        rest = [line async for line in lines]
        assert "event: end" in rest


def test_timeouts_must_be_positive(redis_url: str) -> None:
    for flag in ("--request-timeout-ms", "--idle-timeout-ms"):
        proc = web(redis_url, "--port", str(free_port()), flag, "0", env={"RSJOBS_TOKENS": "tk=a"})
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 2 and "timeouts must be positive" in err, err
