"""Sends a decided transaction's markers to its partitions' leaders (Kafka's
TransactionMarkerChannelManager): the coordinator's TxnMarkerSender.

Partitions are grouped by leader and each leader gets one WriteTxnMarkers request, all at
once: this broker's own partitions are written directly through its ReplicaManager (the
same code a remote coordinator's request reaches), the others' over the inter-broker
client. With a single leader (the usual case) no task is made for it: local markers are
written in the caller's own step, so the coordinator's completion goes on to its Complete*
write without a turn of the event loop in between unless the ISR has to catch up. A
partition whose leader is unknown, answers a retriable error or cannot be reached is
tried again after `retry_backoff_ms`, with the leader the metadata then names, until
every partition has the marker; one that no longer exists needs none, as in Kafka. The
coordinator cancels the call when it resigns the transaction's partition or stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import cast

from odradek.broker.inter_broker_client import DisconnectedError, InterBrokerClient
from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.replica_manager import ReplicaManager
from odradek.broker.txn_markers import TransactionCompletedListener, handle_write_txn_markers
from odradek.coordinator.transaction.transaction_coordinator import TransactionResult
from odradek.coordinator.transaction.transaction_metadata import TopicPartition
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError
from odradek.protocol.messages.write_txn_markers_request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from odradek.protocol.messages.write_txn_markers_response import WriteTxnMarkersResponse

log = logging.getLogger(__name__)

# Per-partition answers after which the marker is written or not needed.
_DONE = {ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
# A coordinator older than the one the partition saw, or a producer epoch bumped since:
# retrying cannot help; Kafka logs it and treats the partition as done.
_GIVE_UP = {ErrorCode.TRANSACTION_COORDINATOR_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH}


class TxnMarkerChannel:
    def __init__(self, node_id: int, metadata_cache: MetadataCache, listener: str,
                 replica_manager: ReplicaManager, client: InterBrokerClient | None,
                 on_transaction_completed: Callable[[], TransactionCompletedListener | None],
                 *, retry_backoff_ms: int = 100, request_timeout_ms: int = 30_000) -> None:
        self.node_id = node_id
        self.cache = metadata_cache
        self.listener = listener
        self.replica_manager = replica_manager
        self.client = client  # None on a single node: every leader is this broker
        self._on_transaction_completed = on_transaction_completed
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms

    async def send_markers(self, producer_id: int, producer_epoch: int,
                           result: TransactionResult, coordinator_epoch: int,
                           partitions: frozenset[TopicPartition]) -> None:
        pending = set(partitions)
        while True:
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(pending):
                topic = self.cache.topics.get(tp[0])
                if topic is None or tp[1] not in topic.partitions:
                    pending.discard(tp)  # deleted: nothing to mark
                    continue
                leader = topic.partitions[tp[1]].leader
                if leader >= 0:
                    by_leader.setdefault(leader, []).append(tp)
            if not pending:
                return
            if len(by_leader) == 1:
                # The usual case: no task per leader, so a local leader's markers are
                # written in this step of the caller, without a turn of the event loop.
                [(leader, tps)] = by_leader.items()
                answers = [await self._send(leader, tps, producer_id, producer_epoch, result,
                                            coordinator_epoch)]
            else:
                answers = await asyncio.gather(*(
                    self._send(leader, tps, producer_id, producer_epoch, result,
                               coordinator_epoch)
                    for leader, tps in by_leader.items()))
            for errors in answers:
                for tp, error in errors.items():
                    if error in _DONE:
                        pending.discard(tp)
                    elif error in _GIVE_UP:
                        log.warning("marker for producer %d on %s-%d refused (%s): dropped",
                                    producer_id, tp[0], tp[1], ErrorCode(error).name)
                        pending.discard(tp)
            if not pending:
                return
            await asyncio.sleep(self.retry_backoff_ms / 1000)

    async def _send(self, leader: int, partitions: list[TopicPartition], producer_id: int,
                    producer_epoch: int, result: TransactionResult, coordinator_epoch: int
                    ) -> dict[TopicPartition, int]:
        """One WriteTxnMarkers to `leader`: an error per partition (a failure of the whole
        request: a retriable error for each)."""
        topics: dict[str, list[int]] = {}
        for topic, partition in partitions:
            topics.setdefault(topic, []).append(partition)
        request = WriteTxnMarkersRequest(markers=[WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch,
            transaction_result=result == TransactionResult.COMMIT,
            coordinator_epoch=coordinator_epoch,
            topics=[WritableTxnMarkerTopic(name=name, partition_indexes=indexes)
                    for name, indexes in topics.items()])])
        try:
            if leader == self.node_id:
                response = await handle_write_txn_markers(
                    self.replica_manager, request, timeout_ms=self.request_timeout_ms,
                    on_transaction_completed=self._on_transaction_completed())
            else:
                address = self.cache.endpoint(leader, self.listener)
                if self.client is None or address is None:
                    return dict.fromkeys(partitions, ErrorCode.LEADER_NOT_AVAILABLE)
                self.client.update_endpoints({**self._known_endpoints(), leader: address})
                response = cast(WriteTxnMarkersResponse, await self.client.send(
                    leader, request, timeout_ms=self.request_timeout_ms))
        except (DisconnectedError, KafkaError) as e:
            log.info("markers for producer %d to broker %d failed: %s; retrying",
                     producer_id, leader, e)
            return dict.fromkeys(partitions, ErrorCode.NETWORK_EXCEPTION)
        return {(t.name, p.partition_index): p.error_code
                for marker in response.markers for t in marker.topics for p in t.partitions}

    def _known_endpoints(self) -> dict[int, tuple[str, int]]:
        out = {}
        for broker_id in self.cache.brokers:
            if broker_id != self.node_id:
                address = self.cache.endpoint(broker_id, self.listener)
                if address is not None:
                    out[broker_id] = address
        return out
