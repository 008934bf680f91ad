"""What the request paths count: plain ints in dicts and lists, read when scraped.

A prometheus_client Counter takes a lock on every inc(); these counters are bare list
items updated on the broker's event loop, the only writer, and a scrape reads them
(copying the containers first: a scrape from another thread sees each count whole, as
ints are replaced atomically under the GIL). The collectors in collectors.py turn them
into Kafka's metric names.

Imports nothing of ours: the broker and server layers use it.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Container

# A topic's counters (Kafka's BrokerTopicMetrics meters), by index in its list.
MESSAGES_IN = 0  # MessagesInPerSec: records appended as leader
BYTES_IN = 1  # BytesInPerSec: their bytes, as the producers sent them
BYTES_OUT = 2  # BytesOutPerSec: record bytes sent to consumers (not followers)
PRODUCE_REQUESTS = 3  # TotalProduceRequestsPerSec: partition appends asked for
FAILED_PRODUCE = 4  # FailedProduceRequestsPerSec: those that failed
FETCH_REQUESTS = 5  # TotalFetchRequestsPerSec: partition reads (consumers and followers)
FAILED_FETCH = 6  # FailedFetchRequestsPerSec: those answered with an error
TOPIC_COUNTERS = 7


class BrokerTopicStats:
    """Kafka's BrokerTopicStats: per topic counters and the all-topics ones.

    The hot path touches one list per topic (`counters(topic)`, then `+=` on an index);
    the all-topics values are the sum over topics plus what topics no longer tracked
    counted (`retain`), so they never go down when a topic is deleted."""

    __slots__ = ("replication_bytes_in", "replication_bytes_out", "retired", "topics")

    def __init__(self) -> None:
        self.topics: dict[str, list[int]] = {}
        self.retired = [0] * TOPIC_COUNTERS
        self.replication_bytes_out = 0  # ReplicationBytesOutPerSec: sent to followers
        self.replication_bytes_in = 0  # ReplicationBytesInPerSec: fetched as a follower

    def counters(self, topic: str) -> list[int]:
        """The topic's counters, made on first use; the hot path keeps the list."""
        found = self.topics.get(topic)
        if found is None:
            found = self.topics[topic] = [0] * TOPIC_COUNTERS
        return found

    def snapshot(self) -> dict[str, list[int]]:
        """Every tracked topic's counters, copied."""
        return {topic: list(values) for topic, values in list(self.topics.items())}

    def all_topics(self, snapshot: dict[str, list[int]] | None = None) -> list[int]:
        totals = list(self.retired)
        for values in (snapshot if snapshot is not None else self.snapshot()).values():
            for i, value in enumerate(values):
                totals[i] += value
        return totals

    def retain(self, topics: Container[str]) -> None:
        """Stops tracking topics not in `topics` (deleted ones, as Kafka removes their
        metrics); their counts stay in the all-topics values. On the event loop."""
        for topic in [t for t in self.topics if t not in topics]:
            values = self.topics.pop(topic)
            for i, value in enumerate(values):
                self.retired[i] += value


# Request total time buckets (ms): Kafka's TotalTimeMs histogram, as a Prometheus one.
TIME_BUCKETS_MS: tuple[float, ...] = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500,
                                      5000, 10000, 30000)


class ApiRequestStats:
    """One API's requests: the count per version, the time histogram (bucket counts, not
    cumulative; the last one is +Inf) and the total time."""

    __slots__ = ("buckets", "sum_ns", "versions")

    def __init__(self, buckets: int) -> None:
        self.versions: dict[int, int] = {}
        self.buckets = [0] * buckets
        self.sum_ns = 0


class RequestMetrics:
    """Kafka's RequestMetrics: RequestsPerSec per request name (Kafka's: the API's name,
    FetchConsumer and FetchFollower for Fetch) and version, and TotalTimeMs per request
    name, from when a request's frame is taken up to when its response is written."""

    __slots__ = ("_bounds_ns", "apis", "bounds_ms")

    def __init__(self, buckets_ms: tuple[float, ...] = TIME_BUCKETS_MS) -> None:
        self.bounds_ms = buckets_ms
        self._bounds_ns = [int(b * 1_000_000) for b in buckets_ms]
        self.apis: dict[str, ApiRequestStats] = {}

    def record(self, request: str, version: int, elapsed_ns: int) -> None:
        stats = self.apis.get(request)
        if stats is None:
            stats = self.apis[request] = ApiRequestStats(len(self._bounds_ns) + 1)
        versions = stats.versions
        versions[version] = versions.get(version, 0) + 1
        stats.buckets[bisect_left(self._bounds_ns, elapsed_ns)] += 1
        stats.sum_ns += elapsed_ns

    def snapshot(self) -> dict[str, tuple[dict[int, int], list[int], int]]:
        """request name -> (count by version, bucket counts, total ns), copied."""
        return {key: (dict(s.versions), list(s.buckets), s.sum_ns)
                for key, s in list(self.apis.items())}
