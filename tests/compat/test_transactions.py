"""Transactions end to end (KIP-98) with confluent-kafka's transactional producer against a
real broker process: commit and abort across partitions and topics, what read_committed
and read_uncommitted consumers see, an open transaction holding read_committed consumers
at the last stable offset, fencing of a zombie producer, and a broker killed (SIGKILL)
mid-transaction: after the restart the transaction is decided, never half visible."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerProcess

TIMEOUT = 30
WORKER = Path(__file__).with_name("txn_worker.py")


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("txn-broker")).start()
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


def create_topics(broker: BrokerProcess, *names: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(n, partitions, 1) for n in names]).values():
        future.result(TIMEOUT)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def transactional(broker: BrokerProcess, transactional_id: str, **extra: Any) -> Producer:
    producer = Producer({"bootstrap.servers": broker.bootstrap,
                         "transactional.id": transactional_id, "linger.ms": 5, **extra})
    producer.init_transactions(TIMEOUT)
    return producer


def read(broker: BrokerProcess, topic: str, isolation: str, partitions: int = 2,
         expect: int | None = None, idle_polls: int = 10) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record a consumer with `isolation` reads from
    the beginning: until `expect` records came, or `idle_polls` polls in a row brought
    nothing."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("reader"),
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "enable.partition.eof": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[tuple[int, int, bytes]] = []
    idle = 0
    try:
        while idle < idle_polls and (expect is None or len(out) < expect):
            messages = [m for m in consumer.consume(100, 0.3) if m.error() is None]
            idle = 0 if messages else idle + 1
            out += [(m.partition(), m.offset(), m.value()) for m in messages]
    finally:
        consumer.close()
    return sorted(out)


def values(rows: list[tuple[int, int, bytes]]) -> list[bytes]:
    return sorted(v for _, _, v in rows)


def test_committed_transactions_are_visible_to_read_committed(txn_broker: BrokerProcess
                                                               ) -> None:
    a, b = unique("txn-a"), unique("txn-b")
    create_topics(txn_broker, a, b)
    producer = transactional(txn_broker, unique("tid"))
    producer.begin_transaction()
    for i in range(20):
        producer.produce(a, value=b"a%d" % i, partition=i % 2)
        producer.produce(b, value=b"b%d" % i, partition=i % 2)
    producer.commit_transaction(TIMEOUT)
    expected = sorted(b"a%d" % i for i in range(20))
    assert values(read(txn_broker, a, "read_committed", expect=20)) == expected
    assert values(read(txn_broker, b, "read_committed", expect=20)) == sorted(
        b"b%d" % i for i in range(20))
    # The COMMIT markers take an offset each: a record written next lands after them.
    rows = read(txn_broker, a, "read_uncommitted", expect=20)
    assert [o for p, o, _ in rows if p == 0] == list(range(10))


def test_aborted_transactions_are_hidden_from_read_committed(txn_broker: BrokerProcess
                                                             ) -> None:
    topic = unique("txn-abort")
    create_topics(txn_broker, topic)
    producer = transactional(txn_broker, unique("tid"))
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=b"aborted%d" % i, partition=i % 2)
    producer.flush(TIMEOUT)
    producer.abort_transaction(TIMEOUT)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=b"kept%d" % i, partition=i % 2)
    producer.commit_transaction(TIMEOUT)
    committed = read(txn_broker, topic, "read_committed", expect=10)
    assert values(committed) == sorted(b"kept%d" % i for i in range(10))
    everything = read(txn_broker, topic, "read_uncommitted", expect=20)
    assert values(everything) == sorted([b"kept%d" % i for i in range(10)] +
                                        [b"aborted%d" % i for i in range(10)])
    # Per partition: 5 aborted records, the ABORT marker, 5 kept records (and a marker).
    assert [o for p, o, _ in everything if p == 0] == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10]


def test_an_open_transaction_holds_read_committed_at_the_last_stable_offset(
        txn_broker: BrokerProcess) -> None:
    topic = unique("txn-open")
    create_topics(txn_broker, topic, partitions=1)
    plain = Producer({"bootstrap.servers": txn_broker.bootstrap})
    plain.produce(topic, value=b"before")
    plain.flush(TIMEOUT)
    producer = transactional(txn_broker, unique("tid"))
    producer.begin_transaction()
    producer.produce(topic, value=b"in the transaction")
    producer.flush(TIMEOUT)
    plain.produce(topic, value=b"after, outside it")
    plain.flush(TIMEOUT)
    # read_uncommitted sees all three; read_committed stops where the transaction starts.
    assert values(read(txn_broker, topic, "read_uncommitted", 1, expect=3)) == sorted(
        [b"before", b"in the transaction", b"after, outside it"])
    assert values(read(txn_broker, topic, "read_committed", 1, idle_polls=5)) == [b"before"]
    producer.commit_transaction(TIMEOUT)
    assert values(read(txn_broker, topic, "read_committed", 1, expect=3)) == sorted(
        [b"before", b"in the transaction", b"after, outside it"])


def test_a_new_producer_with_the_same_id_fences_the_old_one(txn_broker: BrokerProcess) -> None:
    topic = unique("txn-fence")
    create_topics(txn_broker, topic, partitions=1)
    transactional_id = unique("tid")
    zombie = transactional(txn_broker, transactional_id)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie")
    zombie.flush(TIMEOUT)
    successor = transactional(txn_broker, transactional_id)  # aborts the zombie's
    with pytest.raises(KafkaException) as fenced:
        zombie.commit_transaction(TIMEOUT)
    assert "fenced" in str(fenced.value).lower()
    successor.begin_transaction()
    successor.produce(topic, value=b"successor")
    successor.commit_transaction(TIMEOUT)
    assert values(read(txn_broker, topic, "read_committed", 1, expect=1)) == [b"successor"]


def test_a_broker_killed_mid_transaction_leaves_nothing_half_visible(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", {"transaction.max.timeout.ms": "60000"}).start()
    try:
        topic = unique("txn-kill")
        create_topics(broker, topic)
        transactional_id = unique("tid")
        producer = transactional(broker, transactional_id)
        producer.begin_transaction()
        for i in range(10):
            producer.produce(topic, value=b"committed%d" % i, partition=i % 2)
        producer.commit_transaction(TIMEOUT)
        producer.begin_transaction()
        for i in range(10):
            producer.produce(topic, value=b"open%d" % i, partition=i % 2)
        producer.flush(TIMEOUT)
        broker.kill()
        broker.start()
        # The coordinator reloads the open transaction; the producer's successor aborts it.
        successor = transactional(broker, transactional_id)
        successor.begin_transaction()
        successor.produce(topic, value=b"after the restart", partition=0)
        successor.commit_transaction(TIMEOUT)
        committed = read(broker, topic, "read_committed", expect=11)
        assert values(committed) == sorted([b"committed%d" % i for i in range(10)] +
                                           [b"after the restart"])
        assert len(read(broker, topic, "read_uncommitted", expect=21)) == 21
    finally:
        broker.stop()


def test_consume_transform_produce_killed_repeatedly_is_exactly_once(
        txn_broker: BrokerProcess) -> None:
    """Every input record appears exactly once in the committed output, and the group's
    offsets match it, however often the worker is SIGKILLed mid-stream."""
    source, sink, group = unique("eos-in"), unique("eos-out"), unique("eos-group")
    create_topics(txn_broker, source, sink)
    plain = Producer({"bootstrap.servers": txn_broker.bootstrap, "linger.ms": 5})
    inputs = [b"%05d" % i for i in range(1500)]
    for i, value in enumerate(inputs):
        plain.produce(source, value=value, partition=i % 2)
    plain.flush(TIMEOUT)
    argv = [sys.executable, str(WORKER), txn_broker.bootstrap, source, sink, group,
            unique("eos-tid")]
    for _ in range(3):  # killed once it has committed a few transactions
        worker = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        assert worker.stdout is not None
        for _ in range(3):
            line = worker.stdout.readline()
            assert line.startswith("committed"), line
        worker.send_signal(signal.SIGKILL)
        worker.wait(TIMEOUT)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    output = read(txn_broker, sink, "read_committed", expect=len(inputs))
    assert values(output) == sorted(b"out:" + v for v in inputs)  # none lost, none twice
    consumer = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": group})
    try:
        offsets = consumer.committed([TopicPartition(source, p) for p in (0, 1)], TIMEOUT)
    finally:
        consumer.close()
    assert [tp.offset for tp in offsets] == [750, 750]


def test_a_transaction_past_its_timeout_is_aborted(tmp_path: Path) -> None:
    """The coordinator aborts a transaction older than its transaction.timeout.ms and fences
    its producer: read_committed readers get past it, and the producer cannot commit."""
    broker = BrokerProcess(tmp_path / "data", {
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}).start()
    try:
        topic = unique("txn-timeout")
        create_topics(broker, topic, partitions=1)
        producer = transactional(broker, unique("tid"), **{"transaction.timeout.ms": 1000})
        producer.begin_transaction()
        producer.produce(topic, value=b"abandoned")
        producer.flush(TIMEOUT)
        plain = Producer({"bootstrap.servers": broker.bootstrap})
        plain.produce(topic, value=b"after it")
        plain.flush(TIMEOUT)
        # Held back at the open transaction until the coordinator aborts it.
        assert values(read(broker, topic, "read_committed", 1, expect=1, idle_polls=20)) == [
            b"after it"]
        with pytest.raises(KafkaException):
            producer.commit_transaction(TIMEOUT)
        assert values(read(broker, topic, "read_uncommitted", 1, expect=2)) == [
            b"abandoned", b"after it"]
    finally:
        broker.stop()
