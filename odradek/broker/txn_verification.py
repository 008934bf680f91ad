"""Transaction verification by the partition leader (KIP-890 part 1): Kafka's
AddPartitionsToTxnManager and the error translation of ReplicaManager.appendRecords.

Before the first transactional batch of a producer's transaction is written to a
partition, the leader asks the transaction coordinator whether that partition is in the
producer's ongoing transaction, with that producer id and epoch (AddPartitionsToTxn v4+,
verify_only). The coordinator is the leader of the transactional id's partition of
__transaction_state: this broker's own TransactionCoordinator is called directly, another
broker is asked over the inter-broker client. Later batches of the transaction find it
ongoing in the partition's producer state and are not verified again; a marker ends it.

Errors as Kafka 3.9 gives them to the producer:
- the coordinator cannot be found, loads, is not the coordinator, cannot be reached or
  the transaction is completing: NOT_ENOUGH_REPLICAS (retriable without a metadata
  refresh), "Unable to verify the partition has been added to the transaction";
- the partition is not in the transaction: TRANSACTION_ABORTABLE for Produce v11, and
  INVALID_TXN_STATE "Partition was not added to the transaction" for older versions;
- PRODUCER_FENCED (another epoch): INVALID_PRODUCER_EPOCH; the rest as the coordinator
  answers (INVALID_PRODUCER_ID_MAPPING for an unknown id or producer id).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import cast

from odradek.broker.inter_broker_client import DisconnectedError, InterBrokerClient
from odradek.broker.metadata_cache import MetadataCache
from odradek.cluster.topics import TRANSACTION_STATE_TOPIC
from odradek.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from odradek.coordinator.transaction.transaction_metadata import TopicPartition
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError, UnsupportedVersionError
from odradek.protocol.messages.add_partitions_to_txn_request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
)
from odradek.protocol.messages.add_partitions_to_txn_response import AddPartitionsToTxnResponse

log = logging.getLogger(__name__)

FIRST_VERIFY_ONLY_VERSION = 4  # AddPartitionsToTxn's batched, broker-to-broker form
# Produce versions that know TRANSACTION_ABORTABLE (Kafka 3.9's genericError above v10).
FIRST_ABORTABLE_PRODUCE_VERSION = 11

# Coordinator errors a producer of any version retries on, as NOT_ENOUGH_REPLICAS.
_RETRIABLE = frozenset({
    ErrorCode.NETWORK_EXCEPTION, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
    ErrorCode.CONCURRENT_TRANSACTIONS,
})


def produce_error(error: int, produce_version: int) -> tuple[int, str | None]:
    """A verification failure as the producer sees it: (error code, message)."""
    if error == ErrorCode.PRODUCER_FENCED:  # AddPartitionsToTxnManager's translation
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    elif (error == ErrorCode.TRANSACTION_ABORTABLE
          and produce_version < FIRST_ABORTABLE_PRODUCE_VERSION):
        error = ErrorCode.INVALID_TXN_STATE
    if error in _RETRIABLE:
        return (ErrorCode.NOT_ENOUGH_REPLICAS, "Unable to verify the partition has been "
                f"added to the transaction. Underlying error: {ErrorCode(error).name}")
    if error == ErrorCode.INVALID_TXN_STATE:
        return error, "Partition was not added to the transaction"
    return error, None


class TransactionVerifier:
    """Asks the coordinator of a transactional id whether partitions are in its producer's
    ongoing transaction. `enabled` is transaction.partition.verification.enable."""

    def __init__(self, node_id: int, metadata_cache: MetadataCache, listener: str,
                 coordinator: TransactionCoordinator, client: InterBrokerClient | None,
                 *, enabled: bool = True, request_timeout_ms: int = 30_000) -> None:
        self.node_id = node_id
        self.cache = metadata_cache
        self.listener = listener  # the inter-broker listener
        self.coordinator = coordinator
        self.client = client  # None on a single node: the coordinator is this broker
        self.enabled = enabled
        self.request_timeout_ms = request_timeout_ms

    def coordinator_node(self, transactional_id: str) -> int | None:
        """The broker leading the id's __transaction_state partition, if it is alive."""
        topic = self.cache.topics.get(TRANSACTION_STATE_TOPIC)
        if topic is None:  # never created: no transaction can have started
            return None
        state = topic.partitions.get(self.coordinator.partition_for(transactional_id))
        if state is None or state.leader < 0:
            return None
        if state.leader != self.node_id and state.leader not in self.cache.brokers:
            return None
        return state.leader

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The coordinator's error for each partition that is not verified (the
        coordinator's codes after AddPartitionsToTxnManager's translation; produce_error
        turns them into the producer's). Empty: all verified."""
        wanted = list(dict.fromkeys(partitions))
        if not wanted:
            return {}
        leader = self.coordinator_node(transactional_id)
        if leader is None:
            return dict.fromkeys(wanted, int(ErrorCode.COORDINATOR_NOT_AVAILABLE))
        if leader == self.node_id:
            errors = self.coordinator.handle_verify_partitions(
                transactional_id, producer_id, producer_epoch, wanted)
        else:
            errors = await self._ask(leader, transactional_id, producer_id, producer_epoch,
                                     wanted)
        return {tp: int(e) for tp, e in errors.items() if e != ErrorCode.NONE}

    async def _ask(self, leader: int, transactional_id: str, producer_id: int,
                   producer_epoch: int, wanted: list[TopicPartition]
                   ) -> dict[TopicPartition, int]:
        address = self.cache.endpoint(leader, self.listener)
        if self.client is None or address is None:
            return dict.fromkeys(wanted, int(ErrorCode.COORDINATOR_NOT_AVAILABLE))
        topics: dict[str, list[int]] = {}
        for topic, partition in wanted:
            topics.setdefault(topic, []).append(partition)
        request = AddPartitionsToTxnRequest(transactions=[AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id,
            producer_epoch=producer_epoch, verify_only=True,
            topics=[AddPartitionsToTxnTopic(name=name, partitions=indexes)
                    for name, indexes in topics.items()])])
        try:
            if self.client.endpoints.get(leader) != address:
                self.client.update_endpoints({**self.client.endpoints, leader: address})
            connection = await self.client.connection(leader, self.request_timeout_ms)
            version = connection.version_for(ApiKey.ADD_PARTITIONS_TO_TXN)
            if version < FIRST_VERIFY_ONLY_VERSION:
                raise UnsupportedVersionError("no verify_only AddPartitionsToTxn")
            response = cast(AddPartitionsToTxnResponse, await self.client.send(
                leader, request, version, timeout_ms=self.request_timeout_ms))
        except UnsupportedVersionError:
            # Kafka: a coordinator that cannot verify lets the produce through.
            log.warning("broker %d cannot verify transactions: produce not verified", leader)
            return {}
        except (DisconnectedError, KafkaError, OSError) as e:
            log.info("verifying %s with broker %d failed: %s", transactional_id, leader, e)
            return dict.fromkeys(wanted, int(ErrorCode.NETWORK_EXCEPTION))
        if response.error_code:
            # The producer must not see CLUSTER_AUTHORIZATION_FAILED (Kafka).
            error = (ErrorCode.INVALID_TXN_STATE
                     if response.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                     else response.error_code)
            return dict.fromkeys(wanted, int(error))
        errors: dict[TopicPartition, int] = {}
        for result in response.results_by_transaction:
            for topic_result in result.topic_results:
                for p in topic_result.results_by_partition:
                    errors[(topic_result.name, p.partition_index)] = p.partition_error_code
        return errors
