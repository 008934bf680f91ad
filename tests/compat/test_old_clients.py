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
from test_wire import Wire

from odradek.cluster.zookeeper_server import ZooKeeperServer
from odradek.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)

# kafka-python's pinned versions, the message format each writes and reads.
KAFKA_PYTHON_VERSIONS = {(0, 9): 0, (0, 10, 1): 1}
CODECS = (None, "gzip", "snappy", "lz4")


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
    topic = create_topic(broker)
    sent = records(30, f"kp{magic}")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=api_version,
                             compression_type=codec, linger_ms=5, acks="all")
    futures = [producer.send(topic, key=k, value=v, partition=i % 2,
                             timestamp_ms=1_700_000_000_000 + i if magic else None)
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
            1_700_000_000_000 + i for i in range(30)]
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
            1_700_000_000_000 + i for i in range(30)]
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
