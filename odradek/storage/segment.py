"""LogSegment: one .log file of record batches, its two indexes and its aborted-transaction
index (.txnindex, created by the first abort whose marker lands in the segment).

Batches are written exactly as they were validated, so a segment is byte-compatible with
Kafka's. Reads return FileSlices (file, position, length) for the server to sendfile,
never copies. Header scans read only batch headers, in chunks, so finding an offset in
a 1 GiB segment costs an index lookup and a few kilobytes of I/O.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from odradek.protocol.exceptions import ProtocolError
from odradek.protocol.records import (
    RECORD_BATCH_OVERHEAD,
    RecordBatchHeader,
    decode_records,
    iter_batch_headers,
    validate_batch,
)
from odradek.storage.errors import DiskFullError, SegmentChangedError, StorageError
from odradek.storage.index import NO_TIMESTAMP, CorruptIndexError, OffsetIndex, TimeIndex
from odradek.storage.log_dir import is_no_space
from odradek.storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

# Header scans read this much at a time: twice the default index interval, so finding an
# offset from its index entry is usually one read, and a large batch costs one read each.
_SCAN_CHUNK = 8 * 1024
_RECOVERY_CHUNK = 8 * 1024 * 1024  # recovery reads the log in chunks this large
_MAX_RELATIVE_OFFSET = 0xFFFFFFFF  # index entries store offsets relative to the base, u32


def segment_file_name(base_offset: int, suffix: str) -> str:
    """Kafka's names: the base offset in 20 digits, e.g. 00000000000000000042.log."""
    return f"{base_offset:020d}{suffix}"


@dataclass(frozen=True, slots=True)
class FileSlice:
    """A range of a segment's .log file: what a fetch sends, by sendfile where it can."""

    segment: LogSegment
    position: int
    length: int

    def fileno(self) -> int:
        return self.segment.fileno()

    def read(self) -> bytes:
        """The bytes themselves, for transports that cannot sendfile, and for tests."""
        return self.segment.pread(self.position, self.length)


class BatchAppend(NamedTuple):
    """What indexing needs of an appended batch: where it is in the appended bytes."""

    position: int
    size: int
    last_offset: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class BatchPosition:
    """Where a batch is: its first and last offsets, position and size in the file."""

    base_offset: int
    last_offset: int
    position: int
    size: int


class LogSegment:
    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        active: bool,
        suffix: str = "",
        created_ms: int = 0,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = directory / segment_file_name(base_offset, LOG_SUFFIX + suffix)
        self.offset_index = OffsetIndex(
            directory / segment_file_name(base_offset, INDEX_SUFFIX + suffix),
            base_offset, max_index_size, writable=active,
        )
        self.time_index = TimeIndex(
            directory / segment_file_name(base_offset, TIME_INDEX_SUFFIX + suffix),
            base_offset, max_index_size, writable=active,
        )
        self.txn_index = TransactionIndex(
            directory / segment_file_name(base_offset, TXN_INDEX_SUFFIX + suffix), base_offset)
        self._fd: int | None = None
        self._size: int | None = None
        # The largest timestamp in the segment and the last offset of its batch; for a
        # segment loaded from disk, read from the time index on first use.
        self._max_timestamp: tuple[int, int] | None = None
        self._bytes_since_last_index_entry = 0
        # segment.ms counts from the first batch's timestamp (or creation when it has none).
        self.rolling_based_timestamp: int | None = None
        self.created_ms = created_ms

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path.name}, size={self.size})"

    # ---- files ------------------------------------------------------------------------

    def fileno(self) -> int:
        if self._fd is None:
            path = self.log_path
            try:
                self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            except FileNotFoundError:
                # Renamed (to .deleted, or from .swap) between reading the path and opening
                # it: the rename updated log_path, so the file is there under its new name.
                if self.log_path == path:
                    raise
                self._fd = os.open(self.log_path, os.O_RDWR | os.O_APPEND)
        return self._fd

    def create(self) -> None:
        """Creates the .log file now: its name records the base offset on disk, so offsets
        continue from it even when the segment stays empty (after retention emptied a log).
        A .txnindex left at this base by an interrupted deletion is not this segment's."""
        self.fileno()
        self._size = 0
        self.txn_index.reset()

    @property
    def size(self) -> int:
        if self._size is None:
            try:
                self._size = os.stat(self.log_path).st_size
            except FileNotFoundError:
                self._size = 0
        return self._size

    def pread(self, position: int, length: int) -> bytes:
        return os.pread(self.fileno(), length, position)

    def flush(self) -> None:
        """fsync the log and its indexes. An index that finds no space raises DiskFullError:
        the log's bytes are durable, the index is written again at the next flush."""
        if self._fd is not None:
            os.fsync(self._fd)
        try:
            self.offset_index.flush()
            self.time_index.flush()
            self.txn_index.flush()
        except OSError as e:
            if not is_no_space(e):
                raise
            raise DiskFullError(f"no space for the indexes of {self.log_path}: {e}") from e

    def close(self) -> None:
        self._append_final_time_index_entry()
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def close_handles(self) -> None:
        """Closes files without touching them on disk (a deleted or replaced segment)."""
        self.offset_index.discard()
        self.time_index.discard()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def paths(self) -> list[Path]:
        return [self.log_path, self.offset_index.path, self.time_index.path,
                self.txn_index.path]

    def rename_suffix(self, old: str, new: str) -> None:
        """Renames all four files, e.g. from '' to '.deleted' or from '.swap' to ''."""
        for path, setter in (
            (self.log_path, self._set_log_path),
            (self.offset_index.path, self.offset_index.rename),
            (self.time_index.path, self.time_index.rename),
            (self.txn_index.path, self.txn_index.rename),
        ):
            name = path.name.removesuffix(old) if old else path.name
            setter(path.with_name(name + new))

    def _set_log_path(self, path: Path) -> None:
        if self.log_path.exists():
            os.replace(self.log_path, path)
        self.log_path = path

    def delete_files(self) -> None:
        self.close_handles()
        self.txn_index.delete()
        for path in self.paths():
            path.unlink(missing_ok=True)

    def fetch_upper_bound_offset(self, position: int, size: int) -> int | None:
        """An offset beyond every batch of the `size` bytes read from `position` (Kafka's
        fetchUpperBoundOffset): that of the first offset-index entry at or past their
        end; None when the index has none (then the next segment's base bounds them)."""
        try:
            index = self.offset_index
            n = index.entries
            lo, hi, found = 0, n - 1, -1
            while lo <= hi:
                mid = (lo + hi) // 2
                if index.entry(mid)[1] >= position + size:
                    found, hi = mid, mid - 1
                else:
                    lo = mid + 1
            return None if found < 0 else self.base_offset + index.entry(found)[0]
        except CorruptIndexError:
            return None

    # ---- appends ----------------------------------------------------------------------

    def can_hold(self, last_offset: int) -> bool:
        """Offsets are stored relative to the base in u32: beyond that, roll."""
        return 0 <= last_offset - self.base_offset <= _MAX_RELATIVE_OFFSET

    def append(self, data: memoryview, batches: list[BatchAppend]) -> None:
        """Writes validated batches (offsets assigned) and indexes them as Kafka does.

        All or nothing: a write that fails part way (ENOSPC, EIO) is cut off again before
        the error goes up, so the file ends where it did and the next append lands where
        the indexes say. A file that is not what was written (deleted, truncated or grown
        by something else) is refused: appending there would make offsets unreadable."""
        position = self.size
        fd = self.fileno()
        st = os.fstat(fd)
        if st.st_nlink == 0 or st.st_size != position:
            raise SegmentChangedError(
                f"{self.log_path} was deleted or changed by something else: "
                + ("it is gone" if st.st_nlink == 0
                   else f"{st.st_size} bytes where the broker wrote {position}"))
        written = 0
        try:
            while written < len(data):
                written += os.write(fd, data[written:])
        except OSError as e:
            try:
                os.ftruncate(fd, position)
            except OSError as undo:
                raise StorageError(f"{self.log_path}: a failed append ({e}) could not be "
                                   f"cut off: {undo}") from e
            raise
        if self.rolling_based_timestamp is None and batches:
            self.rolling_based_timestamp = batches[0].max_timestamp
        self._index_batches(position, batches)
        self._size = position + len(data)

    def _index_batches(self, position: int, batches: list[BatchAppend]) -> None:
        max_ts = self.max_timestamp_and_offset()
        interval = self.index_interval_bytes
        since = self._bytes_since_last_index_entry
        for batch in batches:
            if batch.max_timestamp > max_ts[0]:
                max_ts = (batch.max_timestamp, batch.last_offset)
                self._max_timestamp = max_ts
            if since > interval:
                self.offset_index.append(batch.last_offset, position + batch.position)
                self.time_index.maybe_append(*max_ts)
                since = 0
            since += batch.size
        self._bytes_since_last_index_entry = since

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """(largest timestamp, last offset of its batch); NO_TIMESTAMP when none."""
        if self._max_timestamp is None:
            try:
                self._max_timestamp = self.time_index.last_entry()
            except CorruptIndexError:
                self.rebuild_indexes()
                assert self._max_timestamp is not None
        return self._max_timestamp

    @property
    def last_modified_ms(self) -> int:
        """The log file's mtime (Kafka's LogSegment.lastModified)."""
        try:
            return int(os.stat(self.log_path).st_mtime * 1000)
        except FileNotFoundError:
            return self.created_ms

    @property
    def largest_timestamp(self) -> int:
        """What retention.ms compares: the largest timestamp, or the file's mtime if no
        batch carried one (as Kafka)."""
        timestamp = self.max_timestamp_and_offset()[0]
        return self.last_modified_ms if timestamp == NO_TIMESTAMP else timestamp

    def on_become_inactive(self) -> None:
        """On roll: a last time-index entry for the segment's max, then trim both indexes."""
        self._append_final_time_index_entry()
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def _append_final_time_index_entry(self) -> None:
        """The segment's largest timestamp in its time index, as Kafka writes it on roll,
        close and recovery: retention reads it from there after a restart."""
        if self._max_timestamp is None:
            return  # never loaded, so the index already ends with it
        ts, offset = self._max_timestamp
        if ts != NO_TIMESTAMP and self.time_index.writable:
            self.time_index.maybe_append(ts, offset, skip_full_check=True)

    def should_roll(self, batch_bytes: int, last_offset: int, now_ms: int, config_bytes: int,
                    roll_ms: int, batch_count: int = 1) -> bool:
        """Kafka's reasons to roll before an append: size, age, relative-offset overflow,
        and indexes without room for one entry per appended batch."""
        if self.size == 0:
            return False
        if self.rolling_based_timestamp is None:  # reopened: Kafka's loadFirstBatchTimestamp
            first = RecordBatchHeader.parse(self.pread(0, RECORD_BATCH_OVERHEAD))
            self.rolling_based_timestamp = first.max_timestamp
        since = self.rolling_based_timestamp
        if since < 0:
            since = self.created_ms
        return (
            self.size > config_bytes - batch_bytes
            or now_ms - since > roll_ms
            or self.offset_index.entries + batch_count > self.offset_index.max_entries
            or self.time_index.entries + batch_count > self.time_index.max_entries
            or not self.can_hold(last_offset)
        )

    # ---- reads ------------------------------------------------------------------------

    def _headers_from(self, position: int, end: int | None = None) -> Iterator[BatchPosition]:
        """The batches from `position` on, reading headers only, a chunk at a time."""
        end = self.size if end is None else end
        fd = self.fileno()
        chunk = b""
        chunk_start = position
        while position < end:
            rel = position - chunk_start
            if rel + RECORD_BATCH_OVERHEAD > len(chunk):
                chunk_start, rel = position, 0
                chunk = os.pread(fd, max(min(_SCAN_CHUNK, end - position), RECORD_BATCH_OVERHEAD),
                                 position)
                if len(chunk) < RECORD_BATCH_OVERHEAD:
                    return
            header = RecordBatchHeader.parse(chunk, rel)
            size = header.size_in_bytes
            yield BatchPosition(header.base_offset, header.last_offset, position, size)
            position += size

    def translate_offset(self, offset: int, starting_position: int = 0) -> BatchPosition | None:
        """The batch holding `offset` (the first whose last offset is >= it), or None."""
        _, position = self._offset_index_lookup(offset)
        for batch in self._headers_from(max(position, starting_position)):
            if batch.last_offset >= offset:
                return batch
        return None

    def _offset_index_lookup(self, offset: int) -> tuple[int, int]:
        try:
            return self.offset_index.lookup(offset)
        except CorruptIndexError:
            self.rebuild_indexes()
            return self.offset_index.lookup(offset)

    def read(self, offset: int, max_size: int, max_position: int | None = None,
             min_one_message: bool = True) -> FileSlice | None:
        """Up to max_size bytes of whole batches from the one holding `offset` (a batch
        larger than max_size still comes whole when min_one_message, as in Kafka), never
        past max_position. None when the segment has nothing at or after `offset`."""
        start = self.translate_offset(offset)
        if start is None:
            return None
        limit = self.size if max_position is None else max_position
        if start.position >= limit:
            return FileSlice(self, start.position, 0)
        if min_one_message:
            max_size = max(max_size, start.size)
        length = min(limit - start.position, max_size)
        # A response promises these bytes before sending them from the file: a file cut
        # short under the broker would break the connection's framing, so refuse first.
        actual = os.fstat(self.fileno()).st_size
        if actual < start.position + length:
            raise SegmentChangedError(f"{self.log_path} is {actual} bytes, shorter than the "
                                      f"{start.position + length} the broker wrote")
        return FileSlice(self, start.position, length)

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record at or after `timestamp` (and at or after
        start_offset), as ListOffsets answers; None if no record in the segment is that late."""
        try:
            _, indexed_offset = self.time_index.lookup(timestamp)
        except CorruptIndexError:
            self.rebuild_indexes()
            _, indexed_offset = self.time_index.lookup(timestamp)
        _, position = self._offset_index_lookup(max(indexed_offset, start_offset))
        for batch in self._headers_from(position):
            data = self.pread(batch.position, batch.size)
            header = RecordBatchHeader.parse(data)
            if header.max_timestamp < timestamp or batch.last_offset < start_offset:
                continue
            for record in decode_records(data, 0, header):
                if record.timestamp >= timestamp and record.offset >= start_offset:
                    return record.timestamp, record.offset
        return None

    def next_offset(self) -> int:
        """The offset after the last batch: the base offset when empty."""
        last = None
        _, position = self._offset_index_lookup(2**63 - 1)
        for batch in self._headers_from(position):
            last = batch
        return self.base_offset if last is None else last.last_offset + 1

    def batches(self, start_position: int = 0) -> Iterator[BatchPosition]:
        return self._headers_from(start_position)

    # ---- recovery and truncation ------------------------------------------------------

    def recover(self, expected_start: int | None = None) -> int:
        """Re-validates every batch (header, CRC, offsets moving forward) and rebuilds both
        indexes; cuts the file at the first torn or corrupt batch. Returns the bytes cut."""
        for index in (self.offset_index, self.time_index):
            index.make_writable()
            index.reset()
        self._max_timestamp = (NO_TIMESTAMP, self.base_offset)
        self._bytes_since_last_index_entry = 0
        self.rolling_based_timestamp = None
        size = self.size
        fd = self.fileno()
        next_offset = self.base_offset if expected_start is None else expected_start
        position = chunk_start = 0
        chunk = b""
        valid: list[BatchAppend] = []  # indexed a chunk at a time
        while position < size:
            rel = position - chunk_start
            if rel + RECORD_BATCH_OVERHEAD > len(chunk):
                self._index_batches(0, valid)
                valid.clear()
                chunk_start, rel = position, 0
                chunk = os.pread(fd, min(_RECOVERY_CHUNK, size - position), position)
                if len(chunk) < RECORD_BATCH_OVERHEAD:
                    break  # torn: not even a whole header
            try:
                header = RecordBatchHeader.parse(chunk, rel)
            except ProtocolError:
                break  # not a v2 batch header: garbage or zeros where a batch should be
            batch_size = header.size_in_bytes
            if batch_size < RECORD_BATCH_OVERHEAD or position + batch_size > size:
                break  # torn, or a length field no valid batch has
            if rel + batch_size > len(chunk):
                self._index_batches(0, valid)
                valid.clear()
                chunk_start, rel = position, 0
                chunk = os.pread(fd, max(min(_RECOVERY_CHUNK, size - position), batch_size),
                                 position)
            try:
                validate_batch(chunk, rel, header, from_client=False)
            except ProtocolError:
                break
            if header.base_offset < next_offset or not self.can_hold(header.last_offset):
                break  # offsets must move forward and fit the index
            if self.rolling_based_timestamp is None:
                self.rolling_based_timestamp = header.max_timestamp
            valid.append(BatchAppend(position, batch_size, header.last_offset,
                                     header.max_timestamp))
            next_offset = header.last_offset + 1
            position += batch_size
        self._index_batches(0, valid)
        self._append_final_time_index_entry()
        truncated = size - position
        if truncated:
            os.ftruncate(fd, position)
            self._size = position
        return truncated

    def rebuild_indexes(self) -> None:
        """Missing or corrupt indexes: rebuild from the log (which recovery re-validates)."""
        was_active = self.offset_index.writable
        self.offset_index.close()
        self.time_index.close()
        for index in (self.offset_index, self.time_index):
            index.path.unlink(missing_ok=True)
        self.recover()
        if not was_active:
            self.offset_index.trim_to_valid_size()
            self.time_index.trim_to_valid_size()

    def truncate_to(self, offset: int) -> int:
        """Removes batches at and after `offset` (whole batches: the one holding `offset`
        goes too, as in Kafka). Returns the bytes removed."""
        batch = self.translate_offset(offset)
        if batch is None:
            return 0
        self.offset_index.make_writable()
        self.time_index.make_writable()
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        removed = self.size - batch.position
        os.ftruncate(self.fileno(), batch.position)
        self._size = batch.position
        self._max_timestamp = None
        self._bytes_since_last_index_entry = 0
        if batch.position == 0:
            self.rolling_based_timestamp = None
        # The max timestamp is recomputed from what remains.
        self._max_timestamp = self._scan_max_timestamp()
        return removed

    def _scan_max_timestamp(self) -> tuple[int, int]:
        best = (NO_TIMESTAMP, self.base_offset)
        fd = self.fileno()
        for batch in self._headers_from(0):
            header = RecordBatchHeader.parse(os.pread(fd, RECORD_BATCH_OVERHEAD, batch.position))
            if header.max_timestamp > best[0]:
                best = (header.max_timestamp, header.last_offset)
        return best

    def check_not_corrupt(self) -> None:
        """For tests and tools: raises StorageError if a batch fails validation."""
        data = self.pread(0, self.size)
        for pos, header in iter_batch_headers(data):
            try:
                validate_batch(data, pos, header, from_client=False)
            except ProtocolError as e:
                raise StorageError(f"{self.log_path} at {pos}: {e}") from e
