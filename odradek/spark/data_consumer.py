"""Executors' reads: the records of one offset range, through a consumer kept for the next.

Each Spark task reads exactly [start, end) of one partition with a confluent-kafka consumer
that is assigned the partition (no consumer group is joined, no offset committed). Python
workers live across tasks and micro-batches (spark.python.worker.reuse), so consumers are kept
in a small per-process cache keyed by their settings, as Spark's Kafka source keeps its
KafkaDataConsumers: the next task reuses the connections instead of opening new ones. A
consumer that failed mid-range is closed, never reused.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from .options import ReadOptions
from .ranges import OdradekDataLossError, OffsetRange


def consumer_config(client: dict[str, str], fail_on_data_loss: bool) -> dict[str, Any]:
    # confluent-kafka insists on a group.id even for assigned partitions: a private one that
    # is never joined (no subscribe) and never committed to.
    return {
        "isolation.level": "read_uncommitted",
        # librdkafka pauses a partition's fetches for fetch.queue.backoff.ms (1 s) whenever
        # its local queue is full; a task drains it in a fraction of that, then sat idle.
        "fetch.queue.backoff.ms": 10,
        **client,
        "group.id": f"odradek-spark-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error" if fail_on_data_loss else "earliest",
    }


class ConsumerCache:
    """Idle consumers by settings; at most `capacity` kept, each for at most `idle_s`."""

    def __init__(self, capacity: int = 8, idle_s: float = 300.0) -> None:
        self.capacity = capacity
        self.idle_s = idle_s
        self._idle: list[tuple[str, float, Any]] = []   # (settings, since, consumer)
        self._lock = threading.Lock()

    @staticmethod
    def _key(options: ReadOptions) -> str:
        return json.dumps([options.client, options.fail_on_data_loss], sort_keys=True)

    def take(self, options: ReadOptions) -> Any:
        from confluent_kafka import Consumer

        key, now = self._key(options), time.monotonic()
        with self._lock:
            expired = [e for e in self._idle if now - e[1] > self.idle_s]
            self._idle = [e for e in self._idle if now - e[1] <= self.idle_s]
            found = next((e for e in self._idle if e[0] == key), None)
            if found is not None:
                self._idle.remove(found)
        for entry in expired:
            entry[2].close()
        if found is not None:
            return found[2]
        return Consumer(consumer_config(options.client, options.fail_on_data_loss))

    def give_back(self, options: ReadOptions, consumer: Any, reusable: bool) -> None:
        if not reusable:
            consumer.close()
            return
        consumer.unassign()   # drops what was fetched beyond the range
        with self._lock:
            self._idle.append((self._key(options), time.monotonic(), consumer))
            surplus = self._idle[:-self.capacity]
            self._idle = self._idle[-self.capacity:]
        for entry in surplus:
            entry[2].close()


_CACHE = ConsumerCache()


def read_range(options: ReadOptions, r: OffsetRange, batch_rows: int = 8192) -> Iterator[
        list[Any]]:
    """The messages of [start, end), in chunks; stops at end (never past it). Offsets that
    hold no record (transaction markers, compaction) are passed over. A start below the log
    start offset (records deleted by retention) is the broker's OFFSET_OUT_OF_RANGE: an error
    with failOnDataLoss, else the consumer resets to the earliest offset still there."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    if r.size <= 0:
        return
    consumer = _CACHE.take(options)
    reusable = False
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.start)])
        idle_deadline_ms = options.poll_timeout_ms
        position = r.start
        idle_ms = 0
        while position < r.end:
            # Never ask for more than the range holds: consume() would wait out its timeout
            # for messages past the end.
            messages = consumer.consume(min(batch_rows, r.end - position), timeout=0.5)
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
        reusable = True
    finally:
        _CACHE.give_back(options, consumer, reusable)
