"""Log behaviour through its public API, on real files: appends, reads, rolls, retention,
timestamps, DeleteRecords, truncation and reopening."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from odradek.protocol.exceptions import CorruptRecordError, InvalidRecordError
from odradek.protocol.records import (
    LOG_APPEND_TIME,
    RecordBatchHeader,
    SimpleRecord,
    build_control_batch,
    build_record_batch,
    iter_batch_headers,
    validate_batch,
)
from odradek.storage.config import LogConfig
from odradek.storage.errors import (
    InvalidTimestampError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
)
from odradek.storage.log import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    Log,
    TimestampAndOffset,
)
from odradek.storage.log_validator import AppendOrigin
from odradek.storage.txn_index import AbortedTxn

T0 = 1_700_000_000_000
DAY = 86_400_000


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def batch(n: int = 1, *, ts: int = T0, size: int = 10, key: str = "k") -> bytearray:
    records = [SimpleRecord(f"{key}{i}".encode(), b"v" * size, timestamp=ts + i) for i in range(n)]
    return bytearray(build_record_batch(records))


def open_log(tmp_path: Path, clock: Clock | None = None, **props: str) -> Log:
    config = LogConfig.from_properties({k.replace("_", "."): v for k, v in props.items()})
    return Log.open(tmp_path / "events-0", config, clock=clock or Clock())


def offsets_of(data: bytes) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for _, h in iter_batch_headers(data, allow_partial=True)]


def test_append_assigns_offsets_in_place_and_reads_back_the_same_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first, second = batch(3), batch(2)
    assert log.append_as_leader(first).first_offset == 0
    info = log.append_as_leader(second)
    assert (info.first_offset, info.last_offset, log.log_end_offset) == (3, 4, 5)
    assert RecordBatchHeader.parse(second).base_offset == 3  # rewritten in the caller's buffer
    data = log.read(0, 1 << 20).read()
    assert data == bytes(first) + bytes(second)
    for pos, header in iter_batch_headers(data):
        validate_batch(data, pos, header, from_client=False)  # CRC still valid


def test_reading_inside_a_batch_returns_the_whole_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(5))
    log.append_as_leader(batch(5))
    assert offsets_of(log.read(7, 1 << 20).read()) == [(5, 9)]
    assert offsets_of(log.read(2, 1 << 20).read()) == [(0, 4), (5, 9)]


def test_max_bytes_and_the_first_batch_whole(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for _ in range(3):
        log.append_as_leader(batch(1, size=500))
    assert offsets_of(log.read(0, 10).read()) == [(0, 0)]  # min one message
    assert log.read(0, 10, min_one_message=False).size == 10
    assert len(offsets_of(log.read(0, 1200).read())) == 2


def test_reads_stop_at_the_upper_bound(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for _ in range(4):
        log.append_as_leader(batch(2))
    assert offsets_of(log.read(0, 1 << 20, max_offset=4).read()) == [(0, 1), (2, 3)]
    assert log.read(4, 1 << 20, max_offset=4).slices == []


def test_offsets_out_of_range(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(2))
    assert log.read(2, 100).slices == []  # the log end: nothing yet, not an error
    with pytest.raises(OffsetOutOfRangeError) as e:
        log.read(3, 100)
    assert e.value.error_code == 1
    log.maybe_increment_log_start_offset(1)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)


def test_rejected_batches_change_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path, max_message_bytes="600")
    log.append_as_leader(batch(1))
    before = log.read(0, 1 << 20).read()
    corrupt = batch(2)
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(batch(1) + corrupt)  # one bad batch rejects the whole request
    with pytest.raises(MessageTooLargeError):
        log.append_as_leader(batch(1, size=1000))
    legacy = batch(1)
    legacy[16] = 1
    with pytest.raises(InvalidRecordError, match="magic v1"):
        log.append_as_leader(legacy)
    assert log.log_end_offset == 1
    assert log.read(0, 1 << 20).read() == before


def test_a_request_larger_than_a_segment_is_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes="1024")
    with pytest.raises(RecordBatchTooLargeError):
        log.append_as_leader(batch(1, size=600) + batch(1, size=600))


def test_log_append_time_rewrites_timestamps_and_keeps_the_crc(tmp_path: Path) -> None:
    clock = Clock(T0 + 5000)
    log = open_log(tmp_path, clock, message_timestamp_type="LogAppendTime")
    info = log.append_as_leader(batch(3, ts=T0))
    assert info.log_append_time == T0 + 5000
    data = log.read(0, 1 << 20).read()
    header = RecordBatchHeader.parse(data)
    assert header.timestamp_type == LOG_APPEND_TIME
    assert header.max_timestamp == T0 + 5000
    validate_batch(data, 0, header, from_client=False)


def test_create_time_bounds(tmp_path: Path) -> None:
    log = open_log(tmp_path, message_timestamp_after_max_ms="1000")
    log.append_as_leader(batch(1, ts=T0 + 900))
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(batch(1, ts=T0 + 60_000))


def test_roll_on_size_time_and_index(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, segment_bytes="1000", segment_ms="60000")
    for _ in range(10):
        log.append_as_leader(batch(1, size=150))
    sizes = [s.size for s in log.segments()]
    assert len(sizes) > 1 and all(size <= 1000 for size in sizes)
    count = len(sizes)
    clock.now += 61_000
    log.append_as_leader(batch(1, ts=clock.now))
    assert len(log.segments()) == count + 1  # segment.ms passed
    names = sorted(p.name for p in log.directory.iterdir())
    assert names[0] == "00000000000000000000.index"
    assert f"{log.segments()[-1].base_offset:020d}.log" in names


def test_small_index_fills_and_rolls(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_index_bytes="24", index_interval_bytes="1")
    for _ in range(8):
        log.append_as_leader(batch(1))
    assert len(log.segments()) > 1
    assert all(s.offset_index.entries <= 3 for s in log.segments())
    assert [offsets_of(log.read(o, 1).read())[0][0] for o in range(8)] == list(range(8))


def test_retention_by_time_uses_the_largest_timestamp(tmp_path: Path) -> None:
    clock = Clock()
    # Kafka 4.0 refuses timestamps more than an hour ahead unless this allows them.
    log = open_log(tmp_path, clock, segment_bytes="400", retention_ms=str(DAY),
                   file_delete_delay_ms="1000", message_timestamp_after_max_ms=str(400 * DAY))
    for _ in range(3):
        log.append_as_leader(batch(1, size=300))  # a segment each
    log.append_as_leader(batch(1, size=300, ts=T0 + 365 * DAY))  # a far-future timestamp
    log.append_as_leader(batch(1, size=300))
    clock.now += 2 * DAY
    infos = log.segment_infos()
    assert [i.largest_timestamp for i in infos][3] == T0 + 365 * DAY
    deleted = log.delete_old_segments()
    # The future record keeps its segment, and so every later one: deletion is a prefix.
    assert deleted == [0, 1, 2]
    assert log.log_start_offset == 3
    assert any(p.name.endswith(".deleted") for p in log.directory.iterdir())
    assert log.delete_pending_files(clock.now) == 0  # file.delete.delay.ms not yet passed
    assert log.delete_pending_files(clock.now + 1000) == 3
    assert not any(p.name.endswith(".deleted") for p in log.directory.iterdir())


def test_retention_by_size_keeps_whole_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes="400", retention_bytes="700")
    for _ in range(5):
        log.append_as_leader(batch(1, size=300))
    segment_size = log.segments()[0].size
    # As Kafka: delete while what remains still holds retention.bytes.
    assert log.delete_old_segments() == [0, 1, 2]
    assert log.size_in_bytes >= 700 > log.size_in_bytes - segment_size
    assert log.read(3, 1).slices


def test_retention_of_every_segment_rolls_a_new_one(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, retention_ms="1000")
    log.append_as_leader(batch(2))
    clock.now += 5000
    assert log.delete_old_segments() == [0]
    assert (log.log_start_offset, log.log_end_offset) == (2, 2)
    assert log.append_as_leader(batch(1, ts=clock.now)).first_offset == 2


def test_delete_records_moves_the_log_start(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes="400")
    for _ in range(4):
        log.append_as_leader(batch(1, size=300))
    log.maybe_increment_log_start_offset(2)
    assert log.delete_old_segments() == [0, 1]
    with pytest.raises(OffsetOutOfRangeError):
        log.maybe_increment_log_start_offset(99)


def test_timestamp_lookups(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes="500", index_interval_bytes="1")
    for i in range(6):
        log.append_as_leader(batch(3, ts=T0 + 100 * i, size=50))  # ts T0+100i .. +2
    assert log.fetch_offset_by_timestamp(T0 + 201) == TimestampAndOffset(T0 + 201, 7)
    assert log.fetch_offset_by_timestamp(T0 + 250) == TimestampAndOffset(T0 + 300, 9)
    assert log.fetch_offset_by_timestamp(T0 + 10_000) is None
    assert log.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP).offset == 0
    assert log.fetch_offset_by_timestamp(LATEST_TIMESTAMP).offset == 18
    assert log.fetch_offset_by_timestamp(MAX_TIMESTAMP) == TimestampAndOffset(T0 + 502, 17)


def test_truncate_to(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes="400")
    for _ in range(5):
        log.append_as_leader(batch(2, size=150))
    log.truncate_to(6)  # a batch boundary, where a follower truncates
    assert log.log_end_offset == 6
    assert log.read(4, 1 << 20).read() and log.append_as_leader(batch(1)).first_offset == 6
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)


def test_reopen_after_clean_close(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, segment_bytes="600", index_interval_bytes="100")
    for i in range(20):
        log.append_as_leader(batch(2, ts=T0 + i))
    def whole(lg: Log) -> bytes:  # a read serves one segment, as in Kafka
        return b"".join(lg.read(s.base_offset, 1 << 20).read() for s in lg.segments())

    data = whole(log)
    assert len(log.segments()) > 2
    log.close()
    for segment in log.segments()[:-1]:
        assert os.path.getsize(segment.offset_index.path) == segment.offset_index.entries * 8
    reopened = Log.open(log.directory, log.config, clock=clock)
    assert reopened.log_end_offset == 40
    assert whole(reopened) == data
    assert reopened.append_as_leader(batch(1)).first_offset == 40
    reopened.close()


def test_leader_epochs_are_stamped_cached_and_follow_truncation(tmp_path: Path) -> None:
    from odradek.storage.leader_epoch import EpochEntry, LeaderEpochCache

    log = open_log(tmp_path, segment_bytes="400")
    log.append_as_leader(batch(2, size=150), leader_epoch=0)
    log.append_as_leader(batch(2, size=150), leader_epoch=0)
    log.append_as_leader(batch(2, size=150), leader_epoch=3)
    assert [h.partition_leader_epoch for offset in (0, 2, 4)
            for _, h in iter_batch_headers(log.read(offset, 1 << 20).read())] == [0, 0, 3]
    assert log.leader_epoch_cache.entries == [EpochEntry(0, 0), EpochEntry(3, 4)]
    assert log.leader_epoch_cache.end_offset_for(0, log.log_end_offset) == (0, 4)
    # A follower copies the leader's batches with their epochs.
    follower = Log.open(tmp_path / "events-1", log.config)
    for offset in (0, 2, 4):
        follower.append_as_follower(bytearray(log.read(offset, 1 << 20).read()))
    assert follower.leader_epoch_cache.entries == log.leader_epoch_cache.entries
    log.truncate_to(4)          # the epoch-3 records go, and so does its entry
    assert LeaderEpochCache(log.directory).entries == [EpochEntry(0, 0)]
    log.append_as_leader(batch(2, size=150), leader_epoch=5)
    log.maybe_increment_log_start_offset(2)
    assert log.leader_epoch_cache.entries == [EpochEntry(0, 2), EpochEntry(5, 4)]
    log.truncate_to(0)
    assert log.leader_epoch_cache.entries == []


def test_a_compacted_log_refuses_records_without_key(tmp_path: Path) -> None:
    log = open_log(tmp_path, cleanup_policy="compact")
    keyless = [SimpleRecord(None, b"v", timestamp=T0)]
    with pytest.raises(InvalidRecordError, match="without key"):
        log.append_as_leader(bytearray(build_record_batch(keyless)))
    assert log.log_end_offset == 0
    assert log.append_as_leader(batch(2)).last_offset == 1
    # A follower copies what its leader wrote, without judging it again.
    log.append_as_follower(bytearray(build_record_batch(keyless, base_offset=2)))
    assert log.log_end_offset == 3


# ---- transactions: the last stable offset and read_committed reads -----------------------


def _txn(n: int, seq: int, pid: int) -> bytearray:
    records = [SimpleRecord(b"k%d" % i, b"v" * 100, timestamp=T0) for i in range(n)]
    return bytearray(build_record_batch(records, producer_id=pid, producer_epoch=0,
                                        base_sequence=seq, is_transactional=True))


def _marker(commit: bool, pid: int) -> bytearray:
    return bytearray(build_control_batch(commit, pid, 0, 0, T0))


def test_the_lso_follows_markers_and_read_committed_reads_get_their_aborts(
        tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes="100")
    log.append_as_leader(batch(2))  # 0-1
    log.append_as_leader(_txn(2, 0, pid=7))  # 2-3
    log.append_as_leader(_txn(1, 0, pid=8))  # 4
    log.append_as_leader(_marker(False, pid=7), origin=AppendOrigin.COORDINATOR)  # 5
    log.append_as_leader(batch(1))  # 6
    log.update_high_watermark(log.log_end_offset)
    assert log.first_unstable_offset == 4  # pid 8's transaction is still open
    assert log.last_stable_offset(high_watermark=7) == 4
    assert log.last_stable_offset(high_watermark=3) == 3
    # A read_committed read stops at the LSO and carries the abort it overlaps.
    info = log.read(0, 1 << 20, max_offset=log.last_stable_offset(7))
    assert offsets_of(info.read()) == [(0, 1), (2, 3)]
    assert log.aborted_transactions_of(info) == [AbortedTxn(7, 2, 5, 4)]
    # Past the abort's range nothing is reported.
    log.append_as_leader(_marker(True, pid=8), origin=AppendOrigin.COORDINATOR)  # 7
    log.update_high_watermark(8)
    assert log.first_unstable_offset is None and log.last_stable_offset(8) == 8
    info = log.read(6, 1 << 20, max_offset=8)
    assert offsets_of(info.read()) == [(6, 6), (7, 7)]
    assert log.aborted_transactions_of(info) == []
    # A small read: the bound is the first offset-index entry past what was read (as
    # Kafka's fetchUpperBoundOffset), here batch 4's, so the abort from 2 is told too.
    info = log.read(0, 1, max_offset=8)
    assert offsets_of(info.read()) == [(0, 1)]
    found = info.slices[0]
    assert found.segment.fetch_upper_bound_offset(found.position, found.length) == 4
    assert log.aborted_transactions_of(info) == [AbortedTxn(7, 2, 5, 4)]
    assert log.aborted_transactions_of(log.read(8, 100, max_offset=8)) == []
