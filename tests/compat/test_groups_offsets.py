"""Committed offsets as the clients use them: auto-commit as each client documents it, and
the lag an administrator computes from the group's offsets and the log end offsets.

What the broker committed is read with raw OffsetFetch requests (group_wire.py), so the
checks do not depend on the client that commits.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from group_wire import GroupWire
from support.broker import BrokerProcess
from test_groups import SETTINGS, create_topic, produce, wait_for

INTERVAL_MS = 200  # auto.commit.interval.ms when the periodic commit is under test
NEVER_MS = 600_000  # ... and when it must not happen during the test


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("offsets"), SETTINGS).start()
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


@pytest.fixture
def observer(broker: BrokerProcess) -> Iterator[GroupWire]:
    wire = GroupWire(broker.port)
    yield wire
    wire.close()


# ---- one consumer per library, driven step by step --------------------------------------


class ConfluentConsumer:
    def __init__(self, bootstrap: str, topic: str, group: str, interval_ms: int,
                 **extra: Any) -> None:
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": True,
            "auto.commit.interval.ms": interval_ms, "auto.offset.reset": "earliest",
            **extra})
        self.consumer.subscribe([topic])
        self.messages: list[Any] = []

    def take(self, count: int) -> list[int]:
        """The offsets of the next `count` records, as the application receives them."""
        got: list[int] = []
        deadline = time.monotonic() + 30
        while len(got) < count:
            assert time.monotonic() < deadline
            msg = self.consumer.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                self.messages.append(msg)
                got.append(msg.offset())
        return got

    def idle(self) -> None:
        assert self.consumer.poll(0.05) is None

    def close(self) -> None:
        self.consumer.close()


class KafkaPythonConsumer:
    def __init__(self, bootstrap: str, topic: str, group: str, interval_ms: int) -> None:
        from kafka import KafkaConsumer

        self.consumer = KafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=True,
            auto_commit_interval_ms=interval_ms, auto_offset_reset="earliest")

    def take(self, count: int) -> list[int]:
        got: list[int] = []
        deadline = time.monotonic() + 30
        while len(got) < count:
            assert time.monotonic() < deadline
            for records in self.consumer.poll(timeout_ms=200,
                                              max_records=count - len(got)).values():
                got += [r.offset for r in records]
        return got

    def idle(self) -> None:
        assert not self.consumer.poll(timeout_ms=50)

    def close(self) -> None:
        self.consumer.close()


class AiokafkaConsumer:
    """aiokafka on an event loop of its own, which runs only inside these calls (so its
    periodic commits happen while the application polls, as they would)."""

    def __init__(self, bootstrap: str, topic: str, group: str, interval_ms: int) -> None:
        from aiokafka import AIOKafkaConsumer

        self.loop = asyncio.new_event_loop()

        async def start() -> Any:
            consumer = AIOKafkaConsumer(
                topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=True,
                auto_commit_interval_ms=interval_ms, auto_offset_reset="earliest")
            await consumer.start()
            return consumer

        self.consumer = self.loop.run_until_complete(start())

    def take(self, count: int) -> list[int]:
        got: list[int] = []
        deadline = time.monotonic() + 30
        while len(got) < count:
            assert time.monotonic() < deadline
            batches = self.loop.run_until_complete(
                self.consumer.getmany(timeout_ms=200, max_records=count - len(got)))
            got += [r.offset for records in batches.values() for r in records]
        return got

    def idle(self) -> None:
        assert not self.loop.run_until_complete(self.consumer.getmany(timeout_ms=50))

    def close(self) -> None:
        self.loop.run_until_complete(self.consumer.stop())
        self.loop.close()


CONSUMERS = {"confluent-kafka": ConfluentConsumer, "kafka-python": KafkaPythonConsumer,
             "aiokafka": AiokafkaConsumer}


# ---- auto-commit -------------------------------------------------------------------------


@pytest.mark.parametrize("library", list(CONSUMERS))
def test_auto_commit_reaches_the_consumed_position_after_the_interval(
        broker: BrokerProcess, observer: GroupWire, library: str) -> None:
    topic = group = f"auto-commit-{library}"
    tp = (topic, 0)
    create_topic(broker, topic, 1)
    produce(broker, topic, 5, partitions=1)
    consumer = CONSUMERS[library](broker.bootstrap, topic, group, INTERVAL_MS)
    try:
        assert consumer.take(5) == [0, 1, 2, 3, 4]
        # No commit() call: the client commits the consumed position on its own, while
        # the application keeps polling.
        started = time.monotonic()
        wait_for(lambda: (consumer.idle(), observer.committed(group, [tp])[tp] == 5)[1],
                 "the auto-commit of the consumed position", timeout=10)
        assert time.monotonic() - started < 5  # a few intervals, not a session
        produce(broker, topic, 3, start=5, partitions=1)
        assert consumer.take(3) == [5, 6, 7]
        wait_for(lambda: (consumer.idle(), observer.committed(group, [tp])[tp] == 8)[1],
                 "the next auto-commit", timeout=10)
    finally:
        consumer.close()
    assert observer.committed(group, [tp]) == {tp: 8}


@pytest.mark.parametrize("library", list(CONSUMERS))
def test_auto_commit_commits_the_consumed_position_on_close(
        broker: BrokerProcess, observer: GroupWire, library: str) -> None:
    topic = group = f"auto-commit-on-close-{library}"
    tp = (topic, 0)
    create_topic(broker, topic, 1)
    produce(broker, topic, 4, partitions=1)
    consumer = CONSUMERS[library](broker.bootstrap, topic, group, NEVER_MS)
    try:
        assert consumer.take(4) == [0, 1, 2, 3]
        consumer.idle()
        assert observer.committed(group, [tp]) == {tp: -1}  # the interval is far away
    finally:
        consumer.close()
    assert observer.committed(group, [tp]) == {tp: 4}  # committed by the close itself


def test_confluent_auto_commit_commits_only_stored_offsets(
        broker: BrokerProcess, observer: GroupWire) -> None:
    """librdkafka commits the *stored* offset: with enable.auto.offset.store=false only
    what the application stored with store_offsets(), however far it consumed."""
    topic = group = "auto-commit-stored"
    tp = (topic, 0)
    create_topic(broker, topic, 1)
    produce(broker, topic, 6, partitions=1)
    consumer = ConfluentConsumer(broker.bootstrap, topic, group, INTERVAL_MS,
                                 **{"enable.auto.offset.store": False})
    try:
        assert consumer.take(6) == list(range(6))
        consumer.consumer.store_offsets(message=consumer.messages[2])  # the next is 3
        wait_for(lambda: (consumer.idle(), observer.committed(group, [tp])[tp] == 3)[1],
                 "the auto-commit of the stored offset", timeout=10)
        deadline = time.monotonic() + 3 * INTERVAL_MS / 1000
        while time.monotonic() < deadline:  # more intervals pass: nothing more to commit
            consumer.idle()
        assert observer.committed(group, [tp]) == {tp: 3}
    finally:
        consumer.close()
    assert observer.committed(group, [tp]) == {tp: 3}


# ---- lag ---------------------------------------------------------------------------------


def confluent_lag(admin: AdminClient, topic: str, group: str) -> dict[int, int]:
    """Lag per partition as an administrator computes it with confluent-kafka: the log end
    offset (ListOffsets latest) minus the group's committed offset (OffsetFetch)."""
    offsets = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)])[group].result(10)
    committed = {tp.partition: tp.offset for tp in offsets.topic_partitions}
    ends = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest()
                               for p in committed})
    return {tp.partition: f.result(10).offset - committed[tp.partition]
            for tp, f in ends.items()}


def kafka_python_lag(broker: BrokerProcess, topic: str, group: str) -> dict[int, int]:
    from kafka import KafkaAdminClient
    from kafka.admin import OffsetSpec as KafkaOffsetSpec

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        committed = admin.list_group_offsets({group: None})[group]
        ends = admin.list_partition_offsets({tp: KafkaOffsetSpec.LATEST for tp in committed})
        return {tp.partition: ends[tp].offset - meta.offset for tp, meta in committed.items()}
    finally:
        admin.close()


def test_lag_is_the_log_end_offset_minus_the_committed_offset(
        broker: BrokerProcess) -> None:
    topic = group = "lag"
    create_topic(broker, topic, 4)
    produced = {0: 10, 1: 7, 2: 4, 3: 3}
    _produce_to(broker, topic, produced)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    try:
        wait_for(lambda: (consumer.poll(0.1), consumer.assignment())[1], "an assignment")
        # Partition 3 has no commit: no lag to report for it.
        commits = {0: 3, 1: 7, 2: 0}
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in commits.items()],
                        asynchronous=False)
        expected = {p: produced[p] - c for p, c in commits.items()}
        assert expected == {0: 7, 1: 0, 2: 4}
        assert confluent_lag(admin, topic, group) == expected
        assert kafka_python_lag(broker, topic, group) == expected
        # More records and more commits, while the group is active.
        _produce_to(broker, topic, {0: 5, 1: 2})
        consumer.commit(offsets=[TopicPartition(topic, 0, 12)], asynchronous=False)
        expected = {0: 15 - 12, 1: 9 - 7, 2: 4}
        assert confluent_lag(admin, topic, group) == expected
    finally:
        consumer.close()
    # The group is empty now: its lag stays what its commits say.
    assert confluent_lag(admin, topic, group) == expected
    assert kafka_python_lag(broker, topic, group) == expected


def _produce_to(broker: BrokerProcess, topic: str, counts: dict[int, int]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for partition, count in counts.items():
        for i in range(count):
            producer.produce(topic, value=f"{partition}-{i}".encode(), partition=partition)
    assert producer.flush(30) == 0
