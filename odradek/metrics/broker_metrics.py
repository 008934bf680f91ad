"""BrokerMetrics: one broker's Prometheus metrics, in a registry of its own.

The hot paths count into `topic_stats` (the ReplicaManager's appends, KafkaApis'
fetches) and `requests` (the SocketServer, per request); everything else is read from
the broker's components when scraped (collectors.py). Several brokers may live in one
process (tests): nothing here touches prometheus_client's global registry.

The HTTP listener serves `exposition(accept_header)` at /metrics. prometheus_client and
the collectors load at the first scrape: a broker nobody scrapes (a test's) never pays
for them.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Any

from odradek.metrics.stats import BrokerTopicStats, RequestMetrics

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from odradek.broker.kafka_server import KafkaServer
    from odradek.metrics.collectors import SafeCollector

# exposition_async renders larger scrapes in a worker thread (a thousand partitions make
# about 5,000 samples: some 25 ms of rendering).
RENDER_INLINE_SAMPLES = 2_000


class BrokerMetrics:
    def __init__(self, server: KafkaServer | Any | None = None) -> None:
        """`server` is read when scraped (its components are None until started);
        without one, only the counters are exported (tests)."""
        self.server = server
        self.topic_stats = BrokerTopicStats()
        self.requests = RequestMetrics()
        # The high watermarks of partitions led elsewhere that this broker's groups
        # committed offsets of, as the console's history sampler last heard them from
        # their leaders (for the group lag of a cluster's coordinator).
        self.remote_high_watermarks: dict[tuple[str, int], int] = {}

    @functools.cached_property
    def collectors(self) -> list[SafeCollector]:
        from odradek.metrics.collectors import (
            BrokerTopicCollector,
            ControllerCollector,
            GroupLagCollector,
            ReplicaManagerCollector,
            RequestCollector,
            SocketServerCollector,
        )

        return [
            BrokerTopicCollector(self.topic_stats, self._known_topics),
            RequestCollector(self.requests),
            ReplicaManagerCollector(self._get("replica_manager")),
            ControllerCollector(self._get("kafka_controller"), self._embedded_controller,
                                self._get("replica_manager")),
            SocketServerCollector(self._get("socket_server")),
            GroupLagCollector(self._get("group_coordinator"), self._get("replica_manager"),
                              self.remote_high_watermarks),
        ]

    @functools.cached_property
    def registry(self) -> CollectorRegistry:
        from prometheus_client import CollectorRegistry

        registry = CollectorRegistry(auto_describe=False)
        for collector in self.collectors:
            registry.register(collector)
        return registry

    def _get(self, attribute: str) -> Any:
        return lambda: getattr(self.server, attribute, None)

    def _known_topics(self) -> set[str] | None:
        """The topics whose counters are kept: those the metadata knows, and those with
        a replica here (a new topic's LeaderAndIsr may come before its UpdateMetadata)."""
        cache = getattr(self.server, "metadata_cache", None)
        if cache is None:
            return None
        known = set(list(cache.topics))
        rm = getattr(self.server, "replica_manager", None)
        if rm is not None:
            known.update(topic for topic, _ in list(rm.partitions))
        return known

    def _embedded_controller(self) -> Any:
        server = self.server
        if server is None or getattr(server, "kafka_controller", None) is not None:
            return None
        admin = getattr(server, "admin", None)
        return None if admin is None else admin.controller

    def exposition(self, accept_header: str | None = None) -> tuple[bytes, str]:
        """The metrics as /metrics answers them: (body, content type), in the Prometheus
        text format or, when the scraper's Accept header asks for it, OpenMetrics."""
        from odradek.metrics.render import render

        content_type, openmetrics = _negotiate(accept_header)
        return render(self.registry.collect(), openmetrics), content_type

    async def exposition_async(self, accept_header: str | None = None) -> tuple[bytes, str]:
        """exposition(), for a caller on the broker's event loop: the state is read on
        the loop (it owns it) in slices between which the loop serves other work, and a
        large scrape's text is written in a worker thread (the collected families are
        plain data, the loop's no more), so the loop is never held for the whole of it."""
        from odradek.metrics.render import render

        content_type, openmetrics = _negotiate(accept_header)
        families = [family for collector in self.collectors
                    for family in await collector.collect_async()]
        if sum(len(f.samples) for f in families) < RENDER_INLINE_SAMPLES:
            return render(families, openmetrics), content_type
        return await asyncio.to_thread(render, families, openmetrics), content_type


def _negotiate(accept_header: str | None) -> tuple[str, bool]:
    """The content type a scraper's Accept header gets, and whether it is OpenMetrics:
    prometheus_client chooses the format; render.py writes it, several times faster."""
    from prometheus_client.exposition import choose_encoder

    _, content_type = choose_encoder(accept_header or "")
    return content_type, content_type.startswith("application/openmetrics-text")
