"""Driver-side lookups: which partitions a query reads and where their offsets are.

One AdminClient answers them all with Metadata and batched ListOffsets requests (earliest,
latest, or the first offset at or after a timestamp, i.e. the broker's time index), as
Spark's Kafka source does with its KafkaOffsetReader. Nothing here joins a consumer group.
"""

from __future__ import annotations

import re
import time
from typing import Any

from .options import OdradekOptionError, ReadOptions, Subscription

TopicPartitionKey = tuple[str, int]
_TIMEOUT = 30.0
# How long a partition the broker does not know, or whose leader is moving, is asked again.
_RETRY_S = 3.0
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

    def _list_offsets(self, specs: dict[TopicPartitionKey, Any], missing_ok: bool = False
                      ) -> dict[TopicPartitionKey, int]:
        """The offsets ListOffsets answers. A partition whose leader is moving is asked
        again for a few seconds. With missing_ok a partition the broker does not know (its
        topic deleted, or created a moment ago and not ready) is left out of the answer."""
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        missing = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION,
                   KafkaError._UNKNOWN_TOPIC}
        moving = {KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
                  KafkaError.REQUEST_TIMED_OUT}
        found: dict[TopicPartitionKey, int] = {}
        deadline = time.monotonic() + _RETRY_S
        while specs:
            futures = self.admin.list_offsets(
                {TopicPartition(t, p): spec for (t, p), spec in specs.items()},
                isolation_level=self.isolation, request_timeout=_TIMEOUT)
            again: dict[TopicPartitionKey, Any] = {}
            for tp, future in futures.items():
                key = (tp.topic, tp.partition)
                try:
                    found[key] = future.result().offset
                except KafkaException as e:
                    code = e.args[0].code() if e.args else None
                    if code in missing and missing_ok and time.monotonic() >= deadline:
                        continue
                    if (code in missing or code in moving) and time.monotonic() < deadline:
                        again[key] = specs[key]
                        continue
                    raise
            specs = again
            if specs:
                time.sleep(0.2)
        return found

    def watermarks(self, partitions: list[TopicPartitionKey], missing_ok: bool = False
                   ) -> dict[TopicPartitionKey, tuple[int, int]]:
        """(earliest, latest) offset of each partition; latest is the high watermark (the
        last stable offset under read_committed). With missing_ok, partitions that do not
        exist (any more, or yet) are left out."""
        from confluent_kafka.admin import OffsetSpec

        low = self._list_offsets({tp: OffsetSpec.earliest() for tp in partitions}, missing_ok)
        high = self._list_offsets({tp: OffsetSpec.latest() for tp in low}, missing_ok)
        return {tp: (low[tp], high[tp]) for tp in high}

    def offsets_for_times(self, times: dict[TopicPartitionKey, int]) -> dict[TopicPartitionKey,
                                                                              int | None]:
        """The first offset whose timestamp is at or after the given one (ms), per partition;
        None where no record is that late."""
        from confluent_kafka.admin import OffsetSpec

        found = self._list_offsets({tp: OffsetSpec.for_timestamp(ms) for tp, ms in times.items()})
        return {tp: (offset if offset >= 0 else None) for tp, offset in found.items()}
