"""A broker stopped (SIGTERM) or killed (SIGKILL) and started again keeps everything it
acknowledged, and clients that stayed up reconnect and carry on."""

from __future__ import annotations

import signal

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerProcess

PARTITIONS = 3


def produce(producer: Producer, topic: str, start: int, count: int) -> None:
    failures: list[object] = []
    for i in range(start, start + count):
        producer.produce(topic, key=str(i).encode(), value=f"record {i}".encode(),
                         on_delivery=lambda err, msg: err and failures.append(err))
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not failures, failures[:3]


def consume_all(bootstrap: str, topic: str) -> list[str]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "restart-check",
                         "enable.partition.eof": True, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    values = []
    at_end: set[int] = set()
    try:
        while len(at_end) < PARTITIONS:
            msg = consumer.poll(15)
            assert msg is not None, "the consumer stalled"
            if msg.error():
                assert msg.error().code() == -191, msg.error()  # _PARTITION_EOF
                at_end.add(msg.partition())
            else:
                values.append(msg.value().decode())
    finally:
        consumer.close()
    return values


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_acknowledged_records_survive_a_restart(fresh_broker: BrokerProcess, sig: int) -> None:
    broker = fresh_broker
    topic = "durable"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": 60_000,
                         "reconnect.backoff.max.ms": 200})
    produce(producer, topic, 0, 5000)

    status = broker.stop(sig)
    if sig == signal.SIGTERM:
        assert status == 0
        assert "stopped" in broker.log_text()
        assert (broker.data_dir / ".kafka_cleanshutdown").exists()
    broker.start()
    if sig == signal.SIGKILL:
        assert "recovered" in broker.log_text()  # no clean-shutdown marker: logs re-checked

    # The producer that lived through the restart reconnects and goes on; its idempotent
    # state (producer id, sequences) is still valid on the broker.
    produce(producer, topic, 5000, 5000)
    values = consume_all(broker.bootstrap, topic)
    assert sorted(values, key=lambda v: int(v.split()[1])) == [
        f"record {i}" for i in range(10_000)]
