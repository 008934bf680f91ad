"""Clients older than Kafka 2.1 against a real broker process: they use the API versions
Kafka 4.0 removed and ZooKeeper-mode Kafka 3.9 still serves (docs/broker.md "Old
versions").

- kafka-python pinned to a broker version sends what that version spoke: with
  `api_version=(0, 9)` Metadata v0, Produce v1 with magic 0 message sets, Fetch v1 (magic 0
  down-converted from the log's v2 batches), ListOffsets v0, FindCoordinator v0 and the
  group APIs at v0; with `(0, 10, 1)` magic 1 (timestamps) and Fetch v3; `(0, 8, 2)` and
  `(0, 8, 1)` commit offsets with OffsetCommit v1 and v0.
- librdkafka without ApiVersions (`api.version.request=false`), falling back to 0.9.0 or
  0.8.2 (librdkafka 2.x takes any fallback from 0.10 on as a reason to ask after all).
- Debian's kcat (librdkafka 2.0), which finds its group coordinator with FindCoordinator v0.
- Debian's Burrow (1.2, sarama speaking Kafka 2.0.0's versions), which reads commits from
  __consumer_offsets and end offsets with ListOffsets, and reports a group's lag.

Each writes keyed records, reads them back byte for byte (also through a current client,
which reads what the old one wrote, and the other way round), joins a group and commits.
"""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerProcess
from support.wait import wait_until
from test_wire import Wire, fetch_request

from odradek.cluster.zookeeper_server import ZooKeeperServer
from odradek.protocol.compression import GZIP, ZSTD
from odradek.protocol.errors import ErrorCode
from odradek.protocol.legacy_records import build_message_set, iter_legacy_records
from odradek.protocol.messages.describe_configs_request import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
)
from odradek.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from odradek.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from odradek.protocol.records import build_record_batch

# kafka-python's pinned versions, the message format each writes and reads.
KAFKA_PYTHON_VERSIONS = {(0, 9): 0, (0, 10, 1): 1}
CODECS = (None, "gzip", "snappy", "lz4")


# Timestamps the tests write: fixed, in 2023, far older than the default retention.ms (7
# days). A topic that holds them must not have retention.ms: the session broker's retention
# pass (every log.retention.check.interval.ms, first 30 s after its start) would otherwise
# delete them in the middle of a test (a consumer then reads only the records that came
# after them, e.g. a current client's record stamped now).
OLD_TIMESTAMP = 1_700_000_000_000
KEEP_OLD_TIMESTAMPS = {"retention.ms": "-1"}


def create_topic(broker: BrokerProcess, config: dict[str, str] | None = None,
                 partitions: int = 2) -> str:
    name = f"old-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(30)
    return name


def records(n: int, tag: str) -> list[tuple[bytes | None, bytes]]:
    # Keys and values of varied sizes; one null key.
    return [(None if i == 3 else f"{tag}-k{i}".encode(), (f"{tag} v{i} " * (1 + i % 5)).encode())
            for i in range(n)]


def read_current(broker: BrokerProcess, topic: str, count: int,
                 partitions: int = 2) -> list[Any]:
    """Every record of the topic through a current client (librdkafka, Fetch v12+)."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "reader",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[Any] = []
    try:
        for _ in range(200):
            if len(out) >= count:
                break
            out += [m for m in consumer.consume(count, 0.2) if m.error() is None]
    finally:
        consumer.close()
    return out


def committed(broker: BrokerProcess, group: str, topic: str, partitions: int = 2) -> list[int]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 30)
    finally:
        consumer.close()
    return [tp.offset for tp in found]


# ---- kafka-python pinned to old broker versions -----------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c or "none")
@pytest.mark.parametrize("api_version", list(KAFKA_PYTHON_VERSIONS), ids=str)
def test_kafka_python_pinned(broker: BrokerProcess, api_version: tuple[int, ...],
                             codec: str | None) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    magic = KAFKA_PYTHON_VERSIONS[api_version]
    topic = create_topic(broker, KEEP_OLD_TIMESTAMPS)
    sent = records(30, f"kp{magic}")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=api_version,
                             compression_type=codec, linger_ms=5, acks="all")
    futures = [producer.send(topic, key=k, value=v, partition=i % 2,
                             timestamp_ms=OLD_TIMESTAMP + i if magic else None)
               for i, (k, v) in enumerate(sent)]
    producer.flush(30)
    metas = [f.get(30) for f in futures]
    producer.close()
    for p in (0, 1):  # acknowledged at dense offsets from 0 in each partition
        assert sorted(m.offset for m in metas if m.partition == p) == list(range(15))

    # Stored as v2 batches: a current client reads exactly what was written.
    current = read_current(broker, topic, len(sent))
    assert sorted(((m.key(), m.value()) for m in current), key=repr) == sorted(sent, key=repr)
    if magic == 1:
        assert sorted(m.timestamp()[1] for m in current) == [
            OLD_TIMESTAMP + i for i in range(30)]
    else:  # magic 0 has no timestamps: Kafka's converted records carry none
        assert {m.timestamp()[1] for m in current} == {-1}

    # A record written by a current client, with headers, read by the old one: the
    # headers cannot be expressed in magic 0/1 and are dropped.
    modern = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "zstd"})
    modern.produce(topic, key=b"modern", value=b"from v2", partition=0,
                   headers=[("h", b"x")])
    modern.flush(30)

    group = f"g-{topic}"
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap,
                             api_version=api_version, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=20_000)
    got = []
    for message in consumer:
        got.append(message)
        if len(got) == len(sent) + 1:
            break
    consumer.commit()
    consumer.close()
    assert sorted(((m.key, m.value) for m in got), key=repr) == sorted(
        [*sent, (b"modern", b"from v2")], key=repr)
    by_partition = {p: [m.offset for m in got if m.partition == p] for p in (0, 1)}
    assert by_partition == {0: list(range(16)), 1: list(range(15))}
    if magic == 1:
        assert sorted(m.timestamp for m in got if m.key != b"modern") == [
            OLD_TIMESTAMP + i for i in range(30)]
    assert committed(broker, group, topic) == [16, 15]


@pytest.mark.parametrize("api_version", [(0, 8, 2), (0, 8, 1)], ids=str)
def test_kafka_python_old_offset_commits(broker: BrokerProcess,
                                         api_version: tuple[int, ...]) -> None:
    """OffsetCommit/OffsetFetch v1 (0.8.2) and v0 (0.8.1): a client that assigns its own
    partitions commits and reads back its offsets."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition
    from kafka.structs import OffsetAndMetadata

    topic = create_topic(broker, partitions=1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=(0, 9))
    for k, v in records(10, "old"):
        producer.send(topic, key=k, value=v)
    producer.flush(30)
    producer.close()
    group = f"g-{topic}"
    tp = KTopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=api_version,
                             group_id=group, enable_auto_commit=False)
    consumer.assign([tp])
    consumer.commit({tp: OffsetAndMetadata(7, "", -1)})
    assert consumer.committed(tp) == 7
    consumer.close()


# ---- librdkafka without ApiVersions --------------------------------------------------------


@pytest.mark.parametrize("fallback", ["0.9.0", "0.8.2"])
def test_librdkafka_without_api_versions(broker: BrokerProcess, fallback: str) -> None:
    old = {"bootstrap.servers": broker.bootstrap, "api.version.request": False,
           "broker.version.fallback": fallback}
    topic = create_topic(broker)
    sent = records(40, fallback)
    producer = Producer({**old, "compression.type": "gzip", "linger.ms": 5})
    delivered: list[Any] = []
    for i, (k, v) in enumerate(sent):
        producer.produce(topic, key=k, value=v, partition=i % 2,
                         on_delivery=lambda err, msg: delivered.append((err, msg)))
    assert producer.flush(30) == 0
    assert [err for err, _ in delivered if err is not None] == []
    assert sorted(m.offset() for _, m in delivered) == sorted(list(range(20)) * 2)

    group = f"g-{topic}"
    consumer = Consumer({**old, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    if fallback == "0.8.2":  # no group membership before 0.9: partitions are assigned
        consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
    else:
        consumer.subscribe([topic])
    got: list[Any] = []
    for _ in range(300):
        if len(got) >= len(sent):
            break
        got += [m for m in consumer.consume(len(sent), 0.2) if m.error() is None]
    consumer.commit(offsets=[TopicPartition(topic, p, 20) for p in (0, 1)],
                    asynchronous=False)
    consumer.close()
    assert sorted(((m.key(), m.value()) for m in got), key=repr) == sorted(sent, key=repr)
    assert committed(broker, group, topic) == [20, 20]


# ---- Debian's kcat in a group ----------------------------------------------------------


def test_kcat_balanced_consumer(broker: BrokerProcess) -> None:
    topic = create_topic(broker)
    lines = [f"key{i}\tvalue {i}" for i in range(20)]
    subprocess.run(["kcat", "-P", "-b", broker.bootstrap, "-t", topic, "-K", "\t"],
                   input="\n".join(lines).encode(), check=True, timeout=60)
    group = f"g-{topic}"
    # -G: a member of the group (FindCoordinator v0 on librdkafka 2.0); -e: exit at the end.
    done = subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-G", group, "-X", "auto.offset.reset=earliest",
         "-e", "-f", "%k\t%s\n", topic],
        capture_output=True, timeout=90, check=True)
    assert sorted(done.stdout.decode().splitlines()) == sorted(lines)
    assert sum(committed(broker, group, topic)) == 20


# ---- Produce v0-v2 and Fetch v0-v3 on the wire -------------------------------------------


def produce(wire: Wire, topic: str, records: bytes, version: int) -> Any:
    response: Any = wire.call(ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[
        TopicProduceData(name=topic, partition_data=[
            PartitionProduceData(index=0, records=records)])]), version)
    return response.responses[0].partition_responses[0]


def fetch(wire: Wire, topic: str, offset: int, version: int) -> Any:
    response: Any = wire.call(fetch_request(topic, offset, max_wait_ms=0, min_bytes=0), version)
    return response.responses[0].partitions[0]


def test_legacy_sets_are_stored_as_v2_and_served_in_each_format(broker: BrokerProcess) -> None:
    topic = create_topic(broker, KEEP_OLD_TIMESTAMPS, partitions=1)
    wire = Wire(broker.port)
    magic1 = build_message_set([(i, OLD_TIMESTAMP + i, b"k%d" % i, b"v%d" % i)
                                for i in range(5)], 1, compression=GZIP)
    assert (produce(wire, topic, magic1, 2).error_code, produce(
        wire, topic, build_message_set([(0, -1, None, b"m0")], 0), 0).error_code) == (0, 0)
    # A current client's batch, with a header, read by the old versions without it.
    batch = build_record_batch([(b"k6", b"v6", (("h", b"x"),), OLD_TIMESTAMP + 6)])
    assert produce(wire, topic, batch, 9).error_code == 0

    expected = [(i, b"k%d" % i, b"v%d" % i) for i in range(5)] + [(5, None, b"m0"),
                                                                  (6, b"k6", b"v6")]
    for version, magic in ((0, 0), (1, 0), (2, 1), (3, 1)):
        got: list[Any] = []
        offset = 2  # from the middle of the gzip batch
        while offset < 7:  # a fetch reads one segment (timestamps far apart roll them)
            p = fetch(wire, topic, offset, version)
            assert (p.error_code, p.high_watermark) == (0, 7)
            got += iter_legacy_records(bytes(p.records))
            offset = got[-1].offset + 1
        assert {r.magic for r in got} == {magic}
        assert [(r.offset, r.key, r.value) for r in got] == expected[2:]
        if magic == 1:
            assert [r.timestamp for r in got] == [
                OLD_TIMESTAMP + 2, OLD_TIMESTAMP + 3, OLD_TIMESTAMP + 4, -1,
                OLD_TIMESTAMP + 6]
    wire.close()


def test_corrupt_legacy_sets_are_refused_and_nothing_is_written(broker: BrokerProcess) -> None:
    topic = create_topic(broker, partitions=1)
    wire = Wire(broker.port)
    good = bytearray(build_message_set([(0, 5, b"k", b"v"), (1, 6, b"k", b"w")], 1))
    bad_crc = bytes(good[:-1]) + bytes([good[-1] ^ 1])
    p = produce(wire, topic, bad_crc, 2)
    assert p.error_code == ErrorCode.CORRUPT_MESSAGE
    assert produce(wire, topic, bytes(good[:-3]), 1).error_code == ErrorCode.CORRUPT_MESSAGE
    zstd_wrapper = build_message_set([(0, 5, b"k", b"v")], 1)
    zstd_wrapper = zstd_wrapper[:17] + bytes([zstd_wrapper[17] | ZSTD]) + zstd_wrapper[18:]
    assert produce(wire, topic, zstd_wrapper, 2).error_code in (
        ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD)
    assert fetch(wire, topic, 0, 4).high_watermark == 0  # nothing of them was written
    assert produce(wire, topic, bytes(good), 2).error_code == 0
    wire.close()


def test_what_old_fetches_cannot_read(broker: BrokerProcess) -> None:
    """zstd batches (Fetch before v10: UNSUPPORTED_COMPRESSION_TYPE, as in Kafka) and a
    topic with message.downconversion.enable=false (UNSUPPORTED_VERSION)."""
    wire = Wire(broker.port)
    zstd_topic = create_topic(broker, partitions=1)
    assert produce(wire, zstd_topic, build_record_batch(
        [(b"k", b"v" * 500)], compression=ZSTD), 9).error_code == 0
    assert fetch(wire, zstd_topic, 0, 3).error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert fetch(wire, zstd_topic, 0, 10).error_code == 0
    strict = create_topic(broker, {"message.downconversion.enable": "false"}, partitions=1)
    assert produce(wire, strict, build_record_batch([(b"k", b"v")]), 9).error_code == 0
    p = fetch(wire, strict, 0, 1)
    assert (p.error_code, bytes(p.records)) == (ErrorCode.UNSUPPORTED_VERSION, b"")
    assert fetch(wire, strict, 1, 1).error_code == 0  # nothing to convert: no error
    assert fetch(wire, strict, 0, 4).error_code == 0
    wire.close()


# ---- ListOffsets v0 ----------------------------------------------------------------------


def test_list_offsets_v0_answers_segment_offsets(broker: BrokerProcess) -> None:
    """Kafka's old-style offsets: the log end and segment base offsets, newest first, up to
    max_num_offsets; earliest is the log start alone."""
    topic = create_topic(broker, {"segment.bytes": "1024"}, partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(40):
        producer.produce(topic, value=b"x" * 200, key=str(i).encode())
        producer.flush(30)  # one batch per record: several segments
    wire = Wire(broker.port)

    def old_style(timestamp: int, max_num: int) -> tuple[int, list[int]]:
        response: Any = wire.call(ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsTopic(
            name=topic, partitions=[ListOffsetsPartition(
                partition_index=0, timestamp=timestamp, max_num_offsets=max_num)])]), 0)
        p = response.topics[0].partitions[0]
        return p.error_code, list(p.old_style_offsets)

    error, latest = old_style(-1, 1000)
    assert error == 0
    assert latest[0] == 40 and latest == sorted(latest, reverse=True) and latest[-1] == 0
    assert len(latest) > 3  # the log end and each segment's base offset
    assert old_style(-1, 1) == (0, [40])
    assert old_style(-2, 10) == (0, [0])
    assert old_style(-1, 3) == (0, latest[:3])
    # Every segment was modified before now + 1 hour: all of them, plus the log end.
    assert old_style(2**62, 1000) == (0, latest)
    assert old_style(1, 1000) == (0, [])  # nothing is that old
    wire.close()


# ---- Burrow ------------------------------------------------------------------------------

BURROW_CONFIG = """
[general]
pidfile="{dir}/burrow.pid"
[logging]
level="info"
[zookeeper]
servers=["{zookeeper}"]
timeout=6
root-path="/burrow"
[client-profile.old]
client-id="burrow"
kafka-version="2.0.0"
[cluster.local]
class-name="kafka"
servers=["{bootstrap}"]
client-profile="old"
topic-refresh=5
offset-refresh=2
[consumer.local]
class-name="kafka"
cluster="local"
servers=["{bootstrap}"]
client-profile="old"
start-latest=false
[httpserver.default]
address="127.0.0.1:{http_port}"
[storage.default]
class-name="inmemory"
workers=2
intervals=10
min-distance=1
"""


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:  # Burrow keeps its state there
    server = ZooKeeperServer(tmp_path / "zookeeper")
    server.start()
    yield server
    server.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_burrow_reports_a_groups_lag(broker: BrokerProcess, zookeeper: ZooKeeperServer,
                                     tmp_path: Path) -> None:
    topic = create_topic(broker)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(100):
        producer.produce(topic, value=b"v", partition=i % 2)
    producer.flush(30)
    group = f"g-{topic}"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    consumer.commit(offsets=[TopicPartition(topic, 0, 30), TopicPartition(topic, 1, 45)],
                    asynchronous=False)
    consumer.close()

    http_port = free_port()
    config_dir = tmp_path / "burrow"
    config_dir.mkdir()
    (config_dir / "burrow.toml").write_text(BURROW_CONFIG.format(
        dir=config_dir, zookeeper=zookeeper.connect_string, bootstrap=broker.bootstrap,
        http_port=http_port))
    with open(config_dir / "burrow.out", "wb") as out:
        burrow = subprocess.Popen(["Burrow", "--config-dir", str(config_dir)], cwd=config_dir,
                                  stdout=out, stderr=subprocess.STDOUT)
    try:
        def lag() -> Any:
            url = f"http://127.0.0.1:{http_port}/v3/kafka/local/consumer/{group}/lag"
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    status = json.load(response)["status"]
            except (urllib.error.URLError, ConnectionError):
                return None  # not listening yet, or the group not seen yet (404)
            return status if status["partition_count"] == 2 else None

        status = wait_until(lag, timeout=60, what="Burrow to report the group's lag")
    finally:
        burrow.terminate()
        burrow.wait(30)
    assert status["totallag"] == 20 + 5
    assert sorted((p["partition"], p["end"]["offset"], p["current_lag"])
                  for p in status["partitions"]) == [(0, 30, 20), (1, 45, 5)]


def test_describe_configs_v0_says_which_values_are_defaults(broker: BrokerProcess) -> None:
    topic = create_topic(broker, {"retention.ms": "1000"}, partitions=1)
    wire = Wire(broker.port)
    response: Any = wire.call(DescribeConfigsRequest(resources=[DescribeConfigsResource(
        resource_type=2, resource_name=topic,
        configuration_keys=["retention.ms", "segment.bytes"])]), 0)
    wire.close()
    configs = {c.name: (c.value, c.is_default) for c in response.results[0].configs}
    assert configs == {"retention.ms": ("1000", False), "segment.bytes": ("1073741824", True)}
