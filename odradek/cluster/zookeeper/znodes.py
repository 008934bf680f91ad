"""Kafka's znodes: their paths and the bytes in them, as Kafka's ZkData.scala writes them.

An operator who knows Kafka on ZooKeeper finds the same tree here (zkCli.sh, zooinspector,
`kafka-configs.sh --zookeeper` of old). JSON is compact, as Jackson writes it; numbers that
Kafka writes as strings (timestamps, producer id block bounds, the cluster id znode's
version) are strings here too. Pure functions: no ZooKeeper client in this module.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from odradek.cluster import metadata
from odradek.cluster.metadata import PartitionState, TopicMetadata

TopicPartition = tuple[str, int]

# ---- paths ------------------------------------------------------------------------------------

CLUSTER_ID = "/cluster/id"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
BROKER_SEQID = "/brokers/seqid"
TOPICS = "/brokers/topics"
CONFIG = "/config"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
LOG_DIR_FAILURE_EVENT = 1  # LogDirUtils.LogDirFailureEvent: the only event Kafka defines
CONSUMERS = "/consumers"  # the old consumers' offsets: kept for the layout, never used

# Kafka's ConfigType: the entity types under /config.
CONFIG_TOPICS = "topics"
CONFIG_BROKERS = "brokers"
CONFIG_TYPES = (CONFIG_TOPICS, "clients", "users", CONFIG_BROKERS, "ips")
BROKER_DEFAULT_ENTITY = "<default>"  # /config/brokers/<default>: the cluster-wide configs

# The persistent znodes a broker makes sure of at start-up (ZkData.PersistentZkPaths).
PERSISTENT_PATHS = (
    CONSUMERS, BROKER_IDS, TOPICS, CONFIG_CHANGES, DELETE_TOPICS, BROKER_SEQID,
    ISR_CHANGE_NOTIFICATION, PRODUCER_ID_BLOCK, LOG_DIR_EVENT_NOTIFICATION,
    *(f"{CONFIG}/{t}" for t in CONFIG_TYPES),
)

NO_LEADER = -1  # LeaderAndIsr.NoLeader
INITIAL_CONTROLLER_EPOCH = 0  # what /controller_epoch holds before the first election
LEADER_RECOVERED = 0  # LeaderRecoveryState.RECOVERED (KIP-704); RECOVERING is 1
ZERO_UUID = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID: a topic without an id


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def config_path(entity_type: str, entity: str) -> str:
    return f"{CONFIG}/{entity_type}/{entity}"


def topic_config_path(topic: str) -> str:
    return config_path(CONFIG_TOPICS, topic)


def broker_config_path(entity: str) -> str:
    """`entity` is a broker id or <default>."""
    return config_path(CONFIG_BROKERS, entity)


CONFIG_USERS = "users"


sanitize = metadata.sanitize
desanitize = metadata.desanitize


def user_config_path(user: str) -> str:
    return config_path(CONFIG_USERS, sanitize(user))


CONFIG_CLIENTS = "clients"
# Quota entities' paths under /config (users/<user>[/clients/<id>], clients/<id>).
quota_entity_path = metadata.quota_entity_path
quota_entity_from_path = metadata.quota_entity_from_path


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


# ---- encoding helpers -------------------------------------------------------------------------


def to_json(value: Any) -> bytes:
    """Compact JSON, as Kafka's Json.encodeAsBytes (Jackson) writes it."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def from_json(data: bytes | None) -> Any:
    """The parsed JSON, or None for a znode without data."""
    if not data:
        return None
    return json.loads(data)


def encode_uuid(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString: the 16 bytes in URL-safe base64, unpadded (22 characters)."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def decode_uuid(text: str) -> uuid.UUID:
    """Kafka's base64 form, or the usual hexadecimal form."""
    if len(text) == 22:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
    return uuid.UUID(text)


# ---- /cluster/id, /controller, /controller_epoch ----------------------------------------------


def encode_cluster_id(cluster_id: str) -> bytes:
    return to_json({"version": "1", "id": cluster_id})  # "1": a string, as Kafka writes it


def decode_cluster_id(data: bytes) -> str:
    return str(from_json(data)["id"])


def encode_controller(broker_id: int, timestamp_ms: int) -> bytes:
    return to_json({"version": 1, "brokerid": broker_id, "timestamp": str(timestamp_ms)})


def decode_controller(data: bytes | None) -> int | None:
    """The controller's broker id; None when there is no controller."""
    parsed = from_json(data)
    return None if parsed is None else int(parsed["brokerid"])


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()  # a bare number, not JSON


def decode_controller_epoch(data: bytes) -> int:
    return int(data.decode())


# ---- /brokers/ids/<id> ------------------------------------------------------------------------


class Endpoint(Protocol):
    """What register_broker needs of an advertised listener (odradek.server.config.Listener
    has these)."""

    @property
    def name(self) -> str: ...

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...

    @property
    def security_protocol(self) -> str: ...


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """An endpoint as a registration holds it: listener NAME://host:port and its protocol."""

    name: str
    host: str
    port: int
    security_protocol: str

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A live broker: what /brokers/ids/<id> holds (version 5 of Kafka's format)."""

    broker_id: int
    endpoints: tuple[BrokerEndpoint, ...]
    rack: str | None = None
    jmx_port: int = -1
    # Supported feature version ranges: {"name": {"min_version": 1, "max_version": 3}}.
    features: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    timestamp_ms: int = 0
    version: int = 5
    # Kafka's broker epoch: the czxid of the znode, new with each registration (a restart,
    # a new session). Not in the JSON; -1 when unknown.
    epoch: int = -1


_ENDPOINT = re.compile(r"(?P<name>[^:/]+)://(?:\[(?P<ipv6>[^\]]*)\]|(?P<host>[^:]*)):(?P<port>-?\d+)")


def encode_broker(registration: BrokerRegistration) -> bytes:
    # host and port of the first PLAINTEXT endpoint, for old clients (null and -1 without).
    plaintext = next((e for e in registration.endpoints
                      if e.security_protocol == "PLAINTEXT"), None)
    data: dict[str, Any] = {
        "version": registration.version,
        "host": plaintext.host if plaintext else None,
        "port": plaintext.port if plaintext else -1,
        "endpoints": [str(e) for e in registration.endpoints],
        "jmx_port": registration.jmx_port,
        "timestamp": str(registration.timestamp_ms),
    }
    if registration.rack is not None:
        data["rack"] = registration.rack
    data["listener_security_protocol_map"] = {
        e.name: e.security_protocol for e in registration.endpoints}
    data["features"] = {k: dict(v) for k, v in registration.features.items()}
    return to_json(data)


def decode_broker(broker_id: int, data: bytes) -> BrokerRegistration:
    parsed = from_json(data)
    protocols: dict[str, str] = parsed.get("listener_security_protocol_map") or {}
    if int(parsed["version"]) == 1:
        endpoints = [BrokerEndpoint("PLAINTEXT", parsed["host"], int(parsed["port"]), "PLAINTEXT")]
    else:
        endpoints = []
        for text in parsed["endpoints"]:
            m = _ENDPOINT.fullmatch(text)
            if m is None:
                raise ValueError(f"broker {broker_id}: bad endpoint {text!r}")
            name = m["name"]
            # Without a map, a listener is named after its protocol (Kafka's default map).
            endpoints.append(BrokerEndpoint(name, m["ipv6"] if m["ipv6"] is not None
                                            else m["host"], int(m["port"]),
                                            protocols.get(name, name)))
    return BrokerRegistration(
        broker_id, tuple(endpoints), parsed.get("rack"), int(parsed.get("jmx_port", -1)),
        {str(k): {str(n): int(v) for n, v in r.items()}
         for k, r in (parsed.get("features") or {}).items()},
        int(parsed.get("timestamp", 0)), int(parsed["version"]))


# ---- /brokers/topics/<t> and its partitions' state --------------------------------------------


@dataclass(slots=True)
class TopicAssignment:
    """What /brokers/topics/<t> holds: the topic id and each partition's replicas."""

    topic_id: uuid.UUID
    replicas: dict[int, list[int]]
    adding_replicas: dict[int, list[int]] = field(default_factory=dict)
    removing_replicas: dict[int, list[int]] = field(default_factory=dict)

    @classmethod
    def of(cls, topic: TopicMetadata) -> TopicAssignment:
        parts = sorted(topic.partitions.items())
        return cls(topic.topic_id, {p: list(s.replicas) for p, s in parts},
                   {p: list(s.adding_replicas) for p, s in parts if s.adding_replicas},
                   {p: list(s.removing_replicas) for p, s in parts if s.removing_replicas})


def encode_topic(assignment: TopicAssignment) -> bytes:
    def by_partition(replicas: Mapping[int, list[int]]) -> dict[str, list[int]]:
        return {str(p): list(r) for p, r in sorted(replicas.items())}

    data: dict[str, Any] = {
        "version": 3,
        "partitions": by_partition(assignment.replicas),
        "adding_replicas": by_partition(assignment.adding_replicas),
        "removing_replicas": by_partition(assignment.removing_replicas),
    }
    if assignment.topic_id != ZERO_UUID:
        data["topic_id"] = encode_uuid(assignment.topic_id)
    return to_json(data)


def decode_topic(data: bytes) -> TopicAssignment:
    parsed = from_json(data) or {}

    def by_partition(key: str) -> dict[int, list[int]]:
        return {int(p): [int(r) for r in replicas]
                for p, replicas in (parsed.get(key) or {}).items()}

    topic_id = parsed.get("topic_id")
    return TopicAssignment(decode_uuid(topic_id) if topic_id else ZERO_UUID,
                           by_partition("partitions"), by_partition("adding_replicas"),
                           by_partition("removing_replicas"))


def encode_partition_state(state: PartitionState, controller_epoch: int) -> bytes:
    data: dict[str, Any] = {
        "version": 1, "leader": state.leader, "leader_epoch": state.leader_epoch,
        "controller_epoch": controller_epoch, "isr": list(state.isr)}
    if state.leader_recovery_state != LEADER_RECOVERED:  # written only when RECOVERING
        data["leader_recovery_state"] = state.leader_recovery_state
    return to_json(data)


def decode_partition_state(data: bytes, zk_version: int, replicas: Sequence[int],
                           adding: Sequence[int] = (), removing: Sequence[int] = ()
                           ) -> PartitionState:
    """A partition's state znode (and its znode version, the partition epoch) with its
    replicas from the topic's assignment."""
    parsed = from_json(data)
    return PartitionState(
        list(replicas), int(parsed["leader"]), int(parsed["leader_epoch"]),
        [int(r) for r in parsed["isr"]], controller_epoch=int(parsed["controller_epoch"]),
        leader_recovery_state=int(parsed.get("leader_recovery_state", LEADER_RECOVERED)),
        partition_epoch=zk_version, adding_replicas=list(adding), removing_replicas=list(removing))


def same_leader_and_isr(a: PartitionState, b: PartitionState) -> bool:
    """Whether two states would write the same state znode (the controller epoch aside)."""
    return (a.leader, a.leader_epoch, list(a.isr), a.leader_recovery_state) == (
        b.leader, b.leader_epoch, list(b.isr), b.leader_recovery_state)


# ---- /config --------------------------------------------------------------------------------


def encode_config(configs: Mapping[str, str]) -> bytes:
    return to_json({"version": 1, "config": dict(sorted(configs.items()))})


def decode_config(data: bytes | None) -> dict[str, str]:
    parsed = from_json(data)
    if not isinstance(parsed, dict):
        return {}
    return {str(k): str(v) for k, v in (parsed.get("config") or {}).items()}


def encode_config_change(entity_path: str) -> bytes:
    """A /config/changes/config_change_<seq> notification: `entity_path` is e.g.
    "topics/events" or "brokers/<default>"."""
    return to_json({"version": 2, "entity_path": entity_path})


def decode_config_change(data: bytes) -> str:
    parsed = from_json(data)
    if int(parsed.get("version", 0)) == 1:  # entity_type and entity_name, of old
        return f"{parsed['entity_type']}/{parsed['entity_name']}"
    return str(parsed["entity_path"])


# ---- producer ids, notifications and admin requests -------------------------------------------


def encode_producer_id_block(broker_id: int, first: int, last: int) -> bytes:
    return to_json({"version": 1, "broker": broker_id, "block_start": str(first),
                    "block_end": str(last)})


def decode_producer_id_block(data: bytes) -> tuple[int, int, int]:
    """(broker id, first producer id, last producer id) of the latest reserved block."""
    parsed = from_json(data)
    return int(parsed["broker"]), int(parsed["block_start"]), int(parsed["block_end"])


def _partition_list(partitions: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    return [{"topic": t, "partition": p} for t, p in sorted(set(partitions))]


def encode_isr_change(partitions: Iterable[TopicPartition]) -> bytes:
    return to_json({"version": 1, "partitions": _partition_list(partitions)})


def decode_partition_list(data: bytes) -> set[TopicPartition]:
    """The partitions of an ISR change notification or a preferred replica election."""
    return {(str(e["topic"]), int(e["partition"])) for e in from_json(data)["partitions"]}


def encode_log_dir_event(broker_id: int, event: int = LOG_DIR_FAILURE_EVENT) -> bytes:
    """A /log_dir_event_notification/log_dir_event_<seq>: a log dir of the broker failed
    (KIP-112), so the controller asks it which of its replicas are still online."""
    return to_json({"version": 1, "broker": broker_id, "event": event})


def decode_log_dir_event(data: bytes) -> tuple[int, int]:
    """(broker id, event) of a log dir event notification."""
    parsed = from_json(data)
    return int(parsed["broker"]), int(parsed.get("event", LOG_DIR_FAILURE_EVENT))


def encode_preferred_replica_election(partitions: Iterable[TopicPartition]) -> bytes:
    return to_json({"version": 1, "partitions": _partition_list(partitions)})


def encode_reassignment(replicas: Mapping[TopicPartition, Sequence[int]]) -> bytes:
    return to_json({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r)}
        for (t, p), r in sorted(replicas.items())]})


def decode_reassignment(data: bytes) -> dict[TopicPartition, list[int]]:
    return {(str(e["topic"]), int(e["partition"])): [int(r) for r in e["replicas"]]
            for e in from_json(data)["partitions"]}
