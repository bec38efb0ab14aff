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

from rsjobs import ConfigError, RedisUnavailable, Settings
from rsjobs.connection import SentinelRedis, connect, parse_url, redact_url
from rsjobs.resp import LaneRedis
from rsjobs.transient import as_unavailable, is_failover, is_transient


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
    assert kw["lib_name"] is None and kw["lib_version"] is None  # no SETINFO round trip
    assert kw["retry"].get_retries() == 0  # rsjobs's policy decides, not redis-py's
    await c.aclose()
    s = connect("redis+sentinel://127.0.0.1:1,127.0.0.1:2/svc/0")
    assert isinstance(s, SentinelRedis) and s.lane is None
    assert s.connection_pool.connection_kwargs["retry"].get_retries() == 0
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
