"""The transaction APIs' handlers: requests in, TransactionCoordinator calls, responses out.

InitProducerId (with and without a transactional id), AddPartitionsToTxn (the client's
v0-3, and the batched v4+ of partition leaders with verify_only, KIP-890),
AddOffsetsToTxn, EndTxn, DescribeTransactions and ListTransactions (KIP-664). Clients
before KIP-588 (InitProducerId < v4, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn < v2)
do not know PRODUCER_FENCED: they are told INVALID_PRODUCER_EPOCH, as Kafka does.
FindCoordinator with key type TRANSACTION is answered here (find_coordinator), through
the group APIs' FindCoordinator handler: the leader of the id's __transaction_state
partition, the topic created on first use as Kafka creates it.

Authorization (`auth`, which KafkaApis sets; everything is allowed by default) is Kafka
3.9's KafkaApis, before anything is done: DESCRIBE on the transactional id for
FindCoordinator and DescribeTransactions (whose partitions are shown only of topics the
principal may DESCRIBE), WRITE on it for InitProducerId, AddPartitionsToTxn (v0-3),
AddOffsetsToTxn and EndTxn (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); READ on the group of
AddOffsetsToTxn (GROUP_AUTHORIZATION_FAILED); WRITE on the topics of AddPartitionsToTxn
v0-3 (TOPIC_AUTHORIZATION_FAILED; never for an internal topic); CLUSTER_ACTION on the
cluster for the brokers' AddPartitionsToTxn v4+ and, without a transactional id,
IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679) for InitProducerId
(CLUSTER_AUTHORIZATION_FAILED). ListTransactions lists the ids the principal may DESCRIBE.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, cast

from odradek.broker.auth_helper import (
    ALLOW_ALL,
    CLUSTER_NAME,
    AclOperation,
    AuthHelper,
    ResourceType,
)
from odradek.cluster.controller import Controller
from odradek.cluster.metadata import TopicMetadata
from odradek.cluster.topics import TRANSACTION_STATE_TOPIC, TopicExistsError, is_internal
from odradek.coordinator.transaction.transaction_coordinator import (
    TransactionCoordinator,
    TransactionResult,
)
from odradek.coordinator.transaction.transaction_metadata import TopicPartition
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError
from odradek.protocol.framing import Request
from odradek.protocol.message import Message
from odradek.protocol.messages import (
    add_offsets_to_txn_request,
    add_offsets_to_txn_response,
    add_partitions_to_txn_request,
    add_partitions_to_txn_response,
    describe_transactions_request,
    describe_transactions_response,
    end_txn_request,
    end_txn_response,
    init_producer_id_request,
    init_producer_id_response,
    list_transactions_request,
    list_transactions_response,
)
from odradek.server.config import BrokerConfig
from odradek.server.network import RequestContext
from odradek.storage.errors import InvalidConfigError

log = logging.getLogger(__name__)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
_WRITE, _DESCRIBE = AclOperation.WRITE, AclOperation.DESCRIBE
_TOPIC, _TRANSACTIONAL_ID = ResourceType.TOPIC, ResourceType.TRANSACTIONAL_ID


def _fenced_for(version: int, first_version_with_fenced: int, error: int) -> int:
    """PRODUCER_FENCED as an older client understands it (KIP-588)."""
    if error == ErrorCode.PRODUCER_FENCED and version < first_version_with_fenced:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


class TransactionApis:
    def __init__(self, config: BrokerConfig, coordinator: TransactionCoordinator,
                 controller: Controller,
                 endpoint: Callable[[int, RequestContext], tuple[str, int] | None]
                 ) -> None:
        self.config = config
        self.coordinator = coordinator
        self.controller = controller
        self.endpoint = endpoint  # a broker's (host, port) on the request's listener
        self.auth: AuthHelper = ALLOW_ALL  # KafkaApis sets the broker's

    # ---- FindCoordinator (key type TRANSACTION) -----------------------------------------

    async def find_coordinator(self, transactional_id: str, context: RequestContext
                               ) -> tuple[int, str | None, int, str, int]:
        """(error, message, node id, host, port) for a transactional id the principal may
        DESCRIBE (Kafka's getCoordinator; refused: no node, and the error's own message
        before FindCoordinator v4, none in a v4+ coordinator entry)."""
        if not self.auth.authorize(context, _DESCRIBE, _TRANSACTIONAL_ID, transactional_id):
            error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            return (error, error.message if context.header.request_api_version < 4 else None,
                    -1, "", -1)
        topic = await self._transaction_state_topic()
        if topic is not None:
            state = topic.partitions.get(self.coordinator.partition_for(transactional_id))
            address = (self.endpoint(state.leader, context)
                       if state is not None and state.leader >= 0 else None)
            if state is not None and address is not None:
                return ErrorCode.NONE, None, state.leader, address[0], address[1]
        return (ErrorCode.COORDINATOR_NOT_AVAILABLE, "the transaction coordinator is not "
                "available", -1, "", -1)

    async def _transaction_state_topic(self) -> TopicMetadata | None:
        """__transaction_state, created now if it does not exist yet (Kafka's rule: with
        fewer live brokers than its replication factor, not yet; a single node caps it)."""
        topic = self.controller.topics.get(TRANSACTION_STATE_TOPIC)
        if topic is not None:
            return topic
        settings = self.coordinator.config
        replication_factor = settings.transaction_log_replication_factor
        live = len(self.controller.live_brokers)
        if self.controller.single_node:
            replication_factor = min(replication_factor, live)
        elif live < replication_factor:
            log.info("%d live brokers, fewer than transaction.state.log.replication.factor="
                     "%d: %s is created once enough have joined", live, replication_factor,
                     TRANSACTION_STATE_TOPIC)
            return None
        try:
            return await self.controller.create_topic(
                TRANSACTION_STATE_TOPIC, settings.transaction_log_num_partitions,
                replication_factor, settings.topic_configs(replication_factor))
        except TopicExistsError:  # another request created it meanwhile
            return self.controller.topics.get(TRANSACTION_STATE_TOPIC)
        except (KafkaError, InvalidConfigError) as e:
            log.error("cannot create %s: %s", TRANSACTION_STATE_TOPIC, e)
            return None

    def handlers(self) -> dict[int, Callable[[Request, RequestContext], Any]]:
        return {
            ApiKey.INIT_PRODUCER_ID: self.handle_init_producer_id,
            ApiKey.ADD_PARTITIONS_TO_TXN: self.handle_add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: self.handle_add_offsets_to_txn,
            ApiKey.END_TXN: self.handle_end_txn,
            ApiKey.DESCRIBE_TRANSACTIONS: self.handle_describe_transactions,
            ApiKey.LIST_TRANSACTIONS: self.handle_list_transactions,
        }

    def _known(self, topic: str, partition: int) -> bool:
        metadata = self.controller.topics.get(topic)
        return metadata is not None and partition in metadata.partitions

    # ---- InitProducerId ---------------------------------------------------------------

    async def handle_init_producer_id(self, request: Request,
                                      context: RequestContext) -> Message:
        body = cast(init_producer_id_request.InitProducerIdRequest, request.body)
        version = request.api_version
        if body.transactional_id is not None:
            if not self.auth.authorize(context, _WRITE, _TRANSACTIONAL_ID,
                                       body.transactional_id):
                return _init_producer_id_error(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        elif not (self.auth.authorize(context, AclOperation.IDEMPOTENT_WRITE,
                                      ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False)
                  or self.auth.authorize_by_resource_type(context, _WRITE, _TOPIC)):
            # An idempotent producer: IDEMPOTENT_WRITE on the cluster, or (KIP-679) WRITE
            # on at least one topic.
            return _init_producer_id_error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        pid, epoch = body.producer_id, body.producer_epoch
        if (pid == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH):
            # Both or neither (KIP-360).
            return _init_producer_id_error(ErrorCode.INVALID_REQUEST)
        expected = None if pid == NO_PRODUCER_ID else (pid, epoch)
        result = await self.coordinator.handle_init_producer_id(
            body.transactional_id, body.transaction_timeout_ms, expected)
        return init_producer_id_response.InitProducerIdResponse(
            error_code=_fenced_for(version, 4, result.error), producer_id=result.producer_id,
            producer_epoch=result.producer_epoch)

    # ---- AddPartitionsToTxn -----------------------------------------------------------

    async def handle_add_partitions_to_txn(self, request: Request,
                                           context: RequestContext) -> Message:
        body = cast(add_partitions_to_txn_request.AddPartitionsToTxnRequest, request.body)
        version = request.api_version
        if version >= 4 and not self.auth.authorize_cluster(context,
                                                            AclOperation.CLUSTER_ACTION):
            # The batched versions are the brokers' (KIP-890): Kafka's
            # authorizeClusterOperation fails the whole request.
            return add_partitions_to_txn_response.AddPartitionsToTxnResponse(
                error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        if version < 4:
            results = await self._add_partitions(
                context, version, body.v3_and_below_transactional_id,
                body.v3_and_below_producer_id, body.v3_and_below_producer_epoch,
                body.v3_and_below_topics, verify_only=False)
            return add_partitions_to_txn_response.AddPartitionsToTxnResponse(
                results_by_topic_v3_and_below=results)
        transactions = []
        for t in body.transactions:
            results = await self._add_partitions(context, version, t.transactional_id,
                                                 t.producer_id, t.producer_epoch, t.topics,
                                                 t.verify_only)
            transactions.append(add_partitions_to_txn_response.AddPartitionsToTxnResult(
                transactional_id=t.transactional_id, topic_results=results))
        return add_partitions_to_txn_response.AddPartitionsToTxnResponse(
            results_by_transaction=transactions)

    async def _add_partitions(
            self, context: RequestContext, version: int, transactional_id: str,
            producer_id: int, producer_epoch: int,
            topics: list[add_partitions_to_txn_request.AddPartitionsToTxnTopic],
            verify_only: bool
    ) -> list[add_partitions_to_txn_response.AddPartitionsToTxnTopicResult]:
        wanted: list[TopicPartition] = list(dict.fromkeys(
            (t.name, p) for t in topics for p in t.partitions))
        errors: dict[TopicPartition, int]
        if version < 4:
            # A client's: WRITE on the transactional id, and on each topic (an internal
            # topic is never one a client may add, as in Kafka).
            if not self.auth.authorize(context, _WRITE, _TRANSACTIONAL_ID, transactional_id):
                return _partition_results(dict.fromkeys(
                    wanted, int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)))
            writable = self.auth.filter_authorized(
                context, _WRITE, _TOPIC, (tp[0] for tp in wanted if not is_internal(tp[0])))
        else:  # a broker's, authorized as such
            writable = {tp[0] for tp in wanted}
        refused = {tp: int(ErrorCode.TOPIC_AUTHORIZATION_FAILED) if tp[0] not in writable
                   else int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                   for tp in wanted if tp[0] not in writable or not self._known(*tp)}
        if refused:
            # One bad partition fails the whole request: the others were not attempted.
            errors = {tp: refused.get(tp, int(ErrorCode.OPERATION_NOT_ATTEMPTED))
                      for tp in wanted}
        elif verify_only:
            errors = self.coordinator.handle_verify_partitions(
                transactional_id, producer_id, producer_epoch, wanted)
        else:
            error = await self.coordinator.handle_add_partitions(
                transactional_id, producer_id, producer_epoch, wanted)
            errors = dict.fromkeys(wanted, _fenced_for(version, 2, error))
        return _partition_results(errors)

    # ---- AddOffsetsToTxn, EndTxn ------------------------------------------------------

    async def handle_add_offsets_to_txn(self, request: Request,
                                        context: RequestContext) -> Message:
        body = cast(add_offsets_to_txn_request.AddOffsetsToTxnRequest, request.body)
        if not self.auth.authorize(context, _WRITE, _TRANSACTIONAL_ID, body.transactional_id):
            return add_offsets_to_txn_response.AddOffsetsToTxnResponse(
                error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not self.auth.authorize(context, AclOperation.READ, ResourceType.GROUP,
                                   body.group_id):
            return add_offsets_to_txn_response.AddOffsetsToTxnResponse(
                error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
        error = await self.coordinator.handle_add_offsets(
            body.transactional_id, body.producer_id, body.producer_epoch, body.group_id)
        return add_offsets_to_txn_response.AddOffsetsToTxnResponse(
            error_code=_fenced_for(request.api_version, 2, error))

    async def handle_end_txn(self, request: Request, context: RequestContext) -> Message:
        body = cast(end_txn_request.EndTxnRequest, request.body)
        version = request.api_version
        if not self.auth.authorize(context, _WRITE, _TRANSACTIONAL_ID, body.transactional_id):
            return end_txn_response.EndTxnResponse(
                error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        result = TransactionResult.COMMIT if body.committed else TransactionResult.ABORT
        error = await self.coordinator.handle_end_transaction(
            body.transactional_id, body.producer_id, body.producer_epoch, result)
        response = end_txn_response.EndTxnResponse(error_code=_fenced_for(version, 2, error))
        if version >= 5 and error == ErrorCode.NONE:
            # Transaction version 1: the producer keeps its id and epoch.
            response.producer_id = body.producer_id
            response.producer_epoch = body.producer_epoch
        return response

    # ---- DescribeTransactions, ListTransactions ---------------------------------------

    def handle_describe_transactions(self, request: Request,
                                     context: RequestContext) -> Message:
        body = cast(describe_transactions_request.DescribeTransactionsRequest, request.body)
        states = []
        for tid in body.transactional_ids:
            if not self.auth.authorize(context, _DESCRIBE, _TRANSACTIONAL_ID, tid):
                states.append(describe_transactions_response.TransactionState(
                    error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    transactional_id=tid))
                continue
            d = self.coordinator.handle_describe_transactions(tid)
            if d.error:  # the rest keeps the schema's defaults, as Kafka answers
                states.append(describe_transactions_response.TransactionState(
                    error_code=d.error, transactional_id=tid))
                continue
            states.append(describe_transactions_response.TransactionState(
                error_code=d.error, transactional_id=tid, transaction_state=d.state,
                transaction_timeout_ms=d.txn_timeout_ms,
                transaction_start_time_ms=d.txn_start_timestamp, producer_id=d.producer_id,
                producer_epoch=d.producer_epoch,
                # Only the partitions of topics the principal may DESCRIBE.
                topics=[describe_transactions_response.TopicData(topic=topic, partitions=ids)
                        for topic, ids in d.topic_partitions.items()
                        if self.auth.authorize(context, _DESCRIBE, _TOPIC, topic)]))
        return describe_transactions_response.DescribeTransactionsResponse(
            transaction_states=states)

    def handle_list_transactions(self, request: Request, context: RequestContext) -> Message:
        body = cast(list_transactions_request.ListTransactionsRequest, request.body)
        error, unknown, listed = self.coordinator.handle_list_transactions(
            body.producer_id_filters, body.state_filters,
            body.duration_filter if request.api_version >= 1 else -1)
        return list_transactions_response.ListTransactionsResponse(
            error_code=error, unknown_state_filters=unknown,
            transaction_states=[list_transactions_response.TransactionState(
                transactional_id=t.transactional_id, producer_id=t.producer_id,
                transaction_state=t.state) for t in listed
                if self.auth.authorize(context, _DESCRIBE, _TRANSACTIONAL_ID,
                                       t.transactional_id)])


def _init_producer_id_error(error: ErrorCode) -> Message:
    """InitProducerIdRequest.getErrorResponse: no producer id or epoch."""
    return init_producer_id_response.InitProducerIdResponse(
        error_code=error, producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH)


def _partition_results(errors: dict[TopicPartition, int]
                       ) -> list[add_partitions_to_txn_response.AddPartitionsToTxnTopicResult]:
    """Each partition's error, by topic, in the order given."""
    by_topic: dict[str, list[add_partitions_to_txn_response.AddPartitionsToTxnPartitionResult]]
    by_topic = {}
    for (topic, index), error in errors.items():
        by_topic.setdefault(topic, []).append(
            add_partitions_to_txn_response.AddPartitionsToTxnPartitionResult(
                partition_index=index, partition_error_code=error))
    return [add_partitions_to_txn_response.AddPartitionsToTxnTopicResult(
        name=name, results_by_partition=results) for name, results in by_topic.items()]
