"""Log dir faults at the storage layer: a failed append is undone, a changed segment takes
its partition offline, the free-space reserve refuses and resumes, the dir lock holds."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from odradek.protocol.records import build_record_batch
from odradek.storage.config import LogConfig
from odradek.storage.errors import DiskFullError, LogDirOfflineError, StorageError
from odradek.storage.log import Log
from odradek.storage.log_dir import LogDir, lock_log_dir

T0 = 1_700_000_000_000


def batch(n: int = 10, value: bytes = b"v" * 100) -> bytearray:
    return bytearray(build_record_batch([(None, value)] * n, base_timestamp=T0))


def open_log(tmp_path: Path, log_dir: LogDir | None = None) -> Log:
    log = Log.open(tmp_path / "t-0", LogConfig(), clock=lambda: T0)
    log.log_dir = log_dir
    return log


def read_all(log: Log) -> list[int]:
    return [r.offset for r in log.read_records(0)]


def test_append_cut_short_by_enospc_is_undone(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    log_dir = LogDir(tmp_path, 0)
    log = open_log(tmp_path, log_dir)
    log.append_as_leader(batch())
    size = log.active_segment.size
    real_write = os.write

    def half_then_enospc(fd: int, data: memoryview) -> int:  # type: ignore[override]
        if len(data) > 100:
            real_write(fd, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", half_then_enospc)
    with pytest.raises(DiskFullError):
        log.append_as_leader(batch())
    monkeypatch.undo()
    # The file ends where it did, the log is online, and the next append reads back.
    assert os.path.getsize(log.active_segment.log_path) == size
    assert not log_dir.offline and log.offline_reason is None
    log.append_as_leader(batch())
    assert read_all(log) == list(range(20))


def test_other_io_errors_take_the_dir_offline(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    failed: list[LogDir] = []
    log_dir = LogDir(tmp_path, 0, on_offline=failed.append)
    log = open_log(tmp_path, log_dir)
    log.append_as_leader(batch())

    def eio(fd: int, data: memoryview) -> int:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "write", eio)
    with pytest.raises(LogDirOfflineError):
        log.append_as_leader(batch())
    monkeypatch.undo()
    assert failed == [log_dir] and log_dir.offline
    with pytest.raises(LogDirOfflineError):
        log.append_as_leader(batch())
    assert read_all(log) == list(range(10))  # what was written stays readable


def test_enospc_in_a_cluster_takes_the_dir_offline(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    log_dir = LogDir(tmp_path, 0, offline_on_full=True)
    log = open_log(tmp_path, log_dir)

    def enospc(fd: int, data: memoryview) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", enospc)
    with pytest.raises(LogDirOfflineError):
        log.append_as_leader(batch())
    assert log_dir.offline


@pytest.mark.parametrize("change", ["deleted", "truncated", "grown"])
def test_segment_changed_under_the_log_takes_the_partition_offline(
        tmp_path: Path, change: str) -> None:
    log_dir = LogDir(tmp_path, 0)
    log = open_log(tmp_path, log_dir)
    log.append_as_leader(batch())
    path = log.active_segment.log_path
    if change == "deleted":
        path.unlink()
    elif change == "truncated":
        os.truncate(path, 10)
    else:
        with open(path, "ab") as f:
            f.write(b"x")
    with pytest.raises(LogDirOfflineError, match="offline"):
        log.append_as_leader(batch())
    assert log.offline_reason is not None and not log_dir.offline
    with pytest.raises(LogDirOfflineError):
        log.append_as_leader(batch())


def test_a_read_of_a_segment_cut_short_refuses_instead_of_promising_bytes(
        tmp_path: Path) -> None:
    log = open_log(tmp_path, LogDir(tmp_path, 0))
    for _ in range(3):
        log.append_as_leader(batch())
    os.truncate(log.active_segment.log_path, log.active_segment.size - 10)
    with pytest.raises(StorageError):
        log.read(20, 1 << 20)
    assert log.offline_reason is not None


class FakeDisk:
    """statvfs of a 100 MB file system whose free space the test sets."""

    def __init__(self, free: int) -> None:
        self.free = free

    def __call__(self, path: Path) -> os.statvfs_result:
        return os.statvfs_result((4096, 1, 100_000_000, 0, self.free, 0, 0, 0, 0, 255))


def test_reserve_refuses_appends_and_resumes(tmp_path: Path) -> None:
    disk, now = FakeDisk(free=2_000_000), [0.0]
    log_dir = LogDir(tmp_path, 1_000_000, statvfs=disk, monotonic=lambda: now[0])
    log = open_log(tmp_path, log_dir)
    log.append_as_leader(batch())
    disk.free = 1_000_100  # others wrote: one more batch would eat into the reserve
    now[0] += 1.0  # free space is read again once a second
    with pytest.raises(DiskFullError, match=r"log\.dir\.min\.free\.bytes"):
        log.append_as_leader(batch())
    assert log.log_end_offset == 10  # nothing of the refused batch was written
    disk.free = 1_500_000  # space returns: the next append looks again and goes through
    log.append_as_leader(batch())
    assert read_all(log) == list(range(20))


def test_reserve_is_capped_at_a_share_of_the_file_system(tmp_path: Path) -> None:
    # 5% of 100 MB: a reserve larger than that would keep a small disk from being used.
    log_dir = LogDir(tmp_path, 1 << 40, statvfs=FakeDisk(free=5_000_100))
    log_dir.reserve(100)
    with pytest.raises(DiskFullError):
        log_dir.reserve(101)


def test_followers_are_not_held_to_the_reserve(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogDir(tmp_path, 1_000_000, statvfs=FakeDisk(free=0)))
    log.append_as_follower(batch())
    assert log.log_end_offset == 10


def test_a_second_lock_on_a_dir_is_refused(tmp_path: Path) -> None:
    fd = lock_log_dir(tmp_path)
    try:
        # flock locks belong to open file descriptions: a second open is a second owner.
        with pytest.raises(StorageError, match="in use by another broker"):
            lock_log_dir(tmp_path)
    finally:
        os.close(fd)
    os.close(lock_log_dir(tmp_path))  # free again once released


def test_metadata_store_undoes_a_change_it_cannot_save(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk while creating a topic: the topic is not half there (the next attempt
    must not find it 'exists already')."""
    import uuid

    from odradek.cluster import embedded
    from odradek.cluster.metadata import PartitionState, TopicMetadata

    store = embedded.EmbeddedMetadataStore(tmp_path)
    topic = TopicMetadata("t", uuid.uuid4(), {0: PartitionState([1], 1, 0, [1])}, {})

    def no_space(path: Path, data: bytes) -> None:
        raise StorageError(f"cannot write {path}: [Errno 28] No space left on device")

    monkeypatch.setattr(embedded, "write_durably", no_space)
    with pytest.raises(StorageError):
        store.create_topic(topic)
    assert store.topics() == {}
    monkeypatch.undo()
    store.create_topic(topic)
    assert list(embedded.EmbeddedMetadataStore(tmp_path).topics()) == ["t"]
