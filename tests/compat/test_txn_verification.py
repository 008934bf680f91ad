"""KIP-890 part 1 against a real broker process: the partition leader asks the transaction
coordinator before it writes the first transactional batch of a producer's transaction.
A raw transactional produce to a partition never added with AddPartitionsToTxn is refused
with Kafka 3.9's error for its Produce version and writes nothing; once added, it is
written; `transaction.partition.verification.enable=false` turns the check off; and
confluent-kafka's transactional producer is unaffected."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from support.broker import BrokerProcess
from test_wire import Wire

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages.add_partitions_to_txn_request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from odradek.protocol.messages.end_txn_request import EndTxnRequest
from odradek.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from odradek.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from odradek.protocol.messages.init_producer_id_request import InitProducerIdRequest
from odradek.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from odradek.protocol.records import build_record_batch

TIMEOUT = 30
RETRIABLE = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
             ErrorCode.NOT_COORDINATOR, ErrorCode.CONCURRENT_TRANSACTIONS}


def _start(tmp_path_factory: pytest.TempPathFactory, name: str,
           settings: dict[str, str] | None = None) -> BrokerProcess:
    return BrokerProcess(tmp_path_factory.mktemp(name), settings).start()


@pytest.fixture(scope="module")
def verifying_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = _start(tmp_path_factory, "txn-verify")
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(broker: BrokerProcess, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(TIMEOUT)


def retry(call: Any, error: Any = lambda r: r.error_code) -> Any:
    """Calls until the answer's error is not a retriable coordinator error."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        response = call()
        if error(response) not in RETRIABLE or time.monotonic() > deadline:
            return response
        time.sleep(0.1)


def init_producer(wire: Wire, transactional_id: str) -> tuple[int, int]:
    found = retry(lambda: wire.call(FindCoordinatorRequest(key=transactional_id, key_type=1), 3))
    assert found.error_code == ErrorCode.NONE, found
    response = retry(lambda: wire.call(InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout_ms=60_000), 3))
    assert response.error_code == ErrorCode.NONE, response
    return response.producer_id, response.producer_epoch


def produce(wire: Wire, version: int, transactional_id: str, topic: str, producer: tuple[int, int],
            sequence: int, value: bytes) -> Any:
    batch = build_record_batch([(None, value)], base_timestamp=int(time.time() * 1000),
                               producer_id=producer[0], producer_epoch=producer[1],
                               base_sequence=sequence, is_transactional=True)
    response = wire.call(ProduceRequest(
        transactional_id=transactional_id, acks=-1, timeout_ms=5000, topic_data=[
            TopicProduceData(name=topic, partition_data=[
                PartitionProduceData(index=0, records=batch)])]), version)
    return response.responses[0].partition_responses[0]


def high_watermark(wire: Wire, topic: str) -> int:
    response = wire.call(FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=[
        FetchTopic(topic=topic, partitions=[FetchPartition(
            partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]), 11)
    partition = response.responses[0].partitions[0]  # type: ignore[attr-defined]
    assert partition.error_code == ErrorCode.NONE
    return int(partition.high_watermark)


def add_partition(wire: Wire, transactional_id: str, producer: tuple[int, int],
                  topic: str) -> int:
    response = retry(lambda: _add(wire, transactional_id, producer, topic),
                     lambda r: r.partition_error_code)
    return int(response.partition_error_code)


def _add(wire: Wire, transactional_id: str, producer: tuple[int, int], topic: str) -> Any:
    response = wire.call(AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=producer[0],
        v3_and_below_producer_epoch=producer[1],
        v3_and_below_topics=[AddPartitionsToTxnTopic(name=topic, partitions=[0])]), 3)
    return response.results_by_topic_v3_and_below[0].results_by_partition[0]


def test_unverified_transactional_produce_is_refused(verifying_broker: BrokerProcess) -> None:
    topic, tid = unique("verify"), unique("tid")
    create_topic(verifying_broker, topic)
    wire = Wire(verifying_broker.port)
    try:
        producer = init_producer(wire, tid)
        # Never added: Produce v10 and older get INVALID_TXN_STATE, v11 TRANSACTION_ABORTABLE
        # (Kafka 3.9), and nothing is written.
        refused = produce(wire, 9, tid, topic, producer, 0, b"not added")
        assert refused.error_code == ErrorCode.INVALID_TXN_STATE, refused
        assert refused.error_message == "Partition was not added to the transaction"
        refused = produce(wire, 11, tid, topic, producer, 0, b"not added")
        assert refused.error_code == ErrorCode.TRANSACTION_ABORTABLE, refused
        assert high_watermark(wire, topic) == 0
        # Added with the client's AddPartitionsToTxn: written, and so is the next batch of
        # the transaction (its transaction is now ongoing on the partition).
        assert add_partition(wire, tid, producer, topic) == ErrorCode.NONE
        accepted = produce(wire, 9, tid, topic, producer, 0, b"added")
        assert (accepted.error_code, accepted.base_offset) == (ErrorCode.NONE, 0), accepted
        accepted = produce(wire, 11, tid, topic, producer, 1, b"added too")
        assert (accepted.error_code, accepted.base_offset) == (ErrorCode.NONE, 1), accepted
        assert high_watermark(wire, topic) == 2
        ended = retry(lambda: wire.call(EndTxnRequest(
            transactional_id=tid, producer_id=producer[0], producer_epoch=producer[1],
            committed=True), 3))
        assert ended.error_code == ErrorCode.NONE
        # The transaction is over: the partition is no longer in one, so a new batch
        # without AddPartitionsToTxn is refused again.
        deadline = time.monotonic() + TIMEOUT
        while True:
            refused = produce(wire, 11, tid, topic, producer, 2, b"after commit")
            if refused.error_code != ErrorCode.NOT_ENOUGH_REPLICAS or (
                    time.monotonic() > deadline):
                break
            time.sleep(0.1)  # the coordinator is still completing the commit
        assert refused.error_code == ErrorCode.TRANSACTION_ABORTABLE, refused
        assert high_watermark(wire, topic) == 3  # the two batches and the commit marker
    finally:
        wire.close()


def test_verification_can_be_turned_off(tmp_path_factory: pytest.TempPathFactory) -> None:
    broker = _start(tmp_path_factory, "txn-no-verify",
                    {"transaction.partition.verification.enable": "false"})
    try:
        topic, tid = unique("no-verify"), unique("tid")
        create_topic(broker, topic)
        wire = Wire(broker.port)
        try:
            producer = init_producer(wire, tid)
            accepted = produce(wire, 11, tid, topic, producer, 0, b"unchecked")
            assert accepted.error_code == ErrorCode.NONE, accepted
            # The setting is dynamic (as in Kafka): on again, a second
            # producer's unadded partition is refused.
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
                ConfigEntry("transaction.partition.verification.enable", "true",
                            incremental_operation=AlterConfigOpType.SET)])
            admin.incremental_alter_configs([resource])[resource].result(TIMEOUT)
            other_tid = unique("tid")
            other = init_producer(wire, other_tid)
            refused = produce(wire, 11, other_tid, topic, other, 0, b"checked")
            assert refused.error_code == ErrorCode.TRANSACTION_ABORTABLE, refused
        finally:
            wire.close()
    finally:
        broker.stop()
    assert "Traceback" not in broker.log_text(), broker.log_text()


def test_confluent_kafka_transactional_producer(verifying_broker: BrokerProcess) -> None:
    topic = unique("verify-ck")
    create_topic(verifying_broker, topic, partitions=2)
    producer = Producer({"bootstrap.servers": verifying_broker.bootstrap,
                         "transactional.id": unique("ck"), "linger.ms": 5})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=b"v%d" % i, partition=i % 2)
    producer.commit_transaction(TIMEOUT)
    consumer = Consumer({"bootstrap.servers": verifying_broker.bootstrap,
                         "group.id": unique("reader"), "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
    values = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(values) < 10 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    assert sorted(values) == sorted(b"v%d" % i for i in range(10))
