"""One consumer of test_groups_delivery.py's at-least-once test, in a process of its own so
that the test can SIGKILL it at any moment.

    python delivery_worker.py LIBRARY BOOTSTRAP TOPIC GROUP JOURNAL [key=value ...]

LIBRARY is confluent-kafka, kafka-python or aiokafka. The worker consumes TOPIC in GROUP
(range assignor, manual commits, auto.offset.reset=earliest): it "processes" each record
(a short pause), records it in JOURNAL, and after each batch commits the offsets that
follow the batch's records, synchronously, before it polls again. JOURNAL is this
worker's own file; each line is stamped with CLOCK_MONOTONIC, which every process on the
machine shares, so the test can order the lines of all workers:

    P <ns> <partition> <offset> <value>   the record was processed
    C <ns> <partition> <offset>           about to commit this offset (after its records)
    A <ns> <partition> <offset>           the commit was acknowledged
    F <ns> <partition> <offset>           the commit failed (a rebalance, a fenced member)

Each line is a single os.write on an O_APPEND descriptor: once written, it is in the
kernel and survives a SIGKILL of the process; at most an unterminated last line is lost.
Options: session_ms (default 1500), batch (records per poll, 20), pace_ms (processing
time per record, 3).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Iterable


class Journal:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, kind: str, *fields: object) -> None:
        line = " ".join([kind, str(time.monotonic_ns()), *map(str, fields)]) + "\n"
        os.write(self.fd, line.encode())

    def processed(self, partition: int, offset: int, value: bytes) -> None:
        self.write("P", partition, offset, value.decode())

    def commits(self, kind: str, offsets: dict[int, int]) -> None:
        for partition, offset in sorted(offsets.items()):
            self.write(kind, partition, offset)


def next_offsets(records: Iterable[tuple[int, int]]) -> dict[int, int]:
    """The offset after the last record of each partition."""
    out: dict[int, int] = {}
    for partition, offset in records:
        out[partition] = max(out.get(partition, 0), offset + 1)
    return out


def run_confluent(bootstrap: str, topic: str, group: str, journal: Journal,
                  opts: dict[str, int]) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "session.timeout.ms": opts["session_ms"],
        "heartbeat.interval.ms": 250, "partition.assignment.strategy": "range"})
    consumer.subscribe([topic])
    while True:
        batch = []
        for msg in consumer.consume(num_messages=opts["batch"], timeout=0.2):
            if msg.error() is not None:
                continue
            time.sleep(opts["pace_ms"] / 1000)
            journal.processed(msg.partition(), msg.offset(), msg.value())
            batch.append((msg.partition(), msg.offset()))
        if not batch:
            continue
        offsets = next_offsets(batch)
        journal.commits("C", offsets)
        try:
            consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()],
                            asynchronous=False)
        except KafkaException:
            journal.commits("F", offsets)
        else:
            journal.commits("A", offsets)


def run_kafka_python(bootstrap: str, topic: str, group: str, journal: Journal,
                     opts: dict[str, int]) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.errors import KafkaError
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
        auto_offset_reset="earliest", session_timeout_ms=opts["session_ms"],
        heartbeat_interval_ms=250, partition_assignment_strategy=[RangePartitionAssignor])
    consumer.subscribe([topic])
    while True:
        batch = []
        for records in consumer.poll(timeout_ms=200, max_records=opts["batch"]).values():
            for r in records:
                time.sleep(opts["pace_ms"] / 1000)
                journal.processed(r.partition, r.offset, r.value)
                batch.append((r.partition, r.offset))
        if not batch:
            continue
        offsets = next_offsets(batch)
        journal.commits("C", offsets)
        try:
            consumer.commit({TopicPartition(topic, p): OffsetAndMetadata(o, "", -1)
                             for p, o in offsets.items()}, timeout_ms=5000)
        except KafkaError:
            journal.commits("F", offsets)
        else:
            journal.commits("A", offsets)


def run_aiokafka(bootstrap: str, topic: str, group: str, journal: Journal,
                 opts: dict[str, int]) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.errors import KafkaError

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
            auto_offset_reset="earliest", session_timeout_ms=opts["session_ms"],
            heartbeat_interval_ms=250, partition_assignment_strategy=(RangePartitionAssignor,))
        await consumer.start()
        while True:
            batch = []
            got = await consumer.getmany(timeout_ms=200, max_records=opts["batch"])
            for records in got.values():
                for r in records:
                    await asyncio.sleep(opts["pace_ms"] / 1000)
                    journal.processed(r.partition, r.offset, r.value)
                    batch.append((r.partition, r.offset))
            if not batch:
                continue
            offsets = next_offsets(batch)
            journal.commits("C", offsets)
            try:
                await consumer.commit({TopicPartition(topic, p): o for p, o in offsets.items()})
            except KafkaError:
                journal.commits("F", offsets)
            else:
                journal.commits("A", offsets)

    asyncio.run(main())


RUNNERS = {"confluent-kafka": run_confluent, "kafka-python": run_kafka_python,
           "aiokafka": run_aiokafka}

if __name__ == "__main__":
    library, bootstrap, topic, group, path, *rest = sys.argv[1:]
    options = {"session_ms": 1500, "batch": 20, "pace_ms": 3}
    options.update({k: int(v) for k, v in (arg.split("=", 1) for arg in rest)})
    RUNNERS[library](bootstrap, topic, group, Journal(path), options)
