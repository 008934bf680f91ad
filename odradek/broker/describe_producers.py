"""DescribeProducers (KIP-664), a replica's side (Kafka's handleDescribeProducersRequest,
ReplicaManager.activeProducerState and Partition.activeProducerState).

Per partition asked, the producers its log knows: producer id, epoch, last sequence,
last timestamp, the coordinator epoch of the last transaction marker (-1 before any) and
the first offset of the producer's open transaction (-1 when none). This is what
`kafka-transactions.sh describe-producers` and `find-hanging` show, and what `abort`
reads to find the producer of a transaction from its start offset.

As in Kafka, any replica answers (a follower too: admin clients may ask a given broker,
`--broker-id`), since every replica keeps the producer state of its log. Per partition
errors, Kafka's: INVALID_TOPIC_EXCEPTION (a name no topic can have),
TOPIC_AUTHORIZATION_FAILED (the principal may not READ the topic),
UNKNOWN_TOPIC_OR_PARTITION (no such topic, or not hosted here and the topic is unknown),
NOT_LEADER_OR_FOLLOWER (the topic exists but this broker is not a replica of the
partition: the client refreshes its metadata and asks the leader), KAFKA_STORAGE_ERROR
(the partition is in an offline log dir).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import cast

from odradek.broker.auth_helper import ALLOW_ALL, AclOperation, AuthHelper, ResourceType
from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.replica_manager import ReplicaManager, TopicPartition, error_of
from odradek.cluster.topics import validate_topic_name
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError
from odradek.protocol.framing import Request
from odradek.protocol.messages.describe_producers_request import DescribeProducersRequest
from odradek.protocol.messages.describe_producers_response import (
    DescribeProducersResponse,
    PartitionResponse,
    ProducerState,
    TopicResponse,
)
from odradek.server.network import RequestContext
from odradek.storage.producer_state import ProducerStateEntry

log = logging.getLogger(__name__)


def describe_producers_handler(replica_manager: ReplicaManager, metadata_cache: MetadataCache,
                               *, auth: AuthHelper = ALLOW_ALL
                               ) -> Callable[[Request, object], DescribeProducersResponse]:
    """KafkaApis' handler for DescribeProducers: the metadata cache tells a topic that
    exists elsewhere from an unknown one; `auth` decides which topics the request's
    principal may READ."""

    def handle(request: Request, context: object) -> DescribeProducersResponse:
        request_context = cast(RequestContext, context)
        return handle_describe_producers(
            replica_manager, cast(DescribeProducersRequest, request.body),
            metadata_cache.topics.__contains__,
            lambda name: auth.authorize(request_context, AclOperation.READ,
                                        ResourceType.TOPIC, name))

    return handle


def handle_describe_producers(
    replica_manager: ReplicaManager, request: DescribeProducersRequest,
    topic_exists: Callable[[str], bool] | None = None,
    topic_readable: Callable[[str], bool] | None = None,
) -> DescribeProducersResponse:
    """The response to `request`: a TopicResponse per topic asked, a PartitionResponse per
    partition asked, in request order. `topic_exists` (the metadata cache's knowledge,
    e.g. `lambda name: name in metadata_cache.topics`) tells an unknown topic
    (UNKNOWN_TOPIC_OR_PARTITION) from a partition this broker does not host
    (NOT_LEADER_OR_FOLLOWER); without it, a partition not hosted here is unknown.
    `topic_readable` (READ on the topic, asked once per topic of the request, after its
    name is found valid and before it is looked up, as Kafka asks) refuses a topic with
    TOPIC_AUTHORIZATION_FAILED; without it, every topic may be read."""
    response = DescribeProducersResponse()
    for topic in request.topics:
        topic_error = _topic_error(topic.name, topic_exists, topic_readable)
        partitions = []
        for index in topic.partition_indexes:
            if topic_error is not None:
                code, message = topic_error
                partitions.append(PartitionResponse(
                    partition_index=index, error_code=code, error_message=message))
            else:
                partitions.append(active_producer_state(
                    replica_manager, (topic.name, index), topic_exists))
        response.topics.append(TopicResponse(name=topic.name, partitions=partitions))
    return response


def _topic_error(name: str, topic_exists: Callable[[str], bool] | None,
                 topic_readable: Callable[[str], bool] | None = None
                 ) -> tuple[int, str | None] | None:
    try:
        validate_topic_name(name)
    except KafkaError as e:  # InvalidTopicError
        return ErrorCode.INVALID_TOPIC_EXCEPTION, str(e)
    if topic_readable is not None and not topic_readable(name):
        # Kafka's ApiError(TOPIC_AUTHORIZATION_FAILED): the error's own message.
        return (ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                ErrorCode.TOPIC_AUTHORIZATION_FAILED.message)
    if topic_exists is not None and not topic_exists(name):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    return None


def active_producer_state(replica_manager: ReplicaManager, tp: TopicPartition,
                          topic_exists: Callable[[str], bool] | None = None
                          ) -> PartitionResponse:
    """One partition's answer (Kafka's ReplicaManager.activeProducerState)."""
    result = PartitionResponse(partition_index=tp[1])
    if tp in replica_manager.offline_partitions:
        result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
        result.error_message = (f"{tp[0]}-{tp[1]} is in an offline log dir on broker "
                                f"{replica_manager.node_id}")
        return result
    partition = replica_manager.get_partition(tp)
    if partition is None:
        known = topic_exists is not None and topic_exists(tp[0])
        result.error_code = (ErrorCode.NOT_LEADER_OR_FOLLOWER if known
                             else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return result
    try:
        producers = partition.log.active_producers()  # may load the state from disk
    except Exception as e:  # a failed log is this partition's answer, not the request's
        log.warning("cannot read the producers of %s-%d: %s", tp[0], tp[1], e)
        result.error_code = error_of(e)
        result.error_message = str(e) or None
        return result
    result.active_producers = [producer_state(entry)
                               for _, entry in sorted(producers.items())]
    return result


def producer_state(entry: ProducerStateEntry) -> ProducerState:
    """A log's producer entry as DescribeProducers says it (Kafka's UnifiedLog
    .activeProducers)."""
    return ProducerState(
        producer_id=entry.producer_id,
        producer_epoch=entry.producer_epoch,
        last_sequence=entry.last_seq,
        last_timestamp=entry.last_timestamp,
        coordinator_epoch=entry.coordinator_epoch,
        current_txn_start_offset=entry.current_txn_first_offset,
    )
