"""Kafka's leader epoch cache: which leader epoch wrote which offsets of a partition.

Each entry (epoch, start offset) says that the leader of `epoch` appended its first record at
`start offset`; the entries grow in both fields. A follower that becomes one again asks the
leader for the end offset of its own latest epoch (OffsetForLeaderEpoch) and truncates there,
so its log cannot diverge from the leader's (KIP-101, KIP-279). The cache is kept in the
partition directory's `leader-epoch-checkpoint`, in Kafka's checkpoint format:

    0              <- format version
    2              <- number of entries
    0 0            <- epoch, start offset
    3 1200
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass
from pathlib import Path

from odradek.storage.checkpoints import write_durably
from odradek.storage.errors import StorageError

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
_VERSION = 0


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


def read_checkpoint(path: Path) -> list[EpochEntry]:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    except OSError as e:
        raise StorageError(f"cannot read {path}: {e}") from e
    try:
        if int(lines[0]) != _VERSION:
            raise StorageError(f"{path}: unknown checkpoint version {lines[0]!r}")
        count = int(lines[1])
        entries = []
        for line in lines[2:2 + count]:
            epoch, offset = line.split(" ")
            entries.append(EpochEntry(int(epoch), int(offset)))
    except (IndexError, ValueError) as e:
        raise StorageError(f"{path}: malformed leader epoch checkpoint: {e}") from e
    if len(entries) != count:
        raise StorageError(f"{path}: {count} entries announced, {len(entries)} found")
    return entries


class LeaderEpochCache:
    """The entries of one partition, flushed to its checkpoint file on every change."""

    def __init__(self, directory: Path, entries: list[EpochEntry] | None = None) -> None:
        self.path = directory / LEADER_EPOCH_CHECKPOINT
        self._entries = read_checkpoint(self.path) if entries is None else list(entries)
        self._lock = threading.Lock()

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Records that `epoch` starts at `start_offset` (a no-op if it is known already).
        Entries that would break the order (same or later epoch, same or later offset) are
        dropped first, as Kafka does. Returns whether the cache changed."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        with self._lock:
            last = self._entries[-1] if self._entries else None
            if last is not None and last.epoch == epoch and last.start_offset <= start_offset:
                return False
            self._entries = [e for e in self._entries
                             if e.epoch < epoch and e.start_offset < start_offset]
            self._entries.append(EpochEntry(epoch, start_offset))
            self._flush()
        return True

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (the largest known epoch <= `epoch`, the offset where the
        epoch after it starts, or the log end offset for the latest epoch)."""
        with self._lock:
            if epoch == UNDEFINED_EPOCH or not self._entries:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if epoch == self._entries[-1].epoch:
                return epoch, log_end_offset
            epochs = [e.epoch for e in self._entries]
            higher = bisect.bisect_right(epochs, epoch)
            if higher == len(epochs):
                # Later than every known epoch: nothing to say about it.
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if higher == 0:
                # Earlier than every known epoch: it ended where the first known one starts.
                return epoch, self._entries[0].start_offset
            return self._entries[higher - 1].epoch, self._entries[higher].start_offset

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch that wrote `offset` (UNDEFINED_EPOCH before the first entry)."""
        with self._lock:
            starts = [e.start_offset for e in self._entries]
            i = bisect.bisect_right(starts, offset)
            return self._entries[i - 1].epoch if i else UNDEFINED_EPOCH

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was truncated to `end_offset`: epochs starting at or after it are gone."""
        with self._lock:
            kept = [e for e in self._entries if e.start_offset < end_offset]
            if len(kept) != len(self._entries):
                self._entries = kept
                self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log start moved to `start_offset`: earlier epochs are gone, and the epoch that
        holds `start_offset` now starts there."""
        with self._lock:
            i = bisect.bisect_right([e.start_offset for e in self._entries], start_offset)
            if i == 0 or (i == 1 and self._entries[0].start_offset == start_offset):
                return
            holder = self._entries[i - 1]
            self._entries = [EpochEntry(holder.epoch, start_offset), *self._entries[i:]]
            self._flush()

    def clear(self) -> None:
        with self._lock:
            if self._entries or self.path.exists():
                self._entries = []
                self._flush()

    def _flush(self) -> None:
        lines = [str(_VERSION), str(len(self._entries)),
                 *(f"{e.epoch} {e.start_offset}" for e in self._entries)]
        write_durably(self.path, ("\n".join(lines) + "\n").encode())
