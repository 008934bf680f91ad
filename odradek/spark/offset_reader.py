"""Driver-side lookups: which partitions a query reads and where their offsets are.

One AdminClient answers them all with Metadata and batched ListOffsets requests (earliest,
latest, or the first offset at or after a timestamp, i.e. the broker's time index), as
Spark's Kafka source does with its KafkaOffsetReader. Nothing here joins a consumer group.
"""

from __future__ import annotations

import re
from typing import Any

from .options import OdradekOptionError, ReadOptions, Subscription

TopicPartitionKey = tuple[str, int]
_TIMEOUT = 30.0
# Consumer settings an AdminClient would warn about; the reader passes isolation on its own.
_CONSUMER_ONLY = ("isolation.level", "fetch.", "max.partition.fetch.bytes", "queued.",
                  "session.timeout.ms", "heartbeat.interval.ms", "auto.commit.interval.ms",
                  "check.crcs", "partition.assignment.strategy", "max.poll.interval.ms")


class OffsetReader:
    def __init__(self, options: ReadOptions) -> None:
        from confluent_kafka import IsolationLevel
        from confluent_kafka.admin import AdminClient

        config = {k: v for k, v in options.client.items() if not k.startswith(_CONSUMER_ONLY)}
        self.admin = AdminClient(config)
        committed = options.client.get("isolation.level", "").lower() == "read_committed"
        self.isolation = (IsolationLevel.READ_COMMITTED if committed
                          else IsolationLevel.READ_UNCOMMITTED)

    def partitions(self, subscription: Subscription,
                   missing_ok: bool = False) -> list[TopicPartitionKey]:
        """The partitions a subscription covers now, sorted. A subscribed topic that does not
        exist is an error, unless missing_ok (a streaming query waits for it)."""
        if subscription.assigned:
            return list(subscription.assigned)
        metadata = self.admin.list_topics(timeout=_TIMEOUT)
        if subscription.topics:
            wanted = list(subscription.topics)
        else:
            pattern = re.compile(subscription.pattern or "")
            wanted = [t for t in metadata.topics
                      if pattern.fullmatch(t) and not t.startswith("__")]
        found: list[TopicPartitionKey] = []
        # Never ask for a topic by name: a broker with auto.create.topics.enable would create
        # it, and a read must not create topics.
        for topic in wanted:
            info = metadata.topics.get(topic)
            if info is None or info.error is not None or not info.partitions:
                if missing_ok:
                    continue
                raise OdradekOptionError(f"topic {topic} does not exist")
            found += [(topic, p) for p in info.partitions]
        return sorted(found)

    def _list_offsets(self, specs: dict[TopicPartitionKey, Any]) -> dict[TopicPartitionKey, int]:
        from confluent_kafka import TopicPartition

        if not specs:
            return {}
        futures = self.admin.list_offsets(
            {TopicPartition(t, p): spec for (t, p), spec in specs.items()},
            isolation_level=self.isolation, request_timeout=_TIMEOUT)
        return {(tp.topic, tp.partition): future.result().offset
                for tp, future in futures.items()}

    def watermarks(self, partitions: list[TopicPartitionKey]) -> dict[TopicPartitionKey,
                                                                       tuple[int, int]]:
        """(earliest, latest) offset of each partition; latest is the high watermark (the
        last stable offset under read_committed)."""
        from confluent_kafka.admin import OffsetSpec

        low = self._list_offsets({tp: OffsetSpec.earliest() for tp in partitions})
        high = self._list_offsets({tp: OffsetSpec.latest() for tp in partitions})
        return {tp: (low[tp], high[tp]) for tp in partitions}

    def offsets_for_times(self, times: dict[TopicPartitionKey, int]) -> dict[TopicPartitionKey,
                                                                              int | None]:
        """The first offset whose timestamp is at or after the given one (ms), per partition;
        None where no record is that late."""
        from confluent_kafka.admin import OffsetSpec

        found = self._list_offsets({tp: OffsetSpec.for_timestamp(ms) for tp, ms in times.items()})
        return {tp: (offset if offset >= 0 else None) for tp, offset in found.items()}
