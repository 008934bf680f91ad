"""Helpers of the Spark tests: topics, records produced with known offsets, rows read back."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from support.broker import BrokerProcess
from support.wait import wait_until


def create_topic(broker: BrokerProcess, partitions: int) -> str:
    name = f"spark-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


Record = tuple[bytes | None, bytes, int, int, list[tuple[str, str | bytes | None]]]


def produce(broker: BrokerProcess, topic: str, partitions: int, count: int) -> list[Record]:
    """(key, value, partition, timestamp ms, headers) of each record, in production order.
    Timestamps are a second apart, ending about now: older ones would be deleted by the
    broker's time-based retention (7 days) while a test runs."""
    base = int(time.time() * 1000) - count * 1000
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    records: list[Record] = []
    for i in range(count):
        key = None if i % 7 == 3 else f"k{i}".encode()
        value = f"value-{i}".encode() * (1 + i % 3)
        partition = i % partitions
        stamp = base + i * 1000
        headers: list[tuple[str, str | bytes | None]] = (
            [("h", str(i).encode()), ("empty", b"")] if i % 2 else [])
        producer.produce(topic, value=value, key=key, partition=partition, timestamp=stamp,
                         headers=headers)
        records.append((key, value, partition, stamp, headers))
    assert producer.flush(30) == 0
    return records


def expected_rows(topic: str, records: list[Record]) -> list[tuple[Any, ...]]:
    next_offset: dict[int, int] = {}
    rows = []
    for key, value, partition, stamp, headers in records:
        offset = next_offset.get(partition, 0)
        next_offset[partition] = offset + 1
        rows.append((key, value, topic, partition, offset,
                     datetime.fromtimestamp(stamp / 1000, UTC).replace(tzinfo=None), 0,
                     [(k, v) for k, v in headers]))
    return sorted(rows, key=lambda r: (r[3], r[4]))


def collect(df: Any, headers: bool = True) -> list[tuple[Any, ...]]:
    rows = []
    for row in df.collect():
        key = None if row.key is None else bytes(row.key)
        values: tuple[Any, ...] = (key, bytes(row.value), row.topic, row.partition, row.offset,
                                   row.timestamp, row.timestampType)
        if headers:
            values += ([(h.key, bytes(h.value)) for h in row.headers],)
        rows.append(values)
    return sorted(rows, key=lambda r: (r[3], r[4]))


def read(spark: Any, broker: BrokerProcess, **options: str) -> Any:
    reader = spark.read.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


# ---- streaming tests --------------------------------------------------------------------

T = TypeVar("T")


def wait_for(condition: Callable[[], T | None], what: str, timeout: float = 30,
             interval: float = 0.05) -> T:
    """Polls condition until it returns something truthy (returned) or the deadline passes
    (AssertionError naming what was awaited)."""
    value: T = wait_until(condition, timeout, what, interval)
    return value


Placed = tuple[int, int]   # (partition, offset) of a record, from its delivery report


def produce_values(broker: BrokerProcess, topic: str,
                   records: Sequence[tuple[int, bytes | str, int | None]],
                   batch_each: bool = False) -> list[Placed]:
    """Produces (partition, value, timestamp ms or None) records in order, with an idempotent
    producer, and returns each one's (partition, offset) as the broker acknowledged it.
    batch_each: every record in a record batch of its own."""
    config: dict[str, Any] = {"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                              "enable.idempotence": True}
    if batch_each:
        config.update({"batch.num.messages": 1, "linger.ms": 0})
    producer = Producer(config)
    placed: list[Placed | None] = [None] * len(records)
    errors: list[str] = []

    def delivered(index: int) -> Callable[[Any, Any], None]:
        def report(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                placed[index] = (msg.partition(), msg.offset())
        return report

    for i, (partition, value, stamp) in enumerate(records):
        kwargs: dict[str, Any] = {} if stamp is None else {"timestamp": stamp}
        producer.produce(topic, value=value.encode() if isinstance(value, str) else value,
                         partition=partition, on_delivery=delivered(i), **kwargs)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors
    assert all(p is not None for p in placed)
    return [p for p in placed if p is not None]


def earliest_offset(broker: BrokerProcess, topic: str, partition: int) -> int:
    """The partition's log start offset (ListOffsets earliest)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    [future] = admin.list_offsets({TopicPartition(topic, partition):
                                   OffsetSpec.earliest()}).values()
    return int(future.result(30).offset)


def stream(spark: Any, broker: BrokerProcess, **options: str) -> Any:
    """A streaming DataFrame of format odradek with the given read options."""
    reader = (spark.readStream.format("odradek")
              .option("kafka.bootstrap.servers", broker.bootstrap))
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def await_query(query: Any, timeout: float = 90) -> Exception | None:
    """Waits for a query that stops by itself (availableNow); returns the exception it failed
    with, or None. A query still running at the deadline is stopped and fails the test."""
    try:
        finished = query.awaitTermination(timeout)
    except Exception as e:   # StreamingQueryException: the query failed
        return e
    if not finished:
        query.stop()
        raise AssertionError(f"query {query.name or query.id} still running after {timeout} s")
    return None


def data_batches(query: Any) -> list[int]:
    """numInputRows of each micro-batch of a query that read records."""
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


# ---- pipeline tests ---------------------------------------------------------------------

Consumed = tuple[str, int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]],
                 int, int]


def consume_all(bootstrap: str, topic: str, isolation: str = "read_committed"
                ) -> list[Consumed]:
    """Every record of a topic as (topic, partition, offset, key, value, headers, timestamp
    ms, timestamp type), read with a plain consumer to the end of each partition (the high
    watermark, or the last stable offset read_committed); sorted by partition and offset."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": isolation})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        out: list[Consumed] = []
        # A partition is read when the consumer reports its end (offsets of transaction
        # markers hold no record, so the last record's offset does not tell).
        unfinished = set(partitions)
        deadline = time.monotonic() + 30
        while unfinished:
            assert time.monotonic() < deadline, f"could not read {topic} to its end"
            for m in consumer.consume(500, timeout=0.2):
                if m.error() is None:
                    kind, stamp = m.timestamp()
                    out.append((m.topic(), m.partition(), m.offset(), m.key(), m.value(),
                                list(m.headers() or []), stamp, kind))
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    unfinished.discard(m.partition())
        return sorted(out, key=lambda r: (r[1], r[2]))
    finally:
        consumer.close()
