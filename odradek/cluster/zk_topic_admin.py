"""ZkTopicAdmin: topic changes made by any broker of a cluster on ZooKeeper.

As Kafka's AdminZkClient, a broker that takes CreateTopics, DeleteTopics, CreatePartitions
or a topic config change validates it against what it knows of the cluster (its
MetadataCache) and writes it to ZooKeeper; the elected controller, watching, elects the
leaders and tells the brokers, whose caches then show the change. The checks and the
replica assignment are the single-node controller's (odradek/cluster/controller.py).
Every ZooKeeper call runs in a worker thread: kazoo blocks until ZooKeeper answers, and
the event loop serves the broker's other clients meanwhile.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable, Mapping
from uuid import UUID

from odradek.cluster.controller import Controller, PartitionListener, UnknownTopicError
from odradek.cluster.metadata import PartitionState, TopicMetadata
from odradek.cluster.topics import TopicExistsError
from odradek.cluster.zookeeper.store import ZooKeeperMetadataStore

log = logging.getLogger(__name__)


class ZkTopicAdmin(Controller):
    single_node = False

    def __init__(self, node_id: int, store: ZooKeeperMetadataStore,
                 topics: dict[str, TopicMetadata], topics_by_id: dict[UUID, TopicMetadata],
                 brokers: Callable[[], Mapping[int, str | None]]) -> None:
        # The topics are the broker's MetadataCache's, which UpdateMetadata keeps current.
        self.node_id = node_id
        self.store = store  # type: ignore[assignment]
        self.topics = topics
        self.topics_by_id = topics_by_id
        self.listener = None
        self._brokers = brokers
        self._changes = asyncio.Lock()

    @property
    def live_brokers(self) -> list[int]:
        return sorted(self._brokers())

    def broker_racks(self) -> dict[int, str | None]:
        return dict(self._brokers())

    async def startup(self, listener: PartitionListener) -> None:
        """Nothing to hand out: the controller's LeaderAndIsr requests do that."""

    async def _create(self, topic: TopicMetadata) -> None:
        try:
            await asyncio.to_thread(self.store.create_topic, topic)
        except ValueError as e:  # another broker created it, and our cache is behind
            raise TopicExistsError(f"topic {topic.name!r} already exists") from e
        log.info("created topic %s with %d partitions (id %s) in ZooKeeper", topic.name,
                 len(topic.partitions), topic.topic_id)

    async def _delete(self, topic: TopicMetadata) -> None:
        await asyncio.to_thread(self.store.delete_topic, topic.name)
        log.info("deleted topic %s from ZooKeeper", topic.name)

    async def _add_partitions(self, topic: TopicMetadata,
                              new: dict[int, PartitionState]) -> None:
        changed = _copy(topic)
        changed.partitions.update(new)
        await asyncio.to_thread(self.store.update_topic, changed)

    async def alter_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        async with self._changes:
            topic = self.topics.get(name)
            if topic is None:
                raise UnknownTopicError(f"topic {name!r} does not exist")
            changed = _copy(topic)
            changed.configs = dict(configs)
            await asyncio.to_thread(self.store.update_topic, changed)
            # This broker's copy changes now; the others' at the change notification.
            topic.configs.clear()
            topic.configs.update(configs)


def _copy(topic: TopicMetadata) -> TopicMetadata:
    """A copy for a worker thread to write: the cache's own states change on the loop
    (UpdateMetadata), and the store sets the epochs of the states it writes. Cheaper than
    a deepcopy (the lists in a state are replaced, never changed in place)."""
    return TopicMetadata(topic.name, topic.topic_id,
                         {p: copy.copy(s) for p, s in topic.partitions.items()},
                         dict(topic.configs))
