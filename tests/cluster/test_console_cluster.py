"""The web console of a 3-broker cluster on ZooKeeper: every broker's console shows the
whole cluster, not only what it holds. A topic's partitions are led by the three brokers
and a consumer group is coordinated by another broker than 1: every console shows the same
topics with each partition's size, the same group with the same lag, and browses records
from partitions the others lead. When a broker is killed (SIGKILL), the others' consoles
keep answering at once (no wait on the dead broker) and show the under-replicated and
offline partitions it left."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic
from support.cluster import Cluster, running
from support.console import decoded, get
from support.replication import produce
from support.wait import wait_until

from odradek.cluster.zookeeper_server import ZooKeeperServer
from odradek.coordinator.group.offsets_topic import partition_for

TIMEOUT = 30.0
TOPIC = "spread"
ASSIGNMENT = [[1, 2], [2, 3], [3, 1]]  # partition p led by broker p + 1
SOLO = "solo"  # one partition, one replica: on the broker that is killed
PER_PARTITION = 10
COMMITTED = {0: 2, 1: 5, 2: 10}  # lags 8, 5 and 0
OFFSETS_PARTITIONS = 3
ANSWER_BOUND = 5.0  # seconds: a console answers within this with a broker dead


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperServer
            ) -> Iterator[Cluster]:
    """One cluster for the module, in a chroot of its own."""
    connect = f"{zookeeper.connect_string}/console-cluster-{uuid.uuid4().hex[:8]}"
    yield from running(Cluster(tmp_path_factory.mktemp("console-cluster"), connect, brokers=3,
                               settings={
                                   "http.listeners": "http://127.0.0.1:0",
                                   "http.console.history.interval.ms": "300",
                                   "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
                                   "offsets.topic.replication.factor": "3",
                                   "group.initial.rebalance.delay.ms": "0",
                                   "auto.create.topics.enable": "false"}))


def http_port(cluster: Cluster, broker_id: int) -> int:
    port = cluster.brokers[broker_id].http_port
    assert port is not None, f"broker {broker_id} logged no HTTP listener"
    return port


def on_each(cluster: Cluster, path: str, timeout: float = TIMEOUT) -> dict[int, Any]:
    return {b: get(http_port(cluster, b), path, timeout) for b in cluster.live()}


@pytest.fixture(scope="module")
def setup(cluster: Cluster) -> Iterator[dict[str, Any]]:
    """TOPIC with records in every partition, SOLO on the broker to kill, and a group
    coordinated by broker 2 or 3 with COMMITTED committed."""
    admin = cluster.admin()
    # The group coordinator: the leader of the group's __consumer_offsets partition, which
    # the first FindCoordinator creates.
    with contextlib.suppress(KafkaException):  # e.g. NOT_COORDINATOR while it is made
        admin.describe_consumer_groups(["probe"])["probe"].result(TIMEOUT)

    def offsets_leaders() -> dict[int, int] | None:
        shown = cluster.partitions("__consumer_offsets")
        ready = len(shown) == OFFSETS_PARTITIONS and all(
            leader > 0 and len(isr) == 3 for leader, _, isr in shown.values())
        return {p: leader for p, (leader, _, _) in shown.items()} if ready else None
    leaders = wait_until(offsets_leaders, TIMEOUT, "__consumer_offsets led, full ISRs")
    group = next(g for g in (f"readers-{i}" for i in range(100))
                 if leaders[partition_for(g, OFFSETS_PARTITIONS)] != 1)
    coordinator = leaders[partition_for(group, OFFSETS_PARTITIONS)]
    victim = 5 - coordinator  # the other of brokers 2 and 3

    futures = admin.create_topics([NewTopic(TOPIC, len(ASSIGNMENT), replica_assignment=ASSIGNMENT),
                                   NewTopic(SOLO, 1, replica_assignment=[[victim]])])
    for future in futures.values():
        future.result(TIMEOUT)

    def ready() -> bool:
        return all(len(cluster.partitions(TOPIC, b)) == 3 and all(
            len(isr) == 2 for _, _, isr in cluster.partitions(TOPIC, b).values())
            and len(cluster.partitions(SOLO, b)) == 1 for b in cluster.live())
    wait_until(ready, TIMEOUT, "the topics on every broker with full ISRs")
    assert {p: leader for p, (leader, _, _) in cluster.partitions(TOPIC).items()} == {
        0: 1, 1: 2, 2: 3}
    acked = produce(cluster.bootstrap, TOPIC, 3 * PER_PARTITION * 4)  # spread by key
    produce(cluster.bootstrap, SOLO, 5)

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])

    def assigned() -> bool:
        consumer.poll(0.2)
        return len(consumer.assignment()) == 3
    wait_until(assigned, TIMEOUT, f"{group}'s assignment", interval=0)
    consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in COMMITTED.items()],
                    asynchronous=False)
    yield {"group": group, "coordinator": coordinator, "victim": victim,
           "ends": {p: len(values) for p, values in acked.items()},
           "consumer": consumer, "admin": admin}
    consumer.close()


def test_every_console_shows_the_whole_cluster(cluster: Cluster, setup: dict[str, Any]
                                               ) -> None:
    clusters = on_each(cluster, "/api/cluster")
    assert {b: c["broker_id"] for b, c in clusters.items()} == {1: 1, 2: 2, 3: 3}
    common = [{k: v for k, v in c.items() if k != "broker_id"} for c in clusters.values()]
    assert common[0] == common[1] == common[2]
    assert [b["id"] for b in common[0]["brokers"]] == [1, 2, 3]
    assert common[0]["mode"] == "zookeeper"
    assert common[0]["controller_id"] in (1, 2, 3)
    assert (common[0]["under_replicated"], common[0]["offline"]) == (0, 0)
    assert common[0]["groups"] == 1  # every broker's groups, not only its own

    ends = setup["ends"]
    assert sorted(ends) == [0, 1, 2] and all(ends.values())
    rows = {b: next(t for t in body["topics"] if t["name"] == TOPIC)
            for b, body in on_each(cluster, "/api/topics").items()}
    assert rows[1] == rows[2] == rows[3]
    assert rows[1]["messages"] == sum(ends.values())
    assert rows[1]["replication_factor"] == 2 and rows[1]["size_bytes"] > 0

    topics = on_each(cluster, f"/api/topics/{TOPIC}")
    for broker_id, topic in topics.items():
        partitions = topic["partitions"]
        assert [(p["leader"], p["replicas"], p["high_watermark"]) for p in partitions] == [
            (p + 1, ASSIGNMENT[p], ends[p]) for p in range(3)], broker_id
        assert all(p["size_bytes"] and p["size_bytes"] > 0 for p in partitions), partitions
        # Segments are counted where the leader is: this broker's own partition.
        assert [p["segments"] is not None for p in partitions] == [
            p + 1 == broker_id for p in range(3)]
    sizes = {b: [p["size_bytes"] for p in t["partitions"]] for b, t in topics.items()}
    assert sizes[1] == sizes[2] == sizes[3]
    assert sum(sizes[1]) == rows[1]["size_bytes"]


def test_every_console_browses_every_leaders_records(cluster: Cluster,
                                                     setup: dict[str, Any]) -> None:
    total = sum(setup["ends"].values())
    browsed = {b: [decoded(r) for r in body["records"]] for b, body in on_each(
        cluster, f"/api/topics/{TOPIC}/messages?mode=offset&offset=0&limit=500").items()}
    assert browsed[1] == browsed[2] == browsed[3]
    by_partition: dict[int, list[tuple[Any, ...]]] = {}
    for r in browsed[1]:
        by_partition.setdefault(r[0], []).append(r)
    assert {p: [r[1] for r in rs] for p, rs in by_partition.items()} == {
        p: list(range(n)) for p, n in setup["ends"].items()}
    assert len(browsed[1]) == total
    assert all(r[4] == b"value-" + r[3] for r in browsed[1])  # support.replication's records
    for broker_id in cluster.live():
        for p in range(3):
            newest = get(http_port(cluster, broker_id),
                         f"/api/topics/{TOPIC}/messages?partition={p}&limit=3")["records"]
            assert [r["offset"] for r in newest] == [setup["ends"][p] - n for n in (3, 2, 1)]


def test_every_console_shows_the_group_and_its_lag(cluster: Cluster,
                                                   setup: dict[str, Any]) -> None:
    group, coordinator, ends = setup["group"], setup["coordinator"], setup["ends"]
    lags = {p: ends[p] - COMMITTED[p] for p in range(3)}
    for broker_id, body in on_each(cluster, "/api/groups").items():
        assert body["groups"] == [{"group_id": group, "state": "Stable",
                                   "protocol_type": "consumer", "members": 1,
                                   "coordinator": coordinator, "lag": sum(lags.values()),
                                   "topics": [TOPIC]}], broker_id
    described = on_each(cluster, f"/api/groups/{group}")
    assert described[1] == described[2] == described[3]
    assert described[1]["coordinator"] == coordinator != 1
    assert [(o["partition"], o["committed"], o["high_watermark"], o["lag"])
            for o in described[1]["offsets"]] == [
        (p, COMMITTED[p], ends[p], lags[p]) for p in range(3)]
    # The lag's history: kept by the coordinator only.
    wait_until(lambda: sum(lags.values()) in get(http_port(cluster, coordinator),
                                                  f"/api/history/groups/{group}")["lag"],
               TIMEOUT, "the group's lag in its coordinator's history", interval=0.3)
    for broker_id in set(cluster.live()) - {coordinator}:
        assert get(http_port(cluster, broker_id), f"/api/history/groups/{group}")["lag"] == []


def timed(port: int, path: str) -> tuple[float, Any]:
    started = time.monotonic()
    body = get(port, path, timeout=ANSWER_BOUND)
    return time.monotonic() - started, body


def test_a_killed_broker_costs_the_others_consoles_no_wait(cluster: Cluster,
                                                           setup: dict[str, Any]) -> None:
    victim, group = setup["victim"], setup["group"]
    metadata = setup["admin"].list_topics(timeout=TIMEOUT)
    # What the victim leaves: short ISRs where it was one of several replicas, no replica
    # at all where it was the only one.
    replicas = [list(p.replicas) for t in metadata.topics.values()
                for p in t.partitions.values()]
    short = sum(1 for r in replicas if victim in r and len(r) > 1)
    gone = sum(1 for r in replicas if r == [victim])
    assert (short, gone) == (2 + OFFSETS_PARTITIONS, 1)

    cluster.kill(victim)
    survivors = cluster.live()
    assert len(survivors) == 2
    paths = ["/api/cluster", "/api/topics", f"/api/topics/{TOPIC}", f"/api/topics/{SOLO}",
             f"/api/topics/{TOPIC}/messages?limit=50", f"/api/topics/{SOLO}/messages",
             "/api/groups", f"/api/groups/{group}", "/api/history"]
    # At once (the dead broker still in the metadata), and after the cluster saw it go.
    for broker_id in survivors:
        for path in paths:
            took, _ = timed(http_port(cluster, broker_id), path)
            assert took < ANSWER_BOUND, (broker_id, path, took)

    def health(broker_id: int) -> tuple[int, int]:
        shown = get(http_port(cluster, broker_id), "/api/cluster", ANSWER_BOUND)
        return shown["under_replicated"], shown["offline"]
    for broker_id in survivors:
        wait_until(lambda b=broker_id: health(b) == (short, gone), 45,
                   f"broker {broker_id}'s console to show {short} under-replicated and "
                   f"{gone} offline partitions")
    for broker_id in survivors:
        port = http_port(cluster, broker_id)
        for path in paths:
            took, _ = timed(port, path)
            assert took < ANSWER_BOUND, (broker_id, path, took)
        shown = get(port, "/api/cluster")
        assert [b["id"] for b in shown["brokers"]] == survivors
        partitions = get(port, f"/api/topics/{TOPIC}")["partitions"]
        assert [p["under_replicated"] for p in partitions] == [
            victim in ASSIGNMENT[p] for p in range(3)]
        assert not any(p["offline"] for p in partitions)
        assert all(p["leader"] in survivors for p in partitions)
        assert all(p["high_watermark"] == setup["ends"][p["partition"]] for p in partitions)
        solo = get(port, f"/api/topics/{SOLO}")["partitions"]
        assert [(p["leader"], p["offline"]) for p in solo] == [(-1, True)]
        row = next(t for t in get(port, "/api/topics")["topics"] if t["name"] == SOLO)
        assert (row["offline"], row["size_bytes"], row["messages"]) == (1, None, None)
        # The survivors' records are still browsed; the group still shows its lag.
        records = get(port, f"/api/topics/{TOPIC}/messages?mode=offset&offset=0&limit=500")
        assert len(records["records"]) == sum(setup["ends"].values())
        lag = sum(setup["ends"][p] - COMMITTED[p] for p in range(3))
        assert get(port, f"/api/groups/{group}")["lag"] == lag

