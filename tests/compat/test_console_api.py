"""The web console's JSON API (odradek/console/) on a real broker process, checked against
what real clients did and see: confluent-kafka produces records (keys, JSON and binary
values, headers, explicit timestamps) and runs a consumer group that commits; the console
must show the same sizes, offsets, configs, records byte for byte, group lag (as
`odradek groups describe` prints it), and history; its writes (create a topic, delete
records, reset a group's offsets) must change what the Kafka clients then see, and refuse
what they should with the Kafka error's name."""

from __future__ import annotations

import asyncio
import http.client
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from support.broker import BrokerProcess
from support.console import WRITE, call, decoded, get, write
from support.wait import wait_until

import odradek
from odradek.console.routes import Console
from odradek.server.config import BrokerConfig
from odradek.server.http_server import HttpServer, Readiness

TIMEOUT = 30.0
TOPIC = "orders"
PARTITIONS = 3
COUNT = 30  # records in TOPIC, record i in partition i % 3 with timestamp BASE + i
BASE = int(time.time() * 1000) - 60_000
RETENTION = "86400000"  # TOPIC's override of retention.ms
GROUP = "orders-readers"
COMMITTED = {0: 3, 1: 10, 2: 0}  # what GROUP commits: lags 7, 0 and 10
_admins: list[AdminClient] = []  # kept: a client collected with pending futures fails them


@pytest.fixture(scope="module")
def console_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("console"), {
        "http.listeners": "http://127.0.0.1:0",
        "http.console.write.enabled": "true",
        "http.console.history.interval.ms": "200",
        "auto.create.topics.enable": "false",
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": "3",
    }).start()
    yield process
    _admins.clear()
    process.stop()
    log = process.log_text()
    assert "Traceback" not in log, log
    assert " ERROR " not in log, log


def port(broker: BrokerProcess) -> int:
    assert broker.http_port is not None, "the broker logged no HTTP listener"
    return broker.http_port


def admin(broker: BrokerProcess) -> AdminClient:
    if not _admins:
        _admins.append(AdminClient({"bootstrap.servers": broker.bootstrap}))
    return _admins[0]


def create(broker: BrokerProcess, name: str, partitions: int,
           config: dict[str, str] | None = None) -> None:
    admin(broker).create_topics([NewTopic(name, partitions, 1, config=config or {})])[
        name].result(TIMEOUT)


def record(i: int) -> dict[str, Any]:
    """The i-th record of TOPIC: keys (some null), JSON and binary values (one null),
    headers (binary, null, repeated keys, or none)."""
    key = None if i % 5 == 0 else f"key-{i}".encode()
    if i == 7:
        value = None
    elif i % 2:
        value = bytes([0, 255, 128, i]) + bytes(range(256))[i:i + 20]
    else:
        value = json.dumps({"i": i, "name": "zoë", "nested": {"ok": True}}).encode()
    headers: list[tuple[str, bytes | None]] = []
    if i % 3 == 1:
        headers = [("trace", f"t-{i}".encode()), ("bin", b"\x00\xff\x80"), ("none", None)]
    elif i % 3 == 2:
        headers = [("dup", b"1"), ("dup", b"2")]
    return {"partition": i % PARTITIONS, "timestamp": BASE + i, "key": key, "value": value,
            "headers": headers}


def produce(broker: BrokerProcess, topic: str, records: list[dict[str, Any]]
            ) -> list[tuple[Any, ...]]:
    """Produces the records; answers each as the console shows it decoded: (partition,
    offset, timestamp, key, value, headers), in the order given."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})
    offsets: dict[int, tuple[int, int]] = {}
    errors: list[Any] = []
    for n, r in enumerate(records):
        def done(err: Any, msg: Any, n: int = n) -> None:
            if err is not None:
                errors.append(err)
            else:
                offsets[n] = (msg.partition(), msg.offset())
        kwargs = {k: r[k] for k in ("partition", "timestamp", "key", "headers") if k in r}
        producer.produce(topic, r["value"], on_delivery=done, **kwargs)
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0 and not errors, errors
    return [(*offsets[n], r.get("timestamp"), r.get("key"), r["value"], r.get("headers", []))
            for n, r in enumerate(records)]


@pytest.fixture(scope="module")
def produced(console_broker: BrokerProcess) -> list[tuple[Any, ...]]:
    """TOPIC and its COUNT records, as the console must show them."""
    create(console_broker, TOPIC, PARTITIONS, {"retention.ms": RETENTION})
    return produce(console_broker, TOPIC, [record(i) for i in range(COUNT)])


def member_consumer(broker: BrokerProcess, group: str, topic: str, partitions: int,
                    **settings: Any) -> Consumer:
    """A consumer in `group`, subscribed to `topic`, once it has all its partitions."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         **settings})
    consumer.subscribe([topic])

    def assigned() -> bool:
        consumer.poll(0.2)
        return len(consumer.assignment()) == partitions
    wait_until(assigned, TIMEOUT, f"{group}'s assignment", interval=0)
    return consumer


@pytest.fixture(scope="module")
def committed_group(console_broker: BrokerProcess, produced: list[tuple[Any, ...]]
                    ) -> Iterator[Consumer]:
    """GROUP: one member with all of TOPIC's partitions, COMMITTED committed."""
    consumer = member_consumer(console_broker, GROUP, TOPIC, PARTITIONS)
    consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in COMMITTED.items()],
                    asynchronous=False)
    yield consumer
    consumer.close()


def log_files(broker: BrokerProcess, topic: str, partition: int) -> list[Path]:
    return sorted((broker.data_dir / f"{topic}-{partition}").glob("*.log"))


def size_on_disk(broker: BrokerProcess, topic: str, partition: int) -> int:
    return sum(f.stat().st_size for f in log_files(broker, topic, partition))


def error(status: int, body: Any) -> tuple[int, str]:
    assert isinstance(body, dict) and isinstance(body.get("message"), str), body
    return status, body["error"]


# ---- reads ---------------------------------------------------------------------------------

def test_cluster_counts_what_a_kafka_client_sees(console_broker: BrokerProcess,
                                                 committed_group: Consumer) -> None:
    cluster = get(port(console_broker), "/api/cluster")
    metadata = admin(console_broker).list_topics(timeout=TIMEOUT)
    groups = admin(console_broker).list_consumer_groups().result(TIMEOUT).valid
    assert cluster["topics"] == len(metadata.topics) >= 2  # TOPIC, __consumer_offsets
    assert cluster["partitions"] == sum(len(t.partitions) for t in metadata.topics.values())
    assert cluster["groups"] == len(groups) >= 1
    assert cluster["brokers"] == [{"id": 1, "host": "127.0.0.1", "port": console_broker.port,
                                   "rack": None, "controller": True}]
    assert cluster["cluster_id"] == metadata.cluster_id
    assert (cluster["broker_id"], cluster["controller_id"]) == (1, metadata.controller_id)
    assert (cluster["mode"], cluster["version"]) == ("single node", odradek.__version__)
    assert (cluster["under_replicated"], cluster["offline"], cluster["under_min_isr"]) == (
        0, 0, 0)
    assert cluster["console"] == {"write_enabled": True, "history_interval_s": 0.2}


def test_topics_show_the_sizes_and_counts_produced(console_broker: BrokerProcess,
                                                   produced: list[tuple[Any, ...]]) -> None:
    rows = {t["name"]: t for t in get(port(console_broker), "/api/topics")["topics"]}
    assert rows[TOPIC] == {
        "name": TOPIC, "internal": False, "partitions": PARTITIONS, "replication_factor": 1,
        "under_replicated": 0, "offline": 0, "messages": COUNT,
        "size_bytes": sum(size_on_disk(console_broker, TOPIC, p) for p in range(PARTITIONS))}
    assert rows[TOPIC]["size_bytes"] > sum(len(r[4] or b"") for r in produced)
    internal = rows["__consumer_offsets"]
    assert internal["internal"] is True and internal["partitions"] == 3


def test_a_topic_shows_its_partitions_offsets_and_configs(console_broker: BrokerProcess,
                                                          produced: list[tuple[Any, ...]]
                                                          ) -> None:
    topic = get(port(console_broker), f"/api/topics/{TOPIC}")
    assert topic["name"] == TOPIC and topic["internal"] is False and topic["topic_id"]
    consumer = Consumer({"bootstrap.servers": console_broker.bootstrap, "group.id": "wm"})
    try:
        watermarks = [consumer.get_watermark_offsets(TopicPartition(TOPIC, p), TIMEOUT)
                      for p in range(PARTITIONS)]
    finally:
        consumer.close()
    assert watermarks == [(0, COUNT // PARTITIONS)] * PARTITIONS
    assert topic["partitions"] == [{
        "partition": p, "leader": 1, "replicas": [1], "isr": [1], "offline_replicas": [],
        "log_start_offset": watermarks[p][0], "high_watermark": watermarks[p][1],
        "size_bytes": size_on_disk(console_broker, TOPIC, p),
        "segments": len(log_files(console_broker, TOPIC, p)),
        "under_replicated": False, "offline": False, "under_min_isr": False}
        for p in range(PARTITIONS)]
    configs = {c["name"]: c for c in topic["configs"]}
    assert configs["retention.ms"] == {"name": "retention.ms", "value": RETENTION,
                                       "source": "DYNAMIC_TOPIC_CONFIG", "sensitive": False,
                                       "read_only": False}
    assert (configs["cleanup.policy"]["value"], configs["cleanup.policy"]["source"]) == (
        "delete", "DEFAULT_CONFIG")
    # The same configs as a Kafka client's DescribeConfigs.
    resource = ConfigResource(ConfigResource.Type.TOPIC, TOPIC)
    described = admin(console_broker).describe_configs([resource])[resource].result(TIMEOUT)
    assert {n: c["value"] for n, c in configs.items() if not c["sensitive"]} == {
        n: e.value for n, e in described.items() if not e.is_sensitive}
    status, body = call(port(console_broker), "/api/topics/no-such-topic")
    assert error(status, body) == (404, "UNKNOWN_TOPIC_OR_PARTITION")


def browse(broker: BrokerProcess, query: str, topic: str = TOPIC) -> list[tuple[Any, ...]]:
    body = get(port(broker), f"/api/topics/{topic}/messages?{query}")
    assert all(r["timestamp_type"] == "CreateTime" for r in body["records"])
    return [decoded(r) for r in body["records"]]


def by_time(records: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(records, key=lambda r: (r[2], r[0], r[1]))


def test_the_newest_records_byte_for_byte(console_broker: BrokerProcess,
                                          produced: list[tuple[Any, ...]]) -> None:
    expected = by_time(produced)
    for n in (1, 7, COUNT):
        assert browse(console_broker, f"mode=newest&limit={n}") == expected[-n:], n
    assert browse(console_broker, "limit=100") == expected  # all there are; newest: default
    assert browse(console_broker, "partition=1&limit=4") == [
        r for r in expected if r[0] == 1][-4:]
    body = get(port(console_broker), f"/api/topics/{TOPIC}/messages?limit=2")
    assert body["partitions"] == [{"partition": p, "log_start_offset": 0,
                                   "high_watermark": COUNT // PARTITIONS}
                                  for p in range(PARTITIONS)]
    # The parts the page shows as JSON, text or hex came back as they were produced.
    shown = {(r[0], r[1]): r for r in expected}
    assert shown[(0, 0)][3] is None and json.loads(shown[(0, 0)][4])["name"] == "zoë"
    assert shown[(1, 2)][4] is None  # record 7: a null value
    assert shown[(1, 0)][5] == [("trace", b"t-1"), ("bin", b"\x00\xff\x80"), ("none", None)]


def test_records_from_an_offset(console_broker: BrokerProcess,
                                produced: list[tuple[Any, ...]]) -> None:
    expected = by_time(produced)
    assert browse(console_broker, "mode=offset&partition=2&offset=4&limit=3") == [
        r for r in expected if r[0] == 2 and r[1] >= 4][:3]
    assert browse(console_broker, "mode=offset&offset=8&limit=50") == [
        r for r in expected if r[1] >= 8]
    assert browse(console_broker, "mode=offset&offset=5&limit=4") == [
        r for r in expected if r[1] >= 5][:4]
    assert browse(console_broker, "mode=offset&partition=0&offset=10") == []  # the end
    assert browse(console_broker, "mode=offset&partition=0&offset=-3&limit=2") == [
        r for r in expected if r[0] == 0][:2]


def test_records_from_a_timestamp(console_broker: BrokerProcess,
                                  produced: list[tuple[Any, ...]]) -> None:
    expected = by_time(produced)
    assert browse(console_broker, f"mode=timestamp&timestamp={BASE + 17}&limit=50") == [
        r for r in expected if r[2] >= BASE + 17]
    assert browse(console_broker, f"mode=timestamp&timestamp={BASE + 11}&limit=5") == [
        r for r in expected if r[2] >= BASE + 11][:5]
    assert browse(console_broker, f"mode=timestamp&timestamp={BASE + 4}&partition=2&limit=3"
                  ) == [r for r in expected if r[0] == 2 and r[2] >= BASE + 4][:3]
    assert browse(console_broker, f"mode=timestamp&timestamp={BASE}&limit=500") == expected
    assert browse(console_broker, f"mode=timestamp&timestamp={BASE + COUNT}") == []


def test_the_limit_is_bounded(console_broker: BrokerProcess) -> None:
    create(console_broker, "many", 1)
    produced = produce(console_broker, "many",
                       [{"value": b"%d" % i, "partition": 0} for i in range(520)])
    records = browse(console_broker, "limit=1000", "many")
    assert [r[1] for r in records] == list(range(20, 520))  # at most 500: the last 500
    assert records[-1][4] == produced[-1][4] == b"519"
    assert len(browse(console_broker, "", "many")) == 50  # the default
    for small in ("0", "-5"):
        assert [r[1] for r in browse(console_broker, f"limit={small}", "many")] == [519]
    assert len(browse(console_broker, "mode=offset&offset=0&limit=501", "many")) == 500


@pytest.mark.parametrize(("query", "status", "name"), [
    ("mode=bogus", 400, "INVALID_REQUEST"),
    ("partition=3", 404, "UNKNOWN_TOPIC_OR_PARTITION"),
    ("partition=-1", 404, "UNKNOWN_TOPIC_OR_PARTITION"),
    ("partition=one", 400, "INVALID_REQUEST"),
    ("mode=offset&offset=ten", 400, "INVALID_REQUEST"),
    ("limit=many", 400, "INVALID_REQUEST"),
    ("mode=timestamp", 400, "INVALID_REQUEST"),
    ("mode=timestamp&timestamp=-5", 400, "INVALID_REQUEST"),
])
def test_the_browser_refuses_bad_input(console_broker: BrokerProcess,
                                       produced: list[tuple[Any, ...]], query: str,
                                       status: int, name: str) -> None:
    got = call(port(console_broker), f"/api/topics/{TOPIC}/messages?{query}")
    assert error(*got) == (status, name)


def test_the_browser_of_an_unknown_topic(console_broker: BrokerProcess) -> None:
    got = call(port(console_broker), "/api/topics/no-such-topic/messages")
    assert error(*got) == (404, "UNKNOWN_TOPIC_OR_PARTITION")


def test_group_lag_is_what_the_cli_prints(console_broker: BrokerProcess,
                                          committed_group: Consumer) -> None:
    ends = {p: COUNT // PARTITIONS for p in range(PARTITIONS)}
    lags = {p: ends[p] - COMMITTED[p] for p in range(PARTITIONS)}
    row = next(g for g in get(port(console_broker), "/api/groups")["groups"]
               if g["group_id"] == GROUP)
    assert row == {"group_id": GROUP, "state": "Stable", "protocol_type": "consumer",
                   "members": 1, "coordinator": 1, "lag": sum(lags.values()),
                   "topics": [TOPIC]}
    group = get(port(console_broker), f"/api/groups/{GROUP}")
    member = committed_group.memberid()
    assert (group["group_id"], group["state"], group["protocol_type"], group["coordinator"]
            ) == (GROUP, "Stable", "consumer", 1)
    assert group["protocol"] in ("range", "roundrobin", "cooperative-sticky")
    assert [(m["member_id"], m["assignment"]) for m in group["members"]] == [
        (member, [{"topic": TOPIC, "partitions": [0, 1, 2]}])]
    assert group["offsets"] == [
        {"topic": TOPIC, "partition": p, "committed": COMMITTED[p], "high_watermark": ends[p],
         "lag": lags[p], "member_id": member} for p in range(PARTITIONS)]
    assert group["lag"] == sum(lags.values()) == 17

    def cli(*extra: str) -> str:
        run = subprocess.run([sys.executable, "-m", "odradek", "groups", "describe",
                              "--bootstrap-server", console_broker.bootstrap, *extra, GROUP],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        return run.stdout

    # The table it prints: TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID...
    lines = cli().splitlines()
    assert lines[0].endswith(f"total lag {group['lag']}"), lines[0]
    assert lines[1].split()[:6] == ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                                    "LAG", "CONSUMER-ID"]
    assert [line.split()[:6] for line in lines[2:] if line.strip()] == [
        [o["topic"], str(o["partition"]), str(o["committed"]), str(o["high_watermark"]),
         str(o["lag"]), o["member_id"]] for o in group["offsets"]]
    described = json.loads(cli("--json"))
    assert described["total_lag"] == group["lag"]
    assert {(r["topic"], r["partition"]): (r["committed_offset"], r["log_end_offset"],
                                           r["lag"], r["member_id"])
            for r in described["partitions"]} == {
        (o["topic"], o["partition"]): (o["committed"], o["high_watermark"], o["lag"],
                                       o["member_id"]) for o in group["offsets"]}


def test_an_unknown_group(console_broker: BrokerProcess) -> None:
    assert error(*call(port(console_broker), "/api/groups/no-such-group")) == (
        404, "GROUP_ID_NOT_FOUND")


def integral(times: list[int], rates: list[float | None], interval_s: float) -> float:
    """What rates sampled at `times` (ms) add up to."""
    total = 0.0
    for i, rate in enumerate(rates):
        span = (times[i] - times[i - 1]) / 1000 if i else interval_s
        total += (rate or 0.0) * span
    return total


def test_history_samples_the_traffic(console_broker: BrokerProcess,
                                     produced: list[tuple[Any, ...]]) -> None:
    http_port = port(console_broker)
    create(console_broker, "metered", 1)
    count = 200
    produce(console_broker, "metered", [{"value": bytes([i % 256]) * 500, "partition": 0}
                                        for i in range(count)])
    size = size_on_disk(console_broker, "metered", 0)

    def accounted() -> dict[str, Any] | None:
        series = get(http_port, "/api/history/topics/metered")
        bytes_in = integral(series["t"], series["bytes_in"], series["interval_s"])
        messages = integral(series["t"], series["messages_in"], series["interval_s"])
        done = abs(bytes_in - size) <= 0.05 * size and abs(messages - count) <= 0.05 * count
        return series if done else None
    series = wait_until(accounted, TIMEOUT, "the history of metered to account for its "
                        f"{size} bytes", interval=0.2)
    assert series["interval_s"] == 0.2
    assert len(series["t"]) == len(series["bytes_in"]) == len(series["bytes_out"]) == len(
        series["messages_in"])

    history = get(http_port, "/api/history")
    assert (history["broker_id"], history["interval_s"]) == (1, 0.2)
    t = history["t"]
    assert len(t) >= 3 and t == sorted(t) and len(set(t)) == len(t)
    for name in ("bytes_in", "bytes_out", "messages_in"):
        assert len(history[name]) == len(t), name
    for api, rates in history["requests"].items():
        assert len(rates) == len(t), api
    flowing = [i for i, rate in enumerate(history["bytes_in"]) if rate]
    assert flowing, history["bytes_in"]
    assert all(history["messages_in"][i] for i in flowing)
    assert any(history["requests"]["Produce"][i] for i in flowing)
    produce_latency = history["latency_ms"]["Produce"]
    assert len(produce_latency["p50"]) == len(produce_latency["p99"]) == len(t)
    measured = [(p50, p99) for p50, p99 in zip(produce_latency["p50"], produce_latency["p99"],
                                               strict=True) if p50 is not None]
    assert measured and all(0 <= p50 <= p99 for p50, p99 in measured)
    # The broker's bytes in: the topics' together, metered's at least.
    assert integral(t, history["bytes_in"], 0.2) >= 0.95 * size


def test_history_of_a_group_lag(console_broker: BrokerProcess,
                                committed_group: Consumer) -> None:
    def points() -> dict[str, Any] | None:
        series = get(port(console_broker), f"/api/history/groups/{GROUP}")
        return series if sum(COUNT // PARTITIONS - c for c in COMMITTED.values()) in series[
            "lag"] else None
    series = wait_until(points, TIMEOUT, f"{GROUP}'s lag in its history", interval=0.2)
    assert len(series["t"]) == len(series["lag"]) >= 1 and series["interval_s"] == 0.2
    empty = get(port(console_broker), "/api/history/groups/no-such-group")
    assert (empty["t"], empty["lag"]) == ([], [])


# ---- writes --------------------------------------------------------------------------------

def topic_names(broker: BrokerProcess) -> set[str]:
    return set(admin(broker).list_topics(timeout=TIMEOUT).topics)


def test_a_write_needs_the_console_header(console_broker: BrokerProcess) -> None:
    http_port = port(console_broker)
    body = {"name": "headless", "partitions": 1}
    for headers in ({}, {"X-Odradek-Console": "0"}):
        got = call(http_port, "/api/topics", "POST", body, headers)
        assert error(*got) == (403, "CONSOLE_READ_ONLY"), headers
    got = call(http_port, f"/api/groups/{GROUP}/reset-offsets", "POST",
               {"topic": TOPIC, "to": "earliest"})
    assert error(*got) == (403, "CONSOLE_READ_ONLY")
    assert "headless" not in topic_names(console_broker)


def test_create_a_topic(console_broker: BrokerProcess) -> None:
    http_port = port(console_broker)
    status, body = write(http_port, "/api/topics", {
        "name": "made-here", "partitions": 2, "replication_factor": 1,
        "configs": {"cleanup.policy": "compact", "retention.ms": "3600000"}})
    assert (status, body) == (200, {"ok": True, "name": "made-here"})
    metadata = admin(console_broker).list_topics("made-here", timeout=TIMEOUT)
    assert sorted(metadata.topics["made-here"].partitions) == [0, 1]
    resource = ConfigResource(ConfigResource.Type.TOPIC, "made-here")
    configs = admin(console_broker).describe_configs([resource])[resource].result(TIMEOUT)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].value == "3600000"
    produce(console_broker, "made-here", [{"value": b"v", "key": b"k", "partition": 1}])
    assert [r[3:5] for r in browse(console_broker, "", "made-here")] == [(b"k", b"v")]

    got = write(http_port, "/api/topics", {"name": "made-here", "partitions": 1})
    assert error(*got) == (409, "TOPIC_ALREADY_EXISTS")
    got = write(http_port, "/api/topics", {"name": "made-here-2", "partitions": 1})
    assert got[0] == 200  # a new name


@pytest.mark.parametrize(("raw", "status", "name"), [
    (b"{not json", 400, "INVALID_REQUEST"),
    (b"\xff\xfe", 400, "INVALID_REQUEST"),
    (b'["bad-json-array"]', 400, "INVALID_REQUEST"),
    (b'{"partitions": 1}', 400, "INVALID_REQUEST"),
    (b'{"name": "bad-parts", "partitions": "3"}', 400, "INVALID_REQUEST"),
    (b'{"name": "bad-configs", "configs": {"retention.ms": 5}}', 400, "INVALID_REQUEST"),
    (b'{"name": "bad name!"}', 400, "INVALID_TOPIC_EXCEPTION"),
    (b'{"name": "no-partitions", "partitions": 0}', 400, "INVALID_PARTITIONS"),
    (b'{"name": "bad-rf", "replication_factor": 3}', 400, "INVALID_REPLICATION_FACTOR"),
    (b'{"name": "bad-config", "configs": {"cleanup.policy": "shred"}}', 400,
     "INVALID_CONFIG"),
])
def test_create_refuses_bad_bodies(console_broker: BrokerProcess, raw: bytes, status: int,
                                   name: str) -> None:
    before = topic_names(console_broker)
    got = call(port(console_broker), "/api/topics", "POST", raw=raw, headers=WRITE)
    assert error(*got) == (status, name)
    assert topic_names(console_broker) == before


def test_too_large_a_body_is_refused(console_broker: BrokerProcess) -> None:
    body = json.dumps({"name": "huge", "configs": {"x": "y" * 70_000}}).encode()
    status, text = call(port(console_broker), "/api/topics", "POST", raw=body, headers=WRITE)
    assert status == 413, text
    # Chunked, without a Content-Length: refused as it arrives.
    connection = http.client.HTTPConnection("127.0.0.1", port(console_broker), timeout=TIMEOUT)
    try:
        connection.request("POST", "/api/topics", body=iter([body[:40_000], body[40_000:]]),
                           headers={**WRITE, "Transfer-Encoding": "chunked"},
                           encode_chunked=True)
        assert connection.getresponse().status == 413
    finally:
        connection.close()
    assert "huge" not in topic_names(console_broker)


def first_offsets(broker: BrokerProcess, consumer: Consumer, partitions: set[int]
                  ) -> dict[int, int]:
    """The offset of the first record the consumer gets from each partition."""
    first: dict[int, int] = {}

    def all_seen() -> bool:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            first.setdefault(message.partition(), message.offset())
        return set(first) == partitions
    try:
        wait_until(all_seen, TIMEOUT, f"records from partitions {sorted(partitions)}",
                   interval=0)
    finally:
        consumer.close()
    return first


def test_delete_records_moves_the_log_start(console_broker: BrokerProcess) -> None:
    http_port = port(console_broker)
    create(console_broker, "trim", 2)
    produce(console_broker, "trim", [{"value": b"r%d" % i, "partition": i % 2}
                                     for i in range(20)])
    status, body = write(http_port, "/api/topics/trim/delete-records",
                         {"partitions": {"0": 4, "1": -1}})
    assert (status, body) == (200, {"ok": True, "log_start_offsets": {"0": 4, "1": 10}})
    partitions = get(http_port, "/api/topics/trim")["partitions"]
    assert [(p["log_start_offset"], p["high_watermark"]) for p in partitions] == [
        (4, 10), (10, 10)]
    row = next(t for t in get(http_port, "/api/topics")["topics"] if t["name"] == "trim")
    assert row["messages"] == 6
    assert [r[1] for r in browse(console_broker, "mode=offset&offset=0", "trim")] == [
        4, 5, 6, 7, 8, 9]
    # A consumer from the earliest offset starts there.
    consumer = Consumer({"bootstrap.servers": console_broker.bootstrap, "group.id": "trimmed",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("trim", 0, OFFSET_BEGINNING)])
    assert first_offsets(console_broker, consumer, {0}) == {0: 4}

    for body, status, name in (
            ({"partitions": {"9": 1}}, 404, "UNKNOWN_TOPIC_OR_PARTITION"),
            ({"partitions": {"0": 99}}, 400, "OFFSET_OUT_OF_RANGE"),
            ({"partitions": {"zero": 1}}, 400, "INVALID_REQUEST"),
            ({"partitions": {}}, 400, "INVALID_REQUEST")):
        assert error(*write(http_port, "/api/topics/trim/delete-records", body)) == (
            status, name), body
    assert error(*write(http_port, "/api/topics/nothing/delete-records",
                        {"partitions": {"0": 1}})) == (404, "UNKNOWN_TOPIC_OR_PARTITION")
    assert [(p["log_start_offset"], p["high_watermark"]) for p in get(
        http_port, "/api/topics/trim")["partitions"]] == [(4, 10), (10, 10)]


def committed(broker: BrokerProcess, group: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)],
                                   TIMEOUT)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found}


def test_reset_offsets_of_an_empty_group(console_broker: BrokerProcess,
                                         produced: list[tuple[Any, ...]]) -> None:
    http_port, group = port(console_broker), "resetters"
    path = f"/api/groups/{group}/reset-offsets"
    member = member_consumer(console_broker, group, TOPIC, PARTITIONS)
    member.commit(offsets=[TopicPartition(TOPIC, p, 10) for p in range(PARTITIONS)],
                  asynchronous=False)
    got = write(http_port, path, {"topic": TOPIC, "to": "earliest"})
    assert error(*got) == (409, "NON_EMPTY_GROUP")
    assert committed(console_broker, group) == {0: 10, 1: 10, 2: 10}
    member.close()
    wait_until(lambda: get(http_port, f"/api/groups/{group}")["state"] == "Empty", TIMEOUT,
               f"{group} empty")

    def resumed() -> dict[int, int]:
        """Where a consumer in the group starts (no committed offset: none, at the end)."""
        consumer = Consumer({"bootstrap.servers": console_broker.bootstrap, "group.id": group,
                             "enable.auto.commit": False, "auto.offset.reset": "latest"})
        consumer.subscribe([TOPIC])
        return first_offsets(console_broker, consumer, set(range(PARTITIONS)))

    status, body = write(http_port, path, {"topic": TOPIC, "partitions": None,
                                           "to": "earliest"})
    assert (status, body) == (200, {"ok": True, "offsets": [
        {"topic": TOPIC, "partition": p, "offset": 0} for p in range(PARTITIONS)]})
    assert resumed() == {0: 0, 1: 0, 2: 0}

    status, body = write(http_port, path, {"topic": TOPIC, "to": "offset", "value": 4})
    assert status == 200, body
    assert committed(console_broker, group) == {0: 4, 1: 4, 2: 4}
    status, body = write(http_port, path, {"topic": TOPIC, "to": "offset", "value": 99,
                                           "partitions": [1]})  # past the end: the end
    assert (status, body["offsets"]) == (200, [{"topic": TOPIC, "partition": 1,
                                                "offset": 10}])
    assert committed(console_broker, group) == {0: 4, 1: 10, 2: 4}

    # The first record at or after BASE + 17 of each partition: records 18, 19 and 17.
    status, body = write(http_port, path, {"topic": TOPIC, "to": "timestamp",
                                           "value": BASE + 17})
    expected = {p: next(r[1] for r in produced if r[0] == p and r[2] >= BASE + 17)
                for p in range(PARTITIONS)}
    assert expected == {0: 6, 1: 6, 2: 5}
    assert status == 200 and {o["partition"]: o["offset"] for o in body["offsets"]} == expected
    assert resumed() == expected
    status, body = write(http_port, path, {"topic": TOPIC, "to": "latest"})
    assert status == 200 and committed(console_broker, group) == {0: 10, 1: 10, 2: 10}

    for bad in ({"topic": TOPIC, "to": "yesterday"}, {"topic": TOPIC, "to": "offset"},
                {"topic": TOPIC, "to": "earliest", "partitions": [7]}, {"to": "earliest"}):
        assert error(*write(http_port, path, bad)) == (400, "INVALID_REQUEST"), bad
    assert error(*write(http_port, path, {"topic": "no-such-topic", "to": "earliest"})) == (
        404, "UNKNOWN_TOPIC_OR_PARTITION")
    assert committed(console_broker, group) == {0: 10, 1: 10, 2: 10}


# ---- a read-only console -------------------------------------------------------------------

def test_writes_are_off_by_default() -> None:
    assert BrokerConfig.from_properties({}).get("http.console.write.enabled") is False


def test_a_read_only_console_refuses_every_write() -> None:
    """The console as the broker builds it with http.console.write.enabled=false, on the
    HTTP listener's own application (in this process: nothing behind it is reached)."""
    from aiohttp.test_utils import TestClient, TestServer

    unreachable = SimpleNamespace()  # any read of the broker or the cluster would fail
    console = Console(unreachable, unreachable, unreachable,  # type: ignore[arg-type]
                      write_enabled=False)
    app = HttpServer([], lambda: Readiness({}), routes=console.add_routes).app()

    async def run() -> list[tuple[int, Any]]:
        async with TestClient(TestServer(app)) as client:
            answers = []
            for path, body in (("/api/topics", {"name": "t", "partitions": 1}),
                               ("/api/topics/t/delete-records", {"partitions": {"0": 1}}),
                               ("/api/groups/g/reset-offsets", {"topic": "t", "to": "latest"})):
                response = await client.post(path, json=body, headers=WRITE)
                answers.append((response.status, await response.json()))
            return answers

    for status, body in asyncio.run(run()):
        assert (status, body["error"]) == (403, "CONSOLE_READ_ONLY")
        assert "http.console.write.enabled" in body["message"]
