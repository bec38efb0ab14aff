"""The web app's ``GET /metrics``: the namespace's figures read from Redis at scrape time
(:mod:`rsjobs.metrics` says what each is; workers and reapers export the same with
``--metrics-port``), plus this process's own:

- ``rsjobs_web_event_streams``: open SSE connections
- ``rsjobs_web_hub_entries_read_total``: events stream entries read by this process
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from ..metrics import CONTENT_TYPE, DURATION_BUCKETS, Exporter
from ..store import Store

__all__ = ["CONTENT_TYPE", "DURATION_BUCKETS", "Metrics"]


class Metrics:
    """The metrics of one app: a private registry (several apps may live in one process)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.exporter = Exporter(store, self._own)
        self.registry = self.exporter.registry
        #: set by the app: open SSE connections, entries read by the hub
        self.open_streams: Callable[[], int] = lambda: 0
        self.entries_read: Callable[[], int] = lambda: 0

    def _own(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "rsjobs_web_event_streams", "open SSE connections", self.open_streams()
        )
        yield CounterMetricFamily(
            "rsjobs_web_hub_entries_read",
            "events stream entries read by this process",
            self.entries_read(),
        )

    async def render(self) -> bytes:
        """The exposition text, reading Redis now (a failed read reports redis_up 0)."""
        return await self.exporter.render()
