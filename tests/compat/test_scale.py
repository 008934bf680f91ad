"""Scale: one topic of 1,000 partitions, 50 producers and 50 consumers at once, against
one broker process. Every record arrives exactly once."""

from __future__ import annotations

import threading
import time
from collections import Counter

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerProcess

PARTITIONS = 1000
CLIENTS = 50
RECORDS_PER_PRODUCER = 400


def test_thousand_partitions_fifty_producers_fifty_consumers(
        fresh_broker: BrokerProcess) -> None:
    bootstrap = fresh_broker.bootstrap
    topic = "wide"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(60)
    assert len(admin.list_topics(topic, timeout=30).topics[topic].partitions) == PARTITIONS

    produced: Counter[int] = Counter()  # records per partition, from delivery reports
    consumed: list[bytes] = []
    lock = threading.Lock()
    producers_done = threading.Event()
    errors: list[object] = []

    def produce(n: int) -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                             "enable.idempotence": True, "partitioner": "murmur2_random"})

        def report(err, msg):  # type: ignore[no-untyped-def]
            with lock:
                if err is not None:
                    errors.append(err)
                else:
                    produced[msg.partition()] += 1

        for i in range(RECORDS_PER_PRODUCER):
            producer.produce(topic, key=f"{n}-{i}".encode(), value=f"{n}-{i}".encode(),
                             on_delivery=report)
            producer.poll(0)
        producer.flush(120)

    def consume(n: int) -> None:
        mine = [p for p in range(PARTITIONS) if p % CLIENTS == n]
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                             "enable.auto.commit": False, "fetch.wait.max.ms": 100})
        consumer.assign([TopicPartition(topic, p, 0) for p in mine])
        got: list[bytes] = []
        deadline = time.monotonic() + 180
        try:
            while time.monotonic() < deadline:
                if producers_done.is_set() and len(got) >= sum(produced[p] for p in mine):
                    break
                for msg in consumer.consume(500, 0.2):
                    if msg.error():
                        errors.append(msg.error())
                    else:
                        got.append(msg.value())
        finally:
            consumer.close()
        with lock:
            consumed.extend(got)

    consumers = [threading.Thread(target=consume, args=(n,)) for n in range(CLIENTS)]
    producers = [threading.Thread(target=produce, args=(n,)) for n in range(CLIENTS)]
    for t in consumers + producers:
        t.start()
    for t in producers:
        t.join(240)
    producers_done.set()
    for t in consumers:
        t.join(240)
    assert not errors, errors[:5]
    assert sum(produced.values()) == CLIENTS * RECORDS_PER_PRODUCER
    assert len(consumed) == CLIENTS * RECORDS_PER_PRODUCER
    assert len(set(consumed)) == len(consumed)  # no record twice
