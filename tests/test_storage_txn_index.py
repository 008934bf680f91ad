"""The partition side of transactions in storage (KIP-98): the aborted-transaction index
(Kafka's `.txnindex`, byte for byte), markers appended by the coordinator origin, the
first unstable offset moving as markers arrive and the high watermark passes them, aborted
entries written and collected across segments, truncation, retention and compaction
moving the files with their segments, and recovery rebuilding the index after a crash."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from odradek.protocol.exceptions import InvalidRecordError
from odradek.protocol.records import SimpleRecord, build_control_batch, build_record_batch
from odradek.storage.cleaner import CleanerConfig, LogCleaner
from odradek.storage.config import LogConfig
from odradek.storage.errors import InvalidProducerEpochError, StorageError
from odradek.storage.log import Log
from odradek.storage.log_validator import AppendOrigin
from odradek.storage.producer_state import (
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from odradek.storage.txn_index import (
    ENTRY_SIZE,
    AbortedTxn,
    CorruptTxnIndexError,
    TransactionIndex,
    decode_entries,
)

T0 = 1_700_000_000_000
P1, P2, P3 = 1000, 2000, 3000
COORDINATOR = AppendOrigin.COORDINATOR


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def txn(n: int, seq: int, *, pid: int = P1, epoch: int = 0, key: bytes = b"k") -> bytearray:
    """A transactional producer's batch of n records."""
    records = [SimpleRecord(key + b"%d" % i, b"v", timestamp=T0) for i in range(n)]
    return bytearray(build_record_batch(records, producer_id=pid, producer_epoch=epoch,
                                        base_sequence=seq, is_transactional=True))


def idem(n: int, seq: int, *, pid: int = P1, epoch: int = 0) -> bytearray:
    records = [SimpleRecord(b"k%d" % i, b"v", timestamp=T0) for i in range(n)]
    return bytearray(build_record_batch(records, producer_id=pid, producer_epoch=epoch,
                                        base_sequence=seq))


def plain(n: int = 1) -> bytearray:
    return bytearray(build_record_batch([SimpleRecord(b"k", b"v", timestamp=T0)] * n))


def marker(commit: bool, *, pid: int = P1, epoch: int = 0, coordinator_epoch: int = 0,
           ) -> bytearray:
    return bytearray(build_control_batch(commit, pid, epoch, coordinator_epoch, T0))


def open_log(directory: Path, clock: Clock | None = None, *, clean: bool = True,
             **props: str) -> Log:
    config = LogConfig.from_properties({k.replace("_", "."): v for k, v in props.items()})
    return Log.open(directory / "events-0", config, clock=clock or Clock(),
                    clean_shutdown=clean)


def end_txn(log: Log, commit: bool, **kw: int) -> int:
    """Appends a marker as the coordinator does; returns its offset."""
    return log.append_as_leader(marker(commit, **kw), origin=COORDINATOR).first_offset


def crash(log: Log) -> None:
    for segment in log.segments():
        segment.close_handles()


def index_entries(log: Log) -> dict[int, list[AbortedTxn]]:
    """Each segment's .txnindex as on disk, read by its bytes."""
    out = {}
    for segment in log.segments():
        path = segment.txn_index.path
        out[segment.base_offset] = decode_entries(path.read_bytes()) if path.exists() else []
    return out


# ---- the index file -------------------------------------------------------------------


def test_the_index_is_kafkas_format_and_created_by_its_first_entry(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex", 0)
    assert not index.path.exists() and index.entries == []
    index.append(AbortedTxn(7, 3, 10, 3))
    index.append(AbortedTxn(8, 11, 12, 13))
    assert index.path.read_bytes() == (struct.pack(">hqqqq", 0, 7, 3, 10, 3)
                                       + struct.pack(">hqqqq", 0, 8, 11, 12, 13))
    assert ENTRY_SIZE == 34
    assert TransactionIndex(index.path, 0).entries == [AbortedTxn(7, 3, 10, 3),
                                                      AbortedTxn(8, 11, 12, 13)]
    with pytest.raises(StorageError):  # markers come in offset order
        index.append(AbortedTxn(9, 5, 12, 13))


def test_truncation_cuts_entries_at_and_after_the_offset(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex", 0)
    for i in range(3):
        index.append(AbortedTxn(1, 10 * i, 10 * i + 5, 10 * i + 6))
    index.truncate_to(15)
    assert index.entries == [AbortedTxn(1, 0, 5, 6), AbortedTxn(1, 10, 15, 16)][:1]
    assert index.path.stat().st_size == ENTRY_SIZE
    assert TransactionIndex(index.path, 0).entries == [AbortedTxn(1, 0, 5, 6)]
    index.truncate_to(0)
    assert not index.path.exists() and index.entries == []


def test_collect_stops_at_an_entry_whose_lso_reaches_the_bound(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex", 0)
    index.append(AbortedTxn(1, 0, 4, 5))
    index.append(AbortedTxn(2, 6, 9, 10))
    index.append(AbortedTxn(3, 12, 20, 21))
    result = index.collect_aborted(5, 10)
    assert result.aborted == [AbortedTxn(2, 6, 9, 10)] and result.is_complete
    result = index.collect_aborted(0, 100)
    assert len(result.aborted) == 3 and not result.is_complete


def test_a_torn_last_entry_is_ignored_and_an_unknown_version_refused(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(AbortedTxn(1, 0, 4, 5).encode() + b"\0" * 10)
    index = TransactionIndex(path, 0)
    assert index.entries == [AbortedTxn(1, 0, 4, 5)]
    index.append(AbortedTxn(1, 6, 8, 9))  # after the whole entries
    assert decode_entries(path.read_bytes()) == [AbortedTxn(1, 0, 4, 5), AbortedTxn(1, 6, 8, 9)]
    path.write_bytes(struct.pack(">hqqqq", 1, 1, 0, 4, 5))
    with pytest.raises(CorruptTxnIndexError):
        _ = TransactionIndex(path, 0).entries


# ---- markers, the producer state and the first unstable offset --------------------------


def test_transactions_open_at_their_first_offset_and_markers_end_them(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(plain(2))  # 0-1
    log.append_as_leader(txn(2, 0))  # 2-3: P1 opens at 2
    log.append_as_leader(txn(1, 0, pid=P2))  # 4: P2 opens at 4
    log.append_as_leader(txn(1, 2))  # 5
    assert log.first_unstable_offset == 2
    entry = log.active_producers()[P1]
    assert entry.current_txn_first_offset == 2
    assert end_txn(log, commit=True) == 6
    # Decided, but the HW has not passed the marker yet: still unstable (unreplicatedTxns).
    assert log.first_unstable_offset == 2
    assert log.last_stable_offset(high_watermark=7) == 2
    log.update_high_watermark(7)
    assert log.first_unstable_offset == 4 and log.last_stable_offset(7) == 4
    assert end_txn(log, commit=False, pid=P2) == 7
    log.update_high_watermark(7)  # the abort marker at 7 is not below the HW yet
    assert log.first_unstable_offset == 4
    log.update_high_watermark(8)
    assert log.first_unstable_offset is None and log.last_stable_offset(8) == 8
    assert log.active_producers()[P1].current_txn_first_offset == -1
    # Only the abort is indexed, with the LSO after it (no other transaction open).
    assert index_entries(log) == {0: [AbortedTxn(P2, 4, 7, 8)]}


def test_an_aborts_lso_is_the_oldest_other_open_transaction(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(txn(1, 0))  # 0: P1
    log.append_as_leader(txn(1, 0, pid=P2))  # 1: P2
    end_txn(log, commit=False, pid=P2)  # 2
    assert index_entries(log) == {0: [AbortedTxn(P2, 1, 2, 0)]}
    end_txn(log, commit=False)  # 3
    assert index_entries(log)[0][-1] == AbortedTxn(P1, 0, 3, 4)


def test_a_marker_from_an_older_coordinator_epoch_is_fenced(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(txn(1, 0))
    end_txn(log, commit=True, coordinator_epoch=5)
    assert log.active_producers()[P1].coordinator_epoch == 5
    log.append_as_leader(txn(1, 1))
    log.update_high_watermark(2)
    end = log.log_end_offset
    with pytest.raises(TransactionCoordinatorFencedError) as e:
        end_txn(log, commit=False, coordinator_epoch=4)
    assert e.value.error_code == 52  # TRANSACTION_COORDINATOR_FENCED
    assert log.log_end_offset == end and log.first_unstable_offset == 2
    end_txn(log, commit=False, coordinator_epoch=5)  # the same epoch is fine
    log.update_high_watermark(log.log_end_offset)
    assert log.first_unstable_offset is None


def test_a_marker_with_an_older_producer_epoch_is_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(txn(1, 0, epoch=3))
    with pytest.raises(InvalidProducerEpochError):
        end_txn(log, commit=True, epoch=2)
    end_txn(log, commit=True, epoch=4)  # a bumped epoch (an abort on timeout) is fine


def test_clients_cannot_write_markers(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(txn(1, 0))
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(marker(True))
    assert log.log_end_offset == 1 and log.first_unstable_offset == 0


def test_a_plain_batch_inside_a_transaction_is_invalid_txn_state(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(txn(1, 0))
    with pytest.raises(InvalidTxnStateError):
        log.append_as_leader(idem(1, 1))
    assert log.log_end_offset == 1
    # Idempotent producers are untouched: no transaction, no LSO held back.
    log.append_as_leader(idem(1, 0, pid=P2))
    log.update_high_watermark(log.log_end_offset)
    assert log.first_unstable_offset == 0


def test_an_empty_transactions_marker_completes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    end_txn(log, commit=False)
    log.update_high_watermark(log.log_end_offset)
    assert log.first_unstable_offset is None
    assert index_entries(log) == {0: []}


# ---- across segments, truncation, retention and compaction -------------------------------


def _aborts_across_segments(log: Log) -> None:
    """Three aborted transactions of P1 with P2's committed one open across them."""
    log.append_as_leader(txn(1, 0, pid=P2))  # 0
    for i in range(3):
        log.append_as_leader(txn(2, 2 * i))
        log.roll()
        end_txn(log, commit=False)
    end_txn(log, commit=True, pid=P2)


def test_aborted_transactions_are_collected_across_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    _aborts_across_segments(log)
    # Segments: [0-2], [3-5], [6-8], [9-10]; aborts at 3, 6, 9; P2's commit at 10.
    assert [s.base_offset for s in log.segments()] == [0, 3, 6, 9]
    assert index_entries(log) == {0: [], 3: [AbortedTxn(P1, 1, 3, 0)],
                                  6: [AbortedTxn(P1, 4, 6, 0)], 9: [AbortedTxn(P1, 7, 9, 0)]}
    assert log.collect_aborted_transactions(0, 11) == [
        AbortedTxn(P1, 1, 3, 0), AbortedTxn(P1, 4, 6, 0), AbortedTxn(P1, 7, 9, 0)]
    assert log.collect_aborted_transactions(5, 7) == [AbortedTxn(P1, 4, 6, 0)]
    assert log.collect_aborted_transactions(10, 11) == []
    log.update_high_watermark(11)
    assert log.first_unstable_offset is None


def test_truncation_and_retention_take_the_index_with_their_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, retention_ms="-1")
    _aborts_across_segments(log)
    log.truncate_to(7)
    assert sorted(p.name for p in log.directory.glob("*.txnindex")) == [
        "00000000000000000003.txnindex", "00000000000000000006.txnindex"]
    assert log.collect_aborted_transactions(0, 7) == [AbortedTxn(P1, 1, 3, 0),
                                                      AbortedTxn(P1, 4, 6, 0)]
    # After a truncation the state is reloaded: P1's transaction at 7 is gone, P2's open.
    assert log.first_unstable_offset == 0
    assert log.active_producers()[P1].current_txn_first_offset == -1
    log.maybe_increment_log_start_offset(6)
    log.delete_old_segments(T0)
    assert [s.base_offset for s in log.segments()] == [6]
    assert not (log.directory / "00000000000000000003.txnindex").exists()
    log.delete_pending_files(T0 + 10**9)
    assert sorted(p.name for p in log.directory.iterdir() if "txnindex" in p.name) == [
        "00000000000000000006.txnindex"]


def test_compaction_keeps_the_aborts_of_the_segments_it_merges(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock, cleanup_policy="compact", min_cleanable_dirty_ratio="0",
                   segment_ms=str(7 * 86_400_000))
    _aborts_across_segments(log)
    log.append_as_leader(plain())
    log.roll()
    log.update_high_watermark(log.log_end_offset)  # decided and replicated: cleanable
    before = log.collect_aborted_transactions(0, log.log_end_offset)
    cleaner = LogCleaner(lambda: [log], config=CleanerConfig(), clock=clock)
    result = cleaner.clean_log(log, now=clock())
    assert result is not None and result.segments_replaced > 1
    assert log.collect_aborted_transactions(0, log.log_end_offset) == before
    live = [p.name for p in log.directory.iterdir() if p.name.endswith(".txnindex")]
    assert len(live) < 3  # merged: fewer files, the same entries
    log.delete_pending_files(clock() + 10**9)
    log.close()
    log = open_log(tmp_path, clock, cleanup_policy="compact")
    assert log.collect_aborted_transactions(0, log.log_end_offset) == before


# ---- recovery and restarts ---------------------------------------------------------------


def test_recovery_rebuilds_the_index_and_the_state_after_a_crash(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock)
    _aborts_across_segments(log)
    log.append_as_leader(txn(1, 6))  # 11: P1 open again
    before = index_entries(log)
    directory = log.directory
    crash(log)
    for path in directory.iterdir():
        if path.name.endswith((".txnindex", ".snapshot")):
            path.unlink()
    log = open_log(tmp_path, clock, clean=False)
    assert index_entries(log) == before
    # Replayed markers count as decided once the partition tells the log its HW.
    assert log.first_unstable_offset == 0
    log.update_high_watermark(11)
    assert log.first_unstable_offset == 11
    assert log.active_producers()[P1].current_txn_first_offset == 11
    assert log.active_producers()[P2].current_txn_first_offset == -1


def test_recovery_from_a_recovery_point_uses_the_snapshot_below_it(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock)
    log.append_as_leader(txn(1, 0, pid=P2))  # 0: open through everything
    log.append_as_leader(txn(1, 0))  # 1
    log.roll()  # snapshot at 2 with both transactions open
    end_txn(log, commit=False)  # 2: its first offset lies in the first segment
    log.flush_up_to(2)
    assert log.recovery_point == 2
    crash(log)
    (log.directory / "00000000000000000002.txnindex").unlink()
    log = Log.open(tmp_path / "events-0", log.config, clock=clock, clean_shutdown=False,
                   recovery_point=2)
    assert index_entries(log) == {0: [], 2: [AbortedTxn(P1, 1, 2, 0)]}
    assert log.first_unstable_offset == 0


def test_a_clean_restart_keeps_ongoing_transactions_from_the_snapshot(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock)
    log.append_as_leader(plain())
    log.append_as_leader(txn(2, 0))
    log.append_as_leader(txn(1, 0, pid=P2))
    end_txn(log, commit=True, pid=P2, coordinator_epoch=3)
    log.close()
    log = open_log(tmp_path, clock)
    assert log.first_unstable_offset == 1
    entries = log.active_producers()
    assert entries[P1].current_txn_first_offset == 1
    assert entries[P2].coordinator_epoch == 3
    with pytest.raises(TransactionCoordinatorFencedError):
        end_txn(log, commit=True, pid=P2, coordinator_epoch=2)
    end_txn(log, commit=False)
    log.update_high_watermark(log.log_end_offset)
    assert log.first_unstable_offset is None
    assert index_entries(log)[0] == [AbortedTxn(P1, 1, 5, 6)]


def test_a_followers_copy_gets_the_same_index(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    leader.append_as_leader(txn(2, 0))
    leader.append_as_leader(txn(1, 0, pid=P2))
    end_txn(leader, commit=False)
    end_txn(leader, commit=True, pid=P2)
    follower = open_log(tmp_path / "follower")
    for segment in leader.segments():
        follower.append_as_follower(segment.pread(0, segment.size))
    assert index_entries(follower) == index_entries(leader) == {0: [AbortedTxn(P1, 0, 3, 2)]}
    follower.update_high_watermark(5)
    assert follower.first_unstable_offset is None


def test_an_interrupted_swap_keeps_the_index_of_the_swapped_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    _aborts_across_segments(log)
    log.close()
    directory = log.directory
    # As a crash between renaming the swapped .log live and its .txnindex.
    os.replace(directory / "00000000000000000003.txnindex",
               directory / "00000000000000000003.txnindex.swap")
    log = open_log(tmp_path)
    assert (directory / "00000000000000000003.txnindex").exists()
    assert log.collect_aborted_transactions(3, 4) == [AbortedTxn(P1, 1, 3, 0)]


def test_recovery_drops_the_entry_of_a_torn_abort_marker(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, clock)
    log.append_as_leader(txn(2, 0))  # 0-1
    end_txn(log, commit=False)  # 2
    log.append_as_leader(txn(1, 2))  # 3: a new transaction
    end_txn(log, commit=False)  # 4: torn by the crash
    assert index_entries(log) == {0: [AbortedTxn(P1, 0, 2, 3), AbortedTxn(P1, 3, 4, 5)]}
    segment = log.active_segment
    crash(log)
    os.truncate(segment.log_path, segment.size - 5)
    log = open_log(tmp_path, clock, clean=False)
    assert log.log_end_offset == 4
    assert index_entries(log) == {0: [AbortedTxn(P1, 0, 2, 3)]}
    log.update_high_watermark(4)
    assert log.first_unstable_offset == 3  # open again: its marker was lost
    end_txn(log, commit=True)
    log.update_high_watermark(5)
    assert log.first_unstable_offset is None
