"""The `odradek` data source for Spark's Python Data Source API: batch reads (writes are in
sink.py, streaming reads in stream.py)."""

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
    DataSourceReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from .data_consumer import read_range
from .options import (
    ReadOptions,
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


def _row_struct(include_headers: bool) -> StructType:
    """row_schema() as a StructType (no Spark session needed to parse it)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow_schema(include_headers))


def formatted_schema(options: ReadOptions) -> StructType:
    """The row schema with the key and/or value typed by their subjects' schemas."""
    from .registry_formats import column_field, reader_type, with_formats

    return with_formats(_row_struct(options.include_headers),
                        {f.column: column_field(f, reader_type(f)) for f in options.formats})


Decoding = dict[str, Any]  # column -> (ColumnFormat, RegisteredType): the readers' schemas


def resolve_decoding(options: ReadOptions, schema: StructType) -> Decoding:
    """On the driver, once per query: for each formatted column, the subject's version whose
    type Spark planned the query with (in `schema`). Tasks decode with it, asking the
    registry only for writer schemas they have not seen."""
    if not options.formats:
        return {}
    from .registry_formats import reader_type

    return {f.column: (f, reader_type(f, schema[f.column].dataType)) for f in options.formats}


def column_decoder(decoding: Decoding, schema: StructType
                   ) -> Callable[[pa.RecordBatch], pa.RecordBatch] | None:
    """What turns a batch's wire-format key/value into typed columns (None when both are
    binary)."""
    if not decoding:
        return None
    from pyspark.sql.pandas.types import to_arrow_schema

    from .registry_formats import ColumnDecoder, decode_batch

    decoders = {column: ColumnDecoder(*spec) for column, spec in decoding.items()}
    target = to_arrow_schema(schema, timezone="UTC")
    return lambda batch: decode_batch(batch, decoders, target)


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
    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.decoding = resolve_decoding(options, schema)

    def partitions(self) -> Sequence[InputPartition]:
        ranges = split_ranges(resolve_batch_ranges(self.options), self.options.min_partitions)
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):
            return   # no ranges to read: Spark plans one empty InputPartition(None)
        yield from read_batches(self.options, self.schema, self.decoding, partition.range)


def read_batches(options: ReadOptions, schema: StructType, decoding: Decoding,
                 r: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The records of one range as Arrow batches of the query's `schema`."""
    decode = column_decoder(decoding, schema)
    base = arrow_schema(options.include_headers)
    for chunk in read_range(options, r):
        batch = to_record_batch(chunk, base, options.include_headers)
        yield batch if decode is None else decode(batch)


class OdradekDataSource(DataSource):
    """Topics of an Odradek (or any Kafka) cluster as a Spark data source: `odradek`."""

    @classmethod
    def name(cls) -> str:
        return "odradek"

    def schema(self) -> str | StructType:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        if any(key.lower() in ("keyformat", "valueformat") for key in self.options):
            # Batch or streaming is not known here; the formats' options are the same.
            return formatted_schema(parse_read_options(self.options, streaming=False))
        return row_schema(include)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse_read_options(self.options, streaming=False)
        return OdradekBatchReader(options, schema)

    def streamReader(self, schema: StructType) -> Any:
        from .stream import OdradekStreamReader

        return OdradekStreamReader(parse_read_options(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        from .sink import OdradekBatchWriter, check_write_schema

        options = parse_write_options(self.options)
        check_write_schema(schema, options)
        return OdradekBatchWriter(options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        from .sink import OdradekStreamWriter, check_write_schema

        options = parse_write_options(self.options, streaming=True)
        check_write_schema(schema, options)
        return OdradekStreamWriter(options, schema)
