"""AdminManager: the admin APIs: topics, partitions, configs, log dirs, records deletion,
leader elections, partition reassignments.

Topic changes go through the Controller (which keeps the metadata store and tells the
ReplicaManager what to lead); topic configs are validated against Kafka's topic config
table (odradek/storage/config.py) before anything is stored. The config APIs live in the
ConfigManager (odradek/broker/config_manager.py), whose handlers this one hands on.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable
from typing import Any, cast

from odradek.broker.config_manager import ConfigManager
from odradek.broker.replica_manager import ReplicaManager
from odradek.cluster.controller import Controller, InvalidRequestError
from odradek.cluster.kafka_controller import KafkaController, NotControllerError
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

log = logging.getLogger(__name__)

INVALID_OFFSET_LAG = -1  # DescribeLogDirs: a log no partition of this broker serves
PREFERRED_ELECTION, UNCLEAN_ELECTION = 0, 1  # ElectLeaders' election types (KIP-460)


class TopicDeletionDisabledError(KafkaError):
    error_code = ErrorCode.TOPIC_DELETION_DISABLED


class AdminManager:
    def __init__(self, config: BrokerConfig, controller: Controller,
                 replica_manager: ReplicaManager,
                 kafka_controller: KafkaController | None = None) -> None:
        self.configs = ConfigManager(config, controller)
        self.controller = controller
        self.replica_manager = replica_manager
        self.kafka_controller = kafka_controller  # in a ZooKeeper cluster

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

    # ---- CreateTopics / DeleteTopics --------------------------------------------------

    async def handle_create_topics(self, request: Request, context: RequestContext) -> Message:
        body = cast(create_topics_request.CreateTopicsRequest, request.body)
        version = request.api_version
        names = Counter(t.name for t in body.topics)  # list.count per topic: O(n^2)
        results = []
        for t in body.topics:
            result = create_topics_response.CreatableTopicResult(name=t.name)
            try:
                if names[t.name] > 1:
                    raise InvalidRequestError(f"topic {t.name!r} is named twice in the request")
                await self._create_topic(t, body.validate_only, result, version)
            except KafkaError as e:
                result.error_code = int(e.error_code)
                result.error_message = str(e)
                result.num_partitions = result.replication_factor = -1
                result.configs = None if version >= 5 else []
            results.append(result)
        return create_topics_response.CreateTopicsResponse(topics=results)

    async def _create_topic(self, t: Any, validate_only: bool,
                            result: create_topics_response.CreatableTopicResult,
                            version: int) -> None:
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
            result.topic_id = ZERO_UUID
        else:
            topic = await controller.create_topic(t.name, partitions, replication_factor,
                                                  configs, assignments)
            result.topic_id = topic.topic_id
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
        body = cast(delete_topics_request.DeleteTopicsRequest, request.body)
        version = request.api_version
        wanted = ([(t.name, t.topic_id) for t in body.topics] if version >= 6
                  else [(n, ZERO_UUID) for n in body.topic_names])
        results = []
        for name, topic_id in wanted:
            result = delete_topics_response.DeletableTopicResult(name=name, topic_id=topic_id)
            try:
                if name is None:
                    topic = self.controller.topics_by_id.get(topic_id)
                    if topic is None:
                        result.error_code = ErrorCode.UNKNOWN_TOPIC_ID
                        result.error_message = f"no topic has the id {topic_id}"
                        results.append(result)
                        continue
                    name = result.name = topic.name
                if not self.config.delete_topic_enable:
                    raise TopicDeletionDisabledError("topic deletion is disabled "
                                                     "(delete.topic.enable=false)")
                if is_internal(name):
                    raise InvalidTopicError(f"the internal topic {name} cannot be deleted")
                deleted = await self.controller.delete_topic(name)
                if version >= 6:
                    result.topic_id = deleted.topic_id
            except KafkaError as e:
                result.error_code = int(e.error_code)
                result.error_message = str(e)
            results.append(result)
        return delete_topics_response.DeleteTopicsResponse(responses=results)

    # ---- CreatePartitions -------------------------------------------------------------

    async def handle_create_partitions(self, request: Request,
                                       context: RequestContext) -> Message:
        body = cast(create_partitions_request.CreatePartitionsRequest, request.body)
        names = Counter(t.name for t in body.topics)
        duplicates = [n for n, count in names.items() if count > 1]
        results = []
        for t in body.topics:
            if t.name in duplicates:
                continue
            result = create_partitions_response.CreatePartitionsTopicResult(
                name=t.name, error_message=None)
            assignments = (None if t.assignments is None
                           else [list(a.broker_ids) for a in t.assignments])
            try:
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
        return create_partitions_response.CreatePartitionsResponse(results=results)

    # ---- DeleteRecords ----------------------------------------------------------------

    def handle_delete_records(self, request: Request, context: RequestContext) -> Message:
        body = cast(delete_records_request.DeleteRecordsRequest, request.body)
        offsets = {(t.name, p.partition_index): p.offset
                   for t in body.topics for p in t.partitions}
        deleted = self.replica_manager.delete_records(offsets)
        topics = []
        for t in body.topics:
            partitions = []
            for p in t.partitions:
                code, low_watermark, message = deleted[(t.name, p.partition_index)]
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
        by_topic: dict[str, list[elect_leaders_response.PartitionResult]] = {}
        for (topic, partition), (error, message) in sorted(results.items()):
            by_topic.setdefault(topic, []).append(response.PartitionResult(
                partition_id=partition, error_code=error, error_message=message))
        return response.ElectLeadersResponse(replica_election_results=[
            response.ReplicaElectionResult(topic=t, partition_result=ps)
            for t, ps in by_topic.items()])

    # ---- AlterPartitionReassignments, ListPartitionReassignments (KIP-455) ------------

    async def handle_alter_partition_reassignments(self, request: Request,
                                                   context: RequestContext) -> Message:
        body = cast(alter_partition_reassignments_request.AlterPartitionReassignmentsRequest,
                    request.body)
        response = alter_partition_reassignments_response
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
