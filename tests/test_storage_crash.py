"""Crash injection and the on-disk format.

A log with several segments of known batches is damaged as a crash (or a bad disk) would
leave it -- torn .log files, corrupt bytes, missing or damaged indexes, half-done deletions
and compaction swaps -- and reopened; exactly the valid prefix must survive and appends go
on from there. The byte-format tests check the files against Kafka's layout.

Every case is deterministic: random.Random(seed).
"""

from __future__ import annotations

import itertools
import os
import random
import re
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest

from odradek.protocol.records import (
    NO_TIMESTAMP,
    RecordBatchHeader,
    SimpleRecord,
    build_record_batch,
    decode_records,
)
from odradek.storage.config import LogConfig
from odradek.storage.errors import OffsetOutOfRangeError
from odradek.storage.log import Log

T0 = 1_700_000_000_000
DAY = 86_400_000
INDEX_BYTES = 1000  # not a multiple of 12: the time index rounds down to 996, as Kafka's
INTERVAL = 64
PROPS = {
    "segment.bytes": "2048",
    "index.interval.bytes": str(INTERVAL),
    "segment.index.bytes": str(INDEX_BYTES),
}
SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex)$")
SNAPSHOT_FILE = re.compile(r"^(\d{20})\.snapshot$")  # producer state, at most the log end
OFFSET_ENTRY = struct.Struct(">II")  # relative offset, position
TIME_ENTRY = struct.Struct(">qI")  # timestamp, relative offset
CRC_START = 17  # batch bytes from the CRC on are covered by it (or are the CRC itself)
SEEDS = range(16)
CASES = 4  # damaged copies of each seed's log


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@dataclass(frozen=True)
class Stored:
    """An appended batch as it must be on disk."""

    base: int
    last: int
    data: bytes  # the appended bytes with baseOffset set
    segment: int  # base offset of its segment
    position: int  # in its segment's .log
    max_ts: int

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def end(self) -> int:
        return self.position + self.size


def config(**overrides: str) -> LogConfig:
    return LogConfig.from_properties({**PROPS, **overrides})


def random_batch(rng: random.Random) -> bytes:
    records = []
    for i in range(rng.randint(1, 5)):
        key = rng.choice([None, b"", rng.randbytes(rng.randrange(1, 20))])
        value = rng.choice([None, rng.randbytes(rng.randrange(300))])
        headers = [(f"h{j}", rng.choice([None, rng.randbytes(4)])) for j in range(rng.randrange(3))]
        # The first record's timestamp is the batch's base timestamp: None makes it
        # NO_TIMESTAMP, and the records without one inherit it.
        ts = rng.choice([None, T0 - rng.randrange(DAY)]) if i == 0 or rng.random() < 0.7 else None
        records.append(SimpleRecord(key, value, headers, ts))
    return build_record_batch(records, compression=rng.choice([0, 0, 0, 1, 2, 3, 4]))


def build(directory: Path, seed: int, batches: int = 40, **props: str) -> tuple[Log, list[Stored]]:
    """A log of `batches` random single-batch appends over several segments (2 KiB each;
    a few rolled early), and what each batch must look like on disk."""
    rng = random.Random(seed)
    log = Log.open(directory, config(**props), clock=Clock())
    stored: list[Stored] = []
    for _ in range(batches):
        if stored and rng.random() < 0.05:
            log.roll()
        data = random_batch(rng)
        buf = bytearray(data)
        info = log.append_as_leader(buf)
        expected = bytearray(data)
        struct.pack_into(">q", expected, 0, info.first_offset)
        assert buf == expected  # the base offset is assigned in place, nothing else changes
        segment = log.active_segment
        header = RecordBatchHeader.parse(data)
        stored.append(
            Stored(
                info.first_offset,
                info.last_offset,
                bytes(expected),
                segment.base_offset,
                segment.size - len(data),
                header.max_timestamp,
            )
        )
    assert len({b.segment for b in stored}) >= 4
    return log, stored


def crash(log: Log) -> None:
    """The process dies: file handles go, nothing is flushed, trimmed or written."""
    for segment in log.segments():
        segment.close_handles()


def reopen(
    directory: Path,
    *,
    clean: bool = False,
    recovery_point: int = 0,
    log_start_offset: int = 0,
    clock: Clock | None = None,
    **props: str,
) -> Log:
    return Log.open(
        directory,
        config(**props),
        log_start_offset=log_start_offset,
        recovery_point=recovery_point,
        clean_shutdown=clean,
        clock=clock or Clock(),
    )


def log_path(directory: Path, base: int, kind: str = "log") -> Path:
    return directory / f"{base:020d}.{kind}"


def segment_bases(stored: list[Stored]) -> list[int]:
    return sorted({b.segment for b in stored})


def read_entries(path: Path, entry: struct.Struct) -> tuple[int, list[tuple[int, int]]]:
    """(file size, entries) of an index file, up to the first all-zero entry (the unused
    preallocated tail of an active index)."""
    raw = path.read_bytes()
    assert len(raw) % entry.size == 0, f"{path.name}: {len(raw)} bytes"
    entries = []
    for pos in range(0, len(raw), entry.size):
        if raw[pos : pos + entry.size] == bytes(entry.size):
            assert raw[pos:] == bytes(len(raw) - pos), f"{path.name}: entries after a hole"
            break
        entries.append(entry.unpack_from(raw, pos))
    return len(raw), entries


def check_files(log: Log, directory: Path, kept: list[Stored]) -> None:
    """The partition directory holds exactly the log's segments, each .log the kept
    batches' bytes, and indexes whose entries point at those batches (Kafka's formats)."""
    segments = log.segments()
    bases = [s.base_offset for s in segments]
    names = os.listdir(directory)
    for name in names:
        if snapshot := SNAPSHOT_FILE.match(name):
            assert int(snapshot.group(1)) <= log.log_end_offset, f"snapshot past the end: {name}"
            continue
        match = SEGMENT_FILE.match(name)
        assert match, f"unexpected file {name}"
        assert int(match.group(1)) in bases, f"file of a dropped segment: {name}"
    for segment in segments:
        base = segment.base_offset
        active = segment is segments[-1]
        batches = [b for b in kept if b.segment == base]
        assert log_path(directory, base).read_bytes() == b"".join(b.data for b in batches)
        by_position = {b.position: b for b in batches}
        by_last = {b.last: b for b in batches}
        for kind, entry in (("index", OFFSET_ENTRY), ("timeindex", TIME_ENTRY)):
            path = log_path(directory, base, kind)
            if active and not path.exists():
                continue  # created on first use
            size, entries = read_entries(path, entry)
            trimmed = len(entries) * entry.size
            preallocated = INDEX_BYTES // entry.size * entry.size
            assert size in ((trimmed, preallocated) if active else (trimmed,)), path.name
            if kind == "index":
                for (rel, pos), (next_rel, next_pos) in itertools.pairwise(entries):
                    assert rel < next_rel and pos < next_pos, path.name
                for rel, pos in entries:
                    assert pos in by_position, f"{path.name}: position {pos} is no batch start"
                    assert by_position[pos].last == base + rel, f"{path.name}: {(rel, pos)}"
            else:
                for (ts, rel), (next_ts, next_rel) in itertools.pairwise(entries):
                    assert ts < next_ts and rel <= next_rel, path.name
                for ts, rel in entries:
                    carrier = by_last.get(base + rel)
                    assert carrier is not None and carrier.max_ts == ts, f"{path.name}: {ts, rel}"


def check_prefix(log: Log, directory: Path, stored: list[Stored], end: int, seed: int = 0) -> None:
    """Exactly the batches below `end` survive, byte for byte; nothing at or after it is
    served; segments after the one holding `end` are gone; appends go on at `end`."""
    kept = [b for b in stored if b.base < end]
    assert all(b.last < end for b in kept)
    assert log.log_end_offset == end
    assert log.recovery_point == end  # recovered, or opened clean at the log end
    lost = [b for b in stored if b.base >= end]
    last_segment = lost[0].segment if lost else stored[-1].segment
    assert [s.base_offset for s in log.segments()] == [
        s for s in segment_bases(stored) if s <= last_segment
    ]
    for b in kept:
        assert log.read(b.base, 1).read() == b.data  # the first batch comes whole
        assert log.read(b.last, 1).read() == b.data
    assert log.read(end, 1 << 20).size == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(end + 1, 1 << 20)
    check_files(log, directory, kept)

    data = random_batch(random.Random(seed + 1000))
    info = log.append_as_leader(bytearray(data))
    assert info.first_offset == end
    got = log.read(end, 1 << 20).read()
    assert got[8:] == data[8:] and RecordBatchHeader.parse(got).base_offset == end
    log.close()


def copies(directory: Path, count: int = CASES) -> list[Path]:
    """Copies of a closed or crashed partition directory, one per damage to try."""
    out = []
    for i in range(count):
        copy = directory.parent / f"case{i}" / directory.name
        shutil.copytree(directory, copy)
        out.append(copy)
    return out


def first_damaged(stored: list[Stored], segment: int, position: int) -> Stored:
    """The first batch of `segment` not wholly before `position`."""
    return next(b for b in stored if b.segment == segment and b.end > position)


def recovery_point_for(rng: random.Random, damaged: Stored) -> int:
    """0, or a recovery point at or before the damaged batch: the damage is in data that
    was not flushed yet, which is what recovery re-validates."""
    return rng.choice([0, rng.randint(0, damaged.base), damaged.base])


# ---- torn writes ------------------------------------------------------------------------


@pytest.mark.parametrize("closed", [False, True], ids=["crashed", "closed"])
@pytest.mark.parametrize("seed", SEEDS)
def test_torn_active_segment(tmp_path: Path, seed: int, closed: bool) -> None:
    log, stored = build(tmp_path / "events-0", seed)
    log.close() if closed else crash(log)
    rng = random.Random(seed)
    active = stored[-1].segment
    for directory in copies(tmp_path / "events-0"):
        size = log_path(directory, active).stat().st_size
        cut = rng.randrange(size)  # at a batch boundary too: a valid, shorter log
        os.truncate(log_path(directory, active), cut)
        damaged = first_damaged(stored, active, cut)

        log = reopen(directory, recovery_point=recovery_point_for(rng, damaged))
        check_prefix(log, directory, stored, damaged.base, seed)


@pytest.mark.parametrize("closed", [False, True], ids=["crashed", "closed"])
@pytest.mark.parametrize("seed", SEEDS)
def test_torn_middle_segment_drops_the_later_ones(tmp_path: Path, seed: int, closed: bool) -> None:
    log, stored = build(tmp_path / "events-0", seed)
    log.close() if closed else crash(log)
    rng = random.Random(seed)
    for directory in copies(tmp_path / "events-0"):
        middle = rng.choice(segment_bases(stored)[:-1])
        damaged = rng.choice([b for b in stored if b.segment == middle])
        cut = rng.randrange(damaged.position + 1, damaged.end)  # inside the batch
        os.truncate(log_path(directory, middle), cut)

        log = reopen(directory, recovery_point=recovery_point_for(rng, damaged))
        check_prefix(log, directory, stored, damaged.base, seed)


def test_middle_segment_cut_at_a_batch_boundary_looks_whole(tmp_path: Path) -> None:
    """A segment that ends at a batch boundary is valid, so recovery (Kafka's too) keeps
    the later segments: rolled segments are fsynced on roll, so a crash cannot tear them.
    Documents the behaviour; the offsets cut off read as a gap, as after compaction."""
    directory = tmp_path / "events-0"
    log, stored = build(directory, 0)
    crash(log)
    middle = segment_bases(stored)[1]
    in_middle = [b for b in stored if b.segment == middle]
    os.truncate(log_path(directory, middle), in_middle[-1].position)
    log = reopen(directory)
    assert log.log_end_offset == stored[-1].last + 1
    gap = in_middle[-1]
    assert log.read(gap.base, 1).read() == next(b for b in stored if b.base > gap.last).data


# ---- corruption ---------------------------------------------------------------------------


@pytest.mark.parametrize("closed", [False, True], ids=["crashed", "closed"])
@pytest.mark.parametrize("seed", SEEDS)
def test_corrupt_bytes_cut_the_log_at_their_batch(tmp_path: Path, seed: int, closed: bool) -> None:
    """Bytes the CRC covers (attributes to the end of the batch) or the CRC itself. The
    base offset and the partition leader epoch are outside the CRC: no recovery, Kafka's
    included, can tell a changed one from a valid one."""
    log, stored = build(tmp_path / "events-0", seed)
    log.close() if closed else crash(log)
    rng = random.Random(seed)
    for directory in copies(tmp_path / "events-0"):
        damaged = rng.choice(stored)
        path = log_path(directory, damaged.segment)
        data = bytearray(path.read_bytes())
        for _ in range(rng.randint(1, 4)):
            pos = damaged.position + rng.randrange(CRC_START, damaged.size)
            data[pos] ^= rng.randint(1, 255)
        path.write_bytes(bytes(data))

        log = reopen(directory, recovery_point=recovery_point_for(rng, damaged))
        check_prefix(log, directory, stored, damaged.base, seed)


@pytest.mark.parametrize("seed", range(4))
def test_batch_length_beyond_the_file_is_a_torn_write(tmp_path: Path, seed: int) -> None:
    directory = tmp_path / "events-0"
    log, stored = build(directory, seed)
    crash(log)
    damaged = random.Random(seed).choice(stored)
    path = log_path(directory, damaged.segment)
    data = bytearray(path.read_bytes())
    struct.pack_into(">i", data, damaged.position + 8, 1 << 30)
    path.write_bytes(bytes(data))
    log = reopen(directory)
    check_prefix(log, directory, stored, damaged.base, seed)


def test_offsets_going_backwards_cut_the_log(tmp_path: Path) -> None:
    directory = tmp_path / "events-0"
    log, stored = build(directory, 3)
    crash(log)
    damaged = stored[-3]
    path = log_path(directory, damaged.segment)
    data = bytearray(path.read_bytes())
    struct.pack_into(">q", data, damaged.position, damaged.base - 1)  # outside the CRC
    path.write_bytes(bytes(data))
    log = reopen(directory)
    check_prefix(log, directory, stored, damaged.base)


# Regression: a zero-filled tail (what a file system leaves when a crash extended the file
# but never wrote its blocks) or a torn header must cut the log there, not stop Log.open.
@pytest.mark.parametrize("kind", ["zero-filled-tail", "ff-tail", "magic", "short-length"])
def test_garbage_where_a_batch_header_should_be_cuts_the_log(tmp_path: Path, kind: str) -> None:
    directory = tmp_path / "events-0"
    log, stored = build(directory, 5)
    crash(log)
    active = stored[-1].segment
    path = log_path(directory, active)
    data = bytearray(path.read_bytes())
    damaged = stored[-1]
    if kind == "zero-filled-tail":
        data += bytes(4096)
        end = stored[-1].last + 1
    elif kind == "ff-tail":
        data += b"\xff" * 100
        end = stored[-1].last + 1
    elif kind == "magic":
        data[damaged.position + 16] = 1
        end = damaged.base
    else:
        struct.pack_into(">i", data, damaged.position + 8, 20)
        end = damaged.base
    path.write_bytes(bytes(data))
    log = reopen(directory)
    check_prefix(log, directory, stored, end)


# ---- damaged indexes ----------------------------------------------------------------------


def damage_index(path: Path, how: str, rng: random.Random) -> None:
    entry = OFFSET_ENTRY.size if path.suffix == ".index" else TIME_ENTRY.size
    size = path.stat().st_size
    if how == "delete":
        path.unlink()
    elif how == "zero-fill":
        path.write_bytes(bytes(size))
    elif how == "truncate":  # to fewer whole entries: a valid, sparser index
        os.truncate(path, rng.randrange(size // entry + 1) * entry)
    elif how == "garbage-size":  # not a whole number of entries
        os.truncate(path, size - 3 if size >= entry else 5)
    elif how == "unsorted":  # the last entry before the first: fails the sanity check
        raw = path.read_bytes()
        if len(raw) < 2 * entry:  # too few entries to swap: two made-up ones
            if entry == OFFSET_ENTRY.size:
                raw = OFFSET_ENTRY.pack(1, 0) + OFFSET_ENTRY.pack(2, 1)
            else:
                raw = TIME_ENTRY.pack(T0 - 1, 0) + TIME_ENTRY.pack(T0, 1)
        path.write_bytes(raw[-entry:] + raw[entry:-entry] + raw[:entry])
    else:
        raise AssertionError(how)


_DAMAGE = ["delete", "zero-fill", "truncate", "garbage-size", "unsorted"]


@pytest.mark.parametrize("how", _DAMAGE)
@pytest.mark.parametrize("kind", ["index", "timeindex"])
@pytest.mark.parametrize("where", ["middle", "active", "all"])
@pytest.mark.parametrize("seed", range(2))
def test_damaged_indexes_are_rebuilt_on_recovery(
    tmp_path: Path, seed: int, where: str, kind: str, how: str
) -> None:
    """Recovery (from 0, or from the damaged segment) rebuilds the indexes whatever is left
    of them: every batch reads back, the index files are back and point at batches."""
    directory = tmp_path / "events-0"
    log, stored = build(directory, seed)
    log.close()  # trimmed indexes; a crash leaves the active one preallocated: both below
    rng = random.Random(seed)
    bases = segment_bases(stored)
    targets = {"middle": [rng.choice(bases[1:-1])], "active": bases[-1:], "all": bases}[where]
    for base in targets:
        damage_index(log_path(directory, base, kind), how, rng)
    recovery_point = rng.choice([0, min(targets)])

    log = reopen(directory, recovery_point=recovery_point)
    check_prefix(log, directory, stored, stored[-1].last + 1, seed)
    for base in bases:
        assert log_path(directory, base, kind).exists()


@pytest.mark.parametrize("seed", range(4))
def test_crash_with_a_preallocated_active_index(tmp_path: Path, seed: int) -> None:
    """A crash leaves the active segment's indexes at segment.index.bytes, the tail zeros."""
    directory = tmp_path / "events-0"
    log, stored = build(directory, seed)
    crash(log)
    active = stored[-1].segment
    assert log_path(directory, active, "index").stat().st_size == INDEX_BYTES
    assert log_path(directory, active, "timeindex").stat().st_size == INDEX_BYTES // 12 * 12
    log = reopen(directory, recovery_point=random.Random(seed).choice([0, active]))
    check_prefix(log, directory, stored, stored[-1].last + 1, seed)


@pytest.mark.parametrize("how", ["delete", "garbage-size", "unsorted"])
@pytest.mark.parametrize("kind", ["index", "timeindex"])
def test_bad_indexes_are_rebuilt_after_a_clean_shutdown(
    tmp_path: Path, kind: str, how: str
) -> None:
    """Missing or inconsistent index files of an old segment, with the clean-shutdown
    marker: no recovery runs, yet reads at offsets in that segment come out right and the
    index is written again."""
    directory = tmp_path / "events-0"
    log, stored = build(directory, 7)
    log.close()
    old = segment_bases(stored)[1]
    path = log_path(directory, old, kind)
    damage_index(path, how, random.Random(0))

    end = stored[-1].last + 1
    log = reopen(directory, clean=True, recovery_point=end)
    for b in stored:
        if b.segment == old:
            for offset in range(b.base, b.last + 1):
                assert log.read(offset, 1).read() == b.data
    # The time index is used (and rebuilt) by timestamp lookups and retention.ms.
    in_old = [b for b in stored if b.segment == old]
    best = max(in_old, key=lambda b: b.max_ts)
    assert log.segments()[1].max_timestamp_and_offset() == (best.max_ts, best.last)
    assert path.exists()
    check_prefix(log, directory, stored, end)


def test_missing_active_index_after_a_clean_shutdown(tmp_path: Path) -> None:
    directory = tmp_path / "events-0"
    log, stored = build(directory, 8)
    log.close()
    active = stored[-1].segment
    log_path(directory, active, "index").unlink()
    log = reopen(directory, clean=True, recovery_point=stored[-1].last + 1)
    for b in stored:
        assert log.read(b.last, 1).read() == b.data
    check_prefix(log, directory, stored, stored[-1].last + 1)


# ---- interrupted file operations ----------------------------------------------------------


def rename_segment(directory: Path, base: int, suffix: str) -> None:
    for kind in ("log", "index", "timeindex"):
        path = log_path(directory, base, kind)
        if path.exists():
            path.rename(path.with_name(path.name + suffix))


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
def test_segments_renamed_deleted_are_removed(tmp_path: Path, clean: bool) -> None:
    """Retention renamed the first segment .deleted, then the broker stopped before
    file.delete.delay.ms: the files go on open, the log starts at the next segment."""
    directory = tmp_path / "events-0"
    log, stored = build(directory, 9)
    log.delete_old_segments()  # nothing expired: a no-op
    first, second = segment_bases(stored)[:2]
    log.maybe_increment_log_start_offset(second)
    assert log.delete_old_segments(T0) == [first]
    assert log_path(directory, first).with_suffix(".log.deleted").exists()
    log.close() if clean else crash(log)

    end = stored[-1].last + 1
    log = reopen(directory, clean=clean, recovery_point=end, log_start_offset=second)
    assert sorted(n for n in os.listdir(directory) if not SNAPSHOT_FILE.match(n)) == sorted(
        f"{base:020d}.{kind}"
        for base in segment_bases(stored)[1:]
        for kind in ("log", "index", "timeindex")
    )
    assert log.log_start_offset == second
    with pytest.raises(OffsetOutOfRangeError):
        log.read(first, 1 << 20)
    check_prefix(log, directory, [b for b in stored if b.segment != first], end)


def test_stray_deleted_and_cleaned_files_are_removed(tmp_path: Path) -> None:
    directory = tmp_path / "events-0"
    log, stored = build(directory, 10)
    log.close()
    for kind in ("log", "index", "timeindex"):
        source = log_path(directory, 0, kind).read_bytes()
        # compaction output not swapped in yet, and leftovers of an old deletion
        log_path(directory, 0, kind).with_name(f"{0:020d}.{kind}.cleaned").write_bytes(source)
        log_path(directory, 0, kind).with_name(f"{7:020d}.{kind}.deleted").write_bytes(source)
    end = stored[-1].last + 1
    log = reopen(directory, clean=True, recovery_point=end)
    check_prefix(log, directory, stored, end)  # also: no file but the live segments'


def compacted(stored: list[Stored], segments: list[int], rng: random.Random) -> list[Stored]:
    """What a cleaner could write for `segments`: a subsequence of their batches (the last
    one kept, as Kafka's cleaner keeps a segment's last batch), one segment at the first
    base."""
    batches = [b for b in stored if b.segment in segments]
    keep = [b for b in batches[:-1] if rng.random() < 0.5] + batches[-1:]
    out, pos = [], 0
    for b in keep:
        out.append(Stored(b.base, b.last, b.data, segments[0], pos, b.max_ts))
        pos += b.size
    return out


@pytest.mark.parametrize("stage", ["swap-only", "old-deleted"])
@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
@pytest.mark.parametrize("seed", range(3))
def test_interrupted_swap_is_completed(tmp_path: Path, seed: int, clean: bool, stage: str) -> None:
    """Log.replace_segments: .cleaned -> .swap; old segments -> .deleted; .swap -> live. A
    crash after the first step leaves the old segments and the .swap (stage swap-only); after
    the second, .deleted files and the .swap. Either way the open completes the swap."""
    directory = tmp_path / "events-0"
    log, stored = build(directory, seed)
    log.close() if clean else crash(log)
    rng = random.Random(seed)
    bases = segment_bases(stored)
    replaced = bases[:2]
    new = compacted(stored, replaced, rng)
    swap = log_path(directory, replaced[0]).with_name(f"{replaced[0]:020d}.log.swap")
    swap.write_bytes(b"".join(b.data for b in new))
    # index files of the swap may or may not have been written: garbage ones here
    swap.with_name(f"{replaced[0]:020d}.index.swap").write_bytes(b"\x01" * 24)
    if stage == "old-deleted":
        for base in replaced:
            rename_segment(directory, base, ".deleted")

    end = stored[-1].last + 1
    log = reopen(directory, clean=clean, recovery_point=end if clean else 0)
    assert [s.base_offset for s in log.segments()] == [replaced[0], *bases[2:]]
    remaining = new + [b for b in stored if b.segment not in replaced]
    kept = {n.base for n in new}
    for b in stored:
        if b.segment in replaced and b.base not in kept:
            # a removed batch: reading at its offsets gives the next batch kept
            nxt = next(n for n in remaining if n.base > b.last)
            assert log.read(b.base, 1).read() == nxt.data
    check_prefix(log, directory, remaining, end)


def test_stray_index_swap_files_are_removed(tmp_path: Path) -> None:
    """Index .swap files without their .log.swap (the swap went live): removed, as Kafka's
    LogLoader does; the indexes are rebuilt from the log when needed."""
    directory = tmp_path / "events-0"
    log, stored = build(directory, 11)
    log.close()
    for kind in ("index", "timeindex"):
        log_path(directory, 0, kind).with_name(f"{0:020d}.{kind}.swap").write_bytes(bytes(24))
    end = stored[-1].last + 1
    log = reopen(directory, clean=True, recovery_point=end)
    check_prefix(log, directory, stored, end)


# ---- the byte format ----------------------------------------------------------------------


def expected_indexes(batches: list[Stored], rolled: bool) -> tuple[list, list]:
    """Kafka's LogSegment.append rule: before a batch, when more than index.interval.bytes
    were written since the last entry, an offset entry (its last offset, its position) and
    a time entry (the largest timestamp so far, the last offset of its batch) if that
    timestamp is larger than the last entry's; on roll, a last time entry for the max."""
    offsets, times = [], []
    since, best = 0, (NO_TIMESTAMP, 0)
    base = batches[0].segment
    for b in batches:
        if b.max_ts > best[0]:
            best = (b.max_ts, b.last)
        if since > INTERVAL:
            offsets.append((b.last - base, b.position))
            if best[0] > (times[-1][0] if times else NO_TIMESTAMP):
                times.append((best[0], best[1] - base))
            since = 0
        since += b.size
    if rolled and best[0] > (times[-1][0] if times else NO_TIMESTAMP):
        times.append((best[0], best[1] - base))
    return offsets, times


@pytest.mark.parametrize("seed", range(6))
def test_byte_format(tmp_path: Path, seed: int) -> None:
    directory = tmp_path / "events-0"
    log, stored = build(directory, seed, batches=60)
    bases = segment_bases(stored)
    log.read(stored[-1].base, 1)  # the active .index is created on first use: use it
    log.flush()  # the active segment's index entries reach the file on flush
    names = sorted(n for n in os.listdir(directory) if not SNAPSHOT_FILE.match(n))
    assert names == sorted(f"{b:020d}.{k}" for b in bases for k in ("index", "log", "timeindex"))
    # Producer snapshots: one at each rolled-to segment's base (Kafka's roll).
    snapshots = sorted(n for n in os.listdir(directory) if SNAPSHOT_FILE.match(n))
    assert snapshots == [f"{b:020d}.snapshot" for b in bases[1:]]
    for name in names:
        assert SEGMENT_FILE.match(name) and len(name.split(".")[0]) == 20

    for base in bases:
        batches = [b for b in stored if b.segment == base]
        active = base == bases[-1]
        assert batches[0].base == base  # a segment is named by its first offset
        # .log: the appended batches, base offsets rewritten, nothing else
        raw = log_path(directory, base).read_bytes()
        assert raw == b"".join(b.data for b in batches)
        for b in batches:
            assert struct.unpack_from(">q", raw, b.position)[0] == b.base
            records = decode_records(raw, b.position)
            assert [r.offset for r in records] == list(range(b.base, b.last + 1))

        offsets, times = expected_indexes(batches, rolled=not active)
        index = log_path(directory, base, "index").read_bytes()
        timeindex = log_path(directory, base, "timeindex").read_bytes()
        if active:  # preallocated to segment.index.bytes, rounded down to whole entries
            assert len(index) == INDEX_BYTES
            assert len(timeindex) == INDEX_BYTES // TIME_ENTRY.size * TIME_ENTRY.size
            index = index[: len(offsets) * OFFSET_ENTRY.size]
            timeindex = timeindex[: len(times) * TIME_ENTRY.size]
        assert index == b"".join(OFFSET_ENTRY.pack(*e) for e in offsets)
        assert timeindex == b"".join(TIME_ENTRY.pack(*e) for e in times)
        check_files(log, directory, stored)

    log.close()  # trims the active segment's indexes too
    active = bases[-1]
    offsets, _ = expected_indexes([b for b in stored if b.segment == active], rolled=False)
    assert log_path(directory, active, "index").stat().st_size == len(offsets) * 8


# ---- regressions: bugs these tests found, fixed -----------------------------------------


# Regressions: a clean close and a recovery write the segment's largest timestamp to its
# time index, as Kafka's do; retention reads it from there after a restart.


def test_clean_close_keeps_the_largest_timestamp(tmp_path: Path) -> None:
    directory = tmp_path / "events-0"
    clock = Clock()
    props = {"retention.ms": str(DAY), "index.interval.bytes": "4096"}
    log = Log.open(directory, config(**props), clock=clock)
    for delta in (3, 1, 2):  # small batches: no index entry
        log.append_as_leader(bytearray(build_record_batch([(b"k", b"v", (), T0 - delta)])))
    log.close()
    assert read_entries(log_path(directory, 0, "timeindex"), TIME_ENTRY)[1] == [(T0 - 1, 1)]
    log = reopen(directory, clean=True, recovery_point=3, clock=clock, **props)
    assert log.active_segment.largest_timestamp == T0 - 1
    clock.now = T0 + DAY
    assert log.delete_old_segments() == [0]


def test_recovery_keeps_the_largest_timestamp(tmp_path: Path) -> None:
    directory = tmp_path / "events-0"
    clock = Clock()
    props = {"retention.ms": str(DAY), "index.interval.bytes": "4096"}
    log = Log.open(directory, config(**props), clock=clock)
    for delta in (3, 1, 2):  # small batches: no index entry but the roll's
        log.append_as_leader(bytearray(build_record_batch([(b"k", b"v", (), T0 - delta)])))
    log.roll()
    log.append_as_leader(bytearray(build_record_batch([(b"k", b"v", (), T0)])))
    assert read_entries(log_path(directory, 0, "timeindex"), TIME_ENTRY)[1] == [(T0 - 1, 1)]
    crash(log)
    log = reopen(directory, clock=clock, **props)  # recovers both segments
    assert read_entries(log_path(directory, 0, "timeindex"), TIME_ENTRY)[1] == [(T0 - 1, 1)]
    log.close()
    log = reopen(directory, clean=True, recovery_point=4, clock=clock, **props)
    clock.now = T0 + DAY
    assert log.delete_old_segments() == [0]


def test_crash_below_a_checkpointed_log_start_offset(tmp_path: Path) -> None:
    """DeleteRecords moved the log start to 15 and was checkpointed; a crash loses the
    unflushed offsets 10.. . Kafka (LogLoader.recoverLog: "Deleting all segments because
    logEndOffset is smaller than logStartOffset") starts an empty log at 15. odradek keeps
    log start 15 > log end 10: every read is out of range, and appends get offsets 10..14,
    below the log start, never readable."""
    directory = tmp_path / "events-0"
    log = Log.open(directory, config(), clock=Clock())
    for _ in range(10):
        log.append_as_leader(bytearray(build_record_batch([(b"k", b"v")])))
    log.flush()
    position = log_path(directory, 0).stat().st_size
    for _ in range(10):
        log.append_as_leader(bytearray(build_record_batch([(b"k", b"v")])))
    log.maybe_increment_log_start_offset(15)
    crash(log)
    os.truncate(log_path(directory, 0), position + 5)
    log = reopen(directory, recovery_point=10, log_start_offset=15)
    assert (log.log_start_offset, log.log_end_offset) == (15, 15)
    assert log.append_as_leader(bytearray(build_record_batch([(b"k", b"v")]))).first_offset == 15
    assert log.read(15, 1 << 20).size > 0


def test_segment_ms_counts_from_the_first_batch_after_a_restart(tmp_path: Path) -> None:
    directory = tmp_path / "events-0"
    clock = Clock()
    props = {"segment.ms": str(DAY)}
    log = Log.open(directory, config(**props), clock=clock)
    log.append_as_leader(bytearray(build_record_batch([(b"k", b"v", (), T0)])))
    log.close()
    clock.now = T0 + DAY - 1000  # the broker restarts just before the segment is due
    log = reopen(directory, clean=True, recovery_point=1, clock=clock, **props)
    clock.now = T0 + DAY + 1000
    log.append_as_leader(bytearray(build_record_batch([(b"k", b"v", (), clock.now)])))
    assert [s.base_offset for s in log.segments()] == [0, 1]
