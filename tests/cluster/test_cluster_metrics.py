"""/metrics of a 3-broker cluster on ZooKeeper: UnderReplicatedPartitions counts the
partitions a killed follower leaves short, and goes back to 0 once it has caught up;
one active controller in the cluster; no offline partition while a leader survives."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic
from prometheus_client.parser import text_string_to_metric_families
from support.cluster import Cluster, running
from support.replication import produce
from support.wait import wait_until

TOPIC = "watched"
# Broker 3 follows both partitions and leads none: killing it leaves the leaders (1 and
# 2) one under-replicated partition each.
ASSIGNMENT = [[1, 2, 3], [2, 1, 3]]
FOLLOWER = 3
BOUND = 60.0  # seconds: a session timeout (6 s) and the catching up fit well within


@pytest.fixture
def http_cluster(tmp_path: Path, connect: str) -> Iterator[Cluster]:
    yield from running(Cluster(tmp_path, connect, brokers=3,
                               settings={"http.listeners": "http://127.0.0.1:0"}))


def gauge(cluster: Cluster, broker_id: int, name: str) -> float:
    port = cluster.brokers[broker_id].http_port
    assert port is not None, "the broker logged no HTTP listener"
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and not sample.labels:
                return sample.value
    raise AssertionError(f"{name} not in broker {broker_id}'s metrics")


def urp(cluster: Cluster) -> dict[int, float]:
    return {b: gauge(cluster, b, "kafka_server_replicamanager_underreplicatedpartitions")
            for b in cluster.live()}


def test_under_replicated_partitions_follow_a_killed_follower(http_cluster: Cluster) -> None:
    cluster = http_cluster
    admin = cluster.admin()
    new = NewTopic(TOPIC, len(ASSIGNMENT), replica_assignment=ASSIGNMENT)
    admin.create_topics([new])[TOPIC].result(30)
    produce(cluster.bootstrap, TOPIC, 20)
    wait_until(lambda: urp(cluster) == {1: 0, 2: 0, 3: 0}, BOUND, "full ISRs")
    active = "kafka_controller_kafkacontroller_activecontrollercount"
    assert sum(gauge(cluster, b, active) for b in cluster.live()) == 1
    expands_before = sum(gauge(cluster, b, "kafka_server_replicamanager_isrexpands_total")
                         for b in cluster.live())

    cluster.kill(FOLLOWER)
    wait_until(lambda: urp(cluster) == {1: 1, 2: 1}, BOUND,
               "one under-replicated partition on each leader")
    offline = "kafka_controller_kafkacontroller_offlinepartitionscount"
    assert sum(gauge(cluster, b, offline) for b in cluster.live()) == 0
    produce(cluster.bootstrap, TOPIC, 20)  # the follower has something to catch up

    cluster.brokers[FOLLOWER].start()
    wait_until(lambda: urp(cluster) == {1: 0, 2: 0, 3: 0}, BOUND,
               "the returned follower back in both ISRs")
    expands = sum(gauge(cluster, b, "kafka_server_replicamanager_isrexpands_total")
                  for b in cluster.live())
    assert expands - expands_before >= 2  # each leader took it back in (AlterPartition)
    # What the followers fetched (the returned one caught up on 20 records, at least).
    fetched = sum(gauge(cluster, b, "kafka_server_brokertopicmetrics_replicationbytesin_total")
                  for b in cluster.live())
    sent = sum(gauge(cluster, b, "kafka_server_brokertopicmetrics_replicationbytesout_total")
               for b in cluster.live())
    assert fetched > 0 and sent > 0
    assert sum(gauge(cluster, b, active) for b in cluster.live()) == 1
