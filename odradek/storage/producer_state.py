"""Idempotent-producer state of one log: Kafka's ProducerStateManager, ProducerStateEntry,
ProducerAppendInfo and BatchMetadata.

For every producer id that wrote to the log (batches with producerId >= 0) the log keeps
the producer epoch, the metadata of its last 5 batches (sequences, offsets, timestamp),
the coordinator epoch of the last transaction marker, the first offset of its open
transaction and the last timestamp, for expiry. A client append is checked against it
before anything is written: a retry of one of the cached batches is a duplicate
(acknowledged with the original offsets), an older epoch is INVALID_PRODUCER_EPOCH, a gap
or an old retry is OUT_OF_ORDER_SEQUENCE_NUMBER.

Transactions (KIP-98): a transactional batch (attributes bit 4) opens its producer's
transaction at its first offset; a control batch (bit 5, a COMMIT or ABORT marker the
coordinator writes) ends it and yields a CompletedTxn. A marker whose coordinator epoch
is older than the last one seen for the producer is TRANSACTION_COORDINATOR_FENCED. The
manager keeps the ongoing transactions by first offset and, as Kafka's unreplicatedTxns,
the completed ones until the high watermark passes their marker: the smallest first
offset of both is the first unstable offset, which bounds what read_committed consumers
see (the last stable offset).

Snapshots are Kafka's `<20-digit offset>.snapshot` files, the state of the producers for
every offset below that one:

    version  int16  = 1
    crc      uint32   CRC-32C of everything after this field
    count    int32    then `count` entries of 46 bytes:
      ProducerId int64, Epoch int16, LastSequence int32, LastOffset int64,
      OffsetDelta int32, Timestamp int64, CoordinatorEpoch int32, CurrentTxnFirstOffset int64

An entry keeps only the last batch (as Kafka's), so after a restart from a snapshot only
that batch is recognised as a duplicate. This module holds the state and the files; the
Log decides when to load, replay batch headers, snapshot and truncate.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import re
import struct
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from crc32c import crc32c

from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import (
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    ControlRecordType,
    RecordBatchHeader,
)
from odradek.storage.checkpoints import TMP_SUFFIX, write_durably
from odradek.storage.errors import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    StorageError,
)

logger = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
NO_COORDINATOR_EPOCH = -1
NO_TXN_FIRST_OFFSET = -1

INT32_MAX = 2**31 - 1
_SNAPSHOT_HEADER = struct.Struct(">hIi")  # version, crc, entry count
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_START = 6  # the CRC covers everything after version and crc
_SNAPSHOT_FILE = re.compile(r"^(\d{20})\.snapshot$")


class CorruptSnapshotError(StorageError):
    """A snapshot file that is not one Kafka would write; the log ignores it, deletes it
    and rebuilds the state from an older snapshot and the log. Never reaches a client."""


class TransactionCoordinatorFencedError(StorageError):
    """A transaction marker whose coordinator epoch is older than the last one the log saw
    for its producer: written by a coordinator that lost its partition of
    __transaction_state (a zombie). Kafka's TransactionCoordinatorFencedException."""

    error_code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


class InvalidTxnStateError(StorageError):
    """A non-transactional batch from a producer whose transaction is open (Kafka's
    InvalidTxnStateException)."""

    error_code = ErrorCode.INVALID_TXN_STATE


# What a control batch's record says: (control type, coordinator epoch); the epoch is -1
# for control records other than COMMIT and ABORT.
ControlInfo = tuple[int, int]


class CompletedTxn(NamedTuple):
    """A transaction ended by a marker at `last_offset` (Kafka's CompletedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool


@dataclass(slots=True)
class TxnMetadata:
    """An ongoing (last_offset None) or completed-but-not-yet-stable transaction."""

    producer_id: int
    first_offset: int
    last_offset: int | None = None


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def decrement_sequence(sequence: int, decrement: int) -> int:
    """The sequence `decrement` before `sequence`, wrapping below 0 to int32 max."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class BatchMetadata(NamedTuple):
    """One appended batch of a producer: what a retry is matched against."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int  # the batch's max timestamp (the append time under LogAppendTime)

    @property
    def offset_delta(self) -> int:
        return self.last_offset - self.first_offset


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    coordinator_epoch: int = NO_COORDINATOR_EPOCH
    last_timestamp: int = -1
    current_txn_first_offset: int = NO_TXN_FIRST_OFFSET

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id, self.producer_epoch,
            deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN), self.coordinator_epoch,
            self.last_timestamp, self.current_txn_first_offset,
        )

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The cached batch with exactly this epoch and sequence range, if any."""
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def _set_epoch(self, epoch: int) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()  # the cached sequences belong to the old epoch
            self.producer_epoch = epoch

    def add_batch(self, epoch: int, first_seq: int, last_seq: int, first_offset: int,
                  last_offset: int, timestamp: int) -> None:
        self._set_epoch(epoch)
        self.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset,
                                          timestamp))  # the deque drops the oldest of 5
        self.last_timestamp = timestamp

    def end_transaction(self, epoch: int, control: ControlInfo | None, offset: int,
                        timestamp: int) -> CompletedTxn | None:
        """A control batch at `offset` (a COMMIT/ABORT marker): ends the open transaction,
        if any (Kafka's appendEndTxnMarker: a marker without data completes nothing)."""
        completed = None
        control_type, coordinator_epoch = control if control is not None else (-1, -1)
        first = self.current_txn_first_offset
        if first >= 0 and control_type in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            completed = CompletedTxn(self.producer_id, first, offset,
                                     control_type == ControlRecordType.ABORT)
        self._set_epoch(epoch)
        self.last_timestamp = timestamp
        if control_type in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            self.current_txn_first_offset = NO_TXN_FIRST_OFFSET
            self.coordinator_epoch = coordinator_epoch
        return completed


class ProducerAppendInfo:
    """One producer's state as the batches of a request would leave it: each batch is
    checked against the state its predecessors left, so several batches of a producer in
    one request are checked cumulatively. Nothing changes until ProducerStateManager.update,
    which the log calls only once the batches are written. `transactions` are the
    transactions the request opens, `completed` those its markers end (in offset order)."""

    __slots__ = ("completed", "entry", "log_name", "producer_id", "transactions")

    def __init__(self, producer_id: int, current: ProducerStateEntry | None,
                 log_name: str) -> None:
        self.producer_id = producer_id
        self.entry = current.copy() if current is not None else ProducerStateEntry(producer_id)
        self.log_name = log_name
        self.transactions: list[TxnMetadata] = []
        self.completed: list[CompletedTxn] = []

    def _check_epoch(self, epoch: int, offset: int) -> None:
        current = self.entry.producer_epoch
        if epoch < current:
            raise InvalidProducerEpochError(
                f"epoch {epoch} of producer {self.producer_id} at offset {offset} in "
                f"{self.log_name} is older than the last seen epoch {current}"
            )

    def append_data_batch(self, epoch: int, first_seq: int, last_seq: int, first_offset: int,
                          last_offset: int, timestamp: int, is_transactional: bool = False,
                          *, check_sequence: bool = True) -> None:
        """Kafka's checkProducerEpoch and checkSequence for a client batch (the sequence
        only for clients: a coordinator's batches carry none), then the batch."""
        entry = self.entry
        current = entry.producer_epoch
        self._check_epoch(epoch, first_offset)
        if not check_sequence:
            pass
        elif epoch != current:
            # A new epoch starts at sequence 0; a producer the log knows nothing about
            # (current epoch -1: never seen, or expired) may start anywhere.
            if first_seq != 0 and current != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"invalid sequence {first_seq} for the new epoch {epoch} of producer "
                    f"{self.producer_id} at offset {first_offset} in {self.log_name} "
                    f"(current epoch {current}): a new epoch starts at 0"
                )
        elif current != NO_PRODUCER_EPOCH and not in_sequence(entry.last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"out of order sequence {first_seq} of producer {self.producer_id} at offset "
                f"{first_offset} in {self.log_name}: the last sequence is {entry.last_seq}"
            )
        if entry.current_txn_first_offset >= 0 and not is_transactional:
            raise InvalidTxnStateError(
                f"non-transactional batch of producer {self.producer_id} at offset "
                f"{first_offset} in {self.log_name} while its transaction from offset "
                f"{entry.current_txn_first_offset} is open"
            )
        entry.add_batch(epoch, first_seq, last_seq, first_offset, last_offset, timestamp)
        if is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = first_offset
            self.transactions.append(TxnMetadata(self.producer_id, first_offset))

    def append_end_txn_marker(self, epoch: int, control: ControlInfo, offset: int,
                              timestamp: int) -> None:
        """A coordinator's marker: Kafka's checkProducerEpoch and checkCoordinatorEpoch."""
        self._check_epoch(epoch, offset)
        coordinator_epoch = control[1]
        if self.entry.coordinator_epoch > coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"invalid coordinator epoch for producer {self.producer_id} at offset "
                f"{offset} in {self.log_name}: {coordinator_epoch} (zombie), "
                f"{self.entry.coordinator_epoch} (current)"
            )
        completed = self.entry.end_transaction(epoch, control, offset, timestamp)
        if completed is not None:
            self.completed.append(completed)


class ProducerStateManager:
    """The producers of one log and its snapshot files.

    `loaded` is False until the log has loaded the state (the Log loads it on first use, so
    that opening a log reads no file); while it is False, `producers` is empty and only the
    snapshot bookkeeping is valid.
    """

    def __init__(self, directory: Path, log_name: str, snapshot_offsets: Iterable[int] = (),
                 *, producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> None:
        self.directory = directory
        self.log_name = log_name
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        self.loaded = False
        self._snapshots = sorted(set(snapshot_offsets))
        # Ongoing transactions by first offset, kept in offset order (Kafka's ongoingTxns),
        # and completed ones whose marker the high watermark has not passed yet (Kafka's
        # unreplicatedTxns): both hold the last stable offset back.
        self.ongoing_txns: dict[int, TxnMetadata] = {}
        self.unreplicated_txns: dict[int, TxnMetadata] = {}

    @classmethod
    def from_file_names(cls, directory: Path, log_name: str, names: Iterable[str], *,
                        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
                        ) -> ProducerStateManager:
        """From a listing of the log's directory; removes half-written snapshots (.tmp)."""
        offsets = []
        for name in names:
            match = _SNAPSHOT_FILE.match(name)
            if match:
                offsets.append(int(match.group(1)))
            elif name.endswith(SNAPSHOT_SUFFIX + TMP_SUFFIX):
                with contextlib.suppress(OSError):
                    (directory / name).unlink()
        return cls(directory, log_name, offsets,
                   producer_id_expiration_ms=producer_id_expiration_ms)

    # ---- state ------------------------------------------------------------------------

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def prepare_appends(
        self, batches: Iterable[tuple[RecordBatchHeader, int, int, ControlInfo | None]],
        *, from_client: bool = True,
    ) -> tuple[list[ProducerAppendInfo], BatchMetadata | None]:
        """Checks a leader's batches, given as (header, first offset, timestamp, control
        record of a control batch). Returns the producers' updated states, or the cached
        batch a client request duplicates (then nothing is to be written: Kafka
        acknowledges a request at its first duplicate batch). A coordinator's batches
        (`from_client` False) are not matched against retries and carry no sequences.
        Raises InvalidProducerEpochError / OutOfOrderSequenceError / InvalidTxnStateError /
        TransactionCoordinatorFencedError."""
        infos: dict[int, ProducerAppendInfo] = {}
        for header, first_offset, timestamp, control in batches:
            producer_id = header.producer_id
            if producer_id < 0:
                continue
            first_seq, last_seq = header.base_sequence, header.last_sequence
            # Against the state before this request, as Kafka's findDuplicateBatch.
            current = self.producers.get(producer_id)
            if current is not None and from_client:
                duplicate = current.find_duplicate(header.producer_epoch, first_seq, last_seq)
                if duplicate is not None:
                    return [], duplicate
            info = infos.get(producer_id)
            if info is None:
                info = infos[producer_id] = ProducerAppendInfo(producer_id, current,
                                                               self.log_name)
            if header.is_control:
                info.append_end_txn_marker(header.producer_epoch,
                                           control if control is not None else (-1, -1),
                                           first_offset, timestamp)
            else:
                info.append_data_batch(header.producer_epoch, first_seq, last_seq,
                                       first_offset, first_offset + header.last_offset_delta,
                                       timestamp, header.is_transactional,
                                       check_sequence=from_client)
        return list(infos.values()), None

    def update(self, info: ProducerAppendInfo) -> None:
        """Applies a checked producer's state once its batches are written; the
        transactions it opened become ongoing. Its completed ones are ended by the log
        with complete_txn, after it has used last_stable_offset_after for the index."""
        self.producers[info.producer_id] = info.entry
        for txn in info.transactions:
            self._add_ongoing(txn)

    def _add_ongoing(self, txn: TxnMetadata) -> None:
        ongoing = self.ongoing_txns
        if ongoing and txn.first_offset < next(reversed(ongoing)):
            ongoing[txn.first_offset] = txn  # out of order (never in practice): re-sort
            self.ongoing_txns = dict(sorted(ongoing.items()))
        else:
            ongoing[txn.first_offset] = txn

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """The last stable offset once `completed` ends (Kafka's lastStableOffset(txn)): the
        first offset of the oldest other ongoing transaction, or just past the marker. It
        goes into the aborted-transaction index entry."""
        for txn in self.ongoing_txns.values():
            if txn.producer_id != completed.producer_id:
                return txn.first_offset
        return completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        """The transaction is decided; it stays unstable until the high watermark passes
        its marker (on_high_watermark_updated)."""
        txn = self.ongoing_txns.pop(completed.first_offset, None)
        if txn is None:
            txn = TxnMetadata(completed.producer_id, completed.first_offset)
        txn.last_offset = completed.last_offset
        self.unreplicated_txns[completed.first_offset] = txn

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Completed transactions whose marker is below the high watermark are stable."""
        if self.unreplicated_txns:
            self.unreplicated_txns = {
                first: txn for first, txn in self.unreplicated_txns.items()
                if txn.last_offset is None or txn.last_offset >= high_watermark}

    @property
    def first_unstable_offset(self) -> int | None:
        """The smallest first offset of an ongoing or not yet replicated transaction."""
        first = next(iter(self.ongoing_txns), None)
        if self.unreplicated_txns:
            oldest = min(self.unreplicated_txns)
            first = oldest if first is None else min(first, oldest)
        return first

    def replay(self, header: RecordBatchHeader, control: ControlInfo | None = None,
               on_completed: Callable[[CompletedTxn, int], None] | None = None) -> None:
        """Applies a batch already in the log (loading, follower appends, recovery)
        without the client's checks: the leader made them. Offsets are the header's;
        `control` is a control batch's record. A transaction it completes is passed to
        `on_completed` with the last stable offset after it (for the aborted-transaction
        index) and then completed."""
        producer_id = header.producer_id
        if producer_id < 0:
            return
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id)
        if header.is_control:
            completed = entry.end_transaction(header.producer_epoch, control,
                                              header.base_offset, header.max_timestamp)
            if completed is not None:
                if on_completed is not None:
                    on_completed(completed, self.last_stable_offset_after(completed))
                self.complete_txn(completed)
        else:
            entry.add_batch(header.producer_epoch, header.base_sequence, header.last_sequence,
                            header.base_offset, header.last_offset, header.max_timestamp)
            if header.is_transactional and entry.current_txn_first_offset < 0:
                entry.current_txn_first_offset = header.base_offset
                self._add_ongoing(TxnMetadata(producer_id, header.base_offset))

    def is_expired(self, entry: ProducerStateEntry, now: int) -> bool:
        # A producer with an open transaction stays until the transaction ends.
        return (entry.current_txn_first_offset < 0
                and now - entry.last_timestamp >= self.producer_id_expiration_ms)

    def remove_expired_producers(self, now: int) -> int:
        """Forgets producers idle for producer.id.expiration.ms (by their last batch's
        timestamp). Returns how many."""
        expired = [pid for pid, e in self.producers.items() if self.is_expired(e, now)]
        for producer_id in expired:
            del self.producers[producer_id]
        return len(expired)

    def reset(self, *, loaded: bool) -> None:
        """Empties the state; `loaded` says whether empty is the truth (a log started over)
        or the state must be loaded again (after a truncation)."""
        self.producers = {}
        self.ongoing_txns = {}
        self.unreplicated_txns = {}
        self.loaded = loaded

    # ---- snapshots --------------------------------------------------------------------

    @property
    def snapshot_offsets(self) -> list[int]:
        return list(self._snapshots)

    @property
    def latest_snapshot_offset(self) -> int | None:
        return self._snapshots[-1] if self._snapshots else None

    def snapshot_path(self, offset: int) -> Path:
        return self.directory / snapshot_file_name(offset)

    def take_snapshot(self, offset: int) -> Path | None:
        """Writes the state as the snapshot at `offset` (the log end offset, or a new
        segment's base offset); nothing when one is there already."""
        if not self.loaded:
            raise StorageError(f"{self.log_name}: producer state not loaded, cannot snapshot")
        if offset in self._snapshots:
            return None
        path = self.snapshot_path(offset)
        write_snapshot(path, self.producers.values())
        bisect.insort(self._snapshots, offset)
        return path

    def load_latest_snapshot(self, now: int, at_most: int | None = None) -> int | None:
        """Replaces the state with the newest readable snapshot (at or below `at_most` when
        given), without producers expired by `now`; corrupt snapshots are deleted and the
        next older one tried. Returns its offset, or None when there is none (the state is
        then empty)."""
        self.producers = {}
        self.ongoing_txns = {}
        self.unreplicated_txns = {}
        while True:
            candidates = (self._snapshots if at_most is None
                          else self._snapshots[:bisect.bisect_right(self._snapshots, at_most)])
            if not candidates:
                return None
            offset = candidates[-1]
            path = self.snapshot_path(offset)
            try:
                entries = read_snapshot(path)
            except (CorruptSnapshotError, OSError) as e:
                logger.warning("%s: ignoring producer snapshot %s: %s", self.log_name,
                               path.name, e)
                self._delete(offset)
                continue
            self.producers = {e.producer_id: e for e in entries if not self.is_expired(e, now)}
            # Kafka's loadProducerEntry: an open transaction is ongoing again.
            for first, pid in sorted((e.current_txn_first_offset, e.producer_id)
                                     for e in self.producers.values()
                                     if e.current_txn_first_offset >= 0):
                self.ongoing_txns[first] = TxnMetadata(pid, first)
            return offset

    def delete_snapshots_after(self, offset: int) -> None:
        """Snapshots of offsets the log no longer has (truncation, crash recovery)."""
        while self._snapshots and self._snapshots[-1] > offset:
            self._delete(self._snapshots[-1])

    def delete_snapshots_before(self, offset: int) -> None:
        """Snapshots below `offset` (retention), always keeping the newest."""
        while len(self._snapshots) > 1 and self._snapshots[0] < offset:
            self._delete(self._snapshots[0])

    def delete_snapshots_at(self, offsets: Iterable[int]) -> None:
        """The snapshots of segments that compaction merged away, keeping the newest."""
        for offset in set(offsets):
            if offset in self._snapshots and offset != self._snapshots[-1]:
                self._delete(offset)

    def delete_all_snapshots(self) -> None:
        for offset in list(self._snapshots):
            self._delete(offset)

    def remove_stray_snapshots(self, segment_bases: Iterable[int]) -> None:
        """Kafka's removeStraySnapshots: snapshots at no segment's base offset go, except
        the newest when it lies in the last segment (the one a clean shutdown wrote at the
        log end offset)."""
        bases = set(segment_bases)
        if not bases:
            return
        strays = [o for o in self._snapshots if o not in bases]
        if strays and strays[-1] >= max(bases):
            strays.pop()
        for offset in strays:
            self._delete(offset)

    def _delete(self, offset: int) -> None:
        self._snapshots.remove(offset)
        try:
            self.snapshot_path(offset).unlink(missing_ok=True)
        except OSError as e:
            raise StorageError(f"cannot delete {self.snapshot_path(offset)}: {e}") from e


# ---- the snapshot file format ------------------------------------------------------------


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """Kafka's producer snapshot (version 1), entries by producer id."""
    rows = sorted(entries, key=lambda e: e.producer_id)
    data = bytearray(_SNAPSHOT_HEADER.size + _SNAPSHOT_ENTRY.size * len(rows))
    _SNAPSHOT_HEADER.pack_into(data, 0, SNAPSHOT_VERSION, 0, len(rows))
    pos = _SNAPSHOT_HEADER.size
    for e in rows:
        _SNAPSHOT_ENTRY.pack_into(
            data, pos, e.producer_id, e.producer_epoch, e.last_seq, e.last_data_offset,
            e.last_offset_delta, e.last_timestamp, e.coordinator_epoch,
            e.current_txn_first_offset,
        )
        pos += _SNAPSHOT_ENTRY.size
    struct.pack_into(">I", data, 2, crc32c(memoryview(data)[_CRC_START:]))
    return bytes(data)


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    """The entries of a snapshot; CorruptSnapshotError unless it is exactly what
    encode_snapshot (or Kafka) writes."""
    if len(data) < _SNAPSHOT_HEADER.size:
        raise CorruptSnapshotError(f"{len(data)} bytes: shorter than the snapshot header")
    version, crc, count = _SNAPSHOT_HEADER.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    computed = crc32c(memoryview(data)[_CRC_START:])
    if crc != computed:
        raise CorruptSnapshotError(f"CRC mismatch: stored {crc:#010x}, computed {computed:#010x}")
    if count < 0 or len(data) != _SNAPSHOT_HEADER.size + count * _SNAPSHOT_ENTRY.size:
        raise CorruptSnapshotError(f"{count} entries do not match the {len(data)} bytes")
    entries = []
    for (producer_id, epoch, last_seq, last_offset, offset_delta, timestamp,
         coordinator_epoch, txn_first_offset) in _SNAPSHOT_ENTRY.iter_unpack(
            memoryview(data)[_SNAPSHOT_HEADER.size:]):
        entry = ProducerStateEntry(
            producer_id, epoch, coordinator_epoch=coordinator_epoch, last_timestamp=timestamp,
            current_txn_first_offset=txn_first_offset if txn_first_offset >= 0 else -1,
        )
        if last_offset >= 0:  # Kafka writes -1 for a producer without a batch
            entry.batches.append(BatchMetadata(
                decrement_sequence(last_seq, offset_delta), last_seq,
                last_offset - offset_delta, last_offset, timestamp,
            ))
        entries.append(entry)
    return entries


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    return decode_snapshot(path.read_bytes())


def write_snapshot(path: Path, entries: Iterable[ProducerStateEntry]) -> None:
    """Atomically and durably: a crash leaves the old file or the whole new one."""
    write_durably(path, encode_snapshot(entries))
