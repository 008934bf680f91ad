"""Storage faults under a real broker: a full disk, a dir that fails, files changed under it,
a second broker on the same dir. Each reads back every acknowledged record, byte for byte:
while the broker runs, after kill -9 and after a clean stop.

The disks are small tmpfs mounts (the suite runs as root, as CI does).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from support.broker import BrokerProcess

pytestmark = pytest.mark.timeout(240)

TOPIC = "events"
RECORD = 1024


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 48 MiB tmpfs: the broker's log dir."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path, leave_bytes: int) -> Path:
    """A filler file that leaves about `leave_bytes` free on `disk`."""
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    filler = disk / "filler"
    with open(filler, "ab") as f:
        f.write(b"\xff" * max(0, free - leave_bytes))
    return filler


def _start(disk: Path, **settings: str) -> BrokerProcess:
    return BrokerProcess(disk / "data", {
        "log.segment.bytes": str(4 * 1024 * 1024),
        "num.partitions": "1",
        **settings,
    }).start()


def _produce(broker: BrokerProcess, count: int, seed: int, *,
             timeout_ms: int = 4000) -> tuple[dict[int, bytes], int]:
    """Sends `count` distinct 1 KiB records (idempotent, acks=all); returns the acknowledged
    ones by offset and how many failed."""
    rng = random.Random(seed)
    producer = Producer({
        "bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all",
        "linger.ms": 5, "message.timeout.ms": timeout_ms, "retry.backoff.ms": 50,
    })
    acked: dict[int, bytes] = {}
    failed = 0

    def report(err: KafkaError | None, msg) -> None:  # type: ignore[no-untyped-def]
        nonlocal failed
        if err is None:
            acked[msg.offset()] = msg.value()
        else:
            failed += 1

    for i in range(count):
        value = f"{seed}:{i}:".encode() + rng.randbytes(RECORD)
        while True:
            try:
                producer.produce(TOPIC, value, partition=0, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(timeout_ms / 1000 + 30) == 0
    return acked, failed


def _read_all(broker: BrokerProcess) -> dict[int, bytes]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "verify",
                         "enable.auto.commit": False, "fetch.max.bytes": 4 * 1024 * 1024})
    _, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    records: dict[int, bytes] = {}
    try:
        while len(records) < high:
            msg = consumer.poll(10)
            assert msg is not None, f"read {len(records)} of {high} records, then nothing"
            assert msg.error() is None, msg.error()
            records[msg.offset()] = msg.value()
    finally:
        consumer.close()
    return records


def _assert_readable(broker: BrokerProcess, acked: dict[int, bytes]) -> None:
    records = _read_all(broker)
    missing = [o for o in acked if o not in records]
    wrong = [o for o, v in acked.items() if o in records and records[o] != v]
    assert not missing and not wrong, (
        f"{len(missing)} acknowledged records unreadable, {len(wrong)} read back different")


@pytest.mark.parametrize("reserve", ["default", "off"])
def test_full_disk_loses_nothing_acknowledged(small_disk: Path, reserve: str) -> None:
    """Fill the disk during acks=all idempotent load (with the free-space reserve, or without
    one so that writes really meet ENOSPC), free it, produce again: every acknowledged
    record reads back exactly while running, after kill -9 and after a clean stop."""
    settings = {"log.dir.min.free.bytes": "0"} if reserve == "off" else {}
    broker = _start(small_disk, **settings)
    try:
        filler = _fill(small_disk, 12 * 1024 * 1024)
        acked, failed = _produce(broker, 16_000, seed=1)  # ~16 MiB into ~12 MiB
        assert failed > 0 and len(acked) > 5_000, (len(acked), failed)
        if reserve == "off":
            assert "is out of space: refusing appends" in broker.log_text()
        else:
            assert "less than its reserve" in broker.log_text()
        _assert_readable(broker, acked)

        filler.unlink()  # space returns: writes resume without a restart
        more, failed = _produce(broker, 2_000, seed=2)
        assert failed == 0 and len(more) == 2_000
        acked |= more
        _assert_readable(broker, acked)

        broker.restart(signal.SIGKILL)
        _assert_readable(broker, acked)
        assert "recovery cut" not in broker.log_text()  # nothing torn was left behind

        assert broker.stop() == 0
        assert (small_disk / "data" / ".kafka_cleanshutdown").exists()
        broker.start()
        _assert_readable(broker, acked)
        assert "Traceback" not in broker.log_text()
    finally:
        broker.kill()


def test_broker_starts_on_a_full_disk(small_disk: Path) -> None:
    """Killed while its disk is full, the broker still starts and recovers (what it cannot
    write now it writes later), and serves every acknowledged record."""
    broker = _start(small_disk, **{"log.dir.min.free.bytes": "0"})
    try:
        _fill(small_disk, 6 * 1024 * 1024)
        acked, failed = _produce(broker, 8_000, seed=3)
        assert failed > 0 and acked
        broker.kill()
        _fill(small_disk, 0)
        broker.start()
        try:
            _assert_readable(broker, acked)
        except AssertionError:
            print(broker.log_text())
            raise
    finally:
        broker.kill()


def test_failed_log_dir_goes_offline_and_the_broker_stops(tmp_path: Path) -> None:
    """An I/O error other than a full disk (here: the partition's directory made immutable,
    so the next segment cannot be created) takes the log dir offline; with no dir left the
    broker stops (exit 1). Restarted on a healthy dir, it serves every acknowledged record."""
    if os.geteuid() != 0:
        pytest.skip("chattr +i needs root (CI runs as root)")
    broker = _start(tmp_path)
    partition_dir = tmp_path / "data" / f"{TOPIC}-0"
    try:
        acked, failed = _produce(broker, 1_000, seed=4)
        assert failed == 0
        subprocess.run(["chattr", "+i", str(partition_dir)], check=True)
        more, _ = _produce(broker, 5_000, seed=5, timeout_ms=3000)  # needs a new segment
        acked |= more
        assert broker.process is not None
        assert broker.process.wait(30) == 1
        log = broker.log_text()
        assert "every log dir is offline" in log
        assert "Traceback" not in log, log
        subprocess.run(["chattr", "-i", str(partition_dir)], check=True)
        broker.start()
        _assert_readable(broker, acked)
    finally:
        subprocess.run(["chattr", "-i", str(partition_dir)], check=False)
        broker.kill()


def _segment(disk: Path) -> Path:
    return sorted((disk / "data" / f"{TOPIC}-0").glob("*.log"))[-1]


@pytest.mark.parametrize("change", ["deleted", "truncated", "zeroed"])
def test_segment_changed_under_the_broker(small_disk: Path, change: str) -> None:
    """A segment deleted, cut short or overwritten with zeros under the running broker: the
    partition goes offline, and nothing is acknowledged after it."""
    broker = _start(small_disk)
    try:
        _, failed = _produce(broker, 500, seed=6)
        assert failed == 0
        segment = _segment(small_disk)
        if change == "deleted":
            segment.unlink()
        elif change == "truncated":
            os.truncate(segment, segment.stat().st_size // 2)
        else:
            with open(segment, "r+b") as f:
                f.write(bytes(segment.stat().st_size // 2))
            # Reading through the zeros is how the broker learns of them.
            with pytest.raises(AssertionError):
                _read_all(broker)
        more, failed = _produce(broker, 20, seed=7, timeout_ms=2000)
        assert not more and failed == 20
        assert "is offline" in broker.log_text()
        assert "Traceback" not in broker.log_text()
    finally:
        broker.kill()


def test_second_broker_on_the_same_dir_changes_nothing(small_disk: Path) -> None:
    # The first broker writes no checkpoint meanwhile (every 5 s by default): a file it
    # changes would look like the second broker's doing.
    hour = str(3_600_000)
    broker = _start(small_disk, **{"replica.high.watermark.checkpoint.interval.ms": hour,
                                   "log.flush.offset.checkpoint.interval.ms": hour,
                                   "log.flush.start.offset.checkpoint.interval.ms": hour,
                                   "log.retention.check.interval.ms": hour})
    try:
        acked, _ = _produce(broker, 100, seed=8)
        data = small_disk / "data"
        before = {p: p.stat().st_mtime_ns for p in data.rglob("*")}
        second = subprocess.run(BrokerProcess(data).argv(), capture_output=True, text=True,
                                timeout=60)
        assert second.returncode == 1
        assert "in use by another broker" in second.stderr
        assert {p: p.stat().st_mtime_ns for p in data.rglob("*")} == before
        assert not (data / ".kafka_cleanshutdown").exists()
        broker.restart(signal.SIGKILL)  # the crash is still recovered: the marker is not there
        assert "recovered 1 logs" in broker.log_text() or "recovered" in broker.log_text()
        _assert_readable(broker, acked)
    finally:
        broker.kill()

