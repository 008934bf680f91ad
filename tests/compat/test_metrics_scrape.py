"""/metrics of a real broker process, scraped over HTTP and read with prometheus_client's
parser: the counters move by what a real client produced and fetched, the gauges match
the logs on disk, and group lag equals what `odradek groups describe` reports."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families
from support.broker import BrokerProcess
from support.wait import wait_until
from test_cli import odradek, ok

TOPIC = "metered"
PARTITIONS = 2
PER_PARTITION = 150
VALUE = b"v" * 200
GROUP = "metered-group"
COMMITTED = {0: 40, 1: 125}  # a partial consume: the lag is the rest

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def metrics_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", {
        "http.listeners": "http://127.0.0.1:0",
        "group.initial.rebalance.delay.ms": "0"}).start()
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


def scrape(broker: BrokerProcess, accept: str | None = None) -> tuple[str, str]:
    assert broker.http_port is not None, "the broker logged no HTTP listener"
    request = urllib.request.Request(f"http://127.0.0.1:{broker.http_port}/metrics")
    if accept is not None:
        request.add_header("Accept", accept)
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read().decode(), response.headers["Content-Type"]


def samples_of(broker: BrokerProcess) -> Samples:
    text, content_type = scrape(broker)
    assert content_type.startswith("text/plain"), content_type
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def series(samples: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: v for (n, labels), v in samples.items() if n == name}


def log_bytes(broker: BrokerProcess, partition: int) -> int:
    return sum(f.stat().st_size for f in (broker.data_dir / f"{TOPIC}-{partition}").glob("*.log"))


def test_metrics_follow_what_clients_did(metrics_broker: BrokerProcess) -> None:
    broker = metrics_broker
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        future.result(30)
    before = samples_of(broker)

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(PER_PARTITION * PARTITIONS):
        producer.produce(TOPIC, value=VALUE, key=str(i).encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    connected = samples_of(broker)  # the producer is still connected
    assert value(connected, "kafka_server_socket_server_metrics_connection_count",
                 listener="PLAINTEXT", networkProcessor="0") >= 1

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    consumed = 0
    deadline = time.monotonic() + 30
    while consumed < PER_PARTITION * PARTITIONS and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            consumed += 1
    assert consumed == PER_PARTITION * PARTITIONS
    consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in COMMITTED.items()],
                    asynchronous=False)
    consumer.close()
    producer.flush(5)
    del producer

    on_disk = sum(log_bytes(broker, p) for p in range(PARTITIONS))

    def settled() -> Samples | None:
        # The consumer's last long-poll fetch is counted once it is answered.
        after = samples_of(broker)
        out = value(after, "kafka_server_brokertopicmetrics_bytesout_total", topic=TOPIC)
        return after if out >= on_disk else None

    after = wait_until(settled, 15, "the consumer's fetches counted")

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    records = PER_PARTITION * PARTITIONS
    assert moved("kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC) == records
    # Every topic's: the group's commit went to __consumer_offsets as well.
    assert moved("kafka_server_brokertopicmetrics_messagesin_total") >= records + 1
    # Bytes in: the batches as written, which are the bytes the producer sent.
    assert moved("kafka_server_brokertopicmetrics_bytesin_total", topic=TOPIC) == on_disk
    assert on_disk > records * len(VALUE)
    # Bytes out: each batch sent once to the one consumer.
    assert moved("kafka_server_brokertopicmetrics_bytesout_total", topic=TOPIC) == on_disk
    assert moved("kafka_server_brokertopicmetrics_bytesout_total") == on_disk
    assert moved("kafka_server_brokertopicmetrics_totalproducerequests_total",
                 topic=TOPIC) >= PARTITIONS
    assert moved("kafka_server_brokertopicmetrics_failedproducerequests_total") == 0
    assert moved("kafka_server_brokertopicmetrics_totalfetchrequests_total",
                 topic=TOPIC) >= PARTITIONS

    for p in range(PARTITIONS):
        labels = {"topic": TOPIC, "partition": str(p)}
        assert value(after, "kafka_log_log_logendoffset", **labels) == PER_PARTITION
        assert value(after, "kafka_log_log_logstartoffset", **labels) == 0
        assert value(after, "kafka_log_log_size", **labels) == log_bytes(broker, p)

    # Every partition of the cluster (the topic's and __consumer_offsets') is here and
    # led here.
    metadata = admin.list_topics(timeout=10)
    partitions = sum(len(t.partitions) for t in metadata.topics.values())
    assert value(after, "kafka_server_replicamanager_partitioncount") == partitions
    assert value(after, "kafka_server_replicamanager_leadercount") == partitions
    assert len(series(after, "kafka_log_log_size")) == partitions
    assert value(after, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(after, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(after, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0

    # Requests: counted per name and version; the time histogram counts the same.
    produced = sum(v for labels, v in
                   series(after, "kafka_network_requestmetrics_requests_total").items()
                   if ("request", "Produce") in labels)
    assert produced >= 1
    assert value(after, "kafka_network_requestmetrics_totaltimems_count",
                 request="Produce") == produced
    assert value(after, "kafka_network_requestmetrics_totaltimems_bucket",
                 request="Produce", le="+Inf") == produced
    assert value(after, "kafka_network_requestmetrics_totaltimems_count",
                 request="FetchConsumer") >= 1

    # Lag, from the coordinator, as `odradek groups describe` computes it.
    described = ok(odradek(broker, "groups", "describe", GROUP, "--json")).json()
    rows = {r["partition"]: r for r in described["partitions"] if r["topic"] == TOPIC}
    assert set(rows) == set(COMMITTED)
    for p, committed in COMMITTED.items():
        labels = {"consumergroup": GROUP, "topic": TOPIC, "partition": str(p)}
        assert rows[p]["lag"] == PER_PARTITION - committed
        assert value(after, "kafka_consumergroup_lag", **labels) == rows[p]["lag"]
        assert value(after, "kafka_consumergroup_current_offset", **labels) == committed
    assert value(after, "kafka_consumergroup_lag_sum", consumergroup=GROUP,
                 topic=TOPIC) == described["total_lag"]


def test_openmetrics_is_served_when_asked_for(metrics_broker: BrokerProcess) -> None:
    text, content_type = scrape(
        metrics_broker, "application/openmetrics-text;version=1.0.0,text/plain;q=0.5")
    assert content_type.startswith("application/openmetrics-text"), content_type
    families = {f.name: f for f in openmetrics_families(text)}
    assert families["kafka_server_brokertopicmetrics_messagesin"].type == "counter"
    assert families["kafka_network_requestmetrics_totaltimems"].type == "histogram"
    assert families["kafka_controller_kafkacontroller_activecontrollercount"].samples[0].value == 1
