"""Client quotas (KIP-13, KIP-546) on a real broker: set and read with AlterClientQuotas and
DescribeClientQuotas (neither confluent-kafka 2.x nor kafka-python has them: they go over
the wire here, as kafka-configs.sh sends them), enforced on confluent-kafka producers and
consumers, and kept across a restart."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any, cast

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerProcess

from odradek.protocol.errors import ErrorCode
from odradek.protocol.framing import decode_response, encode_request
from odradek.protocol.message import Message
from odradek.protocol.messages import alter_client_quotas_request as alter
from odradek.protocol.messages import describe_client_quotas_request as describe
from odradek.protocol.messages.api_versions_request import ApiVersionsRequest
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
SETTINGS = {"quota.window.num": "2", "quota.window.size.seconds": "1"}
WARMUP_S, MEASURE_S = 1.5, 6.0
RUN_S = 8.0


class Wire:
    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.correlation = 0

    def call(self, body: Message, version: int = 1, client_id: str = "quota-admin") -> Any:
        self.correlation += 1
        self.sock.sendall(encode_request(body, version, self.correlation, client_id))
        (size,) = struct.unpack(">i", self._exactly(4))
        got, response = decode_response(self._exactly(size), body.API_KEY,  # type: ignore[attr-defined]
                                        version)
        assert got == self.correlation
        return response

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "closed by the broker"
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


def alter_quotas(wire: Wire, entity: dict[str, str | None], ops: dict[str, float | None],
                 validate_only: bool = False, version: int = 1) -> tuple[int, str | None]:
    response = wire.call(alter.AlterClientQuotasRequest(entries=[alter.EntryData(
        entity=[alter.EntityData(entity_type=k, entity_name=v) for k, v in entity.items()],
        ops=[alter.OpData(key=k, value=v or 0.0, remove=v is None) for k, v in ops.items()])],
        validate_only=validate_only), version)
    (entry,) = response.entries
    return entry.error_code, entry.error_message


def describe_quotas(wire: Wire, components: list[describe.ComponentData] | None = None,
                    strict: bool = False, version: int = 1) -> dict[tuple[Any, ...], Any]:
    response = wire.call(describe.DescribeClientQuotasRequest(
        components=components or [], strict=strict), version)
    assert response.error_code == 0, response.error_message
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity):
            {v.key: v.value for v in entry.values} for entry in response.entries}


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
