"""The `odradek` data source for Spark's Python Data Source API: batch reads and writes."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import methodcaller
from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from .data_consumer import read_range
from .options import (
    OdradekOptionError,
    ReadOptions,
    WriteOptions,
    parse_read_options,
    parse_write_options,
)
from .ranges import OffsetRange, resolve_batch_ranges, split_ranges

BASE_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
               "timestamp timestamp, timestampType int")
HEADERS_FIELD = "headers array<struct<key: string, value: binary>>"

_HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def row_schema(include_headers: bool) -> str:
    return f"{BASE_SCHEMA}, {HEADERS_FIELD}" if include_headers else BASE_SCHEMA


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema Spark derives from row_schema(): read() must yield exactly this."""
    fields = [
        pa.field("key", pa.binary()), pa.field("value", pa.binary()),
        pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()), pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", _HEADER_TYPE))
    return pa.schema(fields)


_TIMESTAMP_US = pa.timestamp("us", tz="UTC")
_Getters = tuple[Callable[[Any], Any], ...]
_MESSAGE_GETTERS: list[_Getters] = []
_NAMES = ("key", "value", "topic", "partition", "offset", "timestamp", "headers")
# Any object with the methods of a confluent-kafka Message (a test's stand-in).
_DUCK_GETTERS: _Getters = tuple(methodcaller(name) for name in _NAMES)


def _message_getters() -> _Getters:
    """The unbound methods of confluent_kafka.Message: map() calls them without a Python
    frame per record."""
    if not _MESSAGE_GETTERS:
        from confluent_kafka import Message

        _MESSAGE_GETTERS.append(tuple(getattr(Message, name) for name in _NAMES))
    return _MESSAGE_GETTERS[0]


def _same_or_array(values: list[Any], arrow_type: pa.DataType) -> pa.Array:
    """values as an Arrow array; one value repeated (a chunk's topic) without converting each."""
    if values.count(values[0]) == len(values):
        return pa.repeat(pa.scalar(values[0], arrow_type), len(values))
    return pa.array(values, arrow_type)


def _columns(messages: Sequence[Any], getters: _Getters,
             include_headers: bool) -> list[pa.Array]:
    key, value, topic, partition, offset, timestamp, headers = getters
    n = len(messages)
    # (type, stamp) pairs flattened: even slots the types, odd ones the milliseconds.
    pairs = np.fromiter(chain.from_iterable(map(timestamp, messages)), np.int64, count=2 * n)
    kinds, stamps = pairs[0::2], pairs[1::2] * 1000
    if (kinds == 1).all():  # every record has a CreateTime: the usual case
        stamp_array = pa.array(stamps)
        kind_array = pa.array(np.zeros(n, np.int32))
    else:
        # confluent-kafka: 0 no timestamp (null), 1 CreateTime, 2 LogAppendTime; Spark's
        # Kafka source: 0 CreateTime, 1 LogAppendTime.
        stamp_array = pa.array(stamps, mask=kinds == 0)
        kind_array = pa.array((kinds == 2).astype(np.int32))
    arrays = [
        pa.array(map(key, messages), pa.binary(), size=n),
        pa.array(map(value, messages), pa.binary(), size=n),
        _same_or_array(list(map(topic, messages)), pa.string()),
        pa.array(np.fromiter(map(partition, messages), np.int32, count=n)),
        pa.array(np.fromiter(map(offset, messages), np.int64, count=n)),
        stamp_array.view(_TIMESTAMP_US),
        kind_array,
    ]
    if include_headers:
        arrays.append(_headers_array([h or () for h in map(headers, messages)]))
    return arrays


def _headers_array(per_record: list[Any]) -> pa.Array:
    """The headers column from each record's (key, value) tuples: offsets and two flat
    columns, not one nested Python value per record (most records have none)."""
    offsets = np.zeros(len(per_record) + 1, np.int32)
    np.cumsum(np.fromiter(map(len, per_record), np.int32, count=len(per_record)),
              out=offsets[1:])
    pairs = list(chain.from_iterable(per_record))
    keys = pa.array([k for k, _ in pairs], pa.string())
    values = pa.array([v for _, v in pairs], pa.binary())
    items = pa.StructArray.from_arrays([keys, values], fields=list(_HEADER_TYPE.value_type))
    return pa.ListArray.from_arrays(pa.array(offsets), items, type=_HEADER_TYPE)


def to_record_batch(messages: Sequence[Any], schema: pa.Schema,
                    include_headers: bool) -> pa.RecordBatch:
    """The messages as one Arrow batch of `schema`, built column by column: each Message
    method is mapped over the chunk in C and the columns become Arrow arrays without a Python
    loop per record (see "Spark data source" in docs/performance.md)."""
    if not messages:
        return pa.RecordBatch.from_pylist([], schema=schema)
    try:
        arrays = _columns(messages, _message_getters(), include_headers)
    except TypeError:
        # Not confluent-kafka Messages: the same methods, called by name.
        arrays = _columns(messages, _DUCK_GETTERS, include_headers)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


@dataclass
class RangePartition(InputPartition):
    """One input partition: exactly the records [start, end) of a topic partition."""

    range: OffsetRange


class OdradekBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        ranges = split_ranges(resolve_batch_ranges(self.options), self.options.min_partitions)
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):
            return   # no ranges to read: Spark plans one empty InputPartition(None)
        schema = arrow_schema(self.options.include_headers)
        for chunk in read_range(self.options, partition.range):
            yield to_record_batch(chunk, schema, self.options.include_headers)


@dataclass
class WriteResult(WriterCommitMessage):
    partition_id: int
    records: int


_WRITE_COLUMNS = {"key", "value", "topic", "partition", "headers", "timestamp"}


def check_write_schema(schema: StructType, options: WriteOptions) -> None:
    names = {f.name.lower(): f for f in schema.fields}
    unknown = sorted(set(names) - _WRITE_COLUMNS)
    if unknown:
        raise OdradekOptionError(f"cannot write columns {unknown}: the odradek sink takes key, "
                                 "value, topic, partition, headers and timestamp")
    if "value" not in names:
        raise OdradekOptionError("the odradek sink needs a value column")
    for column in ("key", "value"):
        if column in names and names[column].dataType.typeName() not in ("binary", "string"):
            raise OdradekOptionError(f"column {column} must be binary or string, not "
                                     f"{names[column].dataType.simpleString()}")
    if "topic" in names and names["topic"].dataType.typeName() != "string":
        raise OdradekOptionError("column topic must be a string")
    if "partition" in names and names["partition"].dataType.typeName() != "integer":
        raise OdradekOptionError("column partition must be an int")
    if "timestamp" in names and names["timestamp"].dataType.typeName() != "timestamp":
        raise OdradekOptionError("column timestamp must be a timestamp")
    if "headers" in names:
        text = names["headers"].dataType.simpleString()
        if text not in ("array<struct<key:string,value:binary>>",
                        "array<struct<key:string,value:string>>"):
            raise OdradekOptionError(
                f"column headers must be array<struct<key string, value binary>>, not {text}")
    if options.topic is None and "topic" not in names:
        raise OdradekOptionError("give the topic: a topic option or a topic column")


def _bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


def _column(array: pa.Array) -> list[Any]:
    if pa.types.is_timestamp(array.type):
        # The record's CreateTime: milliseconds since the epoch.
        micros = array.cast(pa.timestamp("us", tz=array.type.tz)).cast(pa.int64())
        return [None if v is None else v // 1000 for v in micros.to_pylist()]
    return array.to_pylist()


# Idle producers of this Python worker by settings: a worker runs one task at a time and
# lives across tasks, so the next task reuses the connections and the producer id (a new
# idempotent producer's first flush takes 50-500 ms; Spark's Kafka sink caches them too).
_PRODUCERS: dict[str, Any] = {}


def write_task(options: WriteOptions, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
    """One write task, batch or micro-batch: sends its rows with an idempotent producer
    (acks=all), waits for every acknowledgement and fails with the broker's error if any
    delivery failed. Returns the task's partition id and row count."""
    import json

    from confluent_kafka import Producer
    from pyspark import TaskContext

    context = TaskContext.get()
    partition_id = context.partitionId() if context is not None else 0
    errors: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    settings = {"acks": "all", **options.client, "enable.idempotence": True}
    key = json.dumps(settings, sort_keys=True)
    producer = _PRODUCERS.pop(key, None) or Producer(settings)
    count = 0
    for batch in iterator:
        columns = {name.lower(): _column(batch.column(i))
                   for i, name in enumerate(batch.schema.names)}
        n = batch.num_rows
        for i in range(n):
            topic = options.topic or columns["topic"][i]
            if topic is None:
                raise ValueError(f"row {count + i} of task {partition_id} has no topic")
            kwargs: dict[str, Any] = {"value": _bytes(columns["value"][i])}
            if "key" in columns:
                kwargs["key"] = _bytes(columns["key"][i])
            if "partition" in columns and columns["partition"][i] is not None:
                kwargs["partition"] = columns["partition"][i]
            if "timestamp" in columns and columns["timestamp"][i] is not None:
                kwargs["timestamp"] = columns["timestamp"][i]
            if "headers" in columns and columns["headers"][i]:
                kwargs["headers"] = [(h["key"], _bytes(h["value"]))
                                     for h in columns["headers"][i]]
            while True:
                try:
                    producer.produce(topic, on_delivery=delivered, **kwargs)
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
            if errors:
                break
        count += n
        if errors:
            break
    remaining = producer.flush(120)
    if errors or remaining:
        detail = errors[0] if errors else f"{remaining} records unacknowledged"
        raise RuntimeError(f"odradek sink task {partition_id} failed after {count} rows "
                           f"({len(errors)} delivery errors): {detail}")
    _PRODUCERS[key] = producer   # only a producer that delivered everything is kept
    return WriteResult(partition_id, count)


class OdradekBatchWriter(DataSourceArrowWriter):
    """Each task writes its rows with an idempotent producer (kept by its Python worker for
    the next task) and waits for every acknowledgement; a failed delivery fails that task
    with the broker's error."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        return write_task(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        # Records are visible once acknowledged: there is nothing left to publish.
        return None

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # Records acknowledged before the failure stay in their topics (at-least-once).
        return None


class OdradekDataSource(DataSource):
    """Topics of an Odradek (or any Kafka) cluster as a Spark data source: `odradek`."""

    @classmethod
    def name(cls) -> str:
        return "odradek"

    def schema(self) -> str:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return row_schema(include)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse_read_options(self.options, streaming=False)
        return OdradekBatchReader(options)

    def streamReader(self, schema: StructType) -> Any:
        from .stream import OdradekStreamReader

        return OdradekStreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> OdradekBatchWriter:
        options = parse_write_options(self.options)
        check_write_schema(schema, options)
        return OdradekBatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        from .stream import OdradekStreamWriter

        options = parse_write_options(self.options, streaming=True)
        check_write_schema(schema, options)
        return OdradekStreamWriter(options)
