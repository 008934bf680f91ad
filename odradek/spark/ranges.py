"""Offset ranges: resolved on the driver from the options and the broker's offsets, then
read on executors (see data_consumer.py)."""

from __future__ import annotations

from dataclasses import dataclass

from .offset_reader import OffsetReader, TopicPartitionKey
from .options import EARLIEST, LATEST, OdradekOptionError, OffsetSpec, ReadOptions, TimestampSpec

Marks = dict[TopicPartitionKey, tuple[int, int]]


class OdradekDataLossError(RuntimeError):
    """Records a query needed are gone (deleted by retention) and failOnDataLoss is true."""


@dataclass(frozen=True)
class OffsetRange:
    """Records [start, end) of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def _check_named_partitions(name: str, spec: OffsetSpec | TimestampSpec | None,
                            partitions: list[TopicPartitionKey], every: bool) -> None:
    if not isinstance(spec, dict):
        return
    named = {(t, int(p)) for t, ps in spec.items() for p in ps}
    unknown = named - set(partitions)
    if unknown:
        raise OdradekOptionError(f"option {name} names partitions the query does not read: "
                                 f"{sorted(unknown)}")
    missing = set(partitions) - named
    if every and missing:
        # As Spark's Kafka source: a timestamp per partition means one for every partition.
        raise OdradekOptionError(f"option {name} must give every partition the query reads; "
                                 f"missing: {sorted(missing)}")


def _times(spec: TimestampSpec, partitions: list[TopicPartitionKey]) -> dict[TopicPartitionKey,
                                                                             int]:
    if isinstance(spec, int):
        return dict.fromkeys(partitions, spec)
    return {(t, p): spec[t][str(p)] for t, p in partitions}


def _by_spec(spec: OffsetSpec, tp: TopicPartitionKey, marks: Marks, default: int) -> int:
    wanted = ((EARLIEST if spec == "earliest" else LATEST) if isinstance(spec, str)
              else spec.get(tp[0], {}).get(str(tp[1]), default))
    low, high = marks[tp]
    return low if wanted == EARLIEST else high if wanted == LATEST else wanted


def starting_offsets(reader: OffsetReader, options: ReadOptions,
                     partitions: list[TopicPartitionKey], marks: Marks,
                     default: int) -> dict[TopicPartitionKey, int]:
    """Where a query starts in each partition: startingTimestamp, then
    startingOffsetsByTimestamp, then startingOffsets (Spark's order of precedence)."""
    if options.starting_by_time is None:
        _check_named_partitions("startingOffsets", options.starting, partitions, every=False)
        return {tp: _by_spec(options.starting, tp, marks, default) for tp in partitions}
    _check_named_partitions("startingOffsetsByTimestamp", options.starting_by_time, partitions,
                            every=True)
    times = _times(options.starting_by_time, partitions)
    found = reader.offsets_for_times(times)
    starts: dict[TopicPartitionKey, int] = {}
    for tp, offset in found.items():
        if offset is None:
            if options.timestamp_strategy != "latest":
                raise OdradekOptionError(
                    f"no record of {tp[0]}-{tp[1]} has a timestamp at or after {times[tp]}; "
                    "set startingOffsetsByTimestampStrategy=latest to start at the latest "
                    "offset instead")
            offset = marks[tp][1]
        starts[tp] = offset
    return starts


def ending_offsets(reader: OffsetReader, options: ReadOptions,
                   partitions: list[TopicPartitionKey], marks: Marks) -> dict[TopicPartitionKey,
                                                                               int]:
    """Where a batch query ends: endingTimestamp, endingOffsetsByTimestamp, endingOffsets.
    A timestamp later than every record ends at the latest offset."""
    if options.ending_by_time is None:
        _check_named_partitions("endingOffsets", options.ending, partitions, every=False)
        return {tp: _by_spec(options.ending, tp, marks, LATEST) for tp in partitions}
    _check_named_partitions("endingOffsetsByTimestamp", options.ending_by_time, partitions,
                            every=True)
    found = reader.offsets_for_times(_times(options.ending_by_time, partitions))
    return {tp: marks[tp][1] if offset is None else offset for tp, offset in found.items()}


def resolve_batch_ranges(options: ReadOptions) -> list[OffsetRange]:
    """Exact [start, end) per partition for a batch query, checked against the broker."""
    reader = OffsetReader(options)
    partitions = reader.partitions(options.subscription)
    marks = reader.watermarks(partitions)
    starts = starting_offsets(reader, options, partitions, marks, EARLIEST)
    ends = ending_offsets(reader, options, partitions, marks)
    ranges: list[OffsetRange] = []
    for tp in partitions:
        (topic, partition), (low, high) = tp, marks[tp]
        start, end = starts[tp], ends[tp]
        if end < start:
            raise OdradekOptionError(
                f"ending offset {end} of {topic}-{partition} is before its starting offset "
                f"{start}")
        if end > high:
            raise OdradekOptionError(
                f"ending offset {end} of {topic}-{partition} is beyond its latest offset {high}")
        if start < low:
            if options.fail_on_data_loss:
                raise OdradekDataLossError(
                    f"offsets {start}..{low - 1} of {topic}-{partition} were deleted (the "
                    f"earliest offset is now {low}); set failOnDataLoss=false to skip them")
            start = min(low, end)
        ranges.append(OffsetRange(topic, partition, start, end))
    return ranges


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Splits large ranges so there are at least min_partitions pieces, as Spark's Kafka
    source does: each range gets a share of the pieces in proportion to its size."""
    nonempty = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in nonempty)
    if not min_partitions or min_partitions <= len(nonempty) or total == 0:
        return nonempty
    pieces: list[OffsetRange] = []
    for r in nonempty:
        parts = max(1, min(r.size, round(r.size * min_partitions / total)))
        for i in range(parts):
            start = r.start + r.size * i // parts
            end = r.start + r.size * (i + 1) // parts
            if end > start:
                pieces.append(OffsetRange(r.topic, r.partition, start, end))
    return pieces
