"""What the cluster knows of its topics: the records a MetadataStore keeps.

These mirror Kafka's: a topic has a name, a topic id (a UUID, KIP-516) and partitions, and
each partition has its replica assignment and state (leader, leader epoch, in-sync
replicas), as Kafka keeps them in /brokers/topics/<t>/partitions/<p>/state.
"""

from __future__ import annotations

import urllib.parse
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


# A client quota entity (KIP-546): ("user", name) and/or ("client-id", name) pairs, users
# first, a None name being <default>.
QuotaEntity = tuple[tuple[str, str | None], ...]
QUOTA_CONFIG_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
                     "controller_mutation_rate")


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

    def quota_configs(self) -> dict[QuotaEntity, dict[str, str]]:
        """Each client quota entity's quota configs (producer_byte_rate...)."""
        ...

    def alter_quota_configs(self, changes: Mapping[QuotaEntity, Mapping[str, str | None]]
                            ) -> None:
        """Sets (or, for None, removes) quota configs of entities, in one change."""
        ...

    def allocate_producer_ids(self, count: int) -> int:
        """Reserves `count` producer ids for this broker; returns the first."""
        ...


def merge_config(current: Mapping[str, str], updates: Mapping[str, str | None]
                 ) -> dict[str, str]:
    """An entity's configs after `updates`: values set, None removes."""
    merged = {k: v for k, v in current.items() if k not in updates}
    merged.update({k: v for k, v in updates.items() if v is not None})
    return merged


def sanitize(name: str) -> str:
    """A user or client id as a znode name: Kafka's Sanitizer (URL encoding, with "*" as
    %2A and a space as %20)."""
    return urllib.parse.quote(name, safe="._-").replace("~", "%7E")


def desanitize(name: str) -> str:
    return urllib.parse.unquote(name)


DEFAULT_ENTITY = "<default>"  # /config/users/<default>, /config/clients/<default>
_ENTITY_TYPES = {"user": "users", "client-id": "clients"}
_ENTITY_NAMES = {v: k for k, v in _ENTITY_TYPES.items()}


def quota_entity_path(entity: tuple[tuple[str, str | None], ...]) -> str:
    """A quota entity's path under /config, as in its change notification: users/<user>,
    users/<user>/clients/<client-id>, clients/<client-id> (names sanitized, None being
    <default>)."""
    return "/".join(f"{_ENTITY_TYPES[kind]}/{DEFAULT_ENTITY if name is None else sanitize(name)}"
                    for kind, name in entity)


def quota_entity_from_path(path: str) -> tuple[tuple[str, str | None], ...] | None:
    """The quota entity of a path quota_entity_path made (None: not one)."""
    parts = path.split("/")
    if len(parts) not in (2, 4) or any(not p for p in parts):
        return None
    entity = []
    for i in range(0, len(parts), 2):
        kind = _ENTITY_NAMES.get(parts[i])
        if kind is None:
            return None
        entity.append((kind, None if parts[i + 1] == DEFAULT_ENTITY
                       else desanitize(parts[i + 1])))
    if len(entity) == 2 and [k for k, _ in entity] != ["user", "client-id"]:
        return None
    return tuple(entity)
