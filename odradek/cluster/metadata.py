"""What the cluster knows of its topics: the records a MetadataStore keeps.

These mirror Kafka's: a topic has a name, a topic id (a UUID, KIP-516) and partitions, and
each partition has its replica assignment and state (leader, leader epoch, in-sync
replicas), as Kafka keeps them in /brokers/topics/<t>/partitions/<p>/state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import UUID


@dataclass(slots=True)
class PartitionState:
    replicas: list[int]
    leader: int
    leader_epoch: int = 0
    isr: list[int] = field(default_factory=list)
    # The epoch of the controller that last wrote the state (ZooKeeper; 0 on one node).
    controller_epoch: int = 0
    leader_recovery_state: int = 0  # 0 RECOVERED, 1 RECOVERING (KIP-704)
    # Kafka's partition epoch: with ZooKeeper, the version of the partition's state znode,
    # the expected version of its next conditional update (-1: no state znode yet).
    partition_epoch: int = 0
    # Replicas being added and removed by a reassignment (KIP-455).
    adding_replicas: list[int] = field(default_factory=list)
    removing_replicas: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"replicas": self.replicas, "leader": self.leader,
                                "leader_epoch": self.leader_epoch, "isr": self.isr}
        # The fields added for the cluster are written only when set, so a single node's
        # metadata file reads as before.
        for name, default in _OPTIONAL_STATE_FIELDS.items():
            value = getattr(self, name)
            if value != default:
                data[name] = value
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PartitionState:
        return cls(list(data["replicas"]), int(data["leader"]), int(data["leader_epoch"]),
                   list(data["isr"]), int(data.get("controller_epoch", 0)),
                   int(data.get("leader_recovery_state", 0)),
                   int(data.get("partition_epoch", 0)),
                   list(data.get("adding_replicas", [])), list(data.get("removing_replicas", [])))


_OPTIONAL_STATE_FIELDS: dict[str, Any] = {
    "controller_epoch": 0, "leader_recovery_state": 0, "partition_epoch": 0,
    "adding_replicas": [], "removing_replicas": []}


@dataclass(slots=True)
class TopicMetadata:
    name: str
    topic_id: UUID
    partitions: dict[int, PartitionState]
    configs: dict[str, str] = field(default_factory=dict)  # the topic's overrides only

    def to_json(self) -> dict[str, Any]:
        return {
            "topic_id": str(self.topic_id),
            "partitions": {str(p): s.to_json() for p, s in sorted(self.partitions.items())},
            "configs": dict(sorted(self.configs.items())),
        }

    @classmethod
    def from_json(cls, name: str, data: dict[str, Any]) -> TopicMetadata:
        return cls(
            name, UUID(data["topic_id"]),
            {int(p): PartitionState.from_json(s) for p, s in data["partitions"].items()},
            {str(k): str(v) for k, v in data.get("configs", {}).items()},
        )


class MetadataStore(Protocol):
    """Where the cluster's metadata lives. Every change is durable when the call returns."""

    cluster_id: str

    def topics(self) -> dict[str, TopicMetadata]: ...

    def create_topic(self, topic: TopicMetadata) -> None: ...

    def delete_topic(self, name: str) -> None: ...

    def update_topic(self, topic: TopicMetadata) -> None: ...

    def broker_configs(self) -> dict[str, str]: ...

    def set_broker_configs(self, configs: dict[str, str]) -> None: ...

    def user_configs(self) -> dict[str, dict[str, str]]:
        """Each user's configs (SCRAM credentials by mechanism, quotas), by user name."""
        ...

    def alter_user_configs(self, changes: Mapping[str, Mapping[str, str | None]]) -> None:
        """Sets (or, for None, removes) configs of users."""
        ...

    def allocate_producer_ids(self, count: int) -> int:
        """Reserves `count` producer ids for this broker; returns the first."""
        ...
