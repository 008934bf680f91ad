"""At-least-once delivery through a consumer group whose members are killed: every
produced record is processed at least once, and the group's committed offsets never run
ahead of what was processed.

The consumers (confluent-kafka, kafka-python and aiokafka, in one group) run in processes
of their own (delivery_worker.py), each recording what it processes in a journal of its
own before it commits; the test SIGKILLs some of them at seeded points of the progress
and starts replacements. Journal lines carry CLOCK_MONOTONIC stamps, so the lines of all
processes and the test's own samples of the broker's OffsetFetch answers fall in one
order, and each commit can be checked against what had been processed before it.
"""

from __future__ import annotations

import bisect
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Producer
from group_wire import GroupWire
from support.broker import BrokerProcess
from test_groups import SETTINGS, create_topic

WORKER = Path(__file__).with_name("delivery_worker.py")
LIBRARIES = ("confluent-kafka", "kafka-python", "aiokafka")
PARTITIONS = 6
RECORDS = 3000  # record i is the value "i" at offset i // PARTITIONS of partition i % PARTITIONS
KILLS = 4
SEED = 20261122


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("delivery"), SETTINGS).start()
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


class Worker:
    def __init__(self, library: str, broker: BrokerProcess, topic: str, group: str,
                 journal: Path) -> None:
        self.library = library
        self.journal = journal
        with journal.with_suffix(".log").open("w") as log:  # the client's own logging
            self.process = subprocess.Popen(
                [sys.executable, str(WORKER), library, broker.bootstrap, topic, group,
                 str(journal)], stdin=subprocess.DEVNULL, stderr=log)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


@dataclass
class Journals:
    """Every worker's journal lines, merged in time order."""

    processed: list[tuple[int, int, int, int]] = field(default_factory=list)  # ns, p, o, v
    commits: list[tuple[int, int, int]] = field(default_factory=list)  # ns, p, offset
    acknowledged: int = 0
    failed: int = 0

    @classmethod
    def read(cls, paths: list[Path]) -> Journals:
        out = cls()
        for path in paths:
            if not path.exists():
                continue
            text = path.read_text()
            lines = text.split("\n")[:-1]  # a killed worker may leave half a line
            for line in lines:
                kind, ns, *rest = line.split()
                numbers = [int(ns), *map(int, rest)]
                if kind == "P":
                    out.processed.append((numbers[0], numbers[1], numbers[2], numbers[3]))
                elif kind == "C":
                    out.commits.append((numbers[0], numbers[1], numbers[2]))
                elif kind == "A":
                    out.acknowledged += 1
                else:
                    out.failed += 1
        out.processed.sort()
        out.commits.sort()
        return out


class ProcessedPrefix:
    """For each partition, how far its records had all been processed at any time: the
    first offset not yet processed, as a step function of the monotonic clock."""

    def __init__(self, processed: list[tuple[int, int, int, int]]) -> None:
        self.times: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        self.lows: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        seen: dict[int, set[int]] = {p: set() for p in range(PARTITIONS)}
        low = dict.fromkeys(range(PARTITIONS), 0)
        for ns, partition, offset, _ in processed:
            seen[partition].add(offset)
            while low[partition] in seen[partition]:
                low[partition] += 1
            self.times[partition].append(ns)
            self.lows[partition].append(low[partition])

    def at(self, partition: int, ns: int) -> int:
        """The first offset of the partition not processed before `ns`."""
        i = bisect.bisect_left(self.times[partition], ns)
        return self.lows[partition][i - 1] if i else 0


def produce_numbered(broker: BrokerProcess, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                         "enable.idempotence": True})
    for i in range(count):
        producer.produce(topic, value=str(i).encode(), partition=i % PARTITIONS)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def test_at_least_once_with_consumers_killed_at_random_moments(
        broker: BrokerProcess, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    topic = group = "at-least-once"
    create_topic(broker, topic, PARTITIONS)
    produce_numbered(broker, topic, RECORDS)
    end = RECORDS // PARTITIONS
    tps = [(topic, p) for p in range(PARTITIONS)]
    observer = GroupWire(broker.port)
    journals: list[Path] = []
    workers: list[Worker] = []
    killed: list[Worker] = []

    def start(library: str) -> None:
        journal = tmp_path / f"worker-{len(journals)}-{library}.journal"
        journals.append(journal)
        workers.append(Worker(library, broker, topic, group, journal))

    # The kills: after this many records were processed (duplicates included), a seeded
    # choice of the live workers dies, and a worker of a seeded library replaces it.
    kill_points = sorted(rng.sample(range(RECORDS // 10, RECORDS * 7 // 10), KILLS))
    samples: list[tuple[int, dict[tuple[str, int], int]]] = []
    for library in LIBRARIES:
        start(library)
    deadline = time.monotonic() + 50
    try:
        while True:
            committed = observer.committed(group, tps)
            samples.append((time.monotonic_ns(), committed))  # answered before this stamp
            if all(committed[tp] >= end for tp in tps):
                break  # past the end would be wrong: the checks below say why
            assert time.monotonic() < deadline, f"stuck at {committed}"
            if kill_points and len(Journals.read(journals).processed) >= kill_points[0]:
                kill_points.pop(0)
                victim = rng.choice(workers)
                assert victim.process.poll() is None, f"{victim.library} worker died"
                victim.kill()
                workers.remove(victim)
                killed.append(victim)
                start(rng.choice(LIBRARIES))
            time.sleep(0.05)
        for w in workers:  # the survivors never failed on their own
            assert w.process.poll() is None, f"{w.library} worker exited"
    finally:
        for w in workers:
            w.kill()
        observer.close()
    assert len(killed) == KILLS
    final = samples[-1][1]

    merged = Journals.read(journals)
    prefix = ProcessedPrefix(merged.processed)
    # Every record was processed, with the value the producer gave it.
    for _, partition, offset, value in merged.processed:
        assert value == offset * PARTITIONS + partition
    values = {v for _, _, _, v in merged.processed}
    assert values == set(range(RECORDS))
    # Every commit any worker sent came after all the records below it.
    for ns, partition, offset in merged.commits:
        assert offset <= prefix.at(partition, ns), (partition, offset)
    # And so did every committed offset the broker reported, at each sample.
    intents = {(p, o) for _, p, o in merged.commits}
    for ns, committed in samples:
        for (_, partition), offset in committed.items():
            if offset >= 0:
                assert (partition, offset) in intents
                assert offset <= prefix.at(partition, ns), (partition, offset, ns)
    assert final == dict.fromkeys(tps, end)
    redelivered = len(merged.processed) - RECORDS
    print(f"{len(merged.processed)} records processed ({redelivered} again), "
          f"{merged.acknowledged} commits acknowledged, {merged.failed} refused, "
          f"{len(samples)} samples; killed {[w.library for w in killed]}")
