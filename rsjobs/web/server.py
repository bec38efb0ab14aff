"""How ``rsjobs web`` serves: uvicorn with its h11 protocol, plus a bound on how long a
connection may take to send a request.

uvicorn closes a keep-alive connection that stays idle after a response
(``timeout_keep_alive``), but a connection that never sends a complete request line and
headers (an idle socket, or one trickling a header a byte at a time) is held forever:
enough of them exhaust the process's file descriptors. :func:`protocol` makes an
``H11Protocol`` that closes such a connection ``request_timeout_ms`` after it opened, or
after the first byte of its next request once a response is complete. The timer stops
when the headers are complete, so a slow body or a long event stream is not affected.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..errors import ConfigError

__all__ = ["protocol"]

log = logging.getLogger("rsjobs.web")


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request's line and headers."""

    #: seconds a connection has to send a complete request line and headers
    request_timeout: float = 10.0
    #: seconds a keep-alive connection may stay idle between requests (uvicorn's timer)
    idle_timeout: float = 5.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.timeout_keep_alive = self.idle_timeout  # type: ignore[assignment]  # (int there)
        self._request_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE:
            self._arm()  # the first bytes of a request after an idle keep-alive period
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm()  # the line and headers are in

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._request_timer is None:
            self._request_timer = self.loop.call_later(self.request_timeout, self._expired)

    def _disarm(self) -> None:
        if self._request_timer is not None:
            self._request_timer.cancel()
            self._request_timer = None

    def _expired(self) -> None:
        self._request_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            log.debug("closing a connection that sent no complete request in time")
            self.transport.close()


def protocol(*, request_timeout_ms: int, idle_timeout_ms: int) -> type[H11Protocol]:
    """The protocol class to pass as ``uvicorn.Config(http=...)``."""
    if request_timeout_ms < 1 or idle_timeout_ms < 1:
        raise ConfigError("request and idle timeouts must be positive (milliseconds)")
    return type(
        "BoundedH11Protocol",
        (BoundedH11Protocol,),
        {"request_timeout": request_timeout_ms / 1000, "idle_timeout": idle_timeout_ms / 1000},
    )
