"""A segment's sparse indexes, in Kafka's file formats.

OffsetIndex (.index): entries of (relative offset u32, file position u32), mapping the
last offset of a batch to the position where that batch starts. TimeIndex (.timeindex):
entries of (timestamp i64, relative offset u32), the largest timestamp seen so far and
the offset of the batch that carried it. Both are sparse: one entry per
index.interval.bytes of log, so a lookup is a binary search followed by a short scan.

An index is opened lazily (a broker with 10,000 partitions touches only those it
serves). The active segment's index is preallocated to segment.index.bytes and memory
mapped for appends; it is trimmed to its entries when the segment rolls or closes.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from odradek.storage.errors import StorageError

NO_TIMESTAMP = -1


class CorruptIndexError(StorageError):
    """An index whose entries contradict each other; the segment rebuilds it from the log."""


class _Index:
    """The mechanics shared by both indexes: a file of fixed-size big-endian entries."""

    ENTRY: struct.Struct

    def __init__(self, path: Path, base_offset: int, max_index_size: int, writable: bool) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_index_size // self.ENTRY.size
        self.writable = writable
        self._mmap: mmap.mmap | None = None
        self._entries: int | None = None  # None until the file is opened

    # ---- opening and closing ----------------------------------------------------------

    def _open(self) -> mmap.mmap | None:
        """Maps the file, preallocating it if writable; returns None for an empty read-only
        index (an empty file cannot be mapped)."""
        if self._entries is not None:
            return self._mmap
        size = self.ENTRY.size
        exists = self.path.exists()
        if not self.writable and not exists:
            raise CorruptIndexError(f"{self.path} is missing")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            length = os.fstat(fd).st_size
            if length % size:
                raise CorruptIndexError(f"{self.path}: size {length} is not a multiple of {size}")
            entries = length // size
            if self.writable:
                os.ftruncate(fd, max(self.max_entries * size, length))
            mapped_length = os.fstat(fd).st_size
            self._mmap = mmap.mmap(fd, mapped_length) if mapped_length else None
        finally:
            os.close(fd)
        self._entries = self._valid_entries(entries)
        return self._mmap

    def _valid_entries(self, entries: int) -> int:
        """Drops trailing all-zero entries (the preallocated space of an index that was not
        trimmed before a crash), then checks what remains. Only the first entry of either
        index can legitimately be all zeros, so the zero entries are a suffix: binary search."""
        mm = self._mmap
        if mm is not None and entries > 1:
            zero = bytes(self.ENTRY.size)
            size = self.ENTRY.size
            lo, hi = 1, entries  # find the first all-zero entry at or after index 1
            while lo < hi:
                mid = (lo + hi) // 2
                if mm[mid * size : (mid + 1) * size] == zero:
                    hi = mid
                else:
                    lo = mid + 1
            entries = lo
        self._entries = entries
        self.sanity_check()
        return entries

    def close(self) -> None:
        if self._mmap is not None:
            self._mmap.close()
        self._mmap = None
        self._entries = None

    def trim_to_valid_size(self) -> None:
        """Cuts the preallocated space off: what a rolled or closed segment keeps."""
        if self._entries is None and not self.writable:
            return
        entries = self.entries
        if self._mmap is not None:
            self._mmap.flush()
        self.close()
        os.truncate(self.path, entries * self.ENTRY.size)
        self.writable = False

    def make_writable(self) -> None:
        """Reopens a rolled index for appends (after truncation brought its segment back)."""
        if not self.writable:
            self.close()
            self.writable = True

    def flush(self) -> None:
        if self._mmap is not None:
            self._mmap.flush()

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def rename(self, path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path

    # ---- entries ----------------------------------------------------------------------

    @property
    def entries(self) -> int:
        self._open()
        assert self._entries is not None
        return self._entries

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def entry(self, n: int) -> tuple[int, int]:
        mm = self._open()
        assert mm is not None
        return self.ENTRY.unpack_from(mm, n * self.ENTRY.size)

    def _append(self, a: int, b: int) -> None:
        mm = self._open()
        assert self._entries is not None
        if not self.writable or mm is None:
            raise StorageError(f"{self.path} is not writable")
        if self._entries >= self.max_entries:
            raise StorageError(f"{self.path} is full ({self.max_entries} entries)")
        self.ENTRY.pack_into(mm, self._entries * self.ENTRY.size, a, b)
        self._entries += 1

    def _largest_lower_bound(self, key: int, column: int) -> int:
        """The last entry whose column value is <= key, or -1; entries are sorted by it."""
        n = self.entries
        lo, hi = 0, n - 1
        found = -1
        while lo <= hi:
            mid = (lo + hi) // 2
            if self.entry(mid)[column] <= key:
                found = mid
                lo = mid + 1
            else:
                hi = mid - 1
        return found

    def truncate_entries(self, entries: int) -> None:
        mm = self._open()
        assert self._entries is not None
        entries = min(entries, self._entries)
        if mm is not None:
            size = self.ENTRY.size
            mm[entries * size : self._entries * size] = bytes((self._entries - entries) * size)
        self._entries = entries
        if not self.writable:
            self.close()
            os.truncate(self.path, entries * self.ENTRY.size)

    def reset(self) -> None:
        self.truncate_entries(0)

    def sanity_check(self) -> None:
        """Raises CorruptIndexError when the entries cannot be right."""
        raise NotImplementedError


class OffsetIndex(_Index):
    """Kafka's .index: (relative offset, position) of the last offset of a batch."""

    ENTRY = struct.Struct(">II")

    def append(self, offset: int, position: int) -> None:
        entries = self.entries
        if entries and offset <= self.last_offset:
            raise StorageError(
                f"{self.path}: offset {offset} is not larger than the last entry {self.last_offset}"
            )
        self._append(offset - self.base_offset, position)

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
        n = self._entries or 0
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
        if not skip_full_check and self.is_full:
            raise StorageError(f"{self.path} is full")
        if self.entries >= self.max_entries:
            return  # the roll-time entry does not fit: the index already covers the segment
        last_timestamp, last_offset = self.last_entry()
        if self.entries and offset < last_offset:
            raise StorageError(f"{self.path}: offset {offset} is before the last {last_offset}")
        if timestamp > last_timestamp:
            self._append(timestamp, offset - self.base_offset)

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
        n = self._entries or 0
        if n > 1:
            first, last = self.entry(0), self.entry(n - 1)
            if first[0] >= last[0] or first[1] > last[1]:
                raise CorruptIndexError(f"{self.path}: last entry {last} is not after {first}")
