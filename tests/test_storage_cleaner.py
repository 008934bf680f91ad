"""Log compaction on real files: what survives a round (latest value per key, offsets,
tombstones until their delete horizon), when a log is cleanable (dirty ratio, compaction
lags), how batches are rewritten, crash safety of the swap, the cleaner checkpoint and
threads, a model-based test, librdkafka reading compacted batches, and transactions
(aborted records, markers and their delete horizon, producers' last batches, .txnindex)."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.protocol.records import (
    LOG_APPEND_TIME,
    ControlRecordType,
    Record,
    RecordBatchHeader,
    SimpleRecord,
    build_control_batch,
    build_record_batch,
    decode_control_record,
    decode_records,
    iter_batch_headers,
    validate_batch,
)
from odradek.storage import cleaner as cleaner_module
from odradek.storage.checkpoints import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from odradek.storage.cleaner import (
    Cleaner,
    CleanerConfig,
    CleaningAbortedError,
    LogCleaner,
    OffsetMap,
    cleanable_offsets,
    log_to_clean,
    rebuild_batch,
)
from odradek.storage.config import LogConfig
from odradek.storage.index import _Index
from odradek.storage.log import Log
from odradek.storage.log_validator import AppendOrigin
from odradek.storage.segment import CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX, LogSegment

T0 = 1_700_000_000_000
TOPIC_DIR = "events-0"


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def config(**props: str | int | float) -> LogConfig:
    settings_ = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01}
    settings_.update({k.replace("_", "."): v for k, v in props.items()})
    return LogConfig.from_properties(settings_)


def open_log(directory: Path, clock: Clock, **props: str | int | float) -> Log:
    return Log.open(directory / TOPIC_DIR, config(**props), clock=clock)


def cleaner_for(log: Log | Callable[[], Log], clock: Clock, **cfg: int) -> LogCleaner:
    current = log if callable(log) else (lambda: log)
    return LogCleaner(lambda: [current()], config=CleanerConfig(**cfg), clock=clock)


def put(log: Log, *items: tuple[bytes | None, bytes | None], ts: int | None = None,
        **batch_args: object) -> int:
    """Appends one batch of (key, value) records; returns its first offset."""
    ts = log.clock() if ts is None else ts
    records = [SimpleRecord(k, v, (), ts) for k, v in items]
    if any(k is None for k, _ in items):
        # A leader refuses keyless records in a compacted topic; replicated (or older) data
        # may still hold them, and the cleaner must keep them.
        batch = build_record_batch(records, base_offset=log.log_end_offset, **batch_args)
        return log.append_as_follower(bytearray(batch)).first_offset
    batch = build_record_batch(records, **batch_args)
    return log.append_as_leader(bytearray(batch)).first_offset


Row = tuple[int, bytes | None, bytes | None]


def batches_of(log: Log) -> Iterator[tuple[RecordBatchHeader, list[Record]]]:
    """Every batch of every segment, straight from the files."""
    for segment in log.segments():
        data = segment.pread(0, segment.size)
        for pos, header in iter_batch_headers(data):
            validate_batch(data, pos, header, from_client=False)
            yield header, decode_records(data, pos, header)


def read_all(log: Log) -> list[Row]:
    """What a consumer reads from the log start, fetch after fetch."""
    rows: list[Row] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).read()
        assert data, f"nothing to read at {offset} below the log end {log.log_end_offset}"
        for pos, header in iter_batch_headers(data):
            validate_batch(data, pos, header, from_client=False)
            rows += [(r.offset, r.key, r.value) for r in decode_records(data, pos, header)
                     if r.offset >= offset]
            next_offset = header.next_offset
        offset = next_offset
    return rows


def assert_every_offset_readable(log: Log, rows: list[Row]) -> None:
    """The indexes lead a read at any surviving offset to the batch holding it, and a
    read at a removed offset to the next batch after it."""
    surviving = {o for o, _, _ in rows}
    for offset in range(log.log_start_offset, log.log_end_offset):
        data = log.read(offset, 1).read()
        header = RecordBatchHeader.parse(data)
        assert header.last_offset >= offset
        if offset in surviving:
            assert header.base_offset <= offset
            assert offset in {r.offset for r in decode_records(data, 0, header)}


def no_leftovers(directory: Path) -> None:
    names = os.listdir(directory)
    assert not [n for n in names if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX))], names


def crash(log: Log) -> None:
    """Drops the log's file handles without flushing or trimming anything."""
    for segment in log.segments() + [s for _, s in log._pending_deletions]:
        segment.close_handles()


def reopened(log: Log, clock: Clock, *, clean: bool) -> Log:
    if clean:
        log.close()
    else:
        crash(log)
    return Log.open(log.directory, log.config, clock=clock, clean_shutdown=clean,
                    log_start_offset=log.log_start_offset)


# ---- what a round keeps ----------------------------------------------------------------


def test_keeps_the_latest_value_of_each_key_at_its_offset(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, segment_bytes=700, index_interval_bytes=100)
    history: dict[int, tuple[bytes, bytes]] = {}
    for i in range(240):
        clock.now += 1
        items = [(f"k{(i * 3 + j) % 11}".encode(), f"v{i}.{j}".encode()) for j in range(i % 3 + 1)]
        first = put(log, *items)
        history.update({first + j: item for j, item in enumerate(items)})
    last = put(log, (b"k0", b"in the active segment"))
    history[last] = (b"k0", b"in the active segment")
    active = log.active_segment
    active_bytes = active.pread(0, active.size)
    segments_before = len(log.segments())
    assert segments_before > 10
    before = read_all(log)

    cleaner = cleaner_for(log, clock)
    result = cleaner.clean_log(log)
    assert result is not None and result.end_offset == active.base_offset
    assert result.batches_rebuilt > 0  # batches that kept some of their records

    rows = read_all(log)
    upper = active.base_offset
    expected_clean = sorted({
        max(o for o, (k, _) in history.items() if k == key and o < upper)
        for key in {k for k, _ in history.values()}
    })
    assert [o for o, _, _ in rows if o < upper] == expected_clean
    for offset, key, value in rows:  # offsets and values as they were written
        assert (offset, key, value) in before
    assert [r for r in rows if r[0] >= upper] == [r for r in before if r[0] >= upper]
    # The active segment is the same object, with the same bytes.
    assert log.active_segment is active and active.pread(0, active.size) == active_bytes
    assert all(s.size <= 700 for s in log.segments())  # merged within segment.bytes
    assert_every_offset_readable(log, rows)
    no_leftovers(log.directory)
    for segment in log.segments():
        segment.check_not_corrupt()

    # The next round takes the former active segment in, and merges the small segments.
    log.roll()
    cleaner.clean_log(log)
    assert len(log.segments()) < segments_before / 3
    latest = {key: (offset, key, value) for offset, (key, value) in sorted(history.items())}
    rows = read_all(log)
    assert rows == sorted(latest.values())
    assert_every_offset_readable(log, rows)

    # Reopened after a clean shutdown, and after a crash (every segment recovered).
    log = reopened(log, clock, clean=True)
    assert read_all(log) == rows
    log = reopened(log, clock, clean=False)
    assert read_all(log) == rows
    assert_every_offset_readable(log, rows)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4], ids=["none", "gzip", "snappy", "lz4", "zstd"])
def test_a_partly_removed_batch_keeps_its_fields(tmp_path: Path, codec: int) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock)
    records = [
        SimpleRecord(b"a", b"a1", [("h", b"1")], T0 + 5),
        SimpleRecord(b"b", b"b1", [], T0 + 9),  # the largest timestamp, removed
        SimpleRecord(b"a", b"a2", [("h", None)], T0 + 7),
        SimpleRecord(b"c", b"c1", [], T0 + 1),
    ]
    batch = bytearray(build_record_batch(
        records, compression=codec, producer_id=42, producer_epoch=3, base_sequence=10,
        partition_leader_epoch=5,
    ))
    log.append_as_leader(batch)
    put(log, (b"b", b"b2"), ts=T0 + 20)
    log.roll()
    cleaner_for(log, clock).clean_log(log)

    (header, kept), (_, last) = list(batches_of(log))
    original = RecordBatchHeader.parse(batch)
    assert (header.base_offset, header.last_offset_delta) == (0, 3)  # offsets stay put
    assert header.records_count == 2
    assert header.compression == codec
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 10)
    assert header.partition_leader_epoch == 5
    assert header.base_timestamp == original.base_timestamp
    assert header.max_timestamp == T0 + 7  # recomputed from what is left
    assert not header.has_delete_horizon
    assert [(r.offset, r.offset_delta, r.key, r.value, r.headers, r.timestamp) for r in kept] == [
        (2, 2, b"a", b"a2", [("h", None)], T0 + 7),
        (3, 3, b"c", b"c1", [], T0 + 1),
    ]
    assert [(r.offset, r.value) for r in last] == [(4, b"b2")]


def test_log_append_time_batches_keep_their_timestamp(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, message_timestamp_type="LogAppendTime")
    put(log, (b"a", b"1"), (b"b", b"1"), ts=T0 - 50)
    clock.now += 10
    put(log, (b"a", b"2"))
    log.roll()
    cleaner_for(log, clock).clean_log(log)
    (header, kept), _ = list(batches_of(log))
    assert header.timestamp_type == LOG_APPEND_TIME
    assert header.max_timestamp == T0
    assert [(r.key, r.timestamp) for r in kept] == [(b"b", T0)]


def test_control_batches_and_keyless_records_are_kept(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock)
    put(log, (b"k", b"1"), (None, b"no key"))
    marker = bytearray(build_control_batch(True, 7, 0, 1, T0, base_offset=log.log_end_offset))
    log.append_as_follower(marker)
    put(log, (b"k", b"2"), (None, b"no key either"))
    log.roll()
    cleaner_for(log, clock).clean_log(log)
    batches = list(batches_of(log))
    assert [(r.offset, r.key, r.value) for h, rs in batches if not h.is_control for r in rs
            ] == [(1, None, b"no key"), (3, b"k", b"2"), (4, None, b"no key either")]
    control = [(h, rs) for h, rs in batches if h.is_control]
    assert len(control) == 1 and control[0][0].base_offset == 2
    # A marker of a transaction without data here is kept, stamped with its delete
    # horizon (see the transactional tests at the end); its record is as it was.
    original = RecordBatchHeader.parse(marker)
    assert control[0][0].delete_horizon_ms == clock() + 86_400_000
    assert [(r.key, r.value) for r in control[0][1]] == [
        (r.key, r.value) for r in decode_records(marker, 0, original)]


def test_an_emptied_last_batch_keeps_the_segment_end(tmp_path: Path) -> None:
    """The last batch of a group of segments, when all of it goes, stays as an empty
    batch: the cleaned segment ends where the segments it replaces ended."""
    clock = Clock()
    log = open_log(tmp_path, clock, segment_bytes=200)  # the two segments do not merge
    put(log, (b"a", b"1"))
    put(log, (b"b", b"1"))
    log.roll()
    put(log, (b"b", b"2"))
    put(log, (b"a", b"2"))
    log.roll()
    result = cleaner_for(log, clock).clean_log(log)
    assert result is not None and result.empty_batches_written == 1
    first, second, _active = log.segments()
    headers = [h for h, _ in batches_of(log)]
    assert [(h.base_offset, h.last_offset, h.records_count) for h in headers] == [
        (1, 1, 0), (2, 2, 1), (3, 3, 1)]
    assert first.next_offset() == second.base_offset == 2
    assert read_all(log) == [(2, b"b", b"2"), (3, b"a", b"2")]
    assert log.read(0, 100).read()[:8] == (1).to_bytes(8, "big")  # the empty batch
    # Closed with an active segment that never got a byte: the log end survives.
    log = reopened(log, clock, clean=True)
    assert log.log_end_offset == 4
    assert read_all(log) == [(2, b"b", b"2"), (3, b"a", b"2")]


def test_segments_merge_within_segment_bytes(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, segment_bytes=1000)
    for i in range(60):
        put(log, (f"k{i % 4}".encode(), b"x" * 20))
        if i % 3 == 2:
            log.roll()
    log.roll()
    cleaner_for(log, clock).clean_log(log)
    segments = log.segments()
    assert len(segments) <= 3
    assert all(s.size <= 1000 for s in segments)
    assert [k for _, k, _ in read_all(log)] == [b"k0", b"k1", b"k2", b"k3"]


# ---- tombstones ------------------------------------------------------------------------


def test_tombstones_stay_until_their_delete_horizon(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, delete_retention_ms=1000)
    put(log, (b"a", b"1"), (b"b", b"1"))
    clock.now += 1
    put(log, (b"a", None), (b"c", b"1"))
    log.roll()
    cleaner = cleaner_for(log, clock)
    cleaner.clean_log(log, T0 + 5)
    assert read_all(log) == [(1, b"b", b"1"), (2, b"a", None), (3, b"c", b"1")]
    header, records = list(batches_of(log))[1]
    assert header.has_delete_horizon and header.delete_horizon_ms == T0 + 5 + 1000
    assert [r.timestamp for r in records] == [T0 + 1, T0 + 1]  # rebased, not changed

    # Not dirty and no horizon passed: nothing to do; a forced round keeps the tombstone.
    assert cleaner.maybe_clean(T0 + 1004) is None
    cleaner.clean_log(log, T0 + 1004)
    assert (2, b"a", None) in read_all(log)
    # At the horizon the cleaner picks the log up by itself and drops the tombstone.
    result = cleaner.maybe_clean(T0 + 1005)
    assert result is not None and result.tombstones_dropped == 1
    assert read_all(log) == [(1, b"b", b"1"), (3, b"c", b"1")]
    assert cleaner.maybe_clean(T0 + 100_000) is None


def test_a_tombstone_in_the_active_segment_stays(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, delete_retention_ms=0)
    put(log, (b"a", b"1"))
    log.roll()
    put(log, (b"a", None))
    cleaner = cleaner_for(log, clock)
    cleaner.clean_log(log, T0 + 10_000)
    cleaner.clean_log(log, T0 + 20_000)
    assert read_all(log) == [(0, b"a", b"1"), (1, b"a", None)]
    log.roll()
    cleaner.clean_log(log, T0 + 30_000)  # kept, with a horizon of now (0 ms)
    assert read_all(log) == [(1, b"a", None)]
    cleaner.clean_log(log, T0 + 30_000)
    assert read_all(log) == []
    assert log.log_end_offset == 2


# ---- when a log is cleanable -----------------------------------------------------------


def test_min_cleanable_dirty_ratio(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, min_cleanable_dirty_ratio=0.5)
    for i in range(20):
        put(log, (f"k{i}".encode(), b"v" * 50))
    log.roll()
    cleaner = cleaner_for(log, clock)
    assert cleaner.to_clean(log).cleanable_ratio == 1.0
    assert cleaner.maybe_clean() is not None
    assert cleaner.checkpoint(log) == 20
    for i in range(5):  # a quarter as many bytes: ratio 0.2
        put(log, (f"k{i}".encode(), b"w" * 50))
    log.roll()
    to_clean = cleaner.to_clean(log)
    assert (to_clean.first_dirty_offset, to_clean.first_uncleanable_offset) == (20, 25)
    assert 0.15 < to_clean.cleanable_ratio < 0.25
    assert cleaner.maybe_clean() is None
    for i in range(5, 25):
        put(log, (f"k{i % 20}".encode(), b"w" * 50))
    log.roll()
    assert cleaner.to_clean(log).cleanable_ratio > 0.5
    result = cleaner.maybe_clean()
    assert result is not None and result.end_offset == 45
    assert len(read_all(log)) == 20


def test_min_compaction_lag(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, min_compaction_lag_ms=10_000)
    for i in range(10):
        put(log, (b"a", f"{i}".encode()), ts=T0 + i)
    log.roll()
    for i in range(10, 20):
        put(log, (b"a", f"{i}".encode()), ts=T0 + 5000 + i)
    log.roll()
    cleaner = cleaner_for(log, clock)
    assert cleaner.to_clean(log, T0 + 9_000).first_uncleanable_offset == 0
    assert cleaner.maybe_clean(T0 + 9_000) is None
    cleaner.clean_log(log, T0 + 9_000)
    assert len(read_all(log)) == 20  # nothing was old enough
    # The first segment is old enough, the second not: only the first is compacted.
    assert cleaner.to_clean(log, T0 + 12_000).first_uncleanable_offset == 10
    assert cleaner.maybe_clean(T0 + 12_000) is not None
    assert [o for o, _, _ in read_all(log)] == [9, *range(10, 20)]
    assert cleaner.maybe_clean(T0 + 15_020) is not None
    assert read_all(log) == [(19, b"a", b"19")]


def test_max_compaction_lag_forces_a_round(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, min_cleanable_dirty_ratio=0.99,
                   max_compaction_lag_ms=60_000)
    for i in range(10):
        put(log, (f"k{i}".encode(), b"v"))
    log.roll()
    cleaner = cleaner_for(log, clock)
    cleaner.clean_log(log)
    for i in range(3):
        put(log, (f"k{i}".encode(), b"w"), ts=T0 + 1000)
    log.roll()
    assert cleaner.maybe_clean(T0 + 60_000) is None
    to_clean = cleaner.to_clean(log, T0 + 61_500)
    assert to_clean.needs_compaction_now and to_clean.compaction_delay_ms == 500
    log = reopened(log, clock, clean=True)  # the first batch's timestamp read from disk
    cleaner = cleaner_for(log, clock)
    assert cleaner.to_clean(log, T0 + 61_500).compaction_delay_ms == 500
    assert cleaner.maybe_clean(T0 + 61_500) is not None
    assert [v for _, _, v in read_all(log)].count(b"w") == 3
    assert len(read_all(log)) == 10


def test_compact_and_delete(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, cleanup_policy="compact,delete", retention_ms=10_000,
                   segment_bytes=300)
    for i in range(30):
        put(log, (f"k{i % 3}".encode(), f"old{i}".encode()), ts=T0 + i)
    log.roll()
    cleaner = cleaner_for(log, clock)
    cleaner.clean_log(log, T0 + 100)
    assert cleaner.checkpoint(log) == 30
    for i in range(30):
        put(log, (f"k{i % 5}".encode(), f"new{i}".encode()), ts=T0 + 20_000 + i)
    log.roll()
    deleted = log.delete_old_segments(T0 + 20_100)  # retention: the old segments go
    assert deleted and log.log_start_offset == 30
    cleaner.clean_log(log, T0 + 20_100)
    assert read_all(log) == [(55 + i, f"k{i}".encode(), f"new{55 + i - 30}".encode())
                             for i in range(5)]
    assert cleaner.checkpoint(log) == 60
    # The log start passing the checkpoint (DeleteRecords) restarts from the log start.
    put(log, (b"k0", b"newest"), ts=T0 + 20_200)
    put(log, (b"k1", b"newest"), ts=T0 + 20_200)
    log.roll()
    log.maybe_increment_log_start_offset(61)
    log.delete_old_segments(T0 + 20_200)
    to_clean = cleaner.to_clean(log, T0 + 20_200)
    assert to_clean.first_dirty_offset == 61 and to_clean.checkpoint_reset
    cleaner.clean_log(log, T0 + 20_200)
    assert read_all(log) == [(61, b"k1", b"newest")]
    assert cleaner.checkpoint(log) == 62


def test_logs_without_compact_are_left_alone(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, cleanup_policy="delete")
    put(log, (b"a", b"1"))
    put(log, (b"a", b"2"))
    log.roll()
    cleaner = cleaner_for(log, clock)
    assert cleaner.maybe_clean() is None
    assert cleaner.clean_log(log) is None
    assert len(read_all(log)) == 2


def test_a_group_spans_at_most_2_31_offsets(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock)
    far = 2**31 + 10
    for base in (0, 1, far):  # a follower may append past gaps of any size
        batch = bytearray(build_record_batch([SimpleRecord(b"k", b"%d" % base, (), T0)],
                                             base_offset=base))
        log.append_as_follower(batch)
        log.roll()
    # Segments 0 and 1, then 2 holding `far` (within u32 of its base), then the active.
    assert [s.base_offset for s in log.segments()] == [0, 1, 2, far + 1]
    result = cleaner_for(log, clock).clean_log(log)
    # 0 and 1 merge; 2 would put `far` more than 2^31 - 1 past base 0: a group of its own.
    assert result is not None and result.segments_written == 2
    assert [s.base_offset for s in log.segments()] == [0, 2, far + 1]
    assert read_all(log) == [(far, b"k", b"%d" % far)]


def test_tiny_indexes(tmp_path: Path) -> None:
    """segment.index.bytes of two entries: segments roll on full indexes, and the
    cleaner's groups must never overflow theirs."""
    clock = Clock()
    log = open_log(tmp_path, clock, segment_index_bytes=24, index_interval_bytes=0)
    history = {}
    cleaner = cleaner_for(log, clock)
    for round_ in range(3):
        for i in range(40):
            items = [(f"k{(i * 7 + round_) % 9}".encode(), b"x" * (i % 13))]
            history[put(log, *items)] = items[0]
        log.roll()
        cleaner.clean_log(log)
        latest = {k: (o, k, v) for o, (k, v) in sorted(history.items())}
        rows = read_all(log)
        assert rows == sorted(latest.values())
        assert_every_offset_readable(log, rows)
    assert all(s.offset_index.entries <= 3 for s in log.segments())


# ---- the offset map --------------------------------------------------------------------


def test_offset_map_is_bounded() -> None:
    offsets = OffsetMap(2)
    assert offsets.put(b"a", 1) and offsets.put(b"b", 2)
    assert not offsets.put(b"c", 3) and offsets.get(b"c") == -1
    assert offsets.put(b"a", 4) and offsets.get(b"a") == 4  # an old key still updates
    long_key = b"x" * 1000
    offsets.clear()
    assert offsets.put(long_key, 7) and offsets.get(long_key) == 7
    assert offsets.get(b"x" * 999 + b"y") == -1


def test_a_full_offset_map_cleans_in_steps(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, segment_bytes=400)
    for i in range(100):
        put(log, (f"k{i % 10}".encode(), f"v{i}".encode()))
    log.roll()
    reference = {k: (o, v) for o, k, v in read_all(log)}
    cleaner = cleaner_for(log, clock, dedupe_buffer_entries=4)
    checkpoints = []
    while (result := cleaner.maybe_clean()) is not None:
        checkpoints.append(result.end_offset)
        assert result.map_full == (result.end_offset < 100)
    assert checkpoints == sorted(checkpoints) and checkpoints[-1] == 100
    assert len(checkpoints) > 2
    assert {k: (o, v) for o, k, v in read_all(log)} == reference
    assert len(read_all(log)) == 10


# ---- crash safety ----------------------------------------------------------------------


class Crash(BaseException):
    """A simulated power cut: nothing after it runs, no cleanup either."""


def crash_on_rename(monkeypatch: pytest.MonkeyPatch, old: str, new: str, nth: int = 1) -> None:
    original = LogSegment.rename_suffix
    calls = {"n": 0}

    def rename_suffix(self: LogSegment, o: str, n: str) -> None:
        if (o, n) == (old, new):
            calls["n"] += 1
            if calls["n"] == nth:
                raise Crash(f"crash before renaming {self.log_path.name} {o!r} -> {n!r}")
        original(self, o, n)

    monkeypatch.setattr(LogSegment, "rename_suffix", rename_suffix)


def crash_after_log_renamed_live(monkeypatch: pytest.MonkeyPatch) -> None:
    """The swap's .log is live, its indexes still .swap (rename_suffix does them after)."""
    original = _Index.rename

    def rename(self: _Index, path: Path) -> None:
        if self.path.name.endswith(SWAP_SUFFIX) and not path.name.endswith(SWAP_SUFFIX):
            raise Crash(f"crash before renaming {self.path.name}")
        original(self, path)

    monkeypatch.setattr(_Index, "rename", rename)


CRASH_POINTS = {
    # name: (how to crash, what Log.open must give: the log before the round, or with
    # the first group swapped in and the second not)
    "cleaned-written": (lambda mp: crash_on_rename(mp, CLEANED_SUFFIX, SWAP_SUFFIX), "before"),
    "swap-renamed": (lambda mp: crash_on_rename(mp, "", DELETED_SUFFIX), "first group"),
    "some-old-deleted": (lambda mp: crash_on_rename(mp, "", DELETED_SUFFIX, nth=2),
                         "first group"),
    "all-old-deleted": (lambda mp: crash_on_rename(mp, SWAP_SUFFIX, ""), "first group"),
    "swap-log-live": (crash_after_log_renamed_live, "first group"),
    "second-group-cleaned": (lambda mp: crash_on_rename(mp, CLEANED_SUFFIX, SWAP_SUFFIX, nth=2),
                             "first group"),
}


CRASH_LOG = {"segment_bytes": 1200}


def build_crash_log(directory: Path, clock: Clock) -> int:
    """Three segments: the first two clean into one group whose last batch is emptied
    (every record of the second segment has a later value in the third), the third is
    a group of its own. Returns the third's base offset."""
    log = open_log(directory, clock, **CRASH_LOG)
    for i in range(4):
        put(log, (f"unique{i}".encode(), b"u"))
    for i in range(12):
        put(log, (f"k{i % 5}".encode(), f"v{i}".encode()))
        if i in (3, 11):
            log.roll()
    boundary = log.active_segment.base_offset
    for i in range(16):
        put(log, (f"k{i % 5}".encode(), f"w{i}".encode()))
    log.roll()
    put(log, (b"k3", b"in the active segment"))
    log.close()
    return boundary


@pytest.mark.parametrize("point", list(CRASH_POINTS))
def test_a_crash_at_each_step_of_the_swap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          point: str) -> None:
    clock = Clock()
    boundary = build_crash_log(tmp_path / "original", clock)
    for name in ("reference", "crashed"):
        shutil.copytree(tmp_path / "original", tmp_path / name)
    reference = open_log(tmp_path / "reference", clock, **CRASH_LOG)
    before = read_all(reference)
    result = cleaner_for(reference, clock).clean_log(reference)
    assert result is not None and result.segments_replaced == 3
    assert result.segments_written == 2 and result.empty_batches_written == 1
    after = read_all(reference)
    assert after != before
    first_group = [r for r in after if r[0] < boundary] + [r for r in before if r[0] >= boundary]

    crashing = open_log(tmp_path / "crashed", clock, **CRASH_LOG)
    end = crashing.log_end_offset
    make_crash, expected = CRASH_POINTS[point]
    make_crash(monkeypatch)
    with pytest.raises(Crash):
        cleaner_for(crashing, clock).clean_log(crashing)
    monkeypatch.undo()
    crash(crashing)

    log = Log.open(crashing.directory, crashing.config, clock=clock, clean_shutdown=False,
                   recovery_point=end)
    rows = read_all(log)
    assert rows == (before if expected == "before" else first_group)
    assert set(after) <= set(rows) <= set(before)  # every latest value is there
    assert log.log_end_offset == end
    assert_every_offset_readable(log, rows)
    assert not [n for n in os.listdir(log.directory)
                if ".log" in n and not n.endswith(".log")]
    for segment in log.segments():
        segment.check_not_corrupt()
    # The next round finishes the job.
    cleaner_for(log, clock).clean_log(log)
    assert read_all(log) == after
    log.close()


# ---- a round that cannot finish --------------------------------------------------------


def test_retention_during_a_round_aborts_it_harmlessly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, segment_bytes=300)
    for i in range(30):
        put(log, (f"k{i % 3}".encode(), f"v{i}".encode()))
    log.roll()
    original = Cleaner._build_offset_map

    def build_then_delete(self: Cleaner, *args: object) -> int:
        end = original(self, *args)
        log.maybe_increment_log_start_offset(log.segments()[1].base_offset)
        log.delete_old_segments()  # DeleteRecords + retention while the round runs
        return end

    monkeypatch.setattr(Cleaner, "_build_offset_map", build_then_delete)
    cleaner = cleaner_for(log, clock)
    before = read_all(log)
    assert cleaner.clean_log(log) is None  # aborted
    monkeypatch.undo()
    assert read_all(log) == [r for r in before if r[0] >= log.log_start_offset]
    assert cleaner.checkpoint(log) is None and not cleaner.uncleanable
    no_leftovers(log.directory)
    assert cleaner.clean_log(log) is not None
    assert [k for _, k, _ in read_all(log)] == [b"k0", b"k1", b"k2"]


def test_an_aborted_round_leaves_no_files(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, segment_bytes=300)
    for i in range(30):
        put(log, (f"k{i % 3}".encode(), f"v{i}".encode()))
    log.roll()
    before = read_all(log)
    checks = {"n": 0}

    def abort_late() -> bool:
        checks["n"] += 1
        return checks["n"] > 40  # past the map, inside the recopy

    cleaner = Cleaner(OffsetMap(100), should_abort=abort_late)
    with pytest.raises(CleaningAbortedError):
        cleaner.clean(log_to_clean(log, None, T0), T0)
    assert checks["n"] == 41
    rows = read_all(log)
    assert {r for r in before if r[0] >= 27} <= set(rows) <= set(before)
    no_leftovers(log.directory)


def test_pause_and_resume(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock)
    put(log, (b"a", b"1"))
    put(log, (b"a", b"2"))
    log.roll()
    cleaner = cleaner_for(log, clock)
    cleaner.pause_cleaning(log)
    assert cleaner.maybe_clean() is None and cleaner.clean_log(log) is None
    cleaner.resume_cleaning(log)
    assert cleaner.maybe_clean() is not None
    assert read_all(log) == [(1, b"a", b"2")]


def test_pausing_aborts_a_round_in_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock)
    for i in range(10):
        put(log, (f"k{i % 2}".encode(), b"v"))
    log.roll()
    before = read_all(log)
    mapping, release = threading.Event(), threading.Event()
    original = Cleaner._build_offset_map

    def slow_map(self: Cleaner, *args: object) -> int:
        mapping.set()
        release.wait(5)
        return original(self, *args)

    monkeypatch.setattr(Cleaner, "_build_offset_map", slow_map)
    cleaner = cleaner_for(log, clock)
    results: list[object] = []
    worker = threading.Thread(target=lambda: results.append(cleaner.clean_log(log)))
    worker.start()
    assert mapping.wait(5)
    threading.Timer(0.05, release.set).start()
    cleaner.pause_cleaning(log, timeout_s=5)  # aborts the round and waits for its end
    worker.join(5)
    assert results == [None] and read_all(log) == before
    assert cleaner.checkpoint(log) is None
    no_leftovers(log.directory)
    cleaner.resume_cleaning(log)
    monkeypatch.undo()
    assert cleaner.clean_log(log) is not None and len(read_all(log)) == 2


def test_a_failing_log_is_marked_uncleanable(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock)
    put(log, (b"a", b"1"))
    put(log, (b"a", b"2"))
    log.roll()
    segment = log.segments()[0]
    with open(segment.log_path, "r+b") as f:  # flip a byte of the first batch's records
        f.seek(segment.size // 2 - 20)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    cleaner = cleaner_for(log, clock)
    with pytest.raises(Exception, match="corrupt"):
        cleaner.maybe_clean()
    assert log.directory in cleaner.uncleanable
    assert cleaner.maybe_clean() is None  # skipped from then on
    no_leftovers(log.directory)


# ---- the checkpoint and the threads ----------------------------------------------------


def test_the_cleaner_checkpoint_file(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock)
    for i in range(6):
        put(log, (f"k{i % 2}".encode(), b"v"))
    log.roll()
    cleaner = cleaner_for(log, clock)
    cleaner.clean_log(log)
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT
    assert path.read_text() == "0\n1\nevents 0 6\n"
    # A new cleaner (a restarted broker) starts from the checkpoint.
    again = cleaner_for(log, clock)
    assert again.checkpoint(log) == 6
    assert again.to_clean(log).first_dirty_offset == 6
    again.maybe_truncate_checkpoint(log, 4)
    assert OffsetCheckpointFile(path).read() == {("events", 0): 4}
    again.maybe_truncate_checkpoint(log, 5)  # only ever lowered
    assert again.checkpoint(log) == 4
    again.forget(log)
    assert OffsetCheckpointFile(path).read() == {}


def test_background_threads(tmp_path: Path) -> None:
    clock = Clock()
    logs = []
    for partition in range(3):
        log = Log.open(tmp_path / f"events-{partition}", config(), clock=clock)
        for i in range(20):
            put(log, (f"k{i % 4}".encode(), f"v{i}".encode()))
        log.roll()
        logs.append(log)
    cleaner = LogCleaner(lambda: logs, config=CleanerConfig(threads=2, backoff_ms=10),
                         clock=clock)
    cleaner.start()
    try:
        deadline = time.monotonic() + 10
        while any(cleaner.checkpoint(log) != 20 for log in logs):
            assert time.monotonic() < deadline, "the cleaner threads did not clean the logs"
            time.sleep(0.01)
        for log in logs:
            # Appends carry on while the threads poll.
            put(log, (b"k0", b"late"))
            assert len(read_all(log)) == 5
    finally:
        assert cleaner.shutdown(timeout_s=5)
    assert not [t for t in threading.enumerate() if t.name.startswith("odradek-log-cleaner")]


# ---- a model: random puts, deletes, rolls, reopenings and rounds ------------------------

KEYS = [b"a", b"b", b"c", b"d", b"e"]
DELETE_RETENTION_MS = 100

operations = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.lists(
            st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(max_size=8))),
            min_size=1, max_size=3)),
        st.tuples(st.just("roll"), st.none()),
        st.tuples(st.just("tick"), st.integers(1, 80)),
        st.tuples(st.just("clean"), st.none()),
        st.tuples(st.just("reopen"), st.booleans()),
    ),
    max_size=40,
)


@dataclass
class Model:
    history: dict[int, tuple[bytes, bytes | None]] = field(default_factory=dict)
    stamped: dict[int, int] = field(default_factory=dict)  # tombstone offset -> first kept

    def expected(self, upper: int, now: int) -> list[Row]:
        """Below `upper` the last record of each key (unless a tombstone past its horizon),
        from there on everything as written."""
        last: dict[bytes, int] = {}
        for offset, (key, _) in sorted(self.history.items()):
            if offset < upper:
                last[key] = offset
        kept = set()
        for offset in last.values():
            if self.history[offset][1] is None:
                stamp = self.stamped.get(offset)
                if stamp is not None and now >= stamp + DELETE_RETENTION_MS:
                    continue
                self.stamped.setdefault(offset, now)
            kept.add(offset)
        kept |= {o for o in self.history if o >= upper}
        return [(o, *self.history[o]) for o in sorted(kept)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations)
def test_compaction_matches_a_model(ops: list[tuple[str, object]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        clock = Clock()
        props = {"segment_bytes": 500, "delete_retention_ms": DELETE_RETENTION_MS,
                 "index_interval_bytes": 64}
        log = open_log(Path(tmp), clock, **props)
        holder = [log]
        # An I/O buffer smaller than many batches: both read paths of the cleaner run.
        cleaner = cleaner_for(lambda: holder[0], clock, dedupe_buffer_entries=1000,
                              io_buffer_size=100)
        model = Model()
        for op, arg in ops:
            log = holder[0]
            if op == "put":
                first = put(log, *arg)
                model.history.update({first + i: item for i, item in enumerate(arg)})
            elif op == "roll":
                log.roll()
            elif op == "tick":
                clock.now += arg
            elif op == "reopen":
                holder[0] = reopened(log, clock, clean=arg)
            else:
                upper = log.active_segment.base_offset
                result = cleaner.clean_log(log)
                assert result is not None and result.end_offset == upper
                rows = read_all(log)
                assert rows == model.expected(upper, clock.now)
                assert log.log_end_offset == (max(model.history) + 1 if model.history else 0)
        holder[0].close()


# ---- librdkafka's batches, compacted and consumed by librdkafka --------------------------


@pytest.mark.timeout(30)
def test_librdkafka_batches_survive_compaction(tmp_path: Path) -> None:
    kafka = pytest.importorskip("confluent_kafka")
    from support.protocol_peer import ProtocolPeer, _Batch

    topic, deadline_s = "compacted", 15.0
    with ProtocolPeer(partitions=1) as peer:
        producer = kafka.Producer({
            "bootstrap.servers": peer.bootstrap, "compression.type": "lz4",
            "linger.ms": 20, "enable.idempotence": True,
            "message.timeout.ms": int(deadline_s * 1000),
        })
        sent = []
        for burst in range(4):
            for i in range(10):
                key, value = f"k{(burst + i) % 6}".encode(), f"v{burst}.{i}".encode()
                producer.produce(topic, key=key, value=value, partition=0)
                sent.append((key, value))
            assert producer.flush(deadline_s) == 0
        clock = Clock(time.time_ns() // 1_000_000)  # librdkafka stamps records with it
        log = open_log(tmp_path, clock, segment_bytes=400)
        for payload in peer.captured(topic, 0):
            log.append_as_leader(bytearray(payload))
        log.roll()
        result = cleaner_for(log, clock).clean_log(log)
        assert result is not None and result.batches_rebuilt > 0  # lz4 batches rebuilt
        rows = read_all(log)
        latest = {}
        for offset, (key, value) in enumerate(sent):
            latest[key] = (offset, key, value)
        assert rows == sorted(latest.values())
        assert rows[0][0] > 0  # a consumer starting at 0 skips what compaction removed

        # Serve the compacted batches (offset gaps, rebuilt lz4 batches) to a consumer.
        served = []
        for segment in log.segments():
            data = segment.pread(0, segment.size)
            for pos, header in iter_batch_headers(data):
                served.append(_Batch(header.base_offset, header.last_offset,
                                     data[pos:pos + header.size_in_bytes]))
        with peer._lock:
            peer._partition(topic, 0).log = served
        consumer = kafka.Consumer({
            "bootstrap.servers": peer.bootstrap, "group.id": "odradek-cleaner-test",
            "enable.auto.commit": False, "enable.auto.offset.store": False,
        })
        try:
            consumer.assign([kafka.TopicPartition(topic, 0, 0)])
            got = []
            stop = time.monotonic() + deadline_s
            while time.monotonic() < stop and (not got or got[-1][0] < rows[-1][0]):
                msg = consumer.poll(0.1)
                if msg is not None:
                    assert msg.error() is None, msg.error()
                    got.append((msg.offset(), msg.key(), msg.value()))
        finally:
            consumer.close()
        assert got == rows


def test_rebuild_batch_without_records_is_an_empty_batch() -> None:
    batch = build_record_batch([SimpleRecord(b"a", b"1"), SimpleRecord(b"b", b"2")],
                               base_offset=10, compression=3, producer_id=5, producer_epoch=1,
                               base_sequence=7)
    header = RecordBatchHeader.parse(batch)
    empty = rebuild_batch(header, [])
    parsed = RecordBatchHeader.parse(empty)
    validate_batch(empty, 0, parsed, from_client=False)
    assert (parsed.base_offset, parsed.last_offset, parsed.records_count) == (10, 11, 0)
    assert (parsed.producer_id, parsed.producer_epoch, parsed.base_sequence) == (5, 1, 7)
    assert parsed.compression == 0 and len(empty) == 61
    assert parsed.base_timestamp == parsed.max_timestamp == header.max_timestamp
    assert cleaner_module.EMPTY_BATCH_SIZE == 61


def test_an_undecided_transaction_holds_the_cleaner_back(tmp_path: Path) -> None:
    """Kafka cleans below the last stable offset only: the records of a transaction not
    decided yet may still be aborted, and what follows them waits too."""
    clock = Clock()
    log = open_log(tmp_path, clock)
    put(log, (b"k", b"1"))
    log.roll()
    txn = put(log, (b"k", b"2"), producer_id=7, producer_epoch=0, base_sequence=0,
              is_transactional=True)
    log.roll()
    put(log, (b"k", b"3"))
    log.roll()
    assert log.first_unstable_offset == txn
    _, uncleanable, _ = cleanable_offsets(log, None, clock())
    assert uncleanable == txn  # the base of the segment where the transaction starts
    marker = build_control_batch(True, producer_id=7, producer_epoch=0, coordinator_epoch=0,
                                 timestamp=clock())
    log.append_as_leader(bytearray(marker), origin=AppendOrigin.COORDINATOR)
    log.update_high_watermark(log.log_end_offset)
    assert log.first_unstable_offset is None
    assert cleanable_offsets(log, None, clock())[1] == log.segments()[-1].base_offset


# ---- transactions (Kafka's CleanedTransactionMetadata) -------------------------------------

TXN_A, TXN_B, TXN_C = 500, 600, 800
DAY_MS = 86_400_000  # delete.retention.ms's default


class Producer:
    """A transactional producer: batches with its id, epoch and running sequence."""

    def __init__(self, log: Log, pid: int, epoch: int = 0) -> None:
        self.log, self.pid, self.epoch, self.seq = log, pid, epoch, 0

    def send(self, *items: tuple[bytes, bytes | None], transactional: bool = True) -> int:
        first = put(self.log, *items, producer_id=self.pid, producer_epoch=self.epoch,
                    base_sequence=self.seq, is_transactional=transactional)
        self.seq += len(items)
        return first

    def end(self, commit: bool, epoch: int | None = None) -> int:
        """The coordinator's marker (a bumped epoch: the coordinator fenced the producer)."""
        epoch = self.epoch if epoch is None else epoch
        marker = build_control_batch(commit, self.pid, epoch, 0, self.log.clock())
        return self.log.append_as_leader(bytearray(marker),
                                         origin=AppendOrigin.COORDINATOR).first_offset


def fetched_batches(log: Log) -> list[tuple[RecordBatchHeader, list[Record]]]:
    """Every batch a consumer fetches from the log start to the log end, in order."""
    found = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).read()
        for pos, header in iter_batch_headers(data):
            validate_batch(data, pos, header, from_client=False)
            if header.last_offset >= offset:
                found.append((header, decode_records(data, pos, header)))
            next_offset = header.next_offset
        offset = next_offset
    return found


def read_committed(log: Log) -> list[Row]:
    """What a read_committed consumer gets (everything decided and replicated: the LSO is
    the log end): the fetched data batches, minus those of the aborted transactions the
    fetch returns, filtered as Kafka's consumer does (a producer is aborting from an
    aborted transaction's first offset to its ABORT marker)."""
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset(log.log_end_offset) == log.log_end_offset
    aborted = sorted(log.collect_aborted_transactions(log.log_start_offset, log.log_end_offset),
                     key=lambda t: t.first_offset)
    aborting: set[int] = set()
    rows: list[Row] = []
    for header, records in fetched_batches(log):
        while aborted and aborted[0].first_offset <= header.last_offset:
            aborting.add(aborted.pop(0).producer_id)
        if header.is_control:
            if records and decode_control_record(records[0])[0] == ControlRecordType.ABORT:
                aborting.discard(header.producer_id)
            continue
        if header.is_transactional and header.producer_id in aborting:
            continue
        rows += [(r.offset, r.key, r.value) for r in records]
    return rows


def latest_per_key(rows: list[Row]) -> list[Row]:
    latest = {key: (offset, key, value) for offset, key, value in rows}
    return sorted(latest.values())


def data_rows(log: Log) -> list[Row]:
    return [(r.offset, r.key, r.value) for h, rs in batches_of(log) if not h.is_control
            for r in rs]


def markers(log: Log) -> list[tuple[int, int, int | None]]:
    """(offset, producer id, delete horizon) of the markers with their record."""
    return [(h.base_offset, h.producer_id, h.delete_horizon_ms)
            for h, rs in batches_of(log) if h.is_control and rs]


def aborted_entries(log: Log) -> list[tuple[int, int, int]]:
    return [(t.producer_id, t.first_offset, t.last_offset)
            for t in log.collect_aborted_transactions(log.log_start_offset, log.log_end_offset)]


def test_aborted_records_go_and_never_shadow_committed_ones(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock)
    put(log, (b"a", b"a1"), (b"b", b"b1"))
    a, b = Producer(log, TXN_A), Producer(log, TXN_B)
    a.send((b"a", b"aborted"), (b"c", b"aborted"))
    b.send((b"b", b"b2 committed"))
    a.send((b"b", b"aborted too"))
    abort = a.end(commit=False)
    commit = b.end(commit=True)
    put(log, (b"d", b"d1"))
    log.roll()
    before = read_committed(log)
    assert [v for _, _, v in before] == [b"a1", b"b1", b"b2 committed", b"d1"]

    result = cleaner_for(log, clock).clean_log(log)
    assert result is not None and result.aborted_records_removed == 3
    # Committed values by key as always: b1 goes (b2 committed is later), a1 stays (the
    # later aborted `a` is not a value).
    assert data_rows(log) == [(0, b"a", b"a1"), (4, b"b", b"b2 committed"), (8, b"d", b"d1")]
    assert read_committed(log) == latest_per_key(before)
    # Both transactions had batches in this round: their markers stay, and the abort
    # its index entry (the producer's last batch is kept, empty).
    assert [o for o, _, _ in markers(log)] == [abort, commit]
    assert aborted_entries(log) == [(TXN_A, 2, abort)]
    (empty,) = [h for h, rs in batches_of(log) if h.producer_id == TXN_A and not h.is_control]
    assert (empty.base_offset, empty.records_count, empty.is_transactional) == (5, 0, True)
    assert (empty.producer_epoch, empty.base_sequence) == (0, 2)
    # Reopened after a crash (producer state rebuilt from the log): nothing hangs.
    log = reopened(log, clock, clean=False)
    log.update_high_watermark(log.log_end_offset)
    assert log.first_unstable_offset is None
    assert log.active_producers()[TXN_A].last_seq == 2
    assert read_committed(log) == latest_per_key(before)


def test_markers_stay_while_their_data_does_then_until_their_horizon(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, delete_retention_ms=1000)
    a, b = Producer(log, TXN_A), Producer(log, TXN_B)
    a.send((b"x", b"aborted"))
    abort = a.end(commit=False)
    b.send((b"y", b"y1"))
    superseded_commit = b.end(commit=True)
    b.send((b"y", b"y2"))  # the later committed value of y; the producer's last batch
    kept_commit = b.end(commit=True)
    a.send((b"z", b"z1"), transactional=False)  # a's last batch is past its abort
    log.roll()
    before = read_committed(log)
    cleaner = cleaner_for(log, clock)

    # 1st round: the data goes, the markers stay (this round met their batches).
    cleaner.clean_log(log, T0 + 10)
    assert markers(log) == [(abort, TXN_A, None), (superseded_commit, TXN_B, None),
                            (kept_commit, TXN_B, None)]
    assert aborted_entries(log) == [(TXN_A, 0, abort)]
    assert read_committed(log) == latest_per_key(before)
    # 2nd round: no batch of either is left: stamped with a delete horizon, like
    # tombstones; the abort's index entry goes (nothing of its transaction is left).
    result = cleaner.clean_log(log, T0 + 20)
    assert result is not None and result.earliest_delete_horizon == T0 + 20 + 1000
    assert markers(log) == [(abort, TXN_A, T0 + 1020), (superseded_commit, TXN_B, T0 + 1020),
                            (kept_commit, TXN_B, None)]
    assert aborted_entries(log) == []
    assert read_committed(log) == latest_per_key(before)
    # Not yet at the horizon: nothing changes; the cleaner comes back at the horizon by
    # itself and drops them.
    cleaner.clean_log(log, T0 + 1019)
    assert len(markers(log)) == 3
    result = cleaner.maybe_clean(T0 + 1020)
    assert result is not None and result.markers_removed == 2
    assert markers(log) == [(kept_commit, TXN_B, None)]  # y2 is still there
    assert read_committed(log) == latest_per_key(before)
    assert data_rows(log) == latest_per_key(before)
    log = reopened(log, clock, clean=False)
    log.update_high_watermark(log.log_end_offset)
    assert log.first_unstable_offset is None
    assert read_committed(log) == latest_per_key(before)


def test_each_producers_last_batch_or_marker_is_kept(tmp_path: Path) -> None:
    """Idempotence and fencing survive cleaning: an emptied last data batch keeps the
    producer's sequence, and a last marker with a bumped epoch (the coordinator aborted
    a fenced producer's transaction) stays, emptied after its horizon, with its epoch."""
    clock = Clock()
    log = open_log(tmp_path, clock, delete_retention_ms=1000)
    a, c = Producer(log, TXN_A), Producer(log, TXN_C)
    a.send((b"k", b"aborted"))
    abort = a.end(commit=False)
    c.send((b"k", b"fenced"), (b"j", b"fenced"))
    fenced = c.end(commit=False, epoch=1)
    put(log, (b"k", b"plain"))
    log.roll()
    log.update_high_watermark(log.log_end_offset)  # decided and replicated: cleanable
    cleaner = cleaner_for(log, clock)
    for now in (T0 + 1, T0 + 2, T0 + 5000, T0 + 10_000):
        cleaner.clean_log(log, now)
    batches = [(h.base_offset, h.producer_id, h.producer_epoch, h.is_control, h.records_count)
               for h, _ in batches_of(log)]
    # A's aborted batch is its last: kept empty, and its marker with it, for good; C's
    # data goes, its marker (its last entry, epoch 1) stays empty.
    assert batches == [(0, TXN_A, 0, False, 0), (abort, TXN_A, 0, True, 1),
                       (fenced, TXN_C, 1, True, 0), (fenced + 1, -1, -1, False, 1)]
    assert aborted_entries(log) == [(TXN_A, 0, abort)]
    assert read_committed(log) == [(fenced + 1, b"k", b"plain")]
    log = reopened(log, clock, clean=False)
    producers = log.active_producers()
    assert producers[TXN_A].last_seq == 0 and producers[TXN_C].producer_epoch == 1
    log.update_high_watermark(log.log_end_offset)
    assert log.first_unstable_offset is None


def test_a_transaction_across_groups(tmp_path: Path) -> None:
    """The aborted transaction's records and the committed one's span segments cleaned
    in separate groups; a segment whose last batch goes ends with a bare empty batch."""
    clock = Clock()
    log = open_log(tmp_path, clock, segment_bytes=300)
    a, b = Producer(log, TXN_A), Producer(log, TXN_B)
    a.send((b"k", b"aborted 1"))
    b.send((b"k", b"committed"))
    log.roll()
    a.send((b"j", b"aborted 2"))
    log.roll()
    abort = a.end(commit=False)
    commit = b.end(commit=True)
    a.send((b"z", b"later"), transactional=False)
    log.roll()
    before = read_committed(log)
    result = cleaner_for(log, clock).clean_log(log)
    assert result is not None and result.segments_written >= 2
    assert read_committed(log) == latest_per_key(before) == [(1, b"k", b"committed"),
                                                              (5, b"z", b"later")]
    # The second segment's only batch (aborted) is now a bare empty batch.
    (placeholder,) = [h for h, _ in batches_of(log) if h.base_offset == 2]
    assert (placeholder.records_count, placeholder.producer_id) == (0, -1)
    assert not placeholder.is_transactional and not placeholder.is_control
    assert [o for o, _, _ in markers(log)] == [abort, commit]
    assert aborted_entries(log) == [(TXN_A, 0, abort)]


@pytest.mark.parametrize("point", list(CRASH_POINTS))
def test_a_crash_while_cleaning_transactions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             point: str) -> None:
    """A crash at each step of a swap, then recovery of every segment (producer state and
    .txnindex rebuilt from what is left): read_committed sees the same, nothing hangs, and
    the next round ends where an uninterrupted one does."""
    clock = Clock()
    props = {"segment_bytes": 1000}
    log = open_log(tmp_path / "original", clock, **props)
    a, b = Producer(log, TXN_A), Producer(log, TXN_B)
    for i in range(6):
        put(log, (f"unique{i}".encode(), b"u"))
        a.send((f"k{i % 3}".encode(), f"aborted{i}".encode()))
        b.send((f"k{i % 4}".encode(), f"committed{i}".encode()))
    log.roll()
    for i in range(6):
        a.send((f"k{i % 3}".encode(), f"aborted more{i}".encode()))
        put(log, (f"k{i % 2}".encode(), f"plain{i}".encode()))
    a.end(commit=False)
    b.end(commit=True)
    log.roll()
    a.send((b"last", b"of a"), transactional=False)
    log.close()
    for name in ("reference", "crashed"):
        shutil.copytree(tmp_path / "original", tmp_path / name)

    reference = open_log(tmp_path / "reference", clock, **props)
    before = read_committed(reference)
    expected = latest_per_key(before)
    result = cleaner_for(reference, clock).clean_log(reference)
    assert result is not None and result.segments_written >= 2
    assert read_committed(reference) == expected

    crashing = open_log(tmp_path / "crashed", clock, **props)
    crashing.update_high_watermark(crashing.log_end_offset)
    end = crashing.log_end_offset
    make_crash, _ = CRASH_POINTS[point]
    make_crash(monkeypatch)
    with pytest.raises(Crash):
        cleaner_for(crashing, clock).clean_log(crashing)
    monkeypatch.undo()
    crash(crashing)
    log = Log.open(crashing.directory, crashing.config, clock=clock, clean_shutdown=False,
                   recovery_point=0)
    assert log.log_end_offset == end
    rows = read_committed(log)
    assert latest_per_key(rows) == expected and set(expected) <= set(rows) <= set(before)
    assert log.first_unstable_offset is None
    cleaner_for(log, clock).clean_log(log)
    assert read_committed(log) == expected
    assert data_rows(log) == data_rows(reference)
    log.close()
    reference.close()


txn_operations = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.tuples(st.integers(0, 1), st.sampled_from(KEYS))),
        st.tuples(st.just("send"), st.tuples(st.integers(0, 1), st.sampled_from(KEYS))),
        st.tuples(st.just("end"), st.tuples(st.integers(0, 1), st.booleans())),
        st.tuples(st.just("roll"), st.none()),
        st.tuples(st.just("tick"), st.integers(1, 80)),
        st.tuples(st.just("clean"), st.none()),
        st.tuples(st.just("reopen"), st.booleans()),
    ),
    max_size=40,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(txn_operations)
def test_transactional_compaction_matches_a_model(ops: list[tuple[str, object]]) -> None:
    """Two producers writing plain (idempotent) batches and transactions that commit or
    abort, rolls, rounds, restarts and crashes: a read_committed reader sees, below the
    round's first uncleanable offset, the latest committed value of each key and nothing
    aborted, and from there on every committed record; the producer state rebuilt from
    the cleaned log has the same open transactions."""
    with tempfile.TemporaryDirectory() as tmp:
        clock = Clock()
        props = {"segment_bytes": 400, "delete_retention_ms": DELETE_RETENTION_MS}
        log = open_log(Path(tmp), clock, **props)
        holder = [log]
        cleaner = cleaner_for(lambda: holder[0], clock, io_buffer_size=100)
        producers = [Producer(log, TXN_A), Producer(log, TXN_B)]
        committed: dict[int, tuple[bytes, bytes]] = {}
        pending: list[dict[int, tuple[bytes, bytes]]] = [{}, {}]
        n = 0
        for op, arg in ops:
            log = holder[0]
            if op in ("put", "send"):
                i, key = arg  # type: ignore[misc]
                n += 1
                value = b"%d" % n
                if op == "put" and pending[i]:
                    continue  # a producer's transaction is open: it cannot write outside
                offset = producers[i].send((key, value), transactional=op == "send")
                (pending[i] if op == "send" else committed)[offset] = (key, value)
            elif op == "end":
                i, commit = arg  # type: ignore[misc]
                producers[i].end(commit)
                if commit:
                    committed.update(pending[i])
                pending[i] = {}
            elif op == "roll":
                log.roll()
            elif op == "tick":
                clock.now += arg  # type: ignore[operator]
            elif op == "reopen":
                holder[0] = log = reopened(log, clock, clean=bool(arg))
                for p in producers:
                    p.log = log
            log.update_high_watermark(log.log_end_offset)
            open_firsts = [min(p) for p in pending if p]
            assert log.first_unstable_offset == (min(open_firsts) if open_firsts else None)
            if op != "clean":
                continue
            result = cleaner.clean_log(log)
            assert result is not None
            upper = result.first_uncleanable_offset
            stable = log.last_stable_offset(log.log_end_offset)
            rows = [r for r in read_committed_below(log, stable)]
            want = [(o, *committed[o]) for o in sorted(committed) if o < stable]
            assert [r for r in rows if r[0] < upper] == latest_per_key(
                [r for r in want if r[0] < upper])
            assert [r for r in rows if r[0] >= upper] == [r for r in want if r[0] >= upper]
            aborted_or_open = {o for o in data_offsets(log) if o < upper} - set(committed)
            assert not aborted_or_open
        holder[0].close()


def data_offsets(log: Log) -> set[int]:
    return {r.offset for h, rs in batches_of(log) if not h.is_control for r in rs}


def read_committed_below(log: Log, upper: int) -> list[Row]:
    """read_committed's filtering (see read_committed) up to the last stable offset."""
    aborted = sorted(log.collect_aborted_transactions(log.log_start_offset, upper),
                     key=lambda t: t.first_offset)
    aborting: set[int] = set()
    rows: list[Row] = []
    for header, records in fetched_batches(log):
        if header.base_offset >= upper:
            break
        while aborted and aborted[0].first_offset <= header.last_offset:
            aborting.add(aborted.pop(0).producer_id)
        if header.is_control:
            if records and decode_control_record(records[0])[0] == ControlRecordType.ABORT:
                aborting.discard(header.producer_id)
            continue
        if header.is_transactional and header.producer_id in aborting:
            continue
        rows += [(r.offset, r.key, r.value) for r in records if r.offset < upper]
    return rows
