"""Cluster operations through the admin APIs, on real broker processes: partitions and
configs changed through any broker, leader elections, partition reassignment."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from confluent_kafka import ElectionType, KafkaError, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions
from support.cluster import WAIT, Cluster, wait_until
from support.replication import (
    consume_all,
    controller_id,
    create_topic,
    full_isr,
    produce,
    replica_batches,
)

from odradek.broker.inter_broker_client import InterBrokerClient
from odradek.protocol.messages import incremental_alter_configs_request as iac

BROKER_RESOURCE = 4  # ConfigResource type


def test_create_partitions_and_topic_configs_reach_every_broker(
        shared_cluster: Cluster) -> None:
    cluster = shared_cluster
    create_topic(cluster, "grow", partitions=2)
    admin = cluster.admin(1)
    admin.create_partitions([NewPartitions("grow", 4)])["grow"].result(30)
    wait_until(lambda: full_isr(cluster, "grow").keys() == {0, 1, 2, 3}
               and all(len(cluster.partitions("grow", b)) == 4 for b in cluster.live()),
               what="4 partitions with leaders and full ISRs on every broker")
    acked = produce(cluster.bootstrap, "grow", 400)
    assert set(acked) == {0, 1, 2, 3}
    assert consume_all(cluster.bootstrap, "grow", 400) == acked

    resource = ConfigResource("topic", "grow", incremental_configs=[
        ConfigEntry("retention.ms", "3600000",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)

    def retention_on(broker_id: int) -> str:
        other = cluster.admin(broker_id)  # kept alive until the answer
        described = other.describe_configs([ConfigResource("topic", "grow")])
        return next(iter(described.values())).result(10)["retention.ms"].value

    for broker_id in cluster.live():
        wait_until(lambda b=broker_id: retention_on(b) == "3600000",
                   what=f"broker {broker_id} seeing the new retention.ms")


def preferred_lead(cluster: Cluster, topic: str) -> bool:
    shown = full_isr(cluster, topic)
    return bool(shown) and all(leader == replicas[0] for leader, replicas, _ in shown.values())


def test_elect_leaders_moves_leadership_back_to_preferred_replicas(cluster: Cluster) -> None:
    create_topic(cluster, "spread", partitions=3)
    assert preferred_lead(cluster, "spread")  # new topics start with their preferred leaders
    cluster.brokers[1].restart()  # a controlled shutdown moves its leaderships away
    wait_until(lambda: full_isr(cluster, "spread"), what="broker 1 back in every ISR")
    moved = [p for p, (leader, replicas, _) in cluster.partitions("spread").items()
             if leader != replicas[0]]
    assert moved, "broker 1 led nothing before its restart"
    admin = cluster.admin(controller_id(cluster))
    wanted = [TopicPartition("spread", p) for p in range(3)]
    results = admin.elect_leaders(ElectionType.PREFERRED, wanted).result(30)
    errors = {tp.partition: e for tp, e in results.items()}
    assert {p for p, e in errors.items() if e is None} == set(moved)
    assert all(e.code() == KafkaError.ELECTION_NOT_NEEDED
               for p, e in errors.items() if p not in moved)
    wait_until(lambda: preferred_lead(cluster, "spread"), what="preferred replicas leading")


def test_auto_leader_rebalance(tmp_path: Path, connect: str) -> None:
    c = Cluster(tmp_path, connect, brokers=3,
                settings={"leader.imbalance.check.interval.seconds": "1"}).start()
    try:
        create_topic(c, "spread", partitions=3)
        c.brokers[2].restart()
        wait_until(lambda: preferred_lead(c, "spread"), what="leadership back on broker 2")
        assert "leader imbalance" in c.logs()
    finally:
        for broker in c.brokers.values():
            broker.kill()
    assert "Traceback" not in c.logs(), c.logs()


def test_reassignment_copies_data_to_new_replicas_before_dropping_old_ones(
        shared_cluster: Cluster) -> None:
    cluster = shared_cluster
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.admin import KafkaAdminClient

    create_topic(cluster, "moving", partitions=1, rf=2)
    acked = produce(cluster.bootstrap, "moving", 500)
    leader, replicas, _ = cluster.partitions("moving")[0]
    newcomer = next(b for b in cluster.brokers if b not in replicas)
    target = [newcomer, leader]  # the old follower goes; the newcomer is preferred
    dropped = next(b for b in replicas if b != leader)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        tp = KafkaTopicPartition("moving", 0)
        assert admin.alter_partition_reassignments({tp: target}) == {tp: None}
        wait_until(lambda: not admin.list_partition_reassignments(), WAIT,
                   "the reassignment done")
    finally:
        admin.close()
    def moved() -> bool:
        _, replicas_now, isr = cluster.partitions("moving").get(0, (-1, [], []))
        return replicas_now == target and sorted(isr) == sorted(target)

    wait_until(moved, what=f"replicas and ISR {target}")
    # The newcomer holds the leader's batches; the dropped replica's log is gone.
    leader_now = cluster.partitions("moving")[0][0]
    assert leader_now in target
    wait_until(lambda: replica_batches(cluster, "moving", 0, newcomer)
               == replica_batches(cluster, "moving", 0, leader_now), what="the newcomer's copy")
    wait_until(lambda: not (cluster.brokers[dropped].data_dir / "moving-0").exists(),
               what=f"broker {dropped}'s replica deleted")
    assert consume_all(cluster.bootstrap, "moving", 500) == acked


def test_cluster_wide_broker_configs_reach_every_broker(shared_cluster: Cluster) -> None:
    cluster = shared_cluster
    # As kafka-configs.sh --entity-default sends it (the clients here refuse the empty
    # broker name of the cluster-wide entity): through broker 1 only.
    async def set_default() -> Any:
        host, port = cluster.brokers[1].bootstrap.split(":")
        client = InterBrokerClient({1: (host, int(port))})
        try:
            return await client.send(1, iac.IncrementalAlterConfigsRequest(resources=[
                iac.AlterConfigsResource(resource_type=BROKER_RESOURCE, resource_name="",
                                         configs=[iac.AlterableConfig(
                                             name="log.retention.ms", value="7200000")])]))
        finally:
            await client.close()

    response = asyncio.run(set_default())
    assert [r.error_code for r in response.responses] == [0]

    def retention_on(broker_id: int) -> str:
        other = cluster.admin(broker_id)  # kept alive until the answer
        described = other.describe_configs([ConfigResource("broker", str(broker_id))])
        return next(iter(described.values())).result(10)["log.retention.ms"].value

    for broker_id in cluster.live():
        wait_until(lambda b=broker_id: retention_on(b) == "7200000",
                   what=f"broker {broker_id} seeing the cluster-wide log.retention.ms")


def odradek(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "odradek", *args,
                           "--bootstrap-server", cluster.bootstrap, "--timeout", "20s"],
                          capture_output=True, text=True, timeout=60)


def test_partitions_command_reassigns_and_elects(shared_cluster: Cluster) -> None:
    cluster = shared_cluster
    create_topic(cluster, "moving-cli", partitions=1, rf=2)
    produce(cluster.bootstrap, "moving-cli", 100)
    _, replicas, _ = cluster.partitions("moving-cli")[0]
    newcomer = next(b for b in cluster.brokers if b not in replicas)
    target = [newcomer, *replicas]  # one more replica, the newcomer preferred
    started = odradek(cluster, "partitions", "reassign",
                      f"moving-cli:0={','.join(map(str, target))}", "--json")
    assert started.returncode == 0, started.stderr
    assert json.loads(started.stdout) == [{"topic": "moving-cli", "partition": 0,
                                           "replicas": target, "result": "started"}]
    wait_until(lambda: "no reassignment in progress" in odradek(
        cluster, "partitions", "reassignments").stdout, what="the reassignment done")
    wait_until(lambda: cluster.partitions("moving-cli")[0][1] == target
               and sorted(cluster.partitions("moving-cli")[0][2]) == sorted(target),
               what=f"replicas and ISR {target}")
    elected = odradek(cluster, "partitions", "elect-leaders", "moving-cli:0", "--json")
    assert elected.returncode == 0, elected.stderr
    assert json.loads(elected.stdout)[0]["result"] in ("elected", "not needed")
    wait_until(lambda: cluster.partitions("moving-cli")[0][0] == newcomer,
               what="the preferred replica leading")
    bad = odradek(cluster, "partitions", "reassign", "moving-cli:0=1,1")
    assert bad.returncode != 0 and "INVALID_REPLICA_ASSIGNMENT" in bad.stdout, bad


def test_delete_topic_removes_every_replica(shared_cluster: Cluster) -> None:
    cluster = shared_cluster
    create_topic(cluster, "doomed", partitions=2)
    produce(cluster.bootstrap, "doomed", 50)
    directories = [b.data_dir / f"doomed-{p}" for b in cluster.brokers.values() for p in (0, 1)]
    assert all(d.exists() for d in directories)
    admin = cluster.admin(2)  # any broker takes it
    admin.delete_topics(["doomed"], operation_timeout=20)["doomed"].result(30)
    wait_until(lambda: all("doomed" not in cluster.admin(b).list_topics(timeout=5).topics
                           for b in cluster.live()), what="doomed gone from every broker")
    wait_until(lambda: not any(d.exists() for d in directories),
               what="every replica's log deleted")
    create_topic(cluster, "doomed", partitions=1)  # the name is free again, and empty
    acked = produce(cluster.bootstrap, "doomed", 5)
    assert consume_all(cluster.bootstrap, "doomed", 5) == acked
