"""Replication across real broker processes coordinated by a real ZooKeeper: followers
copy the leaders' logs byte for byte, and committed offsets survive their coordinator."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer, TopicPartition
from support.cluster import WAIT, Cluster, wait_until
from support.replication import (
    FAILOVER_BUDGET,
    consume_all,
    create_topic,
    produce,
    replica_batches,
)


def test_three_brokers_replicate_acks_all(cluster: Cluster) -> None:
    create_topic(cluster, "events")
    acked = produce(cluster.bootstrap, "events", 3000)
    assert sum(len(v) for v in acked.values()) == 3000
    consumed = consume_all(cluster.bootstrap, "events", 3000)
    assert consumed == acked  # nothing lost, nothing twice, in production order
    # Every replica holds the same batches as its leader (the ISR is full: the leader's
    # high watermark is the log end everywhere).
    for p, (leader, replicas, isr) in cluster.partitions("events").items():
        assert sorted(isr) == sorted(replicas) == [1, 2, 3]
        expected = replica_batches(cluster, "events", p, leader)
        for follower in replicas:
            wait_until(lambda f=follower, p=p, e=expected:
                       replica_batches(cluster, "events", p, f) == e,
                       what=f"broker {follower}'s copy of events-{p}")


def test_committed_offsets_survive_the_coordinator(cluster: Cluster) -> None:
    create_topic(cluster, "events", partitions=3)
    produce(cluster.bootstrap, "events", 300)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "durable",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["events"])
    read = 0
    try:
        def some_read() -> bool:
            nonlocal read
            read += len(consumer.consume(50, timeout=0.5))
            return read >= 100

        wait_until(some_read, what="100 records consumed")
        committed = consumer.commit(asynchronous=False)
        admin = cluster.admin()
        group = admin.describe_consumer_groups(["durable"])["durable"].result(10)
        coordinator = group.coordinator.id
        cluster.kill(coordinator)  # at once: the commit must be on the other replicas
    finally:
        consumer.close()
    expected = {(tp.partition, tp.offset) for tp in committed}
    survivor = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "durable"})
    try:
        def recovered() -> bool:
            try:
                found = survivor.committed([TopicPartition("events", p) for p in range(3)],
                                           timeout=5)
            except Exception:  # the coordinator is moving
                return False
            last[:] = sorted((tp.partition, tp.offset, str(tp.error)) for tp in found)
            return {(tp.partition, tp.offset) for tp in found} == expected

        last: list[Any] = []
        try:
            wait_until(recovered, FAILOVER_BUDGET + WAIT, f"the commits {expected} read back")
        except AssertionError:
            raise AssertionError(f"{last}\n{cluster.logs()}") from None
    finally:
        survivor.close()
