"""InterBrokerApis: the requests brokers of a ZooKeeper cluster send each other.

From the controller to every broker: LeaderAndIsr (lead or follow these replicas),
UpdateMetadata (the cluster as the controller sees it, into the MetadataCache) and
StopReplica (stop, and maybe delete, replicas). From brokers to the controller:
AlterPartition (a leader's ISR changes) and ControlledShutdown (a broker about to stop
hands its leaderships over). A request from a controller older than the newest one this
broker has heard from is refused with STALE_CONTROLLER_EPOCH, so a deposed controller
cannot undo its successor's work.

Each request also carries the broker epoch of the registration it concerns (the czxid of
/brokers/ids/<id>): one meant for an earlier registration of the broker is refused with
STALE_BROKER_EPOCH, in both directions. Beyond Kafka, which lets -1 ("unknown", from
brokers older than KIP-380) through, -1 is refused too: every broker of an Odradek cluster
sends its epoch, and a request without one did not come from the controller.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, cast

from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.replica_manager import ReplicaManager
from odradek.cluster.controller import NotControllerError
from odradek.cluster.kafka_controller import IsrChange, KafkaController
from odradek.cluster.metadata import PartitionState
from odradek.cluster.zookeeper.store import ZooKeeperMetadataStore
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError
from odradek.protocol.framing import Request
from odradek.protocol.message import Message
from odradek.protocol.messages import (
    alter_partition_request,
    alter_partition_response,
    controlled_shutdown_request,
    controlled_shutdown_response,
    leader_and_isr_request,
    leader_and_isr_response,
    stop_replica_request,
    stop_replica_response,
    update_metadata_request,
    update_metadata_response,
)
from odradek.server.network import RequestContext

log = logging.getLogger(__name__)


class InterBrokerApis:
    def __init__(self, node_id: int, store: ZooKeeperMetadataStore, cache: MetadataCache,
                 replica_manager: ReplicaManager, controller: KafkaController) -> None:
        self.node_id = node_id
        self.store = store
        self.cache = cache
        self.replica_manager = replica_manager
        self.controller = controller

    def handlers(self) -> dict[int, Callable[[Request, RequestContext], Any]]:
        return {
            ApiKey.LEADER_AND_ISR: self.handle_leader_and_isr,
            ApiKey.UPDATE_METADATA: self.handle_update_metadata,
            ApiKey.STOP_REPLICA: self.handle_stop_replica,
            ApiKey.ALTER_PARTITION: self.handle_alter_partition,
            ApiKey.CONTROLLED_SHUTDOWN: self.handle_controlled_shutdown,
        }

    def _stale(self, controller_epoch: int, api: str) -> bool:
        if controller_epoch < self.cache.controller_epoch:
            log.warning("ignoring %s from a controller with epoch %d: the latest is %d", api,
                        controller_epoch, self.cache.controller_epoch)
            return True
        return False

    def _stale_broker_epoch(self, broker_epoch: int, api: str) -> bool:
        current = self.store.broker_epoch
        if broker_epoch < current:
            log.warning("ignoring %s for broker epoch %d: this broker's is %d", api,
                        broker_epoch, current)
            return True
        return False

    # ---- from the controller ----------------------------------------------------------

    async def handle_leader_and_isr(self, request: Request, context: RequestContext) -> Message:
        body = cast(leader_and_isr_request.LeaderAndIsrRequest, request.body)
        version = request.api_version
        response = leader_and_isr_response
        if self._stale(body.controller_epoch, "LeaderAndIsr"):
            return response.LeaderAndIsrResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
        if self._stale_broker_epoch(body.broker_epoch, "LeaderAndIsr"):
            return response.LeaderAndIsrResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
        self.cache.controller_epoch = body.controller_epoch
        if version >= 2:
            topics = [(t.topic_name, t.topic_id, t.partition_states) for t in body.topic_states]
        else:
            by_name: dict[str, list[leader_and_isr_request.LeaderAndIsrPartitionState]] = {}
            for s in body.ungrouped_partition_states:
                by_name.setdefault(s.topic_name, []).append(s)
            topics = [(name, None, states) for name, states in by_name.items()]
        # A topic this broker has not met: its configs first, so its logs are made right.
        unknown = [name for name, _, _ in topics if name not in self.cache.topic_configs]
        for name in unknown:
            topic = await asyncio.to_thread(self.store.topic, name)
            self.cache.topic_configs.setdefault(name, {}).update(
                topic.configs if topic is not None else {})
        states = []
        for name, topic_id, partition_states in topics:
            if topic_id is None:
                known = self.cache.topics.get(name)
                topic_id = known.topic_id if known is not None else None
            for s in partition_states:
                states.append((name, topic_id, s.partition_index, PartitionState(
                    list(s.replicas), s.leader, s.leader_epoch, list(s.isr),
                    controller_epoch=s.controller_epoch,
                    leader_recovery_state=s.leader_recovery_state,
                    partition_epoch=s.partition_epoch,
                    adding_replicas=list(s.adding_replicas),
                    removing_replicas=list(s.removing_replicas))))
        # The coordinators need each topic's partition count: from the cache (which the
        # controller updates first), else from the request.
        counts: dict[str, int] = {}
        for name, _, partition_states in topics:
            known = self.cache.topics.get(name)
            counts[name] = (len(known.partitions) if known is not None
                            else 1 + max((s.partition_index for s in partition_states),
                                         default=-1))
        errors = await self.replica_manager.become_leader_or_follower(states, counts)
        if version >= 5:
            return response.LeaderAndIsrResponse(topics=[
                response.LeaderAndIsrTopicError(topic_id=topic_id, partition_errors=[
                    response.LeaderAndIsrPartitionError(
                        partition_index=s.partition_index,
                        error_code=errors.get((name, s.partition_index), ErrorCode.NONE))
                    for s in partition_states])
                for name, topic_id, partition_states in topics])
        return response.LeaderAndIsrResponse(partition_errors=[
            response.LeaderAndIsrPartitionError(
                topic_name=name, partition_index=s.partition_index,
                error_code=errors.get((name, s.partition_index), ErrorCode.NONE))
            for name, _, partition_states in topics for s in partition_states])

    def handle_update_metadata(self, request: Request, context: RequestContext) -> Message:
        body = cast(update_metadata_request.UpdateMetadataRequest, request.body)
        response = update_metadata_response.UpdateMetadataResponse
        if self._stale(body.controller_epoch, "UpdateMetadata"):
            return response(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
        if self._stale_broker_epoch(body.broker_epoch, "UpdateMetadata"):
            return response(error_code=ErrorCode.STALE_BROKER_EPOCH)
        if request.api_version < 5:  # the partitions were not grouped by topic yet
            grouped: dict[str, update_metadata_request.UpdateMetadataTopicState] = {}
            for s in body.ungrouped_partition_states:
                grouped.setdefault(s.topic_name, update_metadata_request.UpdateMetadataTopicState(
                    topic_name=s.topic_name)).partition_states.append(s)
            body.topic_states = list(grouped.values())
        self.cache.update_metadata(body)
        return response()

    async def handle_stop_replica(self, request: Request, context: RequestContext) -> Message:
        body = cast(stop_replica_request.StopReplicaRequest, request.body)
        version = request.api_version
        response = stop_replica_response
        if self._stale(body.controller_epoch, "StopReplica"):
            return response.StopReplicaResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
        if self._stale_broker_epoch(body.broker_epoch, "StopReplica"):
            return response.StopReplicaResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
        if version >= 3:
            stops = [((t.topic_name, p.partition_index), p.delete_partition)
                     for t in body.topic_states for p in t.partition_states]
        elif version >= 1:
            stops = [((t.name, p), body.delete_partitions)
                     for t in body.topics for p in t.partition_indexes]
        else:
            stops = [((p.topic_name, p.partition_index), body.delete_partitions)
                     for p in body.ungrouped_partitions]
        errors = await self.replica_manager.stop_replicas(stops)
        return response.StopReplicaResponse(partition_errors=[
            response.StopReplicaPartitionError(topic_name=tp[0], partition_index=tp[1],
                                               error_code=errors.get(tp, ErrorCode.NONE))
            for tp, _ in stops])

    # ---- to the controller ------------------------------------------------------------

    async def handle_controlled_shutdown(self, request: Request,
                                         context: RequestContext) -> Message:
        body = cast(controlled_shutdown_request.ControlledShutdownRequest, request.body)
        response = controlled_shutdown_response
        if self.controller.broker_epoch_is_stale(body.broker_id, body.broker_epoch):
            return response.ControlledShutdownResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
        try:
            remaining = await self.controller.controlled_shutdown(body.broker_id)
        except NotControllerError:
            return response.ControlledShutdownResponse(error_code=ErrorCode.NOT_CONTROLLER)
        except KafkaError as e:
            return response.ControlledShutdownResponse(error_code=e.error_code)
        return response.ControlledShutdownResponse(remaining_partitions=[
            response.RemainingPartition(topic_name=t, partition_index=p) for t, p in remaining])

    async def handle_alter_partition(self, request: Request, context: RequestContext) -> Message:
        body = cast(alter_partition_request.AlterPartitionRequest, request.body)
        version = request.api_version
        response = alter_partition_response
        if self.controller.broker_epoch_is_stale(body.broker_id, body.broker_epoch):
            return response.AlterPartitionResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
        names = {t.topic_id: t.name for t in self.controller.topics.values()}
        changes: list[IsrChange] = []
        for t in body.topics:
            name = t.topic_name if version < 2 else names.get(t.topic_id, "")
            for p in t.partitions:
                isr = (p.new_isr if version < 3
                       else [b.broker_id for b in p.new_isr_with_epochs])
                changes.append(IsrChange(name, p.partition_index, p.leader_epoch, list(isr),
                                         p.partition_epoch, p.leader_recovery_state))
        try:
            results = await self.controller.alter_partition(body.broker_id, changes)
        except NotControllerError:
            return response.AlterPartitionResponse(error_code=ErrorCode.NOT_CONTROLLER)
        topics: list[response.TopicData] = []
        i = 0
        for t in body.topics:
            partitions = []
            for p in t.partitions:
                result = results[i]
                i += 1
                data = response.PartitionData(partition_index=p.partition_index,
                                              error_code=result.error_code)
                if result.state is not None:
                    s = result.state
                    data.leader_id = s.leader
                    data.leader_epoch = s.leader_epoch
                    data.isr = list(s.isr)
                    data.leader_recovery_state = s.leader_recovery_state
                    data.partition_epoch = s.partition_epoch
                elif result.error_code == ErrorCode.NONE:
                    data.error_code = ErrorCode.UNKNOWN_SERVER_ERROR
                if t.topic_id not in names and version >= 2:
                    data.error_code = ErrorCode.UNKNOWN_TOPIC_ID
                partitions.append(data)
            topics.append(response.TopicData(topic_name=t.topic_name, topic_id=t.topic_id,
                                             partitions=partitions))
        return response.AlterPartitionResponse(topics=topics)
