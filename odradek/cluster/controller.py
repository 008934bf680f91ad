"""The controller: topic creation and deletion, partition assignment and leadership.

On a single node (the embedded store) the controller lives in the broker and every
partition's replica set, leader and ISR is this broker: it changes the store, then tells
the local broker (a `PartitionListener`) what it now leads. With ZooKeeper, ZkTopicAdmin
(a subclass) makes the same changes as ZooKeeper writes from any broker, and the elected
KafkaController tells the brokers which replicas to lead or follow.

Changes are coroutines, one at a time: the store's writes (a file with its fsync, or
ZooKeeper round trips) run in worker threads and the local broker creates or deletes the
logs off the event loop, so that a topic of thousands of partitions never stalls the
broker's other clients. A new topic (or partition) is shown in the metadata only once
this broker leads it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping
from typing import Protocol

from odradek.cluster.assignment import assign_replicas
from odradek.cluster.metadata import MetadataStore, PartitionState, TopicMetadata
from odradek.cluster.topics import (
    InvalidTopicError,
    TopicExistsError,
    collision_key,
    is_internal,
    validate_topic_name,
)
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError

log = logging.getLogger(__name__)

MAX_PARTITIONS = 2**31 - 1


class InvalidPartitionsError(KafkaError):
    error_code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(KafkaError):
    error_code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidReplicaAssignmentError(KafkaError):
    error_code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


class UnknownTopicError(KafkaError):
    error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class InvalidRequestError(KafkaError):
    error_code = ErrorCode.INVALID_REQUEST


class NotControllerError(Exception):
    """This broker is not the active controller (of a ZooKeeper cluster)."""


class PartitionListener(Protocol):
    async def become_leader(self, topic: TopicMetadata, partitions: list[int]) -> None: ...

    async def remove_partitions(self, topic: TopicMetadata) -> None: ...

    def topic_config_changed(self, topic: TopicMetadata) -> None: ...


class Controller:
    # One node: internal topics get at most one replica, whatever their replication
    # factor says (a cluster waits until it has enough brokers instead).
    single_node = True

    def __init__(self, node_id: int, store: MetadataStore) -> None:
        self.node_id = node_id
        self.store = store
        self.topics: dict[str, TopicMetadata] = store.topics()
        self.topics_by_id = {t.topic_id: t for t in self.topics.values()}
        self.listener: PartitionListener | None = None
        # Topic changes one at a time, as Kafka's controller takes its events: each checks
        # what the one before it left (a name is taken once its creation is done).
        self._changes = asyncio.Lock()

    @property
    def live_brokers(self) -> list[int]:
        return [self.node_id]

    async def startup(self, listener: PartitionListener) -> None:
        """Hands every partition to the local broker, as after a controller election."""
        self.listener = listener
        for topic in list(self.topics.values()):
            await listener.become_leader(topic, sorted(topic.partitions))

    # ---- checks (also used for validate_only requests) --------------------------------

    def check_new_topic(self, name: str, partitions: int, replication_factor: int,
                        assignments: Mapping[int, list[int]] | None = None) -> None:
        validate_topic_name(name)
        if name in self.topics:
            raise TopicExistsError(f"topic {name!r} already exists")
        key = collision_key(name)
        clash = next((t for t in self.topics if collision_key(t) == key), None)
        if clash is not None:
            raise InvalidTopicError(f"topic {name!r} collides with existing topic {clash!r}: "
                                 "'.' and '_' may not tell topics apart")
        if assignments:
            self._check_assignments(assignments, range(len(assignments)))
            return
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise InvalidPartitionsError(f"number of partitions must be at least 1, "
                                         f"not {partitions}")
        self.check_replication_factor(replication_factor)

    def check_replication_factor(self, replication_factor: int) -> None:
        if replication_factor < 1 or replication_factor > 32767:
            raise InvalidReplicationFactorError(
                f"replication factor must be at least 1, not {replication_factor}")
        if replication_factor > len(self.live_brokers):
            raise InvalidReplicationFactorError(
                f"replication factor {replication_factor} is larger than the number of "
                f"available brokers ({len(self.live_brokers)})")

    def _check_assignments(self, assignments: Mapping[int, list[int]], expected: range,
                           replication_factor: int | None = None) -> None:
        """Manual replica assignments, refused as Kafka's controller refuses them
        (INVALID_REPLICA_ASSIGNMENT)."""
        if sorted(assignments) != list(expected):
            raise InvalidReplicaAssignmentError(
                f"replica assignments must be given for partitions {expected.start} to "
                f"{expected.stop - 1}, in order")
        for p, replicas in assignments.items():
            if not replicas:
                raise InvalidReplicaAssignmentError(
                    f"The manual partition assignment of partition {p} is an empty replica "
                    "list.")
            if replication_factor is None:
                replication_factor = len(replicas)
            if len(replicas) != replication_factor:
                raise InvalidReplicaAssignmentError(
                    f"The manual partition assignment includes a partition with "
                    f"{len(replicas)} replica(s), but this is inconsistent with previous "
                    f"partitions, which have {replication_factor} replica(s).")
            if len(set(replicas)) != len(replicas):
                raise InvalidReplicaAssignmentError(
                    f"The manual partition assignment of partition {p} lists a broker twice: "
                    f"{replicas}")
            unknown = [r for r in replicas if r not in self.live_brokers]
            if unknown:
                raise InvalidReplicaAssignmentError(
                    f"The manual partition assignment includes broker {unknown[0]}, but no "
                    "such broker is registered.")

    # ---- changes ----------------------------------------------------------------------

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: Mapping[str, str],
                           assignments: Mapping[int, list[int]] | None = None
                           ) -> TopicMetadata:
        """Creates the topic; the configs must have been validated by the caller."""
        async with self._changes:
            self.check_new_topic(name, partitions, replication_factor, assignments)
            if not assignments:
                assignments = await self._assign(range(partitions), replication_factor)
            topic = TopicMetadata(
                name, uuid.uuid4(),
                {p: PartitionState(list(r), r[0], 0, list(r)) for p, r in assignments.items()},
                dict(configs),
            )
            await self._create(topic)
            return topic

    async def _create(self, topic: TopicMetadata) -> None:
        name = topic.name
        await asyncio.to_thread(self.store.create_topic, topic)
        log.info("created topic %s with %d partitions (id %s)", name, len(topic.partitions),
                 topic.topic_id)
        try:
            if self.listener is not None:
                await self.listener.become_leader(topic, sorted(topic.partitions))
        finally:  # stored: shown even if some of its partitions failed here
            self.topics[name] = topic
            self.topics_by_id[topic.topic_id] = topic

    def broker_racks(self) -> dict[int, str | None]:
        """The live brokers and their racks, for replica assignment."""
        return dict.fromkeys(self.live_brokers)

    async def _assign(self, partitions: range, replication_factor: int
                      ) -> dict[int, list[int]]:
        # Pure Python, but tens of milliseconds for thousands of partitions: a worker
        # thread gives the GIL back to the event loop every few milliseconds meanwhile.
        return await asyncio.to_thread(assign_replicas, len(partitions), replication_factor,
                                       self.broker_racks(), first_partition=partitions.start)

    async def delete_topic(self, name: str) -> TopicMetadata:
        async with self._changes:
            topic = self.topics.get(name)
            if topic is None:
                raise UnknownTopicError(f"topic {name!r} does not exist")
            await self._delete(topic)
            return topic

    async def _delete(self, topic: TopicMetadata) -> None:
        name = topic.name
        await asyncio.to_thread(self.store.delete_topic, name)
        del self.topics[name]
        self.topics_by_id.pop(topic.topic_id, None)
        log.info("deleted topic %s", name)
        if self.listener is not None:
            await self.listener.remove_partitions(topic)

    async def create_partitions(self, name: str, count: int,
                                assignments: list[list[int]] | None = None,
                                validate_only: bool = False) -> None:
        """Adds partitions up to `count` (Kafka's messages and error codes)."""
        async with self._changes:
            await self._create_partitions(name, count, assignments, validate_only)

    async def _create_partitions(self, name: str, count: int,
                                 assignments: list[list[int]] | None,
                                 validate_only: bool) -> None:
        topic = self.topics.get(name)
        if topic is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        current = len(topic.partitions)
        if count == current:
            raise InvalidPartitionsError(f"Topic already has {current} partition(s).")
        if count < current:
            raise InvalidPartitionsError(f"The topic {name} currently has {current} "
                                         f"partition(s); {count} would not be an increase.")
        if count > MAX_PARTITIONS:
            raise InvalidPartitionsError(f"{count} partitions are too many")
        new = range(current, count)
        rf = len(next(iter(topic.partitions.values())).replicas)
        if assignments is not None:
            if len(assignments) != len(new):
                raise InvalidReplicaAssignmentError(
                    f"Attempted to add {len(new)} additional partition(s), but only "
                    f"{len(assignments)} assignment(s) were specified.")
            given = dict(zip(new, assignments, strict=True))
            self._check_assignments(given, new, rf)
        else:
            self.check_replication_factor(rf)
            given = await self._assign(new, rf)
        if validate_only:
            return
        await self._add_partitions(topic, {p: PartitionState(list(r), r[0], 0, list(r))
                                           for p, r in given.items()})
        log.info("topic %s now has %d partitions", name, count)

    async def _add_partitions(self, topic: TopicMetadata,
                              new: dict[int, PartitionState]) -> None:
        changed = TopicMetadata(topic.name, topic.topic_id, {**topic.partitions, **new},
                                topic.configs)
        await asyncio.to_thread(self.store.update_topic, changed)
        try:
            if self.listener is not None:
                await self.listener.become_leader(changed, sorted(new))
        finally:  # shown once led, as a new topic
            topic.partitions.update(new)

    async def alter_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """Replaces the topic's overrides; the caller validated them."""
        async with self._changes:
            topic = self.topics.get(name)
            if topic is None:
                raise UnknownTopicError(f"topic {name!r} does not exist")
            await asyncio.to_thread(self.store.update_topic, TopicMetadata(
                topic.name, topic.topic_id, topic.partitions, dict(configs)))
            topic.configs.clear()  # in place: the topic's TopicMetadata copies share it
            topic.configs.update(configs)
            if self.listener is not None:
                self.listener.topic_config_changed(topic)

    def is_internal(self, name: str) -> bool:
        return is_internal(name)

