"""Consumer groups with real clients against a real broker: partitions shared out and
taken over as members join, leave and die; cooperative rebalances; committed offsets and
static members across broker restarts; auto.offset.reset for a new group.

Members that must be killed run in processes of their own (group_member.py), so a kill is
a real SIGKILL: no LeaveGroup, no more heartbeats. Sessions are short (the broker's
group.min.session.timeout.ms is lowered) and every wait is for a condition.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerProcess

MEMBER = Path(__file__).with_name("group_member.py")
SETTINGS = {"group.initial.rebalance.delay.ms": "200", "group.min.session.timeout.ms": "500",
            "offsets.topic.num.partitions": "10"}
PARTITIONS = 6
ALL = set(range(PARTITIONS))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("groups"), SETTINGS).start()
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", SETTINGS).start()
    yield process
    process.kill()
    assert "Traceback" not in process.log_text(), process.log_text()


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def create_topic(broker: BrokerProcess, topic: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def produce(broker: BrokerProcess, topic: str, count: int, start: int = 0,
            partitions: int = PARTITIONS) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(topic, value=f"record {i}".encode(), partition=i % partitions)
    assert producer.flush(30) == 0


def rebalances(broker: BrokerProcess, group: str) -> int:
    return broker.log_text().count(f"preparing to rebalance group {group} ")


class Member:
    """A group member in its own process; `owned` is its assignment as it last said."""

    def __init__(self, library: str, broker: BrokerProcess, topic: str, group: str,
                 **options: object) -> None:
        argv = [sys.executable, str(MEMBER), library, broker.bootstrap, topic, group,
                *(f"{k}={v}" for k, v in options.items())]
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True)
        self.events: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.events.append(json.loads(line))

    @property
    def owned(self) -> set[int]:
        assigned = [e for e in self.events if e["event"] == "assigned"]
        return set(assigned[-1]["partitions"]) if assigned else set()

    def revoked(self) -> list[int]:
        return [p for e in self.events if e["event"] == "revoked" for p in e["partitions"]]

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("close\n")
        self.process.stdin.flush()
        assert self.process.wait(30) == 0

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.fixture
def members() -> Iterator[list[Member]]:
    started: list[Member] = []
    yield started
    for m in started:
        if m.process.poll() is None:
            m.kill()


def spread(members: list[Member], sizes: list[int]) -> bool:
    """The members own every partition between them, once each, in these amounts."""
    owned = [m.owned for m in members]
    return (sorted(len(o) for o in owned) == sorted(sizes)
            and set().union(*owned) == ALL and sum(len(o) for o in owned) == PARTITIONS)


@pytest.mark.parametrize("library", ["confluent-kafka", "kafka-python", "aiokafka"])
def test_members_share_partitions_and_take_over_from_those_that_leave_or_die(
        broker: BrokerProcess, members: list[Member], library: str) -> None:
    topic = group = f"share-{library}"
    create_topic(broker, topic)

    def join() -> Member:
        member = Member(library, broker, topic, group, session_ms=2000)
        members.append(member)
        return member

    a, b, c = join(), join(), join()
    wait_for(lambda: spread([a, b, c], [2, 2, 2]), "three members with two partitions each")
    d = join()
    wait_for(lambda: spread([a, b, c, d], [1, 1, 2, 2]), "the fourth member to get a share")
    b.close()  # LeaveGroup: the others rebalance at once
    wait_for(lambda: spread([a, c, d], [2, 2, 2]), "the others to take over b's partitions")
    c.kill()  # no LeaveGroup: the others wait out c's session
    died = time.monotonic()
    wait_for(lambda: spread([a, d], [3, 3]), "the survivors to take over c's partitions")
    assert time.monotonic() - died >= 1.5  # c's session (2 s) had to expire first


def test_cooperative_sticky_revokes_only_what_moves(
        broker: BrokerProcess, members: list[Member]) -> None:
    topic = group = "cooperative"
    create_topic(broker, topic)

    def join() -> Member:
        member = Member("confluent-kafka", broker, topic, group, session_ms=2000,
                        strategy="cooperative-sticky")
        members.append(member)
        return member

    first = [join(), join(), join()]
    wait_for(lambda: spread(first, [2, 2, 2]), "three members with two partitions each")
    before = {id(m): m.owned for m in first}
    assert not any(m.revoked() for m in first)  # the first assignment revoked nothing
    newcomer = join()
    wait_for(lambda: spread([*first, newcomer], [1, 1, 2, 2]), "the newcomer's share")
    moved = newcomer.owned
    revoked = [p for m in first for p in m.revoked()]
    assert sorted(revoked) == sorted(moved)  # what moved, and nothing else
    for m in first:
        assert m.owned == before[id(m)] - moved  # the rest stayed put, never revoked


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_committed_offsets_survive_a_broker_restart(own_broker: BrokerProcess,
                                                    sig: int) -> None:
    broker = own_broker
    topic = group = "durable-commits"
    create_topic(broker, topic)
    produce(broker, topic, 60)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen = 0
    while seen < 30:
        msg = consumer.poll(10)
        assert msg is not None and msg.error() is None
        seen += 1
        # Commit past what was processed, with metadata, one partition at a time.
        consumer.commit(offsets=[TopicPartition(topic, msg.partition(), msg.offset() + 1,
                                                metadata=f"after {seen}")],
                        asynchronous=False)
    committed = {tp.partition: (tp.offset, tp.metadata) for tp in consumer.committed(
        [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)}
    consumer.close()

    broker.stop(sig)
    broker.start()
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        after = wait_for(lambda: consumer.committed(
            [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10),
            "the committed offsets")
        assert {tp.partition: (tp.offset, tp.metadata) for tp in after} == committed
        # A new member of the group resumes where the commits say, not at the beginning.
        produce(broker, topic, 60, start=60)  # so that every partition has more to read
        consumer.subscribe([topic])
        first_offsets: dict[int, int] = {}
        while len(first_offsets) < PARTITIONS:
            msg = consumer.poll(10)
            assert msg is not None and msg.error() is None
            first_offsets.setdefault(msg.partition(), msg.offset())
        assert first_offsets == {p: max(offset, 0) for p, (offset, _) in committed.items()}
    finally:
        consumer.close()


def test_a_restarted_static_member_gets_its_partitions_back_without_a_rebalance(
        own_broker: BrokerProcess, members: list[Member]) -> None:
    broker = own_broker
    topic = group = "static"
    create_topic(broker, topic)

    def join(instance: str) -> Member:
        member = Member("confluent-kafka", broker, topic, group, session_ms=15000,
                        instance_id=instance)
        members.append(member)
        return member

    a, b, c = join("a"), join("b"), join("c")
    wait_for(lambda: spread([a, b, c], [2, 2, 2]), "three static members, two partitions each")
    count = rebalances(broker, group)
    events = {m: len(m.events) for m in (a, c)}
    owned = b.owned
    b.kill()  # the process dies and comes back with the same group.instance.id
    b2 = join("b")
    wait_for(lambda: b2.owned == owned, "the restarted member's partitions")
    assert rebalances(broker, group) == count
    assert all(len(m.events) == events[m] for m in (a, c))  # the others noticed nothing
    # The same holds across a broker restart: members and their ids are in the log.
    broker.stop(signal.SIGKILL)
    broker.start()
    b2.kill()
    b3 = join("b")
    wait_for(lambda: b3.owned == owned, "the member's partitions after a broker restart")
    assert all(len(m.events) == events[m] for m in (a, c))


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_auto_offset_reset_for_a_new_group(broker: BrokerProcess, reset: str) -> None:
    topic = f"reset-{reset}"
    create_topic(broker, topic, 1)
    produce(broker, topic, 10, partitions=1)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"new-{reset}",
                         "auto.offset.reset": reset, "enable.auto.commit": False})
    assigned = threading.Event()
    consumer.subscribe([topic], on_assign=lambda c, ps: assigned.set())
    try:
        while not assigned.is_set():
            consumer.poll(0.1)
        got: list[int] = []
        if reset == "earliest":
            while len(got) < 10:
                msg = consumer.poll(10)
                assert msg is not None and msg.error() is None
                got.append(msg.offset())
            assert got == list(range(10))
        else:
            # Records produced once the consumer sits at the end reach it; the ten older
            # ones never do. When the reset happens is the client's business: probe.
            sent = 10
            while not got:
                produce(broker, topic, 1, start=sent, partitions=1)
                sent += 1
                msg = consumer.poll(1)
                if msg is not None:
                    assert msg.error() is None
                    got.append(msg.offset())
            assert got[0] >= 10
    finally:
        consumer.close()


def test_admin_clients_list_describe_and_delete_groups(broker: BrokerProcess) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException

    topic = group = "administered"
    create_topic(broker, topic, 2)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "client.id": "the-client"})
    consumer.subscribe([topic])
    while not consumer.assignment():
        consumer.poll(0.1)
    consumer.commit(offsets=[TopicPartition(topic, 0, 5, metadata="m")], asynchronous=False)
    listed = admin.list_consumer_groups().result(10)
    assert group in {g.group_id for g in listed.valid}
    described = admin.describe_consumer_groups([group])[group].result(10)
    assert described.state.name == "STABLE" and described.partition_assignor == "range"
    [member] = described.members
    assert (member.client_id, member.host) == ("the-client", "/127.0.0.1")
    assert sorted(tp.partition for tp in member.assignment.topic_partitions) == [0, 1]
    offsets = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)])[group].result(10)
    assert [(tp.partition, tp.offset) for tp in offsets.topic_partitions] == [(0, 5)]
    with pytest.raises(KafkaException, match="NON_EMPTY_GROUP"):
        admin.delete_consumer_groups([group])[group].result(10)
    consumer.close()
    admin.delete_consumer_groups([group])[group].result(10)
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(10).valid}


def resume_kafka_python(broker: BrokerProcess, topic: str, group: str, take: int) -> list[int]:
    """Consumes `take` records in the group, commits, closes; the offsets it read."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                             enable_auto_commit=False, auto_offset_reset="earliest")
    offsets: list[int] = []
    while len(offsets) < take:
        for records in consumer.poll(timeout_ms=500, max_records=take - len(offsets)).values():
            offsets += [r.offset for r in records]
    consumer.commit()
    consumer.close()
    return offsets


def resume_aiokafka(broker: BrokerProcess, topic: str, group: str, take: int) -> list[int]:
    import asyncio

    from aiokafka import AIOKafkaConsumer

    async def run() -> list[int]:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        offsets: list[int] = []
        try:
            while len(offsets) < take:
                batches = await consumer.getmany(timeout_ms=500,
                                                 max_records=take - len(offsets))
                offsets += [r.offset for records in batches.values() for r in records]
            await consumer.commit()
        finally:
            await consumer.stop()
        return offsets

    return asyncio.run(run())


@pytest.mark.parametrize("resume", [resume_kafka_python, resume_aiokafka],
                         ids=["kafka-python", "aiokafka"])
def test_a_group_resumes_from_its_commits(broker: BrokerProcess, resume: Any) -> None:
    topic = group = f"resume-{resume.__name__}"
    create_topic(broker, topic, 1)
    produce(broker, topic, 20, partitions=1)
    assert resume(broker, topic, group, 8) == list(range(8))
    assert resume(broker, topic, group, 12) == list(range(8, 20))
