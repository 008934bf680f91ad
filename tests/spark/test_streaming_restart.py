"""A streaming query SIGKILLed in the middle of a micro-batch and restarted from its
checkpoint: its Parquet output holds every input record exactly once, with its offset.

The query runs in a program of its own (streaming_driver.py: its own SparkSession and JVM), in
a session of its own, so that the test can SIGKILL its whole process group, JVM included, as
a crash would.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.broker import BrokerProcess
from support.spark import consume_all, create_topic, produce_values, wait_for

DRIVER = Path(__file__).with_name("streaming_driver.py")
PARTITIONS = 2


def batch_ids(directory: Path) -> set[int]:
    """Batch ids of a checkpoint log directory (offsets/, commits/, _spark_metadata/)."""
    if not directory.is_dir():
        return set()
    return {int(p.name.split(".")[0]) for p in directory.iterdir()
            if p.name.split(".")[0].isdigit()}


def data_files(output: Path) -> set[str]:
    """The Parquet files in the sink's directory, committed or not."""
    if not output.is_dir():
        return set()
    return {p.name for p in output.iterdir() if p.name.endswith(".parquet")}


def committed_files(output: Path) -> set[str]:
    """The files the sink's _spark_metadata log lists: the table, as Spark reads it."""
    names: set[str] = set()
    log = output / "_spark_metadata"
    if not log.is_dir():
        return names
    for entry in log.iterdir():
        if entry.name.startswith(".") or not entry.name.split(".")[0].isdigit():
            continue
        for line in entry.read_text().splitlines()[1:]:   # first line: the version
            if line.strip():
                names.add(os.path.basename(json.loads(line)["path"]))
    return names


def logged_offsets(checkpoint: Path, batch: int) -> dict[int, int]:
    """The end offsets Spark logged for a micro-batch: partition -> next offset."""
    lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    [(_topic, offsets)] = json.loads(lines[-1]).items()   # one source, one topic
    return {int(p): int(o) for p, o in offsets.items()}


def session_members(sid: int) -> list[int]:
    """Processes of the session `sid` (the driver's session, created for it)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()   # after "pid (comm) "
        if int(fields[3]) == sid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


class Driver:
    """streaming_driver.py in a session of its own; its output goes to files."""

    def __init__(self, workdir: Path, name: str, args: list[str]) -> None:
        self.stderr_path = workdir / f"{name}.stderr"
        self.stdout_path = workdir / f"{name}.stdout"
        with open(self.stdout_path, "w") as out, open(self.stderr_path, "w") as err:
            self.process = subprocess.Popen(
                [sys.executable, str(DRIVER), *args], stdout=out, stderr=err, cwd=workdir,
                start_new_session=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))

    def tail(self, lines: int = 60) -> str:
        text = self.stderr_path.read_text(errors="replace").splitlines()[-lines:]
        out = self.stdout_path.read_text(errors="replace")
        return f"stdout:\n{out}\nstderr (last {lines} lines):\n" + "\n".join(text)

    def running(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"driver exited with {self.process.returncode}\n{self.tail()}")
        return True

    def kill(self) -> None:
        """SIGKILL the driver's process group (the driver and its JVM), then any process left
        in its session (Spark's Python worker daemon keeps a process group of its own)."""
        sid = self.process.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(sid, signal.SIGKILL)
        self.process.wait(30)

        def gone() -> bool:
            for pid in session_members(sid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            return not session_members(sid)
        wait_for(gone, "the driver's processes to end", timeout=30)

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"driver still running after {timeout} s\n{self.tail()}") from None


def kill_when(driver: Driver, mid_batch: Callable[[], object], interval: float) -> None:
    """SIGKILLs the driver once it is in the middle of writing a micro-batch."""
    try:
        wait_for(mid_batch, "the first run to be in the middle of writing a micro-batch",
                 timeout=120, interval=interval)
        driver.kill()
    except AssertionError:
        print(driver.tail())
        raise


@pytest.fixture
def drivers() -> Iterator[list[Driver]]:
    started: list[Driver] = []
    yield started
    for driver in started:
        if driver.process.poll() is None or session_members(driver.process.pid):
            driver.kill()


@pytest.mark.timeout(240)
def test_sigkill_mid_batch_then_restart_gives_every_record_exactly_once(
        spark: Any, broker: BrokerProcess, tmp_path: Path, drivers: list[Driver]) -> None:
    """The first run reads 40 records per micro-batch and writes partition 1's file of each
    batch a second after partition 0's. The test SIGKILLs it when a batch is committed and the
    next one is half written: offsets/N logged, a Parquet file of batch N on disk (being
    written, or written) but not in the sink's log, commits/N missing. More records are
    produced while it is down; the restarted query (availableNow, at most 250 records per
    batch) runs batch N again with the offsets it logged, then the rest. Spark's table (the
    sink's log) must hold each record once with its partition and offset; the killed attempt's
    file stays on disk, outside the table."""
    topic = create_topic(broker, PARTITIONS)
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    values = [f"record-{i}" for i in range(600)]
    placed = produce_values(broker, topic, [(i % PARTITIONS, v, None)
                                            for i, v in enumerate(values[:400])])
    common = [broker.bootstrap, topic, str(output), str(checkpoint)]

    first = Driver(tmp_path, "first", [*common, "--max-offsets", "40", "--slow-partition", "1",
                                       "--slow-ms", "1000", "--deadline", "150"])
    drivers.append(first)

    def mid_batch() -> tuple[int, set[str]] | None:
        first.running()
        commits = batch_ids(checkpoint / "commits")
        offsets = batch_ids(checkpoint / "offsets")
        listed = committed_files(output)
        orphans = data_files(output) - listed
        if commits and offsets and max(offsets) not in commits and orphans:
            return max(offsets), orphans
        return None

    kill_when(first, mid_batch, interval=0.02)
    # Checked again now that nothing moves: the kill really came in the middle of a batch.
    commits, offsets = batch_ids(checkpoint / "commits"), batch_ids(checkpoint / "offsets")
    killed = max(offsets)
    orphans = data_files(output) - committed_files(output)
    assert commits and killed not in commits, (commits, offsets)
    assert orphans, "no file of the killed batch was on disk"
    placed += produce_values(broker, topic, [(i % PARTITIONS, v, None)
                                             for i, v in enumerate(values[400:], 400)])

    second = Driver(tmp_path, "second", [*common, "--max-offsets", "250", "--available-now",
                                         "--deadline", "120"])
    drivers.append(second)
    status = second.wait(150)
    assert status == 0, second.tail()

    # Every batch the first run logged advanced by exactly 40 (more was always waiting); the
    # second run's batches by at most 250, up to the end of the topic.
    ends = {b: logged_offsets(checkpoint, b) for b in sorted(batch_ids(checkpoint / "offsets"))}
    assert sorted(ends) == list(range(len(ends))) and killed in ends
    previous = dict.fromkeys(range(PARTITIONS), 0)
    for batch, end in ends.items():
        size = sum(end[p] - previous[p] for p in end)
        limit_ok = size == 40 if batch <= killed else 0 < size <= 250
        assert limit_ok, (batch, size, ends)
        previous = end
    assert previous == {0: 300, 1: 300}
    assert batch_ids(checkpoint / "commits") == set(ends)

    # The killed attempt's files are still there, outside the table.
    assert orphans <= data_files(output) and not orphans & committed_files(output)
    rows = spark.read.parquet(str(output)).collect()
    got = sorted((r.partition, r.offset, r.value) for r in rows)
    want = sorted((p, o, v) for (p, o), v in zip(placed, values, strict=True))
    assert len(got) == len(set(got)), "duplicates in the output"
    assert got == want


def open_transaction_on(bootstrap: str, topic: str) -> bool:
    """Some partition of the topic has records of a transaction that is still open (its last
    stable offset is behind its high watermark)."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    partitions = admin.list_topics(topic, timeout=30).topics[topic].partitions
    specs = {TopicPartition(topic, p): OffsetSpec.latest() for p in partitions}
    high = admin.list_offsets(specs)
    stable = admin.list_offsets(specs, isolation_level=IsolationLevel.READ_COMMITTED)
    return any(stable[tp].result().offset < high[tp].result().offset for tp in specs)


@pytest.mark.timeout(240)
def test_sigkill_mid_batch_then_restart_writes_each_record_once_to_a_topic(
        spark: Any, broker: BrokerProcess, tmp_path: Path, drivers: list[Driver]) -> None:
    """The odradek sink, exactly once: the first run (40 records per micro-batch, partition
    1's task a second behind partition 0's) is SIGKILLed when a micro-batch's first task has
    written its records into an open transaction and the batch is not committed. The
    restarted query replays that batch and goes on to the end: a read_committed consumer of
    the output sees every input record exactly once, and nothing stays open."""
    topic = create_topic(broker, PARTITIONS)
    output = create_topic(broker, PARTITIONS)
    checkpoint = tmp_path / "checkpoint"
    values = [f"record-{i}" for i in range(600)]
    produce_values(broker, topic, [(i % PARTITIONS, v, None) for i, v in enumerate(values[:400])])
    common = [broker.bootstrap, topic, output, str(checkpoint), "--sink-topic"]

    first = Driver(tmp_path, "first", [*common, "--max-offsets", "40", "--slow-partition", "1",
                                       "--slow-ms", "1000", "--deadline", "150"])
    drivers.append(first)

    def mid_batch() -> bool:
        first.running()
        commits = batch_ids(checkpoint / "commits")
        offsets = batch_ids(checkpoint / "offsets")
        return bool(commits and offsets and max(offsets) not in commits
                    and open_transaction_on(broker.bootstrap, output))

    kill_when(first, mid_batch, interval=0.05)
    commits, offsets = batch_ids(checkpoint / "commits"), batch_ids(checkpoint / "offsets")
    assert max(offsets) not in commits and open_transaction_on(broker.bootstrap, output)
    produce_values(broker, topic, [(i % PARTITIONS, v, None)
                                   for i, v in enumerate(values[400:], 400)])

    second = Driver(tmp_path, "second", [*common, "--max-offsets", "250", "--available-now",
                                         "--deadline", "120"])
    drivers.append(second)
    status = second.wait(150)
    assert status == 0, second.tail()

    committed = [r[4].decode() for r in consume_all(broker.bootstrap, output)]
    assert sorted(committed) == sorted(values)
    # The killed attempt's records are in the log, aborted: only read_uncommitted sees them.
    everything = [r[4].decode() for r in consume_all(broker.bootstrap, output,
                                                     "read_uncommitted")]
    assert len(everything) > len(values) and set(everything) == set(values)
    assert not open_transaction_on(broker.bootstrap, output)
    # The odradek source reads it the same way: read_committed, each record once; read
    # uncommitted, the aborted ones too.
    for isolation, expected in (("read_committed", sorted(values)),
                                ("read_uncommitted", sorted(everything))):
        rows = (spark.read.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap)
                .option("subscribe", output).option("kafka.isolation.level", isolation)
                .load().selectExpr("cast(value as string) as v").collect())
        assert sorted(r.v for r in rows) == expected, isolation
