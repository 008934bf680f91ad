"""Replication checks for the cluster tests: topics made ready on every broker, producers
that remember what was acknowledged, consumers that read it back, and the check that no
acknowledged write was lost."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from odradek.protocol.records import iter_batch_headers
from support.cluster import WAIT, Cluster, wait_until


def create_topic(cluster: Cluster, name: str, partitions: int = 3, rf: int = 3,
                 config: dict[str, str] | None = None) -> None:
    admin = cluster.admin()  # kept alive until the answer: destroying it fails the futures
    futures = admin.create_topics(
        [NewTopic(name, partitions, rf, config=config or {})], operation_timeout=20)
    futures[name].result(30)

    def ready() -> bool:
        for broker_id in cluster.live():
            shown = cluster.partitions(name, broker_id)
            if len(shown) != partitions or any(
                    leader < 0 or len(isr) != rf for leader, _, isr in shown.values()):
                return False
        return True

    wait_until(ready, what=f"{name} with leaders and full ISRs on every broker")


def produce(bootstrap: str, topic: str, count: int, **settings: str) -> dict[int, list[bytes]]:
    """Produces `count` records with acks=all; returns the acknowledged values by
    partition, in offset order."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5, **settings})
    acked: dict[int, list[tuple[int, bytes]]] = {}
    errors = []

    def delivered(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(err)
        else:
            acked.setdefault(msg.partition(), []).append((msg.offset(), msg.value()))

    for i in range(count):
        producer.produce(topic, f"value-{i}".encode(), key=str(i).encode(),
                         on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors
    return {p: [v for _, v in sorted(records)] for p, records in acked.items()}


def consume_all(bootstrap: str, topic: str, expected: int) -> dict[int, list[bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "checker",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: dict[int, list[bytes]] = {}
    try:
        def all_read() -> bool:
            for msg in consumer.consume(500, timeout=0.5):
                assert msg.error() is None, msg.error()
                got.setdefault(msg.partition(), []).append(msg.value())
            return sum(len(v) for v in got.values()) >= expected

        wait_until(all_read, 60, f"{expected} records consumed")
    finally:
        consumer.close()
    return got


def replica_batches(cluster: Cluster, topic: str, partition: int, broker_id: int
                    ) -> list[tuple[int, int, bytes]]:
    """(base offset, leader epoch, bytes) of each batch in a broker's copy, read from its
    segment files as they are (a partial batch being written is left out)."""
    directory = cluster.brokers[broker_id].data_dir / f"{topic}-{partition}"
    batches = []
    for segment in sorted(directory.glob("*.log")):
        data = segment.read_bytes()
        for pos, header in iter_batch_headers(data, allow_partial=True):
            batches.append((header.base_offset, header.partition_leader_epoch,
                            data[pos:pos + header.size_in_bytes]))
    return batches


FAILOVER_BUDGET = 6.0 + 2.0 + 4.0  # zookeeper.session.timeout.ms + 2 s, + the client's backoffs


class SteadyProducer:
    """An idempotent acks=all producer writing numbered records from a thread until
    stopped; remembers each acknowledged record's offset and the longest time without
    an acknowledgement (how long the producers stalled in a failover)."""

    def __init__(self, bootstrap: str, topic: str, **settings: str) -> None:
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "enable.idempotence": True, "linger.ms": 5, **settings})
        self.acked: dict[int, list[tuple[int | None, bytes]]] = {}
        self.errors: list[Any] = []
        self.longest_stall = 0.0
        self._last_ack = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(err)
            return
        now = time.monotonic()
        self.longest_stall = max(self.longest_stall, now - self._last_ack)
        self._last_ack = now
        self.acked.setdefault(msg.partition(), []).append((msg.offset(), msg.value()))

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                self.producer.produce(self.topic, f"value-{i}".encode(), key=str(i).encode(),
                                      on_delivery=self._delivered)
                i += 1
            except BufferError:  # the queue is full while a leader moves: wait for it
                pass
            self.producer.poll(0.002)

    def start(self) -> SteadyProducer:
        self._thread.start()
        return self

    def wait_for_acks(self, more: int, timeout: float = WAIT) -> None:
        target = self.count + more
        wait_until(lambda: self.count >= target, timeout, f"{target} acknowledged records")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        assert self.producer.flush(60) == 0, "records left unacknowledged"


def consume_with_offsets(bootstrap: str, topic: str, partitions: Iterable[int]
                         ) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of the partitions of `topic` up to their high watermarks: (offset,
    value) by partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "verifier",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})

    def high_watermark(p: int) -> tuple[int] | None:
        # A broker back from a fault may answer Metadata before the controller's
        # UpdateMetadata reaches it (as Kafka's may): unknown partition for a moment.
        try:
            return (consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1],)
        except KafkaException as e:
            if e.args[0].code() != KafkaError._UNKNOWN_PARTITION:
                raise
            return None

    end_offsets = {p: wait_until(lambda p=p: high_watermark(p), 30, f"{topic}-{p}'s HW")[0]
                   for p in partitions}
    consumer.assign([TopicPartition(topic, p, 0) for p in end_offsets])
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in end_offsets}
    try:
        def all_read() -> bool:
            for msg in consumer.consume(1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                got[msg.partition()].append((msg.offset(), msg.value()))
            return all(got[p] and got[p][-1][0] >= end - 1 for p, end in end_offsets.items())

        wait_until(all_read, 60, f"{topic} read up to {end_offsets}")
    finally:
        consumer.close()
    return got


def check_no_acknowledged_write_lost(cluster: Cluster, topic: str,
                                     producer: SteadyProducer) -> None:
    """Every acknowledged record is at its offset, none twice, in production order, and
    every replica's log is the leader's."""
    assert not producer.errors, producer.errors[:5]
    shown = wait_until(lambda: agreed_full_isr(cluster, topic),
                       what=f"{topic} with full ISRs in every live broker's metadata")
    consumed = consume_with_offsets(cluster.bootstrap, topic, producer.acked)
    for p, acked in producer.acked.items():
        at = dict(consumed[p])
        values = [v for _, v in consumed[p]]
        # librdkafka acknowledges without an offset the batches whose answer was lost
        # with a dead leader when a later batch of the same producer succeeds.
        missing = [(o, v) for o, v in acked
                   if (at.get(o) != v if o is not None else v not in values)]
        assert not missing, f"partition {p}: {len(missing)} acknowledged records missing, " \
            f"first {missing[:3]}"
        assert len(values) == len(set(values)), f"partition {p}: a record appears twice"
        numbers = [int(v.split(b"-")[1]) for v in values]
        assert numbers == sorted(numbers), f"partition {p}: out of production order"
    for p, (leader, replicas, _) in shown.items():
        expected = replica_batches(cluster, topic, p, leader)
        for follower in replicas:
            wait_until(lambda f=follower, p=p, e=expected:
                       replica_batches(cluster, topic, p, f) == e,
                       what=f"broker {follower}'s copy of {topic}-{p} equal to the leader's")


def full_isr(cluster: Cluster, topic: str, broker_id: int | None = None
             ) -> dict[int, tuple[int, list[int], list[int]]]:
    shown = cluster.partitions(topic, broker_id)
    if shown and all(leader >= 0 and sorted(isr) == sorted(replicas)
                     for leader, replicas, isr in shown.values()):
        return shown
    return {}


def agreed_full_isr(cluster: Cluster, topic: str
                    ) -> dict[int, tuple[int, list[int], list[int]]]:
    """full_isr, as every live broker shows it: one broker back from a fault may still
    show the leaders and ISRs from before it, until the controller's UpdateMetadata."""
    try:
        views = [full_isr(cluster, topic, b) for b in cluster.live()]
    except KafkaException:  # a broker not answering yet
        return {}
    return views[0] if views and all(v == views[0] for v in views) else {}


def controller_id(cluster: Cluster) -> int:
    return cluster.admin().list_topics(timeout=5).controller_id
