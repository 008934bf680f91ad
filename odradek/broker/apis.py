"""KafkaApis: one handler per API, dispatched by API key (Kafka's KafkaApis).

Handlers turn decoded requests into responses over the ReplicaManager (produce, fetch,
list offsets), the Controller (topics and partitions), the AdminManager (configs, log
dirs, records deletion) and the GroupCoordinator (consumer groups and offsets, whose
handlers live in odradek/coordinator/group/apis.py). Per-partition failures become
error codes in the response; nothing a client sends makes a handler raise.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from odradek.broker.acl_apis import AclApis, cluster_authorize
from odradek.broker.admin import AdminManager
from odradek.broker.auth_helper import (
    ALLOW_ALL,
    CLUSTER_NAME,
    AclOperation,
    AuthHelper,
    ResourceType,
)
from odradek.broker.describe_producers import describe_producers_handler
from odradek.broker.fetch_session import FetchSessionCache
from odradek.broker.inter_broker_guard import INTER_BROKER_APIS
from odradek.broker.inter_broker_guard import refused as inter_broker_refused
from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.quota_apis import QuotaApis
from odradek.broker.replica_manager import (
    CONSUMER_REPLICA_ID,
    DEBUGGING_REPLICA_ID,
    READ_COMMITTED,
    FetchPartitionRequest,
    FetchPartitionResult,
    ReplicaManager,
)
from odradek.broker.scram_apis import ScramApis
from odradek.broker.txn_markers import handle_write_txn_markers
from odradek.broker.txn_verification import TransactionVerifier, produce_error
from odradek.cluster.controller import Controller
from odradek.cluster.slices import Slices
from odradek.cluster.topics import TopicExistsError, is_internal, validate_topic_name
from odradek.coordinator.group.apis import GroupApis
from odradek.coordinator.group.group_coordinator import GroupCoordinator
from odradek.coordinator.transaction.apis import TransactionApis
from odradek.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from odradek.metrics.stats import BYTES_OUT, FAILED_FETCH, FETCH_REQUESTS
from odradek.protocol import compression, legacy_records
from odradek.protocol.api_keys import API_SPECS, ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError
from odradek.protocol.framing import Request
from odradek.protocol.message import Message
from odradek.protocol.messages import (
    api_versions_response,
    describe_cluster_response,
    fetch_response,
    list_offsets_response,
    metadata_response,
    offset_for_leader_epoch_response,
    produce_response,
    sasl_authenticate_response,
    sasl_handshake_response,
)
from odradek.protocol.messages.describe_cluster_request import DescribeClusterRequest
from odradek.protocol.messages.fetch_request import FetchRequest
from odradek.protocol.messages.list_offsets_request import ListOffsetsRequest
from odradek.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from odradek.protocol.messages.offset_for_leader_epoch_request import OffsetForLeaderEpochRequest
from odradek.protocol.messages.produce_request import ProduceRequest
from odradek.protocol.messages.write_txn_markers_request import WriteTxnMarkersRequest
from odradek.protocol.primitives import ZERO_UUID
from odradek.protocol.records import RecordBatchHeader
from odradek.server.config import BrokerConfig
from odradek.server.network import CloseConnection, RequestContext
from odradek.server.response import FileRecords
from odradek.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP

if TYPE_CHECKING:  # a cluster's and an authorizer's only: kazoo is not loaded without them
    from odradek.broker.inter_broker_apis import InterBrokerApis
    from odradek.security.acl_store import AclStore

log = logging.getLogger(__name__)

EARLIEST_LOCAL_TIMESTAMP = -4  # KIP-405: earliest offset still on local disk
LATEST_TIERED_TIMESTAMP = -5  # KIP-1005: no tiered storage here, so no such offset
_NOT_REQUESTED = -(2**31)
# A fetch of a partition answered so is not counted for its topic (its name may be
# anything a client sent): the metrics' topics are those that exist.
_UNCOUNTED_FETCH_ERRORS = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                     ErrorCode.UNKNOWN_TOPIC_ID,
                                     ErrorCode.TOPIC_AUTHORIZATION_FAILED})


def supported_range(api_key: int) -> tuple[int, int]:
    """Every valid version of an API, the deprecated ones included, as ZooKeeper-mode
    Kafka 3.9 serves them: Kafka 4.0 removed those (KIP-896), and with them every client
    from before Kafka 2.1 (Debian's kcat joins groups through FindCoordinator v0, Burrow
    reads lag with ListOffsets v0, old producers write magic 0 and 1 message sets)."""
    spec = API_SPECS[api_key]
    return spec.min_version, spec.max_version


# Topic compression.type -> the codec a converted legacy message set is written in;
# "producer" (absent here) keeps the producer's.
_TOPIC_CODECS = {"uncompressed": compression.NONE, "gzip": compression.GZIP,
                 "snappy": compression.SNAPPY, "lz4": compression.LZ4,
                 "zstd": compression.ZSTD}


async def _down_convert(results: list[FetchPartitionResult],
                        reads: list[tuple[tuple[str, int], FetchPartitionRequest]],
                        magic: int, refused: set[tuple[str, int]]
                        ) -> dict[tuple[str, int], bytes | KafkaError]:
    """Fetch v0-v3: the v2 batches read, as message sets of `magic` (Kafka's
    down-conversion), in a thread: each record is rewritten. Headers cannot be expressed
    and are dropped; control batches are left out. A partition whose next batch cannot be
    expressed (zstd: UNSUPPORTED_COMPRESSION_TYPE, as Kafka answers fetches before v10)
    gets the error instead."""
    def convert() -> dict[tuple[str, int], bytes | KafkaError]:
        out: dict[tuple[str, int], bytes | KafkaError] = {}
        for result, (tp, wanted) in zip(results, reads, strict=True):
            if result.slices and tp not in refused:
                try:
                    out[tp] = legacy_records.down_convert(
                        b"".join(s.read() for s in result.slices), magic,
                        fetch_offset=wanted.fetch_offset, max_bytes=wanted.max_bytes)
                except KafkaError as e:
                    out[tp] = e
        return out

    return await asyncio.to_thread(convert)


def _metadata_invalid_request(
        requested: list[MetadataRequestTopic]) -> metadata_response.MetadataResponse:
    """Kafka 3.9's answer to a Metadata v10/v11 request naming a topic by id (a null name
    or a topic id): those versions cannot carry a null name in the response, so KafkaApis
    throws InvalidRequestException and MetadataRequest.getErrorResponse answers
    INVALID_REQUEST for every topic asked, a null name written as ""."""
    return metadata_response.MetadataResponse(topics=[
        metadata_response.MetadataResponseTopic(
            error_code=ErrorCode.INVALID_REQUEST, name=t.name or "", topic_id=t.topic_id)
        for t in requested], controller_id=-1, cluster_id=None)


def _has_transactional_records(body: ProduceRequest) -> bool:
    """Whether any batch of the request is transactional (Kafka's
    RequestUtils.hasTransactionalRecords: the first batch of each partition's records)."""
    for topic_data in body.topic_data:
        for p in topic_data.partition_data:
            try:
                if p.records and RecordBatchHeader.parse(p.records).is_transactional:
                    return True
            except KafkaError:
                continue  # not a v2 batch (legacy, or corrupt): the append answers for it
    return False


def _producer_txn_state(partition: Any, producer_id: int) -> tuple[int, ...] | None:
    """What a partition's producer state says of a producer: (epoch, first offset of its
    open transaction or -1, coordinator epoch, last timestamp), None if it has none."""
    entry = partition.log.producer_state.last_entry(producer_id)
    if entry is None:
        return None
    return (entry.producer_epoch, entry.current_txn_first_offset, entry.coordinator_epoch,
            entry.last_timestamp)


class KafkaApis:
    def __init__(self, config: BrokerConfig, replica_manager: ReplicaManager,
                 controller: Controller, admin: AdminManager,
                 transaction_coordinator: TransactionCoordinator,
                 group_coordinator: GroupCoordinator, metadata_cache: MetadataCache,
                 inter_broker: InterBrokerApis | None = None,
                 txn_verifier: TransactionVerifier | None = None,
                 scram: ScramApis | None = None, auth: AuthHelper = ALLOW_ALL,
                 acl_store: AclStore | None = None,
                 quota_apis: QuotaApis | None = None) -> None:
        self.config = config
        # Client quotas (KIP-13, KIP-124, KIP-599): produce and fetch bytes, request time
        # and (AdminManager's) controller mutations per user and client id.
        self.quotas = quota_apis.quotas if quota_apis is not None else None
        self.auth = auth  # every handler asks it (Kafka's AuthHelper)
        self.txn_verifier = txn_verifier  # KIP-890: None verifies nothing
        self.metadata_cache = metadata_cache
        self.replica_manager = replica_manager
        self.controller = controller
        self.admin = admin
        self.group_coordinator = group_coordinator
        self.fetch_sessions = FetchSessionCache(config.max_incremental_fetch_session_cache_slots)
        handlers: dict[int, Callable[[Request, RequestContext], Any]] = {
            ApiKey.API_VERSIONS: self.handle_api_versions,
            ApiKey.METADATA: self.handle_metadata,
            ApiKey.PRODUCE: self.handle_produce,
            ApiKey.FETCH: self.handle_fetch,
            ApiKey.LIST_OFFSETS: self.handle_list_offsets,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self.handle_offset_for_leader_epoch,
            ApiKey.DESCRIBE_CLUSTER: self.handle_describe_cluster,
            ApiKey.SASL_HANDSHAKE: self.handle_sasl_handshake,
            ApiKey.SASL_AUTHENTICATE: self.handle_sasl_authenticate,
            ApiKey.WRITE_TXN_MARKERS: self.handle_write_txn_markers,
            ApiKey.DESCRIBE_PRODUCERS: describe_producers_handler(replica_manager,
                                                                  metadata_cache, auth=auth),
        }
        admin.auth = auth
        admin.quotas = self.quotas
        handlers.update(admin.handlers())
        if scram is not None:
            scram.auth = auth
            handlers.update(scram.handlers())
        if quota_apis is not None:
            quota_apis.auth = auth
            handlers.update(quota_apis.handlers())
        # CreateAcls, DescribeAcls, DeleteAcls: SECURITY_DISABLED without an authorizer.
        authorizer = auth.authorizer
        handlers.update(AclApis(authorizer, acl_store if authorizer is not None else None,
                                authorize=None if authorizer is None
                                else cluster_authorize(authorizer)).handlers())
        self.group_apis = GroupApis(config, group_coordinator, controller, self._endpoint)
        self.group_apis.auth = auth
        handlers.update(self.group_apis.handlers())
        # InitProducerId (idempotent and transactional producers) and the transaction APIs;
        # FindCoordinator for a transactional id is theirs too.
        transaction_apis = TransactionApis(config, transaction_coordinator, controller,
                                           self._endpoint)
        transaction_apis.auth = auth
        handlers.update(transaction_apis.handlers())
        self.group_apis.find_transaction_coordinator = transaction_apis.find_coordinator
        if inter_broker is not None:  # a cluster on ZooKeeper
            handlers.update(inter_broker.handlers())
        self._handlers = handlers
        self._ranges = {key: supported_range(key) for key in handlers}
        self._api_versions = api_versions_response.ApiVersionsResponse(
            api_keys=[api_versions_response.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                      for k, (lo, hi) in sorted(self._ranges.items())],
        )

    # ---- dispatch (the server's RequestHandler) ---------------------------------------

    def supports(self, api_key: int, api_version: int) -> bool:
        low_high = self._ranges.get(api_key)
        return low_high is not None and low_high[0] <= api_version <= low_high[1]

    def unsupported_api_versions(self) -> Message:
        return api_versions_response.ApiVersionsResponse(
            error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=self._api_versions.api_keys)

    async def handle(self, request: Request, context: RequestContext) -> Message | None:
        key = request.api.api_key
        quotas = self.quotas
        timer = None
        if quotas is not None and quotas.request.quotas:
            # request_percentage in force (KIP-124): the request's event-loop time is
            # measured from when its frame was taken up (odradek/server/quota_manager.py).
            timer = context.timer = quotas.request.timer(
                context.principal.name, context.client_id,
                context.started_ns or time.perf_counter_ns())
        refusal = None
        if key in INTER_BROKER_APIS:
            refusal = self._inter_broker_refusal(request, context)
        if refusal is not None:
            result: Message | None = refusal
        else:
            result = self._handlers[key](request, context)
            if inspect.isawaitable(result):
                if timer is None:
                    result = await result
                else:
                    steps = result.__await__()
                    try:
                        signal = steps.send(None)  # most handlers complete without waiting
                    except StopIteration as done:
                        result = done.value
                    else:  # the timer paused while it waits
                        result = await timer.run_rest(steps, signal)
        if timer is None:
            return result
        timer.pause()
        # Exempt as in Kafka: the inter-broker requests served (refused ones count), and
        # produces with acks=0 (nothing to answer); followers' fetches say so themselves.
        exempt = (key in INTER_BROKER_APIS and refusal is None) or result is None
        throttle = timer.record(exempt=exempt)
        if throttle > 0 and result is not None:
            # The response carries the larger of its own throttle time (byte rates,
            # controller mutations) and the request quota's; the connection is muted.
            context.throttle_ms = max(context.throttle_ms, throttle)
            current = getattr(result, "throttle_time_ms", None)
            if current is not None and current < throttle:
                result = copy.copy(result)  # handlers may share one (ApiVersions')
                result.throttle_time_ms = throttle  # type: ignore[attr-defined]
        return result

    def _inter_broker_refusal(self, request: Request, context: RequestContext
                              ) -> Message | None:
        if context.listener_name != self.config.inter_broker_listener_name:
            log.warning("refused %s from %s:%d on listener %s: inter-broker requests "
                        "are served on the inter-broker listener %s only",
                        request.api.name, context.client_host, context.client_port,
                        context.listener_name, self.config.inter_broker_listener_name)
            return inter_broker_refused(request)
        if not self.auth.authorize_cluster(context, AclOperation.CLUSTER_ACTION):
            return inter_broker_refused(request)
        return None

    # ---- ApiVersions, Metadata, DescribeCluster ----------------------------------------

    def handle_api_versions(self, request: Request, context: RequestContext) -> Message:
        return self._api_versions  # the same every time: built once

    # SASL listeners answer SaslHandshake and SaslAuthenticate in the connection, before
    # authentication (odradek/server/authenticator.py); what reaches here is out of place,
    # on another listener or after authentication, and Kafka answers ILLEGAL_SASL_STATE.

    def handle_sasl_handshake(self, request: Request, context: RequestContext) -> Message:
        return sasl_handshake_response.SaslHandshakeResponse(
            error_code=ErrorCode.ILLEGAL_SASL_STATE)

    def handle_sasl_authenticate(self, request: Request, context: RequestContext) -> Message:
        return sasl_authenticate_response.SaslAuthenticateResponse(
            error_code=ErrorCode.ILLEGAL_SASL_STATE,
            error_message="SaslAuthenticate request received after successful authentication")

    def _endpoint(self, broker_id: int, context: RequestContext) -> tuple[str, int] | None:
        return self.metadata_cache.endpoint(broker_id, context.listener_name)

    async def handle_metadata(self, request: Request, context: RequestContext) -> Message:
        body = cast(MetadataRequest, request.body)
        version = request.api_version
        cache = self.metadata_cache
        requested = body.topics
        listener = context.listener_name
        if version < 12 and requested and any(
                t.name is None or t.topic_id != ZERO_UUID for t in requested):
            return _metadata_invalid_request(requested)
        auth = self.auth
        if requested is None or (version == 0 and not requested):
            topics = []
            slices = Slices()  # thousands of topics: a slice of them at a time
            names = list(cache.topics)
            if auth.enabled:  # topics it may not describe are left out, unmentioned
                allowed = auth.filter_authorized(context, AclOperation.DESCRIBE,
                                                 ResourceType.TOPIC, names, log_if_denied=False)
                names = [n for n in names if n in allowed]
            for name in names:
                if name in cache.topics:  # not deleted while this one waited
                    topics.append(self._topic_metadata(name, listener, version))
                await slices.pause()
        else:
            allow_create = (body.allow_auto_topic_creation if version >= 4 else True) and (
                self.config.auto_create_topics_enable)
            names_asked = [self._requested_name(t) for t in requested]
            may_describe = auth.filter_authorized(
                context, AclOperation.DESCRIBE, ResourceType.TOPIC,
                [n for n in names_asked if n is not None])
            may_create_all = allow_create and auth.authorize_cluster(context,
                                                                     AclOperation.CREATE)
            topics = []
            for wanted, name in zip(requested, names_asked, strict=True):
                if name is not None and name not in may_describe:
                    # Whether it exists is not disclosed.
                    topics.append(metadata_response.MetadataResponseTopic(
                        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=wanted.name,
                        topic_id=wanted.topic_id if wanted.name is None else ZERO_UUID))
                    continue
                if (allow_create and not may_create_all and wanted.name is not None
                        and wanted.name not in cache.topics and not auth.authorize(
                            context, AclOperation.CREATE, ResourceType.TOPIC, wanted.name)):
                    topics.append(metadata_response.MetadataResponseTopic(
                        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=wanted.name,
                        is_internal=is_internal(wanted.name)))
                    continue
                if wanted.name is None:
                    topic = cache.topics_by_id.get(wanted.topic_id)
                    topics.append(self._topic_metadata(topic.name, listener, version)
                                  if topic else metadata_response.MetadataResponseTopic(
                                      error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None,
                                      topic_id=wanted.topic_id))
                    continue
                missing: int = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                if (allow_create and wanted.name not in cache.topics
                        and not is_internal(wanted.name)):
                    # Until the controller has elected its leaders (ZooKeeper) the new
                    # topic is LEADER_NOT_AVAILABLE, and clients ask again.
                    missing = (await self._auto_create(wanted.name, context)
                               or ErrorCode.LEADER_NOT_AVAILABLE)
                topics.append(self._topic_metadata(wanted.name, listener, version, missing))
        if body.include_topic_authorized_operations:
            for t in topics:
                if t.error_code == ErrorCode.NONE and t.name is not None:
                    t.topic_authorized_operations = auth.authorized_operations(
                        context, ResourceType.TOPIC, t.name)
        return metadata_response.MetadataResponse(
            brokers=[metadata_response.MetadataResponseBroker(
                node_id=broker.id, host=host, port=port, rack=broker.rack)
                for broker, host, port in cache.alive_brokers(listener)],
            cluster_id=cache.cluster_id,
            controller_id=-1 if cache.controller_id is None else cache.controller_id,
            topics=topics,
            cluster_authorized_operations=(
                auth.authorized_operations(context, ResourceType.CLUSTER, CLUSTER_NAME)
                if version < 11 and body.include_cluster_authorized_operations
                else _NOT_REQUESTED),
        )

    def _requested_name(self, wanted: MetadataRequestTopic) -> str | None:
        """The name of a topic a Metadata request asks for, by name or by id; None for
        an unknown id (answered UNKNOWN_TOPIC_ID whoever asks)."""
        if wanted.name is not None:
            return wanted.name
        topic = self.metadata_cache.topics_by_id.get(wanted.topic_id)
        return topic.name if topic is not None else None

    def _topic_metadata(self, name: str, listener: str, version: int,
                        missing: int = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                        ) -> metadata_response.MetadataResponseTopic:
        """The topic as Metadata shows it; `missing` is the error if it does not exist."""
        cache = self.metadata_cache
        topic = cache.topics.get(name)
        if topic is None:
            return metadata_response.MetadataResponseTopic(error_code=missing, name=name)
        partitions = []
        for p, s in sorted(topic.partitions.items()):
            partition = metadata_response.MetadataResponsePartition(
                partition_index=p, leader_id=s.leader, leader_epoch=s.leader_epoch,
                replica_nodes=s.replicas, isr_nodes=s.isr,
                offline_replicas=cache.offline_replicas.get((name, p), []))
            # Kafka's ZkMetadataCache: a partition whose leader is down, or has no
            # endpoint on this listener, has no leader to show.
            if s.leader < 0 or s.leader not in cache.brokers:
                partition.leader_id = -1
                partition.error_code = ErrorCode.LEADER_NOT_AVAILABLE
            elif not cache.has_listener(s.leader, listener):
                partition.leader_id = -1
                partition.error_code = (ErrorCode.LISTENER_NOT_FOUND if version >= 6
                                        else ErrorCode.LEADER_NOT_AVAILABLE)
            partitions.append(partition)
        return metadata_response.MetadataResponseTopic(
            name=name, topic_id=topic.topic_id, is_internal=is_internal(name),
            partitions=partitions)

    async def _auto_create(self, name: str, context: RequestContext) -> int:
        """Creates a topic a Metadata request names; NONE or the error to answer with."""
        try:
            validate_topic_name(name)
            if self.quotas is not None:
                # Counted against the client's controller_mutation_rate as in Kafka: never
                # refused, and the Metadata response is not throttled for it.
                self.quotas.controller_mutation.new_quota_for(
                    context.principal.name, context.client_id, strict=False,
                ).record(self.config.num_partitions)
            await self.controller.create_topic(
                name, self.config.num_partitions, self.config.default_replication_factor, {})
        except TopicExistsError:
            pass  # another broker created it meanwhile: this one learns of it shortly
        except KafkaError as e:
            log.info("cannot auto-create topic %r: %s", name, e)
            return int(e.error_code)
        return ErrorCode.NONE

    def handle_describe_cluster(self, request: Request, context: RequestContext) -> Message:
        body = cast(DescribeClusterRequest, request.body)
        if body.endpoint_type not in (0, 1):  # 1: brokers; 2: KRaft controllers
            return describe_cluster_response.DescribeClusterResponse(
                error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                error_message="this cluster has no KRaft controllers to describe",
                endpoint_type=body.endpoint_type)
        cache = self.metadata_cache
        return describe_cluster_response.DescribeClusterResponse(
            endpoint_type=1, cluster_id=cache.cluster_id,
            controller_id=-1 if cache.controller_id is None else cache.controller_id,
            brokers=[describe_cluster_response.DescribeClusterBroker(
                broker_id=broker.id, host=host, port=port, rack=broker.rack)
                for broker, host, port in cache.alive_brokers(context.listener_name)],
            cluster_authorized_operations=(
                (self.auth.authorized_operations(context, ResourceType.CLUSTER, CLUSTER_NAME)
                 if self.auth.authorize_cluster(context, AclOperation.DESCRIBE) else 0)
                if body.include_cluster_authorized_operations else _NOT_REQUESTED),
        )

    # ---- Produce ----------------------------------------------------------------------

    async def handle_produce(self, request: Request, context: RequestContext) -> Message | None:
        body = cast(ProduceRequest, request.body)
        acks = body.acks
        entries: dict[tuple[str, int], Any] = {}
        errors: dict[tuple[str, int], tuple[int, str | None]] = {}
        denied = self._produce_denied(body, context)
        for topic_data in body.topic_data:
            name = topic_data.name
            for p in topic_data.partition_data:
                tp = (name, p.index)
                if denied and name in denied:
                    errors[tp] = (denied[name], None)
                elif acks not in (-1, 0, 1):
                    errors[tp] = (ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks} is not 0, 1 or -1")
                elif is_internal(name):
                    errors[tp] = (ErrorCode.INVALID_TOPIC_EXCEPTION,
                                  f"clients cannot write to the internal topic {name}")
                else:
                    entries[tp] = p.records
        if request.api_version <= 2:  # old clients may send magic 0/1 message sets
            await self._convert_legacy(entries, errors)
        verifier = self.txn_verifier
        if body.transactional_id and verifier is not None and verifier.enabled and entries:
            await self._verify_transaction(verifier, body.transactional_id,
                                           request.api_version, entries, errors)
        results = await self.replica_manager.produce(acks, body.timeout_ms, entries)
        throttle_ms = 0
        if self.quotas is not None:  # the request's bytes, as Kafka counts them
            throttle_ms = self.quotas.produce.record(context.principal.name, context.client_id,
                                                     context.frame_size)
            context.throttle_ms = throttle_ms
        if acks == 0:
            if errors or any(r.error_code for r in results.values()):
                # Kafka's answer to a failed acks=0 produce: the producer notices the close.
                raise CloseConnection("a produce request with acks=0 failed")
            return None
        responses: dict[str, list[produce_response.PartitionProduceResponse]] = {}
        for topic_data in body.topic_data:
            out = responses.setdefault(topic_data.name, [])
            for p in topic_data.partition_data:
                tp = (topic_data.name, p.index)
                if tp in errors:
                    code, message = errors[tp]
                    out.append(produce_response.PartitionProduceResponse(
                        index=p.index, error_code=code, error_message=message))
                    continue
                r = results[tp]
                # v8+: which records failed, so the producer fails those alone (older
                # versions drop the field: it is ignorable).
                record_errors = [produce_response.BatchIndexAndErrorMessage(
                    batch_index=index, batch_index_error_message=message)
                    for index, message in r.record_errors]
                out.append(produce_response.PartitionProduceResponse(
                    index=p.index, error_code=r.error_code, base_offset=r.base_offset,
                    log_append_time_ms=r.log_append_time_ms,
                    log_start_offset=r.log_start_offset, record_errors=record_errors,
                    error_message=r.error_message))
        return produce_response.ProduceResponse(responses=[
            produce_response.TopicProduceResponse(name=n, partition_responses=ps)
            for n, ps in responses.items()
        ], throttle_time_ms=throttle_ms)

    def _produce_denied(self, body: ProduceRequest, context: RequestContext
                        ) -> dict[str, int] | None:
        """The topics this produce may not write, with their error: WRITE on each topic,
        and on the transactional id when a batch is transactional (Kafka's handler)."""
        auth = self.auth
        if not auth.enabled:
            return None
        names = [t.name for t in body.topic_data]
        if _has_transactional_records(body) and not (
                body.transactional_id and auth.authorize(
                    context, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                    body.transactional_id)):
            return dict.fromkeys(names, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        allowed = auth.filter_authorized(context, AclOperation.WRITE, ResourceType.TOPIC, names)
        return {n: ErrorCode.TOPIC_AUTHORIZATION_FAILED for n in names if n not in allowed}

    async def _verify_transaction(self, verifier: TransactionVerifier,
                                  transactional_id: str, version: int,
                                  entries: dict[tuple[str, int], Any],
                                  errors: dict[tuple[str, int], tuple[int, str | None]]
                                  ) -> None:
        """KIP-890 part 1: the transactional batches that would open their producer's
        transaction on a partition are written only if the coordinator says the partition
        is in it (Kafka's ReplicaManager.appendRecords with verification). Entries that
        fail move to `errors`."""
        wanted: dict[tuple[str, int], tuple[int, int, tuple[int, ...] | None]] = {}
        producers = set()
        for tp, records in entries.items():
            try:
                header = RecordBatchHeader.parse(records or b"")
            except KafkaError:
                continue  # not a v2 batch: the append refuses it
            producer_id, epoch = header.producer_id, header.producer_epoch
            if not header.is_transactional or producer_id < 0:
                continue
            partition = self.replica_manager.get_partition(tp)
            if partition is None or not partition.is_leader:
                continue  # the append answers for it
            state = _producer_txn_state(partition, producer_id)
            if state is not None and state[0] == epoch and state[1] >= 0:
                continue  # its transaction is ongoing here: verified when it began
            producers.add((producer_id, epoch))
            wanted[tp] = (producer_id, epoch, state)
        if not wanted:
            return
        if len(producers) > 1:  # Kafka's InvalidPidMappingException
            for tp in wanted:
                del entries[tp]
                errors[tp] = (ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                              "Transactional records contained more than one producer ID")
            return
        (producer_id, epoch), = producers
        failed = await verifier.verify(transactional_id, producer_id, epoch, list(wanted))
        for tp, (_, _, before) in wanted.items():
            error = failed.get(tp)
            if error is None:
                partition = self.replica_manager.get_partition(tp)
                after = (None if partition is None
                         else _producer_txn_state(partition, producer_id))
                if after == before or (after is not None and after[0] == epoch
                                       and after[1] >= 0):
                    continue
                # A marker reached the partition while the coordinator was asked (Kafka's
                # VerificationGuard): the answer may be stale; the producer retries.
                error = ErrorCode.CONCURRENT_TRANSACTIONS
            if tp in entries:
                del entries[tp]
                errors[tp] = produce_error(error, version)

    async def _convert_legacy(self, entries: dict[tuple[str, int], Any],
                              errors: dict[tuple[str, int], tuple[int, str | None]]) -> None:
        """Produce v0-v2: legacy message sets become one v2 batch each before the log sees
        them, as Kafka 3.x converts them (in the topic's codec, or the producer's when the
        topic keeps the producer's). In a thread: the conversion walks every message."""
        legacy = {}
        for tp, records in entries.items():
            partition = self.replica_manager.get_partition(tp)
            if partition is not None and legacy_records.is_legacy(records):
                legacy[tp] = (records, partition.log.config.compression_type,
                              partition.log.validation.max_decompressed_bytes)
        if not legacy:
            return

        def convert() -> dict[tuple[str, int], bytes | KafkaError]:
            out: dict[tuple[str, int], bytes | KafkaError] = {}
            for tp, (records, codec, bound) in legacy.items():
                try:
                    out[tp] = legacy_records.convert_to_batch(
                        records, target_compression=_TOPIC_CODECS.get(codec),
                        max_decompressed_size=bound)
                except KafkaError as e:
                    out[tp] = e
            return out

        for tp, converted in (await asyncio.to_thread(convert)).items():
            if isinstance(converted, KafkaError):
                del entries[tp]
                errors[tp] = (int(converted.error_code), str(converted))
            else:
                entries[tp] = converted

    # ---- Fetch ------------------------------------------------------------------------

    async def handle_fetch(self, request: Request, context: RequestContext) -> Message:
        body = cast(FetchRequest, request.body)
        version = request.api_version
        by_id = version >= 13
        topics_by_id = self.metadata_cache.topics_by_id
        replica_id = body.replica_state.replica_id if version >= 15 else body.replica_id
        # Kafka's RequestMetrics tell consumers' fetches from followers'.
        context.metric_name = "FetchFollower" if replica_id >= 0 else "FetchConsumer"
        requested = []
        for t in body.topics:
            name = t.topic
            if by_id:
                topic = topics_by_id.get(t.topic_id)
                name = topic.name if topic is not None else ""
            for p in t.partitions:
                requested.append(((name, p.partition), t.topic_id,
                                  FetchPartitionRequest(p.fetch_offset, p.partition_max_bytes,
                                                        p.current_leader_epoch,
                                                        p.log_start_offset)))
        forgotten: list[tuple[str, int]] = []
        for f in body.forgotten_topics_data:
            name = f.topic
            if by_id:
                topic = topics_by_id.get(f.topic_id)
                name = topic.name if topic is not None else ""
            forgotten.extend((name, p) for p in f.partitions)
        if version >= 7:
            context_ = self.fetch_sessions.new_context(body.session_id, body.session_epoch,
                                                       requested, forgotten)
        else:
            context_ = self.fetch_sessions.new_context(0, -1, requested, [])
        if context_.error_code:
            return fetch_response.FetchResponse(error_code=context_.error_code, session_id=0)
        reads = [(tp, cached.request) for tp, cached in context_.partitions]
        # Followers need CLUSTER_ACTION, consumers READ on each topic; a partition denied
        # is answered TOPIC_AUTHORIZATION_FAILED and not read.
        allowed = self._fetch_allowed(reads, replica_id, context)
        permitted = reads if allowed is None else [r for r in reads if r[0][0] in allowed]
        max_bytes = min(body.max_bytes, self.config.fetch_max_bytes)
        # A consumer's fetch is held to its consumer_byte_rate (followers' are not): it
        # reads at most a quota window's worth (Kafka's getMaxValueInQuotaWindow).
        quotas = self.quotas if replica_id < 0 and self.quotas is not None else None
        if quotas is not None and quotas.fetch.enabled:
            window = quotas.fetch.max_value_in_window(context.principal.name,
                                                      context.client_id)
            if window < max_bytes:
                max_bytes = max(int(window), 1)
        results = await self.replica_manager.fetch_messages(
            replica_id=replica_id, max_wait_ms=body.max_wait_ms, min_bytes=body.min_bytes,
            max_bytes=max_bytes,
            isolation_level=body.isolation_level, requests=permitted,
        ) if permitted or not reads else []
        if allowed is not None and len(permitted) < len(reads):
            fetched = iter(results)
            results = [next(fetched) if tp[0] in allowed
                       else FetchPartitionResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                       for tp, _ in reads]
        converted = refused = None
        if version <= 3:  # v0-v1 read magic 0 message sets, v2-v3 magic 1
            # message.downconversion.enable=false: UNSUPPORTED_VERSION, as in Kafka 3.9.
            refused = {tp for (tp, _), r in zip(reads, results, strict=True)
                       if r.slices and not self._down_conversion_enabled(tp)}
            converted = await _down_convert(results, reads, 0 if version <= 1 else 1, refused)
        responses: list[fetch_response.FetchableTopicResponse] = []
        stats = self.replica_manager.topic_stats  # Kafka's BrokerTopicStats (metrics)
        counted = stats.topics
        sent: list[tuple[list[int], int]] = []  # (topic counters, record bytes)
        for (name, index), topic_id, r in context_.response_partitions(results):
            error = r.error_code
            if by_id and not name:
                error = ErrorCode.UNKNOWN_TOPIC_ID
            counts = counted.get(name)
            if counts is None and error not in _UNCOUNTED_FETCH_ERRORS:
                counts = stats.counters(name)
            data = fetch_response.PartitionData(
                partition_index=index, error_code=error, high_watermark=r.high_watermark,
                last_stable_offset=r.last_stable_offset, log_start_offset=r.log_start_offset,
                aborted_transactions=None if body.isolation_level != READ_COMMITTED else [
                    fetch_response.AbortedTransaction(producer_id=pid, first_offset=first)
                    for pid, first in r.aborted_transactions or ()],
                records=FileRecords(r.slices) if r.slices else b"",  # type: ignore[arg-type]
            )
            if converted is not None:
                records = converted.get((name, index), b"")
                if isinstance(records, KafkaError):
                    data.error_code, records = int(records.error_code), b""
                elif refused and (name, index) in refused:
                    data.error_code = ErrorCode.UNSUPPORTED_VERSION
                data.records = records
            if counts is not None:
                counts[FETCH_REQUESTS] += 1
                if data.error_code:
                    counts[FAILED_FETCH] += 1
                elif r.size:
                    sent.append((counts, r.size if converted is None else len(data.records)))
            last = responses[-1] if responses else None
            if last is not None and last.topic == name and last.topic_id == topic_id:
                last.partitions.append(data)
            else:
                responses.append(fetch_response.FetchableTopicResponse(
                    topic=name, topic_id=topic_id if by_id else ZERO_UUID, partitions=[data]))
        timer = context.timer  # request_percentage in force
        if timer is not None and replica_id >= 0:
            timer.record(exempt=True)  # Kafka's followers' fetches are exempt
        if quotas is not None and (quotas.fetch.enabled or timer is not None):
            user, client_id = context.principal.name, context.client_id
            # Kafka's order: the request's time, then the bytes.
            request_throttle = timer.record() if timer is not None else 0
            size = sum(len(p.records or b"") for t in responses for p in t.partitions)
            throttle_ms = max(quotas.fetch.record(user, client_id, size), request_throttle)
            if throttle_ms > 0:
                # Kafka's throttled fetch (for either quota): the bytes read are not
                # counted, and not sent (an empty response, as its
                # FetchContext.getThrottledResponse).
                quotas.fetch.unrecord(user, client_id, size)
                context.throttle_ms = throttle_ms
                return fetch_response.FetchResponse(
                    throttle_time_ms=throttle_ms, responses=[],
                    session_id=context_.session_id if body.session_id else 0)
        if sent:
            if replica_id >= 0:  # Kafka's ReplicationBytesOutPerSec, not BytesOutPerSec
                stats.replication_bytes_out += sum(size for _, size in sent)
            else:
                for counts, size in sent:
                    counts[BYTES_OUT] += size
        return fetch_response.FetchResponse(session_id=context_.session_id, responses=responses)

    def _fetch_allowed(self, reads: list[tuple[tuple[str, int], FetchPartitionRequest]],
                       replica_id: int, context: RequestContext) -> set[str] | None:
        """The topics a fetch may read (None: all, there is no authorizer): a follower
        needs CLUSTER_ACTION, a consumer READ on each topic; the others are answered
        TOPIC_AUTHORIZATION_FAILED and not read."""
        auth = self.auth
        if not auth.enabled:
            return None
        names = [tp[0] for tp, _ in reads]
        if replica_id >= 0:
            return (set(names) if auth.authorize_cluster(context, AclOperation.CLUSTER_ACTION)
                    else set())
        return auth.filter_authorized(context, AclOperation.READ, ResourceType.TOPIC, names)

    def _down_conversion_enabled(self, tp: tuple[str, int]) -> bool:
        partition = self.replica_manager.get_partition(tp)
        return partition is None or partition.log.config.message_downconversion_enable

    # ---- ListOffsets ------------------------------------------------------------------

    def handle_list_offsets(self, request: Request, context: RequestContext) -> Message:
        body = cast(ListOffsetsRequest, request.body)
        may_describe = self.auth.filter_authorized(context, AclOperation.DESCRIBE,
                                                   ResourceType.TOPIC,
                                                   [t.name for t in body.topics])
        topics = []
        for t in body.topics:
            partitions = [self._list_offset(t.name, p, body.replica_id, body.isolation_level,
                                            request.api_version)
                          if t.name in may_describe else
                          list_offsets_response.ListOffsetsPartitionResponse(
                              partition_index=p.partition_index, timestamp=-1, offset=-1,
                              error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                          for p in t.partitions]
            topics.append(list_offsets_response.ListOffsetsTopicResponse(
                name=t.name, partitions=partitions))
        return list_offsets_response.ListOffsetsResponse(topics=topics)

    def _list_offset(self, topic: str, p: Any, replica_id: int, isolation_level: int,
                     version: int) -> list_offsets_response.ListOffsetsPartitionResponse:
        response = list_offsets_response.ListOffsetsPartitionResponse(
            partition_index=p.partition_index, timestamp=-1, offset=-1)
        partition = self.replica_manager.get_partition((topic, p.partition_index))
        if partition is None:
            response.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return response
        error = partition.check_leader_epoch(p.current_leader_epoch)
        if error:
            response.error_code = error
            return response
        if not partition.is_leader and replica_id != DEBUGGING_REPLICA_ID:
            response.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
            return response
        if version == 0:
            response.old_style_offsets = self._legacy_offsets(partition, p, replica_id)
            return response
        if version >= 4:  # a field older versions lack must keep its default
            response.leader_epoch = partition.leader_epoch
        ts = p.timestamp
        # Consumers see up to the high watermark (read_uncommitted) or the last stable
        # offset (read_committed); followers and tools up to the log end.
        if replica_id == CONSUMER_REPLICA_ID:
            end = (partition.last_stable_offset if isolation_level == READ_COMMITTED
                   else partition.high_watermark)
        else:
            end = partition.log.log_end_offset
        if ts == LATEST_TIMESTAMP:
            response.offset = end
        elif ts in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            response.offset = partition.log.log_start_offset
        elif ts == LATEST_TIERED_TIMESTAMP:
            pass  # no tiered storage: -1, as Kafka answers without remote storage
        elif ts < 0 and ts != MAX_TIMESTAMP:
            response.error_code = ErrorCode.INVALID_REQUEST
        else:
            found = partition.log.fetch_offset_by_timestamp(ts)
            if found is not None and found.offset < end:
                response.timestamp = found.timestamp
                response.offset = found.offset
        return response

    @staticmethod
    def _legacy_offsets(partition: Any, p: Any, replica_id: int) -> list[int]:
        """ListOffsets v0's answer: segment base offsets before a time, newest first (see
        Log.legacy_offsets_before); a consumer sees none past the high watermark, which
        takes the place of those it hides, as in Kafka's Partition."""
        offsets = partition.log.legacy_offsets_before(p.timestamp, p.max_num_offsets)
        if replica_id != CONSUMER_REPLICA_ID:
            return offsets
        high_watermark = partition.high_watermark
        if any(o > high_watermark for o in offsets):
            offsets = [high_watermark] + [o for o in offsets if o <= high_watermark]
        return offsets

    # ---- OffsetForLeaderEpoch ----------------------------------------------------------

    def handle_offset_for_leader_epoch(self, request: Request,
                                       context: RequestContext) -> Message:
        # Consumers ask after a leader change whether their position is still in the
        # leader's log (KIP-320); followers ask where to truncate (KIP-101/279).
        body = cast(OffsetForLeaderEpochRequest, request.body)
        response = offset_for_leader_epoch_response
        # Followers (v3+ name themselves) need CLUSTER_ACTION, consumers DESCRIBE.
        names = [t.topic for t in body.topics]
        if request.api_version >= 3 and body.replica_id >= 0:
            allowed = (set(names) if self.auth.authorize_cluster(
                context, AclOperation.CLUSTER_ACTION) else set())
        else:
            allowed = self.auth.filter_authorized(context, AclOperation.DESCRIBE,
                                                  ResourceType.TOPIC, names)
        topics = []
        for t in body.topics:
            partitions = []
            for p in t.partitions:
                partition = self.replica_manager.get_partition((t.topic, p.partition))
                if t.topic not in allowed:
                    error, epoch, offset = ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1, -1
                elif partition is None:
                    error, epoch, offset = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1
                else:
                    error, epoch, offset = partition.last_offset_for_leader_epoch(
                        p.current_leader_epoch, p.leader_epoch)
                partitions.append(response.EpochEndOffset(
                    error_code=error, partition=p.partition, leader_epoch=epoch,
                    end_offset=offset))
            topics.append(response.OffsetForLeaderTopicResult(topic=t.topic,
                                                              partitions=partitions))
        return response.OffsetForLeaderEpochResponse(topics=topics)

    # ---- WriteTxnMarkers -----------------------------------------------------------

    async def handle_write_txn_markers(self, request: Request,
                                       context: RequestContext) -> Message:
        """A transaction coordinator's markers for the partitions led here (its own go
        straight to the ReplicaManager: coordinator/transaction/marker_channel.py)."""
        return await handle_write_txn_markers(
            self.replica_manager, cast(WriteTxnMarkersRequest, request.body),
            timeout_ms=self.config.get("request.timeout.ms"),
            on_transaction_completed=self.group_coordinator.on_transaction_completed)

