"""LogConfig: Kafka's topic config names, defaults, parsing, validation and broker synonyms."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.protocol.errors import ErrorCode
from odradek.server.kafka_configs import KAFKA_39_TOPIC_CONFIGS
from odradek.storage.config import (
    BROKER_SYNONYMS,
    LONG_MAX,
    METADATA_VERSIONS,
    TOPIC_CONFIGS,
    ConfigType,
    LogConfig,
    java_double,
    kafka_version_index,
    record_format_version,
)
from odradek.storage.errors import InvalidConfigError, StorageError

# Kafka 4.0's defaults as DescribeConfigs reports them for a topic without overrides, and
# Kafka 3.9's for the deprecated configs 4.0 removed (message.format.version,
# message.timestamp.difference.max.ms).
KAFKA_DEFAULTS = {
    "segment.bytes": "1073741824",
    "segment.ms": "604800000",
    "segment.jitter.ms": "0",
    "segment.index.bytes": "10485760",
    "index.interval.bytes": "4096",
    "flush.messages": "9223372036854775807",
    "flush.ms": "9223372036854775807",
    "retention.ms": "604800000",
    "retention.bytes": "-1",
    "cleanup.policy": "delete",
    "delete.retention.ms": "86400000",
    "min.compaction.lag.ms": "0",
    "max.compaction.lag.ms": "9223372036854775807",
    "min.cleanable.dirty.ratio": "0.5",
    "file.delete.delay.ms": "60000",
    "max.message.bytes": "1048588",
    "message.timestamp.type": "CreateTime",
    "message.timestamp.before.max.ms": "9223372036854775807",
    "message.timestamp.after.max.ms": "3600000",
    "message.timestamp.difference.max.ms": "9223372036854775807",
    "preallocate": "false",
    "unclean.leader.election.enable": "false",
    "min.insync.replicas": "1",
    "compression.type": "producer",
    "compression.gzip.level": "-1",
    "compression.lz4.level": "9",
    "compression.zstd.level": "3",
    "message.downconversion.enable": "true",
    "message.format.version": "3.0-IV1",
    "leader.replication.throttled.replicas": "",
    "follower.replication.throttled.replicas": "",
    "remote.storage.enable": "false",
    "local.retention.ms": "-2",
    "local.retention.bytes": "-2",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
}

# Kafka 4.0's LogConfig.CONFIGS_WITH_NO_SERVER_DEFAULTS: no broker setting supplies these.
NO_BROKER_DEFAULT = {
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
    "remote.storage.enable",
    "remote.log.copy.disable",
    "remote.log.delete.on.disable",
}
# Accepted for Kafka's tools, with no effect here; their documentation says so.
NO_EFFECT = NO_BROKER_DEFAULT | {"message.format.version",
                                 "compression.gzip.level", "compression.lz4.level",
                                 "compression.zstd.level", "local.retention.ms",
                                 "local.retention.bytes"}


def bad(props: dict[str, object], **kwargs: object) -> InvalidConfigError:
    with pytest.raises(InvalidConfigError) as info:
        LogConfig.from_properties(props, **kwargs)  # type: ignore[arg-type]
    return info.value


# --- defaults -------------------------------------------------------------------------------


def test_defaults_are_kafkas() -> None:
    assert LogConfig().to_properties() == KAFKA_DEFAULTS


def test_default_values_typed() -> None:
    c = LogConfig()
    assert c.segment_bytes == 1 << 30
    assert c.segment_ms == c.retention_ms == 7 * 24 * 3600 * 1000
    assert c.flush_messages == c.flush_ms == c.max_compaction_lag_ms == 2**63 - 1
    assert c.cleanup_policy == frozenset({"delete"})
    assert c.delete and not c.compact
    assert c.min_cleanable_dirty_ratio == 0.5
    assert c.preallocate is False


def test_table_and_dataclass_agree() -> None:
    names = [f.name for f in dataclasses.fields(LogConfig)]
    assert names == [key.attr for key in TOPIC_CONFIGS.values()]
    for key in TOPIC_CONFIGS.values():
        assert key.doc
        assert getattr(LogConfig(), key.attr) == key.default


def test_frozen_and_hashable() -> None:
    c = LogConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.segment_bytes = 5  # type: ignore[misc]
    assert hash(c) == hash(LogConfig())


# --- parsing --------------------------------------------------------------------------------


def test_parse_strings_as_from_a_properties_file() -> None:
    c = LogConfig.from_properties(
        {
            "segment.bytes": " 1024 ",
            "retention.ms": "-1",
            "retention.bytes": "+5000",
            "cleanup.policy": "compact , delete",
            "min.cleanable.dirty.ratio": "0.25",
            "preallocate": "TRUE",
            "unclean.leader.election.enable": "False",
            "message.timestamp.type": "LogAppendTime",
            "compression.type": "zstd",
            "max.compaction.lag.ms": "9223372036854775807",
        }
    )
    assert c.segment_bytes == 1024
    assert c.retention_ms == -1
    assert c.retention_bytes == 5000
    assert c.cleanup_policy == {"compact", "delete"} and c.compact and c.delete
    assert c.min_cleanable_dirty_ratio == 0.25
    assert c.preallocate is True
    assert c.unclean_leader_election_enable is False
    assert c.message_timestamp_type == "LogAppendTime"
    assert c.compression_type == "zstd"
    assert c.max_compaction_lag_ms == LONG_MAX


def test_parse_python_values() -> None:
    c = LogConfig.from_properties(
        {"segment.ms": 1000, "preallocate": True, "min.cleanable.dirty.ratio": 1}
    )
    assert c.segment_ms == 1000 and c.preallocate is True
    assert c.min_cleanable_dirty_ratio == 1.0 and isinstance(c.min_cleanable_dirty_ratio, float)


def test_empty_cleanup_policy_means_neither() -> None:
    c = LogConfig.from_properties({"cleanup.policy": ""})
    assert c.cleanup_policy == frozenset() and not c.compact and not c.delete


def test_direct_construction_is_validated_and_normalised() -> None:
    c = LogConfig(cleanup_policy={"compact"})  # type: ignore[arg-type]
    assert c.cleanup_policy == frozenset({"compact"})
    with pytest.raises(InvalidConfigError) as info:
        LogConfig(retention_ms=-2)
    assert info.value.key == "retention.ms"
    with pytest.raises(InvalidConfigError):
        LogConfig(segment_bytes=True)  # a bool is not an int here


def test_with_overrides_keeps_the_broker_defaults() -> None:
    broker = LogConfig.from_properties({"retention.ms": "1000", "segment.bytes": "4096"})
    topic = broker.with_overrides({"segment.bytes": "2048"})
    assert topic.retention_ms == 1000 and topic.segment_bytes == 2048
    assert broker.segment_bytes == 4096
    assert LogConfig.from_properties({"segment.bytes": "2048"}, defaults=broker) == topic


def test_to_properties_round_trip() -> None:
    c = LogConfig.from_properties(
        {
            "cleanup.policy": "delete,compact",
            "min.cleanable.dirty.ratio": "0.1",
            "preallocate": "true",
            "retention.bytes": "123456",
        }
    )
    props = c.to_properties()
    assert props["cleanup.policy"] == "compact,delete"
    assert props["min.cleanable.dirty.ratio"] == "0.1"
    assert props["preallocate"] == "true"
    assert LogConfig.from_properties(props) == c
    assert list(props) == list(TOPIC_CONFIGS)


@given(
    segment_bytes=st.integers(61, 2**31 - 1),
    retention_ms=st.integers(-1, 2**63 - 1),
    retention_bytes=st.integers(-(2**63), 2**63 - 1),
    ratio=st.floats(0, 1),
    policy=st.sets(st.sampled_from(["compact", "delete"])),
    compression=st.sampled_from(["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"]),
)
def test_round_trip_property(
    segment_bytes: int,
    retention_ms: int,
    retention_bytes: int,
    ratio: float,
    policy: set[str],
    compression: str,
) -> None:
    c = LogConfig(
        segment_bytes=segment_bytes,
        retention_ms=retention_ms,
        retention_bytes=retention_bytes,
        min_cleanable_dirty_ratio=ratio,
        cleanup_policy=frozenset(policy),
        compression_type=compression,
    )
    assert LogConfig.from_properties(c.to_properties()) == c


# --- bad values -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("retention.ms", "-5", "must be -1 (unlimited) or >= 0"),
        ("retention.ms", "-2", "must be -1 (unlimited) or >= 0"),
        ("segment.bytes", "60", "must be >= 61"),
        ("segment.bytes", "2147483648", "32-bit"),
        ("segment.ms", "0", "must be >= 1"),
        ("segment.jitter.ms", "-1", "must be >= 0"),
        ("segment.index.bytes", "11", "must be >= 12"),
        ("index.interval.bytes", "-1", "must be >= 0"),
        ("flush.messages", "0", "must be >= 1"),
        ("flush.ms", "-1", "must be >= 0"),
        ("retention.bytes", "9223372036854775808", "64-bit"),
        ("cleanup.policy", "remove", "compact, delete"),
        ("cleanup.policy", "Delete", "compact, delete"),
        ("cleanup.policy", "delete,,compact", "compact, delete"),
        ("delete.retention.ms", "-1", "must be >= 0"),
        ("min.compaction.lag.ms", "-1", "must be >= 0"),
        ("max.compaction.lag.ms", "0", "must be >= 1"),
        ("min.cleanable.dirty.ratio", "1.5", "between 0 and 1"),
        ("min.cleanable.dirty.ratio", "-0.1", "between 0 and 1"),
        ("min.cleanable.dirty.ratio", "NaN", "number"),
        ("min.cleanable.dirty.ratio", "half", "number"),
        ("file.delete.delay.ms", "-1", "must be >= 0"),
        ("max.message.bytes", "-1", "must be >= 0"),
        ("message.timestamp.type", "createtime", "CreateTime, LogAppendTime"),
        ("message.timestamp.before.max.ms", "-1", "must be >= 0"),
        ("message.timestamp.after.max.ms", "-1", "must be >= 0"),
        ("preallocate", "yes", "true or false"),
        ("unclean.leader.election.enable", "1", "true or false"),
        ("min.insync.replicas", "0", "must be >= 1"),
        ("compression.type", "brotli", "producer, uncompressed, gzip, snappy, lz4, zstd"),
        ("compression.gzip.level", "0", "must be -1 (the codec's default) or between 1 and 9"),
        ("compression.lz4.level", "18", "between 1 and 17"),
        ("compression.zstd.level", "23", "between -131072 and 22"),
        ("local.retention.ms", "-3", "must be >= -2"),
        ("leader.replication.throttled.replicas", "0", "[partitionId]:[brokerId]"),
        ("leader.replication.throttled.replicas", "0:1:2", "[partitionId]:[brokerId]"),
        ("leader.replication.throttled.replicas", "*,0:1", "the literal '*'"),
        ("leader.replication.throttled.replicas", "all", "the literal '*'"),
        ("follower.replication.throttled.replicas", "-1:1", "[partitionId]:[brokerId]"),
        ("follower.replication.throttled.replicas", "0:b", "[partitionId]:[brokerId]"),
        ("remote.storage.enable", "true", "tiered storage is not supported"),
        ("remote.storage.enable", "yes", "true or false"),
        ("remote.log.copy.disable", "1", "true or false"),
        ("remote.log.delete.on.disable", "no", "true or false"),
        ("message.downconversion.enable", "", "true or false"),
        ("segment.ms", "abc", "integer"),
        ("segment.ms", "1.5", "integer"),
        ("segment.ms", "1_000", "integer"),
        ("segment.ms", "", "integer"),
        ("segment.bytes", "1e6", "integer"),
    ],
)
def test_bad_value_names_key_value_and_what_is_allowed(key: str, value: str, allowed: str) -> None:
    error = bad({key: value})
    assert error.key == key
    assert str(error).startswith(f"{key}={value} is invalid: ")
    assert allowed in str(error)
    assert error.error_code == ErrorCode.INVALID_CONFIG == 40
    assert isinstance(error, StorageError)


def test_bad_python_types() -> None:
    assert bad({"segment.ms": 1.5}).key == "segment.ms"
    assert bad({"segment.ms": True}).key == "segment.ms"
    assert bad({"preallocate": 1}).key == "preallocate"
    assert bad({"compression.type": 3}).key == "compression.type"
    assert bad({"min.cleanable.dirty.ratio": float("nan")}).key == "min.cleanable.dirty.ratio"


def test_unknown_key() -> None:
    error = bad({"retention.hours": "5"})
    assert error.key == "retention.hours"
    assert "retention.hours" in str(error)
    # broker names are not topic configs
    assert bad({"log.retention.ms": "5"}).key == "log.retention.ms"


@pytest.mark.parametrize("name", ["leader.replication.throttled.replicas",
                                  "follower.replication.throttled.replicas"])
def test_throttled_replicas_as_kafkas_validator(name: str) -> None:
    """"", "*" or partitionId:brokerId pairs, as kafka-reassign-partitions.sh sets them."""
    attr = name.replace(".", "_")
    for raw, value in [
        ("", frozenset()),
        ("*", {"*"}),
        (" * ", {"*"}),
        ("0:1", {"0:1"}),
        ("0:1,0:2, 1:2 ,10:3", {"0:1", "0:2", "1:2", "10:3"}),
        ("0:1,", {"0:1", ""}),  # Kafka lets empty items through too
    ]:
        c = LogConfig.from_properties({name: raw})
        assert getattr(c, attr) == value, raw
        assert LogConfig.from_properties(c.to_properties()) == c
    assert LogConfig.from_properties({name: "1:2,0:1"}).to_properties()[name] == "0:1,1:2"


def test_remote_storage_enable_true_is_refused() -> None:
    error = bad({"remote.storage.enable": "true"})
    assert error.key == "remote.storage.enable"
    assert str(error) == ("remote.storage.enable=true is invalid: tiered storage is not "
                          "supported (Odradek has no remote log storage), so it must be false")
    assert error.error_code == ErrorCode.INVALID_CONFIG
    with pytest.raises(InvalidConfigError, match="tiered storage is not supported"):
        LogConfig(remote_storage_enable=True)
    c = LogConfig.from_properties({"remote.storage.enable": "false",
                                   "remote.log.copy.disable": "true",
                                   "remote.log.delete.on.disable": "true",
                                   "message.downconversion.enable": "false"})
    assert c.remote_storage_enable is False
    assert c.remote_log_copy_disable and c.remote_log_delete_on_disable
    assert c.message_downconversion_enable is False


def test_accepted_without_effect_says_so() -> None:
    assert {name for name, key in TOPIC_CONFIGS.items() if key.no_effect} == NO_EFFECT
    for name in NO_EFFECT:
        doc = TOPIC_CONFIGS[name].doc.lower()
        assert "no effect" in doc or "not used yet" in doc, name
    assert "tiered storage" in TOPIC_CONFIGS["remote.storage.enable"].doc
    assert "Fetch v0-v3" in TOPIC_CONFIGS["message.downconversion.enable"].doc


def test_min_compaction_lag_above_max() -> None:
    error = bad({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    assert error.key == "min.compaction.lag.ms"
    assert "max.compaction.lag.ms (5)" in str(error)
    LogConfig.from_properties({"min.compaction.lag.ms": "5", "max.compaction.lag.ms": "5"})


def test_override_checked_against_defaults() -> None:
    base = LogConfig.from_properties({"max.compaction.lag.ms": "100"})
    with pytest.raises(InvalidConfigError):
        base.with_overrides({"min.compaction.lag.ms": "101"})


# --- broker properties ----------------------------------------------------------------------


def test_broker_defaults_when_nothing_is_set() -> None:
    assert LogConfig.from_broker_properties({}) == LogConfig()


def test_broker_properties_map_to_topic_configs() -> None:
    c = LogConfig.from_broker_properties(
        {
            "broker.id": "1",
            "log.dirs": "/var/lib/kafka",
            "num.partitions": "3",
            "log.retention.check.interval.ms": "300000",
            "log.segment.bytes": "1048576",
            "log.roll.hours": "2",
            "log.roll.jitter.hours": "1",
            "log.index.size.max.bytes": "4096",
            "log.index.interval.bytes": "100",
            "log.flush.interval.messages": "10",
            "log.flush.interval.ms": "1000",
            "log.retention.bytes": "1000000",
            "log.cleanup.policy": "compact",
            "log.cleaner.delete.retention.ms": "10",
            "log.cleaner.min.compaction.lag.ms": "11",
            "log.cleaner.max.compaction.lag.ms": "12",
            "log.cleaner.min.cleanable.ratio": "0.75",
            "log.segment.delete.delay.ms": "13",
            "message.max.bytes": "2000000",
            "log.message.timestamp.type": "LogAppendTime",
            "log.message.timestamp.before.max.ms": "14",
            "log.message.timestamp.after.max.ms": "15",
            "log.preallocate": "true",
            "min.insync.replicas": "2",
            "compression.type": "lz4",
            "unclean.leader.election.enable": "true",
            "log.message.downconversion.enable": "false",
        }
    )
    assert c == LogConfig(
        segment_bytes=1048576,
        segment_ms=2 * 3600_000,
        segment_jitter_ms=3600_000,
        segment_index_bytes=4096,
        index_interval_bytes=100,
        flush_messages=10,
        flush_ms=1000,
        retention_bytes=1000000,
        cleanup_policy=frozenset({"compact"}),
        delete_retention_ms=10,
        min_compaction_lag_ms=11,
        max_compaction_lag_ms=12,
        min_cleanable_dirty_ratio=0.75,
        file_delete_delay_ms=13,
        max_message_bytes=2000000,
        message_timestamp_type="LogAppendTime",
        message_timestamp_before_max_ms=14,
        message_timestamp_after_max_ms=15,
        preallocate=True,
        min_insync_replicas=2,
        compression_type="lz4",
        unclean_leader_election_enable=True,
        message_downconversion_enable=False,
    )


@pytest.mark.parametrize(
    ("props", "retention_ms"),
    [
        ({"log.retention.hours": "1"}, 3600_000),
        ({"log.retention.minutes": "2"}, 120_000),
        ({"log.retention.ms": "3"}, 3),
        ({"log.retention.hours": "1", "log.retention.minutes": "2"}, 120_000),
        ({"log.retention.hours": "1", "log.retention.ms": "3"}, 3),
        ({"log.retention.minutes": "2", "log.retention.ms": "3"}, 3),
        ({"log.retention.hours": "1", "log.retention.minutes": "2", "log.retention.ms": "3"}, 3),
        # Kafka: any negative retention time set on the broker means "forever"
        ({"log.retention.hours": "-1"}, -1),
        ({"log.retention.minutes": "-1"}, -1),
        ({"log.retention.ms": "-5"}, -1),
        ({"log.retention.hours": "1", "log.retention.ms": "-1"}, -1),
    ],
)
def test_broker_retention_precedence(props: dict[str, str], retention_ms: int) -> None:
    assert LogConfig.from_broker_properties(props).retention_ms == retention_ms


def test_broker_roll_precedence() -> None:
    c = LogConfig.from_broker_properties({"log.roll.hours": "5", "log.roll.ms": "60000"})
    assert c.segment_ms == 60000
    c = LogConfig.from_broker_properties({"log.roll.jitter.hours": "5", "log.roll.jitter.ms": "7"})
    assert c.segment_jitter_ms == 7


def test_broker_flush_ms_falls_back_to_the_scheduler_interval() -> None:
    c = LogConfig.from_broker_properties({"log.flush.scheduler.interval.ms": "500"})
    assert c.flush_ms == 500
    c = LogConfig.from_broker_properties(
        {"log.flush.scheduler.interval.ms": "500", "log.flush.interval.ms": "700"}
    )
    assert c.flush_ms == 700


@pytest.mark.parametrize(
    ("props", "key", "fragment"),
    [
        ({"log.segment.bytes": "10"}, "log.segment.bytes", "must be >= 61"),
        ({"log.roll.hours": "0"}, "log.roll.hours", "that is segment.ms=0, which must be >= 1"),
        ({"log.roll.hours": "1.5"}, "log.roll.hours", "integer"),
        ({"log.roll.hours": "3000000000"}, "log.roll.hours", "32-bit"),
        ({"log.retention.hours": "x"}, "log.retention.hours", "integer"),
        ({"log.cleanup.policy": "nope"}, "log.cleanup.policy", "compact, delete"),
        ({"log.cleaner.min.cleanable.ratio": "2"}, "log.cleaner.min.cleanable.ratio", "0 and 1"),
        ({"message.max.bytes": "-1"}, "message.max.bytes", "must be >= 0"),
        ({"log.message.downconversion.enable": "on"}, "log.message.downconversion.enable",
         "true or false"),
    ],
)
def test_bad_broker_value_names_the_broker_key(
    props: dict[str, str], key: str, fragment: str
) -> None:
    with pytest.raises(InvalidConfigError) as info:
        LogConfig.from_broker_properties(props)
    assert info.value.key == key
    assert str(info.value).startswith(f"{key}={props[key]} is invalid: ")
    assert fragment in str(info.value)


def test_broker_synonym_table() -> None:
    assert BROKER_SYNONYMS["log.retention.hours"][0].name == "retention.ms"
    assert BROKER_SYNONYMS["log.retention.hours"][1].scale == 3600_000
    assert BROKER_SYNONYMS["message.max.bytes"][0].name == "max.message.bytes"
    assert BROKER_SYNONYMS["log.segment.delete.delay.ms"][0].name == "file.delete.delay.ms"
    assert BROKER_SYNONYMS["log.message.downconversion.enable"][0].name == (
        "message.downconversion.enable")
    # every topic config has a broker default but Kafka's CONFIGS_WITH_NO_SERVER_DEFAULTS
    with_default = {key.name for key, _ in BROKER_SYNONYMS.values()}
    assert with_default == set(TOPIC_CONFIGS) - NO_BROKER_DEFAULT
    assert all(not TOPIC_CONFIGS[name].synonyms for name in NO_BROKER_DEFAULT)


def test_configs_without_a_broker_default_keep_kafkas() -> None:
    # Broker properties cannot set them: a topic name among the broker's is not a log setting.
    props = {"remote.storage.enable": "true", "leader.replication.throttled.replicas": "x",
             "remote.log.copy.disable": "true", "log.remote.log.copy.disable": "true"}
    c = LogConfig.from_broker_properties(props)
    assert c == LogConfig()
    assert c.leader_replication_throttled_replicas == frozenset()
    # A topic override on top of a broker's defaults sets them.
    broker = LogConfig.from_broker_properties({"log.retention.ms": "5"})
    topic = broker.with_overrides({"follower.replication.throttled.replicas": "*",
                                   "remote.log.delete.on.disable": "true"})
    assert topic.retention_ms == 5
    assert topic.follower_replication_throttled_replicas == {"*"}
    assert topic.remote_log_delete_on_disable is True


def test_config_types_are_describe_configs_codes() -> None:
    assert TOPIC_CONFIGS["segment.bytes"].type is ConfigType.INT == 3
    assert TOPIC_CONFIGS["retention.ms"].type is ConfigType.LONG == 5
    assert TOPIC_CONFIGS["cleanup.policy"].type is ConfigType.LIST == 7
    assert TOPIC_CONFIGS["min.cleanable.dirty.ratio"].type is ConfigType.DOUBLE == 6
    assert TOPIC_CONFIGS["preallocate"].type is ConfigType.BOOLEAN == 1
    assert TOPIC_CONFIGS["compression.type"].type is ConfigType.STRING == 2
    # Kafka's types for every config, those accepted without effect included
    for name, kafka in KAFKA_39_TOPIC_CONFIGS.items():
        assert int(TOPIC_CONFIGS[name].type) == int(kafka.type), name


# --- Kafka 3.9's topic configs ----------------------------------------------------------------


def test_every_kafka_39_topic_config_is_accepted() -> None:
    """Kafka 3.9's topic configs, deprecated ones included, are all here, with Kafka's broker
    synonym, and each is accepted at Kafka 3.9's default."""
    assert list(TOPIC_CONFIGS) == list(LogConfig().to_properties())
    assert set(TOPIC_CONFIGS) == set(KAFKA_39_TOPIC_CONFIGS)
    for name, kafka in KAFKA_39_TOPIC_CONFIGS.items():
        key = TOPIC_CONFIGS[name]
        assert (key.synonyms[0].name if key.synonyms else None) == kafka.server_default, name
        raw = kafka.default if not isinstance(kafka.default, bool) else str(kafka.default)
        config = LogConfig.from_properties({name: str(raw)})
        assert getattr(config, key.attr) == key.coerce(str(raw)), name


def test_message_format_version_is_accepted_and_ignored() -> None:
    """librdkafka's own test suite sets message.format.version=0.10.0.0 on a topic."""
    key = TOPIC_CONFIGS["message.format.version"]
    for raw in ("0.10.0.0", "0.10.0", "0.10.0-IV1", "0.8.2.2", "1.1", "2.8.1", "3.0-IV1",
                "3.9", "3.9-IV0", "4.0-IV0"):
        assert LogConfig.from_properties({key.name: raw}).message_format_version == raw
    for raw in ("4.0", "0.10.3", "abc", "", "3", "10.0"):
        error = bad({key.name: raw})
        assert error.key == key.name and "must be a Kafka version" in str(error)
    # As Kafka 3.9 (LogConfig.MessageFormatVersion.shouldWarn): a warning for a version that
    # would write v0 or v1; none for a version whose format, v2, is what is written anyway.
    assert key.ignored("0.10.0.0") == key.no_effect
    assert "v2" in key.no_effect and "removed in Kafka 4.0" in key.no_effect
    assert key.ignored("0.11.0") is None and key.ignored("3.0-IV1") is None
    assert TOPIC_CONFIGS["retention.ms"].ignored(5) is None
    assert TOPIC_CONFIGS["compression.zstd.level"].ignored(5)


def test_kafka_versions_parse_as_kafka_39_does() -> None:
    assert METADATA_VERSIONS[-3:] == ("3.9-IV0", "4.0-IV0", "4.0-IV1")
    # a release is its latest production id; 0.x keeps three parts, the others two
    assert kafka_version_index("0.10.0") == METADATA_VERSIONS.index("0.10.0-IV1")
    assert kafka_version_index("0.10.0.1") == kafka_version_index("0.10.0")
    assert kafka_version_index("2.8.7") == METADATA_VERSIONS.index("2.8-IV1")
    assert kafka_version_index("3.9") == METADATA_VERSIONS.index("3.9-IV0")
    assert kafka_version_index("4.0") is None  # not a production version in Kafka 3.9
    assert kafka_version_index("3.9.") is None  # as Java splits it: the whole string is the key
    assert [record_format_version(v) for v in ("0.9.0", "0.10.2", "0.11.0", "3.9")] == [
        0, 1, 2, 2]
    with pytest.raises(ValueError, match="not a valid version"):
        record_format_version("nope")


def test_timestamp_difference_as_kafka_39() -> None:
    """Kafka 3.9 (LogConfig.getMessageTimestampBeforeMaxMs/AfterMaxMs): the deprecated
    difference applies to each side whose own limit is at its default."""
    c = LogConfig.from_properties({"message.timestamp.difference.max.ms": "1000"})
    assert (c.message_timestamp_before_max_ms, c.message_timestamp_after_max_ms) == (1000, 1000)
    c = LogConfig.from_properties({"message.timestamp.difference.max.ms": "1000",
                                   "message.timestamp.before.max.ms": "5"})
    assert (c.message_timestamp_before_max_ms, c.message_timestamp_after_max_ms) == (5, 1000)
    c = LogConfig.from_properties({"message.timestamp.difference.max.ms": "1000",
                                   "message.timestamp.before.max.ms": str(LONG_MAX)})
    assert c.message_timestamp_before_max_ms == 1000  # set to its default: as unset
    # From the broker's defaults, and a topic's difference over the broker's.
    broker = LogConfig.from_broker_properties({"log.message.timestamp.difference.max.ms": "7"})
    assert (broker.message_timestamp_before_max_ms, broker.message_timestamp_after_max_ms) == (
        7, 7)
    topic = broker.with_overrides({"message.timestamp.difference.max.ms": "9"})
    assert (topic.message_timestamp_before_max_ms, topic.message_timestamp_after_max_ms) == (9, 9)
    back = broker.with_overrides({"message.timestamp.difference.max.ms": str(LONG_MAX)})
    assert back.message_timestamp_before_max_ms == LONG_MAX
    assert back.message_timestamp_after_max_ms == 3600_000
    kept = LogConfig.from_broker_properties({"log.message.timestamp.before.max.ms": "3"})
    kept = kept.with_overrides({"message.timestamp.difference.max.ms": "9"})
    assert (kept.message_timestamp_before_max_ms, kept.message_timestamp_after_max_ms) == (3, 9)
    # Without the difference nothing changes.
    assert LogConfig.from_properties({"retention.ms": "5"}).message_timestamp_after_max_ms == (
        3600_000)
    assert bad({"message.timestamp.difference.max.ms": "-1"}).key == (
        "message.timestamp.difference.max.ms")


def test_doubles_are_written_as_java_does() -> None:
    cases = {0.5: "0.5", 1.0: "1.0", 0.05: "0.05", 123.25: "123.25", 1e7: "1.0E7",
             12345678.0: "1.2345678E7", 1.7976931348623157e308: "1.7976931348623157E308",
             1e-4: "1.0E-4", -2.5e-9: "-2.5E-9", 0.0: "0.0"}
    for value, text in cases.items():
        assert java_double(value) == text, value
    assert TOPIC_CONFIGS["min.cleanable.dirty.ratio"].format(0.25) == "0.25"
