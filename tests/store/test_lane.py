"""The scripts' connection (rsjobs.store.lane.Lane) against a real Redis: replies matched to
callers under concurrency and cancellation, redis-py's error classes, connection loss,
reply timeouts, and which pools it serves."""

from __future__ import annotations

import asyncio

import fakeredis
import pytest
from redis.asyncio import Redis
from redis.exceptions import (
    AuthenticationError,
    ConnectionError,
    NoScriptError,
    ResponseError,
    TimeoutError,
)

from rsjobs import Client, Settings
from rsjobs.client import connect
from rsjobs.store.lane import Lane, LaneTarget, lane_target
from rsjobs.store.scripts import Scripts, library

pytestmark = pytest.mark.integration


def _target(url: str, **kw: object) -> LaneTarget:
    r = connect(url, **kw)  # type: ignore[arg-type]
    t = lane_target(r)
    assert t is not None
    return t


async def test_concurrent_calls_get_their_own_replies(redis_url: str) -> None:
    lane = Lane(_target(redis_url))
    try:
        # interleave writes and reads of distinct keys from many coroutines at once
        async def one(i: int) -> tuple[int, object, object]:
            await lane.call("SET", f"k{i}", f"v{i}")
            return i, await lane.call("GET", f"k{i}"), await lane.call("INCRBY", "n", i)

        rows = await asyncio.gather(*(one(i) for i in range(300)))
        assert [(i, v) for i, v, _ in rows] == [(i, f"v{i}") for i in range(300)]
        assert all(isinstance(n, int) for _, _, n in rows)
        assert await lane.call("GET", "n") == str(sum(range(300)))
        assert await lane.call("MGET", "k1", "missing") == ["v1", None]
    finally:
        await lane.aclose()


async def test_error_replies_are_redis_py_exceptions(redis_url: str) -> None:
    lane = Lane(_target(redis_url))
    try:
        with pytest.raises(NoScriptError):
            await lane.call("EVALSHA", "0" * 40, 0)
        await lane.call("SET", "s", "x")
        with pytest.raises(ResponseError, match="WRONGTYPE"):
            await lane.call("LPUSH", "s", "y")
        # an error inside a script's reply array stays in place, as with redis-py
        # the connection is still in step after errors
        assert await lane.call("GET", "s") == "x"
    finally:
        await lane.aclose()


async def test_cancelled_caller_leaves_the_connection_in_step(redis_url: str) -> None:
    lane = Lane(_target(redis_url))
    try:
        slow = asyncio.create_task(lane.call("BLPOP", "never", 0.3))
        await asyncio.sleep(0.05)
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow
        # the BLPOP's nil reply arrives later and must not be handed to this caller
        assert await lane.call("ECHO", "after") == "after"
        assert await lane.call("ECHO", "again") == "again"
    finally:
        await lane.aclose()


async def test_lost_connection_fails_calls_in_flight_then_reconnects(redis_url: str) -> None:
    lane = Lane(_target(redis_url, client_name="lane-under-test"))
    admin = Redis.from_url(redis_url, decode_responses=True)
    try:
        assert await lane.call("CLIENT", "GETNAME") == "lane-under-test"
        blocked = asyncio.create_task(lane.call("BLPOP", "never", 5))
        await asyncio.sleep(0.1)
        killed = await admin.client_kill_filter(_type="normal", skipme=True)
        assert killed >= 1
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(blocked, 2)
        # the next call connects again
        assert await lane.call("PING") == "PONG"
    finally:
        await lane.aclose()
        await admin.aclose()


async def test_overdue_reply_times_out_and_the_lane_recovers(redis_url: str) -> None:
    lane = Lane(_target(redis_url, socket_timeout=0.2))
    try:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(lane.call("BLPOP", "never", 3), 2)
        assert await lane.call("PING") == "PONG"
    finally:
        await lane.aclose()


async def test_unreachable_server_is_a_connection_error() -> None:
    lane = Lane(LaneTarget(host="127.0.0.1", port=1, connect_timeout=1))
    with pytest.raises(ConnectionError, match=r"127\.0\.0\.1:1"):
        await lane.call("PING")


async def test_database_and_auth_settings_are_applied(redis_url: str) -> None:
    lane = Lane(_target(redis_url.rpartition("/")[0] + "/3"))
    other = Redis.from_url(redis_url.rpartition("/")[0] + "/3", decode_responses=True)
    try:
        await lane.call("SET", "in-db-3", "yes")
        assert await other.get("in-db-3") == "yes"
    finally:
        await lane.aclose()
        await other.aclose()
    # a wrong password is refused the way redis-py refuses it
    bad = Lane(_target(redis_url.replace("redis://", "redis://:wrong@")))
    with pytest.raises(AuthenticationError):
        await bad.call("PING")
    await bad.aclose()


def test_only_pools_the_lane_can_reproduce() -> None:
    assert lane_target(connect("redis://127.0.0.1:6379/0")) is not None
    unix = lane_target(connect("unix:///tmp/redis.sock?db=2"))
    assert unix is not None and unix.path == "/tmp/redis.sock" and unix.db == 2
    # TLS, bytes replies, RESP3 and fakeredis stay on redis-py
    assert lane_target(connect("rediss://127.0.0.1:6379/0")) is None
    assert lane_target(Redis.from_url("redis://127.0.0.1:6379/0")) is None
    assert lane_target(connect("redis://127.0.0.1:6379/0", protocol=3)) is None
    assert lane_target(fakeredis.FakeAsyncRedis(decode_responses=True)) is None


async def test_client_calls_go_through_the_lane(redis_url: str) -> None:
    c = Client.from_url(redis_url, namespace="t")
    try:
        assert c.store.scripts.lane is not None
        tid = await c.enqueue("noop", {"x": 1})
        assert (await c.get(tid)).state == "PENDING"
        # after SCRIPT FLUSH (a restarted Redis) the call reloads the script and succeeds
        await c.redis.script_flush()
        tid2 = await c.enqueue("noop", {"x": 2})
        assert (await c.get(tid2)).state == "PENDING"
    finally:
        await c.close()
    # a redis-py client made elsewhere keeps using redis-py
    plain = Redis.from_url(redis_url, decode_responses=True)
    try:
        assert Scripts(plain, Settings()).lane is None
        c2 = Client(plain, Settings(namespace="t"))
        assert (await c2.get(await c2.enqueue("noop"))).state == "PENDING"
    finally:
        await plain.aclose()
    assert Scripts(fakeredis.FakeAsyncRedis(decode_responses=True), Settings()).lane is None


async def test_closing_the_client_closes_its_lane(redis_url: str) -> None:
    r = connect(redis_url)
    assert r.lane is not None
    c = Client(r, Settings(namespace="t"))
    await c.enqueue("noop")
    proto = r.lane._proto
    assert proto is not None and not proto.closed
    await r.aclose()
    assert proto.closed


class _TwoNodes:
    """A client whose calls reach one node while SCRIPT LOAD would reach another (what a
    failover leaves behind for a moment): every EVALSHA answers NOSCRIPT."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def execute_command(self, *args: object) -> object:
        self.sent.append(str(args[0]))
        if args[0] == "EVALSHA":
            raise NoScriptError("No matching script. Please use EVAL.")
        return [1]

    async def script_load(self, source: str) -> str:
        raise AssertionError("loaded through another connection than the call's")


async def test_noscript_is_answered_with_eval_where_the_call_goes() -> None:
    from rsjobs.store import layout

    node = _TwoNodes()
    scripts = Scripts(node, Settings())  # type: ignore[arg-type]
    scripts.layout_ok = True  # the layout check before a first call is a call of its own
    scripts.functions = False  # a server without functions (Redis 6.2)
    call = layout.promote(scripts.common, "worker", [])
    assert await scripts.run(call) == [1]
    assert node.sent == ["EVALSHA", "EVAL"]


class _Server:
    """A server that answers FCALL as one without the library does ("Function not found")
    until FUNCTION LOAD, or, without functions at all, "unknown command"."""

    def __init__(self, *, functions: bool) -> None:
        self.functions = functions
        self.loaded = False
        self.sent: list[str] = []

    async def execute_command(self, *args: object) -> object:
        self.sent.append(
            " ".join(str(a) for a in args[:2]) if args[0] == "FUNCTION" else str(args[0])
        )
        if args[0] in ("FCALL", "FCALL_RO", "FUNCTION") and not self.functions:
            raise ResponseError(f"unknown command '{args[0]}', with args beginning with: ")
        if args[0] == "FUNCTION":
            assert args[1:3] == ("LOAD", "REPLACE") and str(args[3]).startswith("#!lua name=")
            self.loaded = True
            return library()[0]
        if args[0] == "FCALL" and not self.loaded:
            raise ResponseError("Function not found")
        return [1]


async def test_a_server_without_the_library_gets_it_and_the_call_is_sent_again() -> None:
    """FCALL of a function the server lacks did not run: the library is loaded (once) and
    the call sent again; a server without functions (6.2) gets EVALSHA from then on."""
    from rsjobs.store import layout

    server = _Server(functions=True)
    scripts = Scripts(server, Settings())  # type: ignore[arg-type]
    scripts.layout_ok = True
    call = layout.promote(scripts.common, "worker", [])
    assert await scripts.run(call) == [1] and await scripts.run(call) == [1]
    assert server.sent == ["FCALL", "FUNCTION LOAD", "FCALL", "FCALL"]
    assert scripts.functions is True

    old = _Server(functions=False)
    scripts = Scripts(old, Settings())  # type: ignore[arg-type]
    scripts.layout_ok = True
    assert await scripts.run(call) == [1] and await scripts.run(call) == [1]
    assert old.sent == ["FCALL", "EVALSHA", "EVALSHA"]
    assert scripts.functions is False


async def test_a_flushed_library_is_loaded_again(redis_url: str) -> None:
    """FUNCTION FLUSH (or a server restarted empty) between two calls: the next call loads
    the library and runs; the server holds one rsjobs library (its name carries a digest
    of its text)."""
    c = Client(connect(redis_url), Settings(namespace="flushed"))
    try:
        await c.enqueue("noop")
        info = await c.redis.info("server")
        if int(str(info["redis_version"]).split(".")[0]) < 7:
            pytest.skip("a server without functions")
        await c.redis.execute_command("FUNCTION", "FLUSH")
        tid = await c.enqueue("noop", {"x": 2})
        assert (await c.get(tid)).state == "PENDING"
        libs = [
            dict(zip(lib[::2], lib[1::2], strict=True)) for lib in await c.redis.function_list()
        ]
        names = [lib["library_name"] for lib in libs]
        assert library()[0] in names
    finally:
        await c.close()
