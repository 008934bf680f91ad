"""MetadataCache: what this broker knows of the cluster (Kafka's ZkMetadataCache).

The live brokers with their endpoints per listener, the controller, and every topic's
partitions (leader, leader epoch, replicas, ISR, offline replicas). Metadata and
DescribeCluster answer from it. With ZooKeeper the controller keeps it current with
UpdateMetadata requests; on a single node the local controller's topics are the cache's
(the same dicts), and the only broker is this one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from uuid import UUID

from odradek.cluster.metadata import PartitionState, TopicMetadata
from odradek.protocol.messages.update_metadata_request import UpdateMetadataRequest
from odradek.protocol.primitives import ZERO_UUID

log = logging.getLogger(__name__)

NO_LEADER = -1
# The leader the controller sends in UpdateMetadata for the partitions of a topic being
# deleted (Kafka's LeaderAndIsr.LeaderDuringDelete): brokers forget the partition.
LEADER_DURING_DELETE = -2

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Broker:
    id: int
    endpoints: Mapping[str, tuple[str, int]]  # listener name -> (host, port)
    rack: str | None = None


@dataclass(slots=True)
class PartitionInfo:
    """A partition as a Metadata response shows it."""

    state: PartitionState
    offline_replicas: list[int] = field(default_factory=list)


class MetadataCache:
    def __init__(self, node_id: int, cluster_id: str,
                 topics: dict[str, TopicMetadata] | None = None,
                 topics_by_id: dict[UUID, TopicMetadata] | None = None) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.brokers: dict[int, Broker] = {}
        self.controller_id: int | None = None
        self.controller_epoch = -1
        # Shared with the single-node controller, which changes them in place; with
        # ZooKeeper only update_metadata changes them.
        self.topics: dict[str, TopicMetadata] = {} if topics is None else topics
        self.topics_by_id: dict[UUID, TopicMetadata] = (
            {} if topics_by_id is None else topics_by_id)
        # Topic overrides, read from ZooKeeper when a topic is first met (UpdateMetadata
        # does not carry them); the TopicMetadata in `topics` holds the same dicts.
        self.topic_configs: dict[str, dict[str, str]] = {}
        self.offline_replicas: dict[TopicPartition, list[int]] = {}
        self._changed = asyncio.Event()
        self.listeners: list[Callable[[], None]] = []

    # ---- reads ------------------------------------------------------------------------

    def alive_brokers(self, listener: str) -> list[tuple[Broker, str, int]]:
        """The live brokers that have an endpoint on `listener`, by id."""
        found = []
        for broker_id in sorted(self.brokers):
            broker = self.brokers[broker_id]
            endpoint = broker.endpoints.get(listener)
            if endpoint is not None:
                found.append((broker, endpoint[0], endpoint[1]))
        return found

    def endpoint(self, broker_id: int, listener: str) -> tuple[str, int] | None:
        broker = self.brokers.get(broker_id)
        return None if broker is None else broker.endpoints.get(listener)

    def has_listener(self, broker_id: int, listener: str) -> bool:
        return self.endpoint(broker_id, listener) is not None

    def partition(self, tp: TopicPartition) -> PartitionInfo | None:
        topic = self.topics.get(tp[0])
        state = topic.partitions.get(tp[1]) if topic is not None else None
        if state is None:
            return None
        return PartitionInfo(state, self.offline_replicas.get(tp, []))

    # ---- updates ----------------------------------------------------------------------

    def set_local_broker(self, broker: Broker) -> None:
        """A single node: this broker is the cluster and its controller."""
        self.brokers = {broker.id: broker}
        self.controller_id = broker.id
        self._notify()

    def update_metadata(self, request: UpdateMetadataRequest) -> list[str]:
        """Applies an UpdateMetadata request (the caller checked its controller epoch).
        Returns the topics removed."""
        self.controller_id = request.controller_id
        self.controller_epoch = request.controller_epoch
        self.brokers = {
            b.id: Broker(b.id, {e.listener: (e.host, e.port) for e in b.endpoints}, b.rack)
            for b in request.live_brokers}
        removed = []
        for topic_state in request.topic_states:
            name = topic_state.topic_name
            topic = self.topics.get(name)
            if topic is None:
                topic = TopicMetadata(name, topic_state.topic_id, {},
                                      self.topic_configs.setdefault(name, {}))
            elif topic_state.topic_id != ZERO_UUID and topic_state.topic_id != topic.topic_id:
                # The topic was deleted and created again under the same name.
                self.topics_by_id.pop(topic.topic_id, None)
                topic = TopicMetadata(name, topic_state.topic_id, {}, topic.configs)
            for p in topic_state.partition_states:
                tp = (name, p.partition_index)
                if p.leader == LEADER_DURING_DELETE:
                    topic.partitions.pop(p.partition_index, None)
                    self.offline_replicas.pop(tp, None)
                    continue
                topic.partitions[p.partition_index] = PartitionState(
                    list(p.replicas), p.leader, p.leader_epoch, list(p.isr),
                    controller_epoch=p.controller_epoch, partition_epoch=p.zk_version)
                if p.offline_replicas:
                    self.offline_replicas[tp] = list(p.offline_replicas)
                else:
                    self.offline_replicas.pop(tp, None)
            if topic.partitions:
                self.topics[name] = topic
                self.topics_by_id[topic.topic_id] = topic
            elif name in self.topics:
                del self.topics[name]
                self.topics_by_id.pop(topic.topic_id, None)
                self.topic_configs.pop(name, None)
                removed.append(name)
        self._notify()
        return removed

    def _notify(self) -> None:
        for listener in self.listeners:
            listener()
        self._changed.set()  # wakes the waiters; each update gets a fresh event
        self._changed = asyncio.Event()

    async def wait_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Waits until `predicate()` holds after an update, at most `timeout` seconds;
        whether it holds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                async with asyncio.timeout(remaining):
                    await self._changed.wait()
            except TimeoutError:
                return predicate()
        return True
