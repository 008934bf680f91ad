"""A topic's log settings: Kafka's names, defaults and validation, from one table.

`TOPIC_CONFIGS` is the single source of truth: each entry gives a topic config's Kafka name,
type, default, allowed values, documentation and the broker settings that supply its default
(Kafka's ServerTopicConfigSynonyms). Some have none (Kafka's CONFIGS_WITH_NO_SERVER_DEFAULTS:
the replication throttles and the tiered storage switches): their default is Kafka's, and
only the topic itself can change it. `LogConfig`'s fields, its parsing from properties
(server.properties, CreateTopics, AlterConfigs), its validation and its listing back as
properties (DescribeConfigs) are all driven by that table; an import-time check keeps the
dataclass fields and the table in step.

The table holds every topic config Kafka 3.9 accepts (odradek/server/kafka_configs.py lists
them), deprecated ones included. Some are accepted for compatibility with Kafka's tools and
have no effect here (`ConfigKey.no_effect` says why, and the broker logs it as a warning when
one is set): the codec levels, replication throttling, tiered storage, down-conversion and
message.format.version (Kafka 3.x ignores it too, and writes record batches v2).
remote.storage.enable=true is refused: there is no tiered storage to enable.
message.timestamp.difference.max.ms, deprecated, works as in Kafka 3.9: it applies to the side
(before or after the broker's clock) whose own limit is left at its default.

Defaults and limits are Kafka 4.0's, with two deliberate departures: segment.bytes must be
>= 61 (one record batch header) where Kafka 4.0 asks for 1 MiB, so that tests can roll tiny
segments; and segment.index.bytes must be >= 12 (one time index entry) where Kafka accepts 4,
which holds no entry at all.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from decimal import Decimal
from enum import IntEnum
from types import MappingProxyType
from typing import Any, Protocol

from odradek.storage.errors import InvalidConfigError

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

MS_PER_MINUTE = 60 * 1000
MS_PER_HOUR = 60 * MS_PER_MINUTE
MS_PER_DAY = 24 * MS_PER_HOUR

RECORD_BATCH_OVERHEAD = 61  # bytes of a v2 record batch header: the smallest possible batch
TIME_INDEX_ENTRY_SIZE = 12  # the larger of the two index entries (offset index: 8)

CLEANUP_POLICIES = ("compact", "delete")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
GZIP_DEFAULT_LEVEL = -1  # java.util.zip.Deflater.DEFAULT_COMPRESSION
ZSTD_MIN_LEVEL = -(2**17)  # zstd's fastest negative level, Zstd.minCompressionLevel()
LOCAL_RETENTION_FROM_TOPIC = -2  # local.retention.*: use retention.ms / retention.bytes


class ConfigType(IntEnum):
    """A setting's data type; the values are DescribeConfigs' ConfigType codes."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    LONG = 5
    DOUBLE = 6
    LIST = 7


class Validator(Protocol):
    """Says whether a parsed value is allowed; str() says what is, for error messages."""

    def __call__(self, value: Any, /) -> bool: ...


@dataclass(frozen=True, slots=True)
class Range:
    """low <= value <= high (either bound optional), like Kafka's ConfigDef.Range."""

    low: int | float | None = None
    high: int | float | None = None
    text: str | None = None  # says what is allowed better than the bounds can

    def __call__(self, value: Any) -> bool:
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)

    def __str__(self) -> str:
        if self.text is not None:
            return self.text
        if self.high is None:
            return f"must be >= {self.low}"
        if self.low is None:
            return f"must be <= {self.high}"
        return f"must be between {self.low} and {self.high}"


@dataclass(frozen=True, slots=True)
class OneOf:
    """One of a fixed set of strings (case-sensitive, as Kafka's ValidString)."""

    values: tuple[str, ...]

    def __call__(self, value: Any) -> bool:
        return value in self.values

    def __str__(self) -> str:
        return "must be one of " + ", ".join(self.values)


@dataclass(frozen=True, slots=True)
class RangeOr:
    """A Range, or one value that means something else (gzip's level -1: the codec's own)."""

    range: Range
    value: int
    meaning: str

    def __call__(self, value: Any) -> bool:
        return value == self.value or self.range(value)

    def __str__(self) -> str:
        return (f"must be {self.value} ({self.meaning}) or between {self.range.low} and "
                f"{self.range.high}")


@dataclass(frozen=True, slots=True)
class SubsetOf:
    """A list whose every item is one of a fixed set (Kafka's ValidList.in); may be empty."""

    values: tuple[str, ...]

    def __call__(self, value: Any) -> bool:
        return all(item in self.values for item in value)

    def __str__(self) -> str:
        return "must be a comma-separated list of " + ", ".join(self.values)


_REPLICA = re.compile(r"(?:[0-9]+:[0-9]+)?")  # partition:broker; empty items pass, as in Kafka


@dataclass(frozen=True, slots=True)
class ReplicaList:
    """"*" or partitionId:brokerId pairs; may be empty (Kafka's ThrottledReplicaListValidator)."""

    def __call__(self, value: Any) -> bool:
        return value - {""} == {"*"} or all(_REPLICA.fullmatch(item) for item in value)

    def __str__(self) -> str:
        return ("must be the literal '*' or a list of replicas in the form "
                "[partitionId]:[brokerId],[partitionId]:[brokerId],...")


@dataclass(frozen=True, slots=True)
class Only:
    """Only `value` is allowed, because Odradek lacks what the others ask for (`text`)."""

    value: Any
    text: str

    def __call__(self, value: Any) -> bool:
        return bool(value == self.value)

    def __str__(self) -> str:
        return self.text


# Kafka 3.9's MetadataVersion ids, oldest first (server-common/.../MetadataVersion.java): the
# values inter.broker.protocol.version and (log.)message.format.version take. Versions after
# LATEST_PRODUCTION are taken only by their full id, not by their release ("4.0").
METADATA_VERSIONS = (
    "0.8.0", "0.8.1", "0.8.2", "0.9.0", "0.10.0-IV0", "0.10.0-IV1", "0.10.1-IV0", "0.10.1-IV1",
    "0.10.1-IV2", "0.10.2-IV0", "0.11.0-IV0", "0.11.0-IV1", "0.11.0-IV2", "1.0-IV0", "1.1-IV0",
    "2.0-IV0", "2.0-IV1", "2.1-IV0", "2.1-IV1", "2.1-IV2", "2.2-IV0", "2.2-IV1", "2.3-IV0",
    "2.3-IV1", "2.4-IV0", "2.4-IV1", "2.5-IV0", "2.6-IV0", "2.7-IV0", "2.7-IV1", "2.7-IV2",
    "2.8-IV0", "2.8-IV1", "3.0-IV0", "3.0-IV1", "3.1-IV0", "3.2-IV0", "3.3-IV0", "3.3-IV1",
    "3.3-IV2", "3.3-IV3", "3.4-IV0", "3.5-IV0", "3.5-IV1", "3.5-IV2", "3.6-IV0", "3.6-IV1",
    "3.6-IV2", "3.7-IV0", "3.7-IV1", "3.7-IV2", "3.7-IV3", "3.7-IV4", "3.8-IV0", "3.9-IV0",
    "4.0-IV0", "4.0-IV1",
)
LATEST_PRODUCTION_VERSION = "3.9-IV0"


def _version_ids() -> dict[str, int]:
    """Every string MetadataVersion.fromVersionString maps -> the index of its version: each
    id, and each release ("0.10.0", "2.8") -> its latest production id."""
    ids = {version: i for i, version in enumerate(METADATA_VERSIONS)}
    latest = METADATA_VERSIONS.index(LATEST_PRODUCTION_VERSION)
    for i, version in enumerate(METADATA_VERSIONS[: latest + 1]):
        ids[version.split("-")[0]] = i
    return ids


_VERSION_IDS = _version_ids()


def kafka_version_index(text: str) -> int | None:
    """The index in METADATA_VERSIONS of a version string as Kafka 3.9 parses it ("0.10.0",
    "0.10.0.1", "0.10.0-IV1", "2.8", "2.8.1", "3.9-IV0"), or None if Kafka refuses it: it
    keeps the first three dot-separated parts of a 0.x version and two of the others."""
    parts = text.split(".")
    while parts and not parts[-1]:  # Java's String.split drops trailing empty strings
        parts.pop()
    keep = 3 if text.startswith("0.") else 2
    key = text if keep >= len(parts) else ".".join(parts[:keep])
    return _VERSION_IDS.get(key)


def record_format_version(text: str) -> int:
    """The record format (magic) a message.format.version writes: 0 before 0.10.0, 1 before
    0.11.0, else 2 (MetadataVersion.highestSupportedRecordVersion)."""
    index = kafka_version_index(text)
    if index is None:
        raise ValueError(f"Version {text} is not a valid version")
    if index < METADATA_VERSIONS.index("0.10.0-IV0"):
        return 0
    return 1 if index < METADATA_VERSIONS.index("0.11.0-IV0") else 2


@dataclass(frozen=True, slots=True)
class KafkaVersion:
    """A Kafka version as inter.broker.protocol.version takes it (Kafka's
    MetadataVersionValidator)."""

    def __call__(self, value: Any) -> bool:
        return isinstance(value, str) and kafka_version_index(value) is not None

    def __str__(self) -> str:
        return ("must be a Kafka version: a release such as 0.10.0, 2.8 or 3.9, or one of "
                "Kafka 3.9's MetadataVersion ids (" + ", ".join(METADATA_VERSIONS) + ")")


@dataclass(frozen=True, slots=True)
class Synonym:
    """A broker setting that supplies a topic config's default; `scale` converts its unit."""

    name: str
    scale: int = 1  # e.g. hours -> ms; a scaled setting is an int in Kafka


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One topic config: its Kafka name, type, default, allowed values and broker synonyms."""

    name: str
    type: ConfigType
    default: Any
    doc: str
    validator: Validator | None = None
    synonyms: tuple[Synonym, ...] = ()  # broker settings, highest precedence first; may be none
    no_effect: str = ""  # why it is accepted and has no effect here ("": it has its effect)

    @property
    def attr(self) -> str:
        """The LogConfig field: the Kafka name with dots as underscores."""
        return self.name.replace(".", "_")

    def coerce(self, raw: Any, *, label: str | None = None) -> Any:
        """Parse `raw` (a string as in a properties file, or a Python value) and validate it.

        Raises InvalidConfigError naming `label` (default: this key's name).
        """
        try:
            value = parse_value(self.type, raw)
        except ValueError as e:
            raise _invalid(label or self.name, raw, str(e)) from None
        reason = self.violation(value)
        if reason is not None:
            raise _invalid(label or self.name, raw, reason)
        return value

    def violation(self, value: Any) -> str | None:
        """Why an already parsed value is not allowed, or None if it is."""
        if self.validator is not None and not self.validator(value):
            return str(self.validator)
        return None

    def format(self, value: Any) -> str:
        """The value as Kafka lists it (DescribeConfigs, kafka-configs.sh)."""
        return format_value(self.type, value)

    def ignored(self, value: Any) -> str | None:
        """Why setting this config to `value` has no effect here, for a warning; None when it
        has its effect, or when ignoring it changes nothing: message.format.version 0.11 or
        later asks for record batches v2, which is what is written (Kafka 3.9 warns only
        about older ones)."""
        if not self.no_effect:
            return None
        if self.name == "message.format.version" and record_format_version(str(value)) == 2:
            return None
        return self.no_effect


def _invalid(key: str, raw: Any, reason: str) -> InvalidConfigError:
    shown = raw if isinstance(raw, str) else _show(raw)
    return InvalidConfigError(f"{key}={shown} is invalid: {reason}", key=key)


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, frozenset | set | list | tuple):
        return ",".join(sorted(str(v) for v in value))
    return str(value)


_INTEGER = re.compile(r"[+-]?\d+")
_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_COMMA = re.compile(r"\s*,\s*")


def parse_value(ctype: ConfigType, raw: Any) -> Any:
    """A value of `ctype` from a string (Kafka's ConfigDef.parseType rules) or a Python value.

    Raises ValueError with a reason (what is expected) on anything else.
    """
    if ctype in (ConfigType.INT, ConfigType.LONG):
        if isinstance(raw, str) and _INTEGER.fullmatch(raw.strip()):
            raw = int(raw.strip())
        if not isinstance(raw, int) or isinstance(raw, bool):
            raise ValueError("must be an integer")
        low, high, bits = (
            (INT_MIN, INT_MAX, 32) if ctype is ConfigType.INT else (LONG_MIN, LONG_MAX, 64)
        )
        if not low <= raw <= high:
            raise ValueError(f"must fit in a {bits}-bit signed integer")
        return raw
    if ctype is ConfigType.DOUBLE:
        if isinstance(raw, str) and _DECIMAL.fullmatch(raw.strip()):
            return float(raw.strip())
        if isinstance(raw, int | float) and not isinstance(raw, bool) and raw == raw:
            return float(raw)
        raise ValueError("must be a number")
    if ctype is ConfigType.BOOLEAN:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
            return raw.strip().lower() == "true"
        raise ValueError("must be true or false")
    if ctype is ConfigType.STRING:
        if isinstance(raw, str):
            return raw.strip()
        raise ValueError("must be a string")
    if ctype is ConfigType.LIST:
        if isinstance(raw, str):
            text = raw.strip()
            return frozenset(_COMMA.split(text)) if text else frozenset()
        if isinstance(raw, Iterable) and all(isinstance(item, str) for item in raw):
            return frozenset(item.strip() for item in raw)
        raise ValueError("must be a comma-separated list")
    raise AssertionError(ctype)


def format_value(ctype: ConfigType, value: Any) -> str:
    """A value of `ctype` as the string Kafka would list for it."""
    if ctype is ConfigType.BOOLEAN:
        return "true" if value else "false"
    if ctype is ConfigType.DOUBLE:
        return java_double(float(value))
    if ctype is ConfigType.LIST:
        return ",".join(sorted(value))
    return str(value)


def java_double(value: float) -> str:
    """A double as Java's Double.toString writes it: 0.5 -> "0.5", 1 -> "1.0", and outside
    [0.001, 10^7) in scientific notation: 1.7976931348623157E308, 1.0E-4."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(value)  # Python writes these as Java does
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    text = "".join(map(str, digits))
    power = len(text) - 1 + int(exponent)
    mantissa = text[0] + "." + (text[1:] or "0")
    return ("-" if sign else "") + f"{mantissa}E{power}"


_T = ConfigType
_H = MS_PER_HOUR


_NOT_COMPRESSING = "Odradek stores batches as the producer compressed them"
_NO_TIERED_STORAGE = "Odradek has no tiered storage"


def _synonyms(*names: str | tuple[str, int]) -> tuple[Synonym, ...]:
    return tuple(Synonym(n) if isinstance(n, str) else Synonym(*n) for n in names)


_KEYS_IN_ORDER = (
    ConfigKey(
        "segment.bytes",
        _T.INT,
        1024 * 1024 * 1024,
        "The largest a segment file grows to before a new one is rolled.",
        Range(
            RECORD_BATCH_OVERHEAD,
            text=f"must be >= {RECORD_BATCH_OVERHEAD} (one record batch header; "
            "Kafka 4.0 itself requires >= 1048576)",
        ),
        _synonyms("log.segment.bytes"),
    ),
    ConfigKey(
        "segment.ms",
        _T.LONG,
        7 * MS_PER_DAY,
        "Roll a new segment after this long even if the active one is not full, so that "
        "retention and compaction can act on old data.",
        Range(1),
        _synonyms("log.roll.ms", ("log.roll.hours", _H)),
    ),
    ConfigKey(
        "segment.jitter.ms",
        _T.LONG,
        0,
        "A random amount subtracted from segment.ms so that segments do not all roll at once.",
        Range(0),
        _synonyms("log.roll.jitter.ms", ("log.roll.jitter.hours", _H)),
    ),
    ConfigKey(
        "segment.index.bytes",
        _T.INT,
        10 * 1024 * 1024,
        "The size of each segment's offset and time index files (preallocated, trimmed on roll).",
        Range(TIME_INDEX_ENTRY_SIZE, text=f"must be >= {TIME_INDEX_ENTRY_SIZE} (one index entry)"),
        _synonyms("log.index.size.max.bytes"),
    ),
    ConfigKey(
        "index.interval.bytes",
        _T.INT,
        4096,
        "How many bytes of batches between two offset index entries.",
        Range(0),
        _synonyms("log.index.interval.bytes"),
    ),
    ConfigKey(
        "flush.messages",
        _T.LONG,
        LONG_MAX,
        "fsync the log after this many messages (default: leave it to the OS and replication).",
        Range(1),
        _synonyms("log.flush.interval.messages"),
    ),
    ConfigKey(
        "flush.ms",
        _T.LONG,
        LONG_MAX,
        "fsync the log when its oldest unflushed message is this old.",
        Range(0),
        _synonyms("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ),
    ConfigKey(
        "retention.ms",
        _T.LONG,
        7 * MS_PER_DAY,
        "Delete segments whose newest record is older than this (delete policy); -1: never.",
        Range(-1, text="must be -1 (unlimited) or >= 0"),
        _synonyms(
            "log.retention.ms",
            ("log.retention.minutes", MS_PER_MINUTE),
            ("log.retention.hours", _H),
        ),
    ),
    ConfigKey(
        "retention.bytes",
        _T.LONG,
        -1,
        "Delete the oldest segments while the partition is larger than this; -1: never "
        "(Kafka takes any negative value as unlimited, and so does this).",
        None,
        _synonyms("log.retention.bytes"),
    ),
    ConfigKey(
        "cleanup.policy",
        _T.LIST,
        frozenset({"delete"}),
        "delete (retention by time and size), compact (keep the last record of each key), "
        "both, or neither (an empty list).",
        SubsetOf(CLEANUP_POLICIES),
        _synonyms("log.cleanup.policy"),
    ),
    ConfigKey(
        "delete.retention.ms",
        _T.LONG,
        MS_PER_DAY,
        "How long a compacted topic keeps tombstones, so that consumers see the deletes.",
        Range(0),
        _synonyms("log.cleaner.delete.retention.ms"),
    ),
    ConfigKey(
        "min.compaction.lag.ms",
        _T.LONG,
        0,
        "The least time a record stays uncompacted.",
        Range(0),
        _synonyms("log.cleaner.min.compaction.lag.ms"),
    ),
    ConfigKey(
        "max.compaction.lag.ms",
        _T.LONG,
        LONG_MAX,
        "The most time a record can stay uncompacted.",
        Range(1),
        _synonyms("log.cleaner.max.compaction.lag.ms"),
    ),
    ConfigKey(
        "min.cleanable.dirty.ratio",
        _T.DOUBLE,
        0.5,
        "Compact a log once this share of it has not been compacted yet.",
        Range(0, 1),
        _synonyms("log.cleaner.min.cleanable.ratio"),
    ),
    ConfigKey(
        "file.delete.delay.ms",
        _T.LONG,
        60000,
        "How long a deleted segment's renamed (.deleted) files stay, so that reads in flight "
        "can finish.",
        Range(0),
        _synonyms("log.segment.delete.delay.ms"),
    ),
    ConfigKey(
        "max.message.bytes",
        _T.INT,
        1024 * 1024 + 12,
        "The largest record batch (after compression) the topic accepts.",
        Range(0),
        _synonyms("message.max.bytes"),
    ),
    ConfigKey(
        "message.timestamp.type",
        _T.STRING,
        "CreateTime",
        "Keep the producer's timestamps (CreateTime) or stamp batches on append (LogAppendTime).",
        OneOf(TIMESTAMP_TYPES),
        _synonyms("log.message.timestamp.type"),
    ),
    ConfigKey(
        "message.timestamp.before.max.ms",
        _T.LONG,
        LONG_MAX,
        "With CreateTime, refuse batches stamped more than this before the broker's clock.",
        Range(0),
        _synonyms("log.message.timestamp.before.max.ms"),
    ),
    ConfigKey(
        "message.timestamp.after.max.ms",
        _T.LONG,
        MS_PER_HOUR,
        "With CreateTime, refuse batches stamped more than this after the broker's clock "
        "(1 hour since Kafka 4.0, KIP-1030; unlimited before).",
        Range(0),
        _synonyms("log.message.timestamp.after.max.ms"),
    ),
    ConfigKey(
        "message.timestamp.difference.max.ms",
        _T.LONG,
        LONG_MAX,
        "Deprecated (KIP-937; removed in Kafka 4.0): with CreateTime, refuse batches stamped "
        "more than this before or after the broker's clock. As in Kafka 3.9, it applies to "
        "message.timestamp.before.max.ms and message.timestamp.after.max.ms where they are "
        "left at their defaults (set at the same level or inherited).",
        Range(0),
        _synonyms("log.message.timestamp.difference.max.ms"),
    ),
    ConfigKey(
        "preallocate",
        _T.BOOLEAN,
        False,
        "Create segment files at their full size.",
        None,
        _synonyms("log.preallocate"),
    ),
    ConfigKey(
        "unclean.leader.election.enable",
        _T.BOOLEAN,
        False,
        "Let a replica outside the ISR become leader, at the cost of losing data.",
        None,
        _synonyms("unclean.leader.election.enable"),
    ),
    ConfigKey(
        "min.insync.replicas",
        _T.INT,
        1,
        "With acks=all, the fewest in-sync replicas a write needs.",
        Range(1),
        _synonyms("min.insync.replicas"),
    ),
    ConfigKey(
        "compression.type",
        _T.STRING,
        "producer",
        "The compression of stored batches; producer keeps the producer's codec.",
        OneOf(COMPRESSION_TYPES),
        _synonyms("compression.type"),
    ),
    # The codec levels (KIP-390) are used when the broker compresses, which Odradek never
    # does yet: it stores batches as the producer compressed them whatever compression.type.
    ConfigKey(
        "compression.gzip.level",
        _T.INT,
        GZIP_DEFAULT_LEVEL,
        "The gzip level when the broker compresses batches with gzip. Not used yet: Odradek "
        "stores batches as the producer compressed them.",
        RangeOr(Range(1, 9), GZIP_DEFAULT_LEVEL, "the codec's default"),
        _synonyms("compression.gzip.level"),
        _NOT_COMPRESSING,
    ),
    ConfigKey(
        "compression.lz4.level",
        _T.INT,
        9,
        "The lz4 level when the broker compresses batches with lz4. Not used yet: Odradek "
        "stores batches as the producer compressed them.",
        Range(1, 17),
        _synonyms("compression.lz4.level"),
        _NOT_COMPRESSING,
    ),
    ConfigKey(
        "compression.zstd.level",
        _T.INT,
        3,
        "The zstd level when the broker compresses batches with zstd. Not used yet: Odradek "
        "stores batches as the producer compressed them.",
        Range(ZSTD_MIN_LEVEL, 22),
        _synonyms("compression.zstd.level"),
        _NOT_COMPRESSING,
    ),
    ConfigKey(
        "message.downconversion.enable",
        _T.BOOLEAN,
        True,
        "Whether the broker down-converts records for consumers that fetch with Fetch v0-v3 "
        "(magic 0 and 1 message sets); false answers them UNSUPPORTED_VERSION, as Kafka 3.9 "
        "does.",
        None,
        _synonyms("log.message.downconversion.enable"),
    ),
    # Deprecated in Kafka 3.0 (KIP-724), removed in 4.0: the message format is always v2.
    ConfigKey(
        "message.format.version",
        _T.STRING,
        "3.0-IV1",
        "Deprecated: the message format version the broker writes. Kafka 3.x ignores it "
        "(from inter.broker.protocol.version 3.0, its default) and writes record batches v2; "
        "so does Odradek, always: accepted, no effect. The default is Kafka 3.9's; Kafka 4.0 "
        "removed the setting.",
        KafkaVersion(),
        _synonyms("log.message.format.version"),
        "Odradek always writes record batches v2 (message format 2), as Kafka 3.x does from "
        "inter.broker.protocol.version 3.0; deprecated, and removed in Kafka 4.0",
    ),
    # Replication quotas (KIP-73), set by kafka-reassign-partitions.sh during a reassignment.
    # No broker setting supplies their default. Odradek does not throttle replication yet.
    ConfigKey(
        "leader.replication.throttled.replicas",
        _T.LIST,
        frozenset(),
        "The replicas whose replication is throttled on the leader side, as "
        "partitionId:brokerId pairs, or * for all of the topic's. Accepted, no effect: "
        "Odradek does not throttle replication yet (it comes with the cluster work).",
        ReplicaList(),
        no_effect="Odradek does not throttle replication yet",
    ),
    ConfigKey(
        "follower.replication.throttled.replicas",
        _T.LIST,
        frozenset(),
        "The replicas whose replication is throttled on the follower side, as "
        "partitionId:brokerId pairs, or * for all of the topic's. Accepted, no effect: "
        "Odradek does not throttle replication yet (it comes with the cluster work).",
        ReplicaList(),
        no_effect="Odradek does not throttle replication yet",
    ),
    # Tiered storage (KIP-405). Odradek has no remote storage: remote.storage.enable=true is
    # refused (as Kafka refuses it when the broker has no remote log storage system enabled),
    # and the others are accepted and have no effect. Only the local.retention.* configs have
    # a broker default in Kafka.
    ConfigKey(
        "remote.storage.enable",
        _T.BOOLEAN,
        False,
        "Tiered storage for the topic: copy its segments to remote storage. Odradek has no "
        "tiered storage: false is accepted, with no effect, and true is refused.",
        Only(False, "tiered storage is not supported (Odradek has no remote log storage), "
             "so it must be false"),
        no_effect=_NO_TIERED_STORAGE,
    ),
    ConfigKey(
        "local.retention.ms",
        _T.LONG,
        LOCAL_RETENTION_FROM_TOPIC,
        "With tiered storage, how long a segment stays on local disk once it is copied to "
        "remote storage; -2: retention.ms. Odradek has no tiered storage: no effect.",
        Range(LOCAL_RETENTION_FROM_TOPIC),
        _synonyms("log.local.retention.ms"),
        _NO_TIERED_STORAGE,
    ),
    ConfigKey(
        "local.retention.bytes",
        _T.LONG,
        LOCAL_RETENTION_FROM_TOPIC,
        "With tiered storage, how large a partition's local segments may grow once they are "
        "copied to remote storage; -2: retention.bytes. Odradek has no tiered storage: no "
        "effect.",
        Range(LOCAL_RETENTION_FROM_TOPIC),
        _synonyms("log.local.retention.bytes"),
        _NO_TIERED_STORAGE,
    ),
    ConfigKey(
        "remote.log.copy.disable",
        _T.BOOLEAN,
        False,
        "With tiered storage, stop copying the topic's segments to remote storage and keep "
        "what is there read-only; expiry then follows retention.ms and retention.bytes. "
        "Odradek has no tiered storage: accepted, no effect.",
        no_effect=_NO_TIERED_STORAGE,
    ),
    ConfigKey(
        "remote.log.delete.on.disable",
        _T.BOOLEAN,
        False,
        "With tiered storage, delete the topic's remote data when remote.storage.enable is "
        "turned from true to false. Odradek has no tiered storage: accepted, no effect.",
        no_effect=_NO_TIERED_STORAGE,
    ),
)

TOPIC_CONFIGS: Mapping[str, ConfigKey] = MappingProxyType({k.name: k for k in _KEYS_IN_ORDER})
"""Every topic config Kafka defines for a log, by name: the single source of truth."""

BROKER_SYNONYMS: Mapping[str, tuple[ConfigKey, Synonym]] = MappingProxyType(
    {synonym.name: (key, synonym) for key in TOPIC_CONFIGS.values() for synonym in key.synonyms}
)
"""Each broker setting that supplies a topic config's default -> (that config, the synonym).
A topic config without synonyms is in no entry: its default is Kafka's, whatever the broker."""


def _default(name: str) -> Any:
    return TOPIC_CONFIGS[name].default


@dataclass(frozen=True, slots=True)
class LogConfig:
    """One topic's log settings, validated on construction (Kafka names: dots for underscores).

    Build it from Kafka-named properties with `from_properties`, `from_broker_properties` or
    `with_overrides`; fields given directly are parsed and checked the same way.
    """

    segment_bytes: int = _default("segment.bytes")
    segment_ms: int = _default("segment.ms")
    segment_jitter_ms: int = _default("segment.jitter.ms")
    segment_index_bytes: int = _default("segment.index.bytes")
    index_interval_bytes: int = _default("index.interval.bytes")
    flush_messages: int = _default("flush.messages")
    flush_ms: int = _default("flush.ms")
    retention_ms: int = _default("retention.ms")
    retention_bytes: int = _default("retention.bytes")
    cleanup_policy: frozenset[str] = _default("cleanup.policy")
    delete_retention_ms: int = _default("delete.retention.ms")
    min_compaction_lag_ms: int = _default("min.compaction.lag.ms")
    max_compaction_lag_ms: int = _default("max.compaction.lag.ms")
    min_cleanable_dirty_ratio: float = _default("min.cleanable.dirty.ratio")
    file_delete_delay_ms: int = _default("file.delete.delay.ms")
    max_message_bytes: int = _default("max.message.bytes")
    message_timestamp_type: str = _default("message.timestamp.type")
    message_timestamp_before_max_ms: int = _default("message.timestamp.before.max.ms")
    message_timestamp_after_max_ms: int = _default("message.timestamp.after.max.ms")
    message_timestamp_difference_max_ms: int = _default("message.timestamp.difference.max.ms")
    preallocate: bool = _default("preallocate")
    unclean_leader_election_enable: bool = _default("unclean.leader.election.enable")
    min_insync_replicas: int = _default("min.insync.replicas")
    compression_type: str = _default("compression.type")
    compression_gzip_level: int = _default("compression.gzip.level")
    compression_lz4_level: int = _default("compression.lz4.level")
    compression_zstd_level: int = _default("compression.zstd.level")
    message_downconversion_enable: bool = _default("message.downconversion.enable")
    message_format_version: str = _default("message.format.version")
    leader_replication_throttled_replicas: frozenset[str] = _default(
        "leader.replication.throttled.replicas"
    )
    follower_replication_throttled_replicas: frozenset[str] = _default(
        "follower.replication.throttled.replicas"
    )
    remote_storage_enable: bool = _default("remote.storage.enable")
    local_retention_ms: int = _default("local.retention.ms")
    local_retention_bytes: int = _default("local.retention.bytes")
    remote_log_copy_disable: bool = _default("remote.log.copy.disable")
    remote_log_delete_on_disable: bool = _default("remote.log.delete.on.disable")

    def __post_init__(self) -> None:
        for key in TOPIC_CONFIGS.values():
            raw = getattr(self, key.attr)
            value = key.coerce(raw)
            if value is not raw:
                object.__setattr__(self, key.attr, value)
        # Kafka's LogConfig.validateValues: the one rule that spans two settings.
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise InvalidConfigError(
                f"min.compaction.lag.ms={self.min_compaction_lag_ms} is invalid: must be <= "
                f"max.compaction.lag.ms ({self.max_compaction_lag_ms})",
                key="min.compaction.lag.ms",
            )

    @property
    def compact(self) -> bool:
        """Whether the log cleaner compacts this log (cleanup.policy has compact)."""
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """Whether retention deletes old segments (cleanup.policy has delete)."""
        return "delete" in self.cleanup_policy

    @classmethod
    def from_properties(
        cls,
        props: Mapping[str, str | int | float | bool],
        defaults: LogConfig | None = None,
    ) -> LogConfig:
        """Topic configs by Kafka name (string values as in a properties file or CreateTopics)
        on top of `defaults` (else Kafka's). Raises InvalidConfigError naming the bad key."""
        changes: dict[str, Any] = {}
        for name, raw in props.items():
            key = TOPIC_CONFIGS.get(name)
            if key is None:
                raise InvalidConfigError(f"{name} is not a topic config", key=name)
            changes[key.attr] = key.coerce(raw)
        base = defaults if defaults is not None else cls()
        if _DIFFERENCE in props:
            _difference_fallback(changes, changes[_DIFFERENCE_ATTR], base)
        return replace(base, **changes)

    def with_overrides(self, props: Mapping[str, str | int | float | bool]) -> LogConfig:
        """This config (a broker's defaults) with a topic's overrides applied."""
        return self.from_properties(props, defaults=self)

    @classmethod
    def from_broker_properties(cls, props: Mapping[str, str | int | float | bool]) -> LogConfig:
        """The default topic config a broker's properties set (log.segment.bytes,
        log.retention.hours, ...); settings that are not log settings are ignored.

        Where several settings feed one config the finer unit wins (log.retention.ms over
        .minutes over .hours), and a negative retention time means unlimited, as in Kafka.
        A topic config with no broker synonym keeps Kafka's default.
        """
        values: dict[str, Any] = {}
        for key in TOPIC_CONFIGS.values():
            synonym = next((s for s in key.synonyms if s.name in props), None)
            if synonym is not None:
                values[key.attr] = _from_synonym(key, synonym, props[synonym.name])
        if _DIFFERENCE_ATTR in values:
            _difference_fallback(values, values[_DIFFERENCE_ATTR], None)
        return cls(**values)

    def to_properties(self) -> dict[str, str]:
        """Every setting by Kafka name as a string, as DescribeConfigs lists them."""
        return {key.name: key.format(getattr(self, key.attr)) for key in TOPIC_CONFIGS.values()}


_DIFFERENCE = "message.timestamp.difference.max.ms"
_DIFFERENCE_ATTR = TOPIC_CONFIGS[_DIFFERENCE].attr
_DIFFERENCE_SIDES = ("message.timestamp.before.max.ms", "message.timestamp.after.max.ms")


def _difference_fallback(values: dict[str, Any], difference: int, base: LogConfig | None) -> None:
    """Kafka 3.9's rule for the deprecated message.timestamp.difference.max.ms, set in
    `values` (on top of `base`): each of message.timestamp.before.max.ms and .after.max.ms
    left at its default takes the difference instead (LogConfig.getMessageTimestamp*MaxMs).
    A side at its default is one given here with its default value, or not given here and
    inherited either at its default or from the difference `base` set."""
    for name in _DIFFERENCE_SIDES:
        key = TOPIC_CONFIGS[name]
        if key.attr in values:
            at_default = values[key.attr] == key.default
        else:
            inherited = key.default if base is None else getattr(base, key.attr)
            at_default = inherited == key.default or (
                base is not None and base.message_timestamp_difference_max_ms != LONG_MAX
                and inherited == base.message_timestamp_difference_max_ms)
        if at_default:
            values[key.attr] = key.default if difference == LONG_MAX else difference


def _from_synonym(key: ConfigKey, synonym: Synonym, raw: Any) -> Any:
    """A topic config's value from the broker setting `synonym`, converted to its unit."""
    try:
        value = parse_value(key.type if synonym.scale == 1 else ConfigType.INT, raw)
    except ValueError as e:
        raise _invalid(synonym.name, raw, str(e)) from None
    if synonym.scale != 1:
        value *= synonym.scale
    if key.name == "retention.ms" and value < 0:
        value = -1  # KafkaConfig.logRetentionTimeMillis: any negative time is "forever"
    reason = key.violation(value)
    if reason is not None:
        if synonym.scale != 1:
            reason = f"that is {key.name}={value}, which {reason}"
        raise _invalid(synonym.name, raw, reason)
    return value


_FIELDS = {f.name for f in fields(LogConfig)}
_KEYS = {key.attr for key in TOPIC_CONFIGS.values()}
if _FIELDS != _KEYS:  # the table and the dataclass must list the same settings
    raise RuntimeError(f"LogConfig fields and TOPIC_CONFIGS differ: {sorted(_FIELDS ^ _KEYS)}")
