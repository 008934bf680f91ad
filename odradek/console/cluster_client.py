"""ConsoleClient: what the console reads of the cluster and changes in it, as a Kafka client.

The metadata (brokers, topics, leaders, replicas, ISRs) is the broker's own cache, the same
on every broker. The rest belongs to other brokers in a cluster, so it is asked for over the
Kafka protocol, as kafka-ui or AKHQ would, on a connection of the console's own to each
broker's inter-broker listener: log sizes (DescribeLogDirs), offsets (ListOffsets), records
(Fetch from the leader), consumer groups (ListGroups from every broker, DescribeGroups and
OffsetFetch from the coordinator), topic configs (DescribeConfigs); and the writes the
console may make (CreateTopics to the controller, DeleteRecords to the leaders,
OffsetCommit to the coordinator). A single node asks itself the same way.

Every call is bounded by the client's request timeout; a broker that does not answer costs
its own part of a view (shown unknown), never the whole page.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from odradek.broker.inter_broker_client import DisconnectedError, InterBrokerClient
from odradek.broker.inter_broker_security import InterBrokerSecurity
from odradek.broker.metadata_cache import MetadataCache, TopicPartition
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError
from odradek.protocol.messages.consumer_protocol_assignment import ConsumerProtocolAssignment
from odradek.protocol.messages.create_topics_request import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from odradek.protocol.messages.create_topics_response import CreateTopicsResponse
from odradek.protocol.messages.delete_records_request import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)
from odradek.protocol.messages.delete_records_response import DeleteRecordsResponse
from odradek.protocol.messages.describe_configs_request import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
)
from odradek.protocol.messages.describe_configs_response import DescribeConfigsResponse
from odradek.protocol.messages.describe_groups_request import DescribeGroupsRequest
from odradek.protocol.messages.describe_groups_response import DescribeGroupsResponse
from odradek.protocol.messages.describe_log_dirs_request import (
    DescribableLogDirTopic,
    DescribeLogDirsRequest,
)
from odradek.protocol.messages.describe_log_dirs_response import DescribeLogDirsResponse
from odradek.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from odradek.protocol.messages.fetch_response import FetchResponse
from odradek.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from odradek.protocol.messages.find_coordinator_response import FindCoordinatorResponse
from odradek.protocol.messages.list_groups_request import ListGroupsRequest
from odradek.protocol.messages.list_groups_response import ListGroupsResponse
from odradek.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from odradek.protocol.messages.list_offsets_response import ListOffsetsResponse
from odradek.protocol.messages.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from odradek.protocol.messages.offset_commit_response import OffsetCommitResponse
from odradek.protocol.messages.offset_fetch_request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
)
from odradek.protocol.messages.offset_fetch_response import OffsetFetchResponse
from odradek.protocol.records import decode_records, iter_batch_headers

log = logging.getLogger(__name__)

EARLIEST, LATEST = -2, -1  # ListOffsets timestamps
TOPIC_RESOURCE = 2  # DescribeConfigs resource type
FETCH_VERSION = 12  # the last Fetch version that names topics (13+ use topic ids only)
FETCH_MAX_BYTES = 4 * 1024 * 1024  # per partition, per request


class ConsoleError(Exception):
    """A Kafka error the console shows by name (UNKNOWN_TOPIC_OR_PARTITION...)."""

    def __init__(self, error: str, message: str = "") -> None:
        super().__init__(f"{error}: {message}" if message else error)
        self.error = error
        self.message = message


def _error(code: int, message: str | None = None) -> ConsoleError:
    try:
        name = ErrorCode(code).name
    except ValueError:
        name = f"ERROR_{code}"
    return ConsoleError(name, message or "")


@dataclass(slots=True)
class ConsoleRecord:
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


@dataclass(slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    coordinator: int
    members: list[dict[str, Any]]
    offsets: dict[TopicPartition, int]  # committed


class ConsoleClient:
    def __init__(self, cache: MetadataCache, listener: str, *, client_id: str,
                 security: InterBrokerSecurity | None, request_timeout_ms: int = 10_000) -> None:
        self.cache = cache
        self.listener = listener  # the inter-broker listener's name
        self.client = InterBrokerClient(client_id=client_id, security=security,
                                        request_timeout_ms=request_timeout_ms)

    async def close(self) -> None:
        await self.client.close()

    async def _send(self, broker_id: int, request: Any, api_version: int | None = None) -> Any:
        self.client.update_endpoints({b.id: (host, port) for b, host, port
                                      in self.cache.alive_brokers(self.listener)})
        return await self.client.send(broker_id, request, api_version)

    def _leaders(self, partitions: Iterable[TopicPartition]) -> dict[int, list[TopicPartition]]:
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in partitions:
            info = self.cache.partition(tp)
            if info is not None and info.state.leader >= 0:
                by_leader.setdefault(info.state.leader, []).append(tp)
        return by_leader

    async def _each(self, calls: dict[int, Any]) -> dict[int, Any]:
        """Awaits one call per broker; a broker that fails is left out (and logged)."""
        results = await asyncio.gather(*calls.values(), return_exceptions=True)
        answered = {}
        for broker_id, result in zip(calls, results, strict=True):
            if isinstance(result, DisconnectedError | KafkaError | ConsoleError):
                log.info("console: broker %d did not answer: %s", broker_id, result)
            elif isinstance(result, BaseException):
                raise result
            else:
                answered[broker_id] = result
        return answered

    # ---- partitions ---------------------------------------------------------------------

    async def log_dirs(self) -> dict[int, dict[TopicPartition, int]]:
        """Each live broker's replicas and their sizes in bytes (DescribeLogDirs)."""
        async def one(broker_id: int) -> dict[TopicPartition, int]:
            response = cast(DescribeLogDirsResponse,
                            await self._send(broker_id, DescribeLogDirsRequest(topics=None)))
            sizes: dict[TopicPartition, int] = {}
            for result in response.results:
                if result.error_code == ErrorCode.NONE:
                    for topic in result.topics:
                        for p in topic.partitions:
                            if not p.is_future_key:
                                sizes[(topic.name, p.partition_index)] = p.partition_size
            return sizes
        return await self._each({b: one(b) for b in list(self.cache.brokers)})

    async def partition_sizes(self, topic: str) -> dict[TopicPartition, int]:
        """The size of each partition of a topic on its leader."""
        leaders = self._leaders((topic, p) for p in self._partitions(topic))

        async def one(broker_id: int, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
            request = DescribeLogDirsRequest(topics=[DescribableLogDirTopic(
                topic=topic, partitions=sorted(p for _, p in tps))])
            response = cast(DescribeLogDirsResponse, await self._send(broker_id, request))
            return {(t.name, p.partition_index): p.partition_size
                    for r in response.results if r.error_code == ErrorCode.NONE
                    for t in r.topics for p in t.partitions if not p.is_future_key}
        answers = await self._each({b: one(b, tps) for b, tps in leaders.items()})
        return {tp: size for sizes in answers.values() for tp, size in sizes.items()
                if (info := self.cache.partition(tp)) is not None
                and info.state.leader in answers}

    def _partitions(self, topic: str) -> list[int]:
        metadata = self.cache.topics.get(topic)
        if metadata is None:
            raise ConsoleError("UNKNOWN_TOPIC_OR_PARTITION", f"no topic {topic!r}")
        return sorted(metadata.partitions)

    async def list_offsets(self, partitions: Iterable[TopicPartition],
                           timestamp: int) -> dict[TopicPartition, int]:
        """The offset of each partition for a timestamp (LATEST: the high watermark,
        EARLIEST: the log start offset; -1 where a timestamp is past the end), from their
        leaders; partitions whose leader did not answer are left out."""
        async def one(broker_id: int, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
            topics: dict[str, list[int]] = {}
            for t, p in tps:
                topics.setdefault(t, []).append(p)
            request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
                ListOffsetsTopic(name=t, partitions=[
                    ListOffsetsPartition(partition_index=p, timestamp=timestamp)
                    for p in ps]) for t, ps in topics.items()])
            response = cast(ListOffsetsResponse, await self._send(broker_id, request))
            return {(t.name, p.partition_index): p.offset for t in response.topics
                    for p in t.partitions if p.error_code == ErrorCode.NONE}
        answers = await self._each({b: one(b, tps)
                                    for b, tps in self._leaders(partitions).items()})
        return {tp: offset for offsets in answers.values() for tp, offset in offsets.items()}

    async def fetch(self, topic: str, offsets: dict[int, int], *, limit: int
                    ) -> list[ConsoleRecord]:
        """Up to `limit` records of each partition from its offset (one Fetch per leader,
        up to FETCH_MAX_BYTES of each partition; control records left out)."""
        metadata = self.cache.topics.get(topic)
        if metadata is None:
            raise ConsoleError("UNKNOWN_TOPIC_OR_PARTITION", f"no topic {topic!r}")

        async def one(broker_id: int, tps: list[TopicPartition]) -> list[ConsoleRecord]:
            request = FetchRequest(
                replica_id=-1, max_wait_ms=0, min_bytes=0,
                max_bytes=FETCH_MAX_BYTES * len(tps), isolation_level=0, session_id=0,
                session_epoch=-1,
                topics=[FetchTopic(topic=topic, topic_id=metadata.topic_id, partitions=[
                    FetchPartition(partition=p, fetch_offset=offsets[p],
                                   partition_max_bytes=FETCH_MAX_BYTES) for _, p in tps])])
            connection = await self.client.connection(broker_id)
            response = cast(FetchResponse, await self._send(
                broker_id, request, connection.version_for(request.API_KEY, FETCH_VERSION)))
            found: list[ConsoleRecord] = []
            for t in response.responses:
                for p in t.partitions:
                    if p.error_code != ErrorCode.NONE:
                        raise _error(p.error_code, f"fetching {topic}-{p.partition_index}")
                    found += _records(p.partition_index, p.records or b"",
                                      offsets[p.partition_index], limit)
            return found
        leaders = self._leaders((topic, p) for p in offsets)
        answers = await self._each({b: one(b, tps) for b, tps in leaders.items()})
        return [r for records in answers.values() for r in records]

    # ---- groups --------------------------------------------------------------------------

    async def list_groups(self) -> list[dict[str, Any]]:
        """Every group of every broker: its id, state, protocol type, coordinator and
        member count (ListGroups, then one DescribeGroups for all of a broker's groups)."""
        async def one(broker_id: int) -> list[dict[str, Any]]:
            listed = cast(ListGroupsResponse, await self._send(broker_id, ListGroupsRequest()))
            if listed.error_code != ErrorCode.NONE:
                raise _error(listed.error_code, "ListGroups")
            if not listed.groups:
                return []
            described = cast(DescribeGroupsResponse, await self._send(
                broker_id, DescribeGroupsRequest(groups=[g.group_id for g in listed.groups])))
            members = {g.group_id: len(g.members) for g in described.groups
                       if g.error_code == ErrorCode.NONE}
            return [{"group_id": g.group_id, "state": g.group_state,
                     "protocol_type": g.protocol_type, "coordinator": broker_id,
                     "members": members.get(g.group_id)} for g in listed.groups]
        answers = await self._each({b: one(b) for b in list(self.cache.brokers)})
        return sorted((g for groups in answers.values() for g in groups),
                      key=lambda g: g["group_id"])

    async def coordinator(self, group_id: str) -> int:
        brokers = sorted(self.cache.brokers)
        if not brokers:
            raise ConsoleError("COORDINATOR_NOT_AVAILABLE", "no live broker")
        # Asked of this broker first: it knows the cluster as well as any.
        first = self.cache.node_id if self.cache.node_id in self.cache.brokers else brokers[0]
        # v4+ (every Odradek broker): the batched form
        request = FindCoordinatorRequest(key_type=0, coordinator_keys=[group_id])
        response = cast(FindCoordinatorResponse, await self._send(first, request))
        if response.coordinators:
            found = response.coordinators[0]
            if found.error_code != ErrorCode.NONE:
                raise _error(found.error_code, found.error_message)
            return found.node_id
        if response.error_code != ErrorCode.NONE:
            raise _error(response.error_code, response.error_message)
        return response.node_id

    async def describe_group(self, group_id: str) -> GroupDescription:
        coordinator = await self.coordinator(group_id)
        described, fetched = await asyncio.gather(
            self._send(coordinator, DescribeGroupsRequest(groups=[group_id])),
            self._send(coordinator, _offset_fetch(group_id)))
        group = cast(DescribeGroupsResponse, described).groups[0]
        if group.error_code != ErrorCode.NONE:
            raise _error(group.error_code, f"describing group {group_id!r}")
        offsets = _committed(cast(OffsetFetchResponse, fetched), group_id)
        if group.group_state == "Dead" and not offsets:
            raise ConsoleError("GROUP_ID_NOT_FOUND", f"no group {group_id!r}")
        members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id, "host": m.client_host,
                    "assignment": _assignment(m.member_assignment)
                    if group.protocol_type == "consumer" else []}
                   for m in group.members]
        return GroupDescription(group_id, group.group_state, group.protocol_type,
                                group.protocol_data, coordinator, members, offsets)

    async def committed_offsets(self, group_id: str, coordinator: int
                                ) -> dict[TopicPartition, int]:
        response = cast(OffsetFetchResponse,
                        await self._send(coordinator, _offset_fetch(group_id)))
        return _committed(response, group_id)

    # ---- configs ---------------------------------------------------------------------------

    async def topic_configs(self, topic: str) -> list[dict[str, Any]]:
        request = DescribeConfigsRequest(resources=[DescribeConfigsResource(
            resource_type=TOPIC_RESOURCE, resource_name=topic, configuration_keys=None)])
        target = self.cache.node_id if self.cache.node_id in self.cache.brokers else min(
            self.cache.brokers)
        response = cast(DescribeConfigsResponse, await self._send(target, request))
        result = response.results[0]
        if result.error_code != ErrorCode.NONE:
            raise _error(result.error_code, result.error_message)
        return [{"name": c.name, "value": None if c.is_sensitive else c.value,
                 "source": _CONFIG_SOURCES.get(c.config_source, "UNKNOWN"),
                 "sensitive": c.is_sensitive, "read_only": c.read_only}
                for c in sorted(result.configs, key=lambda c: c.name)]

    # ---- writes ----------------------------------------------------------------------------

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: dict[str, str]) -> None:
        controller = self.cache.controller_id
        if controller is None or controller not in self.cache.brokers:
            raise ConsoleError("NOT_CONTROLLER", "no controller is known now")
        request = CreateTopicsRequest(timeout_ms=self.client.request_timeout_ms, topics=[
            CreatableTopic(name=name, num_partitions=partitions,
                           replication_factor=replication_factor,
                           configs=[CreatableTopicConfig(name=k, value=v)
                                    for k, v in configs.items()])])
        response = cast(CreateTopicsResponse, await self._send(controller, request))
        result = response.topics[0]
        if result.error_code != ErrorCode.NONE:
            raise _error(result.error_code, result.error_message)

    async def delete_records(self, topic: str, before: dict[int, int]) -> dict[int, int]:
        """Deletes the records before each offset (-1: the high watermark); answers the new
        log start offsets."""
        async def one(broker_id: int, tps: list[TopicPartition]) -> dict[int, int]:
            request = DeleteRecordsRequest(timeout_ms=self.client.request_timeout_ms, topics=[
                DeleteRecordsTopic(name=topic, partitions=[
                    DeleteRecordsPartition(partition_index=p, offset=before[p])
                    for _, p in tps])])
            response = cast(DeleteRecordsResponse, await self._send(broker_id, request))
            done = {}
            for t in response.topics:
                for p in t.partitions:
                    if p.error_code != ErrorCode.NONE:
                        raise _error(p.error_code, f"deleting records of {topic}-"
                                                   f"{p.partition_index}")
                    done[p.partition_index] = p.low_watermark
            return done
        self._partitions(topic)
        leaders = self._leaders((topic, p) for p in before)
        results = await asyncio.gather(*(one(b, tps) for b, tps in leaders.items()))
        return {p: offset for result in results for p, offset in result.items()}

    async def commit_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        """Commits offsets for an empty group (as kafka-consumer-groups --reset-offsets:
        the coordinator refuses while members are active)."""
        coordinator = await self.coordinator(group_id)
        topics: dict[str, list[OffsetCommitRequestPartition]] = {}
        for (t, p), offset in sorted(offsets.items()):
            topics.setdefault(t, []).append(OffsetCommitRequestPartition(
                partition_index=p, committed_offset=offset))
        request = OffsetCommitRequest(
            group_id=group_id, generation_id_or_member_epoch=-1, member_id="",
            topics=[OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()])
        response = cast(OffsetCommitResponse, await self._send(coordinator, request))
        for t in response.topics:
            for p in t.partitions:
                if p.error_code != ErrorCode.NONE:
                    raise _error(p.error_code, f"committing {t.name}-{p.partition_index}")


_CONFIG_SOURCES = {1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
                   3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG",
                   5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
                   7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}


def _offset_fetch(group_id: str) -> OffsetFetchRequest:
    """Every committed offset of a group, in the batched form of v8+ (every Odradek
    broker)."""
    return OffsetFetchRequest(groups=[OffsetFetchRequestGroup(group_id=group_id, topics=None)])


def _committed(response: OffsetFetchResponse, group_id: str) -> dict[TopicPartition, int]:
    if response.groups:
        group = response.groups[0]
        if group.error_code != ErrorCode.NONE:
            raise _error(group.error_code, f"fetching the offsets of {group_id!r}")
        partitions = [(t.name, p) for t in group.topics for p in t.partitions]
    else:
        if response.error_code != ErrorCode.NONE:
            raise _error(response.error_code, f"fetching the offsets of {group_id!r}")
        partitions = [(t.name, p) for t in response.topics for p in t.partitions]
    return {(topic, p.partition_index): p.committed_offset for topic, p in partitions
            if p.error_code == ErrorCode.NONE and p.committed_offset >= 0}


def _assignment(data: bytes) -> list[dict[str, Any]]:
    if not data:
        return []
    try:  # an int16 version, then the assignment in that version
        version = min(int.from_bytes(data[:2], "big", signed=True),
                      ConsumerProtocolAssignment.MAX_VERSION)
        assignment = ConsumerProtocolAssignment.decode(bytes(data[2:]), version)
    except Exception:  # a client's own bytes: shown without an assignment
        return []
    return [{"topic": t.topic, "partitions": sorted(t.partitions)}
            for t in assignment.assigned_partitions]


def _records(partition: int, data: bytes, start: int, limit: int) -> list[ConsoleRecord]:
    """The data records of a Fetch answer from `start`, at most `limit`."""
    found: list[ConsoleRecord] = []
    for pos, header in iter_batch_headers(data, allow_partial=True):
        if header.is_control or header.last_offset < start:
            continue
        for record in decode_records(data, pos, header):
            if record.offset < start:
                continue
            found.append(ConsoleRecord(
                partition, record.offset, record.timestamp, header.timestamp_type,
                record.key, record.value, [(h[0], h[1]) for h in record.headers]))
            if len(found) >= limit:
                return found
    return found
