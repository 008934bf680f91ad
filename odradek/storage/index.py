"""A segment's sparse indexes, in Kafka's file formats.

OffsetIndex (.index): entries of (relative offset u32, file position u32), mapping the
last offset of a batch to the position where that batch starts. TimeIndex (.timeindex):
entries of (timestamp i64, relative offset u32), the largest timestamp seen so far and
the offset of the batch that carried it. Both are sparse: one entry per
index.interval.bytes of log, so a lookup is a binary search followed by a short scan.

An index is loaded lazily (a broker with 10,000 partitions touches only those it
serves). The active segment's index file is preallocated to segment.index.bytes, as
Kafka's, and trimmed to its entries when the segment rolls or closes.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from odradek.storage.errors import StorageError

NO_TIMESTAMP = -1


class CorruptIndexError(StorageError):
    """An index whose entries contradict each other; the segment rebuilds it from the log."""


class _Index:
    """The mechanics shared by both indexes: a file of fixed-size big-endian entries.

    The entries live in memory once loaded and reach the file when the segment flushes,
    rolls or closes; no file descriptor stays open for an index (a broker with thousands
    of partitions would otherwise hold three per segment). Entries not yet written are
    rebuilt by recovery, which re-indexes every segment past the recovery point.
    """

    ENTRY: struct.Struct

    def __init__(self, path: Path, base_offset: int, max_index_size: int, writable: bool) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_index_size // self.ENTRY.size
        self.max_index_size = self.max_entries * self.ENTRY.size  # whole entries, as Kafka
        self.writable = writable
        self._data: bytearray | None = None  # the entries; None until first used
        self._written = 0  # how many bytes of _data the file already holds

    # ---- loading and writing ----------------------------------------------------------

    def _load(self) -> bytearray:
        data = self._data
        if data is not None:
            return data
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            if not self.writable:
                raise CorruptIndexError(f"{self.path} is missing") from None
            raw = b""
        size = self.ENTRY.size
        if len(raw) % size:
            raise CorruptIndexError(f"{self.path}: size {len(raw)} is not a multiple of {size}")
        data = bytearray(raw[: self._valid_entries(raw) * size])
        self._data = data
        self._written = len(data)
        self.sanity_check()
        if self.writable and len(raw) < self.max_index_size:
            self._preallocate()
        return data

    def _valid_entries(self, raw: bytes) -> int:
        """Drops trailing all-zero entries (the preallocated space of an index that was not
        trimmed before a crash). Only the first entry of either index can legitimately be
        all zeros, so the zero entries are a suffix: binary search for where they start."""
        size = self.ENTRY.size
        entries = len(raw) // size
        if entries <= 1:
            return entries
        zero = bytes(size)
        lo, hi = 1, entries
        while lo < hi:
            mid = (lo + hi) // 2
            if raw[mid * size : (mid + 1) * size] == zero:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _preallocate(self) -> None:
        """The active index takes segment.index.bytes on disk, as Kafka's does."""
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < self.max_index_size:
                os.ftruncate(fd, self.max_index_size)
        finally:
            os.close(fd)

    def _write(self, sync: bool) -> None:
        """Writes the entries the file does not hold yet."""
        data = self._data
        if data is None or (self._written == len(data) and not sync):
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if self._written < len(data):
                # A copy of what is there now: appends may add entries meanwhile.
                pending = bytes(data[self._written :])
                os.pwrite(fd, pending, self._written)
                self._written += len(pending)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def flush(self) -> None:
        self._write(sync=True)

    def close(self) -> None:
        """Writes what is pending and forgets the entries (they load again on use)."""
        self._write(sync=False)
        self._data = None

    def discard(self) -> None:
        """Forgets the entries without writing them (a deleted or replaced segment)."""
        self._data = None

    def trim_to_valid_size(self) -> None:
        """Cuts the preallocated space off: what a rolled or closed segment keeps."""
        if self._data is None and not self.writable:
            return
        data = self._load()
        self._write(sync=False)
        os.truncate(self.path, len(data))
        self.writable = False

    def make_writable(self) -> None:
        """Opens a rolled index for appends again (recovery, or truncation into it)."""
        if not self.writable:
            self.writable = True
            if self._data is not None:
                self._preallocate()

    def delete(self) -> None:
        self._data = None
        self.path.unlink(missing_ok=True)

    def rename(self, path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path

    # ---- entries ----------------------------------------------------------------------

    @property
    def entries(self) -> int:
        return len(self._load()) // self.ENTRY.size

    @property
    def is_full(self) -> bool:
        return len(self._data if self._data is not None else self._load()) >= self.max_index_size

    def entry(self, n: int) -> tuple[int, int]:
        return self.ENTRY.unpack_from(self._load(), n * self.ENTRY.size)

    def _append(self, data: bytearray, a: int, b: int) -> None:
        if not self.writable:
            raise StorageError(f"{self.path} is not writable")
        if len(data) >= self.max_index_size:
            raise StorageError(f"{self.path} is full ({self.max_entries} entries)")
        data += self.ENTRY.pack(a, b)

    def _largest_lower_bound(self, key: int, column: int) -> int:
        """The last entry whose column value is <= key, or -1; entries are sorted by it."""
        data = self._load()
        unpack = self.ENTRY.unpack_from
        size = self.ENTRY.size
        lo, hi = 0, len(data) // size - 1
        found = -1
        while lo <= hi:
            mid = (lo + hi) // 2
            if unpack(data, mid * size)[column] <= key:
                found = mid
                lo = mid + 1
            else:
                hi = mid - 1
        return found

    def truncate_entries(self, entries: int) -> None:
        data = self._load()
        size = self.ENTRY.size
        if entries * size >= len(data):
            return
        del data[entries * size :]
        if self._written > len(data):
            # The file holds entries that no longer exist: cut them there too.
            if self.path.exists():
                os.truncate(self.path, len(data))
                if self.writable:
                    self._preallocate()
            self._written = len(data)

    def reset(self) -> None:
        """Empties the index without reading it (it may be corrupt): recovery rebuilds it."""
        self._data = bytearray()
        self._written = 0
        if self.path.exists():
            os.truncate(self.path, 0)
        if self.writable:
            self._preallocate()

    def sanity_check(self) -> None:
        """Raises CorruptIndexError when the entries cannot be right."""
        raise NotImplementedError


class OffsetIndex(_Index):
    """Kafka's .index: (relative offset, position) of the last offset of a batch."""

    ENTRY = struct.Struct(">II")

    def append(self, offset: int, position: int) -> None:
        data = self._load()
        relative = offset - self.base_offset
        if data and relative <= self.ENTRY.unpack_from(data, len(data) - 8)[0]:
            raise StorageError(
                f"{self.path}: offset {offset} is not larger than the last entry {self.last_offset}"
            )
        self._append(data, relative, position)

    @property
    def last_offset(self) -> int:
        n = self.entries
        return self.base_offset + self.entry(n - 1)[0] if n else self.base_offset

    def lookup(self, offset: int) -> tuple[int, int]:
        """The indexed (offset, position) closest below or at `offset`; (base, 0) if none."""
        i = self._largest_lower_bound(offset - self.base_offset, 0)
        if i < 0:
            return self.base_offset, 0
        relative, position = self.entry(i)
        return self.base_offset + relative, position

    def truncate_to(self, offset: int) -> None:
        """Removes entries for `offset` and above."""
        i = self._largest_lower_bound(offset - self.base_offset - 1, 0)
        self.truncate_entries(i + 1)

    def sanity_check(self) -> None:
        # As Kafka: cheap checks of the ends, not a walk over every entry.
        n = self.entries
        if n > 1 and not self.entry(0) < self.entry(n - 1):
            raise CorruptIndexError(f"{self.path}: last entry {self.entry(n - 1)} is not after "
                                    f"the first {self.entry(0)}")


class TimeIndex(_Index):
    """Kafka's .timeindex: (largest timestamp so far, relative offset of its batch)."""

    ENTRY = struct.Struct(">qI")

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (NO_TIMESTAMP, base offset)."""
        n = self.entries
        if not n:
            return NO_TIMESTAMP, self.base_offset
        timestamp, relative = self.entry(n - 1)
        return timestamp, self.base_offset + relative

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Appends only a timestamp larger than the last one: entries only ever grow."""
        data = self._load()
        if len(data) >= self.max_index_size:
            if skip_full_check:
                return  # the roll-time entry does not fit: the index covers the segment
            raise StorageError(f"{self.path} is full")
        relative = offset - self.base_offset
        if data:
            last_timestamp, last_relative = self.ENTRY.unpack_from(data, len(data) - 12)
            if relative < last_relative:
                raise StorageError(f"{self.path}: offset {offset} is before the last entry")
        else:
            last_timestamp = NO_TIMESTAMP
        if timestamp > last_timestamp:
            self._append(data, timestamp, relative)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """The entry with the largest timestamp <= `timestamp`: (timestamp, offset), or
        (NO_TIMESTAMP, base offset) when every entry is later."""
        i = self._largest_lower_bound(timestamp, 0)
        if i < 0:
            return NO_TIMESTAMP, self.base_offset
        ts, relative = self.entry(i)
        return ts, self.base_offset + relative

    def truncate_to(self, offset: int) -> None:
        """Removes entries pointing at `offset` and above."""
        n = self.entries
        keep = n
        while keep > 0 and self.base_offset + self.entry(keep - 1)[1] >= offset:
            keep -= 1
        self.truncate_entries(keep)

    def sanity_check(self) -> None:
        n = self.entries
        if n > 1:
            first, last = self.entry(0), self.entry(n - 1)
            if first[0] >= last[0] or first[1] > last[1]:
                raise CorruptIndexError(f"{self.path}: last entry {last} is not after {first}")
