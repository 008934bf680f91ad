"""Topic rules as Kafka enforces them, seen through a real admin client and producer:
names, partitions and replication factor bounds, internal topics, min.insync.replicas."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerProcess


def create_error(broker: BrokerProcess, topic: NewTopic) -> KafkaError | None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        admin.create_topics([topic], request_timeout=30)[topic.topic].result(30)
    except KafkaException as e:
        return e.args[0]
    return None


@pytest.mark.parametrize(("name", "why"), [
    ("bad name", "illegal"), ("a" * 250, "longer than 249"), ("..", "cannot be"),
    ("ümlaut", "illegal"),
])
def test_illegal_topic_names(broker: BrokerProcess, name: str, why: str) -> None:
    error = create_error(broker, NewTopic(name, 1, 1))
    assert error is not None and error.code() == KafkaError.TOPIC_EXCEPTION
    assert why in error.str()


def test_dot_and_underscore_collide(broker: BrokerProcess) -> None:
    assert create_error(broker, NewTopic("metrics.cpu", 1, 1)) is None
    error = create_error(broker, NewTopic("metrics_cpu", 1, 1))
    assert error is not None and error.code() == KafkaError.TOPIC_EXCEPTION
    assert "collides" in error.str()
    error = create_error(broker, NewTopic("metrics.cpu", 1, 1))
    assert error is not None and error.code() == KafkaError.TOPIC_ALREADY_EXISTS


def test_partition_and_replication_bounds(broker: BrokerProcess) -> None:
    error = create_error(broker, NewTopic("no-partitions", 0, 1))
    assert error is not None and error.code() == KafkaError.INVALID_PARTITIONS
    error = create_error(broker, NewTopic("three-copies", 1, 3))  # one broker only
    assert error is not None and error.code() == KafkaError.INVALID_REPLICATION_FACTOR
    error = create_error(broker, NewTopic("bad-config", 1, 1, config={"retention.ms": "soon"}))
    assert error is not None and error.code() == KafkaError.INVALID_CONFIG
    assert "retention.ms" in error.str()
    error = create_error(broker, NewTopic("unknown-config", 1, 1, config={"colour": "blue"}))
    assert error is not None and error.code() == KafkaError.INVALID_CONFIG
    assert "colour" in error.str()


def test_internal_topics_are_protected(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    failures: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 5000,
                         "allow.auto.create.topics": True})
    producer.produce("__consumer_offsets", b"forged", on_delivery=lambda e, m: failures.append(e))
    producer.flush(15)
    assert failures and failures[0] is not None  # never written
    # Nor auto-created: if it exists, the group coordinator made it (FindCoordinator of
    # some consumer group), with offsets.topic.num.partitions partitions.
    offsets = admin.list_topics(timeout=10).topics.get("__consumer_offsets")
    assert offsets is None or len(offsets.partitions) == 50


def test_acks_all_needs_min_insync_replicas(broker: BrokerProcess) -> None:
    topic = "needs-two-copies"
    assert create_error(broker, NewTopic(topic, 1, 1,
                                         config={"min.insync.replicas": "2"})) is None
    outcomes: list[KafkaError | None] = []
    for acks in ("all", "1"):
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": acks,
                             "message.timeout.ms": 5000, "retries": 0})
        producer.produce(topic, b"x", on_delivery=lambda e, m: outcomes.append(e))
        producer.flush(15)
    error, ok = outcomes
    assert error is not None and error.code() == KafkaError.NOT_ENOUGH_REPLICAS
    assert ok is None  # acks=1 does not wait for other replicas
