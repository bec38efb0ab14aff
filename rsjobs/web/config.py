"""Settings of the web app. Times are in milliseconds, sizes in bytes."""

from __future__ import annotations

import msgspec

from ..codec import DEFAULT_PAYLOAD_LIMIT
from ..errors import ConfigError

__all__ = ["WebConfig"]


class WebConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How the app serves; every field has a default suited to a production deployment."""

    #: largest accepted request body; larger ones get 413 before they are read
    max_body_bytes: int = DEFAULT_PAYLOAD_LIMIT + 64 * 1024
    #: open SSE connections allowed per owner (per IP for anonymous dev requests); 0 = no cap
    max_streams_per_client: int = 16
    #: a comment line is sent on an idle SSE connection this often
    keepalive_ms: int = 15_000
    #: the reconnection delay the SSE stream suggests to EventSource (``retry:``)
    sse_retry_ms: int = 2_000
    #: a workflow stream sends the status document again within this long of a move of
    #: one of its tasks (progress, an end), and at most this often for such moves
    status_ms: int = 1_000
    #: bound of one Redis reply for the requests' commands (and of connecting): while
    #: Redis is unreachable or frozen, a request answers 503 within about this long
    redis_timeout_ms: int = 2_000
    #: how long the events reader blocks in one XREAD
    hub_block_ms: int = 5_000
    #: open task event streams end (without ``end``) once Redis has been unreachable this
    #: long; a shorter outage is ridden out (a restart, a failover)
    redis_outage_ms: int = 5_000
    #: a ``GET /events`` stream ends after this long (0: never); EventSource reconnects
    #: with Last-Event-ID and misses nothing, and a balancer gets to move it
    live_stream_ms: int = 300_000
    #: entries buffered per SSE connection before it falls back to replaying history
    subscriber_buffer: int = 1_000
    #: history entries embedded in ``GET /tasks/{id}``
    recent_history: int = 20
    #: serve ``/metrics`` without a token (default: admin token needed)
    metrics_public: bool = False
    #: origins allowed by CORS (empty: no CORS headers)
    cors_origins: tuple[str, ...] = ()
    #: serve the pages: the examples at ``/ui/``, the operator dashboard at ``/dashboard/``
    serve_ui: bool = True
    #: the secret callback tokens and provider signatures are checked with (HMAC-SHA256,
    #: at least 16 bytes; the workers sign with the same, see rsjobs.callbacks); empty:
    #: ``POST /callbacks/...`` answers 404
    callback_secret: str = ""
    #: how far the timestamp of a provider's signed callback (``X-Rsjobs-Signature:
    #: t=...,v1=...``) may be from this server's clock, either way; older or newer is a 401
    callback_tolerance_ms: int = 300_000

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1024:
            raise ConfigError("max_body_bytes must be at least 1024")
        if self.max_streams_per_client < 0:
            raise ConfigError("max_streams_per_client must be >= 0 (0 = no cap)")
        for name in (
            "keepalive_ms",
            "sse_retry_ms",
            "status_ms",
            "hub_block_ms",
            "redis_outage_ms",
            "redis_timeout_ms",
            "subscriber_buffer",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be positive")
        if self.live_stream_ms < 0:
            raise ConfigError("live_stream_ms must be >= 0 (0 = never ends)")
        if self.callback_secret and len(self.callback_secret.encode()) < 16:
            raise ConfigError("callback_secret must be at least 16 bytes")
        if not 1_000 <= self.callback_tolerance_ms <= 3_600_000:
            raise ConfigError("callback_tolerance_ms must be between 1000 and 3600000 (1 h)")
        if not 0 <= self.recent_history <= 1000:
            raise ConfigError("recent_history must be between 0 and 1000")
