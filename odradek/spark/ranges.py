"""Offset ranges: resolved on the driver from the options and the broker's watermarks, then
read on executors with an assigned consumer (no consumer group is ever joined)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .options import EARLIEST, LATEST, OdradekOptionError, OffsetSpec, ReadOptions, Subscription

_METADATA_TIMEOUT = 30.0


class OdradekDataLossError(RuntimeError):
    """Records a query needed are gone (deleted by retention) and failOnDataLoss is true."""


@dataclass(frozen=True)
class OffsetRange:
    """Records [start, end) of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def consumer_config(client: dict[str, str], fail_on_data_loss: bool) -> dict[str, Any]:
    # confluent-kafka insists on a group.id even for assigned partitions: a private one that
    # is never joined (no subscribe) and never committed to.
    config: dict[str, Any] = {
        "isolation.level": "read_uncommitted",
        **client,
        "group.id": f"odradek-spark-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error" if fail_on_data_loss else "earliest",
    }
    return config


def open_consumer(options: ReadOptions) -> Any:
    from confluent_kafka import Consumer

    return Consumer(consumer_config(options.client, options.fail_on_data_loss))


def topic_partitions(consumer: Any, subscription: Subscription) -> list[tuple[str, int]]:
    """The partitions a subscription covers now, sorted."""
    metadata = consumer.list_topics(timeout=_METADATA_TIMEOUT)
    if subscription.assigned:
        return list(subscription.assigned)
    if subscription.topics:
        wanted = list(subscription.topics)
    else:
        pattern = re.compile(subscription.pattern or "")
        wanted = [t for t in metadata.topics if pattern.fullmatch(t)
                  and not t.startswith("__")]
    found: list[tuple[str, int]] = []
    for topic in wanted:
        info = metadata.topics.get(topic)
        if info is None or info.error is not None:
            # Ask about this topic by name: it may have been created a moment ago.
            info = consumer.list_topics(topic, timeout=_METADATA_TIMEOUT).topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            raise OdradekOptionError(f"topic {topic} does not exist")
        found += [(topic, p) for p in info.partitions]
    return sorted(found)


def watermarks(consumer: Any, partitions: list[tuple[str, int]]) -> dict[tuple[str, int],
                                                                         tuple[int, int]]:
    from confluent_kafka import TopicPartition

    return {(t, p): consumer.get_watermark_offsets(TopicPartition(t, p),
                                                   timeout=_METADATA_TIMEOUT, cached=False)
            for t, p in partitions}


def _pick(spec: OffsetSpec, topic: str, partition: int, default: int) -> int:
    if isinstance(spec, str):
        return EARLIEST if spec == "earliest" else LATEST
    return spec.get(topic, {}).get(str(partition), default)


def resolve_batch_ranges(options: ReadOptions) -> list[OffsetRange]:
    """Exact [start, end) per partition for a batch query, checked against the broker."""
    consumer = open_consumer(options)
    try:
        partitions = topic_partitions(consumer, options.subscription)
        for spec in (options.starting, options.ending):
            if isinstance(spec, dict):
                unknown = {(t, int(p)) for t, ps in spec.items() for p in ps} - set(partitions)
                if unknown:
                    raise OdradekOptionError(
                        f"offsets were given for partitions the query does not read: "
                        f"{sorted(unknown)}")
        marks = watermarks(consumer, partitions)
    finally:
        consumer.close()
    ranges: list[OffsetRange] = []
    for topic, partition in partitions:
        low, high = marks[(topic, partition)]
        start = _pick(options.starting, topic, partition, EARLIEST)
        end = _pick(options.ending, topic, partition, LATEST)
        start = low if start == EARLIEST else start
        end = high if end == LATEST else end
        if end < start:
            raise OdradekOptionError(
                f"ending offset {end} of {topic}-{partition} is before its starting offset "
                f"{start}")
        if end > high:
            raise OdradekOptionError(
                f"ending offset {end} of {topic}-{partition} is beyond its latest offset {high}")
        if start < low:
            if options.fail_on_data_loss:
                raise OdradekDataLossError(
                    f"offsets {start}..{low - 1} of {topic}-{partition} were deleted (the "
                    f"earliest offset is now {low}); set failOnDataLoss=false to skip them")
            start = min(low, end)
        ranges.append(OffsetRange(topic, partition, start, end))
    return ranges


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Splits large ranges so there are at least min_partitions pieces, as Spark's Kafka
    source does: each range gets a share of the pieces in proportion to its size."""
    nonempty = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in nonempty)
    if not min_partitions or min_partitions <= len(nonempty) or total == 0:
        return nonempty
    pieces: list[OffsetRange] = []
    for r in nonempty:
        parts = max(1, min(r.size, round(r.size * min_partitions / total)))
        for i in range(parts):
            start = r.start + r.size * i // parts
            end = r.start + r.size * (i + 1) // parts
            if end > start:
                pieces.append(OffsetRange(r.topic, r.partition, start, end))
    return pieces


def read_range(options: ReadOptions, r: OffsetRange, batch_rows: int = 8192) -> Iterator[
        list[Any]]:
    """The messages of [start, end), in chunks; stops at end (never past it). Offsets that
    hold no record (transaction markers, compaction) are passed over."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    if r.size <= 0:
        return
    consumer = open_consumer(options)
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.start)])
        idle_deadline_ms = options.poll_timeout_ms
        position = r.start
        idle_ms = 0
        while position < r.end:
            messages = consumer.consume(batch_rows, timeout=0.5)
            chunk: list[Any] = []
            progressed = False
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    if error.code() == KafkaError._AUTO_OFFSET_RESET or (
                            error.code() == KafkaError.OFFSET_OUT_OF_RANGE):
                        raise OdradekDataLossError(
                            f"offset {position} of {r.topic}-{r.partition} is out of range "
                            f"(deleted by retention?); set failOnDataLoss=false to skip: "
                            f"{error}")
                    raise KafkaException(error)
                offset = message.offset()
                if offset >= r.end:
                    position = r.end
                    break
                if offset < position:
                    continue
                if offset > position and options.fail_on_data_loss and not chunk and (
                        position == r.start):
                    # The first record is later than the range's start: retention removed the
                    # beginning while the query ran.
                    low, _ = consumer.get_watermark_offsets(
                        TopicPartition(r.topic, r.partition), timeout=_METADATA_TIMEOUT)
                    if low > position:
                        raise OdradekDataLossError(
                            f"offsets {position}..{low - 1} of {r.topic}-{r.partition} were "
                            "deleted; set failOnDataLoss=false to skip them")
                chunk.append(message)
                position = offset + 1
                progressed = True
            if chunk:
                yield chunk
            if position >= r.end:
                break
            if not progressed:
                # Offsets without records (markers) leave the consumer's position ahead.
                [tp] = consumer.position([TopicPartition(r.topic, r.partition)])
                if tp.offset >= 0 and tp.offset > position:
                    position = tp.offset
                    idle_ms = 0
                    continue
                idle_ms += 500
                if idle_ms >= idle_deadline_ms:
                    raise TimeoutError(
                        f"no records from {r.topic}-{r.partition} at offset {position} for "
                        f"{idle_deadline_ms} ms (kafkaConsumer.pollTimeoutMs); the range ends "
                        f"at {r.end}")
            else:
                idle_ms = 0
    finally:
        consumer.close()
