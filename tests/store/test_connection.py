"""Topology from the URL, redaction, and the transient-error policy (no Redis)."""

from __future__ import annotations

import pytest
from redis.exceptions import (
    BusyLoadingError,
    ClusterDownError,
    MasterDownError,
    NoScriptError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from rsjobs import Client, ConfigError, RedisUnavailable, Settings
from rsjobs.store.connection import SentinelRedis, connect, parse_url, redact_url
from rsjobs.store.lane import LaneRedis
from rsjobs.store.transient import as_unavailable, is_failover, is_transient


def test_plain_urls_are_standalone() -> None:
    for url in ("redis://127.0.0.1:6379/0", "rediss://h:6380/1", "unix:///tmp/r.sock?db=2"):
        t = parse_url(url)
        assert t.topology == "standalone" and t.url == url
    assert parse_url("rediss://h/0").tls


def test_sentinel_url() -> None:
    t = parse_url("redis+sentinel://u:p%40ss@10.0.0.1:26379,10.0.0.2,[::1]:26380/images/3")
    assert t.topology == "sentinel"
    assert t.sentinels == (("10.0.0.1", 26379), ("10.0.0.2", 26379), ("::1", 26380))
    assert (t.service, t.db, t.username, t.password, t.tls) == ("images", 3, "u", "p@ss", False)
    t = parse_url("rediss+sentinel://h:1/svc?sentinel_password=x")
    assert t.tls and t.db == 0 and t.sentinel_kwargs == {"password": "x"}


@pytest.mark.parametrize(
    "url",
    [
        "127.0.0.1:6379",
        "http://h/0",
        "redis+sentinel://h:26379",  # no service
        "redis+sentinel://h:26379/svc/0/extra",
        "redis+sentinel://h:99999/svc",
        "redis+sentinel://h:\uff12\uff16/svc",  # non-ASCII digits
        "redis+sentinel://h:1/svc/x",
        "redis+sentinel://h:1/svc?socket_timeout=1",
    ],
)
def test_bad_urls_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError):
        parse_url(url)


@pytest.mark.parametrize(
    "url, reason",
    [
        ("redis://127.0.0.1:99999/0", "invalid port '99999'"),
        ("redis://127.0.0.1:0/0", "invalid port 0"),
        ("redis://127.0.0.1:x/0", "invalid port 'x'"),
        ("redis://h:6379/abc", "invalid database 'abc'"),
        ("redis://h:6379/\uff11", "invalid database"),  # a non-ASCII digit
        ("redis://h:6379/0?db=two", "invalid database 'two'"),
        ("unix:///tmp/r.sock?db=x", "invalid database 'x'"),
        ("unix://?db=0", "names a socket"),
        ("redis://:6379/0", "no host"),
        ("redis://h/0?socket_timeout=abc", "invalid socket_timeout='abc'"),
        ("redis://h/0?socket_timeout=nan", "invalid socket_timeout='nan'"),
        ("redis://h/0?socket_connect_timeout=-1", "invalid socket_connect_timeout"),
        ("redis://h/0?max_connections=0", "invalid max_connections='0'"),
        ("redis://h/0?health_check_interval=1.5", "invalid health_check_interval"),
        ("redis://h/0?socket_keepalive=maybe", "invalid socket_keepalive='maybe'"),
        ("ftp://h/0", "unsupported redis URL scheme 'ftp'"),
        ("redis+cluster://h:7000/3", "only database 0"),
    ],
)
def test_a_bad_plain_url_is_one_line_saying_why(url: str, reason: str) -> None:
    """Checked before anything connects: a typed error whose one line names the fault
    (never redis-py's ValueError, a traceback, or database 0 taken silently)."""
    for make in (parse_url, connect, Client.from_url):
        with pytest.raises(ConfigError) as caught:
            make(url)
        assert reason in str(caught.value) and "\n" not in str(caught.value)


def test_good_plain_urls_keep_their_settings() -> None:
    t = parse_url("redis://u:p@h:6380/3?socket_timeout=2.5&health_check_interval=0&x=y")
    assert t.db == 3 and t.topology == "standalone"
    assert parse_url("unix:///tmp/r.sock?db=2").db == 2
    assert parse_url("redis://h/0?db=4").db == 4  # redis-py reads ?db= over the path
    assert parse_url("redis://[::1]:6379").db == 0


def test_passwords_never_printed() -> None:
    assert redact_url("redis://:secret@h:1/0") == "redis://***@h:1/0"
    assert redact_url("redis://user:secret@h:1/0") == "redis://user:***@h:1/0"
    assert redact_url("redis://h:1/0") == "redis://h:1/0"
    assert "secret" not in parse_url("redis+sentinel://u:secret@h/svc").describe()
    with pytest.raises(ConfigError) as err:
        parse_url("ftp://u:secret@h/0")
    assert "secret" not in str(err.value)


async def test_clients_have_bounded_timeouts_and_no_hidden_retries() -> None:
    c = connect("redis://127.0.0.1:1/0", socket_timeout=2.0, connect_timeout=1.5)
    kw = c.connection_pool.connection_kwargs
    assert isinstance(c, LaneRedis) and c.lane is not None
    assert (kw["socket_timeout"], kw["socket_connect_timeout"]) == (2.0, 1.5)
    # no SETINFO round trip (redis-py 8 says so with driver_info, older ones with lib_name)
    info = kw.get("driver_info")
    if info is not None:
        assert info.formatted_name is None and info.lib_version is None
    else:
        assert kw["lib_name"] is None and kw["lib_version"] is None
    # rsjobs's policy decides, not redis-py's: its Retry makes one call and no retry
    # (asked as both redis-py 5.2 and 8 can answer: get_retries() is 6.x's)
    calls = 0

    async def down() -> None:
        nonlocal calls
        calls += 1
        raise RedisConnectionError("down")

    async def noted(error: Exception) -> None:
        return None

    with pytest.raises(RedisConnectionError):
        await kw["retry"].call_with_retry(down, noted)
    assert calls == 1
    await c.aclose()
    s = connect("redis+sentinel://127.0.0.1:1,127.0.0.1:2/svc/0")
    assert isinstance(s, SentinelRedis) and s.lane is None
    calls = 0
    with pytest.raises(RedisConnectionError):
        await s.connection_pool.connection_kwargs["retry"].call_with_retry(down, noted)
    assert calls == 1
    await s.aclose()


@pytest.mark.parametrize(
    "exc",
    [
        RedisConnectionError("reset"),
        RedisTimeoutError("slow"),
        BusyLoadingError("LOADING Redis is loading the dataset in memory"),
        ReadOnlyError("You can't write against a read only replica."),
        MasterDownError("MASTERDOWN Link with MASTER is down"),
        ClusterDownError("CLUSTERDOWN The cluster is down"),
        TryAgainError("TRYAGAIN"),
        ResponseError("UNBLOCKED force unblock from blocking operation, instance state changed"),
        ResponseError("NOREPLICAS Not enough good replicas to write."),
        OSError("network unreachable"),
        RedisUnavailable("down"),
    ],
)
def test_transient(exc: BaseException) -> None:
    assert is_transient(exc)
    u = as_unavailable(exc)
    assert isinstance(u, RedisUnavailable) and isinstance(u, OSError)


@pytest.mark.parametrize(
    "exc",
    [
        ResponseError("ERR Error running script: attempt to compare nil"),
        ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
        NoScriptError("NOSCRIPT No matching script"),
        ValueError("x"),
    ],
)
def test_not_transient(exc: BaseException) -> None:
    assert not is_transient(exc)


def test_failover_is_seen_through_the_cause() -> None:
    cause = ReadOnlyError("You can't write against a read only replica.")
    wrapped = as_unavailable(cause)
    wrapped.__cause__ = cause
    assert is_failover(wrapped) and is_failover(ResponseError("UNBLOCKED force unblock"))
    assert not is_failover(RedisConnectionError("reset"))


def test_durable_settings_are_checked() -> None:
    assert Settings(wait_replicas=1).wait_timeout_ms == 1000
    for bad in ({"wait_replicas": -1}, {"wait_replicas": 101}, {"wait_timeout_ms": 0}):
        with pytest.raises(ConfigError):
            Settings(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "reply, cls, message",
    [
        ("NOSCRIPT No matching script.", "NoScriptError", "No matching script."),
        ("WRONGTYPE Operation against a key", "ResponseError", "WRONGTYPE Operation against a key"),
        ("OOM command not allowed", "OutOfMemoryError", "command not allowed"),
        ("ERR unknown command 'X'", "ResponseError", "unknown command 'X'"),
        ("ERR max number of clients reached", "ConnectionError", "max number of clients reached"),
        ("ERR invalid password", "AuthenticationError", "invalid password"),
        ("LOADING Redis is loading", "BusyLoadingError", "Redis is loading"),
        ("READONLY You can't write", "ReadOnlyError", "You can't write"),
        ("MASTERDOWN Link down", "MasterDownError", "Link down"),
        ("NOPERM no", "NoPermissionError", "no"),
        (
            "ERR Client sent AUTH, but no password is set",
            "AuthenticationError",
            "Client sent AUTH, but no password is set",
        ),
        (
            "BUSY Redis is busy running a script",
            "ResponseError",
            "BUSY Redis is busy running a script",
        ),
        ("UNBLOCKED client unblocked", "ResponseError", "UNBLOCKED client unblocked"),
        ("user_script:1: rsjobs: invalid x", "ResponseError", "user_script:1: rsjobs: invalid x"),
    ],
)
def test_the_lane_classifies_error_replies_as_redis_py_does(
    reply: str, cls: str, message: str
) -> None:
    """The lane's own table gives each error reply the class (and message) redis-py's
    parser gives it, so callers handle both paths alike."""
    from redis import exceptions

    from rsjobs.store.lane import classify

    err = classify(reply)
    assert type(err) is getattr(exceptions, cls) and str(err) == message
