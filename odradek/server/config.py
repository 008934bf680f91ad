"""The broker's settings: Kafka's names, types, defaults and validation, from one table.

`BROKER_CONFIGS` is the single source of truth, as `TOPIC_CONFIGS` is for topics: each
entry gives a broker setting's Kafka name, type, default (Kafka 4.0's unless said
otherwise), allowed values, documentation, whether it can be updated dynamically, and the
lower-precedence synonyms it falls back to. The settings that supply topic defaults
(log.segment.bytes, log.retention.hours, message.max.bytes, ...) are not typed here: they
are derived from `TOPIC_CONFIGS`, and the default `LogConfig` comes from
`LogConfig.from_broker_properties`. A topic config without a broker synonym
(remote.storage.enable, leader.replication.throttled.replicas, ...) derives none.

A `BrokerConfig` has three layers of explicit settings, highest precedence first: dynamic
per-broker overrides, dynamic cluster-wide defaults, and the static properties the broker
started with (server.properties); below them are the defaults of the table. Within a
group of synonyms the finer one wins whatever its layer (log.retention.ms over .minutes
over .hours), as in Kafka, where only the finest of a group can be set dynamically.
`describe` lists settings as DescribeConfigs does, with their sources and synonyms.

Every other broker config ZooKeeper-mode Kafka 3.9 accepts (odradek/server/kafka_configs.py
holds Kafka 3.9's list) is in the table too, with Kafka 3.9's type, default, valid values and
update mode, as a setting Odradek accepts and ignores (`no_effect` says why, per part of
Kafka: TLS, SASL, KRaft, quotas, tiered storage...); setting one logs a warning that says so.
A few of them are refused instead (`_REFUSED`), where accepting them would pretend to a
security or a durability Odradek lacks (an authorizer, client certificates, ZooKeeper ACLs,
tiered storage, KRaft). listener.name.<listener>.<config> is accepted for Kafka's
per-listener TLS, SASL and connection configs.

docs/configuration.md carries the table generated from `BROKER_CONFIGS`
(`python -m odradek.server.config` rewrites it; a test keeps it in step).
"""

from __future__ import annotations

import difflib
import ipaddress
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from enum import IntEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from odradek.server.connection_quotas import parse_overrides
from odradek.server.kafka_configs import (
    CLUSTER_LEVEL_LISTENER_CONFIGS,
    KAFKA_39_BROKER_CONFIGS,
    LISTENER_CONFIG_AREAS,
    LISTENER_CONFIGS,
    LISTENER_MECHANISM_CONFIGS,
    LISTENER_ONLY_DYNAMIC_CONFIGS,
    LISTENER_PREFIX,
    KafkaBrokerConfig,
    KafkaType,
    UpdateMode,
)
from odradek.storage.config import (
    INT_MAX,
    MS_PER_HOUR,
    MS_PER_MINUTE,
    TOPIC_CONFIGS,
    ConfigKey,
    ConfigType,
    LogConfig,
    OneOf,
    Range,
    Validator,
    format_value,
    parse_value,
)
from odradek.storage.errors import InvalidConfigError
from odradek.storage.log_manager import LogManagerConfig
from odradek.storage.log_validator import DEFAULT_MAX_DECOMPRESSED_BYTES, RecordValidation

__all__ = [
    "BROKER_CONFIGS",
    "KRAFT_ONLY_CONFIGS",
    "BrokerConfig",
    "BrokerKey",
    "ConfigEntry",
    "ConfigSource",
    "ConfigSynonym",
    "HttpListener",
    "Listener",
    "broker_key",
    "configuration_table",
    "ignored_settings",
    "load_properties",
    "parse_http_listeners",
    "parse_properties",
]

log = logging.getLogger(__name__)


class ConfigSource(IntEnum):
    """Where a value comes from: DescribeConfigs' ConfigSource codes."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


# DescribeConfigs' ConfigType codes for the types ConfigType lacks.
SHORT_CONFIG_TYPE = int(KafkaType.SHORT)
LIST_CONFIG_TYPE = int(KafkaType.LIST)
CLASS_CONFIG_TYPE = int(KafkaType.CLASS)
PASSWORD_CONFIG_TYPE = int(KafkaType.PASSWORD)
SHORT_MIN, SHORT_MAX = -(2**15), 2**15 - 1

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# The authorizers authorizer.class.name may name: Kafka's ACL authorizers, which Odradek's
# AclAuthorizer (odradek/security/authorizer.py) follows; empty for none.
AUTHORIZER_CLASSES = ("", "kafka.security.authorizer.AclAuthorizer",
                      "kafka.security.auth.SimpleAclAuthorizer",
                      "org.apache.kafka.metadata.authorizer.StandardAuthorizer")
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)

# LONG_MAX (Kafka's "never" for log.flush.scheduler.interval.ms) overflows threading's
# timeouts; 24 days between checks is as good as never.
_MAX_SCHEDULER_PERIOD_MS = INT_MAX

# ---- the table ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerKey:
    """One broker setting: its Kafka name, type, default, allowed values and synonyms."""

    name: str
    type: ConfigType
    default: Any  # typed, as parse_value returns it; None: no default
    doc: str
    validator: Validator | None = None
    group: str = ""  # the heading it is listed under in docs/configuration.md
    dynamic: bool = False  # can be updated with AlterConfigs (Kafka's DynamicBrokerConfig)
    fallbacks: tuple[str, ...] = ()  # lower-precedence synonyms, highest first
    scale: int = 1  # its unit relative to its synonyms' (ms = 1, hours = 3600000)
    no_effect: str = ""  # why it is accepted (from Kafka's files and tools) and ignored
    sensitive: bool = False  # never listed with its value
    wire_type: int | None = None  # DescribeConfigs type code when ConfigType has none
    topic: ConfigKey | None = None  # the topic config whose default this setting supplies
    per_broker: bool = False  # dynamic for one broker only, not as a cluster-wide default
    listed: bool = True  # listed by DescribeConfigs when not set (not: Kafka's internal ones)
    refused: tuple[Any, str] | None = None  # (the only value taken, why no other is)

    @property
    def config_type(self) -> int:
        """The DescribeConfigs ConfigType code."""
        return self.wire_type if self.wire_type is not None else int(self.type)

    def coerce(self, raw: Any) -> Any:
        """Parse `raw` (a string as in server.properties) and validate it.

        Raises InvalidConfigError naming this setting and what it allows.
        """
        if self.topic is not None:
            # The topic config's own checks, in its unit (e.g. log.roll.hours as segment.ms).
            LogConfig.from_broker_properties({self.name: raw})
        try:
            value = parse_value(self.type, raw)
        except ValueError as e:
            raise _invalid(self.name, raw, str(e)) from None
        if self.wire_type == LIST_CONFIG_TYPE and self.type is ConfigType.STRING:
            # A list kept in order (Kafka's LIST, as it writes it back): "a, b" is "a,b".
            value = ",".join(item.strip() for item in value.split(",")) if value else ""
        if self.refused is not None and value != self.refused[0]:
            raise InvalidConfigError(f"{self.name}={raw} is refused: {self.refused[1]}",
                                     key=self.name)
        if self.validator is not None and not self.validator(value):
            raise _invalid(self.name, raw, str(self.validator))
        return value

    def format(self, value: Any) -> str:
        return format_value(self.type, value)

    def ignored(self, value: Any) -> str | None:
        """Why setting this to `value` has no effect here (for a warning), or None."""
        if self.topic is not None:
            return self.topic.ignored(value)
        return self.no_effect or None


def _invalid(key: str, raw: Any, reason: str) -> InvalidConfigError:
    return InvalidConfigError(f"{key}={raw} is invalid: {reason}", key=key)


_T = ConfigType
_SHORT = Range(1, SHORT_MAX, text=f"must be between 1 and {SHORT_MAX} (a 16-bit count)")
_UNITS = {1: "milliseconds", MS_PER_MINUTE: "minutes", MS_PER_HOUR: "hours"}

# Notes on derived settings that the topic config's doc cannot give.
_TOPIC_DEFAULT_NOTES = {
    "log.flush.scheduler.interval.ms": (
        "Also how often the log manager checks flush.ms. Kafka's default means never; "
        "Odradek's log manager checks every second unless this is set."
    ),
    "message.max.bytes": "Requests are limited by socket.request.max.bytes as well.",
}


def _topic_default_keys() -> list[BrokerKey]:
    """The broker settings that supply topic defaults, derived from TOPIC_CONFIGS (none for
    a topic config without synonyms).

    As in Kafka, only the last synonym of a group has a default (log.retention.hours=168,
    not log.retention.ms), and only the first can be updated dynamically, if Kafka 3.9 can
    (not log.message.format.version).
    """
    keys = []
    for topic in TOPIC_CONFIGS.values():
        chain = topic.synonyms
        for i, synonym in enumerate(chain):
            scaled = synonym.scale != 1
            default = None
            if i == len(chain) - 1:
                default = topic.default // synonym.scale if scaled else topic.default
                if scaled and topic.default % synonym.scale:
                    raise RuntimeError(f"{topic.name}'s default is not whole {synonym.name}")
            unit = f", in {_UNITS[synonym.scale]}" if scaled else ""
            doc = f"Default of the topic config {topic.name}{unit}: {topic.doc}"
            lower = [s.name for s in chain[i + 1 :]]
            if lower:
                doc += " When unset, " + ", then ".join(lower) + " applies."
            if synonym.name in _TOPIC_DEFAULT_NOTES:
                doc += " " + _TOPIC_DEFAULT_NOTES[synonym.name]
            keys.append(
                BrokerKey(
                    synonym.name,
                    _T.INT if scaled else topic.type,  # a scaled setting is an int in Kafka
                    default,
                    doc,
                    group="Topic defaults",
                    dynamic=i == 0 and KAFKA_39_BROKER_CONFIGS[synonym.name].dynamic,
                    fallbacks=tuple(lower),
                    scale=synonym.scale,
                    no_effect=topic.no_effect,
                    topic=topic,
                )
            )
    return keys


def _in(group: str, *keys: BrokerKey) -> list[BrokerKey]:
    return [replace(key, group=group) for key in keys]


_K = BrokerKey
_NOT_ZERO = "must be >= 1 (Kafka also takes 0: checkpoint once)"
_SHARE_GROUPS = "Odradek has no share groups (KIP-932)"

_HAND_KEYS: list[BrokerKey] = [
    *_in(
        "Server",
        _K("node.id", _T.INT, 1,
           "This broker's id, unique in the cluster. Kafka 4.0 has no default (KRaft needs "
           "one set); Odradek's embedded single node is 1.", Range(0),
           fallbacks=("broker.id",)),
        _K("broker.id", _T.INT, None,
           "The older name of node.id; when both are set they must be equal.", Range(0)),
        _K("log.dirs", _T.STRING, None,
           "Comma-separated directories where partition logs are stored. When unset, log.dir "
           "applies.", fallbacks=("log.dir",)),
        _K("log.dir", _T.STRING, "./odradek-data",
           "The log directory when log.dirs is unset (Kafka's default: /tmp/kafka-logs)."),
        _K("num.partitions", _T.INT, 1,
           "The number of partitions of a topic created without one (auto-creation, or "
           "CreateTopics with -1).", Range(1)),
        _K("default.replication.factor", _T.INT, 1,
           "The replication factor of a topic created without one.", Range(1)),
        _K("auto.create.topics.enable", _T.BOOLEAN, True,
           "Create a topic when a client asks for its metadata or produces to it."),
        _K("delete.topic.enable", _T.BOOLEAN, True,
           "Let DeleteTopics delete topics; when false it answers TOPIC_DELETION_DISABLED."),
    ),
    *_in(
        "Network",
        _K("listeners", _T.STRING, "PLAINTEXT://localhost:9092",
           "Comma-separated NAME://host:port addresses to listen on; an empty host means "
           "every interface, port 0 a free port. Only PLAINTEXT listeners are served for now. "
           "Kafka's default is PLAINTEXT://:9092; Odradek listens on localhost unless told "
           "otherwise."),
        _K("advertised.listeners", _T.STRING, None,
           "The NAME://host:port addresses given to clients, at most one per listener, each "
           "naming a listener; 0.0.0.0 cannot be advertised. When unset, listeners applies.",
           fallbacks=("listeners",)),
        _K("listener.security.protocol.map", _T.STRING, DEFAULT_PROTOCOL_MAP,
           "Comma-separated NAME:PROTOCOL pairs giving each listener's security protocol "
           "(PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)."),
        _K("http.listeners", _T.STRING, "",
           "Odradek's (Kafka has none): comma-separated http://host:port addresses of the "
           "broker's HTTP listener, which serves /health/live, /health/ready and /metrics "
           "(docs/operations.md); an empty host means every interface, port 0 a free port. "
           "Empty: no HTTP listener. scripts/start sets http://localhost:9644 and "
           "`odradek cluster up` a port per broker, and the web console at /.",
           wire_type=LIST_CONFIG_TYPE),
        _K("http.console.enabled", _T.BOOLEAN, True,
           "Odradek's: whether the HTTP listener serves the web console at / and its JSON "
           "API under /api (docs/operations.md). It shows what the broker's own principal "
           "sees, records included, to whoever reaches the listener."),
        _K("http.console.write.enabled", _T.BOOLEAN, False,
           "Odradek's: whether the console may create topics, delete records and reset a "
           "group's offsets. With an authorizer each write needs a SCRAM user's name and "
           "password (HTTP Basic) and the ACLs the Kafka request would need."),
        _K("registry.listeners", _T.STRING, "",
           "Odradek's: an http://host:port where the broker's process also runs a schema "
           "registry with Confluent's REST API (docs/registry.md), a client of this broker's "
           "PLAINTEXT listener storing schemas in _schemas. Empty: none; scripts/start sets "
           "http://localhost:8081. A cluster runs `odradek registry` beside it instead."),
        _K("http.console.history.interval.ms", _T.INT, 5000,
           "Odradek's: how often the console's charts sample the broker's counters; an "
           "hour of samples is kept.", Range(100)),
        _K("inter.broker.listener.name", _T.STRING, None,
           "The listener other brokers connect to; it must be advertised. When unset: "
           "PLAINTEXT if advertised, else the first advertised listener."),
        _K("socket.request.max.bytes", _T.INT, 100 * 1024 * 1024,
           "The largest request accepted; a larger size prefix closes the connection.",
           Range(1)),
        _K("connections.max.idle.ms", _T.LONG, 600_000,
           "Close connections idle for longer than this.", Range(1)),
        _K("queued.max.request.bytes", _T.LONG, 256 * 1024 * 1024,
           "The most bytes held for requests, across all connections: those arriving "
           "(each frame's buffer grows with the bytes that come, never to the size its "
           "prefix claims) and those read but not yet handled. At the cap the broker stops "
           "reading the sockets of requests larger than 64 KiB until memory is freed, and "
           "reads smaller ones one at a time per connection; a request larger than the cap "
           "is still read when nothing else can free memory. -1 or 0: no cap (Kafka's "
           "default is -1).", Range(-1)),
        _K("socket.request.receive.timeout.ms", _T.INT, 30_000,
           "Odradek's (Kafka has none): how long a request may take to arrive in full, "
           "from its first byte. A request still partial after this closes its connection, "
           "which frees its memory; time the broker itself stops reading a pipelining "
           "client does not count.", Range(1)),
        _K("queued.max.requests", _T.INT, 500,
           "How many requests may wait for a handler before the network layer stops "
           "reading.", Range(1)),
        _K("fetch.max.bytes", _T.INT, 55 * 1024 * 1024,
           "The most a Fetch response returns, whatever the request asks.", Range(1024)),
        _K("max.incremental.fetch.session.cache.slots", _T.INT, 1000,
           "How many incremental fetch sessions (KIP-227) the broker keeps.", Range(0)),
    ),
    *_in(
        "Log manager",
        _K("log.retention.check.interval.ms", _T.LONG, 5 * MS_PER_MINUTE,
           "How often retention (time and size) is applied.", Range(1)),
        _K("log.flush.offset.checkpoint.interval.ms", _T.INT, 60_000,
           "How often the recovery points are checkpointed.",
           Range(1, text=_NOT_ZERO)),
        _K("log.flush.start.offset.checkpoint.interval.ms", _T.INT, 60_000,
           "How often the log start offsets are checkpointed.",
           Range(1, text=_NOT_ZERO)),
        _K("log.dir.min.free.bytes", _T.LONG, 1024 * 1024 * 1024,
           "The free space each log dir keeps in reserve (Odradek's; Redpanda's "
           "storage_min_free_bytes): below it, or below 5% of the dir's file system if that "
           "is less, produces are refused with KAFKA_STORAGE_ERROR (retriable) while fetches, "
           "retention and DeleteRecords go on; writes resume by themselves once space "
           "returns. 0 turns the reserve off.", Range(0)),
        _K("log.cleaner.enable", _T.BOOLEAN, True,
           "Run the log cleaner, which compacts topics with cleanup.policy=compact."),
        _K("log.cleaner.threads", _T.INT, 1, "The number of log cleaner threads.",
           Range(1, text="must be >= 1 (Kafka also takes 0)"), dynamic=True),
        _K("producer.id.expiration.ms", _T.INT, 24 * MS_PER_HOUR,
           "Forget an idempotent producer's state this long after its last write.", Range(1),
           dynamic=True),
        _K("producer.id.expiration.check.interval.ms", _T.INT, 10 * MS_PER_MINUTE,
           "How often expired producer ids are removed. Internal in Kafka: DescribeConfigs "
           "lists it only when set.", Range(1), listed=False),
        _K("odradek.batch.max.decompressed.bytes", _T.INT, DEFAULT_MAX_DECOMPRESSED_BYTES,
           "Odradek's (Kafka has no bound): the most a produced compressed batch may inflate "
           "to. The leader inflates every compressed batch to check its records, never past "
           "this; a batch that would is refused with MESSAGE_TOO_LARGE (a Java producer "
           "splits it and retries), so a decompression bomb costs at most this much memory. "
           "Raise it for topics whose batches (up to max.message.bytes compressed) inflate "
           "further.",
           Range(1)),
        _K("odradek.record.validation.enable", _T.BOOLEAN, True,
           "Odradek's benchmark and diagnostic switch, never to be turned off in production: "
           "false skips the leader's walk of every produced record (keys on compacted "
           "topics, record timestamps, record counts, offset deltas, lengths, compressed "
           "bodies), leaving only the batch header and CRC checks, so that a batch with a "
           "valid CRC and broken records is stored and breaks its readers."),
    ),
    *_in(
        "Group coordinator",
        _K("offsets.topic.num.partitions", _T.INT, 50,
           "The number of partitions of __consumer_offsets (fixed once the topic exists).",
           Range(1)),
        _K("offsets.topic.replication.factor", _T.INT, 3,
           "The replication factor of __consumer_offsets, capped to the live brokers when "
           "the topic is created.", _SHORT, wire_type=SHORT_CONFIG_TYPE),
        _K("offsets.topic.segment.bytes", _T.INT, 100 * 1024 * 1024,
           "segment.bytes of __consumer_offsets.", Range(1)),
        _K("offsets.retention.minutes", _T.INT, 7 * 24 * 60,
           "Delete a group's committed offsets this long after it became empty.", Range(1)),
        _K("offsets.retention.check.interval.ms", _T.LONG, 10 * MS_PER_MINUTE,
           "How often expired offsets are looked for.", Range(1)),
        _K("offsets.commit.timeout.ms", _T.INT, 5000,
           "How long an offset commit waits for its write to be replicated.", Range(1)),
        _K("offsets.load.buffer.size", _T.INT, 5 * 1024 * 1024,
           "How many bytes are read at a time when loading groups from __consumer_offsets.",
           Range(1)),
        _K("offset.metadata.max.bytes", _T.INT, 4096,
           "The longest metadata string an offset commit may carry (in UTF-16 code units, "
           "as Kafka counts); longer ones are refused with OFFSET_METADATA_TOO_LARGE.",
           Range(0)),
        _K("group.initial.rebalance.delay.ms", _T.INT, 3000,
           "How long a new group waits for more members before its first rebalance.",
           Range(0)),
        _K("group.min.session.timeout.ms", _T.INT, 6000,
           "The shortest session timeout a member may ask for.", Range(0)),
        _K("group.max.session.timeout.ms", _T.INT, 30 * MS_PER_MINUTE,
           "The longest session timeout a member may ask for.", Range(0)),
        _K("group.max.size", _T.INT, INT_MAX,
           "The most members a consumer group may have.", Range(1)),
    ),
    *_in(
        "Transactions",
        _K("transaction.state.log.num.partitions", _T.INT, 50,
           "The number of partitions of __transaction_state (fixed once the topic exists).",
           Range(1)),
        _K("transaction.state.log.replication.factor", _T.INT, 3,
           "The replication factor of __transaction_state, capped to the live brokers when "
           "the topic is created.", _SHORT, wire_type=SHORT_CONFIG_TYPE),
        _K("transaction.state.log.min.isr", _T.INT, 2,
           "min.insync.replicas of __transaction_state.", Range(1)),
        _K("transaction.state.log.segment.bytes", _T.INT, 100 * 1024 * 1024,
           "segment.bytes of __transaction_state.", Range(1)),
        _K("transactional.id.expiration.ms", _T.INT, 7 * 24 * MS_PER_HOUR,
           "Forget a transactional id this long after its last transaction.", Range(1)),
        _K("transaction.max.timeout.ms", _T.INT, 15 * MS_PER_MINUTE,
           "The longest transaction timeout a producer may ask for.", Range(1)),
        _K("transaction.partition.verification.enable", _T.BOOLEAN, True,
           "The partition leader asks the transaction coordinator whether a transactional "
           "produce's partition is in the producer's transaction before writing its first "
           "batch there (KIP-890).", dynamic=True),
    ),
    *_in(
        "Cluster",
        _K("zookeeper.connect", _T.STRING, None,
           "host:port[,host:port...][/chroot] of a ZooKeeper ensemble. When unset, the "
           "broker keeps its cluster metadata in its embedded single-node store."),
        _K("zookeeper.session.timeout.ms", _T.INT, 18_000, "The ZooKeeper session timeout.",
           Range(1)),
        _K("zookeeper.connection.timeout.ms", _T.INT, None,
           "How long to wait for a ZooKeeper connection. When unset, "
           "zookeeper.session.timeout.ms applies.", Range(1),
           fallbacks=("zookeeper.session.timeout.ms",)),
        _K("broker.rack", _T.STRING, None,
           "This broker's rack or zone, for rack-aware replica placement."),
        _K("replica.lag.time.max.ms", _T.LONG, 30_000,
           "A follower that has not caught up for this long leaves the ISR.", Range(1)),
        _K("replica.fetch.max.bytes", _T.INT, 1024 * 1024,
           "How many bytes a follower asks for per partition.", Range(0)),
        _K("replica.fetch.wait.max.ms", _T.INT, 500,
           "How long a follower's fetch waits for data; at most replica.lag.time.max.ms.",
           Range(0)),
        _K("replica.fetch.min.bytes", _T.INT, 1,
           "How many bytes a follower's fetch waits for.", Range(1)),
        _K("replica.fetch.response.max.bytes", _T.INT, 10 * 1024 * 1024,
           "How many bytes a follower asks for in all.", Range(0)),
        _K("replica.fetch.backoff.ms", _T.INT, 1000,
           "How long a follower waits after a failed fetch.", Range(0)),
        _K("replica.socket.timeout.ms", _T.INT, 30_000,
           "How long a follower's request to the leader may take; more than "
           "replica.fetch.wait.max.ms.", Range(1)),
        _K("replica.high.watermark.checkpoint.interval.ms", _T.LONG, 5000,
           "How often the high watermarks are written to replication-offset-checkpoint.",
           Range(1)),
        _K("num.replica.fetchers", _T.INT, 1,
           "The number of follower fetcher threads per source broker.", Range(1),
           dynamic=True),
        _K("controlled.shutdown.enable", _T.BOOLEAN, True,
           "Move leadership away before shutting down."),
        _K("controlled.shutdown.max.retries", _T.INT, 3,
           "How many times a controlled shutdown is tried before the broker stops anyway.",
           Range(1)),
        _K("controlled.shutdown.retry.backoff.ms", _T.LONG, 5000,
           "How long to wait between controlled shutdown attempts.", Range(0)),
        _K("auto.leader.rebalance.enable", _T.BOOLEAN, True,
           "Move leadership back to preferred replicas in the background."),
        _K("leader.imbalance.check.interval.seconds", _T.LONG, 300,
           "How often leader imbalance is checked.", Range(1)),
        _K("leader.imbalance.per.broker.percentage", _T.INT, 10,
           "The share of non-preferred leaders per broker that triggers a rebalance.",
           Range(0, 100)),
    ),
    *_in(
        "Authorization",
        _K("authorizer.class.name", _T.STRING, "",
           "The authorizer every request is checked by: Kafka's ACL authorizer "
           "(kafka.security.authorizer.AclAuthorizer, or KRaft's "
           "org.apache.kafka.metadata.authorizer.StandardAuthorizer, which decides alike), "
           "with its ACLs in ZooKeeper (/kafka-acl) or the embedded store; empty: every "
           "client may do everything (docs/security.md).", OneOf(AUTHORIZER_CLASSES)),
        _K("super.users", _T.STRING, None,
           "Principals allowed everything whatever the ACLs, separated by semicolons: "
           "User:admin;User:CN=broker1,O=example."),
        _K("allow.everyone.if.no.acl.found", _T.BOOLEAN, False,
           "Whether a resource without any ACL is open to everyone (Kafka's default: no)."),
    ),
    # Kafka 4.0 names its sample server.properties files set, so that they load unchanged.
    # (Kafka 3.9's names come from kafka_configs.py.)
    *_in(
        "Kafka 4.0's share groups (accepted, no effect)",
        _K("share.coordinator.state.topic.replication.factor", _T.INT, 3,
           "The replication factor of Kafka's share-group state topic.", _SHORT,
           wire_type=SHORT_CONFIG_TYPE, no_effect=_SHARE_GROUPS),
        _K("share.coordinator.state.topic.min.isr", _T.INT, 2,
           "min.insync.replicas of Kafka's share-group state topic.", _SHORT,
           wire_type=SHORT_CONFIG_TYPE, no_effect=_SHARE_GROUPS),
    ),
]


# ---- Kafka 3.9's other settings: accepted, no effect -----------------------------------------

# Each part of Kafka whose settings Odradek accepts and ignores: its heading, and why the
# settings have no effect here (the warning's words, and the docs'). In the docs' order.
_AREAS = {
    "protocol": ("Protocol versions",
                 "Odradek serves one set of protocol versions, this release's: its brokers "
                 "speak one inter-broker protocol, advertise no unstable API version, and "
                 "always write record batches v2 (message format 2), as Kafka 3.x does from "
                 "inter.broker.protocol.version 3.0"),
    "threads": ("Thread pools",
                "Odradek runs its network layer and request handlers on an asyncio event "
                "loop, with worker threads of its own, so Kafka's thread pool sizes do not "
                "apply"),
    "network": ("Network and request tuning",
                "Kafka's socket, request and purgatory tuning: Odradek's asyncio network "
                "layer and delayed operations have no such knob"),
    "log": ("Log manager tuning", "Odradek's log manager has no such knob"),
    "cleaner": ("Log cleaner tuning",
                "Odradek's log cleaner sizes its own buffers and pauses (its dedupe map holds "
                "keys, not Kafka's 24-byte entries)"),
    "groups": ("Group coordinator tuning",
               "Odradek's group coordinator writes offset commits uncompressed, with acks=all "
               "(-1, Kafka's default)"),
    "consumer-groups": ("Consumer groups (KIP-848)",
                        "Kafka 3.9's new consumer group protocol (early access there, off by "
                        "default); Odradek's group coordinator serves the classic protocol"),
    "share-groups": ("Share groups (KIP-932)",
                     "Kafka 3.9's share groups (early access there, off by default); Odradek "
                     "has none"),
    "transactions": ("Transactions", "Odradek has no transaction coordinator yet"),
    "replication": ("Controller and replication tuning",
                    "Odradek's controller and followers have no such knob (and no "
                    "rack-aware replica selector for consumers, KIP-392)"),
    "server": ("Broker ids",
               "Odradek does not generate broker ids: node.id (or broker.id) is set, or 1"),
    "quota": ("Quotas and connection limits",
              "Odradek enforces client quotas (quota.window.num, quota.window.size.seconds) "
              "and connection limits (max.connections, max.connections.per.ip, "
              "max.connection.creation.rate) but not replication throttles yet"),
    "metrics": ("Metrics reporters",
                "Odradek serves its metrics at /metrics on its HTTP listener (Prometheus), "
                "not through Java reporters or JMX"),
    "tls": ("TLS", "Java's TLS machinery (key managers, providers, engine factories): "
            "Odradek's TLS is Python's ssl module over OpenSSL"),
    "sasl": ("SASL", "Kerberos (GSSAPI) and the client-side login, which Odradek's brokers "
             "do not use: they authenticate clients with PLAIN, SCRAM and OAUTHBEARER"),
    "auth": ("Principals and secrets",
             "Odradek has no delegation tokens or Java principal builders and policies"),
    "zookeeper": ("ZooKeeper client tuning",
                  "Odradek's ZooKeeper client manages its own connection and requests"),
    "zookeeper-security": ("ZooKeeper TLS",
                           "Odradek's ZooKeeper client connects without TLS (and "
                           "zookeeper.ssl.client.enable must be false)"),
    "tiered": ("Tiered storage", "Odradek has no tiered storage"),
    "kraft": ("KRaft",
              "Odradek has no KRaft mode; as in ZooKeeper-mode Kafka, KRaft's tuning is "
              "ignored"),
}

# Kafka's TLS and SASL settings Odradek serves (issue 17): per listener, with
# listener.name.<listener>.<config> over the base config (docs/security.md); the names in
# _JAVA_ONLY are Java's machinery or Kerberos, accepted with no effect.
_SERVED_AREAS = frozenset({"tls", "sasl"})
_JAVA_ONLY = frozenset({
    "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm", "ssl.provider",
    "ssl.secure.random.implementation", "ssl.engine.factory.class", "ssl.allow.dn.changes",
    "ssl.allow.san.changes", "sasl.client.callback.handler.class",
    "sasl.login.callback.handler.class", "sasl.login.class", "sasl.login.connect.timeout.ms",
    "sasl.login.read.timeout.ms", "sasl.login.refresh.buffer.seconds",
    "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.window.factor",
    "sasl.login.refresh.window.jitter", "sasl.login.retry.backoff.max.ms",
    "sasl.login.retry.backoff.ms", "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.min.time.before.relogin", "sasl.kerberos.principal.to.local.rules",
    "sasl.kerberos.service.name", "sasl.kerberos.ticket.renew.jitter",
    "sasl.kerberos.ticket.renew.window.factor", "sasl.oauthbearer.token.endpoint.url",
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
})
_SECURITY_DOCS = {
    # Dynamic passwords, stored encrypted (odradek/security/password_encoder.py).
    "password.encoder.secret": "The secret dynamic password configs (listener.name.<l>."
    "ssl.keystore.password, ...) are stored encrypted with, in Kafka's format; without it "
    "they cannot be updated dynamically.",
    "password.encoder.old.secret": "The secret stored passwords were encrypted with before "
    "password.encoder.secret changed: at start-up they are encrypted again with the new one.",
    "password.encoder.keyfactory.algorithm": "The PBKDF2 algorithm that derives the key from "
    "password.encoder.secret: PBKDF2WithHmacSHA512 when unset, or PBKDF2WithHmacSHA256, "
    "PBKDF2WithHmacSHA1.",
    "password.encoder.cipher.algorithm": "The cipher of stored passwords: "
    "AES/CBC/PKCS5Padding or AES/GCM/NoPadding.",
    "password.encoder.key.length": "The AES key length in bits (128, 192 or 256).",
    "password.encoder.iterations": "The PBKDF2 iterations.",
    # Client quotas (odradek/server/quota_manager.py): the rates' windows.
    "quota.window.num": "The number of samples client quota rates are measured over "
    "(producer_byte_rate, consumer_byte_rate, request_percentage), as in Kafka.",
    "quota.window.size.seconds": "The time span of each sample client quota rates are "
    "measured over, as in Kafka.",
    # controller_mutation_rate's token bucket (KIP-599): it holds num x size x the rate.
    "controller.quota.window.num": "The number of samples of controller_mutation_rate's "
    "window: a client may mutate the rate x controller.quota.window.num x "
    "controller.quota.window.size.seconds partitions at once, as in Kafka.",
    "controller.quota.window.size.seconds": "The time span of each sample of "
    "controller_mutation_rate's window, as in Kafka.",
    # Connection limits (odradek/server/connection_quotas.py), as Kafka's ConnectionQuotas.
    "max.connections": "The most connections the broker holds at once, over all listeners "
    "(listener.name.<listener>.max.connections: one listener's, by default this value). At "
    "the limit a listener stops accepting, and new connections wait in the listen backlog "
    "until one closes. The inter-broker listener is exempt from the broker-wide limit (not "
    "from its own): a connection it takes past it closes the least recently used "
    "connection of another listener, as does lowering the limit.",
    "max.connection.creation.rate": "The most new connections per second the broker "
    "accepts, over all listeners but the inter-broker one "
    "(listener.name.<listener>.max.connection.creation.rate: one listener's, by default "
    "this value, the inter-broker listener's too). Past it a listener stops accepting for "
    "up to quota.window.size.seconds (KIP-612); the rate is measured as client quotas' are.",
    "max.connections.per.ip": "The most connections from one IP address: a new connection "
    "from an address that has them is closed at once, unread. 0 needs "
    "max.connections.per.ip.overrides.",
    "max.connections.per.ip.overrides": "Limits over max.connections.per.ip for some "
    "hosts: host:count,host2:count, each host an IP address or a host name (standing for "
    "the first address it resolves to when the setting is read, IPv4 first, as in Kafka).",
    "ssl.keystore.type": "The format of the listener's key and certificate chain: PEM or "
    "PKCS12 (a JKS keystore is refused: convert it with keytool).",
    "ssl.keystore.location": "The keystore file: PEM (the private key and its certificate "
    "chain) or PKCS12.",
    "ssl.keystore.password": "The PKCS12 keystore's password.",
    "ssl.key.password": "The password of the private key (an encrypted PEM key).",
    "ssl.keystore.key": "The private key in PEM, inline (KIP-651), instead of a file.",
    "ssl.keystore.certificate.chain": "The certificate chain in PEM, inline (KIP-651).",
    "ssl.truststore.type": "The format of the trusted certificates: PEM or PKCS12.",
    "ssl.truststore.location": "The CA certificates clients' (and brokers') certificates are "
    "checked against.",
    "ssl.truststore.password": "The PKCS12 truststore's password.",
    "ssl.truststore.certificates": "Trusted CA certificates in PEM, inline (KIP-651).",
    "ssl.client.auth": "Whether TLS clients must present a certificate (required), may "
    "(requested) or are not asked (none); the principal of a client that does is its "
    "certificate's distinguished name through ssl.principal.mapping.rules.",
    "ssl.enabled.protocols": "The TLS versions served.",
    "ssl.protocol": "The TLS protocol of connections this broker opens (to other brokers).",
    "ssl.cipher.suites": "The TLS 1.2 cipher suites served, by their IANA (Java) or OpenSSL "
    "names; empty: OpenSSL's defaults.",
    "ssl.endpoint.identification.algorithm": "https: a broker checks the host name of the "
    "brokers it connects to against their certificates; empty: it does not.",
    "ssl.principal.mapping.rules": "Rules from a client certificate's distinguished name to "
    "its principal name: RULE:pattern/replacement/[LU], ..., DEFAULT.",
    "sasl.enabled.mechanisms": "The SASL mechanisms a SASL listener serves: PLAIN, "
    "SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (GSSAPI, Kafka's default, is refused).",
    "sasl.jaas.config": "The JAAS login module of a mechanism, in Kafka's syntax (usually per "
    "listener and mechanism: listener.name.<l>.<mechanism>.sasl.jaas.config); PLAIN's users "
    "are its user_<name>=\"<password>\" options, and a broker's own credentials for the "
    "inter-broker listener its username and password.",
    "sasl.mechanism.inter.broker.protocol": "The mechanism brokers authenticate to each "
    "other with, when the inter-broker listener is SASL.",
    "sasl.server.callback.handler.class": "OAUTHBEARER's token validation: Kafka's unsecured "
    "validator by default, or org.apache.kafka.common.security.oauthbearer."
    "OAuthBearerValidatorCallbackHandler for signed JWTs checked against a JWKS.",
    "security.inter.broker.protocol": "The security protocol brokers talk to each other "
    "with: the listener of that name is the inter-broker listener (set this or "
    "inter.broker.listener.name).",
    "sasl.server.max.receive.size": "The largest request a connection may send before it "
    "is authenticated.",
    "connections.max.reauth.ms": "How long a SASL session lasts before the client must "
    "re-authenticate on its connection (KIP-368); 0: forever.",
    "connection.failed.authentication.delay.ms": "How long the answer to a failed "
    "authentication, and the close, are delayed (slows password guessing).",
}

_KRAFT = ("Odradek has no KRaft mode: it keeps cluster metadata in its embedded single-node "
          "store, or in ZooKeeper when zookeeper.connect is set")

# Kafka 3.9 settings whose other values would pretend to a security or durability Odradek
# lacks, or to KRaft: the only value taken (their default, or empty), and why.
_REFUSED: dict[str, tuple[Any, str]] = {
    "create.topic.policy.class.name": ("", "Odradek cannot run Kafka's Java policy classes, "
                                       "so topics would be created unchecked"),
    "alter.config.policy.class.name": ("", "Odradek cannot run Kafka's Java policy classes, "
                                       "so configs would be altered unchecked"),
    "zookeeper.set.acl": (False, "Odradek's ZooKeeper client sets no ACLs on the znodes it "
                          "writes, so whoever reaches ZooKeeper can change them"),
    "zookeeper.ssl.client.enable": (False, "Odradek's ZooKeeper client connects without "
                                    "TLS"),
    "remote.log.storage.system.enable": (False, "Odradek has no tiered storage: no segment "
                                         "is ever copied to remote storage"),
    "zookeeper.metadata.migration.enable": (False, _KRAFT),
    "process.roles": ("", _KRAFT),
    "controller.quorum.voters": ("", _KRAFT),
    "controller.quorum.bootstrap.servers": ("", _KRAFT),
    "controller.listener.names": ("", _KRAFT),
    "metadata.log.dir": ("", _KRAFT),
}

# Kafka's types as Odradek parses them; a list is kept as Kafka writes it, in order.
_PARSED_AS = {
    KafkaType.SHORT: ConfigType.INT, KafkaType.LIST: ConfigType.STRING,
    KafkaType.CLASS: ConfigType.STRING, KafkaType.PASSWORD: ConfigType.STRING,
}


def _kafka_key(config: KafkaBrokerConfig) -> BrokerKey:
    """A Kafka 3.9 setting Odradek accepts and ignores, with Kafka 3.9's type and default."""
    title, reason = _AREAS[config.area]
    validator = config.validator
    if config.type is KafkaType.SHORT:
        low = getattr(validator, "low", None)
        high = getattr(validator, "high", None)
        validator = Range(SHORT_MIN if low is None else low, SHORT_MAX if high is None else high)
    refused = _REFUSED.get(config.name)
    served = ((config.area in _SERVED_AREAS and config.name not in _JAVA_ONLY)
              or config.name in _SECURITY_DOCS)
    return BrokerKey(
        config.name,
        _PARSED_AS[config.type] if config.type in _PARSED_AS else ConfigType(int(config.type)),
        config.default,
        _SECURITY_DOCS.get(config.name, "As in Kafka (docs/security.md).") if served
        else f"{reason}.",
        validator,
        group=title if served else f"{title} (accepted, no effect)",
        dynamic=config.dynamic,
        no_effect=reason if refused is None and not served else "",
        sensitive=config.type is KafkaType.PASSWORD,
        wire_type=int(config.type) if config.type in _PARSED_AS else None,
        per_broker=config.update_mode is UpdateMode.PER_BROKER,
        listed=not config.internal,
        refused=refused,
    )


def _kafka_keys(known: Iterable[str]) -> list[BrokerKey]:
    """The Kafka 3.9 settings that are not in `known`, by area, then by name."""
    known = set(known)
    order = list(_AREAS)
    configs = [c for c in KAFKA_39_BROKER_CONFIGS.values() if c.name not in known]
    # The quota settings with an effect (client quotas', connection limits) head their area's.
    return [_kafka_key(c) for c in sorted(configs, key=lambda c: (
        order.index(c.area), c.area == "quota" and c.name not in _SECURITY_DOCS, c.name))]


def _build_table() -> Mapping[str, BrokerKey]:
    derived = _topic_default_keys()
    table: dict[str, BrokerKey] = {}
    # In the docs' order: server and network settings, the topic defaults, the rest.
    order = [k for k in _HAND_KEYS if k.group in ("Server", "Network")]
    order += derived
    order += [k for k in _HAND_KEYS if k.group not in ("Server", "Network")]
    order += _kafka_keys(k.name for k in order)  # Kafka 3.9's others: accepted, no effect
    for key in order:
        if key.name in table:  # e.g. message.max.bytes typed by hand: it is TOPIC_CONFIGS'
            raise RuntimeError(f"broker config {key.name} is defined twice")
        table[key.name] = key
    for name in _REFUSED:
        if table[name].refused is None:
            raise RuntimeError(f"{name} is refused, but Odradek defines it")
    for key in table.values():
        for name in key.fallbacks:
            lower = table[name]
            if lower.scale % key.scale or (lower.scale == key.scale and lower.type is not key.type):
                raise RuntimeError(f"{key.name} cannot fall back to {name}")
    return MappingProxyType(table)


BROKER_CONFIGS: Mapping[str, BrokerKey] = _build_table()
"""Every broker setting by Kafka name, in the order docs/configuration.md lists them."""

KRAFT_ONLY_CONFIGS = frozenset(name for name, (_, why) in _REFUSED.items() if why == _KRAFT)
"""Settings of Kafka's KRaft mode, which Odradek refuses (unless empty or false) rather than
ignores: they would switch Kafka to KRaft, or migrate it there."""


def _check_name(name: str) -> BrokerKey:
    """The setting of a Kafka name, or of a listener.name.<listener>.<config> name; raises
    InvalidConfigError, with a hint, for any other name."""
    key = BROKER_CONFIGS.get(name)
    if key is not None:
        return key
    if name.startswith(LISTENER_PREFIX):
        return _listener_key(name)
    if name in TOPIC_CONFIGS and TOPIC_CONFIGS[name].synonyms:
        hint = f"; the broker's default for it is {TOPIC_CONFIGS[name].synonyms[0].name}"
    elif name in TOPIC_CONFIGS:
        hint = ("; it is a topic config, and no broker setting supplies its default: set it "
                "on the topic")
    else:
        close = difflib.get_close_matches(name, BROKER_CONFIGS, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
    raise InvalidConfigError(f"{name} is not a broker config{hint}", key=name)


def _listener_key(name: str) -> BrokerKey:
    """listener.name.<listener>.[<mechanism>.]<config>: Kafka's per-listener TLS, SASL and
    connection configs, which override the base config for that listener, with the effect
    of their base (a TLS or SASL setting read at start-up, a connection limit followed as
    it changes). They are dynamic, per broker (but for the connection limits), and listed
    by DescribeConfigs only when set."""
    listener, _, base = name[len(LISTENER_PREFIX):].partition(".")
    mechanism = next((c for c in LISTENER_MECHANISM_CONFIGS if base.endswith("." + c)), None)
    key = BROKER_CONFIGS.get(mechanism or base)
    kafka = KAFKA_39_BROKER_CONFIGS.get(mechanism or base)
    if not listener or key is None or kafka is None or not (
            kafka.name in LISTENER_CONFIGS or kafka.area in LISTENER_CONFIG_AREAS):
        raise InvalidConfigError(
            f"{name} is not a broker config: after listener.name.<listener>. Kafka takes "
            "a TLS or SASL config (ssl.keystore.location, <mechanism>.sasl.jaas.config, ...), "
            "principal.builder.class, max.connections or max.connection.creation.rate",
            key=name)
    return replace(key, name=name, dynamic=True, fallbacks=(), listed=False,
                   per_broker=key.name not in CLUSTER_LEVEL_LISTENER_CONFIGS)


def broker_key(name: str) -> BrokerKey:
    """The setting a name (a Kafka name, or listener.name.<listener>.<config>) stands for.
    Raises InvalidConfigError, with a hint, for an unknown name."""
    return _check_name(name)


def _is_listener_security(key: BrokerKey) -> bool:
    """A TLS or SASL setting that has its effect (per listener, or its base)."""
    base = key.name
    if base.startswith(LISTENER_PREFIX):
        base = base[len(LISTENER_PREFIX):].partition(".")[2]
        base = next((c for c in LISTENER_MECHANISM_CONFIGS if base.endswith("." + c)), base)
    kafka = KAFKA_39_BROKER_CONFIGS.get(base)
    return (kafka is not None and kafka.area in _SERVED_AREAS and base not in _JAVA_ONLY) or (
        base == "connections.max.reauth.ms")


def _is_reconfigurable_tls(name: str) -> bool:
    """listener.name.<listener>.<one of SslConfigs.RECONFIGURABLE_CONFIGS>."""
    return (name.startswith(LISTENER_PREFIX)
            and name[len(LISTENER_PREFIX):].partition(".")[2] in LISTENER_ONLY_DYNAMIC_CONFIGS)


def _refuse(names: Iterable[str], message: str) -> None:
    refused = sorted(names)
    if refused:
        raise InvalidConfigError(f"{message}: {{" + ", ".join(refused) + "}", key=refused[0])


def ignored_settings(settings: Mapping[str, str | None]) -> list[str]:
    """A warning for each of `settings` (valid, explicitly given: server.properties or a
    dynamic update) that is accepted and has no effect, saying why; a removal (None) has
    none. A sensitive value is not shown."""
    warnings = []
    for name, raw in settings.items():
        if raw is None:
            continue
        key = _check_name(name)
        reason = key.ignored(key.coerce(raw))
        if reason:
            shown = "(sensitive)" if key.sensitive else raw
            warnings.append(f"{name}={shown} is accepted and has no effect: {reason}")
    return warnings


# ---- properties files ----------------------------------------------------------------------

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_BLANK = " \t\f"
_NEWLINE = re.compile(r"\r\n|\r|\n")  # Java's line terminators; str.splitlines knows more


def load_properties(path: str | Path) -> dict[str, str]:
    """The settings of a Java .properties file such as Kafka's server.properties.

    Read as UTF-8, or as ISO-8859-1 (what Java's Properties.load reads) when it is not
    UTF-8. Raises OSError when unreadable, ValueError on a malformed \\uXXXX escape.
    """
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("iso-8859-1")
    try:
        return parse_properties(text)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties syntax: # and ! comments; key=value, key:value or key value;
    backslash line continuations; \\t \\n \\r \\f \\uXXXX escapes, and a backslash before
    any other character stands for that character. Whitespace around keys and values is
    trimmed, except where escaped. A later duplicate key wins, as in Java."""
    props: dict[str, str] = {}
    lines = _NEWLINE.split(text)
    i = 0
    while i < len(lines):
        number = i + 1
        line = lines[i].lstrip(_BLANK)
        i += 1
        if not line or line[0] in "#!":
            continue  # a comment ends at its line, whatever it ends with
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip(_BLANK)
            i += 1
        if _continues(line):
            line = line[:-1]  # a continuation at the end of the file continues nothing
        try:
            key, value = _split_entry(line)
        except ValueError as e:
            raise ValueError(f"line {number}: {e}") from None
        props[key] = value
    return props


def _continues(line: str) -> bool:
    """Whether a line ends with an odd number of backslashes (the last is not escaped)."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split_entry(line: str) -> tuple[str, str]:
    """Key and value of one logical line, unescaped."""
    pos = 0
    while pos < len(line) and line[pos] not in "=:" + _BLANK:
        pos += 2 if line[pos] == "\\" else 1
    key_end = min(pos, len(line))
    while pos < len(line) and line[pos] in _BLANK:
        pos += 1
    if pos < len(line) and line[pos] in "=:":
        pos += 1
    while pos < len(line) and line[pos] in _BLANK:
        pos += 1
    return _unescape(line[:key_end]), _unescape(line[pos:], trim=True)


def _unescape(text: str, *, trim: bool = False) -> str:
    out: list[str] = []
    escaped_end = 0  # length of `out` up to the last escaped character, kept by the trim
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\" or i + 1 == len(text):
            out.append(c)
            i += 1
            continue
        c = text[i + 1]
        if c == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise ValueError(f"malformed \\uXXXX escape: \\u{digits}")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(c, c))
            i += 2
        escaped_end = len(out)
    value = "".join(out)
    if trim:  # trailing whitespace is dropped unless escaped (Java keeps it; Kafka trims)
        value = value[:escaped_end] + value[escaped_end:].rstrip(_BLANK)
    # \uD83D\uDE00: a surrogate pair, as Java writes characters beyond the BMP
    return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


# ---- listeners -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Listener:
    """One NAME://host:port entry of listeners or advertised.listeners."""

    name: str  # upper case, as Kafka normalises listener names
    host: str  # "" means every interface (listeners) or this machine's name (advertised)
    port: int  # 0 means a free port chosen when the listener binds
    security_protocol: str

    @property
    def bind_host(self) -> str | None:
        """The host to bind (asyncio.start_server's host): None for every interface."""
        return self.host or None

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


_LISTENER = re.compile(r"(?P<name>[A-Za-z0-9_-]+)://(?:\[(?P<ipv6>[0-9A-Fa-f:.%]*)\]|"
                       r"(?P<host>[^\s:/\[\]]*)):(?P<port>[+-]?\d+)")


@dataclass(frozen=True, slots=True)
class HttpListener:
    """One http://host:port entry of http.listeners."""

    host: str  # "" means every interface
    port: int  # 0 means a free port chosen when the listener binds

    @property
    def bind_host(self) -> str | None:
        return self.host or None

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


_HTTP_LISTENER = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://"
                            r"(?:\[(?P<ipv6>[0-9A-Fa-f:.%]*)\]|(?P<host>[^\s:/\[\]]*))"
                            r":(?P<port>[+-]?\d+)/?")


def parse_http_listeners(raw: str, key: str = "http.listeners"
                         ) -> tuple[HttpListener, ...]:
    """http.listeners (or `key`, of the same form): comma-separated http://host:port
    entries; empty for none. Raises InvalidConfigError saying which entry is wrong and
    why."""
    listeners: list[HttpListener] = []
    for entry in filter(None, (e.strip() for e in raw.split(","))):
        match = _HTTP_LISTENER.fullmatch(entry)
        if match is None:
            raise _invalid(key, raw, f"{entry!r} is not http://host:port")
        if match["scheme"].lower() != "http":
            raise _invalid(key, raw, f"{entry!r}: only http:// is served (no TLS on the "
                           "HTTP listener yet)")
        port = int(match["port"])
        if not 0 <= port <= 65535:
            raise _invalid(key, raw, f"port {port} must be between 0 and 65535")
        host = match["ipv6"] if match["ipv6"] is not None else match["host"]
        listener = HttpListener(host, port)
        if port and any(other.port == port for other in listeners):
            raise _invalid(key, raw, f"each HTTP listener needs its own port, and {port} is "
                           "used twice")
        listeners.append(listener)
    return tuple(listeners)


def _parse_protocol_map(raw: str) -> dict[str, str]:
    key = "listener.security.protocol.map"
    protocols: dict[str, str] = {}
    for entry in filter(None, (e.strip() for e in raw.split(","))):
        name, sep, protocol = (part.strip().upper() for part in entry.partition(":"))
        if not sep or not name or not protocol:
            raise _invalid(key, raw, f"{entry!r} is not NAME:PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise _invalid(key, raw, f"{protocol} is not a security protocol: "
                           + str(OneOf(SECURITY_PROTOCOLS)))
        if name in protocols:
            raise _invalid(key, raw, f"listener {name} is mapped twice")
        protocols[name] = protocol
    return protocols


def _parse_listeners(key: str, raw: str, protocols: Mapping[str, str],
                     existing: Sequence[str] | None = None) -> tuple[Listener, ...]:
    """NAME://host:port entries; with `existing` (for advertised.listeners), names among it."""
    listeners: list[Listener] = []
    for entry in filter(None, (e.strip() for e in raw.split(","))):
        match = _LISTENER.fullmatch(entry)
        if match is None:
            raise _invalid(key, raw, f"{entry!r} is not NAME://host:port")
        name = match["name"].upper()
        port = int(match["port"])
        if not 0 <= port <= 65535:
            raise _invalid(key, raw, f"port {port} of {name} must be between 0 and 65535")
        if name in (listener.name for listener in listeners):
            raise _invalid(key, raw, f"listener names must be unique, and {name} is repeated")
        if existing is not None and name not in existing:
            raise _invalid(key, raw, f"{name} is not one of the listeners ("
                           + ", ".join(existing) + ")")
        if name not in protocols:
            raise _invalid(key, raw, f"no security protocol is defined for listener {name} "
                           "in listener.security.protocol.map")
        host = match["ipv6"] if match["ipv6"] is not None else match["host"]
        listeners.append(Listener(name, host, port, protocols[name]))
    if not listeners:
        raise _invalid(key, raw, "must name at least one NAME://host:port")
    return tuple(listeners)


def _is_meta_address(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_unspecified
    except ValueError:
        return False


# ---- DescribeConfigs -----------------------------------------------------------------------


class ConfigSynonym(NamedTuple):
    """One place a setting is given (DescribeConfigs' synonyms), highest precedence first."""

    name: str
    value: str | None  # None when the setting is sensitive
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One broker setting as DescribeConfigs lists it."""

    name: str
    value: str | None  # None when sensitive or unset
    source: ConfigSource
    read_only: bool  # not dynamically updatable
    is_sensitive: bool
    config_type: int  # DescribeConfigs' ConfigType code
    documentation: str
    synonyms: tuple[ConfigSynonym, ...]


# ---- the broker's configuration ------------------------------------------------------------

_Layer = Mapping[str, Any]


@dataclass(frozen=True, kw_only=True)
class BrokerConfig:
    """A broker's settings, validated and typed. Build it with `from_properties`.

    `properties` holds the static settings given explicitly (server.properties), `dynamic`
    the per-broker dynamic overrides and `dynamic_defaults` the cluster-wide ones; the
    typed attributes and `get` give the values in force.
    """

    properties: Mapping[str, str]
    dynamic: Mapping[str, str]
    dynamic_defaults: Mapping[str, str]
    node_id: int
    listeners: tuple[Listener, ...]
    advertised_listeners: tuple[Listener, ...]
    inter_broker_listener_name: str
    log_dirs: tuple[Path, ...]
    num_partitions: int
    default_replication_factor: int
    auto_create_topics_enable: bool
    delete_topic_enable: bool
    message_max_bytes: int
    socket_request_max_bytes: int
    connections_max_idle_ms: int
    fetch_max_bytes: int
    max_incremental_fetch_session_cache_slots: int
    queued_max_requests: int
    producer_id_expiration_ms: int
    zookeeper_connect: str | None
    broker_rack: str | None
    log_config: LogConfig  # the topic defaults
    log_manager_config: LogManagerConfig
    _values: Mapping[str, Any] = field(repr=False, compare=False)
    _synonyms: Mapping[str, tuple[ConfigSynonym, ...]] = field(repr=False, compare=False)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> BrokerConfig:
        """The broker's configuration from its static properties (server.properties).

        Raises InvalidConfigError naming the setting for an unknown key, a KRaft setting, a
        refused value (a security or durability Odradek lacks), an invalid value or settings
        that contradict each other. Logs a warning for each setting accepted with no effect.
        """
        config = cls._build(props, {}, {})
        for warning in ignored_settings(props):
            log.warning("%s", warning)
        return config

    @classmethod
    def default(cls) -> BrokerConfig:
        """The embedded single-node defaults."""
        return cls._build({}, {}, {})

    def with_dynamic(self, updates: Mapping[str, str | None], *,
                     cluster_default: bool = False) -> BrokerConfig:
        """This configuration with dynamic settings set (or, for None, removed): per broker,
        or with `cluster_default` the cluster-wide defaults, which per-broker ones override.

        Raises InvalidConfigError for a setting that cannot be updated dynamically or an
        invalid value; this configuration is unchanged.
        """
        keys = {name: _check_name(name) for name in updates}
        # Kafka's checks (DynamicBrokerConfig.validateConfigs), in its order.
        _refuse([n for n, k in keys.items() if not k.dynamic],
                "Cannot update these configs dynamically")
        _refuse([n for n in keys if n in LISTENER_ONLY_DYNAMIC_CONFIGS],
                "These security configs can be dynamically updated only per-listener using "
                "the listener prefix")
        if cluster_default:
            _refuse([n for n, k in keys.items() if k.per_broker],
                    "Cannot update these configs at default cluster level, broker id must be "
                    "specified")
        # Kafka (ZooKeeper mode) stores dynamic passwords encrypted with
        # password.encoder.secret (security/password_encoder.py); they are all per broker.
        if self.get("password.encoder.secret") is None:
            _refuse([n for n, k in keys.items()
                     if k.config_type == PASSWORD_CONFIG_TYPE and updates[n] is not None],
                    "Password encoder secret not configured: set "
                    "password.encoder.secret in server.properties to update passwords "
                    "dynamically (they are stored encrypted with it, as Kafka stores them)")
        # A TLS listener's keystore and truststore are reloaded (listener_tls.py), as
        # Kafka's SslFactory reconfigures them; what Kafka does not reconfigure is refused
        # rather than kept for a restart.
        _refuse([n for n, k in keys.items()
                 if _is_listener_security(k) and updates[n] is not None
                 and not _is_reconfigurable_tls(n)],
                "Only a TLS listener's keystore and truststore (listener.name.<listener>."
                "ssl.keystore.location, ...) can be updated dynamically: change other TLS "
                "and SASL settings in server.properties and restart the broker")
        layer = dict(self.dynamic_defaults if cluster_default else self.dynamic)
        for name, value in updates.items():
            if value is None:
                layer.pop(name, None)
            else:
                layer[name] = value
        if cluster_default:
            return self._build(self.properties, layer, self.dynamic)
        return self._build(self.properties, self.dynamic_defaults, layer)

    @property
    def http_listeners(self) -> tuple[HttpListener, ...]:
        """http.listeners, parsed (checked when this configuration was built)."""
        return parse_http_listeners(self._values["http.listeners"])

    @property
    def registry_listener(self) -> HttpListener | None:
        """registry.listeners, parsed (checked when this configuration was built)."""
        found = parse_http_listeners(self._values["registry.listeners"], "registry.listeners")
        return found[0] if found else None

    def get(self, name: str) -> Any:
        """The typed value in force of any setting by Kafka name (None when unset), through
        its synonyms: get("log.retention.ms") is 604800000 when only the default of
        log.retention.hours applies. Raises KeyError for an unknown name."""
        if name not in BROKER_CONFIGS:
            raise KeyError(name)
        return self._values[name]

    def describe(self, keys: Iterable[str] | None = None, *,
                 cluster_default: bool = False) -> list[ConfigEntry]:
        """The settings as DescribeConfigs lists this broker's: all of them, or those of
        `keys` (unknown names are left out, as Kafka does), in table order. With
        `cluster_default` (the broker resource named ""), only the dynamic cluster-wide
        defaults, without per-broker synonyms, as Kafka lists them.

        A value comes from the first of its synonyms: the setting itself and the ones it
        falls back to, in each layer from dynamic to default (Kafka's order); a synonym in
        another unit is converted (log.retention.ms shows log.retention.hours in ms).
        Where Kafka lists no synonyms for a setting that is unset itself, this lists those
        it falls back to.

        As Kafka does, Kafka's internal settings and the dynamic-only broker quotas are
        listed only when set, and so are listener.name.<listener>.<config> settings (after
        the table's, with the base config as their synonym).
        """
        wanted = None if keys is None else set(keys)
        given = {**self.properties, **self.dynamic_defaults, **self.dynamic}
        extra = [_check_name(name) for name in self.extra_settings()]
        entries = []
        for key in [*BROKER_CONFIGS.values(), *extra]:
            if wanted is not None and key.name not in wanted:
                continue
            if not key.listed and key.name not in given:
                continue
            if key.name in BROKER_CONFIGS:
                synonyms = self._synonyms[key.name]
                value = self._values[key.name]
            else:
                synonyms = self._listener_synonyms(key)
                value = key.coerce(given[key.name])
            if cluster_default:
                if key.name not in self.dynamic_defaults:
                    continue
                value = key.coerce(self.dynamic_defaults[key.name])
                synonyms = tuple(
                    s for s in synonyms if s.source is not ConfigSource.DYNAMIC_BROKER_CONFIG
                )
            entries.append(
                ConfigEntry(
                    name=key.name,
                    value=None if key.sensitive or value is None else key.format(value),
                    source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
                    read_only=not key.dynamic,
                    is_sensitive=key.sensitive,
                    config_type=key.config_type,
                    documentation=_documentation(key),
                    synonyms=synonyms,
                )
            )
        return entries

    def listener_values(self, listener: str, names: Iterable[str],
                        mechanism: str | None = None, *, listener_only: bool = False
                        ) -> dict[str, str | None]:
        """The values in force for one listener (and SASL mechanism), raw, by base name:
        listener.name.<listener>.[<mechanism>.]<name> over the base setting, as Kafka's
        channel builders read them (the listener and mechanism in lower case). With
        `listener_only`, only the names the listener's own settings give."""
        given = {k.lower(): v for k, v in
                 {**self.properties, **self.dynamic_defaults, **self.dynamic}.items()
                 if k.startswith(LISTENER_PREFIX)}
        prefix = f"{LISTENER_PREFIX}{listener.lower()}."
        out: dict[str, str | None] = {}
        for name in names:
            candidates = [prefix + name]
            if mechanism is not None and name in LISTENER_MECHANISM_CONFIGS:
                candidates.insert(0, f"{prefix}{mechanism.lower()}.{name}")
            found = next((c for c in candidates if c in given), None)
            if found is not None:
                out[name] = given[found]
            elif not listener_only:
                key = BROKER_CONFIGS[name]
                value = self._values[name]
                out[name] = None if value is None else key.format(value)
        return out

    def extra_settings(self) -> list[str]:
        """The listener.name.<listener>.<config> settings given, in any layer."""
        names = {**self.properties, **self.dynamic_defaults, **self.dynamic}
        return [name for name in names if name not in BROKER_CONFIGS]

    def _listener_synonyms(self, key: BrokerKey) -> tuple[ConfigSynonym, ...]:
        """A listener setting in each layer that gives it, then its base config's synonyms
        (Kafka's DynamicBrokerConfig.brokerConfigSynonyms)."""
        layers = ((ConfigSource.DYNAMIC_BROKER_CONFIG, self.dynamic),
                  (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, self.dynamic_defaults),
                  (ConfigSource.STATIC_BROKER_CONFIG, self.properties))
        own = [ConfigSynonym(key.name, None if key.sensitive else str(layer[key.name]), source)
               for source, layer in layers if key.name in layer]
        base = key.name[len(LISTENER_PREFIX):].partition(".")[2]
        base = next((c for c in LISTENER_MECHANISM_CONFIGS if base.endswith("." + c)), base)
        return (*own, *self._synonyms[base])

    # ---- building ---------------------------------------------------------------------

    @classmethod
    def _build(cls, static: Mapping[str, str], dynamic_defaults: Mapping[str, str],
               dynamic: Mapping[str, str]) -> BrokerConfig:
        layers: list[tuple[ConfigSource, Mapping[str, str], dict[str, Any]]] = []
        for source, raw_layer in (
            (ConfigSource.DYNAMIC_BROKER_CONFIG, dynamic),
            (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, dynamic_defaults),
            (ConfigSource.STATIC_BROKER_CONFIG, static),
        ):
            typed = {}
            for name, raw in raw_layer.items():
                key = _check_name(name)
                if source is not ConfigSource.STATIC_BROKER_CONFIG and not key.dynamic:
                    raise InvalidConfigError(f"{name} cannot be updated dynamically", key=name)
                typed[name] = key.coerce(raw)
            layers.append((source, raw_layer, typed))

        values: dict[str, Any] = {}
        synonyms: dict[str, tuple[ConfigSynonym, ...]] = {}
        for key in BROKER_CONFIGS.values():
            values[key.name], synonyms[key.name] = _resolve(key, layers)

        typed_static = layers[-1][2]
        ids = {typed_static[n] for n in ("node.id", "broker.id") if n in typed_static}
        if len(ids) > 1:
            raise InvalidConfigError(
                f"node.id={static['node.id']} and broker.id={static['broker.id']} differ: "
                "they are two names of one setting, so give one, or both equal",
                key="broker.id",
            )
        if "inter.broker.listener.name" in static and "security.inter.broker.protocol" in static:
            raise InvalidConfigError(  # Kafka's words (KafkaConfig)
                "Only one of inter.broker.listener.name and security.inter.broker.protocol "
                "should be set.", key="security.inter.broker.protocol")
        _check_pair(values, "group.min.session.timeout.ms", "group.max.session.timeout.ms")
        _check_pair(values, "replica.fetch.wait.max.ms", "replica.lag.time.max.ms")
        _check_pair(values, "replica.fetch.wait.max.ms", "replica.socket.timeout.ms")
        _check_connection_overrides(values)

        protocols = _parse_protocol_map(values["listener.security.protocol.map"])
        listeners = _parse_listeners("listeners", values["listeners"], protocols)
        _check_ports(listeners, values["listeners"])
        http_listeners = parse_http_listeners(values["http.listeners"])
        kafka_ports = {listener.port for listener in listeners if listener.port}
        for http in http_listeners:
            if http.port in kafka_ports:
                raise _invalid("http.listeners", values["http.listeners"], f"port {http.port} "
                               "is a Kafka listener's (listeners)")
        registry = parse_http_listeners(values["registry.listeners"], "registry.listeners")
        if len(registry) > 1:
            raise _invalid("registry.listeners", values["registry.listeners"],
                           "one address at most")
        if registry and not any(li.security_protocol == "PLAINTEXT" for li in listeners):
            raise _invalid("registry.listeners", values["registry.listeners"], "the "
                           "in-process registry connects to a PLAINTEXT listener; with "
                           "none, run `odradek registry --command-config` beside the broker")
        for r in registry:
            if r.port and (r.port in kafka_ports or r.port in {h.port for h in http_listeners}):
                raise _invalid("registry.listeners", values["registry.listeners"],
                               f"port {r.port} is another listener's")
        own = synonyms["advertised.listeners"][0].name == "advertised.listeners"
        advertised = _advertised(values["advertised.listeners"], own, listeners, protocols)
        inter_broker = _inter_broker_listener(
            values["inter.broker.listener.name"],
            static.get("security.inter.broker.protocol"), advertised)

        merged = {**static, **dynamic_defaults, **dynamic}
        log_config = _log_config(merged)
        log_dirs = _log_dirs(values, synonyms["log.dirs"][0].name)
        return cls(
            properties=MappingProxyType(dict(static)),
            dynamic=MappingProxyType(dict(dynamic)),
            dynamic_defaults=MappingProxyType(dict(dynamic_defaults)),
            node_id=values["node.id"],
            listeners=listeners,
            advertised_listeners=advertised,
            inter_broker_listener_name=inter_broker,
            log_dirs=log_dirs,
            num_partitions=values["num.partitions"],
            default_replication_factor=values["default.replication.factor"],
            auto_create_topics_enable=values["auto.create.topics.enable"],
            delete_topic_enable=values["delete.topic.enable"],
            message_max_bytes=values["message.max.bytes"],
            socket_request_max_bytes=values["socket.request.max.bytes"],
            connections_max_idle_ms=values["connections.max.idle.ms"],
            fetch_max_bytes=values["fetch.max.bytes"],
            max_incremental_fetch_session_cache_slots=values[
                "max.incremental.fetch.session.cache.slots"
            ],
            queued_max_requests=values["queued.max.requests"],
            producer_id_expiration_ms=values["producer.id.expiration.ms"],
            zookeeper_connect=values["zookeeper.connect"] or None,
            broker_rack=values["broker.rack"] or None,
            log_config=log_config,
            log_manager_config=_log_manager_config(values, log_dirs, merged),
            _values=MappingProxyType(values),
            _synonyms=MappingProxyType(synonyms),
        )


def _resolve(
    key: BrokerKey, layers: list[tuple[ConfigSource, Mapping[str, str], dict[str, Any]]]
) -> tuple[Any, tuple[ConfigSynonym, ...]]:
    """The value in force of `key` and where it is given, highest precedence first."""
    chain = [key] + [BROKER_CONFIGS[name] for name in key.fallbacks]
    found: list[tuple[ConfigSynonym, BrokerKey, Any]] = []
    for source, raw_layer, typed in layers:
        for k in chain:
            if k.name in raw_layer:
                shown = None if k.sensitive else str(raw_layer[k.name])
                found.append((ConfigSynonym(k.name, shown, source), k, typed[k.name]))
    for k in chain:
        if k.default is not None:
            shown = None if k.sensitive else k.format(k.default)
            found.append((ConfigSynonym(k.name, shown, ConfigSource.DEFAULT_CONFIG), k, k.default))
    if not found:
        return None, ()
    _, first, value = found[0]
    if first.scale != key.scale:  # e.g. log.retention.hours as log.retention.ms
        value = value * first.scale // key.scale
    return value, tuple(synonym for synonym, _, _ in found)


def _log_config(merged: Mapping[str, str]) -> LogConfig:
    """The topic defaults; a rule spanning two settings is reported by its broker name."""
    try:
        return LogConfig.from_broker_properties(
            {name: raw for name, raw in merged.items()
             if name in BROKER_CONFIGS and BROKER_CONFIGS[name].topic}
        )
    except InvalidConfigError as e:
        topic = TOPIC_CONFIGS.get(e.key)
        if topic is None or not topic.synonyms:
            raise
        name = next((s.name for s in topic.synonyms if s.name in merged), topic.synonyms[0].name)
        raise InvalidConfigError(f"{name}={merged.get(name)}: the topic default {e}",
                                 key=name) from None


def _check_pair(values: Mapping[str, Any], low: str, high: str) -> None:
    if values[low] > values[high]:
        raise InvalidConfigError(
            f"{low}={values[low]} is invalid: must be <= {high} ({values[high]})", key=low
        )


def _check_connection_overrides(values: Mapping[str, Any]) -> None:
    """Kafka's checks (KafkaConfig.validateValues): max.connections.per.ip.overrides parses,
    and max.connections.per.ip is 0 only beside some."""
    raw = values["max.connections.per.ip.overrides"] or ""
    try:
        overrides = parse_overrides(raw)
    except ValueError as e:
        raise _invalid("max.connections.per.ip.overrides", raw, str(e)) from None
    if values["max.connections.per.ip"] == 0 and not overrides:
        raise InvalidConfigError("max.connections.per.ip can be set to zero only if "
                                 "max.connections.per.ip.overrides property is set.",
                                 key="max.connections.per.ip")


def _check_ports(listeners: tuple[Listener, ...], raw: str) -> None:
    ports = [listener.port for listener in listeners if listener.port != 0]
    repeated = sorted({port for port in ports if ports.count(port) > 1})
    if repeated:
        raise _invalid("listeners", raw, f"each listener needs its own port, and {repeated[0]} "
                       "is used twice")


def _advertised(raw: str, own: bool, listeners: tuple[Listener, ...],
                protocols: Mapping[str, str]) -> tuple[Listener, ...]:
    """advertised.listeners, or (not `own`) the listeners when it is unset."""
    names = [listener.name for listener in listeners]
    advertised = (
        _parse_listeners("advertised.listeners", raw, protocols, names) if own else listeners
    )
    for listener in advertised:
        if _is_meta_address(listener.host):
            unset = "" if own else " (advertised.listeners is unset, so listeners are advertised)"
            raise _invalid("advertised.listeners", raw, f"{listener} advertises the "
                           f"non-routable meta-address {listener.host}: give a routable "
                           f"host name or IP address{unset}")
    return advertised


def _inter_broker_listener(name: str | None, protocol: str | None,
                           advertised: tuple[Listener, ...]) -> str:
    names = [listener.name for listener in advertised]
    if name is None and protocol is not None:
        # As Kafka: security.inter.broker.protocol names the listener of that name.
        protocol = protocol.strip().upper()
        if protocol not in names:
            raise _invalid("security.inter.broker.protocol", protocol, "must name an "
                           "advertised listener (" + ", ".join(names) + "); or set "
                           "inter.broker.listener.name instead")
        return protocol
    if name is None:
        return "PLAINTEXT" if "PLAINTEXT" in names else names[0]
    if name.upper() not in names:
        raise _invalid("inter.broker.listener.name", name, "must be one of the advertised "
                       "listeners (" + ", ".join(names) + ")")
    return name.upper()


def _log_dirs(values: Mapping[str, Any], given_as: str) -> tuple[Path, ...]:
    raw = values["log.dirs"]
    dirs = [Path(entry.strip()) for entry in raw.split(",") if entry.strip()]
    if not dirs:
        raise _invalid(given_as, raw, "must name at least one directory")
    seen = set()
    for directory in dirs:
        resolved = directory.expanduser().resolve()
        if resolved in seen:
            raise _invalid(given_as, raw, f"{directory} is given twice")
        seen.add(resolved)
    return tuple(dirs)


def _log_manager_config(values: Mapping[str, Any], log_dirs: tuple[Path, ...],
                        explicit: Mapping[str, str]) -> LogManagerConfig:
    kwargs: dict[str, Any] = {
        "log_dirs": log_dirs,
        "retention_check_interval_ms": values["log.retention.check.interval.ms"],
        "recovery_point_checkpoint_interval_ms": values["log.flush.offset.checkpoint.interval.ms"],
        "log_start_offset_checkpoint_interval_ms": values[
            "log.flush.start.offset.checkpoint.interval.ms"
        ],
        "cleaner_enable": values["log.cleaner.enable"],
        "cleaner_threads": values["log.cleaner.threads"],
        "record_validation": RecordValidation(
            enabled=values["odradek.record.validation.enable"],
            max_decompressed_bytes=values["odradek.batch.max.decompressed.bytes"]),
        "min_free_bytes": values["log.dir.min.free.bytes"],
        # In a cluster other replicas can lead: a full disk takes its dir offline there.
        "offline_on_full": bool(values["zookeeper.connect"]),
        # Fields LogManagerConfig may not have yet; passed only where it does.
        "producer_id_expiration_ms": values["producer.id.expiration.ms"],
        "producer_id_expiration_check_interval_ms": values[
            "producer.id.expiration.check.interval.ms"
        ],
    }
    if "log.flush.scheduler.interval.ms" in explicit:  # else the log manager's 1 s
        kwargs["flush_check_interval_ms"] = min(
            values["log.flush.scheduler.interval.ms"], _MAX_SCHEDULER_PERIOD_MS
        )
    known = {f.name for f in fields(LogManagerConfig)}
    return LogManagerConfig(**{name: v for name, v in kwargs.items() if name in known})


# ---- documentation -------------------------------------------------------------------------


def _documentation(key: BrokerKey) -> str:
    said = "no effect" in key.doc.lower()  # a topic config's doc may say so already
    return key.doc + (" Accepted, no effect." if key.no_effect and not said else "")


def _type_name(key: BrokerKey) -> str:
    if key.wire_type is not None:
        return KafkaType(key.wire_type).name.lower()
    return key.type.name.lower()


def _shown(value: str) -> str:
    return f"`{value}`" if value else "empty"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def configuration_table() -> str:
    """The Markdown tables of docs/configuration.md, one per group, from BROKER_CONFIGS:
    Odradek's settings with their meaning; then Kafka 3.9's other settings, per part of
    Kafka, with why they have no effect and Kafka 3.9's defaults; then those refused."""
    notes = {f"{title} (accepted, no effect)": reason for title, reason in _AREAS.values()}
    out: list[str] = []
    group = None
    for key in BROKER_CONFIGS.values():
        kafka_only = key.group in notes
        if key.group != group:
            group = key.group
            out += ["", f"### {group}", ""]
            if kafka_only:
                out += [notes[group] + ".", "", "| Name | Type | Kafka 3.9 default | Dynamic |",
                        "|---|---|---|---|"]
            else:
                out += ["| Name | Type | Default | Dynamic | Meaning |", "|---|---|---|---|---|"]
        default = "(none)" if key.default is None else key.format(key.default) or '""'
        default = default if key.default is None else f"`{default}`"
        dynamic = "no" if not key.dynamic else "per broker" if key.per_broker else "yes"
        if kafka_only:
            refused = ""
            if key.refused is not None:
                refused = f" (refused unless {_shown(key.format(key.refused[0]))})"
            out.append(_row([f"`{key.name}`{refused}", _type_name(key), default, dynamic]))
            continue
        meaning = key.doc + (" **Accepted, no effect.**" if key.no_effect else "")
        meaning = meaning.replace("__", "\\_\\_")  # __consumer_offsets is not bold
        out.append(_row([f"`{key.name}`", _type_name(key), default, dynamic, meaning]))
    out += ["", "### Refused", "",
            "Accepting another value of these would pretend to a security, a durability or a "
            "mode Odradek lacks; the broker refuses it at start-up (and AlterConfigs refuses "
            "it) with this reason.", "", "| Name | Only | Why |", "|---|---|---|"]
    for key in BROKER_CONFIGS.values():
        if key.refused is not None:
            out.append(_row([f"`{key.name}`", _shown(key.format(key.refused[0])),
                             key.refused[1] + "."]))
    return "\n".join(out[1:]) + "\n"


BEGIN_TABLE = "<!-- BEGIN GENERATED: python -m odradek.server.config -->"
END_TABLE = "<!-- END GENERATED -->"


def render_docs(current: str) -> str:
    """docs/configuration.md with its generated part replaced by `configuration_table()`."""
    head, sep, rest = current.partition(BEGIN_TABLE)
    _, sep2, tail = rest.partition(END_TABLE)
    if not sep or not sep2:
        raise ValueError("the generated-table markers are missing")
    return f"{head}{BEGIN_TABLE}\n\n{configuration_table()}\n{END_TABLE}{tail}"


DOCS_PATH = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"

if __name__ == "__main__":
    DOCS_PATH.write_text(render_docs(DOCS_PATH.read_text(encoding="utf-8")), encoding="utf-8")
