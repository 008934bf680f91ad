"""Faults under steady load, on real broker processes and a real ZooKeeper: brokers
killed, paused, emptied, shut down, cut off by a network partition; ZooKeeper restarted.
After each: no acknowledged record lost or doubled, order kept, replicas equal."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic
from support.broker import BrokerProcess
from support.cluster import WAIT, Cluster, wait_until
from support.netns import IsolatableHost
from support.replication import (
    FAILOVER_BUDGET,
    SteadyProducer,
    check_no_acknowledged_write_lost,
    consume_with_offsets,
    controller_id,
    create_topic,
    full_isr,
    produce,
)

from odradek.cluster.zookeeper_server import ZooKeeperServer


@pytest.mark.parametrize("victim", ["leader", "follower", "controller"])
def test_kill_broker_under_load_loses_no_acknowledged_write(cluster: Cluster,
                                                            victim: str) -> None:
    create_topic(cluster, "load", partitions=4, config={"min.insync.replicas": "2"})
    leader, replicas, _ = cluster.partitions("load")[0]
    target = {"leader": leader, "follower": next(r for r in replicas if r != leader),
              "controller": controller_id(cluster)}[victim]
    producer = SteadyProducer(cluster.bootstrap, "load").start()
    producer.wait_for_acks(2000)
    cluster.kill(target)
    producer.wait_for_acks(2000, timeout=FAILOVER_BUDGET + WAIT)
    cluster.brokers[target].start()
    cluster.wait_for_brokers(set(cluster.brokers))
    wait_until(lambda: full_isr(cluster, "load"), what="the restarted broker back in every ISR")
    producer.wait_for_acks(1000)
    producer.stop()
    check_no_acknowledged_write_lost(cluster, "load", producer)
    assert producer.longest_stall < FAILOVER_BUDGET, producer.longest_stall


def test_controlled_shutdown_moves_leadership_first(cluster: Cluster) -> None:
    create_topic(cluster, "load", partitions=4, config={"min.insync.replicas": "2"})
    leader = cluster.partitions("load")[0][0]
    led = [p for p, (b, _, _) in cluster.partitions("load").items() if b == leader]
    producer = SteadyProducer(cluster.bootstrap, "load").start()
    producer.wait_for_acks(2000)
    cluster.brokers[leader].stop()  # SIGTERM: a controlled shutdown
    assert f"controlled shutdown of broker {leader} done" in cluster.brokers[leader].log_text()
    # Its partitions had new leaders, from the ISR, before it stopped.
    shown = cluster.partitions("load")
    assert all(shown[p][0] not in (leader, -1) and leader not in shown[p][2] for p in led), shown
    producer.wait_for_acks(2000)
    cluster.brokers[leader].start()
    wait_until(lambda: full_isr(cluster, "load"), what="the restarted broker back in every ISR")
    producer.stop()
    check_no_acknowledged_write_lost(cluster, "load", producer)
    # Leadership moved before the broker went: producers hardly waited.
    assert producer.longest_stall < 2.0, producer.longest_stall


def test_paused_leader_is_replaced_and_follows_when_it_resumes(cluster: Cluster) -> None:
    # SIGSTOP for longer than zookeeper.session.timeout.ms: the session expires, a new
    # leader is elected; the old one wakes up still thinking it leads, must not have
    # acknowledged anything meanwhile, and becomes a follower of the new leader.
    create_topic(cluster, "load", partitions=4, config={"min.insync.replicas": "2"})
    leader = cluster.partitions("load")[0][0]
    producer = SteadyProducer(cluster.bootstrap, "load").start()
    producer.wait_for_acks(2000)
    cluster.pause(leader)
    try:
        wait_until(lambda: cluster.partitions("load", next(
            b for b in cluster.live() if b != leader))[0][0] not in (leader, -1),
            FAILOVER_BUDGET + WAIT, "a new leader of load-0")
        producer.wait_for_acks(2000, timeout=FAILOVER_BUDGET + WAIT)
    finally:
        cluster.resume(leader)
    wait_until(lambda: full_isr(cluster, "load"), what="the paused broker back in every ISR")
    producer.wait_for_acks(1000)
    producer.stop()
    check_no_acknowledged_write_lost(cluster, "load", producer)


def test_follower_restarted_with_an_empty_disk_copies_everything(cluster: Cluster) -> None:
    create_topic(cluster, "load", partitions=4, config={"min.insync.replicas": "2"})
    leader, replicas, _ = cluster.partitions("load")[0]
    follower = next(r for r in replicas if r != leader)
    producer = SteadyProducer(cluster.bootstrap, "load").start()
    producer.wait_for_acks(2000)
    cluster.kill(follower)
    shutil.rmtree(cluster.brokers[follower].data_dir)
    producer.wait_for_acks(2000, timeout=FAILOVER_BUDGET + WAIT)
    cluster.brokers[follower].start()
    wait_until(lambda: full_isr(cluster, "load"), what="the emptied broker back in every ISR")
    producer.stop()
    check_no_acknowledged_write_lost(cluster, "load", producer)


def test_zookeeper_restart_loses_nothing(tmp_path: Path) -> None:
    # Its own ZooKeeper: the session one is shared with the other tests.
    with ZooKeeperServer(tmp_path / "zookeeper") as zookeeper:
        c = Cluster(tmp_path, f"{zookeeper.connect_string}/odradek", brokers=3).start()
        try:
            create_topic(c, "load", partitions=4, config={"min.insync.replicas": "2"})
            producer = SteadyProducer(c.bootstrap, "load").start()
            producer.wait_for_acks(2000)
            zookeeper.restart()
            producer.wait_for_acks(2000)  # produce goes on: leaders need no ZooKeeper
            producer.stop()
            check_no_acknowledged_write_lost(c, "load", producer)
            # The controller works again: a new topic gets leaders.
            create_topic(c, "after", partitions=2)
        finally:
            for broker in c.brokers.values():
                broker.kill()
        assert "Traceback" not in c.logs(), c.logs()


def test_acks_1_loses_only_the_unreplicated_tail_when_the_leader_dies(cluster: Cluster) -> None:
    # docs/cluster.md: with acks=1 a record is acknowledged once the leader has it; what
    # the followers had not fetched when the leader died is lost. Nothing before it is.
    create_topic(cluster, "load", partitions=1)
    leader = cluster.partitions("load")[0][0]
    producer = SteadyProducer(cluster.bootstrap, "load", acks="1",
                              **{"enable.idempotence": "false"}).start()
    producer.wait_for_acks(3000)
    cluster.kill(leader)
    before_kill = list(producer.acked.get(0, []))
    producer.wait_for_acks(2000, timeout=FAILOVER_BUDGET + WAIT)
    cluster.brokers[leader].start()
    wait_until(lambda: full_isr(cluster, "load"), what="the old leader back in the ISR")
    producer.stop()
    consumed = consume_with_offsets(cluster.bootstrap, "load", [0])[0]
    present = set(consumed)
    lost = [r for r in producer.acked[0] if r not in present]
    assert all(r in before_kill for r in lost), "a record acknowledged after the failover lost"
    if lost:  # the lost ones are the newest the dead leader had acknowledged
        first_lost = before_kill.index(lost[0])
        assert lost == before_kill[first_lost:first_lost + len(lost)]
        assert all(r in present for r in before_kill[:first_lost])


def test_unclean_leader_election_when_enabled_is_logged(cluster: Cluster) -> None:
    create_topic(cluster, "unclean", partitions=1, rf=2,
                 config={"unclean.leader.election.enable": "true"})
    leader, replicas, _ = cluster.partitions("unclean")[0]
    follower = next(r for r in replicas if r != leader)
    produce(cluster.bootstrap, "unclean", 100)
    cluster.kill(follower)
    wait_until(lambda: cluster.partitions("unclean", leader)[0][2] == [leader],
               FAILOVER_BUDGET + WAIT, "the dead follower out of the ISR")
    cluster.kill(leader)
    wait_until(lambda: cluster.partitions("unclean")[0][0] == -1, FAILOVER_BUDGET + WAIT,
               "the partition offline")
    cluster.brokers[follower].start()
    wait_until(lambda: cluster.partitions("unclean").get(0, (None,))[0] == follower, WAIT,
               "the out-of-sync follower elected")
    assert "unclean leader election for unclean" in cluster.logs()


def test_partitioned_leader_is_replaced_and_rejoins(tmp_path: Path,
                                                    isolatable: IsolatableHost) -> None:
    with ZooKeeperServer(tmp_path / "zookeeper", host=isolatable.outside) as zookeeper:
        c = Cluster(tmp_path, f"{zookeeper.connect_string}/odradek", brokers=3,
                    host=isolatable.outside)
        isolated = c.brokers[3]
        c.brokers[3] = BrokerProcess(isolated.data_dir, isolated.settings,
                                     host=isolatable.inside, prefix=isolatable.prefix)
        c.start()
        try:
            admin = c.admin()
            admin.create_topics([NewTopic("load", 3, replica_assignment=[
                [3, 1, 2], [1, 2, 3], [2, 3, 1]], config={"min.insync.replicas": "2"})]
                                )["load"].result(30)
            wait_until(lambda: full_isr(c, "load").keys() == {0, 1, 2}, what="load ready")
            # In-flight requests to the cut-off leader time out rather than hang.
            producer = SteadyProducer(c.bootstrap, "load", **{"request.timeout.ms": "3000"})
            producer.start().wait_for_acks(2000)
            isolatable.cut()
            try:
                wait_until(lambda: c.partitions("load", 1).get(0, (3,))[0] not in (3, -1),
                           FAILOVER_BUDGET + WAIT, "a new leader of load-0")
                producer.wait_for_acks(2000, timeout=FAILOVER_BUDGET + WAIT)
            finally:
                isolatable.heal()
            wait_until(lambda: full_isr(c, "load"), 2 * WAIT,
                       "the partitioned broker back in every ISR")
            producer.stop()
            check_no_acknowledged_write_lost(c, "load", producer)
        finally:
            for broker in c.brokers.values():
                broker.kill()
        assert "Traceback" not in c.logs(), c.logs()
