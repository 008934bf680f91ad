"""Transactions in a 3-broker cluster on ZooKeeper: the coordinator sends its markers to
leaders on other brokers (WriteTxnMarkers over the inter-broker client), and when the
coordinator's broker is killed mid-transaction, the new leader of its __transaction_state
partition takes the transaction over: it is decided, never half visible."""

from __future__ import annotations

import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from support.cluster import Cluster, wait_until

from odradek.coordinator.transaction.transaction_log import partition_for

TIMEOUT = 60


def read_committed(cluster: Cluster, topic: str, partitions: int, expect: int,
                   idle_polls: int = 15) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "reader",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    idle = 0
    try:
        while idle < idle_polls and len(out) < expect:
            messages = [m for m in consumer.consume(100, 0.5) if m.error() is None]
            idle = 0 if messages else idle + 1
            out += [m.value() for m in messages]
    finally:
        consumer.close()
    return sorted(out)


def producer(cluster: Cluster, transactional_id: str) -> Any:
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": transactional_id,
                  "linger.ms": 5})
    p.init_transactions(TIMEOUT)
    return p


def test_markers_reach_leaders_on_every_broker(cluster: Cluster) -> None:
    topic = "spread"
    admin = cluster.admin()  # kept: a destroyed client fails its futures
    admin.create_topics([NewTopic(topic, 6, 3)])[topic].result(TIMEOUT)
    wait_until(lambda: len(cluster.partitions(topic)) == 6, what="the topic's leaders")
    assert len({leader for leader, _, _ in cluster.partitions(topic).values()}) > 1
    p = producer(cluster, "spread-tid")
    p.begin_transaction()
    for i in range(60):
        p.produce(topic, value=b"aborted%d" % i, partition=i % 6)
    p.abort_transaction(TIMEOUT)
    p.begin_transaction()
    for i in range(60):
        p.produce(topic, value=b"committed%d" % i, partition=i % 6)
    p.commit_transaction(TIMEOUT)
    assert read_committed(cluster, topic, 6, 60) == sorted(b"committed%d" % i
                                                           for i in range(60))


def test_the_coordinators_broker_killed_mid_commit(cluster: Cluster) -> None:
    topic = "survives"
    admin = cluster.admin()
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(TIMEOUT)
    transactional_id = f"tid-{uuid.uuid4().hex[:6]}"
    p = producer(cluster, transactional_id)  # creates __transaction_state (RF 3)
    state_partition = partition_for(transactional_id, 50)
    coordinator = cluster.partitions("__transaction_state")[state_partition][0]
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, value=b"v%d" % i, partition=i % 3)
    p.flush(TIMEOUT)
    cluster.kill(coordinator)
    # librdkafka finds the new coordinator (a replica of the partition) and commits there.
    p.commit_transaction(TIMEOUT)
    assert read_committed(cluster, topic, 3, 30) == sorted(b"v%d" % i for i in range(30))
    successor = producer(cluster, transactional_id)
    successor.begin_transaction()
    successor.produce(topic, value=b"next", partition=0)
    successor.commit_transaction(TIMEOUT)
    assert read_committed(cluster, topic, 3, 31) == sorted(
        [b"v%d" % i for i in range(30)] + [b"next"])
