"""Client quotas (KIP-13, KIP-124, KIP-546, KIP-599) on a real broker: set and read with
AlterClientQuotas and DescribeClientQuotas (neither confluent-kafka 2.x nor kafka-python has
them: they go over the wire here, as kafka-configs.sh sends them), enforced on
confluent-kafka producers and consumers (byte rates), on clients hammering the broker
(request_percentage) and on topic creation and deletion (controller_mutation_rate), and
kept across a restart."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any, cast

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerProcess
from support.quota_wire import Wire, alter_quotas, describe_quotas, existing

from odradek.protocol.errors import ErrorCode
from odradek.protocol.message import Message
from odradek.protocol.messages import create_partitions_request as create_partitions
from odradek.protocol.messages import create_topics_request as create_topics
from odradek.protocol.messages import delete_topics_request as delete_topics
from odradek.protocol.messages import describe_client_quotas_request as describe
from odradek.protocol.messages.api_versions_request import ApiVersionsRequest
from odradek.protocol.messages.metadata_request import MetadataRequest
from odradek.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from odradek.protocol.records import build_record_batch

QUOTA = 256 * 1024  # bytes per second
VALUE = b"x" * 1000
# Two 1-second samples (Kafka's are 11): a client's first burst is one window's worth (as
# in Kafka, the rate's window is at least quota.window.num - 1 samples long), then the
# quota holds on average, a burst and a pause each 2 s (as the sample of a burst expires):
# measured over whole periods, from 1.5 s (the bursts come a little after 2, 4, 6 s).
# controller_mutation_rate's bucket holds rate x 1 x 1 s of partitions (Kafka's 11 samples
# would let a rate of 2 create 22 at once).
SETTINGS = {"quota.window.num": "2", "quota.window.size.seconds": "1",
            "controller.quota.window.num": "1", "controller.quota.window.size.seconds": "1"}
WARMUP_S, MEASURE_S = 1.5, 6.0
RUN_S = 8.0


@pytest.fixture
def quota_broker(tmp_path) -> Iterator[BrokerProcess]:  # type: ignore[no-untyped-def]
    process = BrokerProcess(tmp_path / "data", SETTINGS).start()
    yield process
    process.kill()
    assert "Traceback" not in process.log_text(), process.log_text()


def test_alter_and_describe_client_quotas_as_kafka(quota_broker: BrokerProcess) -> None:
    wire = Wire(quota_broker.bootstrap)
    try:
        assert alter_quotas(wire, {"user": "alice"}, {"producer_byte_rate": 1024,
                                                      "request_percentage": 12.5}) == (0, None)
        assert alter_quotas(wire, {"user": "alice", "client-id": None},
                            {"consumer_byte_rate": 2048}, version=0) == (0, None)
        assert alter_quotas(wire, {"client-id": "app 1"}, {"producer_byte_rate": 4096}) == (
            0, None)
        assert alter_quotas(wire, {"user": None}, {"consumer_byte_rate": 1}) == (0, None)
        # validate_only changes nothing; Kafka's refusals.
        assert alter_quotas(wire, {"client-id": "other"}, {"producer_byte_rate": 5},
                            validate_only=True) == (0, None)
        code, message = alter_quotas(wire, {"user": "alice"}, {"unknown_rate": 5})
        assert code == ErrorCode.INVALID_REQUEST and "Invalid configuration key" in str(message)
        assert alter_quotas(wire, {"user": "alice"}, {"producer_byte_rate": 1.5})[0] == (
            ErrorCode.INVALID_REQUEST)
        assert alter_quotas(wire, {"user": "alice"}, {"producer_byte_rate": -5})[0] == (
            ErrorCode.INVALID_REQUEST)
        # Infinite: no long, as Kafka says; a percentage stored as Java writes it.
        code, message = alter_quotas(wire, {"user": "alice"},
                                     {"producer_byte_rate": float("inf")})
        assert code == ErrorCode.INVALID_REQUEST and "must be a Long value" in str(message)
        assert alter_quotas(wire, {"client-id": "unbounded"},
                            {"request_percentage": float("inf")}) == (0, None)
        assert alter_quotas(wire, {"client-id": "unbounded"},
                            {"request_percentage": None}) == (0, None)
        assert alter_quotas(wire, {}, {"producer_byte_rate": 5})[0] == ErrorCode.INVALID_REQUEST
        assert alter_quotas(wire, {"user": ""}, {"producer_byte_rate": 5})[0] == (
            ErrorCode.INVALID_REQUEST)
        assert alter_quotas(wire, {"ip": "1.2.3.4", "user": "a"},
                            {"producer_byte_rate": 5})[0] == ErrorCode.INVALID_REQUEST

        everything = describe_quotas(wire)
        assert everything == {
            (("user", "alice"),): {"producer_byte_rate": 1024.0, "request_percentage": 12.5},
            (("user", "alice"), ("client-id", None)): {"consumer_byte_rate": 2048.0},
            (("client-id", "app 1"),): {"producer_byte_rate": 4096.0},
            (("user", None),): {"consumer_byte_rate": 1.0},
        }
        exact = describe.ComponentData(entity_type="user", match_type=0, match="alice")
        assert set(describe_quotas(wire, [exact])) == {
            (("user", "alice"),), (("user", "alice"), ("client-id", None))}
        assert set(describe_quotas(wire, [exact], strict=True)) == {(("user", "alice"),)}
        default = describe.ComponentData(entity_type="user", match_type=1, match=None)
        assert set(describe_quotas(wire, [default], version=0)) == {(("user", None),)}
        response = wire.call(describe.DescribeClientQuotasRequest(components=[
            describe.ComponentData(entity_type="user", match_type=2),
            describe.ComponentData(entity_type="user", match_type=2)]))
        assert response.error_code == ErrorCode.INVALID_REQUEST
        # Removing a key; an entity without keys is gone.
        assert alter_quotas(wire, {"user": None}, {"consumer_byte_rate": None}) == (0, None)
        assert (("user", None),) not in describe_quotas(wire)
    finally:
        wire.close()
    # The quotas are durable.
    quota_broker.restart()
    wire = Wire(quota_broker.bootstrap)
    try:
        assert describe_quotas(wire) == {
            (("user", "alice"),): {"producer_byte_rate": 1024.0, "request_percentage": 12.5},
            (("user", "alice"), ("client-id", None)): {"consumer_byte_rate": 2048.0},
            (("client-id", "app 1"),): {"producer_byte_rate": 4096.0},
        }
    finally:
        wire.close()


@pytest.mark.parametrize("version", [9, 5], ids=["KIP-219", "before-KIP-219"])
def test_a_throttled_connection_is_muted_for_kafkas_throttle_time(
        quota_broker: BrokerProcess, version: int) -> None:
    """Kafka's throttle time for a produce far over its quota, answered in throttle_time_ms;
    the connection then serves nothing for that long (v6+: muted after the response;
    before: the response itself waits)."""
    bootstrap = quota_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("muted", 1, 1)])["muted"].result(30)
    wire = Wire(bootstrap)
    try:
        assert alter_quotas(wire, {"client-id": "muted"}, {"producer_byte_rate": 10_000}) == (
            0, None)
        batch = build_record_batch([(None, b"y" * 20_000)], base_timestamp=int(time.time() * 1000))
        request = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[TopicProduceData(
            name="muted", partition_data=[PartitionProduceData(index=0, records=batch)])])
        began = time.monotonic()
        response = wire.call(request, version, client_id="muted")
        answered = time.monotonic() - began
        # About 20 KB over the first window (one second: two samples): rate 20 KB/s,
        # (20 - 10) / 10 * 1000 ms = 1 s and a little for the request's headers.
        assert 1000 <= response.throttle_time_ms <= 1100, response.throttle_time_ms
        wire.call(ApiVersionsRequest(), 0, client_id="muted")
        served = time.monotonic() - began
        assert served >= response.throttle_time_ms / 1000 * 0.95
        if version < 6:
            assert answered >= response.throttle_time_ms / 1000 * 0.95
    finally:
        wire.close()


class Meter:
    """Bytes delivered or consumed, by time, for the rate over the measured interval."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.events: list[tuple[float, int]] = []
        self.lock = threading.Lock()

    def add(self, nbytes: int) -> None:
        with self.lock:
            self.events.append((time.monotonic() - self.start, nbytes))

    def rate(self, begin: float, end: float) -> float:
        with self.lock:
            total = sum(n for t, n in self.events if begin <= t < end)
        return total / (end - begin)


def produce_for(bootstrap: str, client_id: str, topic: str, seconds: float,
                meter: Meter) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id,
                         "linger.ms": 5, "batch.size": 16384,
                         "queue.buffering.max.messages": 2000,
                         "message.timeout.ms": 60_000})

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            meter.add(len(msg.value()))

    deadline = meter.start + seconds
    while time.monotonic() < deadline:
        try:
            producer.produce(topic, VALUE, on_delivery=delivered)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.purge()
    producer.flush(10)


def test_a_producer_over_its_quota_is_throttled(quota_broker: BrokerProcess) -> None:
    bootstrap = quota_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("quota-produce", 1, 1)])["quota-produce"].result(30)
    wire = Wire(bootstrap)
    try:
        assert alter_quotas(wire, {"client-id": "throttled"},
                            {"producer_byte_rate": QUOTA}) == (0, None)
    finally:
        wire.close()
    throttled, free = Meter(), Meter()
    seconds = RUN_S
    other = threading.Thread(target=produce_for,
                             args=(bootstrap, "unthrottled", "quota-produce", seconds, free))
    other.start()
    produce_for(bootstrap, "throttled", "quota-produce", seconds, throttled)
    other.join(30)
    measured = throttled.rate(WARMUP_S, WARMUP_S + MEASURE_S)
    unthrottled = free.rate(WARMUP_S, WARMUP_S + MEASURE_S)
    print(f"producer: throttled {measured / 1024:.0f} KiB/s against a quota of "
          f"{QUOTA / 1024:.0f} KiB/s; another client id {unthrottled / 1024:.0f} KiB/s")
    assert abs(measured - QUOTA) <= 0.2 * QUOTA, measured
    assert unthrottled > 2 * QUOTA, unthrottled


def test_a_consumer_over_its_quota_is_throttled(quota_broker: BrokerProcess) -> None:
    bootstrap = quota_broker.bootstrap
    topic = "quota-fetch"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    # Batches well under a quota window: a batch larger than the most a throttled fetch
    # may return (quota x (quota.window.num - 1) windows) is never returned, as in Kafka.
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 16384})
    for _ in range(6000):  # 6 MB: more than the throttled consumer can read meanwhile
        while True:
            try:
                producer.produce(topic, VALUE)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    wire = Wire(bootstrap)
    try:
        assert alter_quotas(wire, {"client-id": "slow-consumer"},
                            {"consumer_byte_rate": QUOTA}) == (0, None)
    finally:
        wire.close()

    def consume(client_id: str, meter: Meter, seconds: float) -> None:
        # Fetches of 32 KiB: a fetch of a whole quota window (the most the broker returns
        # to a throttled consumer) is followed by a throttled one, answered empty, as in
        # Kafka: with two samples such a consumer gets half its quota.
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": client_id,
                             "client.id": client_id, "enable.auto.commit": False,
                             "fetch.max.bytes": 32768, "message.max.bytes": 32768,
                             "max.partition.fetch.bytes": 32768})
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = meter.start + seconds
        try:
            while time.monotonic() < deadline:
                for msg in consumer.consume(500, 0.1):
                    if msg.error() is None:
                        meter.add(len(cast(bytes, msg.value())))
        finally:
            consumer.close()

    slow, fast = Meter(), Meter()
    seconds = RUN_S
    other = threading.Thread(target=consume, args=("fast-consumer", fast, seconds))
    other.start()
    consume("slow-consumer", slow, seconds)
    other.join(30)
    measured = slow.rate(WARMUP_S, WARMUP_S + MEASURE_S)
    total_fast = sum(n for _, n in fast.events)
    print(f"consumer: throttled {measured / 1024:.0f} KiB/s against a quota of "
          f"{QUOTA / 1024:.0f} KiB/s; another client id read {total_fast / 1024:.0f} KiB "
          f"in {seconds:.0f} s")
    assert abs(measured - QUOTA) <= 0.2 * QUOTA, measured
    assert total_fast >= 6000 * len(VALUE)  # all of it, unthrottled


# ---- request_percentage (KIP-124) -------------------------------------------------------


def hammer(bootstrap: str, client_id: str, seconds: float,
           calls: list[tuple[str, Message, int]]) -> tuple[list[tuple[str, int]], float]:
    """Sends the calls in turn, each as soon as the last is answered, for `seconds`: each
    answer's (api, throttle_time_ms), and the time taken."""
    wire = Wire(bootstrap)
    answers: list[tuple[str, int]] = []
    began = time.monotonic()
    try:
        while time.monotonic() - began < seconds:
            name, body, version = calls[len(answers) % len(calls)]
            answers.append((name, wire.call(body, version, client_id=client_id)
                            .throttle_time_ms))
    finally:
        wire.close()
    return answers, time.monotonic() - began


def test_a_client_over_its_request_percentage_is_held_down(
        quota_broker: BrokerProcess) -> None:
    """A client id with request_percentage=0.01 (a hundredth of a percent of one thread:
    100 us a second) hammering ApiVersions, Metadata and Produce gets throttle times of at
    most one window (1 s) and is muted for them; another client id, hammering alongside,
    is never throttled."""
    bootstrap = quota_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("hammered", 1, 1)])["hammered"].result(30)
    wire = Wire(bootstrap)
    try:
        assert alter_quotas(wire, {"client-id": "hammer"}, {"request_percentage": 0.01}) == (
            0, None)
    finally:
        wire.close()
    batch = build_record_batch([(None, b"z" * 100)], base_timestamp=int(time.time() * 1000))
    calls: list[tuple[str, Message, int]] = [
        ("ApiVersions", ApiVersionsRequest(client_software_name="hammer",
                                           client_software_version="1"), 3),
        ("Metadata", MetadataRequest(topics=None, allow_auto_topic_creation=False), 12),
        ("Produce", ProduceRequest(acks=1, timeout_ms=5000, topic_data=[TopicProduceData(
            name="hammered", partition_data=[PartitionProduceData(index=0, records=batch)])]),
         9),
    ]
    seconds = 4.0
    free: list[tuple[list[tuple[str, int]], float]] = []
    other = threading.Thread(target=lambda: free.append(hammer(bootstrap, "free", seconds,
                                                                calls)))
    other.start()
    answers, elapsed = hammer(bootstrap, "hammer", seconds, calls)
    other.join(30)
    (free_answers, _), = free
    throttles = [t for _, t in answers]
    print(f"request_percentage: the throttled client id made {len(answers)} requests in "
          f"{elapsed:.1f} s (throttle times {throttles}); another made {len(free_answers)}")
    # Every API answers with the request quota's throttle time, at most one window.
    for name, _, _ in calls:
        assert any(t > 0 for n, t in answers if n == name), (name, answers)
    assert max(throttles) <= 1000
    # Muted for each throttle time (but the last, which comes after the last answer).
    assert elapsed >= sum(throttles[:-1]) / 1000 * 0.95
    assert len(answers) <= 60
    assert all(t == 0 for _, t in free_answers)
    assert len(free_answers) >= 10 * len(answers)


# ---- controller_mutation_rate (KIP-599) -------------------------------------------------


def create_topics_request(names: list[str], partitions: int = 1
                          ) -> create_topics.CreateTopicsRequest:
    return create_topics.CreateTopicsRequest(topics=[create_topics.CreatableTopic(
        name=n, num_partitions=partitions, replication_factor=1) for n in names],
        timeout_ms=30_000)


def set_mutation_rate(bootstrap: str, client_id: str, rate: float) -> None:
    wire = Wire(bootstrap)
    try:
        assert alter_quotas(wire, {"client-id": client_id},
                            {"controller_mutation_rate": rate}) == (0, None)
        assert describe_quotas(wire)[(("client-id", client_id),)] == {
            "controller_mutation_rate": rate}
    finally:
        wire.close()


def test_create_topics_v6_plus_refuses_topics_over_the_controller_mutation_rate(
        quota_broker: BrokerProcess) -> None:
    """Kafka's strict quota: a rate of 2 (a bucket of 2 partitions here) takes topics while
    the bucket is not below zero — the third takes it to -1 — then refuses each with
    THROTTLING_QUOTA_EXCEEDED and the time until it is back to zero."""
    bootstrap = quota_broker.bootstrap
    set_mutation_rate(bootstrap, "strict", 2)
    names = [f"strict-{i}" for i in range(10)]
    wire = Wire(bootstrap)
    try:
        response = wire.call(create_topics_request(names), 7, client_id="strict")
    finally:
        wire.close()
    codes = {t.name: t.error_code for t in response.topics}
    created = [n for n in names if codes[n] == ErrorCode.NONE]
    refused = [n for n in names if codes[n] == ErrorCode.THROTTLING_QUOTA_EXCEEDED]
    print(f"controller_mutation_rate=2: created {created}, refused {refused}, throttle "
          f"{response.throttle_time_ms} ms")
    assert created + refused == names  # in order: once refused, the rest are too
    assert len(created) >= 3 and refused, codes  # 3 unless creating took a second
    assert 0 < response.throttle_time_ms <= 1000
    assert all(t.error_message == "The throttling quota has been exceeded."
               and t.num_partitions == -1 for t in response.topics if t.name in refused)
    assert existing(bootstrap, names) == set(created)


def test_old_create_topics_versions_create_every_topic_and_are_throttled(
        quota_broker: BrokerProcess) -> None:
    """Kafka's permissive quota for CreateTopics v0-v5: every topic created, the bucket
    left at 2 - 10 = -8, and the response throttled for the 4 s it needs to refill; the
    connection is not read meanwhile."""
    bootstrap = quota_broker.bootstrap
    set_mutation_rate(bootstrap, "permissive", 2)
    names = [f"permissive-{i}" for i in range(10)]
    wire = Wire(bootstrap)
    try:
        began = time.monotonic()
        response = wire.call(create_topics_request(names), 5, client_id="permissive")
        assert [t.error_code for t in response.topics] == [0] * 10
        assert 3000 < response.throttle_time_ms <= 4000, response.throttle_time_ms
        wire.call(ApiVersionsRequest(), 0, client_id="permissive")
        assert time.monotonic() - began >= response.throttle_time_ms / 1000 * 0.95
    finally:
        wire.close()
    assert existing(bootstrap, names) == set(names)


def test_delete_topics_and_create_partitions_count_partitions(
        quota_broker: BrokerProcess) -> None:
    """DeleteTopics v5+ and CreatePartitions v3+ are strict too: a topic's partitions are
    what it deletes or adds. Versions before are permissive."""
    bootstrap = quota_broker.bootstrap
    names = [f"doomed-{i}" for i in range(3)]
    wire = Wire(bootstrap)
    try:
        created = wire.call(create_topics_request([*names, "grown-0", "grown-1"], 2), 7)
        assert [t.error_code for t in created.topics] == [0] * 5
    finally:
        wire.close()
    set_mutation_rate(bootstrap, "deleter", 2)
    wire = Wire(bootstrap)
    try:
        response = wire.call(delete_topics.DeleteTopicsRequest(
            topics=[delete_topics.DeleteTopicState(name=n) for n in names],
            timeout_ms=30_000), 6, client_id="deleter")
    finally:
        wire.close()
    # 2 tokens: the first topic's 2 partitions leave 0, the second's -2, the third waits.
    assert [r.error_code for r in response.responses] == [
        0, 0, ErrorCode.THROTTLING_QUOTA_EXCEEDED]
    assert 0 < response.throttle_time_ms <= 1000
    assert existing(bootstrap, names) == {"doomed-2"}

    set_mutation_rate(bootstrap, "grower", 2)
    wire = Wire(bootstrap)
    try:
        grow = create_partitions.CreatePartitionsRequest(topics=[
            create_partitions.CreatePartitionsTopic(name=n, count=5, assignments=None)
            for n in ("grown-0", "grown-1")], timeout_ms=30_000)
        response = wire.call(grow, 3, client_id="grower")
        assert [(r.name, r.error_code) for r in response.results] == [
            ("grown-0", 0), ("grown-1", ErrorCode.THROTTLING_QUOTA_EXCEEDED)]
        assert 0 < response.throttle_time_ms <= 1500
    finally:
        wire.close()
    # CreatePartitions v2 takes it whatever the bucket (below zero, or not far above:
    # grown-1's 3 partitions take it below), and throttles.
    wire = Wire(bootstrap)
    try:
        response = wire.call(grow, 2, client_id="grower")
        assert [(r.name, r.error_code) for r in response.results] == [
            ("grown-0", ErrorCode.INVALID_PARTITIONS), ("grown-1", 0)]
        assert response.throttle_time_ms > 0
    finally:
        wire.close()
