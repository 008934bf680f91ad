"""Transactions in a 3-broker cluster on ZooKeeper: the coordinator sends its markers to
leaders on other brokers (WriteTxnMarkers over the inter-broker client), and when the
coordinator's broker is killed mid-transaction, the new leader of its __transaction_state
partition takes the transaction over: it is decided, never half visible. When the leader of
one of a transaction's data partitions is killed, the coordinator retries its markers until
the partition's new leader has them: no transaction hangs (issue 16)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ElectionType,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import NewTopic, OffsetSpec
from support.cluster import WAIT, Cluster, running, wait_until
from support.replication import (
    FAILOVER_BUDGET,
    agreed_full_isr,
    controller_id,
    create_topic,
    replica_batches,
)

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


def leader_of(cluster: Cluster, topic: str, partition: int) -> int | None:
    leader = cluster.partitions(topic).get(partition, (-1,))[0]
    return leader if leader >= 0 else None


def end_offsets(cluster: Cluster, topic: str, partitions: int
                ) -> tuple[dict[int, int], dict[int, int]] | None:
    """(last stable offsets, high watermarks) of the topic's partitions as their leaders
    answer ListOffsets; None while a leader is unknown or moving."""
    admin = cluster.admin()
    found = []
    try:
        for isolation in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
            futures = admin.list_offsets(
                {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)},
                isolation_level=isolation, request_timeout=5)
            found.append({tp.partition: f.result(10).offset for tp, f in futures.items()})
    except KafkaException:
        return None
    return found[0], found[1]


def settled(cluster: Cluster, topic: str, partitions: int) -> dict[int, int]:
    """Waits until every partition's LSO is its high watermark (no transaction left open
    or undecided on it); returns the high watermarks."""
    def stable() -> dict[int, int] | None:
        offsets = end_offsets(cluster, topic, partitions)
        return offsets[1] if offsets is not None and offsets[0] == offsets[1] else None

    ends: dict[int, int] = wait_until(
        stable, FAILOVER_BUDGET + WAIT,
        f"the LSO of every partition of {topic} at its high watermark", interval=0.2)
    return ends


def read_committed_to_end(cluster: Cluster, topic: str, partitions: int) -> list[bytes]:
    """Every record a read_committed consumer reads from each partition's start to its
    high watermark, once the LSO has reached it."""
    ends = settled(cluster, topic, partitions)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "verifier",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    try:
        def at_end() -> bool:
            for m in consumer.consume(500, 0.5):
                assert m.error() is None, m.error()
                out.append(m.value())
            # The position moves past aborted records and markers as well.
            return all(tp.offset >= ends[tp.partition] for tp in consumer.position(
                [TopicPartition(topic, p) for p in range(partitions)]))

        wait_until(at_end, 60, f"{topic} read to its high watermarks {ends}")
    finally:
        consumer.close()
    return sorted(out)


def lead_preferred(cluster: Cluster, topic: str, partitions: int) -> None:
    admin = cluster.admin(controller_id(cluster))
    results = admin.elect_leaders(ElectionType.PREFERRED, [
        TopicPartition(topic, q) for q in range(partitions)]).result(30)
    assert all(e is None or e.code() == KafkaError.ELECTION_NOT_NEEDED
               for e in results.values()), results

    def preferred_lead() -> bool:
        shown = agreed_full_isr(cluster, topic)
        return bool(shown) and all(leader == replicas[0]
                                   for leader, replicas, _ in shown.values())

    wait_until(preferred_lead, what=f"the preferred replicas leading {topic}")


def end_transaction(p: Any, commit: bool) -> None:
    """Commits or aborts, again while librdkafka says the error is retriable (a request
    timed out while the cluster moves leaders)."""
    deadline = time.monotonic() + FAILOVER_BUDGET + WAIT
    while True:
        try:
            (p.commit_transaction if commit else p.abort_transaction)(TIMEOUT)
            return
        except KafkaException as e:
            if not e.args[0].retriable() or time.monotonic() > deadline:
                raise


@pytest.fixture(params=[3, 2], ids=lambda n: f"transaction-state-rf{n}")
def state_rf_cluster(request: pytest.FixtureRequest, tmp_path: Path, connect: str
                     ) -> Iterator[Cluster]:
    """The 3-broker cluster (as conftest's `cluster`) with __transaction_state at
    replication factor 3, or 2: then one broker holds no replica of a coordinator's
    partition, and its death does not hold up the coordinator's own writes."""
    settings = {"transaction.state.log.replication.factor": str(request.param)}
    yield from running(Cluster(tmp_path, connect, brokers=3, settings=settings))


@pytest.mark.timeout(300)
def test_a_data_partitions_leader_killed_mid_transaction(state_rf_cluster: Cluster) -> None:
    """Issue 16. The broker leading one of the transaction's data partitions (not the
    coordinator's) is SIGKILLed once the records are acknowledged, before the commit (then,
    in a second transaction, before the abort). With __transaction_state at RF 3 the
    victim is a follower of the coordinator's partition: the coordinator's PrepareCommit
    waits for the controller to take it out of the ISR, at a new leader epoch (the write
    answers NOT_COORDINATOR and the client ends the transaction again). At RF 2 the victim
    is outside it: the commit is decided at once and the coordinator sends markers to a dead
    leader, again until the partition's new leader has them, and goes on when the victim
    was the controller and its successor sends the coordinator's partition LeaderAndIsr
    again, at the same leader epoch."""
    cluster = state_rf_cluster
    topic, partitions = "faulted", 6
    create_topic(cluster, topic, partitions=partitions)  # RF 3, full ISRs everywhere
    producer(cluster, "warm-up")  # creates __transaction_state
    states = wait_until(lambda: agreed_full_isr(cluster, "__transaction_state"),
                        what="__transaction_state with full ISRs")

    def spared(state_partition: int) -> set[int]:
        """The coordinator, at RF 2 with the other replica of its partition."""
        leader, replicas, _ = states[state_partition]
        return {leader} if len(replicas) == 3 else set(replicas)

    # A transactional id whose coordinator (and at RF 2, partition) is not on the
    # controller: the first victim is then the controller, whose successor sends every
    # broker LeaderAndIsr again.
    controller = controller_id(cluster)
    transactional_id = next(tid for tid in (f"tid-{n}" for n in range(1000))
                            if controller not in spared(partition_for(tid, 50)))
    p = producer(cluster, transactional_id)
    state_partition = partition_for(transactional_id, 50)
    expected: list[bytes] = []
    errors: list[Any] = []
    for round_, commit in enumerate((True, False)):
        wait_until(lambda: agreed_full_isr(cluster, "__transaction_state"),
                   what="__transaction_state with full ISRs")
        states = cluster.partitions("__transaction_state")
        leaders = [wait_until(lambda q=q: leader_of(cluster, topic, q), what=f"{topic}-{q}'s "
                              "leader") for q in range(partitions)]
        # The leader of one of the transaction's data partitions, not the coordinator
        # (at RF 2, not a replica of the coordinator's partition either); the controller
        # when it is one of them.
        controller = controller_id(cluster)
        candidates = sorted(set(leaders) - spared(state_partition),
                            key=lambda b: (b != controller, b))
        assert candidates, (leaders, states[state_partition])
        victim = candidates[0]
        p.begin_transaction()
        values = [b"%s-%d-%d" % (b"committed" if commit else b"aborted", round_, i)
                  for i in range(60)]
        for i, value in enumerate(values):
            p.produce(topic, value=value, partition=i % partitions,
                      on_delivery=lambda err, _msg: errors.append(err) if err else None)
        assert p.flush(TIMEOUT) == 0  # produced and acknowledged, all partitions in it
        assert not errors, errors
        cluster.kill(victim)
        end_transaction(p, commit)
        if commit:
            expected += values
        # Every committed record once, nothing of the aborted one; no hanging transaction.
        assert read_committed_to_end(cluster, topic, partitions) == sorted(expected)

        cluster.brokers[victim].start()
        cluster.wait_for_brokers(set(cluster.brokers))
        shown = wait_until(lambda: agreed_full_isr(cluster, topic), 2 * WAIT,
                           f"broker {victim} back in every ISR of {topic}")
        # Its copies are the leaders', markers included.
        for q, (leader, replicas, _) in shown.items():
            wanted = replica_batches(cluster, topic, q, leader)
            for r in replicas:
                wait_until(lambda r=r, q=q, wanted=wanted:
                           replica_batches(cluster, topic, q, r) == wanted,
                           what=f"broker {r}'s copy of {topic}-{q} equal to the leader's")
        assert read_committed_to_end(cluster, topic, partitions) == sorted(expected)
        # Leadership back to the preferred replicas: the restarted broker leads again (the
        # next round's victim, at RF 2) and answers the reads from its own copy.
        lead_preferred(cluster, topic, partitions)
        assert read_committed_to_end(cluster, topic, partitions) == sorted(expected)
    assert len(expected) == 60
