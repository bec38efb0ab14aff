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
``redis+cluster://[user:pass@]h1:7000,h2:7001``                a Redis Cluster, read from any of
                                                               these nodes (``rediss+cluster``:
                                                               TLS); see :mod:`.cluster`
=============================================================  =================================

A plain ``redis://`` / ``rediss://`` URL of a cluster node is found out once per process
and URL: :func:`connect` asks the node ``INFO cluster`` (one short blocking round trip,
bounded by ``connect_timeout`` and at most :data:`DETECT_TIMEOUT`) and makes a cluster
client when it says ``cluster_enabled:1``. A node that does not answer then is taken for
a standalone server (asked again by the next :func:`connect`); ``cluster=False`` skips the
question.

Sentinel URLs take ``sentinel_username`` / ``sentinel_password`` query parameters when the
sentinels themselves require auth. After a failover, connections to the demoted primary
are dropped (its ``READONLY`` replies) and the next ones ask Sentinel for the new primary.

Every client made here has bounded timeouts (``connect_timeout`` for the TCP connect,
``socket_timeout`` for each reply) and skips redis-py's ``CLIENT SETINFO`` handshake: a new
connection is then usable as soon as it is open, so a frozen server costs each caller one
reply timeout instead of queueing them behind each other in the pool. redis-py's own
automatic retry (3 retries with up to 10 s of backoff by default since redis-py 6) is off:
a retried ``start.lua`` after a lost reply would start work nobody runs, and the retry
hides outages from the callers. rsjobs's policy (:mod:`rsjobs.store.transient`) decides instead.
A plain TCP or Unix socket client also gets the pipelined script connection of
:mod:`rsjobs.store.lane` (a cluster client one per master).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import redis as sync_redis
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.exceptions import ResponseError
from redis.retry import Retry as SyncRetry

try:  # redis-py 8: the handshake's metadata is one object (lib_name is deprecated)
    from redis.driver_info import DriverInfo
except ImportError:  # pragma: no cover - redis-py < 8
    DriverInfo = None
try:  # redis-py 8: maintenance notifications (RESP3 push messages)
    from redis.maint_notifications import MaintNotificationsConfig
except ImportError:  # pragma: no cover - redis-py < 8
    MaintNotificationsConfig = None

from ..errors import ConfigError
from .cluster import ClusterRedis
from .lane import LaneRedis
from .transient import reply_code

__all__ = [
    "ClusterRedis",
    "SentinelRedis",
    "Target",
    "connect",
    "describe",
    "detect_cluster",
    "moved_hint",
    "parse_url",
    "redact_url",
    "reset_connections",
]

log = logging.getLogger("rsjobs")

_PLAIN = ("redis", "rediss", "unix")
_SENTINEL = ("redis+sentinel", "rediss+sentinel")
_CLUSTER = ("redis+cluster", "rediss+cluster")
SENTINEL_PORT = 26379
REDIS_PORT = 6379
#: the longest a plain URL's "is this a cluster node?" question may block (seconds)
DETECT_TIMEOUT = 1.0

#: what tells redis-py to send no handshake: no CLIENT SETINFO (library name and version),
#: and on redis-py 8 no CLIENT MAINT_NOTIFICATIONS, with which it also stops checking a
#: pooled connection before handing it out (one Redis closed, e.g. by a restart, would
#: fail the next command instead of being replaced)
NO_HANDSHAKE: dict[str, Any] = (
    {"driver_info": DriverInfo(name=None, lib_version=None)}
    if DriverInfo is not None
    else {"lib_name": None, "lib_version": None}
)
if MaintNotificationsConfig is not None:
    NO_HANDSHAKE["maint_notifications_config"] = MaintNotificationsConfig(enabled=False)

#: the pool's bound (redis-py before 8 had this one; 8 has 100)
MAX_CONNECTIONS = 2**31

#: reply bound of blocking reads (XREADGROUP / XREAD BLOCK) must stay above their block time
DEFAULT_SOCKET_TIMEOUT = 30.0
DEFAULT_CONNECT_TIMEOUT = 5.0


@dataclass(frozen=True)
class Target:
    """A parsed URL: what :func:`connect` will build."""

    scheme: str
    #: "standalone", "sentinel" or "cluster"
    topology: str
    #: the URL redis-py takes (standalone), or None for Sentinel
    url: str | None = None
    sentinels: tuple[tuple[str, int], ...] = ()
    #: a cluster's seed nodes
    nodes: tuple[tuple[str, int], ...] = ()
    service: str = ""
    db: int = 0
    tls: bool = False
    username: str | None = None
    password: str | None = None
    sentinel_kwargs: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        if self.topology == "cluster":
            hosts = ",".join(f"{h}:{p}" for h, p in self.nodes)
            return f"the cluster of {hosts}{' over TLS' if self.tls else ''}"
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
        db = _check_plain(url, scheme)
        return Target(scheme=scheme, topology="standalone", url=url, tls=scheme == "rediss", db=db)
    if scheme not in _SENTINEL + _CLUSTER:
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
    cluster = scheme in _CLUSTER
    addresses = _addresses(
        hosts, REDIS_PORT if cluster else SENTINEL_PORT, "node" if cluster else "sentinel", url
    )
    if cluster:
        parts = [p for p in path.split("/") if p]
        if parts and parts != ["0"]:
            raise ConfigError(
                f"a Redis Cluster has only database 0: redis+cluster://host:port[,...][/0], "
                f"got {redact_url(url)!r}"
            )
        if query:
            raise ConfigError(f"a cluster URL takes no parameters, got {redact_url(url)!r}")
        return Target(
            scheme=scheme,
            topology="cluster",
            nodes=addresses,
            tls=scheme.startswith("rediss"),
            username=username,
            password=password,
        )
    sentinels = addresses
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
        sentinels=sentinels,
        service=service,
        db=db,
        tls=scheme.startswith("rediss"),
        username=username,
        password=password,
        sentinel_kwargs=sentinel_kwargs,
    )


#: query options whose values must read as these (what redis-py would make of them, but
#: said as one line instead of a traceback); None: a positive finite number of seconds
_OPTIONS: dict[str, str | None] = {
    "socket_timeout": None,
    "socket_connect_timeout": None,
    "timeout": None,
    "socket_read_size": "int",
    "max_connections": "int",
    "health_check_interval": "int0",
    "ssl_min_version": "int0",
    "socket_keepalive": "bool",
    "retry_on_timeout": "bool",
    "ssl_check_hostname": "bool",
}
_BOOLS = frozenset({"", "0", "1", "f", "t", "false", "true", "n", "no", "y", "yes"})


def _check_plain(url: str, scheme: str) -> int:
    """Check a ``redis://`` / ``rediss://`` / ``unix://`` URL as redis-py will read it:
    its port, its database (path or ``?db=``) and the values of the query options it
    knows; the database number. :class:`ConfigError` with the reason otherwise."""
    shown = redact_url(url)
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError as exc:  # a port that is not a number, or out of range
        port_text = parts.netloc.rpartition("@")[2].rpartition(":")[2]
        raise ConfigError(
            f"invalid port {port_text!r} in {shown!r}: expected a number from 1 to 65535"
        ) from exc
    if scheme == "unix":
        if not parts.path:
            raise ConfigError(
                f"a unix:// URL names a socket path: unix:///path?db=0, got {shown!r}"
            )
    else:
        if port == 0:
            raise ConfigError(f"invalid port 0 in {shown!r}: expected a number from 1 to 65535")
        if not parts.hostname:
            raise ConfigError(f"no host in {shown!r}: expected {scheme}://host[:port][/db]")
    db_text = "" if scheme == "unix" else parts.path.strip("/")
    query = parse_qs(parts.query, keep_blank_values=True)
    if "db" in query:
        db_text = query["db"][-1]
    db = 0
    if db_text:
        if not db_text.isascii() or not db_text.isdigit():
            raise ConfigError(
                f"invalid database {db_text!r} in {shown!r}: expected a number (0, 1, ...)"
            )
        db = int(db_text)
    for name, values in query.items():
        kind = _OPTIONS.get(name, "")
        if kind == "":
            continue
        value = values[-1]
        if not _valid_option(kind, value):
            what = {
                None: "a positive number of seconds",
                "int": "a positive whole number",
                "int0": "a whole number, 0 or more",
                "bool": "true or false",
            }[kind]
            raise ConfigError(f"invalid {name}={value!r} in {shown!r}: expected {what}")
    return db


def _valid_option(kind: str | None, value: str) -> bool:
    if kind == "bool":
        return value.lower() in _BOOLS
    if kind is None:
        try:
            seconds = float(value)
        except ValueError:
            return False
        return math.isfinite(seconds) and seconds > 0
    if not value.isascii() or not value.isdigit():
        return False
    return kind == "int0" or int(value) > 0


def _addresses(hosts: str, default_port: int, what: str, url: str) -> tuple[tuple[str, int], ...]:
    """``h1:p1,h2,[::1]:p3`` as (host, port) pairs (``default_port`` where none is given)."""
    out = []
    for item in hosts.split(","):
        host, colon, port = item.strip().rpartition(":")
        if not colon or (host.startswith("[") and not host.endswith("]")):
            host, port = item.strip(), str(default_port)
        if not host or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"invalid {what} address {item!r} in {redact_url(url)!r}")
        out.append((host.strip("[]"), int(port)))
    return tuple(out)


_DETECTED: dict[str, bool] = {}


def detect_cluster(url: str, timeout: float = DETECT_TIMEOUT, **auth: Any) -> bool | None:
    """Whether the server of the plain URL ``url`` is a Redis Cluster node (``INFO
    cluster`` says ``cluster_enabled:1``); None when it did not answer within ``timeout``
    seconds. ``auth``: credentials and TLS settings (``username``, ``password``,
    ``ssl_*``) the URL does not carry. Asked once per process and URL (an answer is kept,
    a silence is not)."""
    known = _DETECTED.get(url)
    if known is not None:
        return known
    if url.partition("://")[0].lower() == "unix":
        return False
    # asked of database 0: a cluster node refuses any other (SELECT), which would read as
    # no answer, and the URL as a standalone server's (then "cannot be reached")
    probe = sync_redis.Redis.from_url(
        _database_zero(url),
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=SyncRetry(NoBackoff(), 0),
        decode_responses=True,
        **NO_HANDSHAKE,
        **auth,
    )
    try:
        info = probe.info("cluster")
    except (sync_redis.RedisError, OSError):
        return None
    finally:
        probe.close()
    found = str(info.get("cluster_enabled", "0")) == "1"
    _DETECTED[url] = found
    return found


def _database_zero(url: str) -> str:
    """A plain TCP URL with its database (path or ``?db=``) set to 0."""
    parts = urlsplit(url)
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
                       if k != "db"])  # fmt: skip
    return urlunsplit((parts.scheme, parts.netloc, "/0", query, ""))


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
    cluster: bool | None = None,
    **kwargs: Any,
) -> Redis:
    """A redis-py asyncio client for ``url``, configured as rsjobs needs it (str replies,
    bounded timeouts, no handshake round trip); see the module docstring.

    ``socket_timeout`` bounds each reply (keep it above the block time of blocking reads);
    ``cluster``: for a plain URL, False takes the server for a standalone one without
    asking, True for a cluster node (None: ask it, once). Other keyword arguments go to
    redis-py.
    """
    target = parse_url(url)
    kwargs.setdefault("decode_responses", True)
    kwargs.setdefault("health_check_interval", 30)
    kwargs.setdefault("socket_timeout", socket_timeout)
    kwargs.setdefault("socket_connect_timeout", connect_timeout)
    kwargs.update({k: v for k, v in NO_HANDSHAKE.items() if k not in kwargs})
    kwargs.setdefault("retry", Retry(NoBackoff(), 0))
    # as many connections as concurrent callers need: redis-py 8's pools stop at 100 and
    # refuse the next one (MaxConnectionsError), where older ones had no bound
    kwargs.setdefault("max_connections", MAX_CONNECTIONS)
    if target.topology == "standalone":
        assert target.url is not None
        if target.scheme != "unix" and cluster is not False:
            auth = {
                k: v
                for k, v in kwargs.items()
                if k in ("username", "password") or k.startswith("ssl_")
            }
            found = cluster or detect_cluster(
                target.url, min(connect_timeout, DETECT_TIMEOUT), **auth
            )
            if found:
                return _cluster_from_plain(target.url, kwargs)
        return LaneRedis.from_url(target.url, **kwargs)
    if target.username is not None:
        kwargs.setdefault("username", target.username)
    if target.password is not None:
        kwargs.setdefault("password", target.password)
    if target.tls:
        kwargs.setdefault("ssl", True)
    if target.topology == "cluster":
        return ClusterRedis(target.nodes, **kwargs)
    sentinel_kwargs: dict[str, Any] = {
        "socket_timeout": min(socket_timeout or connect_timeout, connect_timeout),
        "socket_connect_timeout": connect_timeout,
        "decode_responses": True,
        **NO_HANDSHAKE,
        "retry": Retry(NoBackoff(), 0),
        **target.sentinel_kwargs,
    }
    sentinel = Sentinel(list(target.sentinels), sentinel_kwargs=sentinel_kwargs)
    client: SentinelRedis = sentinel.master_for(
        target.service, redis_class=SentinelRedis, db=target.db, **kwargs
    )
    client.sentinel = sentinel
    return client


def _cluster_from_plain(url: str, kwargs: dict[str, Any]) -> ClusterRedis:
    """The cluster client of a plain URL naming one of its nodes."""
    from redis.asyncio.connection import SSLConnection
    from redis.asyncio.connection import parse_url as redis_parse_url

    parsed = redis_parse_url(url)
    if int(parsed.get("db") or 0) != 0:
        raise ConfigError(
            f"{redact_url(url)} is a Redis Cluster node: a cluster has only database 0"
        )
    for name in ("username", "password"):
        if parsed.get(name) is not None:
            kwargs.setdefault(name, parsed[name])
    if parsed.get("connection_class") is SSLConnection:
        kwargs.setdefault("ssl", True)
    address = (str(parsed.get("host") or "localhost"), int(parsed.get("port") or REDIS_PORT))
    return ClusterRedis([address], **kwargs)


def _moved(exc: BaseException) -> str | None:
    """The ``host:port`` a ``MOVED`` error (or its cause) names, else None."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ResponseError) and reply_code(seen) == "MOVED":
            return str(seen).split()[-1]
        seen = seen.__cause__
    return None


def moved_hint(exc: BaseException, url: str) -> str | None:
    """Plain words for a ``MOVED`` met with a client that is not a cluster one (``url``
    is what it was made from): which URL to connect with instead. None for any other
    error, or when ``url`` names a cluster (a ``redis+cluster://`` URL, or a plain one whose
    node said it is one: then the MOVED is a failover's, passing)."""
    target = _moved(exc)
    if target is None or "+cluster://" in url.partition("?")[0].lower() or _DETECTED.get(url):
        return None
    scheme = "rediss+cluster" if url.lower().startswith("rediss") else "redis+cluster"
    host = url.partition("://")[2].rpartition("@")[2].partition("/")[0] or target
    return (
        f"this Redis is a cluster node (it answered MOVED: the key lives on {target}): "
        f"connect with {scheme}://{host}"
    )


def describe(redis: Any, url: str | None = None) -> str:
    """One line saying what a client connects to and how scripts travel, for start-up logs."""
    where = parse_url(url).describe() if url is not None else type(redis).__name__
    if isinstance(redis, ClusterRedis) and url is not None:
        target = parse_url(url)
        if target.topology != "cluster":
            where = f"the cluster of {redact_url(url)} (the node says cluster_enabled:1)"
    lane = getattr(redis, "lane", None)
    if isinstance(redis, ClusterRedis):
        how = "scripts over a pipelined connection per master"
    elif lane is not None:
        how = "scripts over a pipelined connection"
    elif isinstance(redis, SentinelRedis):
        how = "scripts through redis-py (follows failovers)"
    else:
        how = "scripts through redis-py"
    return f"{where} ({how})"


async def reset_connections(redis: Any) -> None:
    """Drop every connection of ``redis`` (its pool and its lane): after a failover the
    next ones are opened anew (under Sentinel, to the new primary; with a plain URL, to
    whatever the name resolves to now). A cluster client keeps its connections (each
    goes to one node, and calls are routed by the slot table, not by a connection) and
    reads the slot table again before the next command: dropping them would only lose
    the replies in flight on the masters that did not fail."""
    if isinstance(redis, ClusterRedis):
        redis.mark_stale()
        return
    await redis.connection_pool.disconnect()
    lane = getattr(redis, "lane", None)
    if lane is not None:
        await lane.aclose()
