"""A lean, pipelined RESP2 connection for the transition scripts (the hot path).

Every state change is one EVALSHA. Through redis-py's asyncio client each such call costs
about 80-100 µs of client CPU here (a task per send for the socket timeout, a
non-blocking read to check the pooled connection, a timeout scope per read, pure-Python
packing); through this module it costs about 35 µs. It is an ``asyncio.Protocol`` on one
socket: ``hiredis`` packs the request and parses the replies, requests are written in
call order and replies are matched in the same order, so concurrent callers share the
connection without a pool or a lock (Redis answers in order).

A lane belongs to a :class:`LaneRedis`, the redis-py client :func:`rsjobs.connect` makes,
and closes with it. It is made only where that client's pool is a plain TCP or Unix-socket
connection the lane can reproduce (:func:`lane_target`); anything else (TLS, RESP3,
credential providers, custom connection classes) and any redis-py client made elsewhere
(fakeredis included) keeps using redis-py. Semantics match
that client's defaults: no automatic retry, ``socket_timeout`` bounds each reply (a
connection whose oldest reply is overdue is aborted), errors are redis-py's exception
classes (``ConnectionError``, ``TimeoutError``, ``ResponseError`` and its subclasses such
as ``NoScriptError``), so callers handle both paths alike.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import hiredis
from redis import exceptions as rx
from redis.asyncio import Redis
from redis.asyncio.connection import Connection, UnixDomainSocketConnection

__all__ = ["Lane", "LaneRedis", "LaneTarget", "NotSent", "classify", "lane_target"]

# Pool settings the lane reproduces; a pool with any other setting keeps using redis-py.
_SUPPORTED = frozenset(
    {
        "host",
        "port",
        "path",
        "db",
        "username",
        "password",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_keepalive",
        "decode_responses",
        "encoding",
        "encoding_errors",
        "health_check_interval",
        "client_name",
        "retry_on_timeout",
        # the lane sends no CLIENT SETINFO handshake whatever these say
        "lib_name",
        "lib_version",
        "driver_info",
        # the lane never retries (as a pool given no retries)
        "retry",
        # redis-py 8: maintenance notifications arrive only over RESP3 (a pool with a
        # `protocol` setting keeps using redis-py), the original host and timeouts they
        # would restore, and the registry of HIMPORT field sets, a command the lane never
        # sends
        "maint_notifications_config",
        "maint_notifications_pool_handler",
        "orig_host_address",
        "orig_socket_timeout",
        "orig_socket_connect_timeout",
        "himport_registry",
    }
)


@dataclass(frozen=True, slots=True)
class LaneTarget:
    """Where and how to connect: what the redis-py pool would do, minus its machinery."""

    host: str = "localhost"
    port: int = 6379
    path: str | None = None  # Unix socket
    db: int = 0
    username: str | None = None
    password: str | None = None
    timeout: float | None = None  # per reply (socket_timeout)
    connect_timeout: float = 10.0
    client_name: str | None = None


def lane_target(redis: Any) -> LaneTarget | None:
    """The lane settings equivalent to ``redis``'s pool, or None if the lane cannot serve it."""
    if not isinstance(redis, Redis) or redis.connection is not None:
        return None
    pool = redis.connection_pool
    cls = pool.connection_class
    kw = pool.connection_kwargs
    if cls not in (Connection, UnixDomainSocketConnection) or not set(kw) <= _SUPPORTED:
        return None
    if not kw.get("decode_responses") or kw.get("encoding", "utf-8").lower() not in (
        "utf-8",
        "utf8",
    ):
        return None
    if kw.get("encoding_errors", "strict") != "strict" or kw.get("retry_on_timeout"):
        return None
    timeout = kw.get("socket_timeout")
    return LaneTarget(
        host=str(kw.get("host", "localhost")),
        port=int(kw.get("port", 6379)),
        path=kw.get("path") if cls is UnixDomainSocketConnection else None,
        db=int(kw.get("db", 0) or 0),
        username=kw.get("username"),
        password=kw.get("password"),
        timeout=float(timeout) if timeout else None,
        connect_timeout=float(kw.get("socket_connect_timeout") or timeout or 10.0),
        client_name=kw.get("client_name"),
    )


class NotSent(rx.ConnectionError):  # type: ignore[misc]  # redis-py is untyped here
    """No connection could be opened (refused, reset while connecting): the command was
    never sent, so sending it again elsewhere cannot run it twice."""


class _Reply(Exception):
    """A Redis error reply as hiredis hands it over, before classification."""


#: the first word of an error reply -> the redis-py class redis-py's own parser gives it
#: (which then takes the word off the message); any other reply is a ResponseError
_CLASSES: dict[str, type[rx.RedisError]] = {
    "OOM": rx.OutOfMemoryError,
    "WRONGPASS": rx.AuthenticationError,
    "EXECABORT": rx.ExecAbortError,
    "LOADING": rx.BusyLoadingError,
    "NOSCRIPT": rx.NoScriptError,
    "READONLY": rx.ReadOnlyError,
    "NOAUTH": rx.AuthenticationError,
    "NOPERM": rx.NoPermissionError,
    "ASK": rx.AskError,
    "TRYAGAIN": rx.TryAgainError,
    "MOVED": rx.MovedError,
    "CLUSTERDOWN": rx.ClusterDownError,
    "CROSSSLOT": rx.ClusterCrossSlotError,
    "MASTERDOWN": rx.MasterDownError,
}
#: ``ERR <message>`` replies redis-py gives a class of their own
_ERR_CLASSES: dict[str, type[rx.RedisError]] = {
    "max number of clients reached": rx.ConnectionError,
    "invalid password": rx.AuthenticationError,
    "wrong number of arguments for 'auth' command": rx.AuthenticationWrongNumberOfArgsError,
    "wrong number of arguments for 'AUTH' command": rx.AuthenticationWrongNumberOfArgsError,
    # AUTH to a server without a password: Redis >= 6.0, then older ones
    "AUTH <password> called without any password configured for the default user. Are you "
    "sure your configuration is correct?": rx.AuthenticationError,
    "Client sent AUTH, but no password is set": rx.AuthenticationError,
}


def classify(reply: str) -> rx.RedisError:
    """The redis-py exception for an error reply (``NOSCRIPT ...`` -> NoScriptError, ...),
    as redis-py's parser makes it, so both paths raise alike."""
    code, _, rest = reply.partition(" ")
    if code == "ERR":
        return _ERR_CLASSES.get(rest, rx.ResponseError)(rest)
    cls = _CLASSES.get(code)
    if cls is None:
        return rx.ResponseError(reply)
    return cls(rest)


def _error(reply: _Reply) -> rx.RedisError:
    return classify(str(reply))


class _Protocol(asyncio.Protocol):
    """One connection: writes requests, resolves the oldest waiter with each reply."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float | None) -> None:
        self.loop = loop
        self.timeout = timeout
        self.reader = hiredis.Reader(encoding="utf-8", replyError=_Reply)
        self.waiters: deque[tuple[asyncio.Future[Any], float]] = deque()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._paused: asyncio.Future[None] | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self._lost: Exception | None = None
        self._gone: asyncio.Future[None] = loop.create_future()
        self._keeper: asyncio.Task[None] | None = None

    # -- asyncio callbacks ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        # closes the socket when the loop shuts down (asyncio.run cancels every task),
        # so a lane its owner never closed does not outlive its loop
        self._keeper = self.loop.create_task(self._keep(), name="rsjobs-lane")

    async def _keep(self) -> None:
        try:
            await asyncio.shield(self._gone)
        except asyncio.CancelledError:
            self.abort(rx.ConnectionError("event loop shutting down"))

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        waiters = self.waiters
        while True:
            try:
                reply = self.reader.gets()
            except hiredis.ProtocolError as exc:
                self.abort(rx.ConnectionError(f"protocol error from Redis: {exc}"))
                return
            if reply is False:
                return
            if not waiters:  # a reply nobody asked for: the stream is out of step
                self.abort(rx.ConnectionError("unexpected reply from Redis"))
                return
            fut, _ = waiters.popleft()
            if fut.done():  # its caller was cancelled; the reply is dropped in order
                continue
            if isinstance(reply, _Reply):
                fut.set_exception(_error(reply))
            else:
                fut.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        err = self._lost or rx.ConnectionError(
            f"connection to Redis lost{': ' + str(exc) if exc else ''}"
        )
        while self.waiters:
            fut, _ = self.waiters.popleft()
            if not fut.done():
                fut.set_exception(err)
        if self._paused is not None and not self._paused.done():
            self._paused.set_exception(err)
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if not self._gone.done():
            self._gone.set_result(None)

    def pause_writing(self) -> None:
        if self._paused is None or self._paused.done():
            self._paused = self.loop.create_future()

    def resume_writing(self) -> None:
        if self._paused is not None and not self._paused.done():
            self._paused.set_result(None)

    # -- requests ------------------------------------------------------------------------

    def abort(self, err: Exception) -> None:
        """Close at once; every waiting caller gets ``err``."""
        if self._lost is None:
            self._lost = err
        if self.transport is not None:
            self.transport.abort()

    async def request(self, data: bytes, before: int = 0) -> Any:
        """Send ``data`` (one command, or ``before`` + 1 commands in one write: their
        replies arrive together, and all but the last are dropped); the last reply."""
        if self.closed or self.transport is None:
            raise NotSent("connection to Redis is closed")
        now = time.monotonic()
        for _ in range(before):
            ignored: asyncio.Future[Any] = self.loop.create_future()
            ignored.cancel()  # its reply is read and dropped in order
            self.waiters.append((ignored, now))
        fut: asyncio.Future[Any] = self.loop.create_future()
        self.waiters.append((fut, now))
        self.transport.write(data)
        if self.timeout is not None and self._watchdog is None:
            self._watchdog = self.loop.call_later(self.timeout, self._check_overdue)
        if self._paused is not None and not self._paused.done():
            # the kernel buffer is full: wait for it to drain (bounded like a reply)
            await asyncio.wait_for(asyncio.shield(self._paused), self.timeout)
        return await fut

    def _check_overdue(self) -> None:
        """Abort the connection when its oldest reply is later than the timeout."""
        self._watchdog = None
        if self.closed or not self.waiters or self.timeout is None:
            return
        age = time.monotonic() - self.waiters[0][1]
        if age >= self.timeout:
            self.abort(rx.TimeoutError(f"no reply from Redis within {self.timeout:g} s"))
            return
        self._watchdog = self.loop.call_later(self.timeout - age, self._check_overdue)


class Lane:
    """A lazily (re)connected pipelined connection; see the module docstring.

    After a connection is lost, the calls in flight fail with ``ConnectionError`` and the
    next call connects again. Close it with :meth:`aclose`.
    """

    def __init__(self, target: LaneTarget) -> None:
        self.target = target
        self._proto: _Protocol | None = None
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None

    async def call(self, *args: Any) -> Any:
        """Send one command (str, bytes, int or float arguments); return its reply."""
        proto = self._proto
        if proto is None or proto.closed or proto.loop is not asyncio.get_running_loop():
            proto = await self._connect()
        return await proto.request(hiredis.pack_command(args))

    async def call_asking(self, *args: Any) -> Any:
        """``ASKING`` then the command, in one write (so that no other caller's command
        comes between them: ASKING holds for the next command of the connection only);
        the command's reply. A Redis Cluster slot being migrated answers ``ASK``."""
        proto = self._proto
        if proto is None or proto.closed or proto.loop is not asyncio.get_running_loop():
            proto = await self._connect()
        data = hiredis.pack_command(("ASKING",)) + hiredis.pack_command(args)
        return await proto.request(data, before=1)

    async def _connect(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        async with self._lock:
            proto = self._proto
            if proto is not None and not proto.closed and proto.loop is loop:
                return proto
            if proto is not None and proto.loop is loop:
                proto.abort(rx.ConnectionError("reconnecting"))
            self._proto = None
            self._proto = await self._open(loop)
            return self._proto

    async def _open(self, loop: asyncio.AbstractEventLoop) -> _Protocol:
        t = self.target
        proto = _Protocol(loop, t.timeout)
        try:
            async with asyncio.timeout(t.connect_timeout):
                if t.path is not None:
                    await loop.create_unix_connection(lambda: proto, t.path)
                else:
                    await loop.create_connection(lambda: proto, t.host, t.port)
                setup: list[tuple[Any, ...]] = []
                if t.password is not None:
                    setup.append(
                        ("AUTH", t.username, t.password) if t.username else ("AUTH", t.password)
                    )
                if t.db:
                    setup.append(("SELECT", t.db))
                if t.client_name:
                    setup.append(("CLIENT", "SETNAME", t.client_name))
                for cmd in setup:
                    await proto.request(hiredis.pack_command(cmd))
        except rx.TimeoutError as exc:  # no reply to AUTH / SELECT in time
            proto.abort(exc)
            raise
        except TimeoutError:  # the connect itself
            proto.abort(rx.ConnectionError("timeout"))
            raise rx.TimeoutError(f"timeout connecting to Redis at {self._where()}") from None
        except OSError as exc:
            where = self._where()
            raise NotSent(f"error connecting to Redis at {where}: {exc}") from None
        except BaseException:
            proto.abort(rx.ConnectionError("connection setup failed"))
            raise
        return proto

    def _where(self) -> str:
        t = self.target
        return t.path if t.path is not None else f"{t.host}:{t.port}"

    async def aclose(self) -> None:
        """Close the connection; calls in flight fail with ``ConnectionError``."""
        proto, self._proto = self._proto, None
        if proto is not None and not proto.closed:
            proto.abort(rx.ConnectionError("lane closed"))
            await asyncio.sleep(0)  # let connection_lost run before the loop may close


class LaneRedis(Redis):  # type: ignore[misc]  # redis-py is untyped here
    """redis-py's asyncio client plus the :class:`Lane` the transition scripts use.

    ``lane`` is None when the pool is not one the lane can reproduce. :meth:`aclose`
    closes both.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        target = lane_target(self)
        self.lane: Lane | None = Lane(target) if target is not None else None

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        if self.lane is not None:
            await self.lane.aclose()
        await super().aclose(close_connection_pool)
