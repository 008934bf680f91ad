"""`odradek transactions` against a real broker process, with confluent-kafka's idempotent
and transactional producers. (How the CLI refuses a broker that lacks one of the APIs is
tested against fake brokers in tests/test_cli_transactions_unit.py.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from support.broker import BrokerProcess
from test_cli import Run, closed_port, create, failed, odradek, ok

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("cli-txn"), {
        "auto.create.topics.enable": "false",
        # One broker: the internal topics cannot have the default 3 replicas.
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
    }).start()
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def txn(broker: BrokerProcess, *args: str) -> Run:
    return odradek(broker, "transactions", *args)


def producers_of(broker: BrokerProcess, topic: str, partition: int = 0
                 ) -> list[dict[str, Any]]:
    run = ok(txn(broker, "describe-producers", "--topic", topic, "--partition",
                 str(partition), "--json"))
    result: list[dict[str, Any]] = run.json()["producers"]
    return result


def transactional_producer(broker: BrokerProcess, transactional_id: str) -> Producer:
    """A transactional producer that has finished init_transactions(), or a skip saying
    why the broker cannot start one yet."""
    producer = Producer({"bootstrap.servers": broker.bootstrap,
                         "transactional.id": transactional_id,
                         "transaction.timeout.ms": 60_000, "log_level": 0})
    try:
        producer.init_transactions(20)
    except KafkaException as e:
        pytest.skip(f"the broker cannot start a transactional producer yet: {e}")
    return producer


# ---- what works whatever the broker serves -----------------------------------------------

def test_the_commands_are_listed() -> None:
    done = subprocess.run([sys.executable, "-m", "odradek", "transactions", "--help"],
                          capture_output=True, text=True, timeout=30)
    for name in ("list", "describe", "describe-producers", "abort", "find-hanging"):
        assert name in done.stdout


def test_an_unreachable_cluster_is_a_clear_error() -> None:
    down = f"127.0.0.1:{closed_port()}"
    started = time.monotonic()
    failed(odradek(None, "transactions", "list", "--bootstrap-server", down),
           "odradek transactions list: cannot reach the cluster", down)
    assert time.monotonic() - started < 15


def test_unusable_security_is_refused_before_anything_is_sent(broker: BrokerProcess) -> None:
    # TLS and SASL/PLAIN or SCRAM work (wire.py); Kerberos does not.
    run = failed(txn(broker, "list", "-X", "security.protocol=SASL_PLAINTEXT"),
                 "SASL mechanism GSSAPI (Kerberos")
    assert run.code == 2


def test_usage_mistakes_exit_2(broker: BrokerProcess) -> None:
    for args in (("abort", "--topic", "t", "--partition", "0"),
                 ("find-hanging",),
                 ("find-hanging", "--broker-id", "1", "--partition", "0")):
        run = txn(broker, *args)
        assert run.code == 2, run
        assert "Traceback" not in run.err and run.err.strip(), run


# ---- DescribeProducers ---------------------------------------------------------------------

def test_describe_producers_of_an_idempotent_producer(broker: BrokerProcess) -> None:
    topic = topic_name("txn-idem")
    create(broker, topic, 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                         "linger.ms": 0})
    for i in range(3):
        producer.produce(topic, f"v{i}".encode(), partition=0)
        assert producer.flush(20) == 0  # one batch each: sequences 0, 1, 2
    before = int(time.time() * 1000)

    (state,) = producers_of(broker, topic)
    assert state["producer_id"] >= 0 and state["producer_epoch"] >= 0
    assert state["last_sequence"] == 2
    assert state["coordinator_epoch"] is None
    assert state["current_transaction_start_offset"] is None
    assert before - 60_000 < state["last_timestamp"] <= before + 5_000
    assert producers_of(broker, topic, 1) == []

    run = ok(txn(broker, "describe-producers", "--topic", topic, "--partition", "0"))
    header, row = [line.split() for line in run.out.splitlines()]
    assert header == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch",
                      "LastSequence", "LastTimestamp", "CurrentTransactionStartOffset"]
    assert row == [str(state["producer_id"]), str(state["producer_epoch"]), "-1", "2",
                   str(state["last_timestamp"]), "None"]
    # The broker answers as a replica when asked directly (--broker-id).
    run = ok(txn(broker, "describe-producers", "--topic", topic, "--partition", "0",
                 "--broker-id", "1", "--json"))
    assert run.json()["producers"] == [state]


def test_describe_producers_failures(broker: BrokerProcess) -> None:
    failed(txn(broker, "describe-producers", "--topic", "txn-nowhere", "--partition", "0"),
           "UNKNOWN_TOPIC_OR_PARTITION")
    topic = topic_name("txn-one")
    create(broker, topic)
    failed(txn(broker, "describe-producers", "--topic", topic, "--partition", "3"),
           "UNKNOWN_TOPIC_OR_PARTITION")


# ---- transactions ------------------------------------------------------------------------

def test_an_open_then_committed_transaction(broker: BrokerProcess) -> None:
    topic = topic_name("txn-open")
    create(broker, topic, 2)
    transactional_id = topic_name("tx")
    producer = transactional_producer(broker, transactional_id)
    producer.begin_transaction()
    producer.produce(topic, b"a", partition=1)
    producer.produce(topic, b"b", partition=1)
    assert producer.flush(20) == 0

    (state,) = producers_of(broker, topic, 1)
    assert state["current_transaction_start_offset"] == 0

    listed = ok(txn(broker, "list", "--json")).json()
    (mine,) = [t for t in listed if t["transactional_id"] == transactional_id]
    assert (mine["producer_id"], mine["state"], mine["coordinator"]) == (
        state["producer_id"], "Ongoing", 1)
    table = ok(txn(broker, "list")).out.splitlines()
    assert table[0].split() == ["TransactionalId", "Coordinator", "ProducerId",
                                "TransactionState"]
    assert [transactional_id, "1", str(state["producer_id"]), "Ongoing"] in [
        line.split() for line in table[1:]]

    described = ok(txn(broker, "describe", "--transactional-id", transactional_id,
                       "--json")).json()
    assert (described["producer_id"], described["state"], described["topic_partitions"],
            described["transaction_timeout_ms"]) == (
        state["producer_id"], "Ongoing", [{"topic": topic, "partition": 1}], 60_000)
    assert described["transaction_duration_ms"] >= 0

    producer.commit_transaction(20)
    (state,) = producers_of(broker, topic, 1)
    assert state["current_transaction_start_offset"] is None
    assert state["coordinator_epoch"] is not None
    described = ok(txn(broker, "describe", "--transactional-id", transactional_id,
                       "--json")).json()
    assert described["state"] in ("CompleteCommit", "Empty")
    assert described["topic_partitions"] == []
    run = ok(txn(broker, "describe", "--transactional-id", transactional_id))
    assert run.out.splitlines()[0].split()[:2] == ["CoordinatorId", "TransactionalId"]

    failed(txn(broker, "describe", "--transactional-id", topic_name("tx-unknown")),
           "TRANSACTIONAL_ID_NOT_FOUND")


def test_abort_by_start_offset(broker: BrokerProcess) -> None:
    topic = topic_name("txn-abort")
    create(broker, topic)
    producer = transactional_producer(broker, topic_name("tx-abort"))
    producer.begin_transaction()
    producer.produce(topic, b"x", partition=0)
    assert producer.flush(20) == 0
    (state,) = producers_of(broker, topic)
    start = state["current_transaction_start_offset"]
    assert start == 0

    run = ok(txn(broker, "abort", "--topic", topic, "--partition", "0", "--start-offset",
                 str(start), "--json"))
    assert json.loads(run.out) == {
        "topic": topic, "partition": 0, "producer_id": state["producer_id"],
        "producer_epoch": state["producer_epoch"], "coordinator_epoch": 0, "aborted": True}
    (state,) = producers_of(broker, topic)
    assert state["current_transaction_start_offset"] is None
    failed(txn(broker, "abort", "--topic", topic, "--partition", "0", "--start-offset",
               str(start)), f"could not find any open transaction starting at offset {start}")


def test_find_hanging(broker: BrokerProcess) -> None:
    topic = topic_name("txn-hanging")
    create(broker, topic)
    producer = transactional_producer(broker, topic_name("tx-live"))
    producer.begin_transaction()
    producer.produce(topic, b"x", partition=0)
    assert producer.flush(20) == 0
    time.sleep(0.05)
    # Open, and silent for longer than 0 minutes, but its coordinator counts the
    # partition in the transaction: not hanging.
    run = ok(txn(broker, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0",
                 "--json"))
    assert run.json() == []
    run = ok(txn(broker, "find-hanging", "--broker-id", "1"))
    assert run.out.splitlines()[0].split() == [
        "Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
        "StartOffset", "LastTimestamp", "Duration(min)"]
    producer.abort_transaction(20)
