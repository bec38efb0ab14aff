"""Where rsjobs connects: one place decides the topology from the URL and says what it chose.

=============================================================  =================================
URL                                                            topology
=============================================================  =================================
``redis://[user:pass@]host:port/db``                           one server over TCP
``unix:///path/to/redis.sock?db=0``                            one server over a Unix socket
``rediss://...``                                               one server over TLS
``redis+sentinel://[user:pass@]h1:26379,h2:26379/service/db``  the primary of ``service``, found
                                                               through Sentinel (``rediss+sentinel``
                                                               for TLS to the data nodes)
=============================================================  =================================

Sentinel URLs take ``sentinel_username`` / ``sentinel_password`` query parameters when the
sentinels themselves require auth. After a failover, connections to the demoted primary
are dropped (its ``READONLY`` replies) and the next ones ask Sentinel for the new primary.

Every client made here has bounded timeouts (``connect_timeout`` for the TCP connect,
``socket_timeout`` for each reply) and skips redis-py's ``CLIENT SETINFO`` handshake: a new
connection is then usable as soon as it is open, so a frozen server costs each caller one
reply timeout instead of queueing them behind each other in the pool. redis-py's own
automatic retry (3 retries with up to 10 s of backoff by default since redis-py 6) is off:
a retried ``start.lua`` after a lost reply would start work nobody runs, and the retry
hides outages from the callers. rsjobs's policy (:mod:`rsjobs.transient`) decides instead.
A plain TCP or Unix socket client also gets the pipelined script connection of
:mod:`rsjobs.resp`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff

from .errors import ConfigError
from .resp import LaneRedis

__all__ = [
    "SentinelRedis",
    "Target",
    "connect",
    "describe",
    "parse_url",
    "redact_url",
    "reset_connections",
]

log = logging.getLogger("rsjobs")

_PLAIN = ("redis", "rediss", "unix")
_SENTINEL = ("redis+sentinel", "rediss+sentinel")
SENTINEL_PORT = 26379

#: reply bound of blocking reads (XREADGROUP / XREAD BLOCK) must stay above their block time
DEFAULT_SOCKET_TIMEOUT = 30.0
DEFAULT_CONNECT_TIMEOUT = 5.0


@dataclass(frozen=True)
class Target:
    """A parsed URL: what :func:`connect` will build."""

    scheme: str
    #: "standalone" or "sentinel"
    topology: str
    #: the URL redis-py takes (standalone), or None for Sentinel
    url: str | None = None
    sentinels: tuple[tuple[str, int], ...] = ()
    service: str = ""
    db: int = 0
    tls: bool = False
    username: str | None = None
    password: str | None = None
    sentinel_kwargs: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        if self.topology == "sentinel":
            hosts = ",".join(f"{h}:{p}" for h, p in self.sentinels)
            tls = " over TLS" if self.tls else ""
            return f"the primary of {self.service!r} (db {self.db}) via Sentinel {hosts}{tls}"
        assert self.url is not None
        return redact_url(self.url)


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for logs and error messages)."""
    scheme, sep, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    if not at:
        return url
    user = creds.partition(":")[0]
    return f"{scheme}{sep}{user + ':' if user else ''}***@{host}"


def parse_url(url: str) -> Target:
    """Parse a Redis URL (see the module docstring); :class:`ConfigError` when malformed."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(
            f"invalid redis URL {url!r}: expected redis://, rediss://, unix:// or redis+sentinel://"
        )
    scheme = url.partition("://")[0].lower()
    if scheme in _PLAIN:
        return Target(scheme=scheme, topology="standalone", url=url, tls=scheme == "rediss")
    if scheme not in _SENTINEL:
        raise ConfigError(f"unsupported redis URL scheme {scheme!r} in {redact_url(url)!r}")
    rest = url.partition("://")[2]
    rest, _, query = rest.partition("?")
    netloc, _, path = rest.partition("/")
    creds, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, pw = creds.partition(":")
        username = unquote(user) or None
        password = unquote(pw) if colon else None
    sentinels = []
    for item in hosts.split(","):
        host, colon, port = item.strip().rpartition(":")
        if not colon:
            host, port = item.strip(), str(SENTINEL_PORT)
        if not host or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"invalid sentinel address {item!r} in {redact_url(url)!r}")
        sentinels.append((host.strip("[]"), int(port)))
    parts = [p for p in path.split("/") if p]
    if not parts or len(parts) > 2:
        raise ConfigError(
            f"a Sentinel URL names its service: redis+sentinel://host:port/<service>[/<db>], "
            f"got {redact_url(url)!r}"
        )
    service = unquote(parts[0])
    db = 0
    if len(parts) == 2:
        if not parts[1].isascii() or not parts[1].isdigit():
            raise ConfigError(f"invalid database number {parts[1]!r} in {redact_url(url)!r}")
        db = int(parts[1])
    sentinel_kwargs: dict[str, str] = {}
    for key, values in parse_qs(query, keep_blank_values=False).items():
        if key not in ("sentinel_username", "sentinel_password"):
            raise ConfigError(f"unknown Sentinel URL parameter {key!r}")
        sentinel_kwargs[key.removeprefix("sentinel_")] = values[-1]
    return Target(
        scheme=scheme,
        topology="sentinel",
        sentinels=tuple(sentinels),
        service=service,
        db=db,
        tls=scheme.startswith("rediss"),
        username=username,
        password=password,
        sentinel_kwargs=sentinel_kwargs,
    )


class SentinelRedis(Redis):  # type: ignore[misc]  # redis-py is untyped here
    """The client of a Sentinel-managed primary; closing it closes the sentinel
    connections too. It has no pipelined lane: scripts go through redis-py."""

    lane = None
    sentinel: Sentinel | None = None

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        if self.sentinel is not None:
            for s in self.sentinel.sentinels:
                await s.aclose()


def connect(
    url: str,
    *,
    socket_timeout: float | None = DEFAULT_SOCKET_TIMEOUT,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    **kwargs: Any,
) -> Redis:
    """A redis-py asyncio client for ``url``, configured as rsjobs needs it (str replies,
    bounded timeouts, no handshake round trip); see the module docstring.

    ``socket_timeout`` bounds each reply (keep it above the block time of blocking reads);
    other keyword arguments go to redis-py.
    """
    target = parse_url(url)
    kwargs.setdefault("decode_responses", True)
    kwargs.setdefault("health_check_interval", 30)
    kwargs.setdefault("socket_timeout", socket_timeout)
    kwargs.setdefault("socket_connect_timeout", connect_timeout)
    kwargs.setdefault("lib_name", None)
    kwargs.setdefault("lib_version", None)
    kwargs.setdefault("retry", Retry(NoBackoff(), 0))
    if target.topology == "standalone":
        assert target.url is not None
        return LaneRedis.from_url(target.url, **kwargs)
    if target.username is not None:
        kwargs.setdefault("username", target.username)
    if target.password is not None:
        kwargs.setdefault("password", target.password)
    if target.tls:
        kwargs.setdefault("ssl", True)
    sentinel_kwargs: dict[str, Any] = {
        "socket_timeout": min(socket_timeout or connect_timeout, connect_timeout),
        "socket_connect_timeout": connect_timeout,
        "decode_responses": True,
        "lib_name": None,
        "lib_version": None,
        "retry": Retry(NoBackoff(), 0),
        **target.sentinel_kwargs,
    }
    sentinel = Sentinel(list(target.sentinels), sentinel_kwargs=sentinel_kwargs)
    client: SentinelRedis = sentinel.master_for(
        target.service, redis_class=SentinelRedis, db=target.db, **kwargs
    )
    client.sentinel = sentinel
    return client


def describe(redis: Any, url: str | None = None) -> str:
    """One line saying what a client connects to and how scripts travel, for start-up logs."""
    where = parse_url(url).describe() if url is not None else type(redis).__name__
    lane = getattr(redis, "lane", None)
    if lane is not None:
        how = "scripts over a pipelined connection"
    elif isinstance(redis, SentinelRedis):
        how = "scripts through redis-py (follows failovers)"
    else:
        how = "scripts through redis-py"
    return f"{where} ({how})"


async def reset_connections(redis: Any) -> None:
    """Drop every connection of ``redis`` (its pool and its lane): after a failover the
    next ones are opened anew (under Sentinel, to the new primary; with a plain URL, to
    whatever the name resolves to now)."""
    await redis.connection_pool.disconnect()
    lane = getattr(redis, "lane", None)
    if lane is not None:
        await lane.aclose()
