"""The group APIs' handlers: requests in, GroupCoordinator calls, responses out.

KafkaApis takes these handlers as it takes the AdminManager's. Each handler maps one
request version's fields to the coordinator and back; a field a version lacks keeps its
default (the codec refuses anything else). JoinGroup and SyncGroup wait on a future that
the coordinator's callback completes.

FindCoordinator creates __consumer_offsets on first use (offsets.topic.num.partitions
partitions, replication factor min(offsets.topic.replication.factor, live brokers),
cleanup.policy=compact) and answers with the leader of the group's partition. Kafka
answers COORDINATOR_NOT_AVAILABLE while it creates the topic in the background; here the
creation is synchronous, so the first answer is already the coordinator. A transactional
id's coordinator is the transaction APIs' (find_transaction_coordinator); without them,
key type 1 answers COORDINATOR_NOT_AVAILABLE.

Authorization (`auth`, which KafkaApis sets; everything is allowed by default) is Kafka
3.9's KafkaApis, check for check, before anything is done: DESCRIBE on the group for
FindCoordinator, OffsetFetch and DescribeGroups; READ on it for JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit and TxnOffsetCommit (after WRITE on the transactional
id); DELETE for DeleteGroups and OffsetDelete (GROUP_AUTHORIZATION_FAILED); READ on the
topics whose offsets are committed or deleted and DESCRIBE on those whose offsets are
fetched (TOPIC_AUTHORIZATION_FAILED, or left out of an OffsetFetch of all offsets);
ListGroups lists every group for DESCRIBE on the cluster, else the groups the principal
may DESCRIBE.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar, cast

from odradek.broker.auth_helper import (
    ALLOW_ALL,
    CLUSTER_NAME,
    AclOperation,
    AuthHelper,
    ResourceType,
)
from odradek.cluster.controller import Controller
from odradek.cluster.metadata import TopicMetadata
from odradek.cluster.topics import GROUP_METADATA_TOPIC, TopicExistsError
from odradek.coordinator.group.group_coordinator import GroupCoordinator, LeavingMember
from odradek.coordinator.group.group_metadata import (
    JoinGroupResult,
    OffsetAndMetadata,
    SyncGroupResult,
    TopicPartition,
)
from odradek.coordinator.group.group_metadata_manager import OffsetFetchResult
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError
from odradek.protocol.framing import Request
from odradek.protocol.message import Message
from odradek.protocol.messages import (
    delete_groups_request,
    delete_groups_response,
    describe_groups_request,
    describe_groups_response,
    find_coordinator_request,
    find_coordinator_response,
    heartbeat_request,
    heartbeat_response,
    join_group_request,
    join_group_response,
    leave_group_request,
    leave_group_response,
    list_groups_request,
    list_groups_response,
    offset_commit_request,
    offset_commit_response,
    offset_delete_request,
    offset_delete_response,
    offset_fetch_request,
    offset_fetch_response,
    sync_group_request,
    sync_group_response,
    txn_offset_commit_request,
    txn_offset_commit_response,
)
from odradek.server.config import BrokerConfig
from odradek.server.network import RequestContext
from odradek.storage.errors import InvalidConfigError

log = logging.getLogger(__name__)

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
SHARE_KEY_TYPE = 2
NO_RETENTION_TIME = -1  # OffsetCommit v2-v4: the broker's retention applies
LONG_MAX = 2**63 - 1
_NOT_REQUESTED = -(2**31)  # DescribeGroups' authorized operations, not asked for (KIP-430)
_READ, _WRITE, _DELETE, _DESCRIBE = (AclOperation.READ, AclOperation.WRITE,
                                     AclOperation.DELETE, AclOperation.DESCRIBE)
_GROUP, _TOPIC, _TRANSACTIONAL_ID = (ResourceType.GROUP, ResourceType.TOPIC,
                                     ResourceType.TRANSACTIONAL_ID)

# A broker's advertised address on the request's listener, None when it has none.
Endpoint = Callable[[int, RequestContext], tuple[str, int] | None]
# (transactional id, context) -> (error, message, node id, host, port)
FindTransactionCoordinator = Callable[
    [str, RequestContext], Awaitable[tuple[int, str | None, int, str, int]]]
_T = TypeVar("_T")


class GroupApis:
    def __init__(self, config: BrokerConfig, coordinator: GroupCoordinator,
                 controller: Controller, endpoint: Endpoint) -> None:
        self.config = config
        self.coordinator = coordinator
        self.controller = controller
        self.endpoint = endpoint
        # FindCoordinator for a transactional id: the transaction APIs answer it (and
        # authorize it).
        self.find_transaction_coordinator: FindTransactionCoordinator | None = None
        self.auth: AuthHelper = ALLOW_ALL  # KafkaApis sets the broker's

    def handlers(self) -> dict[int, Callable[[Request, RequestContext], Any]]:
        return {
            ApiKey.FIND_COORDINATOR: self.handle_find_coordinator,
            ApiKey.JOIN_GROUP: self.handle_join_group,
            ApiKey.SYNC_GROUP: self.handle_sync_group,
            ApiKey.HEARTBEAT: self.handle_heartbeat,
            ApiKey.LEAVE_GROUP: self.handle_leave_group,
            ApiKey.OFFSET_COMMIT: self.handle_offset_commit,
            ApiKey.TXN_OFFSET_COMMIT: self.handle_txn_offset_commit,
            ApiKey.OFFSET_FETCH: self.handle_offset_fetch,
            ApiKey.DESCRIBE_GROUPS: self.handle_describe_groups,
            ApiKey.LIST_GROUPS: self.handle_list_groups,
            ApiKey.DELETE_GROUPS: self.handle_delete_groups,
            ApiKey.OFFSET_DELETE: self.handle_offset_delete,
        }

    # ---- FindCoordinator --------------------------------------------------------------

    async def handle_find_coordinator(self, request: Request,
                                      context: RequestContext) -> Message:
        body = cast(find_coordinator_request.FindCoordinatorRequest, request.body)
        if request.api_version >= 4:
            coordinators = []
            for key in body.coordinator_keys:
                error, message, node, host, port = await self._find(body.key_type, key,
                                                                    context)
                coordinators.append(find_coordinator_response.Coordinator(
                    key=key, node_id=node, host=host, port=port, error_code=error,
                    error_message=message))
            return find_coordinator_response.FindCoordinatorResponse(coordinators=coordinators)
        error, message, node, host, port = await self._find(body.key_type, body.key, context)
        return find_coordinator_response.FindCoordinatorResponse(
            error_code=error, error_message=message, node_id=node, host=host, port=port)

    async def _find(self, key_type: int, key: str, context: RequestContext
                    ) -> tuple[int, str | None, int, str, int]:
        """(error, message, node id, host, port); Kafka's "no node" on errors. Kafka's
        getCoordinator: the principal may DESCRIBE the group or transactional id; a share
        coordinator (v6) takes CLUSTER_ACTION on the cluster."""
        version = context.header.request_api_version
        if key_type == GROUP_KEY_TYPE and not self.auth.authorize(context, _DESCRIBE, _GROUP,
                                                                  key):
            return _coordinator_denied(ErrorCode.GROUP_AUTHORIZATION_FAILED, version)
        if key_type == TRANSACTION_KEY_TYPE and self.find_transaction_coordinator:
            return await self.find_transaction_coordinator(key, context)  # authorizes
        if key_type == TRANSACTION_KEY_TYPE and not self.auth.authorize(
                context, _DESCRIBE, _TRANSACTIONAL_ID, key):
            return _coordinator_denied(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, version)
        if key_type == SHARE_KEY_TYPE:
            if version < 6:
                return (ErrorCode.INVALID_REQUEST, "a share coordinator is found with "
                        "FindCoordinator v6 and later", -1, "", -1)
            if not self.auth.authorize_cluster(context, AclOperation.CLUSTER_ACTION):
                return _coordinator_denied(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, version)
        if key_type == GROUP_KEY_TYPE:
            topic = await self._offsets_topic()
            if topic is not None:
                # The coordinator is the leader of the group's __consumer_offsets partition.
                state = topic.partitions.get(self.coordinator.partition_for(key))
                address = (self.endpoint(state.leader, context)
                           if state is not None and state.leader >= 0 else None)
                if state is not None and address is not None:
                    return ErrorCode.NONE, None, state.leader, address[0], address[1]
            message = "the group coordinator is not available"
        elif key_type in (TRANSACTION_KEY_TYPE, SHARE_KEY_TYPE):
            message = ("this broker has no transaction coordinator"
                       if key_type == TRANSACTION_KEY_TYPE
                       else "this broker has no share coordinator")
        else:
            return (ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}",
                    -1, "", -1)
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, message, -1, "", -1

    async def _offsets_topic(self) -> TopicMetadata | None:
        """__consumer_offsets, created now if it does not exist yet."""
        topic = self.controller.topics.get(GROUP_METADATA_TOPIC)
        if topic is not None:
            return topic
        offsets = self.coordinator.manager.config
        replication_factor = offsets.offsets_topic_replication_factor
        live = len(self.controller.live_brokers)
        if self.controller.single_node:
            replication_factor = min(replication_factor, live)
        elif live < replication_factor:  # Kafka's rule: wait for the brokers to come
            log.info("%d live brokers, fewer than offsets.topic.replication.factor=%d: %s is "
                     "created once enough have joined", live, replication_factor,
                     GROUP_METADATA_TOPIC)
            return None
        configs = {"cleanup.policy": "compact",
                   "segment.bytes": str(offsets.offsets_topic_segment_bytes),
                   "compression.type": "producer"}
        try:
            self.config.log_config.with_overrides(configs)
            return await self.controller.create_topic(
                GROUP_METADATA_TOPIC, offsets.offsets_topic_num_partitions, replication_factor,
                configs)
        except TopicExistsError:  # another request created it meanwhile
            return self.controller.topics.get(GROUP_METADATA_TOPIC)
        except (KafkaError, InvalidConfigError) as e:
            log.error("cannot create %s: %s", GROUP_METADATA_TOPIC, e)
            return None

    # ---- JoinGroup, SyncGroup, Heartbeat, LeaveGroup -----------------------------------

    async def handle_join_group(self, request: Request, context: RequestContext) -> Message:
        body = cast(join_group_request.JoinGroupRequest, request.body)
        version = request.api_version
        if not self.auth.authorize(context, _READ, _GROUP, body.group_id):
            # JoinGroupRequest.getErrorResponse: no generation, member, leader or protocol.
            return join_group_response.JoinGroupResponse(
                error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, generation_id=-1,
                protocol_name=None if version >= 7 else "", leader="", member_id="")
        instance_id = body.group_instance_id if version >= 5 else None
        future: asyncio.Future[JoinGroupResult] = asyncio.get_running_loop().create_future()
        self.coordinator.handle_join_group(
            body.group_id, body.member_id, instance_id,
            require_known_member_id=version >= 4 and instance_id is None,
            support_skipping_assignment=version >= 9,
            client_id=context.client_id, client_host="/" + context.client_host,
            # -1 (never set): the session timeout, as for JoinGroup v0.
            rebalance_timeout_ms=(body.rebalance_timeout_ms if body.rebalance_timeout_ms >= 0
                                  else body.session_timeout_ms),
            session_timeout_ms=body.session_timeout_ms, protocol_type=body.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in body.protocols],
            callback=_completer(future), reason=body.reason if version >= 8 else None)
        result = await future
        response = join_group_response.JoinGroupResponse(
            error_code=result.error, generation_id=result.generation_id,
            protocol_name=result.protocol_name if version >= 7 else result.protocol_name or "",
            leader=result.leader_id, member_id=result.member_id,
            members=[join_group_response.JoinGroupResponseMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id if version >= 5 else None,
                metadata=m.metadata) for m in result.members])
        if version >= 7:
            response.protocol_type = result.protocol_type
        if version >= 9:
            response.skip_assignment = result.skip_assignment
        return response

    async def handle_sync_group(self, request: Request, context: RequestContext) -> Message:
        body = cast(sync_group_request.SyncGroupRequest, request.body)
        version = request.api_version
        if version >= 5 and (body.protocol_type is None or body.protocol_name is None):
            return sync_group_response.SyncGroupResponse(
                error_code=ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if not self.auth.authorize(context, _READ, _GROUP, body.group_id):
            return sync_group_response.SyncGroupResponse(
                error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, assignment=b"")
        future: asyncio.Future[SyncGroupResult] = asyncio.get_running_loop().create_future()
        self.coordinator.handle_sync_group(
            body.group_id, body.generation_id, body.member_id,
            body.protocol_type if version >= 5 else None,
            body.protocol_name if version >= 5 else None,
            body.group_instance_id if version >= 3 else None,
            {a.member_id: bytes(a.assignment) for a in body.assignments},
            _completer(future))
        result = await future
        error = result.error
        if error == ErrorCode.NONE:
            # The assignment answers once the group's ISR has it, as offsets do: a new
            # coordinator then knows this generation.
            error = await self.coordinator.manager.wait_for_replication(
                body.group_id, self.config.get("offsets.commit.timeout.ms"))
        response = sync_group_response.SyncGroupResponse(
            error_code=error, assignment=result.assignment if not error else b"")
        if version >= 5:
            response.protocol_type = result.protocol_type
            response.protocol_name = result.protocol_name
        return response

    def handle_heartbeat(self, request: Request, context: RequestContext) -> Message:
        body = cast(heartbeat_request.HeartbeatRequest, request.body)
        if not self.auth.authorize(context, _READ, _GROUP, body.group_id):
            return heartbeat_response.HeartbeatResponse(
                error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
        error = self.coordinator.handle_heartbeat(
            body.group_id, body.member_id,
            body.group_instance_id if request.api_version >= 3 else None, body.generation_id)
        return heartbeat_response.HeartbeatResponse(error_code=error)

    def handle_leave_group(self, request: Request, context: RequestContext) -> Message:
        body = cast(leave_group_request.LeaveGroupRequest, request.body)
        version = request.api_version
        if not self.auth.authorize(context, _READ, _GROUP, body.group_id):
            return leave_group_response.LeaveGroupResponse(
                error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
        if version >= 3:
            leaving = [LeavingMember(m.member_id, m.group_instance_id,
                                     m.reason if version >= 5 else None) for m in body.members]
        else:
            leaving = [LeavingMember(body.member_id)]
        error, results = self.coordinator.handle_leave_group(body.group_id, leaving)
        if version >= 3:
            return leave_group_response.LeaveGroupResponse(
                error_code=error, members=[leave_group_response.MemberResponse(
                    member_id=m.member_id, group_instance_id=m.group_instance_id,
                    error_code=code) for m, code in results])
        # One member: its error is the response's, as Kafka answers older versions.
        if error == ErrorCode.NONE and results:
            error = results[0][1]
        return leave_group_response.LeaveGroupResponse(error_code=error)

    # ---- OffsetCommit, OffsetFetch, OffsetDelete ---------------------------------------

    def _known(self, topic: str, partition: int) -> bool:
        metadata = self.controller.topics.get(topic)
        return metadata is not None and partition in metadata.partitions

    def _offsets_of(self, context: RequestContext, topics: list[Any],
                    make: Callable[[Any], OffsetAndMetadata]
                    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, OffsetAndMetadata]]:
        """A commit's offsets (made by `make` from each partition of the request) of the
        partitions that exist, of topics the principal may READ; TOPIC_AUTHORIZATION_FAILED
        and UNKNOWN_TOPIC_OR_PARTITION for the others (a partition named twice: its last
        entry)."""
        readable = self.auth.filter_authorized(context, _READ, _TOPIC, (t.name for t in topics))
        errors: dict[TopicPartition, int] = {}
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for t in topics:
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                if t.name not in readable:
                    errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    continue
                if not self._known(*tp):
                    errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                offsets[tp] = make(p)
                errors.pop(tp, None)
        return errors, offsets

    async def _replicated(self, group_id: str, offsets: Iterable[TopicPartition],
                          errors: dict[TopicPartition, int]) -> None:
        """Waits until the whole ISR of the group's partition has the commits written, so
        that they survive the coordinator (acks=all); a timeout becomes each one's error."""
        written = [tp for tp in offsets if errors.get(tp) == ErrorCode.NONE]
        if written:
            error = await self.coordinator.manager.wait_for_replication(
                group_id, self.config.get("offsets.commit.timeout.ms"))
            if error:
                errors.update(dict.fromkeys(written, error))

    async def handle_offset_commit(self, request: Request, context: RequestContext) -> Message:
        body = cast(offset_commit_request.OffsetCommitRequest, request.body)
        if not self.auth.authorize(context, _READ, _GROUP, body.group_id):
            return _offset_commit_response(body.topics,
                                           lambda tp: ErrorCode.GROUP_AUTHORIZATION_FAILED)
        version = request.api_version
        now = self.coordinator.time.milliseconds()
        retention = body.retention_time_ms if version <= 4 else NO_RETENTION_TIME
        # The record's expire timestamp is an int64: a retention that would carry it past
        # Long.MAX_VALUE (Kafka's sum wraps around) keeps the offset as long as there is.
        expire = None if retention == NO_RETENTION_TIME else min(now + retention, LONG_MAX)
        errors, offsets = self._offsets_of(context, body.topics, lambda p: OffsetAndMetadata(
            offset=p.committed_offset,
            leader_epoch=p.committed_leader_epoch if version >= 6 else -1,
            metadata=p.committed_metadata or "",
            # v1 lets the client set the commit time (-1: now), as Kafka 3.9 reads it.
            commit_timestamp=(p.commit_timestamp if version == 1
                              and p.commit_timestamp != -1 else now),
            expire_timestamp=expire))
        if offsets:
            errors.update(self.coordinator.handle_commit_offsets(
                body.group_id, body.member_id,
                body.group_instance_id if version >= 7 else None,
                body.generation_id_or_member_epoch, offsets))
            await self._replicated(body.group_id, offsets, errors)
        return _offset_commit_response(body.topics, errors.__getitem__)

    async def handle_txn_offset_commit(self, request: Request,
                                       context: RequestContext) -> Message:
        """TxnOffsetCommit (KIP-98; KIP-447 from v3): the offsets go to the group's
        __consumer_offsets partition as the producer's transactional batch, pending until
        its transaction's marker; answered once the partition's ISR has them."""
        body = cast(txn_offset_commit_request.TxnOffsetCommitRequest, request.body)
        # The producer id is not authorized: WRITE on the transactional id implies it.
        if not self.auth.authorize(context, _WRITE, _TRANSACTIONAL_ID, body.transactional_id):
            return _txn_offset_commit_response(
                body.topics, lambda tp: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not self.auth.authorize(context, _READ, _GROUP, body.group_id):
            return _txn_offset_commit_response(
                body.topics, lambda tp: ErrorCode.GROUP_AUTHORIZATION_FAILED)
        version = request.api_version
        now = self.coordinator.time.milliseconds()
        errors, offsets = self._offsets_of(context, body.topics, lambda p: OffsetAndMetadata(
            offset=p.committed_offset,
            leader_epoch=p.committed_leader_epoch if version >= 2 else -1,
            metadata=p.committed_metadata or "", commit_timestamp=now))
        if offsets:
            errors.update(self.coordinator.handle_txn_commit_offsets(
                body.group_id, body.producer_id, body.producer_epoch,
                body.member_id if version >= 3 else "",
                body.group_instance_id if version >= 3 else None,
                body.generation_id if version >= 3 else -1, offsets))
            await self._replicated(body.group_id, offsets, errors)
        return _txn_offset_commit_response(body.topics, errors.__getitem__)

    def handle_offset_fetch(self, request: Request, context: RequestContext) -> Message:
        body = cast(offset_fetch_request.OffsetFetchRequest, request.body)
        version = request.api_version
        if version >= 8:
            groups = []
            for g in body.groups:
                error, topics = self._fetch_group(
                    context, g.group_id, body.require_stable,
                    None if g.topics is None else [(t.name, t.partition_indexes)
                                                   for t in g.topics])
                groups.append(offset_fetch_response.OffsetFetchResponseGroup(
                    group_id=g.group_id, error_code=error,
                    topics=[offset_fetch_response.OffsetFetchResponseTopics(
                        name=name, partitions=[offset_fetch_response.OffsetFetchResponsePartitions(
                            partition_index=index, committed_offset=r.offset,
                            committed_leader_epoch=r.leader_epoch, metadata=r.metadata,
                            error_code=r.error) for index, r in partitions])
                        for name, partitions in topics]))
            return offset_fetch_response.OffsetFetchResponse(groups=groups)
        asked = (None if body.topics is None else
                 [(t.name, t.partition_indexes) for t in body.topics])
        error, topics = self._fetch_group(
            context, body.group_id, body.require_stable if version >= 7 else False, asked)
        if error and version < 2:
            # No top-level error before v2: each requested partition carries it.
            wanted = [(name, p) for name, indexes in asked or () for p in indexes]
            topics = _by_topic({tp: OffsetFetchResult(error=error) for tp in wanted}, wanted)
        response = offset_fetch_response.OffsetFetchResponse(
            topics=[offset_fetch_response.OffsetFetchResponseTopic(
                name=name, partitions=[offset_fetch_response.OffsetFetchResponsePartition(
                    partition_index=index, committed_offset=r.offset,
                    committed_leader_epoch=r.leader_epoch if version >= 5 else -1,
                    metadata=r.metadata, error_code=r.error) for index, r in partitions])
                for name, partitions in topics])
        if version >= 2:
            response.error_code = error
        return response

    def _fetch_group(self, context: RequestContext, group_id: str, require_stable: bool,
                     asked: list[tuple[str, list[int]]] | None
                     ) -> tuple[int, list[tuple[str, list[tuple[int, OffsetFetchResult]]]]]:
        """One group's OffsetFetch (Kafka's handleOffsetFetchRequestFromCoordinator): the
        group error, or the offsets by topic. DESCRIBE on the group; offsets only of topics
        the principal may DESCRIBE: asked for (`asked`: topic names and partitions), the
        others answer TOPIC_AUTHORIZATION_FAILED after the rest; all of them (None), the
        others are left out."""
        if not self.auth.authorize(context, _DESCRIBE, _GROUP, group_id):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED, []
        if asked is None:
            error, offsets = self.coordinator.handle_fetch_offsets(group_id, require_stable,
                                                                   None)
            if error:
                return error, []
            topics = _by_topic(offsets, None)
            visible = self.auth.filter_authorized(context, _DESCRIBE, _TOPIC,
                                                  (name for name, _ in topics))
            return ErrorCode.NONE, [t for t in topics if t[0] in visible]
        visible = self.auth.filter_authorized(context, _DESCRIBE, _TOPIC,
                                              (name for name, _ in asked))
        wanted = [(name, p) for name, indexes in asked if name in visible for p in indexes]
        error, offsets = self.coordinator.handle_fetch_offsets(group_id, require_stable, wanted)
        if error:
            return error, []
        denied = OffsetFetchResult(error=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        return ErrorCode.NONE, _by_topic(offsets, wanted) + [
            (name, [(p, denied) for p in indexes])
            for name, indexes in asked if name not in visible]

    def handle_offset_delete(self, request: Request, context: RequestContext) -> Message:
        body = cast(offset_delete_request.OffsetDeleteRequest, request.body)
        if not self.auth.authorize(context, _DELETE, _GROUP, body.group_id):
            return offset_delete_response.OffsetDeleteResponse(
                error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
        readable = self.auth.filter_authorized(context, _READ, _TOPIC,
                                               (t.name for t in body.topics))
        errors: dict[TopicPartition, int] = {}
        known: list[TopicPartition] = []
        for t in body.topics:
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                if t.name not in readable:
                    errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif self._known(*tp):
                    known.append(tp)
                else:
                    errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        error, deleted = self.coordinator.handle_delete_offsets(body.group_id, known)
        if error:
            return offset_delete_response.OffsetDeleteResponse(error_code=error)
        errors.update(deleted)
        topics: dict[str, list[offset_delete_response.OffsetDeleteResponsePartition]] = {}
        for (name, index), code in errors.items():
            topics.setdefault(name, []).append(
                offset_delete_response.OffsetDeleteResponsePartition(
                    partition_index=index, error_code=code))
        return offset_delete_response.OffsetDeleteResponse(topics=[
            offset_delete_response.OffsetDeleteResponseTopic(name=name, partitions=partitions)
            for name, partitions in topics.items()])

    # ---- DescribeGroups, ListGroups, DeleteGroups --------------------------------------

    def handle_describe_groups(self, request: Request, context: RequestContext) -> Message:
        """DESCRIBE on each group. As Kafka answers: the refused groups first, then the
        others; the authorized operations (v3+, when asked) of each group described
        without error."""
        body = cast(describe_groups_request.DescribeGroupsRequest, request.body)
        version = request.api_version
        groups = []
        authorized = []
        for group_id in body.groups:
            if self.auth.authorize(context, _DESCRIBE, _GROUP, group_id):
                authorized.append(group_id)
            else:  # DescribeGroupsResponse.groupError
                groups.append(describe_groups_response.DescribedGroup(
                    error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=group_id))
        for group_id in authorized:
            error, summary = self.coordinator.handle_describe_group(group_id)
            described = describe_groups_response.DescribedGroup(
                error_code=error, group_id=group_id, group_state=summary.state,
                protocol_type=summary.protocol_type, protocol_data=summary.protocol,
                members=[describe_groups_response.DescribedGroupMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id if version >= 4 else None,
                    client_id=m.client_id, client_host=m.client_host,
                    member_metadata=m.metadata, member_assignment=m.assignment)
                    for m in summary.members])
            if version >= 3 and body.include_authorized_operations and not error:
                described.authorized_operations = self.auth.authorized_operations(
                    context, _GROUP, group_id)
            groups.append(described)
        return describe_groups_response.DescribeGroupsResponse(groups=groups)

    def handle_list_groups(self, request: Request, context: RequestContext) -> Message:
        """Every group for DESCRIBE on the cluster; else the groups the principal may
        DESCRIBE (neither refusal logged as a denial, as in Kafka)."""
        body = cast(list_groups_request.ListGroupsRequest, request.body)
        version = request.api_version
        all_groups = self.auth.authorize(context, _DESCRIBE, ResourceType.CLUSTER,
                                         CLUSTER_NAME, log_if_denied=False)
        error, overviews = self.coordinator.handle_list_groups(
            body.states_filter if version >= 4 else (),
            body.types_filter if version >= 5 else ())
        groups = []
        for o in overviews:
            if not all_groups and not self.auth.authorize(context, _DESCRIBE, _GROUP,
                                                          o.group_id, log_if_denied=False):
                continue
            listed = list_groups_response.ListedGroup(group_id=o.group_id,
                                                      protocol_type=o.protocol_type)
            if version >= 4:
                listed.group_state = o.state
            if version >= 5:
                listed.group_type = o.group_type
            groups.append(listed)
        return list_groups_response.ListGroupsResponse(error_code=error, groups=groups)

    def handle_delete_groups(self, request: Request, context: RequestContext) -> Message:
        """DELETE on each group: the groups refused answer GROUP_AUTHORIZATION_FAILED after
        the others, as Kafka answers."""
        body = cast(delete_groups_request.DeleteGroupsRequest, request.body)
        names = list(dict.fromkeys(body.groups_names))
        deletable = self.auth.filter_authorized(context, _DELETE, _GROUP, names)
        authorized = [g for g in names if g in deletable]
        errors = self.coordinator.handle_delete_groups(authorized) if authorized else {}
        return delete_groups_response.DeleteGroupsResponse(results=[
            delete_groups_response.DeletableGroupResult(group_id=g, error_code=errors[g])
            for g in authorized] + [
            delete_groups_response.DeletableGroupResult(
                group_id=g, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
            for g in names if g not in deletable])


def _coordinator_denied(error: ErrorCode, version: int) -> tuple[int, str | None, int, str, int]:
    """A refused FindCoordinator key as Kafka answers it: no node; the error's own message
    before v4 (prepareOldResponse), none in a v4+ coordinator entry."""
    return error, error.message if version < 4 else None, -1, "", -1


def _completer(future: asyncio.Future[_T]) -> Callable[[_T], None]:
    def complete(result: _T) -> None:
        if not future.done():  # the connection may be gone; the answer is then dropped
            future.set_result(result)
    return complete


def _offset_commit_response(topics: list[Any], error: Callable[[TopicPartition], int]
                            ) -> offset_commit_response.OffsetCommitResponse:
    """Each partition of the request with its error, in the request's order."""
    return offset_commit_response.OffsetCommitResponse(topics=[
        offset_commit_response.OffsetCommitResponseTopic(name=t.name, partitions=[
            offset_commit_response.OffsetCommitResponsePartition(
                partition_index=p.partition_index, error_code=error((t.name, p.partition_index)))
            for p in t.partitions])
        for t in topics])


def _txn_offset_commit_response(topics: list[Any], error: Callable[[TopicPartition], int]
                                ) -> txn_offset_commit_response.TxnOffsetCommitResponse:
    return txn_offset_commit_response.TxnOffsetCommitResponse(topics=[
        txn_offset_commit_response.TxnOffsetCommitResponseTopic(name=t.name, partitions=[
            txn_offset_commit_response.TxnOffsetCommitResponsePartition(
                partition_index=p.partition_index, error_code=error((t.name, p.partition_index)))
            for p in t.partitions])
        for t in topics])


def _by_topic(offsets: dict[TopicPartition, OffsetFetchResult],
              wanted: list[TopicPartition] | None
              ) -> list[tuple[str, list[tuple[int, OffsetFetchResult]]]]:
    """Offsets grouped by topic: in the order asked for, or sorted when all were."""
    order = wanted if wanted is not None else sorted(offsets)
    topics: dict[str, dict[int, OffsetFetchResult]] = {}
    for tp in order:
        if tp in offsets:
            topics.setdefault(tp[0], {})[tp[1]] = offsets[tp]
    return [(name, list(partitions.items())) for name, partitions in topics.items()]
