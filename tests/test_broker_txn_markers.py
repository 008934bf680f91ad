"""WriteTxnMarkers on the partition leader (odradek.broker.txn_markers), over a real
ReplicaManager and logs in tmp_path: one control batch per marker and partition appended
with the coordinator's origin, acks=all (the answer waits for the ISR), per-partition
errors as Kafka's, and the last stable offset and aborted index following the markers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest

from odradek.broker.replica_manager import FetchPartitionRequest, ReplicaManager
from odradek.broker.txn_markers import handle_write_txn_markers
from odradek.cluster.metadata import PartitionState
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages.write_txn_markers_request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from odradek.protocol.messages.write_txn_markers_response import WriteTxnMarkersResponse
from odradek.protocol.records import (
    SimpleRecord,
    build_record_batch,
    decode_control_record,
    decode_records,
    iter_batch_headers,
)
from odradek.storage.config import LogConfig
from odradek.storage.log_manager import LogManager, LogManagerConfig
from odradek.storage.txn_index import AbortedTxn

pytestmark = pytest.mark.timeout(30)

ME, F2 = 1, 2
TOPIC = "events"
TOPIC_ID = UUID(int=0xE7E7)
PID, OTHER = 4000, 5000


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def state(*, leader: int = ME, isr: tuple[int, ...] = (ME,),
          replicas: tuple[int, ...] = (ME,)) -> PartitionState:
    return PartitionState(replicas=list(replicas), leader=leader, leader_epoch=0,
                          isr=list(isr), partition_epoch=0)


def txn_batch(count: int, seq: int = 0, pid: int = PID, epoch: int = 0) -> bytearray:
    now = int(time.time() * 1000)
    return bytearray(build_record_batch(
        [SimpleRecord(b"k", f"t{i}".encode(), timestamp=now) for i in range(count)],
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True))


def request(*markers: tuple[int, bool, int, dict[str, list[int]]],
            epoch: int = 0) -> WriteTxnMarkersRequest:
    """Markers as (producer id, commit, coordinator epoch, {topic: partitions})."""
    return WriteTxnMarkersRequest(markers=[
        WritableTxnMarker(producer_id=pid, producer_epoch=epoch, transaction_result=commit,
                          coordinator_epoch=coordinator_epoch,
                          topics=[WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                                  for t, ps in topics.items()])
        for pid, commit, coordinator_epoch, topics in markers])


def errors(response: WriteTxnMarkersResponse) -> list[dict[tuple[str, int], int]]:
    return [{(t.name, p.partition_index): p.error_code for t in m.topics for p in t.partitions}
            for m in response.markers]


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


def run(manager: ReplicaManager, body: WriteTxnMarkersRequest,
        timeout_ms: int = 5_000) -> WriteTxnMarkersResponse:
    return asyncio.run(asyncio.wait_for(
        handle_write_txn_markers(manager, body, timeout_ms=timeout_ms), 10))


def test_markers_end_transactions_and_move_the_lso(manager: ReplicaManager) -> None:
    manager.append_records(1, {(TOPIC, 0): txn_batch(2), (TOPIC, 1): txn_batch(1)})
    manager.append_records(1, {(TOPIC, 0): txn_batch(1, pid=OTHER)})  # 2
    p0, p1 = manager.partitions[(TOPIC, 0)], manager.partitions[(TOPIC, 1)]
    assert (p0.last_stable_offset, p1.last_stable_offset) == (0, 0)
    response = run(manager, request(
        (PID, False, 3, {TOPIC: [0, 1, 7], "nowhere": [0]}),
        (OTHER, True, 3, {TOPIC: [0]})))
    assert errors(response) == [
        {(TOPIC, 0): ErrorCode.NONE, (TOPIC, 1): ErrorCode.NONE,
         (TOPIC, 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
         ("nowhere", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION},
        {(TOPIC, 0): ErrorCode.NONE}]
    assert [m.producer_id for m in response.markers] == [PID, OTHER]
    assert (p0.last_stable_offset, p1.last_stable_offset) == (5, 2)
    # The control batches as written: ABORT then COMMIT, with the coordinator epoch.
    data = p0.log.read(3, 1 << 20).read()
    markers = []
    for pos, header in iter_batch_headers(data):
        assert header.is_control and header.is_transactional
        (record,) = decode_records(data, pos, header)
        markers.append((header.base_offset, header.producer_id,
                        decode_control_record(record)))
    assert markers == [(3, PID, (0, 3)), (4, OTHER, (1, 3))]
    assert p0.log.collect_aborted_transactions(0, 5) == [AbortedTxn(PID, 0, 3, 2)]
    assert p1.log.collect_aborted_transactions(0, 2) == [AbortedTxn(PID, 0, 1, 2)]
    # The response encodes as the wire's v0 and v1.
    for version in (0, 1):
        assert WriteTxnMarkersResponse.decode(response.encode(version), version) == response


def test_a_stale_coordinator_epoch_is_fenced_on_its_partition_only(
        manager: ReplicaManager) -> None:
    manager.append_records(1, {(TOPIC, 0): txn_batch(1), (TOPIC, 1): txn_batch(1)})
    assert errors(run(manager, request((PID, True, 5, {TOPIC: [0]})))) == [
        {(TOPIC, 0): ErrorCode.NONE}]
    manager.append_records(1, {(TOPIC, 0): txn_batch(1, seq=1)})
    end = manager.partitions[(TOPIC, 0)].log_end_offset
    assert errors(run(manager, request((PID, False, 4, {TOPIC: [0, 1]})))) == [
        {(TOPIC, 0): ErrorCode.TRANSACTION_COORDINATOR_FENCED, (TOPIC, 1): ErrorCode.NONE}]
    assert manager.partitions[(TOPIC, 0)].log_end_offset == end
    assert manager.partitions[(TOPIC, 0)].last_stable_offset == 2  # still open
    # An older producer epoch is refused too.
    assert errors(run(manager, request((PID, False, 5, {TOPIC: [0]}), epoch=0))) == [
        {(TOPIC, 0): ErrorCode.NONE}]
    manager.append_records(1, {(TOPIC, 1): txn_batch(1, pid=OTHER, epoch=2)})
    assert errors(run(manager, request((OTHER, True, 5, {TOPIC: [1]}), epoch=1))) == [
        {(TOPIC, 1): ErrorCode.INVALID_PRODUCER_EPOCH}]


def test_a_follower_answers_not_leader(manager: ReplicaManager) -> None:
    partition = manager.partitions[(TOPIC, 1)]
    partition.make_follower(state(leader=F2, replicas=(ME, F2), isr=(ME, F2)))
    assert errors(run(manager, request((PID, True, 0, {TOPIC: [0, 1]})))) == [
        {(TOPIC, 0): ErrorCode.NONE, (TOPIC, 1): ErrorCode.NOT_LEADER_OR_FOLLOWER}]


def test_the_answer_waits_for_the_isr(manager: ReplicaManager) -> None:
    manager.make_leader(TOPIC, 2, TOPIC_ID, state(replicas=(ME, F2), isr=(ME, F2)))
    tp = (TOPIC, 2)
    manager.append_records(1, {tp: txn_batch(1)})
    partition = manager.partitions[tp]

    async def body() -> tuple[bool, WriteTxnMarkersResponse]:
        task = asyncio.create_task(handle_write_txn_markers(
            manager, request((PID, True, 0, {TOPIC: [2]})), timeout_ms=5_000))
        for _ in range(10):
            await asyncio.sleep(0)
        waited = not task.done()
        # The follower fetches past the marker: the HW passes it, the answer goes.
        await manager.fetch_messages(
            replica_id=F2, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
            requests=[(tp, FetchPartitionRequest(partition.log_end_offset, 1 << 20))])
        return waited, await task

    waited, response = asyncio.run(asyncio.wait_for(body(), 10))
    assert waited and errors(response) == [{tp: ErrorCode.NONE}]
    assert partition.last_stable_offset == 2
    # Without the follower, the coordinator is told to retry.
    manager.append_records(1, {tp: txn_batch(1, seq=1)})
    assert errors(run(manager, request((PID, False, 0, {TOPIC: [2]})), timeout_ms=50)) == [
        {tp: ErrorCode.REQUEST_TIMED_OUT}]
    assert partition.last_stable_offset == 2


def test_consumer_offsets_partitions_are_reported_to_the_group_coordinator(
        manager: ReplicaManager) -> None:
    manager.make_leader("__consumer_offsets", 3, UUID(int=1), state())
    seen = []
    body = request((PID, True, 0, {"__consumer_offsets": [3], TOPIC: [0]}))
    asyncio.run(handle_write_txn_markers(
        manager, body, on_transaction_completed=lambda *args: seen.append(args)))
    assert seen == [(PID, [("__consumer_offsets", 3)], True)]
