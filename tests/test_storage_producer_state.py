"""Idempotent-producer state of a log, on real files with an injected clock: duplicates,
out-of-order sequences and stale epochs (a rejected request changes nothing), sequence
wrap-around, follower appends, Kafka's `.snapshot` files (byte format, written on roll and
close, trusted after a clean shutdown, ignored when corrupt, removed by truncation and
retention), rebuilding after a crash, expiry, and the cleaner keeping producers' batches."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from crc32c import crc32c

from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import (
    SimpleRecord,
    build_control_batch,
    build_record_batch,
    iter_batch_headers,
)
from odradek.storage.cleaner import CleanerConfig, LogCleaner
from odradek.storage.config import LogConfig
from odradek.storage.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from odradek.storage.log import Log
from odradek.storage.log_manager import LogManager, LogManagerConfig
from odradek.storage.log_validator import AppendOrigin
from odradek.storage.producer_state import (
    CompletedTxn,
    CorruptSnapshotError,
    ProducerStateEntry,
    ProducerStateManager,
    TransactionCoordinatorFencedError,
    decode_snapshot,
    encode_snapshot,
)

T0 = 1_700_000_000_000
DAY = 86_400_000
INT32_MAX = 2**31 - 1
PID, OTHER = 1000, 2000


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def idem(n: int, seq: int, *, pid: int = PID, epoch: int = 0, ts: int = T0,
         base_offset: int = 0) -> bytearray:
    """An idempotent producer's batch of n records, sequences seq .. seq + n - 1."""
    records = [SimpleRecord(b"k%d" % i, b"v%d" % i, timestamp=ts) for i in range(n)]
    return bytearray(build_record_batch(records, producer_id=pid, producer_epoch=epoch,
                                        base_sequence=seq, base_offset=base_offset))


def plain(n: int = 1, *, ts: int = T0) -> bytearray:
    return bytearray(build_record_batch([SimpleRecord(b"k", b"v", timestamp=ts)] * n))


def log_config(**props: str) -> LogConfig:
    return LogConfig.from_properties({k.replace("_", "."): v for k, v in props.items()})


def open_log(directory: Path, clock: Clock, *, clean: bool = True, **props: str) -> Log:
    return Log.open(directory / "events-0", log_config(**props), clock=clock,
                    clean_shutdown=clean)


def crash(log: Log) -> None:
    """Drops the log's file handles without flushing, snapshotting or trimming anything."""
    for segment in log.segments():
        segment.close_handles()


def log_bytes(log: Log) -> bytes:
    return b"".join(s.pread(0, s.size) for s in log.segments())


def snapshots(log: Log) -> list[int]:
    on_disk = sorted(int(n.split(".")[0]) for n in os.listdir(log.directory)
                     if n.endswith(".snapshot"))
    assert on_disk == log.producer_state.snapshot_offsets
    return on_disk


def state(log: Log, pid: int = PID) -> tuple[int, int, list[tuple[int, int, int, int]]]:
    """(epoch, last sequence, [(first seq, last seq, first offset, last offset)])."""
    entry = log.active_producers()[pid]
    return entry.producer_epoch, entry.last_seq, [
        (b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in entry.batches]


# ---- checks on append ------------------------------------------------------------------


def test_a_retry_is_acknowledged_with_the_original_offsets_and_not_written(
        tmp_path: Path) -> None:
    log = open_log(tmp_path, Clock())
    first = log.append_as_leader(idem(3, 0))
    log.append_as_leader(plain(2))
    second = log.append_as_leader(idem(2, 3))
    before, end = log_bytes(log), log.log_end_offset
    for original, retry in ((first, idem(3, 0)), (second, idem(2, 3))):
        info = log.append_as_leader(retry)
        assert info.duplicate and not original.duplicate
        assert (info.first_offset, info.last_offset) == (original.first_offset,
                                                         original.last_offset)
        assert info.valid_bytes == 0 and info.log_append_time == -1
    assert log_bytes(log) == before and log.log_end_offset == end == 7
    assert state(log) == (0, 4, [(0, 2, 0, 2), (3, 4, 5, 6)])


def test_a_retry_on_a_log_append_time_topic_gets_the_original_append_time(
        tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, message_timestamp_type="LogAppendTime")
    original = log.append_as_leader(idem(2, 0))
    clock.now += 5_000
    retry = log.append_as_leader(idem(2, 0))
    assert retry.duplicate and retry.log_append_time == original.log_append_time == T0


def test_only_the_last_five_batches_are_recognised_as_retries(tmp_path: Path) -> None:
    log = open_log(tmp_path, Clock())
    for i in range(6):
        log.append_as_leader(idem(1, i))
    end = log.log_end_offset
    assert log.append_as_leader(idem(1, 1)).duplicate
    with pytest.raises(OutOfOrderSequenceError):  # older than the cached five
        log.append_as_leader(idem(1, 0))
    assert log.log_end_offset == end


def test_a_gap_in_sequences_is_out_of_order_and_changes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path, Clock())
    log.append_as_leader(idem(3, 0))
    before, known = log_bytes(log), state(log)
    buf = idem(2, 5)
    with pytest.raises(OutOfOrderSequenceError) as raised:
        log.append_as_leader(buf)
    assert raised.value.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER == 45
    assert buf == idem(2, 5)  # not even the caller's buffer was touched
    assert log_bytes(log) == before and log.log_end_offset == 3 and state(log) == known
    with pytest.raises(OutOfOrderSequenceError):  # overlapping, not an exact retry
        log.append_as_leader(idem(2, 1))
    assert log.append_as_leader(idem(2, 3)).first_offset == 3


def test_an_older_epoch_is_fenced_and_a_new_epoch_starts_at_zero(tmp_path: Path) -> None:
    log = open_log(tmp_path, Clock())
    log.append_as_leader(idem(2, 0, epoch=3))
    before = log_bytes(log)
    with pytest.raises(InvalidProducerEpochError) as raised:
        log.append_as_leader(idem(1, 2, epoch=2))
    assert raised.value.error_code == ErrorCode.INVALID_PRODUCER_EPOCH == 47
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(idem(1, 2, epoch=4))
    assert log_bytes(log) == before and state(log)[0] == 3
    log.append_as_leader(idem(1, 0, epoch=4))
    assert state(log) == (4, 0, [(0, 0, 2, 2)])  # the old epoch's batches are forgotten
    with pytest.raises(InvalidProducerEpochError):  # a retry from the fenced epoch
        log.append_as_leader(idem(2, 0, epoch=3))


def test_a_producer_the_log_does_not_know_may_start_at_any_sequence(tmp_path: Path) -> None:
    log = open_log(tmp_path, Clock())
    assert log.append_as_leader(idem(2, 1234, epoch=7)).first_offset == 0
    assert state(log) == (7, 1235, [(1234, 1235, 0, 1)])
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(idem(1, 1237, epoch=7))


def test_a_request_is_checked_cumulatively_and_all_or_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path, Clock())
    log.append_as_leader(idem(1, 0, pid=OTHER))
    # Several batches of one producer: each follows the one before it in the request.
    info = log.append_as_leader(idem(2, 0) + plain() + idem(3, 2))
    assert (info.first_offset, info.last_offset) == (1, 6)
    assert state(log) == (0, 4, [(0, 1, 1, 2), (2, 4, 4, 6)])
    before = log_bytes(log)
    # A good batch of one producer and a bad one of another: neither is written.
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(idem(1, 5) + idem(1, 7, pid=OTHER))
    with pytest.raises(OutOfOrderSequenceError):  # the same batch twice in a request
        log.append_as_leader(idem(1, 5) + idem(1, 5))
    with pytest.raises(OutOfOrderSequenceError):  # even a new producer continues its own
        log.append_as_leader(idem(1, 0, pid=3000) + idem(1, 5, pid=3000))
    assert log_bytes(log) == before and log.log_end_offset == 7
    assert state(log)[1] == 4 and 3000 not in log.active_producers()


def test_sequences_wrap_around_at_int32_max(tmp_path: Path) -> None:
    log = open_log(tmp_path, Clock())
    log.append_as_leader(idem(2, INT32_MAX - 1))
    log.append_as_leader(idem(3, 0))  # after INT32_MAX comes 0
    straddling = idem(4, INT32_MAX - 1, pid=OTHER)  # last sequence 1
    log.append_as_leader(straddling)
    assert state(log, OTHER) == (0, 1, [(INT32_MAX - 1, 1, 5, 8)])
    assert log.append_as_leader(idem(4, INT32_MAX - 1, pid=OTHER)).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(idem(1, INT32_MAX, pid=OTHER))
    assert log.append_as_leader(idem(1, 2, pid=OTHER)).first_offset == 9
    assert log.append_as_leader(idem(3, 0)).duplicate


def test_appends_without_a_producer_id_never_load_the_state(tmp_path: Path) -> None:
    log = open_log(tmp_path, Clock())
    log.append_as_leader(plain(3))
    log.append_as_follower(bytearray(build_record_batch([(b"k", b"v")], base_offset=3)))
    assert not log.producer_state.loaded


def test_follower_appends_update_the_state_without_checks(tmp_path: Path) -> None:
    log = open_log(tmp_path, Clock())
    log.append_as_follower(idem(2, 0, epoch=5, base_offset=0))
    log.append_as_follower(idem(1, 9, epoch=5, base_offset=2))  # a gap: the leader's call
    log.append_as_follower(idem(1, 3, epoch=4, base_offset=3))  # older epoch: replicated
    assert state(log) == (4, 3, [(3, 3, 3, 3)])
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(idem(1, 0, epoch=3))
    assert log.append_as_leader(idem(1, 3, epoch=4)).duplicate


# ---- snapshots ---------------------------------------------------------------------------


def decode_kafka_snapshot(data: bytes) -> list[tuple[int, ...]]:
    """Kafka's ProducerStateManager snapshot schema, decoded independently."""
    version, crc = struct.unpack_from(">hI", data)
    assert version == 1
    assert crc == crc32c(data[6:])
    (count,) = struct.unpack_from(">i", data, 6)
    assert len(data) == 10 + 46 * count
    return [struct.unpack_from(">qhiqiqiq", data, 10 + 46 * i) for i in range(count)]


def test_snapshot_bytes_are_kafkas_format(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock)
    log.append_as_leader(idem(2, 0, pid=OTHER, epoch=1, ts=T0 + 7))
    log.append_as_leader(plain(1))
    log.append_as_leader(idem(3, 10, epoch=2, ts=T0 + 9))
    log.close()
    assert snapshots(log) == [6]
    data = (log.directory / "00000000000000000006.snapshot").read_bytes()
    # ProducerId, Epoch, LastSequence, LastOffset, OffsetDelta, Timestamp,
    # CoordinatorEpoch, CurrentTxnFirstOffset; by producer id.
    assert decode_kafka_snapshot(data) == [
        (PID, 2, 12, 5, 2, T0 + 9, -1, -1),
        (OTHER, 1, 1, 1, 1, T0 + 7, -1, -1),
    ]
    assert encode_snapshot(decode_snapshot(data)) == data


def test_an_empty_snapshot_and_a_producer_without_batches() -> None:
    empty = encode_snapshot([])
    assert empty == struct.pack(">hIi", 1, crc32c(b"\0\0\0\0"), 0)
    entry = ProducerStateEntry(7, 3, last_timestamp=T0)
    (decoded,) = decode_snapshot(encode_snapshot([entry]))
    assert decode_kafka_snapshot(encode_snapshot([entry])) == [(7, 3, -1, -1, 0, T0, -1, -1)]
    assert (decoded.producer_epoch, decoded.last_seq, list(decoded.batches)) == (3, -1, [])
    for bad in (empty[:-1], empty + b"\0", b"\0\2" + empty[2:], empty[:6] + b"\0\0\0\1"):
        with pytest.raises(CorruptSnapshotError):
            decode_snapshot(bad)


def test_a_roll_snapshots_the_state_at_the_new_segment_base(tmp_path: Path) -> None:
    log = open_log(tmp_path, Clock())
    log.append_as_leader(idem(2, 0))
    log.roll()
    log.append_as_leader(idem(1, 2))
    assert snapshots(log) == [2]
    data = (log.directory / "00000000000000000002.snapshot").read_bytes()
    assert decode_kafka_snapshot(data) == [(PID, 0, 1, 1, 1, T0, -1, -1)]


def test_the_state_survives_a_clean_restart_from_the_snapshot_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock)
    log.append_as_leader(idem(2, 0))
    log.append_as_leader(idem(2, 2))
    log.close()
    log = open_log(tmp_path, clock)

    def no_scan(*_: object) -> None:
        raise AssertionError("a clean restart must not scan the log")

    monkeypatch.setattr(Log, "_batch_headers_from", no_scan)
    assert log.append_as_leader(idem(2, 2)).duplicate
    # As Kafka: a snapshot keeps each producer's last batch only.
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(idem(2, 0))
    assert log.append_as_leader(idem(1, 4)).first_offset == 4
    log.append_as_leader(plain())
    log.close()
    assert snapshots(log) == [4, 6]  # the older one is a stray, removed on the next open
    log = open_log(tmp_path, clock)
    assert snapshots(log) == [6] and state(log) == (0, 4, [(4, 4, 4, 4)])


def test_a_clean_restart_without_appends_writes_nothing(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock)
    log.append_as_leader(idem(2, 0))
    log.close()
    path = log.directory / "00000000000000000002.snapshot"
    mtime = path.stat().st_mtime_ns
    log = open_log(tmp_path, clock)
    log.append_as_leader(plain())  # no producer id: the snapshot is still the state
    log.close()
    assert snapshots(log) == [2, 3]
    assert path.stat().st_mtime_ns == mtime  # the old snapshot is left as it was
    log = open_log(tmp_path, clock)
    log.close()
    assert snapshots(log) == [3] and not log.producer_state.loaded


def test_an_unclean_shutdown_rebuilds_the_state_by_scanning(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, segment_bytes="400")
    for i in range(12):
        log.append_as_leader(idem(2, 2 * i, ts=T0 + i))
        log.append_as_leader(plain(1))
    bases = [s.base_offset for s in log.segments()]
    assert len(bases) >= 4 and snapshots(log) == bases[1:]
    # Damage the third segment: recovery cuts the log there and drops the later ones.
    third = log.segments()[2]
    crash(log)
    with open(third.log_path, "r+b") as f:
        f.seek(third.size - 5)
        f.write(b"\xff\xff\xff\xff\xff")
    log = open_log(tmp_path, clock, clean=False, segment_bytes="400")
    end = log.log_end_offset
    assert bases[2] < end < bases[3]
    # Those past the recovered end are gone; recovery snapshots what it rebuilt.
    assert snapshots(log) == [o for o in bases[1:] if o <= end] + [end]
    kept = [(h.base_sequence, h.last_sequence, h.base_offset, h.last_offset)
            for s in log.segments() for _, h in iter_batch_headers(s.pread(0, s.size))
            if h.producer_id == PID]
    # The newest snapshot left (at the third segment's base) has the producer's last batch
    # before it; the batches after it come from scanning the third segment.
    expected = [b for b in kept if b[3] < bases[2]][-1:] + [b for b in kept if b[2] >= bases[2]]
    assert len(expected) > 2
    last_seq = kept[-1][1]
    assert state(log) == (0, last_seq, expected[-5:])
    assert log.append_as_leader(idem(2, last_seq - 1)).duplicate
    assert log.append_as_leader(idem(1, last_seq + 1)).first_offset == end


def test_a_crash_before_any_snapshot_scans_from_the_log_start(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock)
    log.append_as_leader(idem(2, 0))
    log.append_as_leader(idem(2, 2, pid=OTHER))
    crash(log)
    log = open_log(tmp_path, clock, clean=False)
    assert state(log) == (0, 1, [(0, 1, 0, 1)]) and state(log, OTHER)[1] == 3
    assert snapshots(log) == [4]  # recovery snapshots what it rebuilt


def test_a_corrupt_snapshot_is_ignored_and_deleted(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock)
    log.append_as_leader(idem(2, 0))
    log.roll()
    log.append_as_leader(idem(3, 2))
    log.close()
    assert snapshots(log) == [2, 5]
    newest = log.directory / "00000000000000000005.snapshot"
    data = bytearray(newest.read_bytes())
    data[-1] ^= 1
    newest.write_bytes(data)
    log = open_log(tmp_path, clock)
    assert state(log) == (0, 4, [(0, 1, 0, 1), (2, 4, 2, 4)])  # snapshot at 2, then a scan
    assert not newest.exists()
    assert log.append_as_leader(idem(3, 2)).duplicate
    # The only snapshot corrupt: the whole log is scanned. A half-written one is removed.
    log.close()
    for path in log.directory.glob("*.snapshot"):
        path.write_bytes(b"\0\1garbage")
    half_written = log.directory / "00000000000000000009.snapshot.tmp"
    half_written.write_bytes(b"\0")
    log = open_log(tmp_path, clock)
    assert not half_written.exists()
    assert state(log)[1] == 4 and snapshots(log) == []


def test_truncation_removes_later_snapshots_and_reloads(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock)
    for seq in (0, 2, 4, 6):
        log.append_as_leader(idem(2, seq))
        log.roll()
    assert snapshots(log) == [2, 4, 6, 8]
    log.truncate_to(4)
    assert log.log_end_offset == 4 and snapshots(log) == [2, 4]
    assert state(log) == (0, 3, [(2, 3, 2, 3)])  # from the snapshot at 4
    assert log.append_as_leader(idem(2, 4)).first_offset == 4  # the truncated batch again
    log.truncate_to(3)  # inside the batch at 2..3: it goes too, so does the snapshot at 4
    assert snapshots(log) == [2] and state(log) == (0, 1, [(0, 1, 0, 1)])
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(idem(2, 4))
    log.truncate_fully_and_start_at(100)
    assert snapshots(log) == [] and log.active_producers() == {}
    assert log.append_as_leader(idem(1, 77)).first_offset == 100
    log.close()
    assert snapshots(log) == [101]


def test_retention_deletes_old_snapshots_and_keeps_the_producers(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, retention_ms=str(DAY))
    for seq in range(4):
        log.append_as_leader(idem(1, seq, pid=PID + seq, ts=T0 + seq))
        log.roll()
    assert snapshots(log) == [1, 2, 3, 4]
    log.maybe_increment_log_start_offset(3)
    assert log.delete_old_segments() == [0, 1, 2]
    assert snapshots(log) == [3, 4]
    # KIP-360: a producer outlives its records until producer.id.expiration.ms.
    assert log.append_as_leader(idem(1, 0, pid=PID)).duplicate
    clock.now += 2 * DAY
    assert log.delete_old_segments() == [3]  # the log emptied: an empty active segment
    assert snapshots(log) == [4]  # always the newest


# ---- expiry ------------------------------------------------------------------------------


def test_producers_expire_after_producer_id_expiration_ms(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock)
    log.append_as_leader(idem(2, 0, ts=T0))
    log.append_as_leader(idem(2, 0, pid=OTHER, ts=T0 + 10))
    assert log.remove_expired_producers(T0 + DAY - 1) == 0
    assert log.remove_expired_producers(T0 + DAY) == 1
    assert set(log.active_producers()) == {OTHER}
    clock.now = T0 + DAY
    assert log.append_as_leader(idem(1, 500, ts=clock.now)).first_offset == 4  # a stranger
    # Expired producers in a snapshot are dropped when it is loaded.
    log.close()
    clock.now = T0 + DAY + 10
    log = open_log(tmp_path, clock)
    assert set(log.active_producers()) == {PID}


def test_the_log_manager_expires_producers_on_its_schedule(tmp_path: Path) -> None:
    assert LogManagerConfig(log_dirs=(tmp_path,)).producer_id_expiration_ms == DAY
    assert LogManagerConfig(log_dirs=(tmp_path,)).producer_id_expiration_check_interval_ms == (
        600_000)
    clock = Clock()
    manager = LogManager(LogManagerConfig(log_dirs=(tmp_path,), producer_id_expiration_ms=1000),
                         LogConfig(), clock=clock)
    manager.startup(background=False)
    log = manager.get_or_create_log("events", 0)
    log.append_as_leader(idem(1, 0))
    assert manager.remove_expired_producers() == 0
    clock.now += 1000
    assert manager.remove_expired_producers() == 1 and log.active_producers() == {}
    manager.shutdown()


# ---- compaction --------------------------------------------------------------------------


def test_the_cleaner_keeps_the_last_batch_of_an_active_producer(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, cleanup_policy="compact",
                   min_cleanable_dirty_ratio="0.01")

    def keyed(key: bytes, value: bytes, **producer: int) -> bytearray:
        return bytearray(build_record_batch([SimpleRecord(key, value, timestamp=T0)],
                                            **producer))

    log.append_as_leader(keyed(b"a", b"1", producer_id=PID, producer_epoch=0, base_sequence=0))
    log.roll()
    log.append_as_leader(keyed(b"b", b"1", producer_id=PID, producer_epoch=0, base_sequence=1))
    log.append_as_leader(keyed(b"a", b"2"))
    log.append_as_leader(keyed(b"b", b"2"))
    log.append_as_leader(keyed(b"c", b"1"))  # the group's last batch survives
    log.roll()
    assert snapshots(log) == [1, 5]
    cleaner = LogCleaner(lambda: [log], config=CleanerConfig(), clock=clock)
    result = cleaner.clean_log(log)
    assert result is not None and result.empty_batches_written == 1
    assert result.segments_replaced == 2 and result.segments_written == 1
    assert snapshots(log) == [5]  # the merged-away segment's snapshot went with it
    headers = [h for s in log.segments() for _, h in iter_batch_headers(s.pread(0, s.size))]
    # The producer's first batch goes; its last one stays, empty, with its sequence.
    assert [(h.base_offset, h.records_count, h.producer_id, h.base_sequence)
            for h in headers] == [(1, 0, PID, 1), (2, 1, -1, -1), (3, 1, -1, -1),
                                  (4, 1, -1, -1)]
    crash(log)
    log = open_log(tmp_path, clock, clean=False, cleanup_policy="compact")
    assert state(log) == (0, 1, [(1, 1, 1, 1)])
    assert log.append_as_leader(keyed(b"d", b"1", producer_id=PID, producer_epoch=0,
                                      base_sequence=1)).duplicate


# ---- transactions ------------------------------------------------------------------------


def txn_batch(n: int, seq: int, *, pid: int = PID, epoch: int = 0) -> bytearray:
    records = [SimpleRecord(b"k%d" % i, b"v", timestamp=T0) for i in range(n)]
    return bytearray(build_record_batch(records, producer_id=pid, producer_epoch=epoch,
                                        base_sequence=seq, is_transactional=True))


def end_marker(commit: bool, *, pid: int = PID, epoch: int = 0,
               coordinator_epoch: int = 0) -> bytearray:
    return bytearray(build_control_batch(commit, pid, epoch, coordinator_epoch, T0))


def test_snapshots_round_trip_ongoing_transactions_and_coordinator_epochs(
        tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock)
    log.append_as_leader(txn_batch(2, 0, pid=OTHER))  # 0-1: OTHER opens at 0
    log.append_as_leader(end_marker(True, pid=OTHER, coordinator_epoch=9),
                         origin=AppendOrigin.COORDINATOR)  # 2
    log.append_as_leader(idem(1, 0, pid=3000))  # 3: idempotent only
    log.append_as_leader(txn_batch(3, 0))  # 4-6: PID opens at 4
    log.close()
    entries = {e.producer_id: e for e in decode_snapshot(
        (log.directory / f"{7:020d}.snapshot").read_bytes())}
    assert entries[PID].current_txn_first_offset == 4
    assert entries[PID].coordinator_epoch == -1
    assert entries[OTHER].current_txn_first_offset == -1
    assert entries[OTHER].coordinator_epoch == 9
    assert entries[3000].current_txn_first_offset == -1
    # The bytes of an entry with an open transaction round trip exactly.
    assert encode_snapshot(decode_snapshot(encode_snapshot(entries.values()))) == \
        encode_snapshot(entries.values())
    # Loaded, the open transaction is ongoing again (Kafka's loadProducerEntry).
    manager = ProducerStateManager(log.directory, log.name, [7])
    assert manager.load_latest_snapshot(clock()) == 7
    assert list(manager.ongoing_txns) == [4] and manager.first_unstable_offset == 4
    log = open_log(tmp_path, clock)
    assert log.first_unstable_offset == 4
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append_as_leader(end_marker(False, pid=OTHER, coordinator_epoch=8),
                             origin=AppendOrigin.COORDINATOR)
    info = log.append_as_leader(end_marker(False, coordinator_epoch=9),
                                origin=AppendOrigin.COORDINATOR)
    assert info.first_offset == 7
    log.update_high_watermark(8)
    assert log.first_unstable_offset is None


def test_a_producer_with_an_open_transaction_never_expires(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock)
    log.append_as_leader(txn_batch(1, 0))
    log.append_as_leader(idem(1, 0, pid=OTHER))
    clock.now += 2 * DAY
    assert log.remove_expired_producers() == 1
    assert set(log.active_producers()) == {PID} and log.first_unstable_offset == 0


def test_the_manager_orders_ongoing_transactions_and_keeps_completed_until_the_hw(
        tmp_path: Path) -> None:
    manager = ProducerStateManager(tmp_path, "events-0")
    manager.loaded = True
    for pid, offset in ((PID, 5), (OTHER, 8)):
        header = next(iter_batch_headers(build_record_batch(
            [SimpleRecord(b"k", b"v", timestamp=T0)], base_offset=offset, producer_id=pid,
            producer_epoch=0, base_sequence=0, is_transactional=True)))[1]
        manager.replay(header)
    assert list(manager.ongoing_txns) == [5, 8] and manager.first_unstable_offset == 5
    seen: list[tuple[CompletedTxn, int]] = []
    control = next(iter_batch_headers(build_control_batch(False, PID, 0, 0, T0, 9)))[1]
    manager.replay(control, (0, 0), lambda txn, lso: seen.append((txn, lso)))
    assert seen == [(CompletedTxn(PID, 5, 9, True), 8)]  # OTHER's transaction holds the LSO
    assert manager.first_unstable_offset == 5  # not replicated yet
    manager.on_high_watermark_updated(9)
    assert manager.first_unstable_offset == 5
    manager.on_high_watermark_updated(10)
    assert manager.first_unstable_offset == 8
