"""Checkpoint files and the clean-shutdown marker: Kafka's bytes, atomic and durable writes."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.protocol.errors import ErrorCode
from odradek.storage import checkpoints
from odradek.storage.checkpoints import (
    CLEAN_SHUTDOWN_FILE,
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    OffsetCheckpointFile,
    has_clean_shutdown_marker,
    read_clean_shutdown_broker_epoch,
    remove_clean_shutdown_marker,
    write_clean_shutdown_marker,
)
from odradek.storage.errors import StorageError


def test_file_names_are_kafkas() -> None:
    assert RECOVERY_POINT_CHECKPOINT == "recovery-point-offset-checkpoint"
    assert LOG_START_OFFSET_CHECKPOINT == "log-start-offset-checkpoint"
    assert CLEANER_OFFSET_CHECKPOINT == "cleaner-offset-checkpoint"
    assert CLEAN_SHUTDOWN_FILE == ".kafka_cleanshutdown"


def test_exact_bytes(tmp_path: Path) -> None:
    path = tmp_path / RECOVERY_POINT_CHECKPOINT
    OffsetCheckpointFile(path).write({("logs", 3): 7, ("events", 0): 42})
    assert path.read_bytes() == b"0\n2\nevents 0 42\nlogs 3 7\n"


def test_empty_checkpoint_bytes(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    OffsetCheckpointFile(path).write({})
    assert path.read_bytes() == b"0\n0\n"
    assert OffsetCheckpointFile(path).read() == {}


def test_reads_what_kafka_writes(tmp_path: Path) -> None:
    path = tmp_path / LOG_START_OFFSET_CHECKPOINT
    path.write_bytes(
        b"0\n3\n__consumer_offsets 12 0\nmy.topic_name-1 0 9223372036854775807\nb 1 5\n"
    )
    assert OffsetCheckpointFile(path).read() == {
        ("__consumer_offsets", 12): 0,
        ("my.topic_name-1", 0): 2**63 - 1,
        ("b", 1): 5,
    }


def test_round_trip_with_dots_underscores_dashes(tmp_path: Path) -> None:
    entries = {("a.b", 0): 0, ("a_b", 1): 1, ("a-b", 2): 2, ("A9", 2147483647): 123456789012}
    cp = OffsetCheckpointFile(tmp_path / "cp")
    cp.write(entries)
    assert cp.read() == entries


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=50)
@given(
    st.dictionaries(
        st.tuples(
            st.from_regex(r"[a-zA-Z0-9._-]{1,30}", fullmatch=True),
            st.integers(0, 2**31 - 1),
        ),
        st.integers(-(2**63), 2**63 - 1),
        max_size=20,
    )
)
def test_round_trip_property(tmp_path: Path, entries: dict[tuple[str, int], int]) -> None:
    cp = OffsetCheckpointFile(tmp_path / "prop")
    cp.write(entries)
    assert cp.read() == entries


def test_missing_file_reads_empty(tmp_path: Path) -> None:
    assert OffsetCheckpointFile(tmp_path / "nothing-here").read() == {}
    assert not (tmp_path / "nothing-here").exists()  # reading creates nothing


def test_empty_file_reads_empty(tmp_path: Path) -> None:
    # Kafka creates the file empty before its first write.
    (tmp_path / "cp").write_bytes(b"")
    assert OffsetCheckpointFile(tmp_path / "cp").read() == {}


def test_write_replaces(tmp_path: Path) -> None:
    cp = OffsetCheckpointFile(tmp_path / "cp")
    cp.write({("a", 0): 1, ("b", 0): 2})
    cp.write({("c", 5): 3})
    assert cp.read() == {("c", 5): 3}
    assert [p.name for p in tmp_path.iterdir()] == ["cp"]


def test_stray_tmp_from_a_crash_does_not_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    cp = OffsetCheckpointFile(path)
    cp.write({("events", 0): 42})
    # A crash in the middle of the next write leaves a half-written .tmp behind.
    (tmp_path / "cp.tmp").write_bytes(b"0\n5\nevents 0 4")
    assert cp.read() == {("events", 0): 42}
    cp.write({("events", 0): 43})
    assert cp.read() == {("events", 0): 43}
    assert not (tmp_path / "cp.tmp").exists()


def test_failed_rename_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cp"
    cp = OffsetCheckpointFile(path)
    cp.write({("events", 0): 42})

    def crash(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoints.os, "replace", crash)
    with pytest.raises(StorageError) as info:
        cp.write({("events", 0): 43})
    assert info.value.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert str(path) in str(info.value)
    monkeypatch.undo()
    assert cp.read() == {("events", 0): 42}
    assert not (tmp_path / "cp.tmp").exists()


def test_write_fsyncs_file_and_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(checkpoints.os, "fsync", spy)
    OffsetCheckpointFile(tmp_path / "cp").write({("a", 0): 1})
    real = tmp_path.resolve()
    assert synced == [str(real / "cp.tmp"), str(real)]


def test_unwritable_entries_are_refused(tmp_path: Path) -> None:
    cp = OffsetCheckpointFile(tmp_path / "cp")
    for entries in (
        {("has space", 0): 1},
        {("", 0): 1},
        {("a", -1): 1},
        {("a", 2**31): 1},
        {("a", 0): 2**63},
    ):
        with pytest.raises(ValueError):
            cp.write(entries)
    assert not (tmp_path / "cp").exists()


@pytest.mark.parametrize(
    ("content", "line"),
    [
        (b"1\n0\n", 1),  # unknown version
        (b"x\n0\n", 1),
        (b"\n", 1),
        (b"0\n", 2),  # no count
        (b"0\nx\n", 2),
        (b"0\n-1\n", 2),
        (b"0\n1\na 0\n", 3),  # two fields
        (b"0\n1\na 0 1 2\n", 3),  # four fields
        (b"0\n1\na x 1\n", 3),
        (b"0\n1\na 0 x\n", 3),
        (b"0\n1\na -1 5\n", 3),
        (b"0\n1\na 2147483648 5\n", 3),
        (b"0\n1\na 0 9223372036854775808\n", 3),
        (b"0\n1\na  0 1\n", 3),  # two spaces
        (b"0\n1\n a 0 1\n", 3),
        (b"0\n1\nt\xc3\xa9 0 1\n", 3),  # not a legal topic name
        (b"0\n2\na 0 1\na 0 2\n", 4),  # listed twice
    ],
)
def test_malformed_names_file_and_line(tmp_path: Path, content: bytes, line: int) -> None:
    path = tmp_path / RECOVERY_POINT_CHECKPOINT
    path.write_bytes(content)
    with pytest.raises(StorageError) as info:
        OffsetCheckpointFile(path).read()
    assert str(path) in str(info.value)
    assert f"line {line}:" in str(info.value)


@pytest.mark.parametrize(
    "content",
    [
        b"0\n2\na 0 1\n",  # fewer entries than the count
        b"0\n1\na 0 1\nb 0 2\n",  # more
        b"0\n1\na 0 1",  # cut before the last newline
        b"0\n1\na 0 \xff\n",  # not UTF-8
        b"0\n1\na 0 1\n\n",  # a blank line
    ],
)
def test_malformed_counts_and_truncation(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "cp"
    path.write_bytes(content)
    with pytest.raises(StorageError, match=re.escape(str(path))):
        OffsetCheckpointFile(path).read()


def test_unreadable_file_is_a_storage_error(tmp_path: Path) -> None:
    (tmp_path / "cp").mkdir()
    with pytest.raises(StorageError):
        OffsetCheckpointFile(tmp_path / "cp").read()


# --- clean shutdown marker ------------------------------------------------------------------


def test_clean_shutdown_marker_life_cycle(tmp_path: Path) -> None:
    assert not has_clean_shutdown_marker(tmp_path)
    write_clean_shutdown_marker(tmp_path, broker_epoch=17)
    assert has_clean_shutdown_marker(tmp_path)
    # Kafka 3.6+'s content (Jackson writes the HashMap with broker_epoch first).
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).read_bytes() == b'{"broker_epoch":"17","version":"0"}'
    assert read_clean_shutdown_broker_epoch(tmp_path) == 17
    remove_clean_shutdown_marker(tmp_path)
    assert not has_clean_shutdown_marker(tmp_path)
    remove_clean_shutdown_marker(tmp_path)  # removing twice is fine
    assert [p.name for p in tmp_path.iterdir()] == []


def test_clean_shutdown_marker_default_epoch(tmp_path: Path) -> None:
    write_clean_shutdown_marker(tmp_path)
    assert read_clean_shutdown_broker_epoch(tmp_path) == -1


def test_old_empty_marker_still_counts(tmp_path: Path) -> None:
    (tmp_path / CLEAN_SHUTDOWN_FILE).write_bytes(b"")  # Kafka before 3.6
    assert has_clean_shutdown_marker(tmp_path)
    assert read_clean_shutdown_broker_epoch(tmp_path) is None


def test_marker_in_missing_directory_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError):
        write_clean_shutdown_marker(tmp_path / "gone")
