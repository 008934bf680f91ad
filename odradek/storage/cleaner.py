"""Log compaction: Kafka's LogCleaner, LogCleanerManager, Cleaner and OffsetMap.

A log whose cleanup.policy has `compact` keeps at least the last record of every key. A
log is cut in three by two offsets:

    [log start ... first dirty)   the clean section: compacted before;
    [first dirty ... first uncleanable)   the dirty section, compacted by the next round;
    [first uncleanable ... log end)   never touched: the active segment, and segments
        whose largest timestamp is newer than min.compaction.lag.ms.

The first dirty offset is the cleaner checkpoint (`cleaner-offset-checkpoint` in each log
dir). The first uncleanable offset is always a segment's base offset.

A round (`Cleaner.clean`) maps every key of the dirty section to its last offset (the
offset map, bounded: when it fills, the round stops mapping there and the rest stays dirty
for the next round), then recopies the log from its first segment up to where the map
ends, segment group by segment group, keeping a record when

  * its offset is at or past the map's end, or it has no key (Kafka drops keyless records,
    which it refuses on compacted topics; odradek keeps any it finds), or
  * no later offset of its key is in the map, and it is not a tombstone (null value) whose
    delete horizon has passed.

Tombstones (record batch v2, KIP-534): the first time a round keeps a tombstone whose batch
has no delete horizon, it rewrites that batch with attribute bit 6 set and baseTimestamp =
now + delete.retention.ms (records' timestamp deltas rebased, so their timestamps do not
change). A later round drops the tombstone once now >= that horizon. A log with a passed
horizon is cleaned even when its dirty ratio is low (the horizon is remembered in memory;
after a restart it waits for the next round the dirty ratio triggers).

Batches: a batch whose records all survive (and needs no new horizon) is copied byte for
byte; a batch that loses some is rebuilt with its base offset, lastOffsetDelta, partition
leader epoch, producer id/epoch/base sequence, timestamp type, codec and the survivors'
own offset and timestamp deltas (maxTimestamp recomputed from the survivors under
CreateTime, as Kafka does). A batch that loses every record is dropped, with one
exception: if it is the last batch of a group of segments, an empty batch (no records,
same base offset and lastOffsetDelta and the original max timestamp, like Kafka's empty
batches that keep producer state) takes its place, so that the cleaned segment ends at the
same offset as the segments it replaces. That keeps the log end offset and segment
boundaries intact, and it is what Log's crash recovery needs: a .swap segment replaces the
old segments whose base offsets are below its next offset. As Kafka, the last data batch
of each active idempotent producer is kept too, empty if none of its records survives (its
header holds the producer id, epoch and sequences), so that the producer state rebuilt
from the log after a crash still has it; a producer whose last entry is a marker (its
epoch bumped by the coordinator) keeps its markers of that epoch, emptied once they may
go.

Transactions (Kafka's CleanedTransactionMetadata, KIP-98). Everything below the first
uncleanable offset is decided, and the `.txnindex` entries overlapping the round's range
say which transactions aborted. A round, from the log start on:

  * drops every record of an aborted transaction's batches (kept empty only as its
    producer's last batch), and never maps them: an aborted value shadows nothing;
  * keeps or drops a committed transaction's records by key, as any others;
  * keeps a control batch (COMMIT/ABORT marker) while the round met a batch of the
    transaction it ends (even one whose records all went this round: the marker goes
    in a later round, never before its data); once none is met, stamps it with a delete
    horizon as a tombstone's (now + delete.retention.ms) and drops it in a round at or
    past it; an empty control batch (emptied before) is dropped unless it is its
    producer's last entry;
  * writes to the cleaned segment the `.txnindex` entry of each ABORT marker it keeps
    whose transaction still has batches; the others go with their data.

A group's last batch, when dropped, is replaced by an empty batch; one from a
transactional or control batch loses its producer id and flags (newer Kafka keeps the
round's last batch empty with them): it holds the offset, nothing of a transaction, so
no marker waits for it.

Each group (consecutive segments whose output fits segment.bytes, an offset range of
2^31 - 1 as Kafka's, and the index files) is written as a new `.cleaned` segment,
flushed, given the mtime of the group's last segment (retention falls back on it), and
swapped in by Log.replace_segments, which takes the log's lock only for the renames.
Reads and appends never wait for a round; readers holding slices of replaced segments
keep reading them until file.delete.delay.ms. Any failure before a swap removes the
.cleaned files and leaves the log as it was; a crash is completed (or undone) by
Log.open. Groups are swapped in offset order, so a tombstone is only ever dropped after
every older value of its key is gone.

Not (yet) Kafka's: I/O throttling (log.cleaner.io.max.bytes.per.second), and rolling the
active segment after max.compaction.lag.ms (that is the log's roll policy).
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import logging
import os
import struct
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from odradek.protocol.compression import compress
from odradek.protocol.exceptions import ProtocolError
from odradek.protocol.records import (
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    CURRENT_MAGIC_VALUE,
    DELETE_HORIZON_FLAG_MASK,
    HEADER_STRUCT,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    ControlRecordType,
    Record,
    RecordBatchHeader,
    compute_crc,
    decode_control_record,
    decode_records,
    encode_record,
    iter_batch_headers,
    validate_batch,
)
from odradek.storage.checkpoints import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from odradek.storage.config import LogConfig
from odradek.storage.errors import StorageError
from odradek.storage.index import CorruptIndexError
from odradek.storage.log import Clock, Log, system_clock
from odradek.storage.log_dir import is_no_space
from odradek.storage.segment import CLEANED_SUFFIX, BatchAppend, LogSegment
from odradek.storage.txn_index import AbortedTxn

logger = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1  # Kafka's bound on a cleaned segment's offset range
EMPTY_BATCH_SIZE = RECORD_BATCH_OVERHEAD  # a batch without records: the header alone

_UINT32 = struct.Struct(">I")
_SHORT_KEY = 32  # keys up to this long are kept as they are in the offset map

TopicPartition = tuple[str, int]


# ---- configuration and results ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker's log.cleaner.* settings that apply here."""

    threads: int = 1  # log.cleaner.threads
    # log.cleaner.dedupe.buffer.size, as keys: Kafka's 128 MiB at 24 bytes per entry holds
    # about 5 million; a Python dict entry costs more, so the default is lower. Shared
    # among the threads, as Kafka's buffer is.
    dedupe_buffer_entries: int = 1_000_000
    io_buffer_size: int = 1024 * 1024  # how much of a segment one read takes
    backoff_ms: int = 15_000  # log.cleaner.backoff.ms: the pause when nothing is cleanable

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise ValueError("log.cleaner.threads must be >= 1")
        if self.dedupe_buffer_entries < self.threads:
            raise ValueError("the dedupe buffer must hold at least one key per thread")
        if self.io_buffer_size < RECORD_BATCH_OVERHEAD:
            raise ValueError(f"io_buffer_size must be >= {RECORD_BATCH_OVERHEAD}")


@dataclass(frozen=True, slots=True)
class LogToClean:
    """A compacted log's state as the cleaner sees it (Kafka's LogToClean)."""

    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int  # a segment base offset
    clean_bytes: int  # segments below the first dirty offset
    cleanable_bytes: int  # segments from the one holding it up to the uncleanable one
    compaction_delay_ms: int  # > 0: max.compaction.lag.ms has passed for dirty data
    checkpoint_reset: bool = False  # the checkpoint was outside the log and was reset

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0

    @property
    def needs_compaction_now(self) -> bool:
        return self.compaction_delay_ms > 0


@dataclass(slots=True)
class CleanResult:
    """What one round did."""

    first_dirty_offset: int
    end_offset: int  # the new first dirty offset (the cleaner checkpoint)
    first_uncleanable_offset: int
    segments_replaced: int = 0
    segments_written: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    tombstones_dropped: int = 0
    batches_rebuilt: int = 0
    empty_batches_written: int = 0
    aborted_records_removed: int = 0  # records of aborted transactions
    markers_removed: int = 0  # transaction markers past their delete horizon
    # The earliest delete horizon of a tombstone or marker the round kept: a round at or
    # after it has something to drop.
    earliest_delete_horizon: int | None = None
    map_full: bool = False

    def note_delete_horizon(self, horizon: int) -> None:
        earliest = self.earliest_delete_horizon
        self.earliest_delete_horizon = horizon if earliest is None else min(earliest, horizon)


class CleaningAbortedError(StorageError):
    """A round stopped before its end (shutdown, pause, or the log changed under it); the
    log is as the swaps done so far left it, always a valid state."""


# ---- the offset map --------------------------------------------------------------------


class OffsetMap:
    """key -> last offset seen for it, holding at most `max_entries` keys (Kafka's
    SkimpyOffsetMap, whose memory log.cleaner.dedupe.buffer.size bounds).

    Short keys are stored as they are; longer ones as a 16-byte BLAKE2b digest plus their
    length, so an entry's size does not depend on its key (Kafka keeps an MD5 digest)."""

    def __init__(self, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError("an offset map needs room for at least one key")
        self.max_entries = max_entries
        self._map: dict[bytes | tuple[int, bytes], int] = {}
        self.latest_offset = -1

    @staticmethod
    def _slot(key: bytes) -> bytes | tuple[int, bytes]:
        if len(key) <= _SHORT_KEY:
            return key
        return len(key), hashlib.blake2b(key, digest_size=16).digest()

    def put(self, key: bytes, offset: int) -> bool:
        """Records `offset` as the key's latest; False (and nothing changes) when the key
        is new and the map is full."""
        slot = self._slot(key)
        if slot not in self._map and len(self._map) >= self.max_entries:
            return False
        self._map[slot] = offset
        self.latest_offset = max(self.latest_offset, offset)
        return True

    def get(self, key: bytes) -> int:
        """The key's latest offset, or -1."""
        return self._map.get(self._slot(key), -1)

    def clear(self) -> None:
        self._map.clear()
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._map)

    @property
    def is_full(self) -> bool:
        return len(self._map) >= self.max_entries


# ---- which part of a log is cleanable (LogCleanerManager) ---------------------------------


def _segments_between(segments: list[LogSegment], start: int, end: int) -> list[LogSegment]:
    """Kafka's logSegments(from, to): from the segment holding `start` (or the first) to
    the last whose base offset is below `end`."""
    first = 0
    for i, segment in enumerate(segments):
        if segment.base_offset <= start:
            first = i
    return [s for s in segments[first:] if s.base_offset < end]


_first_batch_timestamps: weakref.WeakKeyDictionary[LogSegment, int] = weakref.WeakKeyDictionary()


def _first_batch_timestamp(segment: LogSegment) -> int:
    """The first batch's max timestamp (Kafka's rolling-based timestamp), or NO_TIMESTAMP."""
    if segment.rolling_based_timestamp is not None:
        return segment.rolling_based_timestamp
    cached = _first_batch_timestamps.get(segment)
    if cached is None:
        first = next(iter(segment.batches()), None)
        cached = NO_TIMESTAMP
        if first is not None:
            header = RecordBatchHeader.parse(segment.pread(first.position, RECORD_BATCH_OVERHEAD))
            cached = header.max_timestamp
        _first_batch_timestamps[segment] = cached
    return cached


def cleanable_offsets(log: Log, checkpoint: int | None, now: int) -> tuple[int, int, bool]:
    """(first dirty offset, first uncleanable offset, whether the checkpoint was reset),
    as Kafka's LogCleanerManager.cleanableOffsets. The first uncleanable offset is the
    base of the segment holding it: the active segment's, or an earlier one's where an
    undecided transaction starts or min.compaction.lag.ms holds records back."""
    segments = log.segments()
    log_start = log.log_start_offset
    reset = False
    first_dirty = log_start if checkpoint is None else checkpoint
    if first_dirty < log_start or first_dirty > log.log_end_offset:
        # Below the log start: retention or DeleteRecords went past it. Beyond the log
        # end: the log was truncated; assume all of it needs cleaning.
        first_dirty, reset = log_start, checkpoint is not None
    active = segments[-1]
    uncleanable = active.base_offset
    # Never past an undecided transaction (Kafka cleans below the last stable offset):
    # its records are not known to be kept or aborted yet.
    first_unstable = log.first_unstable_offset
    if first_unstable is not None:
        uncleanable = min(uncleanable, first_unstable)
    lag = log.config.min_compaction_lag_ms
    if lag > 0:
        for segment in _segments_between(segments[:-1], first_dirty, uncleanable):
            if segment.largest_timestamp > now - lag:
                uncleanable = min(uncleanable, segment.base_offset)
                break
    holder = _segments_between(segments, uncleanable, uncleanable + 1)
    if holder:
        uncleanable = holder[0].base_offset
    return first_dirty, uncleanable, reset


def max_compaction_delay(log: Log, first_dirty: int, now: int) -> int:
    """How long past max.compaction.lag.ms the oldest dirty record is (0: not past)."""
    clean_until = now - log.config.max_compaction_lag_ms
    if clean_until <= 0:
        return 0  # the default (Long.MAX_VALUE): never, and no need to read anything
    segments = log.segments()
    dirty = _segments_between(segments[:-1], first_dirty, segments[-1].base_offset)
    stamps = [t for t in (_first_batch_timestamp(s) for s in dirty) if t > 0]
    earliest = min(stamps, default=LONG_MAX)
    return clean_until - earliest if earliest < clean_until else 0


def log_to_clean(log: Log, checkpoint: int | None, now: int) -> LogToClean:
    first_dirty, uncleanable, reset = cleanable_offsets(log, checkpoint, now)
    segments = log.segments()
    clean_bytes = sum(s.size for s in segments if s.base_offset < first_dirty)
    cleanable = _segments_between(segments, min(first_dirty, uncleanable), uncleanable)
    return LogToClean(
        log=log,
        first_dirty_offset=first_dirty,
        first_uncleanable_offset=uncleanable,
        clean_bytes=clean_bytes,
        cleanable_bytes=sum(s.size for s in cleanable),
        compaction_delay_ms=max_compaction_delay(log, first_dirty, now),
        checkpoint_reset=reset,
    )


# ---- batches ---------------------------------------------------------------------------


def _read_batches(
    segment: LogSegment, position: int, chunk_size: int
) -> Iterator[tuple[RecordBatchHeader, memoryview]]:
    """Every batch from `position` on, read `chunk_size` at a time (a larger batch whole).
    A segment that is not active does not grow, so its size is read once."""
    size = segment.size
    while position < size:
        data = segment.pread(position, min(chunk_size, size - position))
        view = memoryview(data)
        consumed = 0
        for pos, header in iter_batch_headers(data, allow_partial=True):
            consumed = pos + header.size_in_bytes
            yield header, view[pos:consumed]
        if consumed == 0:
            header = RecordBatchHeader.parse(segment.pread(position, RECORD_BATCH_OVERHEAD))
            data = segment.pread(position, header.size_in_bytes)
            if len(data) < header.size_in_bytes:
                raise StorageError(f"{segment.log_path}: torn batch at position {position}")
            consumed = header.size_in_bytes
            yield header, memoryview(data)
        position += consumed


def _pack_batch(header: RecordBatchHeader, attributes: int, base_timestamp: int,
                max_timestamp: int, count: int, records_section: bytes) -> bytes:
    batch = bytearray(RECORD_BATCH_OVERHEAD + len(records_section))
    HEADER_STRUCT.pack_into(
        batch, 0,
        header.base_offset,
        len(batch) - LOG_OVERHEAD,
        header.partition_leader_epoch,
        CURRENT_MAGIC_VALUE,
        0,  # crc, below
        attributes,
        header.last_offset_delta,
        base_timestamp,
        max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        count,
    )
    batch[RECORD_BATCH_OVERHEAD:] = records_section
    _UINT32.pack_into(batch, CRC_OFFSET, compute_crc(batch, 0, len(batch)))
    return bytes(batch)


def rebuild_batch(header: RecordBatchHeader, records: list[Record],
                  delete_horizon: int | None = None) -> bytes:
    """The batch `header` describes with only `records` (decoded from it, in order), as
    Kafka's cleaner rewrites a batch: same base offset and lastOffsetDelta, producer
    fields, leader epoch, codec and timestamp type; each record keeps its offset delta and
    timestamp. With `delete_horizon`, attribute bit 6 is set and baseTimestamp holds it.
    Without records: an empty batch, uncompressed, both timestamps the original's max
    timestamp (Kafka's writeEmptyHeader), so that time retention still sees its age."""
    if not records:
        keep = TIMESTAMP_TYPE_MASK | TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK
        timestamp = header.max_timestamp
        return _pack_batch(header, header.attributes & keep, timestamp, timestamp, 0, b"")
    attributes = header.attributes
    base_timestamp = header.base_timestamp
    if delete_horizon is not None:
        attributes |= DELETE_HORIZON_FLAG_MASK
        base_timestamp = delete_horizon
    body = bytearray()
    max_timestamp = NO_TIMESTAMP
    for r in records:
        timestamp = header.base_timestamp + r.timestamp_delta  # as written, whatever the type
        max_timestamp = max(max_timestamp, timestamp)
        body += encode_record(r.offset_delta, timestamp - base_timestamp, r.key, r.value,
                              r.headers, r.attributes)
    if header.timestamp_type == LOG_APPEND_TIME:
        max_timestamp = header.max_timestamp
    section = compress(header.compression, body)
    return _pack_batch(header, attributes, base_timestamp, max_timestamp, len(records), section)


# ---- transactions (Kafka's CleanedTransactionMetadata) ------------------------------------


class _AbortedTxns:
    """The aborted transactions of the range a round cleans (from the .txnindex), looked
    up by producer and offset: a transactional data batch is aborted when one of them of
    its producer spans its offsets."""

    def __init__(self, entries: Iterable[AbortedTxn]) -> None:
        by_producer: dict[int, dict[int, AbortedTxn]] = {}
        for txn in entries:  # the same entry may be found twice: keep one per first offset
            by_producer.setdefault(txn.producer_id, {})[txn.first_offset] = txn
        self._txns = {pid: sorted(txns.values()) for pid, txns in by_producer.items()}
        self._firsts = {pid: [t.first_offset for t in txns] for pid, txns in self._txns.items()}

    def find(self, header: RecordBatchHeader) -> AbortedTxn | None:
        """The aborted transaction the (transactional) batch belongs to, if any."""
        firsts = self._firsts.get(header.producer_id)
        if not firsts:
            return None
        i = bisect.bisect_right(firsts, header.base_offset) - 1
        if i < 0:
            return None
        txn = self._txns[header.producer_id][i]
        return txn if header.base_offset <= txn.last_offset else None


class _CleanedTxnMetadata:
    """What one round has seen of each producer's transactions, from the log start on
    (Kafka's CleanedTransactionMetadata): it decides whether a data batch is aborted (its
    records go) and whether a marker may go (no batch of its transaction was met in this
    round), and which .txnindex entries the cleaned segments keep."""

    def __init__(self, aborted: _AbortedTxns) -> None:
        self.aborted = aborted
        self._aborted_seen: dict[int, AbortedTxn] = {}  # producer -> its open aborted txn
        self._committed_seen: set[int] = set()  # producers with a batch of a kept txn

    def on_batch_read(self, header: RecordBatchHeader) -> bool:
        """A data batch: True when it belongs to an aborted transaction (its records go)."""
        if not header.is_transactional or header.producer_id < 0:
            return False
        txn = self.aborted.find(header)
        if txn is not None:
            self._aborted_seen[header.producer_id] = txn
            return True
        self._committed_seen.add(header.producer_id)
        return False

    def on_control_batch_read(self, header: RecordBatchHeader, records: list[Record],
                              ) -> tuple[bool, AbortedTxn | None]:
        """A control batch: (whether it may be discarded, the .txnindex entry to keep with
        it). A marker stays while the round met a batch of the transaction it ends, and
        its abort entry with it; an empty control batch was emptied by an earlier round."""
        if not records:
            return True, None
        try:
            control_type, _ = decode_control_record(records[0])
        except ProtocolError:
            return False, None  # not ours to judge: kept
        pid = header.producer_id
        if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            return False, None
        aborted = self._aborted_seen.pop(pid, None)
        committed = pid in self._committed_seen
        self._committed_seen.discard(pid)
        entry = None
        if (control_type == ControlRecordType.ABORT and aborted is not None
                and aborted.last_offset == header.base_offset):
            entry = aborted
        return not (aborted is not None or committed), entry


@dataclass(slots=True)
class _RoundState:
    """What a round carries from segment to segment."""

    txns: _CleanedTxnMetadata
    # producer id -> offset of its last data batch (None: it has none) and its epoch, taken
    # before copying: a producer's later batches are past what this round cleans.
    producers: dict[int, tuple[int | None, int]]

    def is_last_batch_of_producer(self, header: RecordBatchHeader) -> bool:
        """Kafka's isBatchLastRecordOfProducer: the batch holding an active producer's
        last data offset (its last sequence), or, for a producer whose last entry is a
        marker, its markers of the current epoch (the epoch fences zombies)."""
        if header.producer_id < 0:
            return False
        last = self.producers.get(header.producer_id)
        if last is None:
            return False
        offset, epoch = last
        if offset is not None:
            return header.last_offset == offset
        return header.is_control and header.producer_epoch == epoch


def _offset_placeholder(header: RecordBatchHeader) -> bytes:
    """The empty batch that ends a group in place of its dropped last batch. A
    transactional or control batch's loses its producer and flags: it holds an offset,
    nothing of a transaction (a marker may go while it stays)."""
    if header.is_transactional or header.is_control:
        header = dataclasses.replace(
            header, attributes=header.attributes & TIMESTAMP_TYPE_MASK,
            producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH,
            base_sequence=NO_SEQUENCE)
    return rebuild_batch(header, [])


# ---- one round (Cleaner) ---------------------------------------------------------------


class _GroupChangedError(CleaningAbortedError):
    pass


class Cleaner:
    """Cleans one log per call, reusing its offset map (one Cleaner per cleaner thread)."""

    def __init__(self, offset_map: OffsetMap, *, io_buffer_size: int = 1024 * 1024,
                 should_abort: Callable[[], bool] = lambda: False) -> None:
        self.offset_map = offset_map
        self.io_buffer_size = io_buffer_size
        self.should_abort = should_abort

    def _check_abort(self, log: Log) -> None:
        if self.should_abort():
            raise CleaningAbortedError(f"cleaning of {log.name} was aborted")

    def clean(self, to_clean: LogToClean, now: int) -> CleanResult:
        """One round over [log start, first uncleanable); returns what it did, including
        the new first dirty offset. Raises CleaningAbortedError when stopped or when the
        log's segments change under it (retention, truncation): the swaps done by then
        stand, the checkpoint must not move."""
        log = to_clean.log
        config = log.config  # one snapshot: AlterConfigs may replace it meanwhile
        first_dirty = to_clean.first_dirty_offset
        upper = to_clean.first_uncleanable_offset
        segments = log.segments()
        cleanable = [s for s in segments[:-1] if s.base_offset < upper]
        result = CleanResult(first_dirty, first_dirty, upper)
        # Taken before copying: a producer's later batches are past what this round cleans.
        producers = {
            pid: (e.last_data_offset if e.batches else None, e.producer_epoch)
            for pid, e in log.active_producers().items()
        }
        # Every transaction below `upper` is decided: the .txnindex says which aborted.
        aborted = _AbortedTxns(
            log.collect_aborted_transactions(cleanable[0].base_offset, upper)
            if cleanable else ())
        end = self._build_offset_map(log, cleanable, first_dirty, upper, result, aborted)
        result.end_offset = max(first_dirty, end)
        to_copy = [s for s in cleanable if s.base_offset < min(end, upper)]
        next_bases = {
            id(s): (segments[i + 1].base_offset if i + 1 < len(segments) else upper)
            for i, s in enumerate(segments)
        }
        state = _RoundState(_CleanedTxnMetadata(aborted), producers)
        i = 0
        while i < len(to_copy):
            self._check_abort(log)
            i = self._clean_group(log, config, to_copy, i, next_bases, end, now, result,
                                  state)
        logger.info(
            "cleaned %s: offsets [%d, %d) mapped, %d segments into %d, %d -> %d bytes, "
            "%d of %d records kept", log.name, first_dirty, result.end_offset,
            result.segments_replaced, result.segments_written, result.bytes_read,
            result.bytes_written, result.records_kept, result.records_read,
        )
        return result

    # -- the offset map --

    def _build_offset_map(self, log: Log, cleanable: list[LogSegment], first_dirty: int,
                          upper: int, result: CleanResult, aborted: _AbortedTxns) -> int:
        """Maps the dirty section's keys; returns the first offset not mapped (`upper`
        unless the map filled up). Records of aborted transactions are not mapped: they
        go, and must not shadow the values before them."""
        offset_map = self.offset_map
        offset_map.clear()
        if first_dirty >= upper:
            return first_dirty
        for segment in _segments_between(cleanable, first_dirty, upper):
            position = 0
            if segment.base_offset < first_dirty:
                start = segment.translate_offset(first_dirty)
                if start is None:
                    continue
                position = start.position
            for header, data in _read_batches(segment, position, self.io_buffer_size):
                self._check_abort(log)
                if header.last_offset < first_dirty or header.is_control:
                    continue
                if header.is_transactional and aborted.find(header) is not None:
                    continue
                validate_batch(data, 0, header, from_client=False)
                for record in decode_records(data, 0, header):
                    if record.key is None or record.offset < first_dirty:
                        continue
                    if not offset_map.put(record.key, record.offset):
                        result.map_full = True
                        return record.offset
        return upper

    # -- recopying --

    def _clean_group(self, log: Log, config: LogConfig, segments: list[LogSegment], i: int,
                     next_bases: dict[int, int], end: int, now: int,
                     result: CleanResult, state: _RoundState) -> int:
        """Writes segments[i:j] (as many as fit) into one .cleaned segment and swaps it
        in; returns j."""
        first = segments[i]
        out = _cleaned_segment(log, config, first.base_offset, now)
        swapping = False
        try:
            group: list[LogSegment] = []
            sizes: dict[int, int] = {}
            # The group's last batch when nothing of it was kept: its empty batch ends the
            # output, so that it ends at the same offset as the segments it replaces.
            dropped_last: RecordBatchHeader | None = None
            while i < len(segments):
                segment = segments[i]
                if group and not _fits(out, segment, next_bases[id(segment)], config):
                    break
                sizes[id(segment)] = segment.size
                last = self._copy_segment(log, segment, out, end, now, config, result,
                                          state)
                if last is not None:
                    last_header, written = last
                    dropped_last = None if written else last_header
                group.append(segment)
                i += 1
            if dropped_last is not None:
                self._append(out, _offset_placeholder(dropped_last), group[-1])
                result.empty_batches_written += 1
            if out.size == 0:  # only empty segments: nothing to swap in
                out.delete_files()
                return i
            out.on_become_inactive()
            out.flush()
            _copy_mtime(group[-1], out)
            self._check_abort(log)
            swapping = True
            _swap(log, out, group, sizes)
        except BaseException as e:
            if not swapping or isinstance(e, _GroupChangedError):
                out.delete_files()  # nothing of it is in the log
            raise
        result.segments_replaced += len(group)
        result.segments_written += 1
        result.bytes_written += out.size
        return i

    def _copy_segment(self, log: Log, segment: LogSegment, out: LogSegment, end: int,
                      now: int, config: LogConfig, result: CleanResult, state: _RoundState,
                      ) -> tuple[RecordBatchHeader, bool] | None:
        """Appends what survives of `segment` to `out`, and the .txnindex entries of the
        markers kept. Returns the segment's last batch header and whether anything of that
        batch was written (None: no batches)."""
        offset_map = self.offset_map
        delete_retention = config.delete_retention_ms
        txns = state.txns
        last: tuple[RecordBatchHeader, bool] | None = None
        for header, data in _read_batches(segment, 0, self.io_buffer_size):
            self._check_abort(log)
            result.bytes_read += header.size_in_bytes
            validate_batch(data, 0, header, from_client=False)
            if header.is_control:
                written = self._copy_control_batch(out, segment, header, data, now,
                                                   delete_retention, result, state)
                last = (header, written)
                continue
            if txns.on_batch_read(header):  # an aborted transaction's: every record goes
                records: list[Record] = []
                result.records_read += header.records_count
                result.aborted_records_removed += header.records_count
            else:
                records = decode_records(data, 0, header)
                result.records_read += len(records)
            horizon = header.delete_horizon_ms
            kept: list[Record] = []
            tombstone_kept = False
            for r in records:
                keep = True
                if r.offset < end and r.key is not None:
                    if offset_map.get(r.key) > r.offset:
                        keep = False  # a later record of its key is in the map
                    elif r.value is None and horizon is not None and now >= horizon:
                        keep = False
                        result.tombstones_dropped += 1
                if keep:
                    kept.append(r)
                    tombstone_kept = tombstone_kept or r.value is None
            result.records_kept += len(kept)
            new_horizon = tombstone_kept and horizon is None
            if new_horizon:
                horizon = min(now + delete_retention, LONG_MAX)
            if tombstone_kept:
                result.note_delete_horizon(horizon)
            if not kept:
                if state.is_last_batch_of_producer(header):
                    # Kafka's RETAIN_EMPTY: the producer's last batch keeps its state.
                    self._append(out, rebuild_batch(header, []), segment)
                    result.empty_batches_written += 1
                    last = (header, True)
                    continue
                last = (header, False)
                continue
            if len(kept) == len(records) and not new_horizon:
                self._append(out, data, segment)
            else:
                self._append(out, rebuild_batch(header, kept, horizon), segment)
                result.batches_rebuilt += 1
            last = (header, True)
        return last

    def _copy_control_batch(self, out: LogSegment, segment: LogSegment,
                            header: RecordBatchHeader, data: memoryview, now: int,
                            delete_retention: int, result: CleanResult, state: _RoundState,
                            ) -> bool:
        """Kafka's rules for a control batch (a transaction marker): kept while the round
        met a batch of its transaction; then, like a tombstone, stamped with a delete
        horizon and dropped once it has passed, unless it is its producer's last entry
        (then kept empty). Returns whether anything of it was written."""
        records = decode_records(data, 0, header)
        can_discard, entry = state.txns.on_control_batch_read(header, records)
        horizon = header.delete_horizon_ms
        discard_records = can_discard and (
            not records or (horizon is not None and now >= horizon))
        if discard_records:
            result.markers_removed += len(records)
            if state.is_last_batch_of_producer(header):
                self._append(out, rebuild_batch(header, []), segment)
                result.empty_batches_written += 1
                return True
            return False
        if can_discard and horizon is None:
            horizon = min(now + delete_retention, LONG_MAX)
            self._append(out, rebuild_batch(header, records, horizon), segment)
            result.batches_rebuilt += 1
        else:
            self._append(out, data, segment)
        if can_discard and horizon is not None:
            result.note_delete_horizon(horizon)
        if entry is not None:
            out.txn_index.append(entry)
        return True

    @staticmethod
    def _append(out: LogSegment, data: bytes | memoryview, source: LogSegment) -> None:
        if out.offset_index.is_full or out.time_index.is_full:
            # Grouping leaves room for the worst case when it merges segments; a segment's
            # copy alone is never denser than the original. Only a broken index gets here.
            raise StorageError(
                f"the compacted copy of {source.log_path.name} does not fit its index files "
                "(segment.index.bytes)"
            )
        view = memoryview(data)
        header = RecordBatchHeader.parse(view)
        out.append(view, [BatchAppend(0, len(view), header.last_offset, header.max_timestamp)])


def _cleaned_segment(log: Log, config: LogConfig, base_offset: int, now: int) -> LogSegment:
    segment = LogSegment(
        log.directory, base_offset,
        index_interval_bytes=config.index_interval_bytes,
        max_index_size=config.segment_index_bytes,
        active=True, suffix=CLEANED_SUFFIX, created_ms=now,
    )
    for path in segment.paths():  # left by a round that failed without cleaning up
        if path.exists():
            path.unlink()
    return segment


def _max_new_index_entries(segment: LogSegment, config: LogConfig) -> int | None:
    """At most how many index entries copying `segment` after other data can add. Each
    entry but the first needs more than index.interval.bytes (and a whole batch) since the
    previous one; and the copy, indexed like the original but with fewer bytes, lags its
    entries by at most one. The larger bound, in case index.interval.bytes changed."""
    try:
        entries = segment.offset_index.entries
    except (CorruptIndexError, OSError):
        return None
    by_size = segment.size // max(config.index_interval_bytes + 1, EMPTY_BATCH_SIZE)
    return max(entries, by_size) + 1


def _fits(out: LogSegment, segment: LogSegment, next_base: int, config: LogConfig) -> bool:
    """Whether `segment`'s survivors surely fit in `out` after what it holds (Kafka's
    groupSegmentsBySize, but on the output's actual size): segment.bytes (with room for an
    empty batch ending the group), an offset range of at most 2^31 - 1, both indexes."""
    if out.size + EMPTY_BATCH_SIZE + segment.size > config.segment_bytes:
        return False
    if segment.size and next_base - 1 - out.base_offset > INT32_MAX:
        return False
    added = _max_new_index_entries(segment, config)
    if added is None:
        return False
    return (
        out.offset_index.entries + added <= out.offset_index.max_entries
        and out.time_index.entries + added <= out.time_index.max_entries
    )


def _copy_mtime(source: LogSegment, target: LogSegment) -> None:
    """Kafka gives the cleaned segment the last replaced segment's modification time:
    retention of batches without timestamps goes by it."""
    try:
        mtime = os.stat(source.log_path).st_mtime_ns
        os.utime(target.log_path, ns=(mtime, mtime))
    except OSError:
        pass


def _swap(log: Log, new: LogSegment, old: list[LogSegment], sizes: dict[int, int]) -> None:
    # A retention pass or a truncation since we read the group must not be undone by
    # swapping in what we read before it: the log refuses changed segments.
    try:
        log.replace_segments(new, old, [sizes[id(s)] for s in old])
    except StorageError as e:
        raise _GroupChangedError(str(e)) from e


# ---- the cleaner threads and checkpoints (LogCleaner + LogCleanerManager) ----------------


@dataclass(slots=True)
class _InProgress:
    abort: threading.Event = field(default_factory=threading.Event)


class LogCleaner:
    """Compacts the logs `logs()` returns (e.g. LogManager.logs) whose cleanup.policy has
    compact: background threads (start/shutdown) or synchronous calls (maybe_clean,
    clean_log) with an explicit `now`. Keeps each log's first dirty offset in the
    `cleaner-offset-checkpoint` file of its log dir.

    A log that is being truncated or deleted must first be taken out with
    pause_cleaning() (it aborts a round in progress and waits for it), then put back with
    resume_cleaning(); after a truncation call maybe_truncate_checkpoint()."""

    def __init__(self, logs: Callable[[], Iterable[Log]], *,
                 config: CleanerConfig | None = None, clock: Clock = system_clock) -> None:
        self.logs = logs
        self.config = config or CleanerConfig()
        self.clock = clock
        self._lock = threading.Condition()
        self._in_progress: dict[Path, _InProgress] = {}
        self._paused: dict[Path, int] = {}
        self._uncleanable: dict[Path, str] = {}
        self._checkpoints: dict[Path, dict[TopicPartition, int]] = {}
        self._horizons: dict[Path, int] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- lifecycle --

    def start(self) -> None:
        if self._threads:
            return
        self._stop.clear()
        for n in range(self.config.threads):
            thread = threading.Thread(target=self._run, name=f"odradek-log-cleaner-{n}",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)

    def shutdown(self, timeout_s: float = 30.0) -> bool:
        """Stops the threads, aborting rounds in progress; True when all stopped within
        timeout_s."""
        self._stop.set()
        with self._lock:
            for state in self._in_progress.values():
                state.abort.set()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            logger.warning("log cleaner threads did not stop within %.1f s: %s",
                           timeout_s, alive)
        self._threads = []
        return not alive

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                now = self.clock()
                chosen = self.grab_filthiest_log(now)
                result = None if chosen is None else self._clean(chosen, now, background=True)
            except Exception as e:
                if is_no_space(e) or is_no_space(e.__cause__):
                    # It tries again after its backoff; a full disk is the dir's to report.
                    logger.warning("log cleaner round found no space: %s", e)
                else:
                    logger.exception("log cleaner round failed")
                result = None
            if result is None:
                self._stop.wait(self.config.backoff_ms / 1000)

    # -- checkpoints --

    def _checkpoint_file(self, log_dir: Path) -> OffsetCheckpointFile:
        return OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT)

    def _dir_checkpoints(self, log_dir: Path) -> dict[TopicPartition, int]:
        entries = self._checkpoints.get(log_dir)
        if entries is None:
            try:
                entries = self._checkpoint_file(log_dir).read()
            except StorageError:
                logger.warning("ignoring the unreadable %s", self._checkpoint_file(log_dir),
                               exc_info=True)
                entries = {}
            self._checkpoints[log_dir] = entries
        return entries

    def checkpoint(self, log: Log) -> int | None:
        """The log's first dirty offset as last checkpointed; None: never cleaned."""
        with self._lock:
            return self._dir_checkpoints(log.directory.parent).get((log.topic, log.partition))

    def _write_checkpoint(self, log: Log, offset: int | None) -> None:
        """Sets (or with None removes) the log's entry and rewrites its dir's file, keeping
        the entries of logs that still exist there (as Kafka's updateCheckpoints)."""
        log_dir = log.directory.parent
        with self._lock:
            entries = self._dir_checkpoints(log_dir)
            tp = (log.topic, log.partition)
            if offset is None:
                entries.pop(tp, None)
            else:
                entries[tp] = offset
            present = {(lg.topic, lg.partition) for lg in self.logs()
                       if lg.directory.parent == log_dir}
            for stale in [k for k in entries if k not in present and k != tp]:
                del entries[stale]
            # Under the lock: two threads must not write the same file at once, nor an
            # older map after a newer one.
            self._checkpoint_file(log_dir).write(entries)

    def maybe_truncate_checkpoint(self, log: Log, offset: int) -> None:
        """After the log was truncated to `offset`: what lies past it is dirty again."""
        current = self.checkpoint(log)
        if current is not None and current > offset:
            self._write_checkpoint(log, offset)

    def forget(self, log: Log) -> None:
        """Drops the log's checkpoint entry (the log is being deleted)."""
        with self._lock:
            self._horizons.pop(log.directory, None)
            self._uncleanable.pop(log.directory, None)
            known = (log.topic, log.partition) in self._dir_checkpoints(log.directory.parent)
        # A log never cleaned has no entry: rewriting the file (a walk of every log and an
        # fsync) for each of them made deleting n partitions O(n^2), minutes at 10,000.
        if known:
            self._write_checkpoint(log, None)

    # -- pausing --

    def pause_cleaning(self, log: Log, timeout_s: float = 30.0) -> None:
        """Aborts a round in progress on the log, waits for it to end, and keeps the log
        from being cleaned until resume_cleaning (Kafka's abortAndPauseCleaning)."""
        key = log.directory
        deadline = time.monotonic() + timeout_s
        with self._lock:
            self._paused[key] = self._paused.get(key, 0) + 1
            state = self._in_progress.get(key)
            if state is not None:
                state.abort.set()
            while key in self._in_progress:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise StorageError(f"cleaning of {log.name} did not stop in {timeout_s} s")
                self._lock.wait(remaining)

    def resume_cleaning(self, log: Log) -> None:
        with self._lock:
            count = self._paused.get(log.directory, 0) - 1
            if count > 0:
                self._paused[log.directory] = count
            else:
                self._paused.pop(log.directory, None)

    @property
    def uncleanable(self) -> dict[Path, str]:
        """Logs a round failed on (by directory, with the error): skipped from then on."""
        with self._lock:
            return dict(self._uncleanable)

    # -- choosing and cleaning --

    def to_clean(self, log: Log, now: int | None = None) -> LogToClean:
        now = self.clock() if now is None else now
        return log_to_clean(log, self.checkpoint(log), now)

    def grab_filthiest_log(self, now: int | None = None) -> LogToClean | None:
        """The cleanable log with the highest dirty ratio, marked in progress (Kafka's
        grabFilthiestCompactedLog): dirty ratio above min.cleanable.dirty.ratio, or dirty
        data older than max.compaction.lag.ms, or else tombstones past their horizon."""
        now = self.clock() if now is None else now
        with self._lock:
            candidates: list[LogToClean] = []
            for log in self.logs():
                key = log.directory
                if (not log.config.compact or key in self._in_progress or key in self._paused
                        or key in self._uncleanable):
                    continue
                try:
                    candidate = self.to_clean(log, now)
                except Exception as e:  # a log that cannot even be inspected
                    logger.exception("cannot inspect %s for cleaning", log.name)
                    self._uncleanable[key] = repr(e)
                    continue
                if candidate.total_bytes > 0:
                    candidates.append(candidate)
            dirty = [
                c for c in candidates
                if (c.needs_compaction_now and c.cleanable_bytes > 0)
                or c.cleanable_ratio > c.log.config.min_cleanable_dirty_ratio
            ]
            if not dirty:
                dirty = [c for c in candidates
                         if self._horizons.get(c.log.directory, LONG_MAX) <= now]
            if not dirty:
                return None
            chosen = max(dirty, key=lambda c: c.cleanable_ratio)
            self._in_progress[chosen.log.directory] = _InProgress()
            return chosen

    def maybe_clean(self, now: int | None = None) -> CleanResult | None:
        """One round on the filthiest cleanable log, if there is one."""
        now = self.clock() if now is None else now
        chosen = self.grab_filthiest_log(now)
        if chosen is None:
            return None
        return self._clean(chosen, now)

    def clean_log(self, log: Log, now: int | None = None) -> CleanResult | None:
        """One round on `log` whatever its dirty ratio (tests, tools). None if the log is
        not compacted, is paused, or the round was aborted; errors are raised (and the log
        marked uncleanable)."""
        now = self.clock() if now is None else now
        key = log.directory
        with self._lock:
            while key in self._in_progress:
                self._lock.wait()
            if not log.config.compact or key in self._paused:
                return None
            self._in_progress[key] = _InProgress()
        try:
            chosen = self.to_clean(log, now)
        except BaseException:
            self._done(log)
            raise
        return self._clean(chosen, now)

    def _done(self, log: Log) -> None:
        with self._lock:
            self._in_progress.pop(log.directory, None)
            self._lock.notify_all()

    def _clean(self, chosen: LogToClean, now: int, background: bool = False,
               ) -> CleanResult | None:
        log = chosen.log
        key = log.directory
        with self._lock:
            state = self._in_progress[key]
        entries = max(1, self.config.dedupe_buffer_entries // self.config.threads)
        cleaner = Cleaner(
            OffsetMap(entries), io_buffer_size=self.config.io_buffer_size,
            should_abort=lambda: state.abort.is_set() or (background and self._stop.is_set()),
        )
        try:
            try:
                result = cleaner.clean(chosen, now)
            except CleaningAbortedError as e:
                logger.info("%s", e)
                return None
            except Exception as e:
                if not log.directory.exists():
                    logger.info("%s was deleted while being cleaned", log.name)
                    return None
                with self._lock:
                    self._uncleanable[key] = repr(e)
                logger.error("cleaning %s failed; it will not be cleaned again until the "
                             "broker restarts: %r", log.name, e)
                raise
            with self._lock:
                if result.earliest_delete_horizon is None:
                    self._horizons.pop(key, None)
                else:
                    self._horizons[key] = result.earliest_delete_horizon
            if result.end_offset != chosen.first_dirty_offset or chosen.checkpoint_reset or (
                self.checkpoint(log) is None
            ):
                self._write_checkpoint(log, result.end_offset)
            return result
        finally:
            self._done(log)
