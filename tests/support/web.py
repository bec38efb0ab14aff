"""Helpers for the web tests: a real uvicorn server in a thread, an SSE reader, a worker."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any

import httpx
import msgspec
import redis as sync_redis
import uvicorn
from starlette.applications import Starlette

with warnings.catch_warnings():
    # Starlette 1.x prefers httpx2 for its TestClient and warns when it falls back to httpx
    # (which is what is installed); the warning is not about our code.
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient as TestClient

from rsjobs import Settings, Worker
from rsjobs.server import free_port
from rsjobs.web import WebConfig, create_app
from rsjobs.workflows import WorkflowDefinition
from tests.support.apps import tasks
from tests.support.processes import ROOT as PROJECT

NAMESPACE = "t"
TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}
ADMIN = "tok-admin"


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


ALICE, BOB, ROOT = auth("tok-alice"), auth("tok-bob"), auth(ADMIN)


def make_app(
    url: str,
    *,
    dev: bool = False,
    definitions: Iterable[WorkflowDefinition] = (),
    namespace: str = NAMESPACE,
    **config: Any,
) -> Starlette:
    """The app as the tests use it: namespace "t" (unless given another), alice / bob /
    admin tokens, no env."""
    return create_app(
        url,
        namespace=namespace,
        tokens=TOKENS,
        admin_token=ADMIN,
        dev=dev,
        env={},
        config=WebConfig(**config),
        definitions=definitions,
    )


class ServerThread:
    """uvicorn serving ``app`` on 127.0.0.1 in a thread with its own event loop."""

    def __init__(self, app: Starlette, port: int | None = None) -> None:
        self.app = app
        self.port = port or free_port()
        self.server = uvicorn.Server(
            uvicorn.Config(
                app,
                host="127.0.0.1",
                port=self.port,
                log_level="warning",
                lifespan="on",
                timeout_graceful_shutdown=1,
            )
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.app.state.rsjobs.close_streams()  # as `rsjobs web` does on SIGTERM
        self.server.should_exit = True
        self.thread.join(15)
        assert not self.thread.is_alive(), "uvicorn did not stop"


@contextlib.contextmanager
def serve(app: Starlette, port: int | None = None) -> Iterator[ServerThread]:
    server = ServerThread(app, port).start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def running_worker(url: str, **kw: Any) -> AsyncIterator[Worker]:
    """A worker for tests.support.apps:tasks in this event loop (progress written every 10 ms)."""
    opts: dict[str, Any] = {
        "concurrency": 8,
        "lease_ms": 2000,
        "handle_signals": False,
        "promote_ms": 20,
        "progress_ms": 10,
        "block_ms": 100,
        "settings": Settings(namespace=NAMESPACE),
    }
    opts.update(kw)
    w = Worker(tasks, url=url, **opts)
    task = asyncio.create_task(w.run())
    try:
        yield w
    finally:
        w.stop(force=True)
        await asyncio.wait_for(task, 20)
        await w.redis.aclose()


async def eventually(check: Callable[[], bool], timeout: float = 5.0, what: str = "") -> None:
    """Wait until ``check()`` is true (polling every 10 ms), or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        await asyncio.sleep(0.01)


class SSEEvent(msgspec.Struct):
    id: str | None
    event: str
    data: str

    def json(self) -> Any:
        return msgspec.json.decode(self.data)


class SSEReader:
    """Parses a text/event-stream response line by line (comments are kept apart)."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.lines = response.aiter_lines()
        self.comments: list[str] = []
        self.retry: int | None = None
        self.cut = False

    async def next(self) -> SSEEvent | None:
        """The next event, or None when the stream ended (or the connection was cut)."""
        ev_id: str | None = None
        event, data = "message", list[str]()
        try:
            async for line in self.lines:
                if line == "":
                    if data or ev_id is not None or event != "message":
                        return SSEEvent(ev_id, event, "\n".join(data))
                    continue
                if line.startswith(":"):
                    self.comments.append(line[1:].strip())
                    continue
                name, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if name == "id":
                    ev_id = value
                elif name == "event":
                    event = value
                elif name == "data":
                    data.append(value)
                elif name == "retry":
                    self.retry = int(value)
        except httpx.RemoteProtocolError:  # the server went away mid-response
            self.cut = True
        return None

    async def take(self, n: int, timeout: float = 10.0) -> list[SSEEvent]:
        out: list[SSEEvent] = []
        async with asyncio.timeout(timeout):
            while len(out) < n:
                ev = await self.next()
                if ev is None:
                    break
                out.append(ev)
        return out

    async def rest(self, timeout: float = 20.0) -> list[SSEEvent]:
        """Every event until the server ends the stream."""
        out: list[SSEEvent] = []
        async with asyncio.timeout(timeout):
            while (ev := await self.next()) is not None:
                out.append(ev)
        return out


def web(url: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("RSJOBS_")}
    e["PYTHONPATH"] = PROJECT + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env or {})
    cmd = [sys.executable, "-m", "rsjobs", "--url", url, "--namespace", "t", "web", *args]
    return subprocess.Popen(cmd, cwd=PROJECT, env=e, stderr=subprocess.PIPE, text=True)


def wait_healthy(base: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, "rsjobs web did not start"
        time.sleep(0.05)


def key_content(r: sync_redis.Redis, key: bytes | str) -> Any:
    """What a key holds, comparable before and after: a hash's fields and a set's members
    by content (a hashtable-encoded one DUMPs differently with the same content: its order
    follows insertion and rehashing), any other type by its DUMP."""
    kind = r.type(key)
    if kind in (b"hash", "hash"):
        return ("hash", sorted(r.hgetall(key).items()))
    if kind in (b"set", "set"):
        return ("set", sorted(r.smembers(key)))
    return ("dump", r.dump(key))


def redis_state(r: sync_redis.Redis) -> dict[bytes, Any]:
    """Every key with its content: equal before and after means nothing was written."""
    state = {k: key_content(r, k) for k in sorted(r.scan_iter(count=1000))}
    assert state, "expected a non-empty database"
    return state
