"""What one app instance holds: the task and workflow clients, the auth table, the events
hub, the stream cap, the metrics."""

from __future__ import annotations

import asyncio
import logging

from redis.asyncio import Redis

from ..client import Client
from ..store import Store
from ..workflows.client import WorkflowClient
from .auth import Auth
from .config import WebConfig
from .hub import Hub
from .metrics import Metrics
from .sse import StreamLimiter

__all__ = ["Service"]

log = logging.getLogger("rsjobs.web")


class Service:
    """Owns the per-process state of the web app.

    The events hub starts on the app's startup when the app runs standalone, and lazily on
    the first request that needs it when the app is mounted into another app (whose
    lifespan does not reach a mounted app); :meth:`aclose` stops it.
    """

    def __init__(
        self,
        client: Client,
        auth: Auth,
        config: WebConfig,
        *,
        own_client: bool,
        blocking: Redis | None = None,
        workflows: WorkflowClient | None = None,
    ) -> None:
        self.client = client
        self.store = client.store
        #: the workflow routes' client (on the same Redis client as ``client``)
        self.workflows = workflows or WorkflowClient(client.redis, client.settings, source="api")
        self.auth = auth
        self.config = config
        self.own_client = own_client
        #: the client of the events reader's blocking reads (the app's own, or ``client``'s)
        self.blocking = blocking if blocking is not None else client.redis
        self.hub = Hub(
            # the blocking reads on a client of their own: one reader per shard
            Store(self.blocking, client.settings),
            block_ms=config.hub_block_ms,
            buffer=config.subscriber_buffer,
            outage_ms=config.redis_outage_ms,
        )
        self.limiter = StreamLimiter(config.max_streams_per_client)
        self.metrics = Metrics(client.store)
        self.metrics.open_streams = lambda: self.limiter.total
        self.metrics.entries_read = lambda: self.hub.entries_read
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        """Check the namespace's layout, then start the events reader (idempotent).
        Raises on a Redis error, and :class:`rsjobs.NotMigrated` when the namespace holds
        data of an earlier layout."""
        self._loop = asyncio.get_running_loop()
        await self.store.require_layout()
        await self.hub.start()

    def close_streams(self) -> None:
        """End every open SSE stream now (thread-safe): call it when the server begins to
        shut down, since servers wait for open responses, and an event stream never ends
        by itself. Clients reconnect (to another instance) with Last-Event-ID."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            # also safe from a signal handler interrupting the loop's own thread
            loop.call_soon_threadsafe(self.hub.close_subscriptions)

    async def aclose(self) -> None:
        await self.hub.aclose()
        if self.own_client:
            try:
                async with asyncio.timeout(5):
                    await self.client.close()
                    if self.blocking is not self.client.redis:
                        await self.blocking.aclose()
            except TimeoutError:
                log.warning("closing the redis connections timed out")
