"""DescribeProducers on a replica (odradek.broker.describe_producers), over a real
ReplicaManager and logs in tmp_path: the producers of an idempotent producer and of a
transactional one before and after its COMMIT marker, a follower's answer, and Kafka's
per-partition errors."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest

from odradek.broker.describe_producers import (
    describe_producers_handler,
    handle_describe_producers,
)
from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.replica_manager import ReplicaManager
from odradek.broker.txn_markers import handle_write_txn_markers
from odradek.cluster.metadata import PartitionState, TopicMetadata
from odradek.protocol.errors import ErrorCode
from odradek.protocol.framing import decode_request, encode_request
from odradek.protocol.messages.describe_producers_request import (
    DescribeProducersRequest,
    TopicRequest,
)
from odradek.protocol.messages.describe_producers_response import (
    DescribeProducersResponse,
    PartitionResponse,
    ProducerState,
)
from odradek.protocol.messages.write_txn_markers_request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from odradek.protocol.records import SimpleRecord, build_record_batch
from odradek.storage.config import LogConfig
from odradek.storage.log_manager import LogManager, LogManagerConfig

pytestmark = pytest.mark.timeout(30)

ME, F2 = 1, 2
TOPIC = "events"
TOPIC_ID = UUID(int=0xD0D0)
IDEMPOTENT, TRANSACTIONAL = 4000, 5000
NOW = int(time.time() * 1000)


class FakeClock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


def state(leader: int = ME) -> PartitionState:
    return PartitionState(replicas=[ME, F2], leader=leader, leader_epoch=0, isr=[ME],
                          partition_epoch=0)


def batch(count: int, *, pid: int, seq: int = 0, epoch: int = 0, timestamp: int = NOW,
          transactional: bool = False) -> bytearray:
    return bytearray(build_record_batch(
        [SimpleRecord(b"k", f"v{i}".encode(), timestamp=timestamp) for i in range(count)],
        producer_id=pid, producer_epoch=epoch, base_sequence=seq,
        is_transactional=transactional))


def ask(*topics: tuple[str, list[int]]) -> DescribeProducersRequest:
    return DescribeProducersRequest(topics=[TopicRequest(name=name, partition_indexes=ps)
                                            for name, ps in topics])


def describe(manager: ReplicaManager, *topics: tuple[str, list[int]],
             known: tuple[str, ...] | None = None) -> DescribeProducersResponse:
    exists = None if known is None else known.__contains__
    response = handle_describe_producers(manager, ask(*topics), exists)
    # Whatever it says encodes as the wire's v0 and decodes to the same.
    assert DescribeProducersResponse.decode(response.encode(0), 0) == response
    return response


def partition(response: DescribeProducersResponse, topic: str = TOPIC,
              index: int = 0) -> PartitionResponse:
    (found,) = [p for t in response.topics if t.name == topic for p in t.partitions
                if p.partition_index == index]
    return found


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[LogManager]:
    manager = LogManager(LogManagerConfig(log_dirs=(tmp_path / "logs",)), LogConfig())
    manager.startup(background=False)
    yield manager
    manager.shutdown()


@pytest.fixture
def manager(logs: LogManager) -> ReplicaManager:
    manager = ReplicaManager(ME, logs, clock=FakeClock(), replica_lag_time_max_ms=10_000)
    for index in (0, 1):
        manager.make_leader(TOPIC, index, TOPIC_ID, state())
    return manager


def commit(manager: ReplicaManager, pid: int, coordinator_epoch: int,
           partitions: list[int], *, result: bool = True) -> None:
    request = WriteTxnMarkersRequest(markers=[WritableTxnMarker(
        producer_id=pid, producer_epoch=0, transaction_result=result,
        coordinator_epoch=coordinator_epoch,
        topics=[WritableTxnMarkerTopic(name=TOPIC, partition_indexes=partitions)])])
    response = asyncio.run(asyncio.wait_for(
        handle_write_txn_markers(manager, request, timeout_ms=5_000), 10))
    assert all(p.error_code == ErrorCode.NONE
               for m in response.markers for t in m.topics for p in t.partitions)


def test_a_partition_without_producers(manager: ReplicaManager) -> None:
    manager.append_records(1, {(TOPIC, 0): bytearray(build_record_batch(
        [SimpleRecord(b"k", b"v", timestamp=NOW)]))})  # no producer id: not a producer
    assert describe(manager, (TOPIC, [0, 1])).topics[0].partitions == [
        PartitionResponse(partition_index=0), PartitionResponse(partition_index=1)]


def test_an_idempotent_producer(manager: ReplicaManager) -> None:
    results = manager.append_records(1, {(TOPIC, 0): batch(3, pid=IDEMPOTENT)})
    assert results[(TOPIC, 0)].error_code == ErrorCode.NONE
    manager.append_records(1, {(TOPIC, 0): batch(2, pid=IDEMPOTENT, seq=3,
                                                 timestamp=NOW + 5)})
    response = describe(manager, (TOPIC, [0, 1]))
    assert response.topics[0].name == TOPIC
    assert partition(response) == PartitionResponse(
        partition_index=0, error_code=ErrorCode.NONE, active_producers=[ProducerState(
            producer_id=IDEMPOTENT, producer_epoch=0, last_sequence=4,
            last_timestamp=NOW + 5, coordinator_epoch=-1, current_txn_start_offset=-1)])
    assert partition(response, index=1).active_producers == []


def test_an_open_transaction_then_its_commit(manager: ReplicaManager) -> None:
    manager.append_records(1, {(TOPIC, 0): batch(2, pid=IDEMPOTENT)})  # offsets 0-1
    results = manager.append_records(1, {
        (TOPIC, 0): batch(3, pid=TRANSACTIONAL, transactional=True),  # 2-4
        (TOPIC, 1): batch(1, pid=TRANSACTIONAL, transactional=True)})  # 0
    assert {tp: r.error_code for tp, r in results.items()} == {
        (TOPIC, 0): ErrorCode.NONE, (TOPIC, 1): ErrorCode.NONE}
    open_txn = describe(manager, (TOPIC, [0, 1]))
    assert partition(open_txn).active_producers == [
        ProducerState(producer_id=IDEMPOTENT, producer_epoch=0, last_sequence=1,
                      last_timestamp=NOW, coordinator_epoch=-1, current_txn_start_offset=-1),
        ProducerState(producer_id=TRANSACTIONAL, producer_epoch=0, last_sequence=2,
                      last_timestamp=NOW, coordinator_epoch=-1, current_txn_start_offset=2)]
    assert partition(open_txn, index=1).active_producers == [
        ProducerState(producer_id=TRANSACTIONAL, producer_epoch=0, last_sequence=0,
                      last_timestamp=NOW, coordinator_epoch=-1, current_txn_start_offset=0)]

    manager.clock.now = NOW + 1_000  # type: ignore[attr-defined]
    commit(manager, TRANSACTIONAL, 7, [0, 1])
    committed = describe(manager, (TOPIC, [0, 1]))
    for index in (0, 1):
        (txn,) = [p for p in partition(committed, index=index).active_producers
                  if p.producer_id == TRANSACTIONAL]
        # The marker ends the transaction and records the coordinator's epoch; the
        # sequence stays the last data batch's (a marker has none); the timestamp is the
        # marker's.
        assert (txn.current_txn_start_offset, txn.coordinator_epoch, txn.producer_epoch,
                txn.last_sequence, txn.last_timestamp) == (
            -1, 7, 0, 2 if index == 0 else 0, NOW + 1_000)

    # The next transaction opens at the offset after the marker.
    manager.append_records(1, {(TOPIC, 0): batch(1, pid=TRANSACTIONAL, seq=3,
                                                 transactional=True)})
    (txn,) = [p for p in partition(describe(manager, (TOPIC, [0]))).active_producers
              if p.producer_id == TRANSACTIONAL]
    assert (txn.current_txn_start_offset, txn.coordinator_epoch, txn.last_sequence) == (
        6, 7, 3)


def test_an_aborted_transaction(manager: ReplicaManager) -> None:
    manager.append_records(1, {(TOPIC, 1): batch(2, pid=TRANSACTIONAL, transactional=True)})
    commit(manager, TRANSACTIONAL, 3, [1], result=False)
    (txn,) = partition(describe(manager, (TOPIC, [1])), index=1).active_producers
    assert (txn.current_txn_start_offset, txn.coordinator_epoch, txn.last_sequence) == (
        -1, 3, 1)


def test_a_follower_answers_too(manager: ReplicaManager) -> None:
    """As Kafka's: every replica keeps its log's producer state (admin clients may ask
    a given broker, kafka-transactions.sh describe-producers --broker-id)."""
    manager.append_records(1, {(TOPIC, 0): batch(1, pid=IDEMPOTENT)})
    manager.partitions[(TOPIC, 0)].make_follower(state(leader=F2))
    (producer,) = partition(describe(manager, (TOPIC, [0]))).active_producers
    assert producer.producer_id == IDEMPOTENT


def test_errors(manager: ReplicaManager) -> None:
    response = describe(manager, (TOPIC, [0, 9]), ("nowhere", [0]), ("bad/name", [1]))
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions])
            for t in response.topics] == [
        (TOPIC, [(0, ErrorCode.NONE), (9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]),
        ("nowhere", [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]),
        ("bad/name", [(1, ErrorCode.INVALID_TOPIC_EXCEPTION)])]
    assert partition(response, "bad/name", 1).error_message
    # With the metadata's knowledge: a partition of a known topic not hosted here is
    # NOT_LEADER_OR_FOLLOWER (ask the leader); an unknown topic is unknown everywhere.
    response = describe(manager, (TOPIC, [0, 9]), ("elsewhere", [2]), ("nowhere", [0]),
                        known=(TOPIC, "elsewhere"))
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions])
            for t in response.topics] == [
        (TOPIC, [(0, ErrorCode.NONE), (9, ErrorCode.NOT_LEADER_OR_FOLLOWER)]),
        ("elsewhere", [(2, ErrorCode.NOT_LEADER_OR_FOLLOWER)]),
        ("nowhere", [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)])]
    assert describe(manager).topics == []


def test_an_offline_partition(manager: ReplicaManager) -> None:
    manager.append_records(1, {(TOPIC, 0): batch(1, pid=IDEMPOTENT)})
    manager.handle_log_dir_failure(manager.partitions[(TOPIC, 0)].log.directory.parent)
    response = describe(manager, (TOPIC, [0, 1]))
    assert [p.error_code for p in response.topics[0].partitions] == [
        ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.KAFKA_STORAGE_ERROR]


def test_the_kafka_apis_handler(manager: ReplicaManager) -> None:
    """describe_producers_handler, as KafkaApis registers it: the metadata cache's topics
    tell a partition led elsewhere from an unknown topic."""
    manager.append_records(1, {(TOPIC, 0): batch(1, pid=IDEMPOTENT)})
    cache = MetadataCache(ME, "cluster", topics={
        TOPIC: TopicMetadata(TOPIC, TOPIC_ID, {i: state() for i in range(3)})})
    handler = describe_producers_handler(manager, cache)
    body = ask((TOPIC, [0, 2]), ("nowhere", [0]))
    request = decode_request(encode_request(body, 0, 7, "test")[4:])
    response = handler(request, None)
    assert [(t.name, [(p.partition_index, p.error_code, len(p.active_producers))
                      for p in t.partitions]) for t in response.topics] == [
        (TOPIC, [(0, ErrorCode.NONE, 1), (2, ErrorCode.NOT_LEADER_OR_FOLLOWER, 0)]),
        ("nowhere", [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0)])]
