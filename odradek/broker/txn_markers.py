"""WriteTxnMarkers, the partition leader's side (Kafka's handleWriteTxnMarkersRequest).

A transaction coordinator that decided a transaction (KIP-98) sends every leader of the
transaction's partitions a marker per producer: COMMIT or ABORT, the producer id and
epoch, and its own coordinator epoch. The leader appends it as a control batch, with the
origin COORDINATOR (clients may not write control batches), and answers once the ISR has
it (acks=all, as Kafka): only then can the coordinator complete the transaction, and the
marker, replicated, moves the partition's last stable offset past the transaction.

Per partition errors, Kafka's: UNKNOWN_TOPIC_OR_PARTITION (not hosted here),
NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR (an offline log dir), INVALID_PRODUCER_EPOCH
(a marker older than the producer's epoch), TRANSACTION_COORDINATOR_FENCED (a marker from
a coordinator epoch older than one the partition saw for the producer: a zombie
coordinator), NOT_ENOUGH_REPLICAS(_AFTER_APPEND), REQUEST_TIMED_OUT (the ISR did not get
it in time; the coordinator retries, and a retried marker ends nothing twice).
"""

from __future__ import annotations

from collections.abc import Callable

from odradek.broker.replica_manager import ReplicaManager, TopicPartition
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages.write_txn_markers_request import (
    WritableTxnMarker,
    WriteTxnMarkersRequest,
)
from odradek.protocol.messages.write_txn_markers_response import (
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
    WriteTxnMarkersResponse,
)
from odradek.protocol.records import build_control_batch
from odradek.storage.log_validator import AppendOrigin

DEFAULT_TIMEOUT_MS = 30_000  # request.timeout.ms, which Kafka gives the markers' append
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"

# Told of each marker written to partitions of __consumer_offsets (Kafka's
# GroupCoordinator.onTransactionCompleted): producer id, those partitions, committed.
TransactionCompletedListener = Callable[[int, list[TopicPartition], bool], None]


async def handle_write_txn_markers(
    replica_manager: ReplicaManager, request: WriteTxnMarkersRequest, *,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    on_transaction_completed: TransactionCompletedListener | None = None,
) -> WriteTxnMarkersResponse:
    """Appends each marker to each of its partitions (one control batch per partition and
    marker, in request order) and waits up to `timeout_ms` for the ISR to have them all.
    Returns the response with an error code per marker and partition."""
    errors: list[dict[TopicPartition, int]] = []
    waiting: dict[TopicPartition, tuple[int, int]] = {}
    for marker in request.markers:
        marker_errors = _append_marker(replica_manager, marker, waiting)
        errors.append(marker_errors)
    if waiting:
        isr_errors = await replica_manager.wait_for_isr(waiting, timeout_ms)
        for marker_errors in errors:
            for tp, error in marker_errors.items():
                if error == ErrorCode.NONE and tp in isr_errors:
                    marker_errors[tp] = isr_errors[tp]
    response = WriteTxnMarkersResponse()
    for marker, marker_errors in zip(request.markers, errors, strict=True):
        if on_transaction_completed is not None:
            offsets = [tp for tp, error in marker_errors.items()
                       if tp[0] == CONSUMER_OFFSETS_TOPIC and error == ErrorCode.NONE]
            if offsets:
                on_transaction_completed(marker.producer_id, offsets, marker.transaction_result)
        response.markers.append(WritableTxnMarkerResult(
            producer_id=marker.producer_id,
            topics=[WritableTxnMarkerTopicResult(
                name=topic.name,
                partitions=[WritableTxnMarkerPartitionResult(
                    partition_index=index, error_code=marker_errors[(topic.name, index)])
                    for index in topic.partition_indexes])
                for topic in marker.topics]))
    return response


def _append_marker(replica_manager: ReplicaManager, marker: WritableTxnMarker,
                   waiting: dict[TopicPartition, tuple[int, int]]) -> dict[TopicPartition, int]:
    """Appends one marker's control batches; the partitions to wait for go to `waiting`
    as (offset the HW must reach, leader epoch of the append)."""
    errors: dict[TopicPartition, int] = {}
    entries: dict[TopicPartition, bytearray | memoryview | bytes | None] = {}
    now = replica_manager.clock()
    for topic in marker.topics:
        for index in topic.partition_indexes:
            tp = (topic.name, index)
            if replica_manager.get_partition(tp) is None:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            entries[tp] = bytearray(build_control_batch(
                marker.transaction_result, marker.producer_id, marker.producer_epoch,
                marker.coordinator_epoch, now))
    results = replica_manager.append_records(-1, entries, origin=AppendOrigin.COORDINATOR)
    for tp, result in results.items():
        errors[tp] = result.error_code
        if result.error_code == ErrorCode.NONE:
            partition = replica_manager.get_partition(tp)
            if partition is None:  # removed meanwhile (cannot happen on one loop)
                errors[tp] = ErrorCode.NOT_LEADER_OR_FOLLOWER
                continue
            required = result.last_offset + 1
            previous = waiting.get(tp)
            if previous is None or previous[0] < required:
                waiting[tp] = (required, partition.leader_epoch)
    return errors
