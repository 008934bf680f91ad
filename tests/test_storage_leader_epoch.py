"""The leader epoch cache and its checkpoint file (cases after Kafka's LeaderEpochFileCacheTest)."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.storage.errors import StorageError
from odradek.storage.leader_epoch import (
    LEADER_EPOCH_CHECKPOINT,
    UNDEFINED_EPOCH,
    EpochEntry,
    LeaderEpochCache,
)

UNDEFINED = (UNDEFINED_EPOCH, -1)


def cache_with(tmp_path: Path, *entries: tuple[int, int]) -> LeaderEpochCache:
    cache = LeaderEpochCache(tmp_path)
    for epoch, offset in entries:
        cache.assign(epoch, offset)
    return cache


def test_checkpoint_file_is_kafkas_format_and_survives_reopening(tmp_path: Path) -> None:
    cache_with(tmp_path, (0, 0), (3, 1200))
    assert (tmp_path / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n2\n0 0\n3 1200\n"
    assert LeaderEpochCache(tmp_path).entries == [EpochEntry(0, 0), EpochEntry(3, 1200)]
    assert LeaderEpochCache(tmp_path / "nowhere").entries == []


@pytest.mark.parametrize("text", ["1\n0\n", "0\n2\n0 0\n", "0\n1\nx y\n", ""])
def test_malformed_checkpoint_is_a_storage_error(tmp_path: Path, text: str) -> None:
    (tmp_path / LEADER_EPOCH_CHECKPOINT).write_text(text)
    with pytest.raises(StorageError):
        LeaderEpochCache(tmp_path)


def test_assign_ignores_known_epochs_and_drops_entries_that_break_the_order(
        tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (2, 6))
    assert not cache.assign(2, 9)            # the epoch is known and starts earlier
    assert cache.assign(2, 5)                # an earlier start for the same epoch replaces it
    assert cache.entries == [EpochEntry(2, 5)]
    cache.assign(3, 8)
    cache.assign(4, 11)
    cache.assign(3, 10)                      # a lower epoch again: later entries go
    assert cache.entries == [EpochEntry(2, 5), EpochEntry(3, 10)]
    with pytest.raises(ValueError):
        cache.assign(-1, 0)


def test_end_offset_for(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path)
    assert cache.end_offset_for(0, 0) == UNDEFINED
    cache = cache_with(tmp_path, (2, 6), (4, 11), (6, 16))
    assert cache.end_offset_for(6, 20) == (6, 20)      # the latest epoch: the log end
    assert cache.end_offset_for(4, 20) == (4, 16)      # ends where the next one starts
    assert cache.end_offset_for(5, 20) == (4, 16)      # unknown: the largest earlier epoch
    assert cache.end_offset_for(1, 20) == (1, 6)       # before every entry
    assert cache.end_offset_for(7, 20) == UNDEFINED    # after every entry
    assert cache.end_offset_for(UNDEFINED_EPOCH, 20) == UNDEFINED
    assert [cache.epoch_for_offset(o) for o in (0, 6, 10, 11, 99)] == [-1, 2, 2, 4, 6]


def test_truncation_from_either_end(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_end(9)
    assert cache.entries == [EpochEntry(2, 6), EpochEntry(3, 8)]
    cache.truncate_from_end(8)
    assert cache.entries == [EpochEntry(2, 6)]
    cache = cache_with(tmp_path, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_start(5)               # before every entry: unchanged
    assert cache.entries[0] == EpochEntry(2, 6)
    cache.truncate_from_start(9)               # inside epoch 3: it now starts at 9
    assert cache.entries == [EpochEntry(3, 9), EpochEntry(4, 11)]
    cache.truncate_from_start(11)
    assert LeaderEpochCache(tmp_path).entries == [EpochEntry(4, 11)]
    cache.clear()
    assert LeaderEpochCache(tmp_path).entries == []
