"""What the cluster knows of its topics: the records a MetadataStore keeps.

These mirror Kafka's: a topic has a name, a topic id (a UUID, KIP-516) and partitions, and
each partition has its replica assignment and state (leader, leader epoch, in-sync
replicas), as Kafka keeps them in /brokers/topics/<t>/partitions/<p>/state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import UUID


@dataclass(slots=True)
class PartitionState:
    replicas: list[int]
    leader: int
    leader_epoch: int = 0
    isr: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"replicas": self.replicas, "leader": self.leader,
                "leader_epoch": self.leader_epoch, "isr": self.isr}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PartitionState:
        return cls(list(data["replicas"]), int(data["leader"]), int(data["leader_epoch"]),
                   list(data["isr"]))


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

    def allocate_producer_ids(self, count: int) -> int:
        """Reserves `count` producer ids for this broker; returns the first."""
        ...
