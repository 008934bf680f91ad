"""Kafka 3.9's broker and topic configs, as data: the names a ZooKeeper-mode Kafka 3.9
broker accepts, with Kafka's type, default, valid values, importance and update mode.

Sources (Apache Kafka 3.9.0: its docs were generated at 3.9.0-rc3, and the 3.9 branch's
config sources are the same as that tag's):
- broker configs: the generated table of the 3.9 documentation (kafka-site
  39/generated/kafka_config.html, which `KafkaConfig.configDef.toHtml` writes from
  core/src/main/scala/kafka/server/KafkaConfig.scala and
  server/src/main/java/org/apache/kafka/server/config/*.java);
- the internal broker configs, which that table leaves out (`ConfigDef.defineInternal` in
  ServerConfigs, KRaftConfigs, ReplicationConfigs, GroupCoordinatorConfig,
  ShareGroupConfig, RemoteLogManagerConfig, TransactionLogConfigs and LogConfig);
- the broker quotas that can only be set dynamically (QuotaConfigs.brokerQuotaConfigs,
  set on brokers by kafka-reassign-partitions.sh --throttle);
- topic configs: kafka-site 39/generated/topic_config.html (LogConfig.java).

This is Kafka's reference, not Odradek's settings: `odradek.server.config.BROKER_CONFIGS`
and `odradek.storage.config.TOPIC_CONFIGS` define what Odradek does, with Kafka 4.0's
defaults where it implements a setting. A name they do not implement is accepted from
`KAFKA_39_BROKER_CONFIGS`, with its Kafka 3.9 type, default and valid values, and has no
effect. `area` says which part of Kafka a setting belongs to; server/config.py says, per
area, why Odradek has no use for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum, IntEnum
from types import MappingProxyType
from typing import Any

from odradek.storage.config import (
    INT_MAX,
    LONG_MAX,
    KafkaVersion,
    OneOf,
    Range,
    RangeOr,
    Validator,
)

__all__ = [
    "KAFKA_39_BROKER_CONFIGS",
    "KAFKA_39_TOPIC_CONFIGS",
    "Importance",
    "Items",
    "KafkaBrokerConfig",
    "KafkaTopicConfig",
    "KafkaType",
    "NonEmpty",
    "UpdateMode",
]


class KafkaType(IntEnum):
    """Kafka's ConfigDef types; the values are DescribeConfigs' ConfigType codes."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class Importance(Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class UpdateMode(Enum):
    """How a broker config can be changed (the documentation's "Update Mode")."""

    READ_ONLY = "read-only"  # server.properties only
    PER_BROKER = "per-broker"  # dynamically, for one broker (not as a cluster-wide default)
    CLUSTER_WIDE = "cluster-wide"  # dynamically, for one broker or cluster-wide


@dataclass(frozen=True, slots=True)
class Items:
    """A comma-separated list whose items are all among `values` (Kafka's ValidList.in)."""

    values: tuple[str, ...]

    def __call__(self, value: Any) -> bool:
        items = value.split(",") if isinstance(value, str) else value
        return all(item.strip() in self.values for item in items if item.strip())

    def __str__(self) -> str:
        return "must be a comma-separated list of " + ", ".join(self.values)


@dataclass(frozen=True, slots=True)
class NonEmpty:
    """Not empty (Kafka's NonEmptyString and non-empty ValidList)."""

    def __call__(self, value: Any) -> bool:
        return bool(value.strip() if isinstance(value, str) else value)

    def __str__(self) -> str:
        return "must not be empty"


@dataclass(frozen=True, slots=True)
class KafkaBrokerConfig:
    """One broker config as Kafka 3.9 defines it."""

    name: str
    type: KafkaType
    default: Any  # typed: int, float, bool, str (a list as Kafka writes it: "a,b"); None: null
    importance: Importance
    update_mode: UpdateMode
    area: str  # the part of Kafka it belongs to (see the module doc)
    validator: Validator | None = None  # Kafka's valid values
    internal: bool = False  # left out of Kafka's documentation and of DescribeConfigs' list

    @property
    def dynamic(self) -> bool:
        return self.update_mode is not UpdateMode.READ_ONLY


@dataclass(frozen=True, slots=True)
class KafkaTopicConfig:
    """One topic config as Kafka 3.9 defines it."""

    name: str
    type: KafkaType
    default: Any
    importance: Importance
    server_default: str | None  # the broker config that supplies its default


BOOLEAN, STRING, INT, SHORT = KafkaType.BOOLEAN, KafkaType.STRING, KafkaType.INT, KafkaType.SHORT
LONG, DOUBLE, LIST = KafkaType.LONG, KafkaType.DOUBLE, KafkaType.LIST
CLASS, PASSWORD = KafkaType.CLASS, KafkaType.PASSWORD
HIGH, MED, LOW = Importance.HIGH, Importance.MEDIUM, Importance.LOW
R, B, C = UpdateMode.READ_ONLY, UpdateMode.PER_BROKER, UpdateMode.CLUSTER_WIDE
_POOL_SIZE = RangeOr(Range(1, INT_MAX), -1, "remote.log.manager.thread.pool.size")


def _b(name: str, type_: KafkaType, default: Any, importance: Importance, mode: UpdateMode,
       area: str, validator: Validator | None = None, *, internal: bool = False
       ) -> KafkaBrokerConfig:
    return KafkaBrokerConfig(name, type_, default, importance, mode, area, validator, internal)


# name, type, default, importance, update mode, area, valid values; by name.
_BROKER = (
    _b("advertised.listeners", STRING, None, HIGH, B, "network"),
    _b("alter.config.policy.class.name", CLASS, None, LOW, R, "auth"),
    _b("alter.log.dirs.replication.quota.window.num", INT, 11, LOW, R, "quota", Range(1)),
    _b("alter.log.dirs.replication.quota.window.size.seconds", INT, 1, LOW, R, "quota", Range(1)),
    _b("authorizer.class.name", STRING, "", LOW, R, "auth"),
    _b("auto.create.topics.enable", BOOLEAN, True, HIGH, R, "server"),
    _b("auto.include.jmx.reporter", BOOLEAN, True, LOW, R, "metrics"),
    _b("auto.leader.rebalance.enable", BOOLEAN, True, HIGH, R, "replication"),
    _b("background.threads", INT, 10, HIGH, C, "threads", Range(1)),
    _b("broker.heartbeat.interval.ms", INT, 2000, MED, R, "kraft"),
    _b("broker.id", INT, -1, HIGH, R, "server"),
    _b("broker.id.generation.enable", BOOLEAN, True, MED, R, "server"),
    _b("broker.rack", STRING, None, MED, R, "replication"),
    _b("broker.session.timeout.ms", INT, 9000, MED, R, "kraft"),
    _b("client.quota.callback.class", CLASS, None, LOW, R, "quota"),
    _b("compression.gzip.level",
       INT, -1, MED, C, "log", RangeOr(Range(1, 9), -1, "the codec's default")),
    _b("compression.lz4.level", INT, 9, MED, C, "log", Range(1, 17)),
    _b("compression.type",
       STRING, "producer", HIGH, C, "log",
       OneOf(("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"))),
    _b("compression.zstd.level", INT, 3, MED, C, "log", Range(-131072, 22)),
    _b("connection.failed.authentication.delay.ms", INT, 100, LOW, R, "sasl", Range(0)),
    _b("connections.max.idle.ms", LONG, 600000, MED, R, "network"),
    _b("connections.max.reauth.ms", LONG, 0, MED, R, "sasl"),
    _b("control.plane.listener.name", STRING, None, HIGH, R, "network"),
    _b("controlled.shutdown.enable", BOOLEAN, True, MED, R, "replication"),
    _b("controlled.shutdown.max.retries", INT, 3, MED, R, "replication"),
    _b("controlled.shutdown.retry.backoff.ms", LONG, 5000, MED, R, "replication"),
    _b("controller.listener.names", STRING, None, HIGH, R, "kraft"),
    _b("controller.quorum.append.linger.ms", INT, 25, MED, R, "kraft"),
    _b("controller.quorum.bootstrap.servers", LIST, "", HIGH, R, "kraft"),
    _b("controller.quorum.election.backoff.max.ms", INT, 1000, HIGH, R, "kraft"),
    _b("controller.quorum.election.timeout.ms", INT, 1000, HIGH, R, "kraft"),
    _b("controller.quorum.fetch.timeout.ms", INT, 2000, HIGH, R, "kraft"),
    _b("controller.quorum.request.timeout.ms", INT, 2000, MED, R, "kraft"),
    _b("controller.quorum.retry.backoff.ms", INT, 20, LOW, R, "kraft"),
    _b("controller.quorum.voters", LIST, "", HIGH, R, "kraft"),
    _b("controller.quota.window.num", INT, 11, LOW, R, "quota", Range(1)),
    _b("controller.quota.window.size.seconds", INT, 1, LOW, R, "quota", Range(1)),
    _b("controller.socket.timeout.ms", INT, 30000, MED, R, "replication"),
    _b("create.topic.policy.class.name", CLASS, None, LOW, R, "auth"),
    _b("default.replication.factor", INT, 1, MED, R, "server"),
    _b("delegation.token.expiry.check.interval.ms", LONG, 3600000, LOW, R, "auth", Range(1)),
    _b("delegation.token.expiry.time.ms", LONG, 86400000, MED, R, "auth", Range(1)),
    _b("delegation.token.master.key", PASSWORD, None, MED, R, "auth"),
    _b("delegation.token.max.lifetime.ms", LONG, 604800000, MED, R, "auth", Range(1)),
    _b("delegation.token.secret.key", PASSWORD, None, MED, R, "auth"),
    _b("delete.records.purgatory.purge.interval.requests", INT, 1, MED, R, "network"),
    _b("delete.topic.enable", BOOLEAN, True, HIGH, R, "server"),
    _b("early.start.listeners", STRING, None, HIGH, R, "auth"),
    _b("eligible.leader.replicas.enable", BOOLEAN, False, HIGH, R, "kraft"),
    _b("fetch.max.bytes", INT, 57671680, MED, R, "network", Range(1024)),
    _b("fetch.purgatory.purge.interval.requests", INT, 1000, MED, R, "network"),
    _b("follower.replication.throttled.rate",
       LONG, LONG_MAX, MED, C, "quota", Range(0), internal=True),
    _b("group.consumer.assignors", LIST,
       "org.apache.kafka.coordinator.group.assignor.UniformAssignor,"
       "org.apache.kafka.coordinator.group.assignor.RangeAssignor", MED, R, "consumer-groups"),
    _b("group.consumer.heartbeat.interval.ms", INT, 5000, MED, R, "consumer-groups", Range(1)),
    _b("group.consumer.max.heartbeat.interval.ms",
       INT, 15000, MED, R, "consumer-groups", Range(1)),
    _b("group.consumer.max.session.timeout.ms", INT, 60000, MED, R, "consumer-groups", Range(1)),
    _b("group.consumer.max.size", INT, INT_MAX, MED, R, "consumer-groups", Range(1)),
    _b("group.consumer.migration.policy",
       STRING, "disabled", MED, R, "consumer-groups",
       OneOf(("disabled", "downgrade", "upgrade", "bidirectional")), internal=True),
    _b("group.consumer.min.heartbeat.interval.ms", INT, 5000, MED, R, "consumer-groups", Range(1)),
    _b("group.consumer.min.session.timeout.ms", INT, 45000, MED, R, "consumer-groups", Range(1)),
    _b("group.consumer.session.timeout.ms", INT, 45000, MED, R, "consumer-groups", Range(1)),
    _b("group.coordinator.append.linger.ms", INT, 10, MED, R, "consumer-groups", Range(0)),
    _b("group.coordinator.new.enable", BOOLEAN, False, MED, R, "consumer-groups", internal=True),
    _b("group.coordinator.rebalance.protocols",
       LIST, "classic", MED, R, "consumer-groups",
       Items(("consumer", "classic", "share", "unknown"))),
    _b("group.coordinator.threads", INT, 1, MED, R, "consumer-groups", Range(1)),
    _b("group.initial.rebalance.delay.ms", INT, 3000, MED, R, "groups"),
    _b("group.max.session.timeout.ms", INT, 1800000, MED, R, "groups"),
    _b("group.max.size", INT, INT_MAX, MED, R, "groups", Range(1)),
    _b("group.min.session.timeout.ms", INT, 6000, MED, R, "groups"),
    _b("group.share.delivery.count.limit", INT, 5, MED, R, "share-groups", Range(2, 10)),
    _b("group.share.enable", BOOLEAN, False, MED, R, "share-groups", internal=True),
    _b("group.share.heartbeat.interval.ms", INT, 5000, MED, R, "share-groups", Range(1)),
    _b("group.share.max.groups", SHORT, 10, MED, R, "share-groups", Range(1, 100)),
    _b("group.share.max.heartbeat.interval.ms", INT, 15000, MED, R, "share-groups", Range(1)),
    _b("group.share.max.record.lock.duration.ms",
       INT, 60000, MED, R, "share-groups", Range(30000, 3600000)),
    _b("group.share.max.session.timeout.ms", INT, 60000, MED, R, "share-groups", Range(1)),
    _b("group.share.max.size", SHORT, 200, MED, R, "share-groups", Range(10, 1000)),
    _b("group.share.min.heartbeat.interval.ms", INT, 5000, MED, R, "share-groups", Range(1)),
    _b("group.share.min.record.lock.duration.ms",
       INT, 15000, MED, R, "share-groups", Range(1000, 30000)),
    _b("group.share.min.session.timeout.ms", INT, 45000, MED, R, "share-groups", Range(1)),
    _b("group.share.partition.max.record.locks",
       INT, 200, MED, R, "share-groups", Range(100, 10000)),
    _b("group.share.record.lock.duration.ms",
       INT, 30000, MED, R, "share-groups", Range(1000, 60000)),
    _b("group.share.session.timeout.ms", INT, 45000, MED, R, "share-groups", Range(1)),
    _b("initial.broker.registration.timeout.ms", INT, 60000, MED, R, "kraft"),
    _b("inter.broker.listener.name", STRING, None, MED, R, "network"),
    _b("inter.broker.protocol.version", STRING, "3.9-IV0", MED, R, "protocol", KafkaVersion()),
    _b("kafka.metrics.polling.interval.secs", INT, 10, LOW, R, "metrics", Range(1)),
    _b("kafka.metrics.reporters", LIST, "", LOW, R, "metrics"),
    _b("leader.imbalance.check.interval.seconds", LONG, 300, HIGH, R, "replication", Range(1)),
    _b("leader.imbalance.per.broker.percentage", INT, 10, HIGH, R, "replication"),
    _b("leader.replication.throttled.rate",
       LONG, LONG_MAX, MED, C, "quota", Range(0), internal=True),
    _b("listener.security.protocol.map",
       STRING, "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
       LOW, B, "network",
       ),
    _b("listeners", STRING, "PLAINTEXT://:9092", HIGH, B, "network"),
    _b("log.cleaner.backoff.ms", LONG, 15000, MED, C, "cleaner", Range(0)),
    _b("log.cleaner.dedupe.buffer.size", LONG, 134217728, MED, C, "cleaner"),
    _b("log.cleaner.delete.retention.ms", LONG, 86400000, MED, C, "cleaner", Range(0)),
    _b("log.cleaner.enable", BOOLEAN, True, MED, R, "cleaner"),
    _b("log.cleaner.io.buffer.load.factor", DOUBLE, 0.9, MED, C, "cleaner"),
    _b("log.cleaner.io.buffer.size", INT, 524288, MED, C, "cleaner", Range(0)),
    _b("log.cleaner.io.max.bytes.per.second", DOUBLE, 1.7976931348623157e+308, MED, C, "cleaner"),
    _b("log.cleaner.max.compaction.lag.ms", LONG, LONG_MAX, MED, C, "cleaner", Range(1)),
    _b("log.cleaner.min.cleanable.ratio", DOUBLE, 0.5, MED, C, "cleaner", Range(0, 1)),
    _b("log.cleaner.min.compaction.lag.ms", LONG, 0, MED, C, "cleaner", Range(0)),
    _b("log.cleaner.threads", INT, 1, MED, C, "threads", Range(0)),
    _b("log.cleanup.policy", LIST, "delete", MED, C, "log", Items(("compact", "delete"))),
    _b("log.dir", STRING, "/tmp/kafka-logs", HIGH, R, "log"),
    _b("log.dir.failure.timeout.ms", LONG, 30000, LOW, R, "kraft", Range(1)),
    _b("log.dirs", STRING, None, HIGH, R, "log"),
    _b("log.flush.interval.messages", LONG, LONG_MAX, HIGH, C, "log", Range(1)),
    _b("log.flush.interval.ms", LONG, None, HIGH, C, "log"),
    _b("log.flush.offset.checkpoint.interval.ms", INT, 60000, HIGH, R, "log", Range(0)),
    _b("log.flush.scheduler.interval.ms", LONG, LONG_MAX, HIGH, R, "log"),
    _b("log.flush.start.offset.checkpoint.interval.ms", INT, 60000, HIGH, R, "log", Range(0)),
    _b("log.index.interval.bytes", INT, 4096, MED, C, "log", Range(0)),
    _b("log.index.size.max.bytes", INT, 10485760, MED, C, "log", Range(4)),
    _b("log.initial.task.delay.ms", LONG, 30000, LOW, R, "log", Range(0), internal=True),
    _b("log.local.retention.bytes", LONG, -2, MED, C, "log", Range(-2)),
    _b("log.local.retention.ms", LONG, -2, MED, C, "log", Range(-2)),
    _b("log.message.downconversion.enable", BOOLEAN, True, LOW, C, "log"),
    _b("log.message.format.version", STRING, "3.0-IV1", MED, R, "protocol", KafkaVersion()),
    _b("log.message.timestamp.after.max.ms", LONG, LONG_MAX, MED, C, "log", Range(0)),
    _b("log.message.timestamp.before.max.ms", LONG, LONG_MAX, MED, C, "log", Range(0)),
    _b("log.message.timestamp.difference.max.ms", LONG, LONG_MAX, MED, C, "log", Range(0)),
    _b("log.message.timestamp.type",
       STRING, "CreateTime", MED, C, "log", OneOf(("CreateTime", "LogAppendTime"))),
    _b("log.preallocate", BOOLEAN, False, MED, C, "log"),
    _b("log.retention.bytes", LONG, -1, HIGH, C, "log"),
    _b("log.retention.check.interval.ms", LONG, 300000, MED, R, "log", Range(1)),
    _b("log.retention.hours", INT, 168, HIGH, R, "log"),
    _b("log.retention.minutes", INT, None, HIGH, R, "log"),
    _b("log.retention.ms", LONG, None, HIGH, C, "log"),
    _b("log.roll.hours", INT, 168, HIGH, R, "log", Range(1)),
    _b("log.roll.jitter.hours", INT, 0, HIGH, R, "log", Range(0)),
    _b("log.roll.jitter.ms", LONG, None, HIGH, C, "log"),
    _b("log.roll.ms", LONG, None, HIGH, C, "log"),
    _b("log.segment.bytes", INT, 1073741824, HIGH, C, "log", Range(14)),
    _b("log.segment.delete.delay.ms", LONG, 60000, HIGH, C, "log", Range(0)),
    _b("max.connection.creation.rate", INT, INT_MAX, MED, C, "quota", Range(0)),
    _b("max.connections", INT, INT_MAX, MED, C, "quota", Range(0)),
    _b("max.connections.per.ip", INT, INT_MAX, MED, C, "quota", Range(0)),
    _b("max.connections.per.ip.overrides", STRING, "", MED, C, "quota"),
    _b("max.incremental.fetch.session.cache.slots", INT, 1000, MED, R, "network", Range(0)),
    _b("max.request.partition.size.limit", INT, 2000, MED, R, "network", Range(1)),
    _b("message.max.bytes", INT, 1048588, HIGH, C, "log", Range(0)),
    _b("metadata.log.dir", STRING, None, HIGH, R, "kraft"),
    _b("metadata.log.max.record.bytes.between.snapshots",
       LONG, 20971520, HIGH, R, "kraft", Range(1)),
    _b("metadata.log.max.snapshot.interval.ms", LONG, 3600000, HIGH, R, "kraft", Range(0)),
    _b("metadata.log.segment.bytes", INT, 1073741824, HIGH, R, "kraft", Range(12)),
    _b("metadata.log.segment.min.bytes", INT, 8388608, HIGH, R, "kraft", Range(12), internal=True),
    _b("metadata.log.segment.ms", LONG, 604800000, HIGH, R, "kraft"),
    _b("metadata.max.idle.interval.ms", INT, 500, LOW, R, "kraft", Range(0)),
    _b("metadata.max.retention.bytes", LONG, 104857600, HIGH, R, "kraft"),
    _b("metadata.max.retention.ms", LONG, 604800000, HIGH, R, "kraft"),
    _b("metric.reporters", LIST, "", LOW, C, "metrics"),
    _b("metrics.num.samples", INT, 2, LOW, R, "metrics", Range(1)),
    _b("metrics.recording.level", STRING, "INFO", LOW, R, "metrics"),
    _b("metrics.sample.window.ms", LONG, 30000, LOW, R, "metrics", Range(1)),
    _b("min.insync.replicas", INT, 1, HIGH, C, "log", Range(1)),
    _b("node.id", INT, -1, HIGH, R, "server"),
    _b("num.io.threads", INT, 8, HIGH, C, "threads", Range(1)),
    _b("num.network.threads", INT, 3, HIGH, C, "threads", Range(1)),
    _b("num.partitions", INT, 1, MED, R, "log", Range(1)),
    _b("num.recovery.threads.per.data.dir", INT, 1, HIGH, C, "threads", Range(1)),
    _b("num.replica.alter.log.dirs.threads", INT, None, HIGH, R, "threads"),
    _b("num.replica.fetchers", INT, 1, HIGH, C, "replication"),
    _b("offset.metadata.max.bytes", INT, 4096, HIGH, R, "groups"),
    _b("offsets.commit.required.acks", SHORT, -1, HIGH, R, "groups"),
    _b("offsets.commit.timeout.ms", INT, 5000, HIGH, R, "groups", Range(1)),
    _b("offsets.load.buffer.size", INT, 5242880, HIGH, R, "groups", Range(1)),
    _b("offsets.retention.check.interval.ms", LONG, 600000, HIGH, R, "groups", Range(1)),
    _b("offsets.retention.minutes", INT, 10080, HIGH, R, "groups", Range(1)),
    _b("offsets.topic.compression.codec", INT, 0, HIGH, R, "groups"),
    _b("offsets.topic.num.partitions", INT, 50, HIGH, R, "groups", Range(1)),
    _b("offsets.topic.replication.factor", SHORT, 3, HIGH, R, "groups", Range(1)),
    _b("offsets.topic.segment.bytes", INT, 104857600, HIGH, R, "groups", Range(1)),
    _b("password.encoder.cipher.algorithm", STRING, "AES/CBC/PKCS5Padding", LOW, R, "auth"),
    _b("password.encoder.iterations", INT, 4096, LOW, R, "auth", Range(1024)),
    _b("password.encoder.key.length", INT, 128, LOW, R, "auth", Range(8)),
    _b("password.encoder.keyfactory.algorithm", STRING, None, LOW, R, "auth"),
    _b("password.encoder.old.secret", PASSWORD, None, MED, R, "auth"),
    _b("password.encoder.secret", PASSWORD, None, MED, R, "auth"),
    _b("principal.builder.class",
       CLASS, "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",
       MED, B, "auth",
       ),
    _b("process.roles", LIST, "", HIGH, R, "kraft", Items(("broker", "controller"))),
    _b("producer.id.expiration.check.interval.ms",
       INT, 600000, LOW, R, "transactions", Range(1), internal=True),
    _b("producer.id.expiration.ms", INT, 86400000, LOW, C, "transactions", Range(1)),
    _b("producer.purgatory.purge.interval.requests", INT, 1000, MED, R, "network"),
    _b("queued.max.request.bytes", LONG, -1, MED, R, "network"),
    _b("queued.max.requests", INT, 500, HIGH, R, "network", Range(1)),
    _b("quota.window.num", INT, 11, LOW, R, "quota", Range(1)),
    _b("quota.window.size.seconds", INT, 1, LOW, R, "quota", Range(1)),
    _b("remote.fetch.max.wait.ms", INT, 500, MED, C, "tiered", Range(1)),
    _b("remote.log.index.file.cache.total.size.bytes",
       LONG, 1073741824, LOW, C, "tiered", Range(1)),
    _b("remote.log.manager.copier.thread.pool.size", INT, -1, MED, R, "tiered", _POOL_SIZE),
    _b("remote.log.manager.copy.max.bytes.per.second", LONG, LONG_MAX, MED, C, "tiered", Range(1)),
    _b("remote.log.manager.copy.quota.window.num", INT, 11, MED, R, "quota", Range(1)),
    _b("remote.log.manager.copy.quota.window.size.seconds", INT, 1, MED, R, "quota", Range(1)),
    _b("remote.log.manager.expiration.thread.pool.size", INT, -1, MED, R, "tiered", _POOL_SIZE),
    _b("remote.log.manager.fetch.max.bytes.per.second",
       LONG, LONG_MAX, MED, C, "tiered", Range(1)),
    _b("remote.log.manager.fetch.quota.window.num", INT, 11, MED, R, "quota", Range(1)),
    _b("remote.log.manager.fetch.quota.window.size.seconds", INT, 1, MED, R, "quota", Range(1)),
    _b("remote.log.manager.task.interval.ms", LONG, 30000, LOW, R, "tiered", Range(1)),
    _b("remote.log.manager.task.retry.backoff.max.ms",
       LONG, 30000, MED, R, "tiered", Range(1), internal=True),
    _b("remote.log.manager.task.retry.backoff.ms",
       LONG, 500, MED, R, "tiered", Range(1), internal=True),
    _b("remote.log.manager.task.retry.jitter",
       DOUBLE, 0.2, MED, R, "tiered", Range(0, 0.5), internal=True),
    _b("remote.log.manager.thread.pool.size", INT, 10, MED, R, "tiered", Range(1)),
    _b("remote.log.metadata.custom.metadata.max.bytes", INT, 128, LOW, R, "tiered", Range(0)),
    _b("remote.log.metadata.manager.class.name",
       STRING,
       "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager",
       MED, R, "tiered",
       NonEmpty()),
    _b("remote.log.metadata.manager.class.path", STRING, None, MED, R, "tiered"),
    _b("remote.log.metadata.manager.impl.prefix",
       STRING, "rlmm.config.", MED, R, "tiered", NonEmpty()),
    _b("remote.log.metadata.manager.listener.name", STRING, None, MED, R, "tiered", NonEmpty()),
    _b("remote.log.reader.max.pending.tasks", INT, 100, MED, R, "tiered", Range(1)),
    _b("remote.log.reader.threads", INT, 10, MED, R, "tiered", Range(1)),
    _b("remote.log.storage.manager.class.name", STRING, None, MED, R, "tiered", NonEmpty()),
    _b("remote.log.storage.manager.class.path", STRING, None, MED, R, "tiered"),
    _b("remote.log.storage.manager.impl.prefix",
       STRING, "rsm.config.", MED, R, "tiered", NonEmpty()),
    _b("remote.log.storage.system.enable", BOOLEAN, False, MED, R, "tiered"),
    _b("replica.alter.log.dirs.io.max.bytes.per.second",
       LONG, LONG_MAX, MED, C, "quota", Range(0), internal=True),
    _b("replica.fetch.backoff.ms", INT, 1000, MED, R, "replication", Range(0)),
    _b("replica.fetch.max.bytes", INT, 1048576, MED, R, "replication", Range(0)),
    _b("replica.fetch.min.bytes", INT, 1, HIGH, R, "replication"),
    _b("replica.fetch.response.max.bytes", INT, 10485760, MED, R, "replication", Range(0)),
    _b("replica.fetch.wait.max.ms", INT, 500, HIGH, R, "replication"),
    _b("replica.high.watermark.checkpoint.interval.ms", LONG, 5000, HIGH, R, "replication"),
    _b("replica.lag.time.max.ms", LONG, 30000, HIGH, R, "replication"),
    _b("replica.selector.class", STRING, None, MED, R, "replication"),
    _b("replica.socket.receive.buffer.bytes", INT, 65536, HIGH, R, "network"),
    _b("replica.socket.timeout.ms", INT, 30000, HIGH, R, "replication"),
    _b("replication.quota.window.num", INT, 11, LOW, R, "quota", Range(1)),
    _b("replication.quota.window.size.seconds", INT, 1, LOW, R, "quota", Range(1)),
    _b("request.timeout.ms", INT, 30000, HIGH, R, "network"),
    _b("reserved.broker.max.id", INT, 1000, MED, R, "server", Range(0)),
    _b("sasl.client.callback.handler.class", CLASS, None, MED, R, "sasl"),
    _b("sasl.enabled.mechanisms", LIST, "GSSAPI", MED, B, "sasl"),
    _b("sasl.jaas.config", PASSWORD, None, MED, B, "sasl"),
    _b("sasl.kerberos.kinit.cmd", STRING, "/usr/bin/kinit", MED, B, "sasl"),
    _b("sasl.kerberos.min.time.before.relogin", LONG, 60000, MED, B, "sasl"),
    _b("sasl.kerberos.principal.to.local.rules", LIST, "DEFAULT", MED, B, "sasl"),
    _b("sasl.kerberos.service.name", STRING, None, MED, B, "sasl"),
    _b("sasl.kerberos.ticket.renew.jitter", DOUBLE, 0.05, MED, B, "sasl"),
    _b("sasl.kerberos.ticket.renew.window.factor", DOUBLE, 0.8, MED, B, "sasl"),
    _b("sasl.login.callback.handler.class", CLASS, None, MED, R, "sasl"),
    _b("sasl.login.class", CLASS, None, MED, R, "sasl"),
    _b("sasl.login.connect.timeout.ms", INT, None, LOW, R, "sasl"),
    _b("sasl.login.read.timeout.ms", INT, None, LOW, R, "sasl"),
    _b("sasl.login.refresh.buffer.seconds", SHORT, 300, MED, B, "sasl"),
    _b("sasl.login.refresh.min.period.seconds", SHORT, 60, MED, B, "sasl"),
    _b("sasl.login.refresh.window.factor", DOUBLE, 0.8, MED, B, "sasl"),
    _b("sasl.login.refresh.window.jitter", DOUBLE, 0.05, MED, B, "sasl"),
    _b("sasl.login.retry.backoff.max.ms", LONG, 10000, LOW, R, "sasl"),
    _b("sasl.login.retry.backoff.ms", LONG, 100, LOW, R, "sasl"),
    _b("sasl.mechanism.controller.protocol", STRING, "GSSAPI", HIGH, R, "kraft"),
    _b("sasl.mechanism.inter.broker.protocol", STRING, "GSSAPI", MED, B, "sasl"),
    _b("sasl.oauthbearer.clock.skew.seconds", INT, 30, LOW, R, "sasl"),
    _b("sasl.oauthbearer.expected.audience", LIST, None, LOW, R, "sasl"),
    _b("sasl.oauthbearer.expected.issuer", STRING, None, LOW, R, "sasl"),
    _b("sasl.oauthbearer.jwks.endpoint.refresh.ms", LONG, 3600000, LOW, R, "sasl"),
    _b("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", LONG, 10000, LOW, R, "sasl"),
    _b("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", LONG, 100, LOW, R, "sasl"),
    _b("sasl.oauthbearer.jwks.endpoint.url", STRING, None, MED, R, "sasl"),
    _b("sasl.oauthbearer.scope.claim.name", STRING, "scope", LOW, R, "sasl"),
    _b("sasl.oauthbearer.sub.claim.name", STRING, "sub", LOW, R, "sasl"),
    _b("sasl.oauthbearer.token.endpoint.url", STRING, None, MED, R, "sasl"),
    _b("sasl.server.callback.handler.class", CLASS, None, MED, R, "sasl"),
    _b("sasl.server.max.receive.size", INT, 524288, MED, R, "sasl"),
    _b("security.inter.broker.protocol",
       STRING, "PLAINTEXT", MED, R, "auth",
       OneOf(("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"))),
    _b("security.providers", STRING, None, LOW, R, "auth"),
    _b("server.max.startup.time.ms", LONG, LONG_MAX, MED, R, "kraft", Range(0), internal=True),
    _b("socket.connection.setup.timeout.max.ms", LONG, 30000, MED, R, "network"),
    _b("socket.connection.setup.timeout.ms", LONG, 10000, MED, R, "network"),
    _b("socket.listen.backlog.size", INT, 50, MED, R, "network", Range(1)),
    _b("socket.receive.buffer.bytes", INT, 102400, HIGH, R, "network"),
    _b("socket.request.max.bytes", INT, 104857600, HIGH, R, "network", Range(1)),
    _b("socket.send.buffer.bytes", INT, 102400, HIGH, R, "network"),
    _b("ssl.allow.dn.changes", BOOLEAN, False, LOW, R, "tls"),
    _b("ssl.allow.san.changes", BOOLEAN, False, LOW, R, "tls"),
    _b("ssl.cipher.suites", LIST, "", MED, B, "tls"),
    _b("ssl.client.auth", STRING, "none", MED, B, "tls", OneOf(("required", "requested", "none"))),
    _b("ssl.enabled.protocols", LIST, "TLSv1.2", MED, B, "tls"),
    _b("ssl.endpoint.identification.algorithm", STRING, "https", LOW, B, "tls"),
    _b("ssl.engine.factory.class", CLASS, None, LOW, B, "tls"),
    _b("ssl.key.password", PASSWORD, None, MED, B, "tls"),
    _b("ssl.keymanager.algorithm", STRING, "SunX509", MED, B, "tls"),
    _b("ssl.keystore.certificate.chain", PASSWORD, None, MED, B, "tls"),
    _b("ssl.keystore.key", PASSWORD, None, MED, B, "tls"),
    _b("ssl.keystore.location", STRING, None, MED, B, "tls"),
    _b("ssl.keystore.password", PASSWORD, None, MED, B, "tls"),
    _b("ssl.keystore.type", STRING, "JKS", MED, B, "tls"),
    _b("ssl.principal.mapping.rules", STRING, "DEFAULT", LOW, R, "tls"),
    _b("ssl.protocol", STRING, "TLSv1.2", MED, B, "tls"),
    _b("ssl.provider", STRING, None, MED, B, "tls"),
    _b("ssl.secure.random.implementation", STRING, None, LOW, B, "tls"),
    _b("ssl.trustmanager.algorithm", STRING, "PKIX", MED, B, "tls"),
    _b("ssl.truststore.certificates", PASSWORD, None, MED, B, "tls"),
    _b("ssl.truststore.location", STRING, None, MED, B, "tls"),
    _b("ssl.truststore.password", PASSWORD, None, MED, B, "tls"),
    _b("ssl.truststore.type", STRING, "JKS", MED, B, "tls"),
    _b("telemetry.max.bytes", INT, 1048576, LOW, R, "metrics", Range(1)),
    _b("transaction.abort.timed.out.transaction.cleanup.interval.ms",
       INT, 10000, LOW, R, "transactions", Range(1)),
    _b("transaction.max.timeout.ms", INT, 900000, HIGH, R, "transactions", Range(1)),
    _b("transaction.partition.verification.enable", BOOLEAN, True, LOW, C, "transactions"),
    _b("transaction.remove.expired.transaction.cleanup.interval.ms",
       INT, 3600000, LOW, R, "transactions", Range(1)),
    _b("transaction.state.log.load.buffer.size", INT, 5242880, HIGH, R, "transactions", Range(1)),
    _b("transaction.state.log.min.isr", INT, 2, HIGH, R, "transactions", Range(1)),
    _b("transaction.state.log.num.partitions", INT, 50, HIGH, R, "transactions", Range(1)),
    _b("transaction.state.log.replication.factor", SHORT, 3, HIGH, R, "transactions", Range(1)),
    _b("transaction.state.log.segment.bytes", INT, 104857600, HIGH, R, "transactions", Range(1)),
    _b("transactional.id.expiration.ms", INT, 604800000, HIGH, R, "transactions", Range(1)),
    _b("unclean.leader.election.enable", BOOLEAN, False, HIGH, C, "log"),
    _b("unclean.leader.election.interval.ms",
       LONG, 300000, MED, R, "replication", Range(1), internal=True),
    _b("unstable.api.versions.enable", BOOLEAN, False, HIGH, R, "protocol", internal=True),
    _b("unstable.feature.versions.enable", BOOLEAN, False, HIGH, R, "kraft", internal=True),
    _b("zookeeper.clientCnxnSocket", STRING, None, MED, R, "zookeeper"),
    _b("zookeeper.connect", STRING, None, HIGH, R, "zookeeper"),
    _b("zookeeper.connection.timeout.ms", INT, None, HIGH, R, "zookeeper"),
    _b("zookeeper.max.in.flight.requests", INT, 10, HIGH, R, "zookeeper", Range(1)),
    _b("zookeeper.metadata.migration.enable", BOOLEAN, False, HIGH, R, "kraft"),
    _b("zookeeper.metadata.migration.min.batch.size",
       INT, 200, MED, R, "kraft", Range(1), internal=True),
    _b("zookeeper.session.timeout.ms", INT, 18000, HIGH, R, "zookeeper"),
    _b("zookeeper.set.acl", BOOLEAN, False, HIGH, R, "zookeeper-security"),
    _b("zookeeper.ssl.cipher.suites", LIST, None, LOW, R, "zookeeper-security"),
    _b("zookeeper.ssl.client.enable", BOOLEAN, False, MED, R, "zookeeper-security"),
    _b("zookeeper.ssl.crl.enable", BOOLEAN, False, LOW, R, "zookeeper-security"),
    _b("zookeeper.ssl.enabled.protocols", LIST, None, LOW, R, "zookeeper-security"),
    _b("zookeeper.ssl.endpoint.identification.algorithm",
       STRING, "HTTPS", LOW, R, "zookeeper-security"),
    _b("zookeeper.ssl.keystore.location", STRING, None, MED, R, "zookeeper-security"),
    _b("zookeeper.ssl.keystore.password", PASSWORD, None, MED, R, "zookeeper-security"),
    _b("zookeeper.ssl.keystore.type", STRING, None, MED, R, "zookeeper-security"),
    _b("zookeeper.ssl.ocsp.enable", BOOLEAN, False, LOW, R, "zookeeper-security"),
    _b("zookeeper.ssl.protocol", STRING, "TLSv1.2", LOW, R, "zookeeper-security"),
    _b("zookeeper.ssl.truststore.location", STRING, None, MED, R, "zookeeper-security"),
    _b("zookeeper.ssl.truststore.password", PASSWORD, None, MED, R, "zookeeper-security"),
    _b("zookeeper.ssl.truststore.type", STRING, None, MED, R, "zookeeper-security"),
)

KAFKA_39_BROKER_CONFIGS: Mapping[str, KafkaBrokerConfig] = MappingProxyType(
    {config.name: config for config in _BROKER}
)
"""Every broker config ZooKeeper-mode Kafka 3.9 defines, by name."""


def _t(name: str, type_: KafkaType, default: Any, importance: Importance,
       server_default: str | None) -> KafkaTopicConfig:
    return KafkaTopicConfig(name, type_, default, importance, server_default)


# name, type, default, importance, the broker config that supplies the default; by name.
_TOPIC = (
    _t("cleanup.policy", LIST, "delete", MED, "log.cleanup.policy"),
    _t("compression.gzip.level", INT, -1, MED, "compression.gzip.level"),
    _t("compression.lz4.level", INT, 9, MED, "compression.lz4.level"),
    _t("compression.type", STRING, "producer", MED, "compression.type"),
    _t("compression.zstd.level", INT, 3, MED, "compression.zstd.level"),
    _t("delete.retention.ms", LONG, 86400000, MED, "log.cleaner.delete.retention.ms"),
    _t("file.delete.delay.ms", LONG, 60000, MED, "log.segment.delete.delay.ms"),
    _t("flush.messages", LONG, LONG_MAX, MED, "log.flush.interval.messages"),
    _t("flush.ms", LONG, LONG_MAX, MED, "log.flush.interval.ms"),
    _t("follower.replication.throttled.replicas", LIST, "", MED, None),
    _t("index.interval.bytes", INT, 4096, MED, "log.index.interval.bytes"),
    _t("leader.replication.throttled.replicas", LIST, "", MED, None),
    _t("local.retention.bytes", LONG, -2, MED, "log.local.retention.bytes"),
    _t("local.retention.ms", LONG, -2, MED, "log.local.retention.ms"),
    _t("max.compaction.lag.ms", LONG, LONG_MAX, MED, "log.cleaner.max.compaction.lag.ms"),
    _t("max.message.bytes", INT, 1048588, MED, "message.max.bytes"),
    _t("message.format.version", STRING, "3.0-IV1", MED, "log.message.format.version"),
    _t("message.timestamp.after.max.ms", LONG, LONG_MAX, MED,
       "log.message.timestamp.after.max.ms"),
    _t("message.timestamp.before.max.ms", LONG, LONG_MAX, MED,
       "log.message.timestamp.before.max.ms"),
    _t("message.timestamp.difference.max.ms", LONG, LONG_MAX, MED,
       "log.message.timestamp.difference.max.ms"),
    _t("message.timestamp.type", STRING, "CreateTime", MED, "log.message.timestamp.type"),
    _t("min.cleanable.dirty.ratio", DOUBLE, 0.5, MED, "log.cleaner.min.cleanable.ratio"),
    _t("min.compaction.lag.ms", LONG, 0, MED, "log.cleaner.min.compaction.lag.ms"),
    _t("min.insync.replicas", INT, 1, MED, "min.insync.replicas"),
    _t("preallocate", BOOLEAN, False, MED, "log.preallocate"),
    _t("remote.log.copy.disable", BOOLEAN, False, MED, None),
    _t("remote.log.delete.on.disable", BOOLEAN, False, MED, None),
    _t("remote.storage.enable", BOOLEAN, False, MED, None),
    _t("retention.bytes", LONG, -1, MED, "log.retention.bytes"),
    _t("retention.ms", LONG, 604800000, MED, "log.retention.ms"),
    _t("segment.bytes", INT, 1073741824, MED, "log.segment.bytes"),
    _t("segment.index.bytes", INT, 10485760, MED, "log.index.size.max.bytes"),
    _t("segment.jitter.ms", LONG, 0, MED, "log.roll.jitter.ms"),
    _t("segment.ms", LONG, 604800000, MED, "log.roll.ms"),
    _t("unclean.leader.election.enable", BOOLEAN, False, MED, "unclean.leader.election.enable"),
    _t("message.downconversion.enable", BOOLEAN, True, LOW, "log.message.downconversion.enable"),
)

KAFKA_39_TOPIC_CONFIGS: Mapping[str, KafkaTopicConfig] = MappingProxyType(
    {config.name: config for config in _TOPIC}
)
"""Every topic config Kafka 3.9 defines, by name."""

# ---- Kafka 3.9's rules for listener configs and dynamic updates (DynamicBrokerConfig) ------

LISTENER_PREFIX = "listener.name."
"""listener.name.<listener>.<config>: a config for one listener, over the base config."""

LISTENER_MECHANISM_CONFIGS = ("sasl.jaas.config", "sasl.login.callback.handler.class",
                              "sasl.login.class", "sasl.server.callback.handler.class",
                              "connections.max.reauth.ms")
"""Listener configs given per SASL mechanism: listener.name.<l>.<mechanism>.<config>."""

LISTENER_CONFIG_AREAS = ("tls", "sasl")
LISTENER_CONFIGS = ("principal.builder.class", "max.connections", "max.connection.creation.rate")
"""What may follow listener.name.<l>.: the TLS and SASL configs (the listener's channel
builder reads them with the prefix) and these, besides."""

CLUSTER_LEVEL_LISTENER_CONFIGS = ("max.connections", "max.connection.creation.rate",
                                  "num.network.threads")
"""Listener configs that can be cluster-wide defaults; the others are per broker."""

LISTENER_ONLY_DYNAMIC_CONFIGS = (
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.certificates",
)
"""SslConfigs.RECONFIGURABLE_CONFIGS: updated dynamically only with a listener prefix."""
