"""Log: one partition's segmented log (Kafka's UnifiedLog and LocalLog in one).

Appends validate each batch's header and CRC, assign offsets by rewriting baseOffset in
the caller's buffer, and write the bytes as they came. Reads return FileSlices. Retention
deletes whole segments; deleted files are renamed `.deleted` and removed after
file.delete.delay.ms. Opening a log after an unclean shutdown re-validates every segment
from the recovery point on and cuts the log at the first torn or corrupt batch.

Idempotent producers: each log keeps a ProducerStateManager (producer_state.py). Client
batches with a producer id are checked against it before anything is written; it is
snapshotted to `<offset>.snapshot` on roll and close, and loaded on first use (the newest
snapshot at or below the log end, then batch headers from there on), so that opening a
log stays a directory listing. After a clean shutdown the newest snapshot is at the log
end and is trusted as is; after a crash the state is rebuilt during recovery.

Transactions (KIP-98): the producer state keeps the ongoing transactions; a marker (a
control batch, appended by the coordinators with origin COORDINATOR, or copied by a
follower) completes one, and an abort is recorded in its segment's `.txnindex` with the
last stable offset after it. `first_unstable_offset` is where the oldest undecided (or
decided but not yet replicated: `update_high_watermark`) transaction starts; the
partition's last stable offset is the smaller of it and the high watermark.
`collect_aborted_transactions` answers read_committed fetches. Recovery rebuilds the
`.txnindex` of every segment it re-validates, from the producer state at its base.

Thread safety: appends, rolls and segment changes hold the log's lock; reads take a
snapshot of the segment list and then read files without it, as appends only ever add
bytes after what a reader can see.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from odradek.protocol.exceptions import CorruptRecordError, ProtocolError
from odradek.protocol.records import (
    CREATE_TIME,
    CURRENT_MAGIC_VALUE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    RECORD_BATCH_OVERHEAD,
    Record,
    RecordBatchHeader,
    assign_offsets,
    decode_control_record,
    decode_records,
    iter_batch_headers,
    set_log_append_time,
    set_max_timestamp,
    set_partition_leader_epoch,
    validate_batch,
)
from odradek.storage.config import LogConfig
from odradek.storage.errors import (
    DiskFullError,
    LogDirOfflineError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    SegmentChangedError,
    StorageError,
)
from odradek.storage.index import NO_TIMESTAMP
from odradek.storage.leader_epoch import LeaderEpochCache
from odradek.storage.log_dir import LogDir, is_no_space
from odradek.storage.log_validator import AppendOrigin, RecordValidation, validate_records
from odradek.storage.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    BatchMetadata,
    CompletedTxn,
    ControlInfo,
    ProducerAppendInfo,
    ProducerStateEntry,
    ProducerStateManager,
)
from odradek.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    SWAP_SUFFIX,
    BatchAppend,
    FileSlice,
    LogSegment,
)
from odradek.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn

log = logging.getLogger(__name__)

Clock = Callable[[], int]  # milliseconds since the epoch

# ListOffsets' special timestamps.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3

_SEGMENT_FILE = re.compile(
    r"^(\d{20})\.(log|index|timeindex|txnindex)((?:\.deleted|\.cleaned|\.swap)?)$")
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
_PRODUCER_SCAN_CHUNK = 64 * 1024  # loading producer state reads the log this much at a time
_LENGTH_MAGIC_PRODUCER = struct.Struct(">8xi4xb26xq")  # batchLength, magic, producerId


def system_clock() -> int:
    return time.time_ns() // 1_000_000


def parse_partition_dir(name: str) -> tuple[str, int]:
    """`events-3` -> ("events", 3): Kafka's <topic>-<partition> directory names."""
    match = _PARTITION_DIR.match(name)
    if match is None:
        raise StorageError(f"{name!r} is not a <topic>-<partition> log directory")
    return match.group(1), int(match.group(2))


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    valid_bytes: int  # 0 for a duplicate: nothing was written
    # A retry of a batch the log has (idempotent producer): nothing was written and the
    # offsets and timestamp are the original batch's; the broker answers NONE, as Kafka.
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    fetch_offset: int
    slices: list[FileSlice]

    @property
    def size(self) -> int:
        return sum(s.length for s in self.slices)

    def read(self) -> bytes:
        return b"".join(s.read() for s in self.slices)


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """What describe-log-dirs style views show of a segment: why it is (not) deleted."""

    base_offset: int
    size: int
    largest_timestamp: int
    active: bool


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    timestamp: int
    offset: int


class Log:
    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: list[LogSegment],
        *,
        log_start_offset: int,
        recovery_point: int,
        clock: Clock,
        producer_state: ProducerStateManager | None = None,
        snapshot_at_end: bool = False,
    ) -> None:
        self.directory = directory
        self.topic, self.partition = parse_partition_dir(directory.name)
        self.name = directory.name
        self._name_hash = zlib.crc32(self.name.encode())  # stable across restarts
        self.config = config
        self.clock = clock
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self.log_start_offset = max(log_start_offset, segments[0].base_offset)
        self.recovery_point = recovery_point
        self._log_end_offset: int | None = None  # found on first use: opening stays cheap
        self._lock = threading.RLock()
        # Set by the LogManager: runs a flush on its background thread.
        self.flush_in_background: Callable[[Callable[[], None]], None] | None = None
        # Set by the LogManager: the broker's odradek.record.validation.* settings.
        self.validation = RecordValidation()
        # Set by the LogManager: the dir's free-space reserve and online state. Without
        # one (tools, tests), I/O errors simply go up.
        self.log_dir: LogDir | None = None
        # Why this partition alone is offline (its files changed under the broker).
        self.offline_reason: str | None = None
        self._unflushed_messages = 0
        self.last_flush_ms = clock()
        # (due time, segment) of segments renamed .deleted, removed after the delay.
        self._pending_deletions: list[tuple[int, LogSegment]] = []
        self.producer_state = producer_state or ProducerStateManager(directory, self.name)
        # Which leader epoch wrote which offsets: followers truncate by it (KIP-101/279).
        self.leader_epoch_cache = LeaderEpochCache(directory)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        # Opened after a clean shutdown and the state not loaded yet: the newest snapshot was
        # written at the log end then, and every append since had no producer id (one with
        # would have loaded the state), so that snapshot is the state at the log end.
        self._snapshot_at_end = snapshot_at_end
        # The partition's high watermark as last told (update_high_watermark): completed
        # transactions stay unstable until it passes their markers. None: never told.
        self._high_watermark: int | None = None

    # ---- opening ----------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        log_start_offset: int = 0,
        recovery_point: int = 0,
        clean_shutdown: bool = True,
        clock: Clock = system_clock,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> Log:
        """Loads (or creates) the log in `directory`; after an unclean shutdown, recovers
        every segment from the one holding the recovery point on."""
        directory.mkdir(parents=True, exist_ok=True)
        _complete_interrupted_operations(directory, config)
        names = os.listdir(directory)
        bases = sorted(
            int(m.group(1))
            for name in names
            if (m := _SEGMENT_FILE.match(name)) and m.group(2) == "log" and not m.group(3)
        )
        now = clock()
        created = not bases
        if created:
            bases = [log_start_offset]
        segments = [
            _segment(directory, base, config, active=(i == len(bases) - 1), now=now)
            for i, base in enumerate(bases)
        ]
        if created:
            segments[0].create()
        producer_state = ProducerStateManager.from_file_names(
            directory, directory.name, names, producer_id_expiration_ms=producer_id_expiration_ms)
        producer_state.remove_stray_snapshots(bases)
        log = cls(directory, config, segments, log_start_offset=log_start_offset,
                  recovery_point=recovery_point, clock=clock, producer_state=producer_state,
                  snapshot_at_end=clean_shutdown)
        if not clean_shutdown:
            log._recover()
        return log

    def _recover(self) -> None:
        """Re-validates segments past the recovery point; drops everything after the first
        torn or corrupt batch (later segments included)."""
        start = max(0, bisect.bisect_right(self._bases, self.recovery_point) - 1)
        expected = None
        # The producer state at the first segment recovered: each recovered segment's
        # batches are replayed into it, rebuilding the segment's .txnindex on the way.
        state: ProducerStateManager | None = None
        try:
            state = self._producer_state_at(self._bases[start])
        except (OSError, StorageError, ProtocolError) as e:
            log.warning("%s: cannot load the producer state below %d to rebuild the "
                        ".txnindex of the recovered segments; keeping them as they are: %s",
                        self.name, self._bases[start], e)
        for i in range(start, len(self._segments)):
            segment = self._segments[i]
            size = segment.size
            truncated = segment.recover(expected)
            expected = segment.next_offset() if segment.size else expected
            if state is not None:
                try:
                    segment.txn_index.reset()
                    self._replay_segment(state, segment, record_aborts=True)
                except (OSError, StorageError, ProtocolError) as e:
                    log.warning("%s: cannot rebuild %s: %s", self.name,
                                segment.txn_index.path.name, e)
                    state = None
            if i < len(self._segments) - 1:
                segment.offset_index.trim_to_valid_size()
                segment.time_index.trim_to_valid_size()
            if truncated:
                later_bytes = sum(later.size for later in self._segments[i + 1 :])
                log.warning(
                    "%s: recovery cut %s from %d to %d bytes at a torn or corrupt batch "
                    "(%d bytes dropped) and removed %d later segments (%d bytes)",
                    self.name, segment.log_path.name, size, size - truncated, truncated,
                    len(self._segments) - i - 1, later_bytes)
                for later in self._segments[i + 1 :]:
                    later.delete_files()
                del self._segments[i + 1 :]
                del self._bases[i + 1 :]
                break
        active = self._segments[-1]
        active.offset_index.make_writable()
        active.time_index.make_writable()
        self._log_end_offset = None
        if self.log_end_offset < self.log_start_offset:
            # The crash lost data below a checkpointed log start: start over there, as
            # Kafka's LogLoader does, so offsets below it are never handed out again.
            self.truncate_fully_and_start_at(self.log_start_offset)
        end = self.log_end_offset
        # Moves to the end once the recovered segments are flushed.
        self.recovery_point = min(self.recovery_point, end)
        # Epochs recorded for batches the crash lost must not outlive them.
        self.leader_epoch_cache.truncate_from_end(end)
        # Producer state: snapshots past the recovered end describe lost batches. The
        # state replayed above served the .txnindex; the state kept is, as before
        # transactions, the newest snapshot left and the batches after it, loaded now
        # while recovery has the segments in the page cache.
        self.producer_state.delete_snapshots_after(end)
        self.producer_state.reset(loaded=False)
        self._snapshot_at_end = False
        try:
            self.flush()
            self._producers().take_snapshot(end)
        except (OSError, StorageError) as e:
            # A full disk must not keep the broker from starting: what recovery validated
            # is in the page cache, and the next start recovers from the old point again.
            log.warning("%s: recovered, but could not write its indexes or producer "
                        "snapshot (%s); it is recovered again at the next start", self.name, e)

    def _recover_corrupt_active_segment(self) -> None:
        """A log opened as cleanly shut down whose last segment does not parse (written
        through a failed append by an older version, or changed on disk): recover it."""
        log.warning("%s: its last segment %s is corrupt although the broker shut down "
                    "cleanly; recovering it", self.name, self._segments[-1].log_path.name)
        self.recovery_point = min(self.recovery_point, self._bases[-1])
        self._recover()

    # ---- state ------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        if self._log_end_offset is None:
            with self._lock:
                try:
                    self._log_end_offset = self._segments[-1].next_offset()
                except ProtocolError:
                    self._recover_corrupt_active_segment()
                    self._log_end_offset = self._segments[-1].next_offset()
        return self._log_end_offset

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    def segments(self) -> list[LogSegment]:
        with self._lock:
            return list(self._segments)

    def segment_infos(self) -> list[SegmentInfo]:
        segments = self.segments()
        return [
            SegmentInfo(s.base_offset, s.size, s.largest_timestamp, s is segments[-1])
            for s in segments
        ]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments())

    # ---- appends ----------------------------------------------------------------------

    def append_as_leader(self, records: bytes | bytearray | memoryview,
                         leader_epoch: int | None = None, *,
                         origin: AppendOrigin = AppendOrigin.CLIENT) -> LogAppendInfo:
        """Validates client batches, assigns their offsets and the leader's epoch (in place
        when `records` is writable) and appends them. A rejected request changes nothing.
        Without a leader epoch (tools, tests) the batches keep the epoch they carry.
        A coordinator's batches (origin COORDINATOR) may be control batches."""
        buf = memoryview(records)
        if buf.readonly:
            buf = memoryview(bytearray(buf))
        batches, idempotent = self._validate(buf, from_client=True, origin=origin)
        controls = _control_infos(buf, batches, strict=True)
        with self._lock:
            self._check_writable(len(buf), from_client=True)
            now = self.clock()
            first = offset = self.log_end_offset
            append_time = now if self.config.message_timestamp_type == "LogAppendTime" else -1
            updates: list[ProducerAppendInfo] = []
            if idempotent:  # batches without a producer id skip all of this
                updates, duplicate = self._check_producers(
                    batches, first, append_time, controls,
                    from_client=origin is AppendOrigin.CLIENT)
                if duplicate is not None:
                    return self._duplicate_info(duplicate, append_time)
            appends = []
            for pos, header in batches:
                assign_offsets(buf, pos, offset)
                if leader_epoch is not None:
                    set_partition_leader_epoch(buf, pos, leader_epoch)
                offset += header.last_offset_delta + 1
                if append_time >= 0:
                    set_log_append_time(buf, pos, append_time)
                max_ts = append_time if append_time >= 0 else header.max_timestamp
                appends.append(BatchAppend(pos, header.size_in_bytes, offset - 1, max_ts))
            info = self._append(buf, appends, first, now, append_time)
            if leader_epoch is not None:
                self.leader_epoch_cache.assign(leader_epoch, first)
            for update in updates:  # only once the batches are written
                self.producer_state.update(update)
            completed = sorted((c for u in updates for c in u.completed),
                               key=lambda c: c.last_offset)
            for txn in completed:
                self._complete_txn(txn)
            return info

    def _check_producers(self, batches: list[tuple[int, RecordBatchHeader]], first: int,
                         append_time: int, controls: dict[int, ControlInfo], *,
                         from_client: bool,
                         ) -> tuple[list[ProducerAppendInfo], BatchMetadata | None]:
        """Producer epochs and sequences (and markers' coordinator epochs) of a leader's
        request, at the offsets it will get."""
        items = []
        offset = first
        for pos, header in batches:
            timestamp = append_time if append_time >= 0 else header.max_timestamp
            items.append((header, offset, timestamp, controls.get(pos)))
            offset += header.last_offset_delta + 1
        return self._producers().prepare_appends(items, from_client=from_client)

    def _complete_txn(self, txn: CompletedTxn) -> None:
        """A marker was written: an abort goes into its segment's .txnindex with the last
        stable offset after it (Kafka's updateTxnIndex), then the transaction is decided."""
        state = self.producer_state
        if txn.is_aborted:
            lso = state.last_stable_offset_after(txn)
            segment = self._segments[max(0, bisect.bisect_right(self._bases, txn.last_offset) - 1)]
            try:
                segment.txn_index.append(
                    AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso))
            except OSError as e:
                # The marker is in the log but read_committed readers would not know the
                # transaction aborted: this log must not be trusted until it is recovered.
                raise self._write_failed(e, undone=False) from e
        state.complete_txn(txn)

    def _duplicate_info(self, duplicate: BatchMetadata, append_time: int) -> LogAppendInfo:
        return LogAppendInfo(
            first_offset=duplicate.first_offset, last_offset=duplicate.last_offset,
            max_timestamp=duplicate.timestamp, offset_of_max_timestamp=duplicate.last_offset,
            log_append_time=duplicate.timestamp if append_time >= 0 else -1,
            log_start_offset=self.log_start_offset, valid_bytes=0, duplicate=True,
        )

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Appends batches whose offsets a leader assigned (replication, recovery tools)."""
        buf = memoryview(records)
        batches, idempotent = self._validate(buf, from_client=False)
        controls = _control_infos(buf, batches, strict=False) if idempotent else {}
        with self._lock:
            self._check_writable(len(buf), from_client=False)
            first = batches[0][1].base_offset
            if first < self.log_end_offset:
                raise StorageError(
                    f"{self.name}: follower append at {first} is below the log end offset "
                    f"{self.log_end_offset}"
                )
            appends = [BatchAppend(pos, h.size_in_bytes, h.last_offset, h.max_timestamp)
                       for pos, h in batches]
            # Loaded before the append: loading scans up to the log end as it is now.
            producers = self._producers() if idempotent else None
            info = self._append(buf, appends, first, self.clock(), -1)
            for _, header in batches:
                if header.partition_leader_epoch >= 0:
                    self.leader_epoch_cache.assign(header.partition_leader_epoch,
                                                   header.base_offset)
            if producers is not None:
                segment = self._segments[-1]
                for pos, header in batches:  # the leader checked them
                    producers.replay(header, controls.get(pos),
                                     _abort_recorder(segment) if header.is_control else None)
            return info

    def _validate(self, buf: memoryview, from_client: bool,
                  origin: AppendOrigin = AppendOrigin.REPLICATION,
                  ) -> tuple[list[tuple[int, RecordBatchHeader]], bool]:
        """The batches, and whether any has a producer id. A leader's batches are walked
        record by record (log_validator.py), a follower's are not: it trusts its leader."""
        batches = list(iter_batch_headers(buf))
        if not batches:
            raise CorruptRecordError("the request carries no record batch")
        config = self.config
        now = self.clock()
        previous_last = -1
        idempotent = False
        walk = from_client and self.validation.enabled
        create_time = config.message_timestamp_type == "CreateTime"
        for pos, header in batches:
            if header.producer_id >= 0:
                idempotent = True
            if header.size_in_bytes > config.max_message_bytes:
                raise MessageTooLargeError(
                    f"record batch of {header.size_in_bytes} bytes is larger than "
                    f"max.message.bytes={config.max_message_bytes} of {self.name}"
                )
            validate_batch(buf, pos, header,
                           from_client=from_client and origin is AppendOrigin.CLIENT)
            if not from_client:
                if header.base_offset <= previous_last:
                    raise CorruptRecordError(f"offsets go backwards at {header.base_offset}")
                previous_last = header.last_offset
            elif walk:
                largest = validate_records(buf, pos, header, config, now, self.validation,
                                           self.name)
                if create_time and largest != header.max_timestamp:
                    # Kafka's setMaxTimestamp: the header says what the records hold (the
                    # time index and retention read it); the CRC follows.
                    set_max_timestamp(buf, pos, CREATE_TIME, largest)
                    header.max_timestamp = largest
        if len(buf) > config.segment_bytes:
            raise RecordBatchTooLargeError(
                f"{len(buf)} bytes of batches cannot fit a segment of "
                f"segment.bytes={config.segment_bytes}"
            )
        return batches, idempotent

    def _check_writable(self, size: int, from_client: bool) -> None:
        """Refuses an append, before anything is written, to an offline partition or dir,
        or (for clients' appends) one that would eat into the dir's free-space reserve.
        Followers' appends are not held to the reserve: they keep the ISR whole, and the
        leaders' refusals already stop new data."""
        if self.offline_reason is not None:
            raise LogDirOfflineError(f"{self.name} is offline: {self.offline_reason}")
        if self.log_dir is not None:
            self.log_dir.check_online()
            if from_client:
                self.log_dir.reserve(size)

    def _write_failed(self, e: Exception, undone: bool = True) -> StorageError:
        """What an I/O failure while writing makes of this log, as the error to raise. A
        segment changed under the broker takes this partition offline. Running out of space
        in a write that was cut off again (`undone`: the files end where they did) is
        retried by the producer, or, in a cluster where other replicas can lead, takes the
        dir offline as Kafka does. Any other error takes the dir offline."""
        if isinstance(e, SegmentChangedError | ProtocolError):
            self.offline_reason = str(e)
            log.error("%s is offline: %s", self.name, e)
            return LogDirOfflineError(f"{self.name} is offline: {e}")
        if self.log_dir is None:
            return e if isinstance(e, StorageError) else StorageError(f"{self.name}: {e}")
        if undone and is_no_space(e) and not self.log_dir.offline_on_full:
            self.log_dir.out_of_space()
            return DiskFullError(f"{self.name}: out of space in {self.log_dir.path} ({e}); "
                                 "nothing was written, retry once space is freed")
        return self.log_dir.fail(f"writing {self.name} failed: {e}")

    def _read_failed(self, e: Exception) -> StorageError:
        """A read that finds the files not as written (cut short, or garbage where a batch
        was) takes this partition offline: later appends would be acknowledged after
        unreadable data. An I/O error takes the dir offline, as Kafka does."""
        if isinstance(e, SegmentChangedError | ProtocolError):
            return self._write_failed(e)
        if isinstance(e, StorageError) or self.log_dir is None:
            return e if isinstance(e, StorageError) else StorageError(f"{self.name}: {e}")
        return self.log_dir.fail(f"reading {self.name} failed: {e}")

    def _append(self, buf: memoryview, batches: list[BatchAppend], first: int, now: int,
                append_time: int) -> LogAppendInfo:
        last = batches[-1].last_offset
        try:
            segment = self._maybe_roll(len(buf), last, now, len(batches))
            segment.append(buf, batches)
        except (OSError, StorageError, ProtocolError) as e:
            raise self._write_failed(e) from e
        self._log_end_offset = last + 1
        self._unflushed_messages += last + 1 - first
        if self._unflushed_messages >= self.config.flush_messages:
            self.flush()
        newest = max(batches, key=lambda b: b.max_timestamp)
        return LogAppendInfo(
            first_offset=first, last_offset=last, max_timestamp=newest.max_timestamp,
            offset_of_max_timestamp=newest.last_offset, log_append_time=append_time,
            log_start_offset=self.log_start_offset, valid_bytes=len(buf),
        )

    def _maybe_roll(self, size: int, last_offset: int, now: int, batch_count: int) -> LogSegment:
        segment = self._segments[-1]
        config = self.config
        roll_ms = config.segment_ms
        if config.compact:  # a quiet active segment must still become cleanable in time
            roll_ms = min(roll_ms, config.max_compaction_lag_ms)
        roll_ms -= self._jitter()
        if segment.should_roll(size, last_offset, now, config.segment_bytes, roll_ms,
                               batch_count):
            segment = self.roll(now)
        return segment

    def _jitter(self) -> int:
        # segment.jitter.ms: a per-partition fraction, so partitions do not all roll at once.
        jitter = self.config.segment_jitter_ms
        return self._name_hash % jitter if jitter > 0 else 0

    def roll(self, now: int | None = None) -> LogSegment:
        """Closes the active segment (last time index entry, trimmed indexes, fsync) and
        starts a new one at the log end offset. An empty active segment is kept."""
        with self._lock:
            active = self._segments[-1]
            if active.size == 0:
                return active
            new_base = self.log_end_offset
            now = self.clock() if now is None else now
            segment = _segment(self.directory, new_base, self.config, active=True, now=now)
            if segment.log_path.exists():
                raise StorageError(f"{segment.log_path} exists already: cannot roll {self.name}")
            segment.create()  # first: if it fails, the active segment is as it was
            try:
                active.on_become_inactive()
            except OSError as e:
                if not is_no_space(e):
                    raise self._write_failed(e, undone=False) from e
                # Its indexes are whole in memory and written at the next flush or close.
                log.warning("%s: no space to trim the indexes of %s: %s", self.name,
                            active.log_path.name, e)
            self._segments.append(segment)
            self._bases.append(new_base)
            # Recovery of the new segment can then start from a snapshot at its base; without
            # one (no space for it) recovery starts from an older one.
            try:
                self._producers().take_snapshot(new_base)
            except StorageError as e:
                log.warning("%s: no producer snapshot at %d: %s", self.name, new_base, e)
        # The rolled segment is fsynced in the background, as Kafka does: an fsync of a
        # whole segment must not stall the appends that follow it.
        if self.flush_in_background is None:
            self.flush_up_to(new_base)
        else:
            self.flush_in_background(lambda: self.flush_up_to(new_base))
        return segment

    def flush(self) -> None:
        """fsync everything past the recovery point, which then moves to the log end."""
        with self._lock:
            end = self.log_end_offset
            self._unflushed_messages = 0
            self.last_flush_ms = self.clock()
        self.flush_up_to(end)

    def flush_up_to(self, offset: int) -> None:
        """fsync the segments holding offsets below `offset`; the recovery point moves there.
        The fsyncs run outside the log's lock, so appends go on meanwhile."""
        with self._lock:
            offset = min(offset, self.log_end_offset)
            if offset <= self.recovery_point:
                return
            start = max(0, bisect.bisect_right(self._bases, self.recovery_point) - 1)
            segments = [s for s in self._segments[start:] if s.base_offset < offset]
        for segment in segments:  # two flushes at once only fsync twice: no lock needed
            try:
                segment.flush()
            except DiskFullError:
                # An index found no space: the recovery point stays where it is (what it
                # covers must be on disk) and the next flush tries again.
                if self.log_dir is not None:
                    self.log_dir.out_of_space()
                raise
            except OSError as e:
                if segment not in self.segments():
                    continue  # deleted meanwhile (retention, compaction): nothing to make durable
                # A failed fsync may have dropped dirty pages (fsyncgate): never trust the
                # dir again, as Kafka.
                raise self._write_failed(e, undone=False) from e
        with self._lock:
            self.recovery_point = max(self.recovery_point, min(offset, self.log_end_offset))

    def flush_if_due(self, now: int) -> bool:
        """flush.ms: fsync when the last flush is that old and there is something to flush."""
        due = now - self.last_flush_ms >= self.config.flush_ms
        if due and self.recovery_point < self.log_end_offset:
            self.flush()
            return True
        return False

    # ---- reads ------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_message: bool = True) -> FetchDataInfo:
        """Batches from the one holding `offset`, up to max_bytes (the first batch whole
        when min_one_message), none at or beyond max_offset (e.g. the high watermark)."""
        with self._lock:
            segments = list(self._segments)
            bases = list(self._bases)
            end = self.log_end_offset
            end_position = segments[-1].size
            start_offset = self.log_start_offset
        if offset < start_offset or offset > end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.name}: [{start_offset}, {end}]"
            )
        limit = end if max_offset is None else min(max_offset, end)
        if offset >= limit:
            return FetchDataInfo(offset, [])
        first = max(0, bisect.bisect_right(bases, offset) - 1)
        for i in range(first, len(segments)):
            segment = segments[i]
            max_position = None
            if limit == end and i == len(segments) - 1:
                max_position = end_position  # up to the log end: no lookup needed
            elif i == len(segments) - 1 or limit < bases[i + 1]:
                bound = segment.translate_offset(limit)
                max_position = segment.size if bound is None else bound.position
            try:
                found = segment.read(offset, max_bytes, max_position, min_one_message)
            except (OSError, StorageError, ProtocolError) as e:
                raise self._read_failed(e) from e
            if found is not None and found.length > 0:
                return FetchDataInfo(offset, [found])
            if max_position is not None:
                break
        return FetchDataInfo(offset, [])

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets: earliest (-2), latest (-1), max timestamp (-3), or the first record
        whose timestamp is >= `timestamp`; None when no record is that late."""
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampAndOffset(NO_TIMESTAMP, self.log_start_offset)
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(NO_TIMESTAMP, self.log_end_offset)
        segments = self.segments()
        if timestamp == MAX_TIMESTAMP:
            best = max(segments, key=lambda s: s.max_timestamp_and_offset()[0])
            timestamp = best.max_timestamp_and_offset()[0]
            if timestamp == NO_TIMESTAMP:
                return None
            segments = [best]
        for segment in segments:
            if segment.max_timestamp_and_offset()[0] >= timestamp:
                found = segment.find_offset_by_timestamp(timestamp, self.log_start_offset)
                if found is not None:
                    return TimestampAndOffset(*found)
        return None

    def legacy_offsets_before(self, timestamp: int, max_num_offsets: int) -> list[int]:
        """ListOffsets v0 (Kafka's legacyFetchOffsetsBefore): up to `max_num_offsets`
        segment base offsets, newest first, of the segments last modified at or before
        `timestamp`, the log end counting as a segment modified now. -1 (latest) starts
        at the log end, -2 (earliest) answers the log start alone."""
        segments = self.segments()
        start = self.log_start_offset
        # (offset, last modified) per segment; the log end too unless the active
        # segment is empty.
        points = [(max(s.base_offset, start), s.last_modified_ms) for s in segments]
        if segments[-1].size > 0:
            points.append((self.log_end_offset, self.clock()))
        if timestamp == LATEST_TIMESTAMP:
            index = len(points) - 1
        elif timestamp == EARLIEST_TIMESTAMP:
            index = 0
        else:
            index = len(points) - 1
            while index >= 0 and points[index][1] > timestamp:
                index -= 1
        wanted = min(max_num_offsets, index + 1)
        return sorted((points[i][0] for i in range(index, index - wanted, -1)), reverse=True)

    def read_records(self, offset: int, max_bytes: int = 1 << 20) -> list[Record]:
        """Decoded records from `offset` on: for tools and tests, not the fetch path."""
        data = self.read(offset, max_bytes).read()
        out: list[Record] = []
        for pos, header in iter_batch_headers(data, allow_partial=True):
            out += [r for r in decode_records(data, pos, header) if r.offset >= offset]
        return out

    # ---- retention --------------------------------------------------------------------

    def maybe_increment_log_start_offset(self, offset: int) -> None:
        """DeleteRecords: records below `offset` become unreadable at once; their segments
        go at the next retention pass."""
        with self._lock:
            if offset > self.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"cannot move the log start of {self.name} to {offset}, beyond the log "
                    f"end offset {self.log_end_offset}"
                )
            self.log_start_offset = max(self.log_start_offset, offset)
            self.leader_epoch_cache.truncate_from_start(self.log_start_offset)

    def delete_old_segments(self, now: int | None = None) -> list[int]:
        """Deletes whole segments that retention.ms, retention.bytes or the log start offset
        no longer keep. Returns their base offsets."""
        with self._lock:
            now = self.clock() if now is None else now
            count = self._deletable_prefix(now)
            if count == 0:
                return []
            if count == len(self._segments):
                if self.active_segment.size == 0:
                    count -= 1  # an empty active segment has nothing to delete
                else:
                    self.roll(now)  # never leave the log without a segment
            deleted = self._segments[:count]
            del self._segments[:count]
            del self._bases[:count]
            for segment in deleted:
                segment.rename_suffix("", DELETED_SUFFIX)
                self._pending_deletions.append((now + self.config.file_delete_delay_ms, segment))
            self.log_start_offset = max(self.log_start_offset, self._bases[0])
            self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
            self.recovery_point = max(self.recovery_point, self._bases[0])
            # The producers stay (KIP-360: until producer.id.expiration.ms), their older
            # snapshots go.
            self.producer_state.delete_snapshots_before(self._bases[0])
            return [s.base_offset for s in deleted]

    def _deletable_prefix(self, now: int) -> int:
        """How many of the oldest segments go: Kafka's three passes one after another (log
        start offset, then retention.bytes, then retention.ms), each from where the last
        stopped, each stopping at the first segment it keeps."""
        segments = self._segments
        count = 0
        while count < len(segments) - 1 and self._bases[count + 1] <= self.log_start_offset:
            count += 1
        if not self.config.delete:
            return count
        retention_bytes = self.config.retention_bytes
        if retention_bytes >= 0:
            excess = sum(s.size for s in segments[count:]) - retention_bytes
            while count < len(segments) and excess - segments[count].size >= 0:
                excess -= segments[count].size
                count += 1
        retention_ms = self.config.retention_ms
        if retention_ms >= 0:
            while (
                count < len(segments)
                and now - segments[count].largest_timestamp > retention_ms
            ):
                count += 1
        return count

    def delete_pending_files(self, now: int) -> int:
        """Removes .deleted files whose file.delete.delay.ms has passed."""
        with self._lock:
            due = [s for t, s in self._pending_deletions if t <= now]
            self._pending_deletions = [(t, s) for t, s in self._pending_deletions if t > now]
        for segment in due:
            segment.delete_files()
        return len(due)

    # ---- truncation and replacement ---------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Removes everything at and after `offset` (a follower diverging from its leader)."""
        with self._lock:
            if offset >= self.log_end_offset:
                # As Kafka: an epoch that starts at the log end wrote nothing (this broker
                # led briefly and appended nothing); it conflicts with the leader's.
                self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
                return
            if offset <= self._bases[0]:
                self.truncate_fully_and_start_at(offset)
                return
            while self._bases[-1] >= offset:
                self._segments.pop().delete_files()
                self._bases.pop()
            active = self._segments[-1]
            active.offset_index.make_writable()
            active.time_index.make_writable()
            active.truncate_to(offset)
            # As Kafka: the end is the target, even after a compaction gap below it.
            self._log_end_offset = offset
            self.leader_epoch_cache.truncate_from_end(offset)
            self.recovery_point = min(self.recovery_point, offset)
            self.log_start_offset = min(self.log_start_offset, offset)
            # Reloaded on next use from the newest snapshot left and the batches after it.
            self.producer_state.delete_snapshots_after(offset)
            self.producer_state.reset(loaded=False)
            self._snapshot_at_end = False

    def truncate_fully_and_start_at(self, offset: int) -> None:
        with self._lock:
            for segment in self._segments:
                segment.delete_files()
            segment = _segment(self.directory, offset, self.config, active=True, now=self.clock())
            segment.create()
            self._segments = [segment]
            self._bases = [offset]
            self._log_end_offset = offset
            self.log_start_offset = offset
            self.recovery_point = offset
            self.producer_state.delete_all_snapshots()
            self.producer_state.reset(loaded=True)  # nothing written yet: no producers
            self.leader_epoch_cache.clear()
            self._snapshot_at_end = False

    def replace_segments(self, new: LogSegment, old: list[LogSegment],
                         expected_sizes: list[int] | None = None) -> None:
        """Swaps a compacted segment (written with the .cleaned suffix, flushed) in for the
        segments it replaces, with Kafka's crash-safe steps: .cleaned -> .swap; old
        segments -> .deleted; .swap -> live. A crash at any step is completed on open:
        old segments starting below the swap's next offset are dropped then, so the new
        segment must end where the old ones did (the cleaner keeps their last batch).

        Refuses (StorageError, nothing changed) when the old segments are no longer what
        the caller read: gone, the active segment, or resized (by a truncation).
        """
        with self._lock:
            if (
                not old
                or any(s not in self._segments for s in old)
                or old[-1] is self._segments[-1]
                or (expected_sizes is not None
                    and [s.size for s in old] != list(expected_sizes))
            ):
                raise StorageError(f"{self.name}: segments to replace changed meanwhile")
            new.rename_suffix(CLEANED_SUFFIX, SWAP_SUFFIX)
            i = self._segments.index(old[0])
            del self._segments[i : i + len(old)]
            del self._bases[i : i + len(old)]
            now = self.clock()
            for segment in old:
                segment.rename_suffix("", DELETED_SUFFIX)
                self._pending_deletions.append((now + self.config.file_delete_delay_ms, segment))
            new.rename_suffix(SWAP_SUFFIX, "")
            self._segments.insert(i, new)
            self._bases.insert(i, new.base_offset)
            # As Kafka: the snapshots of segments merged into another go with them.
            self.producer_state.delete_snapshots_at(
                s.base_offset for s in old if s.base_offset != new.base_offset)

    # ---- producer state ---------------------------------------------------------------

    def _producers(self) -> ProducerStateManager:
        """The producer state, loaded on first use. Call with the lock held."""
        state = self.producer_state
        if not state.loaded:
            self._load_producer_state()
        return state

    def _load_producer_state(self) -> None:
        """Kafka's rebuildProducerState: the newest readable snapshot at or below the log
        end, then the batch headers from its offset (or the log start) to the end."""
        state = self.producer_state
        end = self.log_end_offset
        state.delete_snapshots_after(end)
        newest = state.latest_snapshot_offset
        loaded_at = state.load_latest_snapshot(self.clock())
        # After a clean shutdown the newest snapshot is the state at the log end, and no
        # snapshot at all means a log older than producer state, which Kafka's upgrade rule
        # takes as having no producers rather than scan it all. Otherwise (a crash, a
        # truncation, a corrupt newest snapshot) the batches after the snapshot are replayed.
        if not (self._snapshot_at_end and loaded_at == newest):
            start = max(self.log_start_offset, 0 if loaded_at is None else loaded_at)
            for header, control in self._batch_headers_from(start):
                state.replay(header, control)
        if self._high_watermark is not None:
            state.on_high_watermark_updated(self._high_watermark)
        state.loaded = True
        self._snapshot_at_end = False

    def _producer_state_at(self, offset: int) -> ProducerStateManager:
        """Recovery: the producer state (not marked loaded) for the offsets below
        `offset`, a segment's base: the newest snapshot at or below it, then the batches
        from there to it."""
        state = self.producer_state
        loaded_at = state.load_latest_snapshot(self.clock(), at_most=offset)
        start = max(self.log_start_offset, 0 if loaded_at is None else loaded_at)
        if start < offset:
            for header, control in self._batch_headers_from(start, offset):
                state.replay(header, control)
        return state

    def _replay_segment(self, state: ProducerStateManager, segment: LogSegment, *,
                        record_aborts: bool) -> None:
        """Replays a segment's producer batches; aborts go into its .txnindex."""
        recorder = _abort_recorder(segment) if record_aborts else None
        for header, position in _producer_batch_headers(segment, 0):
            control = _read_control(segment, header, position) if header.is_control else None
            state.replay(header, control, recorder if header.is_control else None)

    def _batch_headers_from(self, start: int, end: int | None = None,
                            ) -> Iterator[tuple[RecordBatchHeader, ControlInfo | None]]:
        """Headers of the batches with a producer id holding offsets >= start (and below
        `end`, a segment base, when given), to the log end, with the record of each control
        batch; other records are never decoded."""
        first = max(0, bisect.bisect_right(self._bases, start) - 1)
        for segment in self._segments[first:]:
            if end is not None and segment.base_offset >= end:
                return
            position = 0
            if segment.base_offset < start:
                found = segment.translate_offset(start)
                if found is None:
                    continue
                position = found.position
            for header, pos in _producer_batch_headers(segment, position):
                if header.last_offset >= start:
                    control = _read_control(segment, header, pos) if header.is_control else None
                    yield header, control

    # ---- transactions -----------------------------------------------------------------

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction not decided yet, or decided but with
        its marker not below the high watermark yet (update_high_watermark); None when
        there is none; never below the log start offset (as Kafka: a transaction whose
        start was deleted holds back only what is left). Loads the producer state if it is
        not (a snapshot read)."""
        with self._lock:
            first = self._producers().first_unstable_offset
            return None if first is None else max(first, self.log_start_offset)

    def update_high_watermark(self, high_watermark: int) -> None:
        """The partition's high watermark moved (or was set): transactions whose markers
        are below it are stable now (Kafka's onHighWatermarkUpdated)."""
        with self._lock:
            self._high_watermark = high_watermark
            if self.producer_state.loaded:
                self.producer_state.on_high_watermark_updated(high_watermark)

    def last_stable_offset(self, high_watermark: int) -> int:
        """The offset below which every transaction is decided and replicated: the first
        unstable offset when it is below the high watermark, else the high watermark."""
        first = self.first_unstable_offset
        return high_watermark if first is None or first >= high_watermark else first

    def collect_aborted_transactions(self, start_offset: int,
                                     upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start_offset, upper_bound_offset): the
        .txnindex entries of the segment holding start_offset and of the later ones, until
        one says no later abort can start below the bound (Kafka's
        collectAbortedTransactions)."""
        segments = self.segments()
        bases = [s.base_offset for s in segments]
        first = max(0, bisect.bisect_right(bases, start_offset) - 1)
        aborted: list[AbortedTxn] = []
        for segment in segments[first:]:
            try:
                found = segment.txn_index.collect_aborted(start_offset, upper_bound_offset)
            except (OSError, StorageError) as e:
                raise self._read_failed(e) from e
            aborted += found.aborted
            if found.is_complete:
                break
        return aborted

    def aborted_transactions_of(self, info: FetchDataInfo) -> list[AbortedTxn]:
        """The aborted transactions a read_committed consumer needs for what `info` holds:
        from its fetch offset to an offset past its batches (the first offset-index entry
        past them, else the next segment's base, else the log end), as Kafka's
        addAbortedTransactions."""
        if not info.slices:
            return []
        found = info.slices[-1]
        segment = found.segment
        upper = segment.fetch_upper_bound_offset(found.position, found.length)
        if upper is None:
            with self._lock:
                later = [b for b in self._bases if b > segment.base_offset]
                upper = later[0] if later else self.log_end_offset
        return self.collect_aborted_transactions(info.fetch_offset, upper)

    def active_producers(self) -> dict[int, ProducerStateEntry]:
        """The producers the log knows, by producer id (copies): for DescribeProducers,
        tools and tests."""
        with self._lock:
            return {pid: e.copy() for pid, e in self._producers().producers.items()}

    def last_offsets_of_active_producers(self) -> dict[int, int]:
        """producer id -> offset of its last data batch, for producers that have one: the
        batches the cleaner keeps (Kafka's lastRecordsOfActiveProducers)."""
        with self._lock:
            return {pid: e.last_data_offset for pid, e in self._producers().producers.items()
                    if e.batches}

    def remove_expired_producers(self, now: int | None = None) -> int:
        """producer.id.expiration.ms: forgets producers whose last batch is that old.
        Returns how many. A state not loaded yet is filtered when it is loaded."""
        with self._lock:
            if not self.producer_state.loaded:
                return 0
            now = self.clock() if now is None else now
            return self.producer_state.remove_expired_producers(now)

    # ---- closing ----------------------------------------------------------------------

    def close(self) -> None:
        """Flushes and closes every segment (indexes trimmed) and snapshots the producer
        state at the log end offset: a clean shutdown's part."""
        with self._lock:
            self.flush()
            end = self.log_end_offset
            state = self.producer_state
            # The next clean open trusts the newest snapshot to be at the log end.
            if state.loaded or state.latest_snapshot_offset != end:
                self._producers().take_snapshot(end)
            for segment in self._segments:
                segment.close()
            for _, segment in self._pending_deletions:
                segment.close_handles()

    def delete(self) -> None:
        """Removes the whole partition directory (DeleteTopics)."""
        with self._lock:
            for segment in self._segments:
                segment.delete_files()
            for _, segment in self._pending_deletions:
                segment.delete_files()
            self._pending_deletions.clear()
            for path in self.directory.iterdir():
                path.unlink()
            self.directory.rmdir()


def _control_infos(buf: memoryview, batches: list[tuple[int, RecordBatchHeader]], *,
                   strict: bool) -> dict[int, ControlInfo]:
    """The record of each control batch with a producer id, by the batch's position. A
    leader refuses a marker it cannot read (`strict`); a follower trusts its leader and
    takes an unreadable one as an unknown control record."""
    controls: dict[int, ControlInfo] = {}
    for pos, header in batches:
        if header.is_control and header.producer_id >= 0:
            try:
                controls[pos] = _decode_control(buf, pos, header)
            except ProtocolError:
                if strict:
                    raise
                controls[pos] = (-1, -1)
    return controls


def _decode_control(buf: bytes | memoryview, pos: int, header: RecordBatchHeader) -> ControlInfo:
    records = decode_records(buf, pos, header)
    if not records:
        raise CorruptRecordError("a control batch without its control record")
    control_type, coordinator_epoch = decode_control_record(records[0])
    return control_type, -1 if coordinator_epoch is None else coordinator_epoch


def _read_control(segment: LogSegment, header: RecordBatchHeader, position: int) -> ControlInfo:
    """The control record of the control batch at `position` of `segment`."""
    try:
        return _decode_control(segment.pread(position, header.size_in_bytes), 0, header)
    except ProtocolError:
        return -1, -1  # recovery validated the batch: an unknown control record


def _abort_recorder(segment: LogSegment) -> Callable[[CompletedTxn, int], None]:
    """For replay: records completed aborts in `segment`'s .txnindex."""
    def record(txn: CompletedTxn, last_stable_offset: int) -> None:
        if txn.is_aborted:
            segment.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset,
                                                txn.last_offset, last_stable_offset))
    return record


def _producer_batch_headers(segment: LogSegment, position: int,
                            ) -> Iterator[tuple[RecordBatchHeader, int]]:
    """Headers of the batches with a producer id, and their positions, from `position` to
    the end of the segment, read in chunks. Other batches cost one small unpack (length,
    magic, producer id) and no object; records are never decoded, and a batch that runs
    past the chunk is skipped by position, so the next read starts after it."""
    size = segment.size
    peek = _LENGTH_MAGIC_PRODUCER.unpack_from
    while position < size:
        chunk = segment.pread(position, min(_PRODUCER_SCAN_CHUNK, size - position))
        end = len(chunk)
        pos = 0
        while end - pos >= RECORD_BATCH_OVERHEAD:
            length, magic, producer_id = peek(chunk, pos)
            if producer_id >= 0 or magic != CURRENT_MAGIC_VALUE or length < MIN_BATCH_LENGTH:
                header = RecordBatchHeader.parse(chunk, pos)  # raises for a bad header
                yield header, position + pos
            pos += length + LOG_OVERHEAD
        if pos == 0:
            return  # less than a header left: a torn end, which recovery has cut
        position += pos


def _segment(directory: Path, base: int, config: LogConfig, *, active: bool, now: int,
             suffix: str = "") -> LogSegment:
    return LogSegment(
        directory, base,
        index_interval_bytes=config.index_interval_bytes,
        max_index_size=config.segment_index_bytes,
        active=active, suffix=suffix, created_ms=now,
    )


def _complete_interrupted_operations(directory: Path, config: LogConfig) -> None:
    """What a crash can leave half done: deletions (finish them), compaction output not yet
    swapped in (.cleaned: discard), and swaps (.swap: complete them, as Kafka does)."""
    swaps: list[int] = []
    swap_indexes: list[tuple[int, str]] = []
    for name in os.listdir(directory):
        match = _SEGMENT_FILE.match(name)
        if match is None:
            continue
        suffix = match.group(3)
        if suffix in (DELETED_SUFFIX, CLEANED_SUFFIX):
            (directory / name).unlink()
        elif suffix == SWAP_SUFFIX:
            if match.group(2) == "log":
                swaps.append(int(match.group(1)))
            else:
                swap_indexes.append((int(match.group(1)), name))
    # Index .swap files without their .log.swap: the swap went live; the offset and time
    # indexes are rebuilt, the .txnindex (which only the swap's writer knew) goes live too.
    for base, name in swap_indexes:
        if base not in swaps:
            if name.endswith(TXN_INDEX_SUFFIX + SWAP_SUFFIX):
                os.replace(directory / name, directory / name.removesuffix(SWAP_SUFFIX))
            else:
                (directory / name).unlink()
    for base in swaps:
        swap = _segment(directory, base, config, active=False, now=0, suffix=SWAP_SUFFIX)
        swap.rebuild_indexes()  # its indexes may be missing; this also validates it
        end = swap.next_offset()
        swap.close_handles()
        # The old segments the swap replaces: those starting within its offset range.
        for name in os.listdir(directory):
            match = _SEGMENT_FILE.match(name)
            if match and not match.group(3) and base <= int(match.group(1)) < end:
                (directory / name).unlink()
        swap.rename_suffix(SWAP_SUFFIX, "")
