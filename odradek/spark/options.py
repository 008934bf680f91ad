"""The data source's options, named and checked as Spark's built-in Kafka source names them.

Options are read case-insensitively (Spark lower-cases the keys). Every check here runs on
the driver, before the query starts: an unknown option or a contradictory pair fails with a
message that names it.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

EARLIEST = -2
LATEST = -1

# Read options this session's reader understands (lower-case).
_READ_OPTIONS = {
    "subscribe", "subscribepattern", "assign", "startingoffsets", "endingoffsets",
    "startingtimestamp", "startingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy",
    "endingtimestamp", "endingoffsetsbytimestamp", "minpartitions", "failondataloss",
    "includeheaders", "maxoffsetspertrigger", "kafkaconsumer.polltimeoutms",
}
# Options of Spark's Kafka source that this data source does not implement yet.
_NOT_YET = {
    "maxpartitions", "minoffsetspertrigger", "maxtriggerdelay", "groupidprefix",
    "fetchoffset.numretries", "fetchoffset.retryintervalms",
}
# Client settings Spark's Kafka source refuses, because the source manages them itself.
_FORBIDDEN_CLIENT = {
    "group.id": "the data source reads assigned partitions without a consumer group",
    "auto.offset.reset": "use startingOffsets instead",
    "enable.auto.commit": "offsets are tracked by Spark, never committed to the broker",
    "key.deserializer": "keys are always returned as binary",
    "value.deserializer": "values are always returned as binary",
    "key.serializer": "keys are written as binary or string columns",
    "value.serializer": "values are written as binary or string columns",
    "interceptor.classes": "interceptors are not supported",
}
# Keys and values through a schema registry (registry_formats.py); schema.registry.* too.
_FORMAT_OPTIONS = {"keyformat", "valueformat", "keysubject", "valuesubject"}
_READ_OPTIONS |= _FORMAT_OPTIONS | {"keyschemaversion", "valueschemaversion",
                                    "schemaevolutionmode"}
_WRITE_OPTIONS = {"topic", "deliveryguarantee", "transactionalidprefix", "checkpointlocation",
                  "batchid", *_FORMAT_OPTIONS}
# Spark passes a streaming query's checkpoint location and name to its sink as options.
_STREAM_WRITE_OPTIONS = _WRITE_OPTIONS - {"batchid"} | {"queryname"}
# How long a task's transaction may stay open before the coordinator aborts it: the whole
# micro-batch, tasks and commit, must fit. Kafka's transaction.max.timeout.ms (15 minutes).
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000


class OdradekOptionError(ValueError):
    """An option is unknown, malformed, or contradicts another one."""


def _get(options: Mapping[str, str], name: str) -> str | None:
    # The options object of Spark is case-insensitive; plain dicts in unit tests may not be.
    value = options.get(name)
    if value is None:
        value = options.get(name.lower())
    if value is None:
        for key, item in options.items():
            if key.lower() == name.lower():
                return str(item)
    return None if value is None else str(value)


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = _get(options, name)
    if value is None:
        return default
    if value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise OdradekOptionError(f"option {name} must be true or false, not {value!r}")


def _int(options: Mapping[str, str], name: str, minimum: int) -> int | None:
    value = _get(options, name)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise OdradekOptionError(f"option {name} must be an integer, not {value!r}") from None
    if number < minimum:
        raise OdradekOptionError(f"option {name} must be at least {minimum}, not {number}")
    return number


def client_config(options: Mapping[str, str]) -> dict[str, str]:
    """The kafka.* options, without their prefix, for confluent-kafka."""
    config: dict[str, str] = {}
    for key, value in options.items():
        if key.lower().startswith("kafka."):
            name = key[len("kafka."):].lower()
            if name in _FORBIDDEN_CLIENT:
                raise OdradekOptionError(
                    f"option kafka.{name} is not supported: {_FORBIDDEN_CLIENT[name]}")
            config[name] = str(value)
    if "bootstrap.servers" not in config:
        raise OdradekOptionError("option kafka.bootstrap.servers is required")
    return config


@dataclass(frozen=True)
class Subscription:
    """Exactly one of subscribe (topic list), subscribePattern, assign."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[tuple[str, int], ...] = ()

    @property
    def kind(self) -> str:
        return "subscribe" if self.topics else "subscribePattern" if self.pattern else "assign"


# A per-partition offset specification: {"topic": {"0": 23, "1": -2}}; -2 earliest, -1 latest.
OffsetSpec = str | dict[str, dict[str, int]]
# Timestamps (ms) to look offsets up by: one for every partition, or {"topic": {"0": ms}}.
TimestampSpec = int | dict[str, dict[str, int]]


def _offset_spec(options: Mapping[str, str], name: str, default: str,
                 allowed_words: tuple[str, ...], allowed_special: tuple[int, ...]) -> OffsetSpec:
    raw = _get(options, name)
    if raw is None:
        return default
    word = raw.strip().lower()
    if word in ("earliest", "latest"):
        if word not in allowed_words:
            raise OdradekOptionError(f"option {name}={word} is not allowed here "
                                     f"(allowed: {', '.join(allowed_words)} or a JSON object)")
        return word
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError:
        raise OdradekOptionError(
            f"option {name} must be earliest, latest or JSON like "
            f'{{"topic":{{"0":23,"1":-2}}}}, not {raw!r}') from None
    if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
        raise OdradekOptionError(f'option {name} must be a JSON object like '
                                 f'{{"topic":{{"0":23,"1":-2}}}}, not {raw!r}')
    spec: dict[str, dict[str, int]] = {}
    for topic, partitions in parsed.items():
        spec[str(topic)] = {}
        for partition, offset in partitions.items():
            try:
                p = int(partition)
            except ValueError:
                raise OdradekOptionError(
                    f"option {name}: partition {partition!r} of {topic} is not a number") from None
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise OdradekOptionError(
                    f"option {name}: offset of {topic}-{p} must be an integer, not {offset!r}")
            if offset < 0 and offset not in allowed_special:
                raise OdradekOptionError(
                    f"option {name}: offset {offset} of {topic}-{p} is not allowed here")
            spec[str(topic)][str(p)] = offset
    return spec


def _timestamp_spec(options: Mapping[str, str], single: str,
                    per_partition: str) -> TimestampSpec | None:
    """startingTimestamp wins over startingOffsetsByTimestamp, as in Spark's Kafka source."""
    raw = _get(options, single)
    if raw is not None:
        try:
            stamp = int(raw)
        except ValueError:
            raise OdradekOptionError(f"option {single} must be a timestamp in milliseconds, "
                                     f"not {raw!r}") from None
        if stamp < 0:
            raise OdradekOptionError(f"option {single} must not be negative, not {stamp}")
        return stamp
    if _get(options, per_partition) is None:
        return None
    spec = _offset_spec(options, per_partition, "", (), ())
    if not isinstance(spec, dict):
        raise OdradekOptionError(f'option {per_partition} must be a JSON object like '
                                 f'{{"topic":{{"0":1700000000000}}}}')
    return spec


FORMATS = ("binary", "avro", "json-schema")
EVOLUTION_MODES = ("none", "restart")


@dataclass(frozen=True)
class ColumnFormat:
    """How the key or the value column is encoded: options keyFormat / valueFormat, the
    subject (keySubject / valueSubject, by default the topic name strategy's), the version
    a read decodes into (keySchemaVersion / valueSchemaVersion) and schemaEvolutionMode."""

    column: str  # "key" or "value"
    format: str  # "avro" or "json-schema"
    registry: tuple[tuple[str, str], ...]  # SchemaRegistryClient settings, url among them
    subject: str
    version: str = "latest"
    evolution: str = "none"

    @property
    def schema_type(self) -> str:
        return "AVRO" if self.format == "avro" else "JSON"


def column_formats(options: Mapping[str, str], topic: str | None, reading: bool
                   ) -> tuple[ColumnFormat, ...]:
    """The key's and value's formats other than binary. `topic` is the one topic the query
    reads or writes, if there is one: the default subjects are <topic>-key, <topic>-value."""
    registry = tuple(sorted((key.lower()[len("schema.registry."):], str(value))
                            for key, value in options.items()
                            if key.lower().startswith("schema.registry.")))
    evolution = (_get(options, "schemaEvolutionMode") or "none").strip().lower()
    if evolution not in EVOLUTION_MODES:
        raise OdradekOptionError("option schemaEvolutionMode must be none or restart, not "
                                 f"{evolution!r}")
    formats = []
    for column in ("key", "value"):
        fmt = (_get(options, f"{column}Format") or "binary").strip().lower()
        if fmt not in FORMATS:
            raise OdradekOptionError(f"option {column}Format must be one of "
                                     f"{', '.join(FORMATS)}, not {fmt!r}")
        subject = _get(options, f"{column}Subject")
        version = (_get(options, f"{column}SchemaVersion") or "latest").strip().lower()
        if fmt == "binary":
            given = [n for n in (f"{column}Subject", f"{column}SchemaVersion")
                     if _get(options, n) is not None]
            if given:
                raise OdradekOptionError(f"option {given[0]} needs {column}Format=avro or "
                                         "json-schema")
            continue
        if not any(k == "url" for k, _ in registry):
            raise OdradekOptionError(f"{column}Format={fmt} needs the schema.registry.url "
                                     "option")
        if subject is None:
            if topic is None:
                raise OdradekOptionError(
                    f"{column}Format={fmt} with more than one topic (or a topic column) "
                    f"needs option {column}Subject")
            subject = f"{topic}-{column}"
        if version != "latest" and not version.isdigit():
            raise OdradekOptionError(f"option {column}SchemaVersion must be latest or a "
                                     f"version number, not {version!r}")
        formats.append(ColumnFormat(column, fmt, registry, subject.strip(), version,
                                    evolution))
    if reading and evolution != "none" and not formats:
        raise OdradekOptionError("option schemaEvolutionMode needs keyFormat or valueFormat")
    return tuple(formats)


@dataclass(frozen=True)
class ReadOptions:
    client: dict[str, str]
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    starting_by_time: TimestampSpec | None = None
    ending_by_time: TimestampSpec | None = None
    # When no record is as late as a starting timestamp: "error" or "latest".
    timestamp_strategy: str = "error"
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    poll_timeout_ms: int = 120_000
    formats: tuple[ColumnFormat, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


def _subscription(options: Mapping[str, str]) -> Subscription:
    given = [name for name in ("subscribe", "subscribePattern", "assign")
             if _get(options, name) is not None]
    if len(given) != 1:
        found = ", ".join(given) if given else "none"
        raise OdradekOptionError(
            f"exactly one of subscribe, subscribePattern, assign must be given (found: {found})")
    value = _get(options, given[0]) or ""
    if given[0] == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise OdradekOptionError("option subscribe must name at least one topic")
        return Subscription(topics=topics)
    if given[0] == "subscribePattern":
        if not value.strip():
            raise OdradekOptionError("option subscribePattern must not be empty")
        try:
            re.compile(value)
        except re.error as e:
            raise OdradekOptionError(f"option subscribePattern is not a pattern: {e}") from None
        return Subscription(pattern=value)
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = None
    if (not isinstance(parsed, dict) or not parsed
            or not all(isinstance(v, list) and all(isinstance(p, int) and not isinstance(p, bool)
                                                   for p in v) for v in parsed.values())):
        raise OdradekOptionError(
            f'option assign must be a JSON object like {{"topicA":[0,1],"topicB":[2]}}, '
            f"not {value!r}")
    return Subscription(assigned=tuple(sorted({(str(t), int(p))
                                               for t, ps in parsed.items() for p in ps})))


def _check_names(options: Mapping[str, str], allowed: set[str]) -> None:
    for key in options:
        name = key.lower()
        if name.startswith(("kafka.", "schema.registry.")) or name in allowed or name == "path":
            continue
        if name in _NOT_YET:
            raise OdradekOptionError(f"option {key} is not supported by the odradek data "
                                     "source yet")
        raise OdradekOptionError(f"unknown option {key!r} for the odradek data source")


def parse_read_options(options: Mapping[str, str], streaming: bool) -> ReadOptions:
    _check_names(options, _READ_OPTIONS)
    client = client_config(options)
    subscription = _subscription(options)
    if streaming:
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if _get(options, name) is not None:
                raise OdradekOptionError(f"option {name} is for batch queries only")
        starting = _offset_spec(options, "startingOffsets", "latest", ("earliest", "latest"),
                                (EARLIEST, LATEST))
        ending: OffsetSpec = "latest"
    else:
        if _get(options, "maxOffsetsPerTrigger") is not None:
            raise OdradekOptionError("option maxOffsetsPerTrigger is for streaming queries only")
        starting = _offset_spec(options, "startingOffsets", "earliest", ("earliest",),
                                (EARLIEST,))
        ending = _offset_spec(options, "endingOffsets", "latest", ("latest",), (LATEST,))
    for name, spec in (("startingOffsets", starting), ("endingOffsets", ending)):
        if isinstance(spec, dict) and subscription.assigned:
            missing = set(subscription.assigned) - {
                (t, int(p)) for t, ps in spec.items() for p in ps}
            if missing:
                raise OdradekOptionError(
                    f"option {name} does not give offsets for assigned partitions "
                    f"{sorted(missing)}")
    strategy = (_get(options, "startingOffsetsByTimestampStrategy") or "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OdradekOptionError("option startingOffsetsByTimestampStrategy must be error or "
                                 f"latest, not {strategy!r}")
    return ReadOptions(
        client=client,
        subscription=subscription,
        starting=starting,
        ending=ending,
        starting_by_time=_timestamp_spec(options, "startingTimestamp",
                                         "startingOffsetsByTimestamp"),
        ending_by_time=_timestamp_spec(options, "endingTimestamp", "endingOffsetsByTimestamp"),
        timestamp_strategy=strategy,
        min_partitions=_int(options, "minPartitions", 1),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        include_headers=_bool(options, "includeHeaders", False),
        max_offsets_per_trigger=_int(options, "maxOffsetsPerTrigger", 1),
        poll_timeout_ms=_int(options, "kafkaConsumer.pollTimeoutMs", 1) or 120_000,
        formats=column_formats(options, subscription.topics[0] if len(subscription.topics) == 1
                               else None, reading=True),
    )


@dataclass(frozen=True)
class WriteOptions:
    client: dict[str, str]
    topic: str | None
    exactly_once: bool = False
    # Tasks' transactional ids are <prefix>-<task partition id>.
    transactional_id_prefix: str = ""
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    # The commit log's home (a streaming query's checkpoint) and, for a foreachBatch write,
    # the micro-batch being written.
    checkpoint_location: str | None = None
    batch_id: int | None = None
    formats: tuple[ColumnFormat, ...] = ()


def _prefix_of(checkpoint_location: str) -> str:
    """The transactional id prefix of a query: the same after every restart from its
    checkpoint, different for every other query."""
    import hashlib
    import os

    where = (checkpoint_location if "://" in checkpoint_location
             else os.path.abspath(checkpoint_location.removeprefix("file:")))
    return "odradek-spark-" + hashlib.sha256(where.encode()).hexdigest()[:16]


def parse_write_options(options: Mapping[str, str], streaming: bool = False) -> WriteOptions:
    _check_names(options, _STREAM_WRITE_OPTIONS if streaming else _WRITE_OPTIONS)
    topic = _get(options, "topic")
    client = client_config(options)
    if "transactional.id" in client:
        raise OdradekOptionError("option kafka.transactional.id is not supported: the sink "
                                 "names its tasks' transactions (see transactionalIdPrefix)")
    guarantee = (_get(options, "deliveryGuarantee") or "exactly-once").strip().lower()
    if guarantee not in ("exactly-once", "at-least-once"):
        raise OdradekOptionError("option deliveryGuarantee must be exactly-once or "
                                 f"at-least-once, not {guarantee!r}")
    checkpoint = _get(options, "checkpointLocation")
    batch_id = None if streaming else _int(options, "batchId", 0)
    prefix = _get(options, "transactionalIdPrefix")
    topic = topic.strip() if topic else None
    formats = column_formats(options, topic, reading=False)
    if guarantee == "at-least-once":
        given = [n for n in ("transactionalIdPrefix", "batchId") if _get(options, n) is not None]
        if given:
            raise OdradekOptionError(f"option {given[0]} is for deliveryGuarantee=exactly-once")
        return WriteOptions(client=client, topic=topic, formats=formats)
    if client.get("enable.idempotence", "true").lower() == "false":
        raise OdradekOptionError("deliveryGuarantee=exactly-once needs the idempotent "
                                 "producer: remove kafka.enable.idempotence=false")
    if streaming and checkpoint is None:
        raise OdradekOptionError(
            "deliveryGuarantee=exactly-once needs the query's checkpointLocation option, "
            "where the sink keeps its commit log (or set deliveryGuarantee=at-least-once)")
    if not streaming and (checkpoint is None) != (batch_id is None):
        raise OdradekOptionError(
            "a foreachBatch write is exactly once with both checkpointLocation (the query's) "
            "and batchId (foreachBatch's batch id); give both or neither")
    if prefix is None:
        prefix = (_prefix_of(checkpoint) if checkpoint is not None
                  else f"odradek-spark-{uuid.uuid4().hex[:16]}")
    elif not re.fullmatch(r"[A-Za-z0-9._-]{1,200}", prefix.strip()):
        raise OdradekOptionError("option transactionalIdPrefix may hold letters, digits, "
                                 f"'.', '_' and '-' (at most 200), not {prefix!r}")
    timeout = client.get("transaction.timeout.ms", "")
    if timeout and not timeout.isdigit():
        raise OdradekOptionError(f"option kafka.transaction.timeout.ms must be a number of "
                                 f"milliseconds, not {timeout!r}")
    return WriteOptions(
        client=client, topic=topic, exactly_once=True, formats=formats,
        transactional_id_prefix=prefix.strip(),
        transaction_timeout_ms=int(timeout) if timeout else DEFAULT_TRANSACTION_TIMEOUT_MS,
        checkpoint_location=checkpoint, batch_id=batch_id)
