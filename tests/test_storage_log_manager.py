"""LogManager: loading, placement, checkpoints, clean and unclean restarts, background
chores; and librdkafka's batches stored and served unchanged."""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from support.protocol_peer import ProtocolPeer

from odradek.protocol.records import SimpleRecord, build_record_batch, iter_batch_headers
from odradek.storage.checkpoints import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    OffsetCheckpointFile,
)
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.log_manager import LogManager, LogManagerConfig

T0 = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


def manager(dirs: list[Path], clock: Clock | None = None, **props: str) -> LogManager:
    config = LogConfig.from_properties({k.replace("_", "."): v for k, v in props.items()})
    return LogManager(LogManagerConfig(log_dirs=tuple(dirs)), config, clock=clock or Clock())


def batch(n: int, size: int = 50) -> bytearray:
    return bytearray(build_record_batch(
        [SimpleRecord(b"k%d" % i, b"v" * size, timestamp=T0) for i in range(n)]))


def test_partitions_spread_over_log_dirs_and_survive_a_clean_restart(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    lm = manager(dirs)
    lm.startup(background=False)
    for p in range(4):
        lm.get_or_create_log("events", p).append_as_leader(batch(p + 1))
    assert sorted(len(list(d.iterdir())) for d in dirs) == [2, 2]
    lm.get_log("events", 3).maybe_increment_log_start_offset(2)  # type: ignore[union-attr]
    lm.shutdown()
    for d in dirs:
        assert (d / CLEAN_SHUTDOWN_FILE).exists()
    recovery = {}
    for d in dirs:
        recovery.update(OffsetCheckpointFile(d / RECOVERY_POINT_CHECKPOINT).read())
    assert recovery == {("events", p): p + 1 for p in range(4)}
    starts = {}
    for d in dirs:
        starts.update(OffsetCheckpointFile(d / LOG_START_OFFSET_CHECKPOINT).read())
    assert starts[("events", 3)] == 2

    again = manager(dirs)
    again.startup(background=False)
    assert not any((d / CLEAN_SHUTDOWN_FILE).exists() for d in dirs)  # live: a crash shows
    for p in range(4):
        log = again.get_log("events", p)
        assert log is not None and log.log_end_offset == p + 1
    assert again.get_log("events", 3).log_start_offset == 2  # type: ignore[union-attr]
    again.shutdown()


def test_unclean_start_recovers_torn_writes(tmp_path: Path) -> None:
    lm = manager([tmp_path])
    lm.startup(background=False)
    log = lm.get_or_create_log("events", 0)
    log.append_as_leader(batch(3))
    log.flush()
    lm.checkpoint_recovery_points()
    log.append_as_leader(batch(2))
    # A crash midway through the last write: half of its batch reached the disk.
    segment = log.active_segment
    os.truncate(segment.log_path, segment.size - 20)
    again = manager([tmp_path])
    again.startup(background=False)
    recovered = again.get_log("events", 0)
    assert recovered is not None and recovered.log_end_offset == 3
    assert recovered.append_as_leader(batch(1)).first_offset == 3
    again.shutdown()


def test_background_chores_with_an_injected_clock(tmp_path: Path) -> None:
    clock = Clock()
    lm = manager([tmp_path], clock, segment_bytes="300", retention_ms="1000",
                 file_delete_delay_ms="500", flush_ms="100")
    lm.startup(background=False)
    log = lm.get_or_create_log("events", 0)
    for _ in range(3):
        log.append_as_leader(batch(1, size=200))
    clock.now += 200
    lm.flush_dirty_logs()
    assert log.recovery_point == 3
    clock.now += 2000
    assert lm.cleanup_logs() == 3
    assert lm.delete_pending_files() == 0
    clock.now += 500
    assert lm.delete_pending_files() == 3
    assert [p.name for p in (tmp_path / "events-0").iterdir() if p.suffix == ".log"] == [
        "00000000000000000003.log"
    ]
    lm.shutdown()


def test_background_thread_runs_and_stops(tmp_path: Path) -> None:
    lm = LogManager(
        LogManagerConfig(log_dirs=(tmp_path,), recovery_point_checkpoint_interval_ms=10),
        LogConfig(),
    )
    lm.startup()
    lm.get_or_create_log("events", 0).append_as_leader(batch(1))
    checkpoint = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT)
    deadline = time.monotonic() + 10  # wait for the checkpoint thread, bounded
    while ("events", 0) not in checkpoint.read() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ("events", 0) in checkpoint.read()
    lm.shutdown()


def test_delete_log_removes_the_directory(tmp_path: Path) -> None:
    lm = manager([tmp_path])
    lm.startup(background=False)
    lm.get_or_create_log("gone", 0).append_as_leader(batch(1))
    lm.delete_log("gone", 0)
    assert lm.get_log("gone", 0) is None
    assert list(tmp_path.iterdir()) == []
    # An interrupted deletion is finished at the next start.
    (tmp_path / "gone-1.0123abcd-delete").mkdir()
    lm.shutdown()
    again = manager([tmp_path])
    again.startup(background=False)
    assert not (tmp_path / "gone-1.0123abcd-delete").exists()
    again.shutdown()


@pytest.mark.timeout(60)
def test_librdkafka_batches_are_stored_and_served_unchanged(tmp_path: Path) -> None:
    with ProtocolPeer() as peer:
        producer = Producer({"bootstrap.servers": peer.bootstrap, "linger.ms": 20,
                             "compression.type": "lz4", "enable.idempotence": True})
        for i in range(30):
            producer.produce("t", key=b"%d" % i, value=b"x" * i, partition=0,
                             headers=[("h", b"%d" % i)])
        assert producer.flush(30) == 0
        captured = peer.captured("t", 0)
    log = Log.open(tmp_path / "t-0", LogConfig())
    appended = []
    for payload in captured:
        buf = bytearray(payload)
        info = log.append_as_leader(buf)
        expected = bytearray(payload)
        offset = info.first_offset
        for pos, header in iter_batch_headers(expected):
            struct.pack_into(">q", expected, pos, offset)  # only baseOffset differs
            offset += header.last_offset_delta + 1
        appended.append(bytes(expected))
    assert log.read(0, 1 << 20).read() == b"".join(appended)
    assert log.log_end_offset == 30


def test_rolled_segments_are_fsynced_in_the_background(tmp_path: Path) -> None:
    """A roll does not fsync the old segment in the append path; the log manager's thread
    does, and then the recovery point moves to the new segment."""
    queued: list = []
    log = Log.open(tmp_path / "direct-0", LogConfig())
    log.flush_in_background = queued.append
    log.append_as_leader(build_record_batch([(b"k", b"v" * 100)] * 10))
    log.roll()
    assert log.recovery_point == 0 and len(queued) == 1  # not fsynced by the roll itself
    queued[0]()
    assert log.recovery_point == 10
    log.close()

    lm = LogManager(LogManagerConfig((tmp_path,)), LogConfig())
    lm.startup(background=True)
    try:
        log = lm.get_or_create_log("events", 0)
        log.append_as_leader(build_record_batch([(b"k", b"v" * 100)] * 10))
        log.roll()
        deadline = time.monotonic() + 10
        while log.recovery_point != 10 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert log.recovery_point == 10
    finally:
        lm.shutdown()
