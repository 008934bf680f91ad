"""Helpers of the Spark tests: topics, records produced with known offsets, rows read back."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from support.broker import BrokerProcess


def create_topic(broker: BrokerProcess, partitions: int) -> str:
    name = f"spark-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


Record = tuple[bytes | None, bytes, int, int, list[tuple[str, str | bytes | None]]]


def produce(broker: BrokerProcess, topic: str, partitions: int, count: int) -> list[Record]:
    """(key, value, partition, timestamp ms, headers) of each record, in production order."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    records: list[Record] = []
    for i in range(count):
        key = None if i % 7 == 3 else f"k{i}".encode()
        value = f"value-{i}".encode() * (1 + i % 3)
        partition = i % partitions
        stamp = 1_700_000_000_000 + i * 1000
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
