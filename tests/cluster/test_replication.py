"""Replication across real broker processes coordinated by a real ZooKeeper."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from support.broker import BrokerProcess
from support.cluster import WAIT, Cluster, wait_until

from odradek.cluster.zookeeper_server import ZooKeeperServer
from odradek.protocol.records import iter_batch_headers


@pytest.fixture
def cluster(tmp_path: Path, connect: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, connect, brokers=3)
    try:
        c.start()
    except Exception:
        c.stop()
        print(c.logs())  # shown with the failure
        raise
    yield c
    for broker in c.brokers.values():
        broker.kill()
    text = c.logs()
    assert "Traceback" not in text, text


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


# ---- faults under steady load -------------------------------------------------------------

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
    end_offsets = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
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
    shown = wait_until(lambda: full_isr(cluster, topic), what=f"{topic} with full ISRs")
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


def full_isr(cluster: Cluster, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    shown = cluster.partitions(topic)
    if shown and all(leader >= 0 and sorted(isr) == sorted(replicas)
                     for leader, replicas, isr in shown.values()):
        return shown
    return {}


def controller_id(cluster: Cluster) -> int:
    return cluster.admin().list_topics(timeout=5).controller_id


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


# ---- topics changed through any broker --------------------------------------------------------


def test_create_partitions_and_topic_configs_reach_every_broker(cluster: Cluster) -> None:
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


# ---- leader elections -------------------------------------------------------------------------


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


# ---- consumer groups --------------------------------------------------------------------------


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


# ---- partition reassignment (kafka-python's admin client has the APIs) ------------------------


def test_reassignment_copies_data_to_new_replicas_before_dropping_old_ones(
        cluster: Cluster) -> None:
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


# ---- a network partition: one broker in a network namespace of its own ----------------------


class IsolatableHost:
    """A network namespace joined to this one by a veth pair: a process run in it
    (`prefix`) reaches this side at `outside` and is reached at `inside`; taking the link
    down partitions it from everything, as a cut cable does (packets vanish, no resets)."""

    def __init__(self) -> None:
        tag = f"{os.getpid() % 10000}"
        self.namespace = f"odr-ns-{tag}"
        self.link = f"odr-v{tag}"
        self.outside, self.inside = "10.77.0.1", "10.77.0.2"
        self.prefix = ("ip", "netns", "exec", self.namespace)
        self._ip("netns", "add", self.namespace)
        try:
            self._ip("link", "add", self.link, "type", "veth", "peer", "name", self.link + "p")
            self._ip("link", "set", self.link + "p", "netns", self.namespace)
            self._ip("addr", "add", f"{self.outside}/24", "dev", self.link)
            self._ip("link", "set", self.link, "up")
            for args in (("addr", "add", f"{self.inside}/24", "dev", self.link + "p"),
                         ("link", "set", self.link + "p", "up"), ("link", "set", "lo", "up")):
                self._ip("-n", self.namespace, *args)
        except Exception:
            self.close()
            raise

    @staticmethod
    def _ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)

    def cut(self) -> None:
        self._ip("link", "set", self.link, "down")

    def heal(self) -> None:
        self._ip("link", "set", self.link, "up")

    def close(self) -> None:
        subprocess.run(["ip", "link", "del", self.link], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", self.namespace], capture_output=True, timeout=10)


@pytest.fixture
def isolatable() -> Iterator[IsolatableHost]:
    try:
        host = IsolatableHost()
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.fail(f"network namespaces are needed (run as root with iproute2): {e}")
    yield host
    host.close()


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
