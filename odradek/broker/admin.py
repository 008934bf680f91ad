"""AdminManager: the admin APIs: topics, partitions, configs, log dirs, records deletion,
leader elections, partition reassignments.

Topic changes go through the Controller (which keeps the metadata store and tells the
ReplicaManager what to lead); topic configs are validated against Kafka's topic config
table (odradek/storage/config.py) before anything is stored. The config APIs live in the
ConfigManager (odradek/broker/config_manager.py), whose handlers this one hands on.

Each handler asks the authorizer (`auth`, Kafka's AuthHelper) what Kafka 3.9's KafkaApis
asks, in the same order, and answers a refusal with Kafka's error codes: CREATE on the
cluster or the topic (CreateTopics), DESCRIBE_CONFIGS for what CreateTopics tells of a new
topic, DELETE and DESCRIBE (DeleteTopics), ALTER (CreatePartitions), DELETE
(DeleteRecords) on the topic; DESCRIBE (DescribeLogDirs, ListPartitionReassignments) and
ALTER (ElectLeaders, AlterPartitionReassignments) on the cluster. What a refused request
asks for is not done, and nothing is told of topics it may not see.

CreateTopics, CreatePartitions and DeleteTopics count the partitions they create or
delete against the client's controller_mutation_rate (KIP-599, Kafka's
ControllerMutationQuotaManager), after a topic's checks and before its change: from
CreateTopics v6, CreatePartitions v3 and DeleteTopics v5 a topic that finds the quota
exhausted is refused with THROTTLING_QUOTA_EXCEEDED; older versions, which clients do not
retry on it, have every topic changed. Either way the response's throttle_time_ms says how
long until the quota has room again, and the connection waits that long (KIP-219). As in
Kafka the quota is per broker: in a ZooKeeper cluster, where Odradek's brokers all take
these requests (Kafka sends them to its controller), each broker counts its own.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from odradek.broker.auth_helper import ALLOW_ALL, AclOperation, AuthHelper, ResourceType
from odradek.broker.config_manager import ConfigManager
from odradek.broker.replica_manager import ReplicaManager
from odradek.cluster.controller import Controller, InvalidRequestError, NotControllerError
from odradek.cluster.topics import InvalidTopicError, is_internal
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError
from odradek.protocol.framing import Request
from odradek.protocol.message import Message
from odradek.protocol.messages import (
    alter_partition_reassignments_request,
    alter_partition_reassignments_response,
    create_partitions_request,
    create_partitions_response,
    create_topics_request,
    create_topics_response,
    delete_records_request,
    delete_records_response,
    delete_topics_request,
    delete_topics_response,
    describe_log_dirs_request,
    describe_log_dirs_response,
    elect_leaders_request,
    elect_leaders_response,
    list_partition_reassignments_request,
    list_partition_reassignments_response,
)
from odradek.protocol.primitives import ZERO_UUID
from odradek.server.config import BrokerConfig
from odradek.server.network import RequestContext
from odradek.server.quota_manager import (
    UNBOUNDED_MUTATIONS,
    ControllerMutationQuota,
    QuotaManagers,
)

if TYPE_CHECKING:
    from odradek.cluster.kafka_controller import KafkaController  # kazoo: a cluster's only

log = logging.getLogger(__name__)

INVALID_OFFSET_LAG = -1  # DescribeLogDirs: a log no partition of this broker serves
INVALID_LOW_WATERMARK = -1  # DeleteRecords: a partition whose records were not deleted
CLUSTER_METADATA_TOPIC = "__cluster_metadata"  # KRaft's log: never a topic CreateTopics makes
PREFERRED_ELECTION, UNCLEAN_ELECTION = 0, 1  # ElectLeaders' election types (KIP-460)
# The versions from which a request over its controller_mutation_rate is refused (Kafka's
# strictSinceVersion); clients before them do not know THROTTLING_QUOTA_EXCEEDED.
_STRICT_MUTATIONS_FROM = {ApiKey.CREATE_TOPICS: 6, ApiKey.CREATE_PARTITIONS: 3,
                          ApiKey.DELETE_TOPICS: 5}


class AdminManager:
    def __init__(self, config: BrokerConfig, controller: Controller,
                 replica_manager: ReplicaManager,
                 kafka_controller: KafkaController | None = None) -> None:
        self.configs = ConfigManager(config, controller)
        self.controller = controller
        self.replica_manager = replica_manager
        self.kafka_controller = kafka_controller  # in a ZooKeeper cluster
        self.auth = ALLOW_ALL  # the broker sets its own once built (the ConfigManager's too)
        self.quotas: QuotaManagers | None = None  # controller_mutation_rate (KIP-599)

    @property
    def auth(self) -> AuthHelper:
        """The authorizer's questions (Kafka's AuthHelper), shared with the ConfigManager:
        setting it sets both."""
        return self.configs.auth

    @auth.setter
    def auth(self, auth: AuthHelper) -> None:
        self.configs.auth = auth

    @property
    def config(self) -> BrokerConfig:
        """The broker's configuration in force, dynamic configs included."""
        return self.configs.config

    def handlers(self) -> dict[int, Callable[[Request, RequestContext], Any]]:
        return {
            ApiKey.CREATE_TOPICS: self.handle_create_topics,
            ApiKey.DELETE_TOPICS: self.handle_delete_topics,
            ApiKey.CREATE_PARTITIONS: self.handle_create_partitions,
            ApiKey.DELETE_RECORDS: self.handle_delete_records,
            ApiKey.DESCRIBE_LOG_DIRS: self.handle_describe_log_dirs,
            ApiKey.ELECT_LEADERS: self.handle_elect_leaders,
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: self.handle_alter_partition_reassignments,
            ApiKey.LIST_PARTITION_REASSIGNMENTS: self.handle_list_partition_reassignments,
            **self.configs.handlers(),
        }

    # ---- controller mutation quotas (KIP-599) ------------------------------------------

    def _mutation_quota(self, request: Request,
                        context: RequestContext) -> ControllerMutationQuota:
        """Kafka's ControllerMutationQuotaManager.newQuotaFor: strict from the API's
        version that may refuse, permissive before."""
        if self.quotas is None:
            return UNBOUNDED_MUTATIONS
        return self.quotas.controller_mutation.new_quota_for(
            context.principal.name, context.client_id,
            strict=request.api_version >= _STRICT_MUTATIONS_FROM[request.api.api_key])

    @staticmethod
    def _mutation_throttle(quota: ControllerMutationQuota, context: RequestContext,
                           response: Any) -> Any:
        """The response, with the quota's throttle time (the connection muted for it)."""
        throttle = quota.throttle_time_ms()
        if throttle > 0:
            response.throttle_time_ms = throttle
            context.throttle_ms = max(context.throttle_ms, throttle)
        return response

    # ---- CreateTopics / DeleteTopics --------------------------------------------------

    async def handle_create_topics(self, request: Request, context: RequestContext) -> Message:
        """As Kafka's KafkaApis: CREATE on the cluster, or else on each topic
        (TOPIC_AUTHORIZATION_FAILED); a topic named twice is INVALID_REQUEST for each time.
        Without DESCRIBE_CONFIGS on a topic its configs, partitions, replication factor and
        id are not told (v5+: TOPIC_AUTHORIZATION_FAILED in topic_config_error_code)."""
        body = cast(create_topics_request.CreateTopicsRequest, request.body)
        version = request.api_version
        names = Counter(t.name for t in body.topics)  # list.count per topic: O(n^2)
        auth = self.auth
        wanted = set(names) - {CLUSTER_METADATA_TOPIC}
        if auth.authorize(context, AclOperation.CREATE, ResourceType.CLUSTER,
                          log_if_denied=False):
            creatable = wanted
        else:
            creatable = auth.filter_authorized(context, AclOperation.CREATE,
                                               ResourceType.TOPIC, wanted)
        describable = auth.filter_authorized(context, AclOperation.DESCRIBE_CONFIGS,
                                             ResourceType.TOPIC, wanted, log_if_denied=False)
        quota = self._mutation_quota(request, context)
        results = []
        for t in body.topics:
            result = create_topics_response.CreatableTopicResult(name=t.name)
            results.append(result)
            if t.name in wanted and t.name not in describable:
                result.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            if t.name == CLUSTER_METADATA_TOPIC:
                _create_failed(result, version, ErrorCode.INVALID_REQUEST,
                               f"Creation of internal topic {t.name} is prohibited.")
            elif names[t.name] > 1:
                _create_failed(result, version, ErrorCode.INVALID_REQUEST,
                               f"topic {t.name!r} is named twice in the request")
            elif t.name not in creatable:
                _create_failed(result, version, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                               "Authorization failed.")
            else:
                try:
                    await self._create_topic(t, body.validate_only, result, version,
                                             include_configs=t.name in describable,
                                             quota=quota)
                except KafkaError as e:
                    _create_failed(result, version, int(e.error_code), str(e))
                    result.topic_config_error_code = ErrorCode.NONE
        return self._mutation_throttle(
            quota, context, create_topics_response.CreateTopicsResponse(topics=results))

    async def _create_topic(self, t: Any, validate_only: bool,
                            result: create_topics_response.CreatableTopicResult,
                            version: int, *, include_configs: bool,
                            quota: ControllerMutationQuota = UNBOUNDED_MUTATIONS) -> None:
        partitions = t.num_partitions
        replication_factor = t.replication_factor
        assignments = None
        if t.assignments:
            if partitions != -1 or replication_factor != -1:
                raise InvalidRequestError("give either replica assignments or partitions and "
                                          "replication factor, not both")
            assignments = {a.partition_index: list(a.broker_ids) for a in t.assignments}
        else:
            if partitions == -1:
                partitions = self.config.num_partitions
            if replication_factor == -1:
                replication_factor = self.config.default_replication_factor
        configs: dict[str, str] = {}
        for c in t.configs:
            if c.name in configs:
                raise InvalidRequestError(f"config {c.name!r} is given twice")
            if c.value is not None:
                configs[c.name] = c.value
        self.configs.validate_topic_configs(configs)
        controller = self.controller
        if validate_only:
            controller.check_new_topic(t.name, partitions, replication_factor, assignments)
            topic_id = ZERO_UUID
        else:
            if quota.bounded:  # counted once the topic passes its checks, as in Kafka
                controller.check_new_topic(t.name, partitions, replication_factor,
                                           assignments)
                quota.record(len(assignments) if assignments else partitions)
            topic = await controller.create_topic(t.name, partitions, replication_factor,
                                                  configs, assignments)
            topic_id = topic.topic_id
        if not include_configs:  # no DESCRIBE_CONFIGS: Kafka tells nothing of the topic
            return
        result.topic_id = topic_id
        if assignments:
            partitions = len(assignments)
            replication_factor = len(next(iter(assignments.values())))
        result.num_partitions = partitions
        result.replication_factor = replication_factor
        if version >= 5:
            result.configs = [
                create_topics_response.CreatableTopicConfigs(
                    name=e.name, value=e.value, read_only=e.read_only,
                    config_source=int(e.source), is_sensitive=e.is_sensitive)
                for e in self.configs.topic_config_entries(configs)
            ]

    async def handle_delete_topics(self, request: Request, context: RequestContext) -> Message:
        """As Kafka's KafkaApis: with delete.topic.enable=false nothing is looked at; a
        topic needs DELETE (else TOPIC_AUTHORIZATION_FAILED, before its existence is
        checked); one named by its id (v6) needs DESCRIBE too, or its name is not told."""
        body = cast(delete_topics_request.DeleteTopicsRequest, request.body)
        version = request.api_version
        response = delete_topics_response
        wanted = ([(t.name, t.topic_id) for t in body.topics] if version >= 6
                  else [(n, ZERO_UUID) for n in body.topic_names])
        refusal = None
        if not self.config.delete_topic_enable:
            refusal = (ErrorCode.INVALID_REQUEST if version < 3
                       else ErrorCode.TOPIC_DELETION_DISABLED,
                       "topic deletion is disabled (delete.topic.enable=false)")
        elif any(name is not None and topic_id != ZERO_UUID for name, topic_id in wanted):
            refusal = (ErrorCode.INVALID_REQUEST,
                       "Topic name and topic ID can not both be specified.")
        if refusal is not None:
            return response.DeleteTopicsResponse(responses=[
                response.DeletableTopicResult(name=name, topic_id=topic_id,
                                              error_code=refusal[0], error_message=refusal[1])
                for name, topic_id in wanted])
        results = []
        for name, topic_id in wanted:
            if topic_id != ZERO_UUID:
                topic = self.controller.topics_by_id.get(topic_id)
                name = None if topic is None else topic.name
            results.append(response.DeletableTopicResult(name=name, topic_id=topic_id))
        named = [r.name for r in results if r.name is not None]
        quota = self._mutation_quota(request, context)
        describable = self.auth.filter_authorized(context, AclOperation.DESCRIBE,
                                                  ResourceType.TOPIC, named)
        deletable = self.auth.filter_authorized(context, AclOperation.DELETE,
                                                ResourceType.TOPIC, named)
        for result in results:
            name, by_id = result.name, result.topic_id != ZERO_UUID
            if by_id and name is None:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_ID
                result.error_message = f"no topic has the id {result.topic_id}"
                continue
            if by_id and name not in describable:
                result.name = None  # not told to who may not see it; the id is no secret
                result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if name is None or name not in deletable:
                result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            try:
                if is_internal(name):
                    raise InvalidTopicError(f"the internal topic {name} cannot be deleted")
                # Its partitions (none if it does not exist), as Kafka counts them.
                known = self.controller.topics.get(name)
                quota.record(0 if known is None else len(known.partitions))
                deleted = await self.controller.delete_topic(name)
                if version >= 6:
                    result.topic_id = deleted.topic_id
            except KafkaError as e:
                result.error_code = int(e.error_code)
                result.error_message = str(e)
        return self._mutation_throttle(quota, context,
                                       response.DeleteTopicsResponse(responses=results))

    # ---- CreatePartitions -------------------------------------------------------------

    async def handle_create_partitions(self, request: Request,
                                       context: RequestContext) -> Message:
        body = cast(create_partitions_request.CreatePartitionsRequest, request.body)
        names = Counter(t.name for t in body.topics)
        duplicates = [n for n, count in names.items() if count > 1]
        alterable = self.auth.filter_authorized(
            context, AclOperation.ALTER, ResourceType.TOPIC,
            (t.name for t in body.topics if t.name not in duplicates))
        quota = self._mutation_quota(request, context)
        results = []
        for t in body.topics:
            if t.name in duplicates:
                continue
            result = create_partitions_response.CreatePartitionsTopicResult(
                name=t.name, error_message=None)
            if t.name not in alterable:
                result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                result.error_message = "The topic authorization is failed."
                results.append(result)
                continue
            assignments = (None if t.assignments is None
                           else [list(a.broker_ids) for a in t.assignments])
            try:
                if quota.bounded and not body.validate_only:
                    # Counted once the change passes its checks, as in Kafka.
                    await self.controller.create_partitions(t.name, t.count, assignments,
                                                            True)
                    current = self.controller.topics.get(t.name)
                    quota.record(t.count - (0 if current is None
                                            else len(current.partitions)))
                await self.controller.create_partitions(t.name, t.count, assignments,
                                                        body.validate_only)
            except KafkaError as e:
                result.error_code = int(e.error_code)
                result.error_message = str(e) or None
            results.append(result)
        # As Kafka's controller: one answer per name given twice, after the others.
        results += [create_partitions_response.CreatePartitionsTopicResult(
            name=name, error_code=ErrorCode.INVALID_REQUEST,
            error_message="Duplicate topic name.") for name in duplicates]
        return self._mutation_throttle(
            quota, context, create_partitions_response.CreatePartitionsResponse(results=results))

    # ---- DeleteRecords ----------------------------------------------------------------

    def handle_delete_records(self, request: Request, context: RequestContext) -> Message:
        body = cast(delete_records_request.DeleteRecordsRequest, request.body)
        deletable = self.auth.filter_authorized(context, AclOperation.DELETE,
                                                ResourceType.TOPIC, (t.name for t in body.topics))
        offsets = {(t.name, p.partition_index): p.offset
                   for t in body.topics if t.name in deletable for p in t.partitions}
        deleted = self.replica_manager.delete_records(offsets)
        refused = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, INVALID_LOW_WATERMARK, None)
        topics = []
        for t in body.topics:
            partitions = []
            for p in t.partitions:
                code, low_watermark, message = deleted.get((t.name, p.partition_index),
                                                           refused)
                if code:
                    log.info("cannot delete records of %s-%d: %s", t.name, p.partition_index,
                             message or ErrorCode(code).name)
                partitions.append(delete_records_response.DeleteRecordsPartitionResult(
                    partition_index=p.partition_index, low_watermark=low_watermark,
                    error_code=code))
            topics.append(delete_records_response.DeleteRecordsTopicResult(
                name=t.name, partitions=partitions))
        return delete_records_response.DeleteRecordsResponse(topics=topics)

    # ---- DescribeLogDirs --------------------------------------------------------------

    def handle_describe_log_dirs(self, request: Request, context: RequestContext) -> Message:
        """Per log dir, the size and lag of each requested partition's log (all of them for
        null topics); a requested partition with no log here is left out, as in Kafka."""
        body = cast(describe_log_dirs_request.DescribeLogDirsRequest, request.body)
        if not self.auth.authorize_cluster(context, AclOperation.DESCRIBE):
            # No log dirs; v3+ says why (before v3 there is no field to say it in).
            return describe_log_dirs_response.DescribeLogDirsResponse(
                error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=[])
        log_manager = self.replica_manager.log_manager
        wanted = (None if body.topics is None else
                  {(t.topic, p) for t in body.topics for p in t.partitions})
        by_dir: dict[str, dict[str, list[describe_log_dirs_response.DescribeLogDirsPartition]]]
        by_dir = {os.path.abspath(d): {} for d in log_manager.config.log_dirs}
        for partition_log in sorted(log_manager.logs(), key=lambda lg: lg.name):
            tp = (partition_log.topic, partition_log.partition)
            topics = by_dir.get(os.path.abspath(partition_log.directory.parent))
            if topics is None or (wanted is not None and tp not in wanted):
                continue
            partition = self.replica_manager.get_partition(tp)
            lag = (INVALID_OFFSET_LAG if partition is None
                   else max(partition.high_watermark - partition_log.log_end_offset, 0))
            described = describe_log_dirs_response.DescribeLogDirsPartition(
                partition_index=tp[1], partition_size=partition_log.size_in_bytes,
                offset_lag=lag, is_future_key=False)
            topics.setdefault(tp[0], []).append(described)
        results = []
        offline = {os.path.abspath(d) for d in log_manager.config.log_dirs
                   if log_manager.log_dirs[d].offline}
        for log_dir, topics in by_dir.items():
            result = describe_log_dirs_response.DescribeLogDirsResult(
                log_dir=log_dir, topics=[describe_log_dirs_response.DescribeLogDirsTopic(
                    name=name, partitions=partitions) for name, partitions in topics.items()])
            if log_dir in offline:  # failed an I/O operation (KIP-112): Kafka lists it so
                result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                result.topics = []
                results.append(result)
                continue
            try:
                space = os.statvfs(log_dir)
            except OSError as e:
                log.error("cannot describe log dir %s: %s", log_dir, e)
                result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                result.topics = []
            else:
                result.total_bytes = space.f_blocks * space.f_frsize
                result.usable_bytes = space.f_bavail * space.f_frsize
            results.append(result)
        return describe_log_dirs_response.DescribeLogDirsResponse(results=results)


    # ---- ElectLeaders -----------------------------------------------------------------

    async def handle_elect_leaders(self, request: Request, context: RequestContext) -> Message:
        """Preferred (v0+) or unclean (v1+) leader elections, by the controller (admin
        clients send them there; another broker answers NOT_CONTROLLER). On one node
        each partition's only replica leads: no election is needed."""
        body = cast(elect_leaders_request.ElectLeadersRequest, request.body)
        response = elect_leaders_response
        version = request.api_version
        election_type = body.election_type if version >= 1 else PREFERRED_ELECTION
        wanted = (None if body.topic_partitions is None
                  else [(t.topic, p) for t in body.topic_partitions for p in t.partitions])
        results: dict[tuple[str, int], tuple[int, str | None]]
        if not self.auth.authorize_cluster(context, AclOperation.ALTER):
            refused = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            results = {tp: (refused, None) for tp in wanted or []}
            return _election_response(results, refused if version >= 1 else ErrorCode.NONE)
        if election_type not in (PREFERRED_ELECTION, UNCLEAN_ELECTION):
            results = {tp: (ErrorCode.INVALID_REQUEST, f"unknown election type {election_type}")
                       for tp in wanted or []}
        elif self.kafka_controller is not None:
            try:
                results = await self.kafka_controller.elect_leaders(
                    wanted, unclean=election_type == UNCLEAN_ELECTION)
            except NotControllerError:
                if version >= 1:
                    return response.ElectLeadersResponse(error_code=ErrorCode.NOT_CONTROLLER)
                results = {tp: (ErrorCode.NOT_CONTROLLER, None) for tp in wanted or []}
        else:
            topics = self.controller.topics
            if wanted is None:
                wanted = [(name, p) for name, t in topics.items() for p in t.partitions]
            results = {
                (t, p): ((ErrorCode.ELECTION_NOT_NEEDED, "the only replica leads")
                         if t in topics and p in topics[t].partitions
                         else (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None))
                for t, p in wanted}
        return _election_response(results)

    # ---- AlterPartitionReassignments, ListPartitionReassignments (KIP-455) ------------

    async def handle_alter_partition_reassignments(self, request: Request,
                                                   context: RequestContext) -> Message:
        body = cast(alter_partition_reassignments_request.AlterPartitionReassignmentsRequest,
                    request.body)
        response = alter_partition_reassignments_response
        if not self.auth.authorize_cluster(context, AclOperation.ALTER):
            # Kafka's ClusterAuthorizationException, answered for the request and each of
            # its partitions (AlterPartitionReassignmentsRequest.getErrorResponse).
            code, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, _not_authorized(request)
            return response.AlterPartitionReassignmentsResponse(
                error_code=code, error_message=message, responses=[
                    response.ReassignableTopicResponse(name=t.name, partitions=[
                        response.ReassignablePartitionResponse(
                            partition_index=p.partition_index, error_code=code,
                            error_message=message)
                        for p in t.partitions])
                    for t in body.topics])
        targets = {(t.name, p.partition_index): p.replicas
                   for t in body.topics for p in t.partitions}
        results: dict[tuple[str, int], tuple[int, str | None]]
        if self.kafka_controller is not None:
            try:
                results = await self.kafka_controller.alter_partition_reassignments(targets)
            except NotControllerError:
                return response.AlterPartitionReassignmentsResponse(
                    error_code=ErrorCode.NOT_CONTROLLER)
        else:  # one broker: its replicas can go nowhere else
            topics = self.controller.topics
            node = self.config.node_id
            results = {}
            for (topic, index), replicas in targets.items():
                if topic not in topics or index not in topics[topic].partitions:
                    results[(topic, index)] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
                elif replicas is None:
                    results[(topic, index)] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)
                elif replicas != [node]:
                    results[(topic, index)] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                               f"only broker {node} exists")
                else:
                    results[(topic, index)] = (ErrorCode.NONE, None)
        return response.AlterPartitionReassignmentsResponse(responses=[
            response.ReassignableTopicResponse(name=t.name, partitions=[
                response.ReassignablePartitionResponse(
                    partition_index=p.partition_index,
                    error_code=results[(t.name, p.partition_index)][0],
                    error_message=results[(t.name, p.partition_index)][1])
                for p in t.partitions])
            for t in body.topics])

    def handle_list_partition_reassignments(self, request: Request,
                                            context: RequestContext) -> Message:
        body = cast(list_partition_reassignments_request.ListPartitionReassignmentsRequest,
                    request.body)
        response = list_partition_reassignments_response
        if not self.auth.authorize_cluster(context, AclOperation.DESCRIBE):
            # As ListPartitionReassignmentsRequest.getErrorResponse: the partitions asked
            # for, each with nothing in it.
            return response.ListPartitionReassignmentsResponse(
                error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                error_message=_not_authorized(request), topics=[
                    response.OngoingTopicReassignment(name=t.name, partitions=[
                        response.OngoingPartitionReassignment(partition_index=p)
                        for p in t.partition_indexes])
                    for t in body.topics or []])
        wanted = (None if body.topics is None
                  else [(t.name, p) for t in body.topics for p in t.partition_indexes])
        ongoing = {}
        if self.kafka_controller is not None:
            try:
                ongoing = self.kafka_controller.list_partition_reassignments(wanted)
            except NotControllerError:
                return response.ListPartitionReassignmentsResponse(
                    error_code=ErrorCode.NOT_CONTROLLER)
        by_topic: dict[str, list[response.OngoingPartitionReassignment]] = {}
        for (topic, index), state in sorted(ongoing.items()):
            by_topic.setdefault(topic, []).append(response.OngoingPartitionReassignment(
                partition_index=index, replicas=list(state.replicas),
                adding_replicas=list(state.adding_replicas),
                removing_replicas=list(state.removing_replicas)))
        return response.ListPartitionReassignmentsResponse(topics=[
            response.OngoingTopicReassignment(name=t, partitions=ps)
            for t, ps in by_topic.items()])


def _create_failed(result: create_topics_response.CreatableTopicResult, version: int,
                   code: int, message: str) -> None:
    result.error_code = code
    result.error_message = message
    result.num_partitions = result.replication_factor = -1
    result.configs = None if version >= 5 else []


def _election_response(results: dict[tuple[str, int], tuple[int, str | None]],
                       error_code: int = ErrorCode.NONE
                       ) -> elect_leaders_response.ElectLeadersResponse:
    """ElectLeaders' answer: the partitions' results by topic (error_code: v1+ only)."""
    response = elect_leaders_response
    by_topic: dict[str, list[elect_leaders_response.PartitionResult]] = {}
    for (topic, partition), (error, message) in sorted(results.items()):
        by_topic.setdefault(topic, []).append(response.PartitionResult(
            partition_id=partition, error_code=error, error_message=message))
    return response.ElectLeadersResponse(error_code=error_code, replica_election_results=[
        response.ReplicaElectionResult(topic=t, partition_result=ps)
        for t, ps in by_topic.items()])


def _not_authorized(request: Request) -> str:
    """The message of Kafka's ClusterAuthorizationException from authorizeClusterOperation
    (Kafka prints its whole internal request object where this names the API)."""
    return f"Request {request.api.name} v{request.api_version} is not authorized."
