"""Transactions (KIP-98, KIP-447) with kafka-python's and aiokafka's transactional producers
against a real broker process, read back by each library's own read_committed and
read_uncommitted consumers: commit and abort across partitions and topics, fencing of a
zombie by a new producer with the same transactional id, and consumed offsets committed
in the transaction (send_offsets_to_transaction). tests/compat/test_transactions.py does
the same, and more, with confluent-kafka."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from support.broker import BrokerProcess
from test_transactions import create_topics, read, unique, values

TIMEOUT = 30

kafka = pytest.importorskip("kafka")
aiokafka = pytest.importorskip("aiokafka")

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer  # noqa: E402
from aiokafka.structs import OffsetAndMetadata as AioOffsetAndMetadata  # noqa: E402
from aiokafka.structs import TopicPartition as AioTopicPartition  # noqa: E402
from kafka import KafkaConsumer, KafkaProducer  # noqa: E402
from kafka.structs import OffsetAndMetadata, TopicPartition  # noqa: E402

if not hasattr(KafkaProducer, "init_transactions"):  # kafka-python < 2.1
    pytest.skip(f"kafka-python {kafka.__version__} has no transactional producer",
                allow_module_level=True)


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("txn-clients-broker")).start()
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


# ---- kafka-python ----------------------------------------------------------------------


def kp_producer(broker: BrokerProcess, transactional_id: str) -> KafkaProducer:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap,
                             transactional_id=transactional_id, linger_ms=5,
                             max_block_ms=TIMEOUT * 1000)
    producer.init_transactions()
    return producer


def kp_read(broker: BrokerProcess, topic: str, isolation: str, partitions: int = 2,
            expect: int | None = None, idle_polls: int = 4) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) read by a kafka-python consumer with `isolation` from the
    beginning: until `expect` records came, or `idle_polls` empty polls in a row."""
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level=isolation,
                             enable_auto_commit=False, group_id=None)
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    consumer.seek_to_beginning()
    out: list[tuple[int, int, bytes]] = []
    idle = 0
    try:
        while idle < idle_polls and (expect is None or len(out) < expect):
            batches = consumer.poll(timeout_ms=300)
            got = [(m.partition, m.offset, m.value) for ms in batches.values() for m in ms]
            idle = 0 if got else idle + 1
            out += got
    finally:
        consumer.close()
    return sorted(out)


def test_kafka_python_commit_and_abort_across_topics(txn_broker: BrokerProcess) -> None:
    a, b = unique("kp-txn-a"), unique("kp-txn-b")
    create_topics(txn_broker, a, b)
    producer = kp_producer(txn_broker, unique("kp-tid"))
    try:
        producer.begin_transaction()
        for i in range(10):
            producer.send(a, value=b"a%d" % i, partition=i % 2)
            producer.send(b, value=b"b%d" % i, partition=i % 2)
        producer.commit_transaction()
        producer.begin_transaction()
        for i in range(10):
            producer.send(a, value=b"aborted%d" % i, partition=i % 2)
        producer.flush(TIMEOUT)
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(a, value=b"last", partition=0)
        producer.commit_transaction()
    finally:
        producer.close(TIMEOUT)
    committed_a = sorted([b"a%d" % i for i in range(10)] + [b"last"])
    assert values(kp_read(txn_broker, a, "read_committed", expect=11)) == committed_a
    assert values(kp_read(txn_broker, b, "read_committed", expect=10)) == sorted(
        b"b%d" % i for i in range(10))
    everything = kp_read(txn_broker, a, "read_uncommitted", expect=21)
    assert values(everything) == sorted(committed_a + [b"aborted%d" % i for i in range(10)])
    # Partition 0: 5 committed, COMMIT marker, 5 aborted, ABORT marker, "last".
    assert [o for p, o, _ in everything if p == 0] == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 12]
    # confluent-kafka agrees on what is committed.
    assert values(read(txn_broker, a, "read_committed", expect=11)) == committed_a


def test_kafka_python_zombie_is_fenced(txn_broker: BrokerProcess) -> None:
    topic = unique("kp-fence")
    create_topics(txn_broker, topic, partitions=1)
    transactional_id = unique("kp-tid")
    zombie = kp_producer(txn_broker, transactional_id)
    successor: KafkaProducer | None = None
    try:
        zombie.begin_transaction()
        zombie.send(topic, value=b"zombie")
        zombie.flush(TIMEOUT)
        successor = kp_producer(txn_broker, transactional_id)  # aborts the zombie's
        with pytest.raises(kafka.errors.KafkaError) as fenced:
            zombie.commit_transaction()
        assert isinstance(fenced.value, (kafka.errors.ProducerFencedError,
                                         kafka.errors.InvalidProducerEpochError)), fenced.value
        successor.begin_transaction()
        successor.send(topic, value=b"successor")
        successor.commit_transaction()
    finally:
        zombie.close(0)
        if successor is not None:
            successor.close(TIMEOUT)
    assert values(kp_read(txn_broker, topic, "read_committed", 1, expect=1)) == [b"successor"]
    assert values(kp_read(txn_broker, topic, "read_uncommitted", 1, expect=2)) == [
        b"successor", b"zombie"]


def test_kafka_python_send_offsets_to_transaction(txn_broker: BrokerProcess) -> None:
    source, sink, group = unique("kp-in"), unique("kp-out"), unique("kp-group")
    create_topics(txn_broker, source, sink, partitions=1)
    plain = KafkaProducer(bootstrap_servers=txn_broker.bootstrap)
    for i in range(10):
        plain.send(source, value=b"%d" % i)
    plain.close(TIMEOUT)
    consumer = KafkaConsumer(source, bootstrap_servers=txn_broker.bootstrap, group_id=group,
                             isolation_level="read_committed", enable_auto_commit=False,
                             auto_offset_reset="earliest")
    producer = kp_producer(txn_broker, unique("kp-tid"))
    try:
        seen: list[Any] = []
        deadline = time.monotonic() + TIMEOUT
        while len(seen) < 10 and time.monotonic() < deadline:
            seen += [m for ms in consumer.poll(timeout_ms=300).values() for m in ms]
        assert len(seen) == 10
        # First 4 records in an aborted transaction, then all 10 in a committed one.
        for committed, upto in ((False, 4), (True, 10)):
            producer.begin_transaction()
            for m in seen[:upto]:
                producer.send(sink, value=b"out-" + m.value)
            producer.send_offsets_to_transaction(
                {TopicPartition(source, 0): OffsetAndMetadata(upto, "", -1)},
                consumer.group_metadata())
            if committed:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close(TIMEOUT)
        consumer.close(autocommit=False)
    assert values(kp_read(txn_broker, sink, "read_committed", 1, expect=10)) == sorted(
        b"out-%d" % i for i in range(10))
    check = KafkaConsumer(bootstrap_servers=txn_broker.bootstrap, group_id=group,
                          enable_auto_commit=False)
    try:
        assert check.committed(TopicPartition(source, 0)) == 10
    finally:
        check.close(autocommit=False)


# ---- aiokafka ----------------------------------------------------------------------------


async def aio_read(broker: BrokerProcess, topic: str, isolation: str, partitions: int = 2,
                   expect: int | None = None, idle_polls: int = 4
                   ) -> list[tuple[int, int, bytes]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level=isolation,
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    out: list[tuple[int, int, bytes]] = []
    try:
        consumer.assign([AioTopicPartition(topic, p) for p in range(partitions)])
        await consumer.seek_to_beginning()
        idle = 0
        while idle < idle_polls and (expect is None or len(out) < expect):
            batches = await consumer.getmany(timeout_ms=300)
            got = [(m.partition, m.offset, m.value) for ms in batches.values() for m in ms]
            idle = 0 if got else idle + 1
            out += got
    finally:
        await consumer.stop()
    return sorted(out)


async def aio_producer(broker: BrokerProcess, transactional_id: str) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap,
                                transactional_id=transactional_id, linger_ms=5)
    await producer.start()  # initializes the transactions (InitProducerId)
    return producer


def test_aiokafka_commit_and_abort_across_topics(txn_broker: BrokerProcess) -> None:
    a, b = unique("aio-txn-a"), unique("aio-txn-b")
    create_topics(txn_broker, a, b)

    async def scenario() -> None:
        producer = await aio_producer(txn_broker, unique("aio-tid"))
        try:
            async with producer.transaction():
                for i in range(10):
                    await producer.send(a, value=b"a%d" % i, partition=i % 2)
                    await producer.send(b, value=b"b%d" % i, partition=i % 2)
            # An exception inside the block aborts the transaction.
            with pytest.raises(RuntimeError):
                async with producer.transaction():
                    for i in range(10):
                        await producer.send(a, value=b"aborted%d" % i, partition=i % 2)
                    await producer.flush()
                    raise RuntimeError("abort it")
            await producer.begin_transaction()
            await producer.send(a, value=b"last", partition=0)
            await producer.commit_transaction()
        finally:
            await producer.stop()
        committed_a = sorted([b"a%d" % i for i in range(10)] + [b"last"])
        assert values(await aio_read(txn_broker, a, "read_committed", expect=11)) == \
            committed_a
        assert values(await aio_read(txn_broker, b, "read_committed", expect=10)) == sorted(
            b"b%d" % i for i in range(10))
        everything = await aio_read(txn_broker, a, "read_uncommitted", expect=21)
        assert values(everything) == sorted(committed_a +
                                            [b"aborted%d" % i for i in range(10)])
        assert [o for p, o, _ in everything if p == 0] == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 12]

    asyncio.run(asyncio.wait_for(scenario(), TIMEOUT * 2))


def test_aiokafka_zombie_is_fenced(txn_broker: BrokerProcess) -> None:
    topic = unique("aio-fence")
    create_topics(txn_broker, topic, partitions=1)
    transactional_id = unique("aio-tid")

    async def scenario() -> None:
        zombie = await aio_producer(txn_broker, transactional_id)
        successor: AIOKafkaProducer | None = None
        try:
            await zombie.begin_transaction()
            await (await zombie.send(topic, value=b"zombie"))
            successor = await aio_producer(txn_broker, transactional_id)
            with pytest.raises(aiokafka.errors.KafkaError) as fenced:
                await zombie.commit_transaction()
            assert isinstance(fenced.value, aiokafka.errors.ProducerFenced), fenced.value
            async with successor.transaction():
                await successor.send(topic, value=b"successor")
        finally:
            await zombie.stop()
            if successor is not None:
                await successor.stop()
        assert values(await aio_read(txn_broker, topic, "read_committed", 1, expect=1)) == [
            b"successor"]

    asyncio.run(asyncio.wait_for(scenario(), TIMEOUT * 2))


def test_aiokafka_send_offsets_to_transaction(txn_broker: BrokerProcess) -> None:
    source, sink, group = unique("aio-in"), unique("aio-out"), unique("aio-group")
    create_topics(txn_broker, source, sink, partitions=1)

    async def scenario() -> None:
        plain = AIOKafkaProducer(bootstrap_servers=txn_broker.bootstrap)
        await plain.start()
        try:
            for i in range(10):
                await plain.send(source, value=b"%d" % i)
        finally:
            await plain.stop()
        consumer = AIOKafkaConsumer(source, bootstrap_servers=txn_broker.bootstrap,
                                    group_id=group, isolation_level="read_committed",
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        producer = await aio_producer(txn_broker, unique("aio-tid"))
        try:
            seen: list[Any] = []
            while len(seen) < 10:
                batches = await consumer.getmany(timeout_ms=300)
                seen += [m for ms in batches.values() for m in ms]
            tp = AioTopicPartition(source, 0)
            with pytest.raises(RuntimeError):  # aborted: neither output nor offsets count
                async with producer.transaction():
                    for m in seen[:4]:
                        await producer.send(sink, value=b"out-" + m.value)
                    await producer.send_offsets_to_transaction(
                        {tp: AioOffsetAndMetadata(4, "")}, group)
                    raise RuntimeError("abort it")
            async with producer.transaction():
                for m in seen:
                    await producer.send(sink, value=b"out-" + m.value)
                await producer.send_offsets_to_transaction(
                    {tp: AioOffsetAndMetadata(10, "")}, group)
            assert await consumer.committed(tp) == 10
        finally:
            await producer.stop()
            await consumer.stop()
        assert values(await aio_read(txn_broker, sink, "read_committed", 1, expect=10)) == \
            sorted(b"out-%d" % i for i in range(10))
        assert len(await aio_read(txn_broker, sink, "read_uncommitted", 1, expect=14)) == 14

    asyncio.run(asyncio.wait_for(scenario(), TIMEOUT * 2))
