"""The streaming reader: Structured Streaming micro-batches over topics.

Offsets are JSON objects like Spark's Kafka source writes them, {"topic": {"0": 42}}: the
next offset to read in each partition. Spark checkpoints them, so a query restarted from its
checkpoint resumes exactly where it stopped. Partitions that appear while the query runs are
read from their earliest offset.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import (
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from .offset_reader import OffsetReader
from .options import LATEST, ReadOptions
from .ranges import Marks, OdradekDataLossError, OffsetRange, split_ranges, starting_offsets
from .source import RangePartition, read_batches, resolve_decoding

Offsets = dict[str, dict[str, int]]


def _flat(offsets: Offsets) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, ps in offsets.items() for p, o in ps.items()}


def _nested(flat: dict[tuple[str, int], int]) -> Offsets:
    out: Offsets = {}
    for (t, p), o in sorted(flat.items()):
        out.setdefault(t, {})[str(p)] = o
    return out


def rate_limit(start: dict[tuple[str, int], int], latest: dict[tuple[str, int], int],
               max_rows: int) -> dict[tuple[str, int], int]:
    """Advances each partition towards latest by at most max_rows in all, in proportion to
    each partition's lag (as Spark's Kafka source does for maxOffsetsPerTrigger)."""
    lags = {tp: max(0, latest[tp] - start[tp]) for tp in latest}
    total = sum(lags.values())
    if total <= max_rows:
        return dict(latest)
    shares = {tp: lag * max_rows // total for tp, lag in lags.items()}
    left = max_rows - sum(shares.values())
    for tp in sorted(lags, key=lambda tp: lags[tp] - shares[tp], reverse=True):
        if left <= 0:
            break
        if shares[tp] < lags[tp]:
            shares[tp] += 1
            left -= 1
    return {tp: start[tp] + shares[tp] if latest[tp] >= start[tp] else latest[tp]
            for tp in latest}


class OdradekStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.decoding = resolve_decoding(options, schema)  # the query's schemas, kept
        self.target: dict[tuple[str, int], int] | None = None
        self._offset_reader: OffsetReader | None = None
        self._initial: Offsets | None = None

    def __getstate__(self) -> dict[str, object]:
        # Executors get a pickled copy for read(): without the driver's AdminClient.
        return {**self.__dict__, "_offset_reader": None}

    @property
    def _reader(self) -> OffsetReader:
        # The driver calls this instance for every micro-batch: one AdminClient for all.
        if self._offset_reader is None:
            self._offset_reader = OffsetReader(self.options)
        return self._offset_reader

    def _marks(self) -> Marks:
        # Subscribed topics that do not exist yet are waited for; deleted ones drop out.
        reader = self._reader
        return reader.watermarks(reader.partitions(self.options.subscription, missing_ok=True),
                                 missing_ok=True)

    def initialOffset(self) -> Offsets:
        # Spark asks more than once (for the first micro-batch's end and again to plan it):
        # "latest" must mean the same offsets each time, or the first batch's start would be
        # past its end while producers write.
        if self._initial is None:
            reader = self._reader
            marks = reader.watermarks(
                reader.partitions(self.options.subscription, missing_ok=True), missing_ok=True)
            self._initial = _nested(starting_offsets(reader, self.options, sorted(marks), marks,
                                                     LATEST))
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = {tp: high for tp, (_low, high) in self._marks().items()}

    def _lost(self, message: str) -> None:
        if self.options.fail_on_data_loss:
            raise OdradekDataLossError(f"{message}; set failOnDataLoss=false to go on without "
                                       "them")

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        marks = self._marks()
        begin = _flat(start)
        gone = sorted(set(begin) - set(marks))
        if gone:
            self._lost(f"partitions {gone} were deleted while the query read them")
        begin = {tp: offset for tp, offset in begin.items() if tp in marks}
        for tp, (low, _high) in marks.items():
            begin.setdefault(tp, low)   # a new partition: from its earliest offset
        latest = dict(begin)
        for tp, (_low, high) in marks.items():
            cap = high if self.target is None else min(high, self.target.get(tp, begin[tp]))
            # An end below the start means the topic was deleted and created again:
            # partitions() decides what to do with it.
            latest[tp] = cap if high < begin[tp] else max(begin[tp], cap)
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(begin, latest, limit.max_rows)
        return _nested(latest)

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        begin, finish = _flat(start), _flat(end)
        marks = self._marks()
        ranges = []
        for tp, stop in sorted(finish.items()):
            if tp not in marks:
                self._lost(f"partition {tp[0]}-{tp[1]} was deleted before the query read it")
                continue
            low, _high = marks[tp]
            first = begin.get(tp, low)
            if first > stop:
                self._lost(f"the offsets of {tp[0]}-{tp[1]} went back from {first} to {stop} "
                           "(was the topic deleted and created again?)")
                first = low
            if first < low:
                self._lost(f"offsets {first}..{low - 1} of {tp[0]}-{tp[1]} were deleted before "
                           "the query read them")
                first = min(low, stop)
            if stop > first:
                ranges.append(OffsetRange(tp[0], tp[1], first, stop))
        return [RangePartition(r) for r in split_ranges(ranges, self.options.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):
            return   # no ranges to read: Spark plans one empty InputPartition(None)
        yield from read_batches(self.options, self.schema, self.decoding, partition.range)

    def commit(self, end: Offsets) -> None:
        # Spark checkpoints offsets itself; nothing is committed to the broker.
        return None
