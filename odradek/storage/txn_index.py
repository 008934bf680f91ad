"""TransactionIndex: a segment's aborted transactions (Kafka's `.txnindex`).

One entry per transaction whose ABORT marker is in the segment, appended when the marker
is written (by the leader, a follower, or recovery), 34 bytes each, Kafka's AbortedTxn:

    version int16 = 0, producerId int64, firstOffset int64, lastOffset int64,
    lastStableOffset int64

lastOffset is the marker's offset, firstOffset the transaction's first (possibly in an
earlier segment), lastStableOffset the log's last stable offset once the abort completed.
A read_committed fetch collects the entries overlapping its range (`collect_aborted`),
segment after segment from the one holding the fetch offset, until an entry's
lastStableOffset reaches the upper bound (no later abort can start below it).

The file is created by the first entry (most segments have none), read on first use and
kept in memory (entries are few), appended to as entries come, fsynced with the segment;
like the other indexes it holds no file descriptor.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

from odradek.storage.errors import StorageError

TXN_INDEX_SUFFIX = ".txnindex"
ABORTED_TXN_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


class CorruptTxnIndexError(StorageError):
    """A .txnindex entry Kafka would not write (an unknown version, offsets out of order)."""


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(ABORTED_TXN_VERSION, *self)


class TxnIndexSearchResult(NamedTuple):
    aborted: list[AbortedTxn]
    # True when no later segment can hold an abort overlapping the range.
    is_complete: bool


def decode_entries(data: bytes, path: Path | str = "") -> list[AbortedTxn]:
    """The whole entries of a .txnindex file's bytes; a torn last entry is ignored (as
    Kafka's reader does)."""
    entries = []
    for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
        version, *fields = _ENTRY.unpack_from(data, pos)
        if version != ABORTED_TXN_VERSION:
            raise CorruptTxnIndexError(
                f"{path}: unexpected aborted transaction version {version} at {pos}")
        entries.append(AbortedTxn(*fields))
    return entries


class TransactionIndex:
    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] | None = None  # loaded on first use
        self._dirty = False  # appended to since the last fsync

    def __repr__(self) -> str:
        return f"TransactionIndex({self.path.name})"

    def _load(self) -> list[AbortedTxn]:
        entries = self._entries
        if entries is None:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                data = b""
            entries = self._entries = decode_entries(data, self.path)
        return entries

    @property
    def entries(self) -> list[AbortedTxn]:
        return list(self._load())

    @property
    def last_offset(self) -> int | None:
        entries = self._load()
        return entries[-1].last_offset if entries else None

    def append(self, txn: AbortedTxn) -> None:
        """Appends an entry; markers come in offset order, so last offsets must grow."""
        entries = self._load()
        if entries and entries[-1].last_offset >= txn.last_offset:
            raise StorageError(
                f"{self.path}: the last offset of appended transactions must increase, but "
                f"{txn.last_offset} is not greater than {entries[-1].last_offset}")
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            size = os.fstat(fd).st_size
            expected = len(entries) * ENTRY_SIZE
            if size != expected:  # a torn entry from a crash: write after the whole ones
                os.ftruncate(fd, expected)
            data = txn.encode()
            written = 0
            try:
                while written < len(data):
                    written += os.write(fd, data[written:])
            except OSError:
                os.ftruncate(fd, expected)
                raise
        finally:
            os.close(fd)
        entries.append(txn)
        self._dirty = True

    def collect_aborted(self, fetch_offset: int, upper_bound: int) -> TxnIndexSearchResult:
        """The aborted transactions overlapping [fetch_offset, upper_bound) (Kafka's
        collectAbortedTxns), and whether the search can stop at this segment."""
        found = []
        for txn in self._load():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return TxnIndexSearchResult(found, True)
        return TxnIndexSearchResult(found, False)

    def truncate_to(self, offset: int) -> None:
        """Removes the entries whose marker is at or after `offset`."""
        entries = self._load()
        keep = len(entries)
        while keep and entries[keep - 1].last_offset >= offset:
            keep -= 1
        if keep == len(entries):
            return
        del entries[keep:]
        if keep == 0:
            self.path.unlink(missing_ok=True)
        elif self.path.exists():
            os.truncate(self.path, keep * ENTRY_SIZE)

    def reset(self) -> None:
        """Empties the index without reading it (recovery rebuilds it)."""
        self._entries = []
        self._dirty = False
        self.path.unlink(missing_ok=True)

    def flush(self) -> None:
        if not self._dirty:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self._dirty = False
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._dirty = False

    def rename(self, path: Path) -> None:
        """With its segment (.deleted, .cleaned, .swap); a file never created stays so."""
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        self._entries = []
        self._dirty = False
        self.path.unlink(missing_ok=True)

    def sanity_check(self) -> None:
        """Kafka's check: no entry's marker before the segment's base offset."""
        for txn in self._load():
            if txn.last_offset < self.base_offset:
                raise CorruptTxnIndexError(
                    f"{self.path}: last offset of {txn} is below the base offset "
                    f"{self.base_offset}")
