"""An idempotent producer whose acknowledgements get lost retries batches the broker has
already written: the broker must acknowledge them without writing them twice. The same
run without idempotence shows the duplicates that this prevents."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from support.broker import BrokerProcess
from support.proxy import KafkaProxy

RECORDS = 3000
PARTITIONS = 2


@pytest.fixture
def proxied(tmp_path) -> Iterator[tuple[BrokerProcess, KafkaProxy]]:  # type: ignore[no-untyped-def]
    proxy = KafkaProxy(drop_produce_every=4)
    broker = BrokerProcess(tmp_path / "data", {
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}",
        "num.partitions": str(PARTITIONS),
    })
    broker.start()
    proxy.upstream = ("127.0.0.1", broker.port)
    yield broker, proxy
    proxy.close()
    broker.kill()


def produce_through_lossy_network(proxy: KafkaProxy, topic: str, idempotent: bool,
                                  client: str = "confluent-kafka") -> None:
    if client == "kafka-python":
        return _produce_kafka_python(proxy, topic)
    if client == "aiokafka":
        return asyncio.run(_produce_aiokafka(proxy, topic))
    producer = Producer({
        "bootstrap.servers": f"127.0.0.1:{proxy.port}",
        "enable.idempotence": idempotent, "acks": "all", "linger.ms": 2,
        "batch.num.messages": 50, "retries": 100, "retry.backoff.ms": 10,
        "max.in.flight.requests.per.connection": 5 if idempotent else 1,
        "message.timeout.ms": 60_000, "partitioner": "murmur2_random",
    })
    failures = []
    for i in range(RECORDS):
        producer.produce(topic, key=str(i % 17).encode(), value=str(i).encode(),
                         on_delivery=lambda err, msg: err and failures.append(err))
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not failures, failures[:3]


def _produce_kafka_python(proxy: KafkaProxy, topic: str) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{proxy.port}",
                             enable_idempotence=True, acks="all", linger_ms=2, retries=100,
                             retry_backoff_ms=10, batch_size=2048)
    futures = [producer.send(topic, key=str(i % 17).encode(), value=str(i).encode())
               for i in range(RECORDS)]
    producer.flush(60)
    for future in futures:
        future.get(60)
    producer.close()


async def _produce_aiokafka(proxy: KafkaProxy, topic: str) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{proxy.port}",
                                enable_idempotence=True, acks="all", linger_ms=2,
                                retry_backoff_ms=10, max_batch_size=2048,
                                request_timeout_ms=30_000)
    await producer.start()
    try:
        futures = [await producer.send(topic, key=str(i % 17).encode(), value=str(i).encode())
                   for i in range(RECORDS)]
        for future in futures:
            await future
    finally:
        await producer.stop()


def consume_values(proxy: KafkaProxy, topic: str) -> list[list[int]]:
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{proxy.port}", "group.id": "check",
                         "enable.partition.eof": True, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    values: list[list[int]] = [[] for _ in range(PARTITIONS)]
    at_end: set[int] = set()
    try:
        while len(at_end) < PARTITIONS:
            msg = consumer.poll(10)
            assert msg is not None, "the consumer stalled"
            if msg.error():
                assert msg.error().code() == -191, msg.error()  # _PARTITION_EOF
                at_end.add(msg.partition())
                continue
            values[msg.partition()].append(int(msg.value()))
    finally:
        consumer.close()
    return values


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python", "aiokafka"])
def test_idempotent_producer_retries_write_no_duplicates(proxied, client: str) -> None:  # type: ignore[no-untyped-def]
    _, proxy = proxied
    produce_through_lossy_network(proxy, "exactly-once", idempotent=True, client=client)
    assert proxy.dropped >= 3, "the proxy lost no acknowledgement: nothing was retried"
    per_partition = consume_values(proxy, "exactly-once")
    everything = sorted(v for values in per_partition for v in values)
    assert everything == list(range(RECORDS))  # each record once
    for values in per_partition:
        assert values == sorted(values)  # and in the order produced


def test_without_idempotence_the_same_losses_duplicate_records(proxied) -> None:  # type: ignore[no-untyped-def]
    _, proxy = proxied
    produce_through_lossy_network(proxy, "at-least-once", idempotent=False)
    assert proxy.dropped >= 3
    everything = [v for values in consume_values(proxy, "at-least-once") for v in values]
    assert set(everything) == set(range(RECORDS))
    assert len(everything) > RECORDS  # the retried batches were written twice
