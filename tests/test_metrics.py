"""The broker's Prometheus metrics (odradek/metrics): the hot-path counters, and the
collectors over a real ReplicaManager on real logs or plain fakes of the other state,
scraped through BrokerMetrics.exposition and read back with prometheus_client's parser."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from uuid import UUID

import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from odradek.broker.replica_manager import FetchPartitionRequest, ReplicaManager
from odradek.cluster.kafka_controller import KafkaController
from odradek.cluster.metadata import PartitionState, TopicMetadata
from odradek.metrics import stats as s
from odradek.metrics.broker_metrics import BrokerMetrics
from odradek.metrics.collectors import SLICE
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import SimpleRecord, build_record_batch
from odradek.storage.config import LogConfig
from odradek.storage.log_manager import LogManager, LogManagerConfig

ME, F2, F3 = 1, 2, 3
TOPIC_ID = UUID(int=7)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(metrics: BrokerMetrics) -> Samples:
    body, content_type = metrics.exposition(None)
    assert content_type.startswith("text/plain")
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(body.decode())
            for sample in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def batch(count: int, size: int = 10) -> bytearray:
    now = int(time.time() * 1000)
    return bytearray(build_record_batch(
        [SimpleRecord(None, b"x" * size, timestamp=now) for _ in range(count)]))


@pytest.fixture
def logs(tmp_path: Path) -> Any:
    manager = LogManager(LogManagerConfig(log_dirs=(tmp_path,)), LogConfig(),
                         topic_config=lambda topic: None)
    manager.startup(background=False)
    yield manager
    manager.shutdown()


def leader_state(replicas: tuple[int, ...] = (ME,), isr: tuple[int, ...] | None = None
                 ) -> PartitionState:
    return PartitionState(replicas=list(replicas), leader=ME, leader_epoch=0,
                          isr=list(isr if isr is not None else replicas))


def server_of(rm: ReplicaManager | None = None, **parts: Any) -> SimpleNamespace:
    fields = dict(replica_manager=rm, metadata_cache=None, kafka_controller=None,
                  admin=None, socket_server=None, group_coordinator=None)
    fields.update(parts)
    return SimpleNamespace(**fields)


def fake_replica_manager(high_watermarks: dict[tuple[str, int], int],
                         offline: set[tuple[str, int]] | None = None) -> SimpleNamespace:
    """A ReplicaManager's state as the collectors read it: leaders of one replica."""
    def partition(tp: tuple[str, int], hw: int) -> SimpleNamespace:
        log = SimpleNamespace(config=SimpleNamespace(min_insync_replicas=1),
                              segments=lambda: [], log_start_offset=0, log_end_offset=hw)
        return SimpleNamespace(topic=tp[0], index=tp[1], tp=tp, is_leader=True, isr=[ME],
                               replicas=[ME], high_watermark=hw, log=log)

    nothing = SimpleNamespace(watchers=lambda: [])
    return SimpleNamespace(
        partitions={tp: partition(tp, hw) for tp, hw in high_watermarks.items()},
        offline_partitions=offline or set(), isr_shrinks=0, isr_expands=0,
        purgatory=nothing, produce_purgatory=nothing)


# ---- the counters ----------------------------------------------------------------------


def test_topic_stats_keep_all_topics_totals_when_a_topic_is_forgotten() -> None:
    stats = s.BrokerTopicStats()
    stats.counters("a")[s.BYTES_IN] += 10
    stats.counters("b")[s.BYTES_IN] += 5
    assert stats.all_topics()[s.BYTES_IN] == 15
    stats.retain({"a"})
    assert set(stats.topics) == {"a"}
    assert stats.all_topics()[s.BYTES_IN] == 15  # a counter never goes down
    stats.counters("a")[s.BYTES_IN] += 1
    assert stats.all_topics()[s.BYTES_IN] == 16


def test_request_metrics_histogram_buckets_and_versions() -> None:
    metrics = BrokerMetrics()
    requests = metrics.requests
    requests.record("Produce", 9, 300_000)  # 0.3 ms
    requests.record("Produce", 9, 3_000_000)  # 3 ms
    requests.record("Produce", 7, 60_000_000_000)  # 60 s: past the last bucket
    requests.record("FetchConsumer", 13, 1_000_000)  # 1 ms: in the 1 ms bucket
    samples = scrape(metrics)
    assert value(samples, "kafka_network_requestmetrics_requests_total",
                 request="Produce", version="9") == 2
    assert value(samples, "kafka_network_requestmetrics_requests_total",
                 request="Produce", version="7") == 1
    name = "kafka_network_requestmetrics_totaltimems_bucket"
    assert value(samples, name, request="Produce", le="0.5") == 1
    assert value(samples, name, request="Produce", le="5.0") == 2
    assert value(samples, name, request="Produce", le="30000.0") == 2
    assert value(samples, name, request="Produce", le="+Inf") == 3
    assert value(samples, name, request="FetchConsumer", le="0.5") == 0
    assert value(samples, name, request="FetchConsumer", le="1.0") == 1
    assert value(samples, "kafka_network_requestmetrics_totaltimems_count",
                 request="Produce") == 3
    assert value(samples, "kafka_network_requestmetrics_totaltimems_sum",
                 request="Produce") == pytest.approx(60_003.3)


def test_two_brokers_in_one_process_have_their_own_registries() -> None:
    one, two = BrokerMetrics(), BrokerMetrics()
    one.topic_stats.counters("t")[s.MESSAGES_IN] += 3
    assert value(scrape(one), "kafka_server_brokertopicmetrics_messagesin_total",
                 topic="t") == 3
    assert value(scrape(two), "kafka_server_brokertopicmetrics_messagesin_total",
                 topic="t") is None
    assert value(scrape(two), "kafka_server_brokertopicmetrics_messagesin_total") == 0


def test_openmetrics_when_the_scraper_asks_for_it() -> None:
    metrics = BrokerMetrics()
    metrics.topic_stats.counters("t")[s.BYTES_IN] += 42
    body, content_type = metrics.exposition(
        "application/openmetrics-text; version=1.0.0,text/plain;version=0.0.4;q=0.5")
    assert content_type.startswith("application/openmetrics-text")
    families = {f.name: f for f in openmetrics_families(body.decode())}
    family = families["kafka_server_brokertopicmetrics_bytesin"]
    assert family.type == "counter"
    assert {(x.name, x.labels.get("topic"), x.value) for x in family.samples} >= {
        ("kafka_server_brokertopicmetrics_bytesin_total", "t", 42),
        ("kafka_server_brokertopicmetrics_bytesin_total", None, 42)}


# ---- the ReplicaManager's counters and gauges, on real logs ----------------------------


def test_appends_and_fetches_are_counted_and_logs_measured(logs: LogManager) -> None:
    metrics = BrokerMetrics()
    rm = ReplicaManager(ME, logs, topic_stats=metrics.topic_stats)
    metrics.server = server_of(rm)
    for index in (0, 1):
        rm.make_leader("t", index, TOPIC_ID, leader_state())
    records = batch(5, size=20)
    results = rm.append_records(1, {("t", 0): records, ("t", 1): batch(2),
                                    ("nope", 0): batch(1)})
    assert results[("t", 0)].error_code == ErrorCode.NONE
    assert results[("nope", 0)].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    rm.append_records(1, {("t", 1): bytearray()})  # fails: no records
    samples = scrape(metrics)
    assert value(samples, "kafka_server_brokertopicmetrics_messagesin_total", topic="t") == 7
    assert value(samples, "kafka_server_brokertopicmetrics_messagesin_total") == 7
    assert value(samples, "kafka_server_brokertopicmetrics_bytesin_total", topic="t") == (
        len(records) + len(batch(2)))
    assert value(samples, "kafka_server_brokertopicmetrics_totalproducerequests_total",
                 topic="t") == 3
    assert value(samples, "kafka_server_brokertopicmetrics_failedproducerequests_total",
                 topic="t") == 1
    # Unknown topics are not counted: a client's made-up names make no series.
    assert value(samples, "kafka_server_brokertopicmetrics_messagesin_total",
                 topic="nope") is None
    assert value(samples, "kafka_server_replicamanager_partitioncount") == 2
    assert value(samples, "kafka_server_replicamanager_leadercount") == 2
    assert value(samples, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(samples, "kafka_log_log_logendoffset", topic="t", partition="0") == 5
    assert value(samples, "kafka_log_log_logendoffset", topic="t", partition="1") == 2
    assert value(samples, "kafka_log_log_logstartoffset", topic="t", partition="0") == 0
    assert value(samples, "kafka_log_log_size", topic="t", partition="0") == len(records)
    assert value(samples, "kafka_log_log_numlogsegments", topic="t", partition="0") == 1
    for operation in ("Produce", "Fetch"):
        assert value(samples, "kafka_server_delayedoperationpurgatory_purgatorysize",
                     delayedOperation=operation) == 0


def test_under_replicated_and_isr_changes(logs: LogManager) -> None:
    metrics = BrokerMetrics()
    rm = ReplicaManager(ME, logs, topic_stats=metrics.topic_stats)
    rm.alter_partition = lambda partition, isr: None  # the controller answers below
    metrics.server = server_of(rm)
    full = rm.make_leader("t", 0, TOPIC_ID, leader_state((ME, F2, F3)))
    rm.make_leader("t", 1, TOPIC_ID, leader_state((ME, F2, F3), isr=(ME, F2)))
    samples = scrape(metrics)
    assert value(samples, "kafka_server_replicamanager_underreplicatedpartitions") == 1
    assert value(samples, "kafka_server_replicamanager_atminisrpartitioncount") == 0
    assert value(samples, "kafka_server_replicamanager_isrshrinks_total") == 0
    # The leader proposes dropping F3 and the controller confirms: one shrink.
    full._propose_isr([ME, F2])
    rm.alter_partition_completed(full, 0, 0, ErrorCode.NONE,
                                 PartitionState([ME, F2, F3], ME, 0, [ME, F2],
                                                partition_epoch=1))
    samples = scrape(metrics)
    assert value(samples, "kafka_server_replicamanager_underreplicatedpartitions") == 2
    assert value(samples, "kafka_server_replicamanager_isrshrinks_total") == 1
    assert value(samples, "kafka_server_replicamanager_isrexpands_total") == 0
    full._propose_isr([ME, F2, F3])
    rm.alter_partition_completed(full, 0, 1, ErrorCode.NONE,
                                 PartitionState([ME, F2, F3], ME, 0, [ME, F2, F3],
                                                partition_epoch=2))
    samples = scrape(metrics)
    assert value(samples, "kafka_server_replicamanager_underreplicatedpartitions") == 1
    assert value(samples, "kafka_server_replicamanager_isrexpands_total") == 1


def test_a_waiting_fetch_is_in_the_fetch_purgatory(logs: LogManager) -> None:
    async def run() -> tuple[Samples, Samples]:
        metrics = BrokerMetrics()
        rm = ReplicaManager(ME, logs, topic_stats=metrics.topic_stats)
        metrics.server = server_of(rm)
        rm.make_leader("t", 0, TOPIC_ID, leader_state())
        rm.make_leader("t", 1, TOPIC_ID, leader_state())
        waiting = asyncio.create_task(rm.fetch_messages(
            replica_id=-1, max_wait_ms=5_000, min_bytes=1, max_bytes=1 << 20,
            isolation_level=0, requests=[(("t", p), FetchPartitionRequest(0, 1 << 20))
                                         for p in (0, 1)]))
        for _ in range(5):
            await asyncio.sleep(0)
        during = scrape(metrics)
        rm.append_records(1, {("t", 0): batch(1)})
        await waiting
        return during, scrape(metrics)

    during, after = asyncio.run(run())
    name = "kafka_server_delayedoperationpurgatory_purgatorysize"
    assert value(during, name, delayedOperation="Fetch") == 2  # once per partition
    assert value(during, "kafka_server_delayedoperationpurgatory_numdelayedoperations",
                 delayedOperation="Fetch") == 1
    assert value(after, name, delayedOperation="Fetch") == 0


# ---- the controller ------------------------------------------------------------------


def test_a_single_node_is_its_active_controller_and_counts_offline_partitions() -> None:
    topics = {"t": TopicMetadata("t", TOPIC_ID, {0: PartitionState([ME], ME),
                                                 1: PartitionState([ME], ME),
                                                 2: PartitionState([ME], -1)})}
    rm = fake_replica_manager({}, offline={("t", 1)})
    metrics = BrokerMetrics(server_of(
        None, admin=SimpleNamespace(controller=SimpleNamespace(topics=topics))))
    metrics.server.replica_manager = rm
    samples = scrape(metrics)
    assert value(samples, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(samples, "kafka_controller_kafkacontroller_offlinepartitionscount") == 2
    assert value(samples, "kafka_controller_kafkacontroller_globalpartitioncount") == 3
    assert value(samples, "kafka_controller_kafkacontroller_globaltopiccount") == 1


def test_zookeeper_controller_counts_partitions_without_a_live_leader() -> None:
    topics = {"t": TopicMetadata("t", TOPIC_ID, {
        0: PartitionState([1, 2], 1), 1: PartitionState([2, 3], 3),
        2: PartitionState([1, 2], -1), 3: PartitionState([1, 2], 2)})}
    controller = SimpleNamespace(live={1: None, 2: None}, topics=topics,
                                 offline_replicas={2: {("t", 3)}}, is_active=True)
    controller.partition_counts = lambda: KafkaController.partition_counts(
        controller)  # type: ignore[arg-type]
    samples = scrape(BrokerMetrics(server_of(None, kafka_controller=controller)))
    assert value(samples, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    # 1: its leader 3 is gone; 2: no leader; 3: its leader's log dir failed.
    assert value(samples, "kafka_controller_kafkacontroller_offlinepartitionscount") == 3
    controller.is_active = False
    samples = scrape(BrokerMetrics(server_of(None, kafka_controller=controller)))
    assert value(samples, "kafka_controller_kafkacontroller_activecontrollercount") == 0
    assert value(samples, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0


# ---- connections, groups ---------------------------------------------------------------


def test_connections_per_listener() -> None:
    server = SimpleNamespace(
        connections=[SimpleNamespace(listener_name="PLAINTEXT"),
                     SimpleNamespace(listener_name="PLAINTEXT")],
        listeners=[SimpleNamespace(name="PLAINTEXT"), SimpleNamespace(name="SSL")])
    samples = scrape(BrokerMetrics(server_of(None, socket_server=server)))
    name = "kafka_server_socket_server_metrics_connection_count"
    assert value(samples, name, listener="PLAINTEXT", networkProcessor="0") == 2
    assert value(samples, name, listener="SSL", networkProcessor="0") == 0


def test_group_lag_is_the_high_watermark_less_the_committed_offset() -> None:
    rm = fake_replica_manager({("t", 0): 100, ("t", 1): 50})
    groups = {
        "g": SimpleNamespace(group_id="g", state="Stable", members={"m1": None},
                             offsets={("t", 0): SimpleNamespace(offset=60),
                                      ("t", 1): SimpleNamespace(offset=50),
                                      ("elsewhere", 0): SimpleNamespace(offset=3)}),
        "gone": SimpleNamespace(group_id="gone", state="Dead", members={},
                                offsets={("t", 0): SimpleNamespace(offset=1)})}
    coordinator = SimpleNamespace(manager=SimpleNamespace(groups=groups))
    metrics = BrokerMetrics(server_of(None, group_coordinator=coordinator))
    metrics.server.replica_manager = rm
    samples = scrape(metrics)
    lag = "kafka_consumergroup_lag"
    assert value(samples, lag, consumergroup="g", topic="t", partition="0") == 40
    assert value(samples, lag, consumergroup="g", topic="t", partition="1") == 0
    # A partition this broker holds no replica of: its offset, not its lag.
    assert value(samples, lag, consumergroup="g", topic="elsewhere", partition="0") is None
    assert value(samples, "kafka_consumergroup_current_offset", consumergroup="g",
                 topic="elsewhere", partition="0") == 3
    assert value(samples, "kafka_consumergroup_lag_sum", consumergroup="g", topic="t") == 40
    assert value(samples, "kafka_consumergroup_members", consumergroup="g") == 1
    assert value(samples, "kafka_consumergroup_members", consumergroup="gone") is None


def test_a_failing_collector_costs_only_its_own_metrics() -> None:
    metrics = BrokerMetrics(server_of(SimpleNamespace()))  # a replica manager of nothing
    metrics.topic_stats.counters("t")[s.MESSAGES_IN] += 1
    samples = scrape(metrics)
    assert value(samples, "kafka_server_brokertopicmetrics_messagesin_total") == 1
    assert value(samples, "kafka_server_replicamanager_partitioncount") is None


def test_deleted_topics_series_go_and_the_all_topics_count_stays() -> None:
    rm = fake_replica_manager({("local", 0): 0})
    cache = SimpleNamespace(topics={"known": None})
    metrics = BrokerMetrics(server_of(None, metadata_cache=cache))
    metrics.server.replica_manager = rm
    for topic in ("known", "local", "deleted"):
        metrics.topic_stats.counters(topic)[s.MESSAGES_IN] += 2
    samples = scrape(metrics)
    name = "kafka_server_brokertopicmetrics_messagesin_total"
    assert value(samples, name, topic="known") == 2
    assert value(samples, name, topic="local") == 2  # a replica here, not in the cache yet
    assert value(samples, name, topic="deleted") is None
    assert value(samples, name) == 6


def test_rendered_as_prometheus_client_renders_them() -> None:
    from prometheus_client import generate_latest
    from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

    from odradek.metrics.render import render

    rm = fake_replica_manager({("t", 0): 12_345_678, ("t", 1): 0})
    tricky = 'a "quoted"\\back\nslash'
    coordinator = SimpleNamespace(manager=SimpleNamespace(groups={tricky: SimpleNamespace(
        group_id=tricky, state="Stable", members={}, offsets={
            ("t", 0): SimpleNamespace(offset=3), ("t", 1): SimpleNamespace(offset=0)})}))
    metrics = BrokerMetrics(server_of(None, group_coordinator=coordinator))
    metrics.server.replica_manager = rm
    metrics.topic_stats.counters("t")[s.BYTES_IN] += 10**13
    metrics.requests.record("Produce", 9, 1_234_567)
    assert render(metrics.registry.collect()) == generate_latest(metrics.registry)
    assert render(metrics.registry.collect(), openmetrics=True) == openmetrics_latest(
        metrics.registry)
    samples = scrape(metrics)
    assert value(samples, "kafka_consumergroup_lag", consumergroup=tricky, topic="t",
                 partition="0") == 12_345_675


def test_exposition_async_renders_a_large_scrape_in_a_thread() -> None:
    rm = fake_replica_manager({("t", p): p for p in range(1000)})  # 4 samples each
    metrics = BrokerMetrics(server_of(None))
    metrics.server.replica_manager = rm
    body, content_type = asyncio.run(metrics.exposition_async(None))
    assert (body, content_type) == metrics.exposition(None)
    assert body.count(b"kafka_log_log_size{") == 1000


def test_exposition_async_lets_the_loop_run_between_slices_of_the_walk() -> None:
    """A scrape of many partitions and committed offsets gives the event loop back every
    SLICE of them: other work runs while it walks, and the text is the same."""
    partitions = 2_000
    rm = fake_replica_manager({("t", p): 10 for p in range(partitions)})
    offsets = {("t", p): SimpleNamespace(offset=4) for p in range(partitions)}
    group = SimpleNamespace(group_id="g", state="Stable", members={}, offsets=offsets)
    coordinator = SimpleNamespace(manager=SimpleNamespace(groups={"g": group}))
    metrics = BrokerMetrics(server_of(rm, group_coordinator=coordinator))

    async def walks_with_a_ticker() -> list[int]:
        """The loop's turns while each collector walks (the text is rendered apart)."""
        ticks = 0
        done = False

        async def ticker() -> None:
            nonlocal ticks
            while not done:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        turns = []
        for collector in metrics.collectors:
            await asyncio.sleep(0)
            ticks = 0
            await collector.collect_async()
            turns.append(ticks)
        done = True
        await task
        return turns

    turns = dict(zip([type(c).__name__ for c in metrics.collectors],
                     asyncio.run(walks_with_a_ticker()), strict=True))
    # The partitions' walk and the group's offsets each gave the loop a turn every SLICE.
    assert turns["ReplicaManagerCollector"] >= partitions // SLICE
    assert turns["GroupLagCollector"] >= partitions // SLICE
    body = asyncio.run(metrics.exposition_async(None))[0]
    assert body == metrics.exposition(None)[0]
    assert body.count(b"kafka_consumergroup_lag{") == partitions


def test_group_lag_of_partitions_led_elsewhere_from_their_leaders_high_watermarks() -> None:
    rm = fake_replica_manager({("here", 0): 10})
    offsets = {("here", 0): SimpleNamespace(offset=4),
               ("elsewhere", 0): SimpleNamespace(offset=5),
               ("unknown", 0): SimpleNamespace(offset=1)}
    group = SimpleNamespace(group_id="g", state="Stable", members={}, offsets=offsets)
    coordinator = SimpleNamespace(manager=SimpleNamespace(groups={"g": group}))
    metrics = BrokerMetrics(server_of(rm, group_coordinator=coordinator))
    assert value(scrape(metrics), "kafka_consumergroup_lag", consumergroup="g",
                 topic="elsewhere", partition="0") is None
    # What the console's sampler heard from the leader of elsewhere-0.
    metrics.remote_high_watermarks[("elsewhere", 0)] = 25
    samples = scrape(metrics)
    lag = {t: value(samples, "kafka_consumergroup_lag", consumergroup="g", topic=t,
                    partition="0") for t in ("here", "elsewhere", "unknown")}
    assert lag == {"here": 6, "elsewhere": 20, "unknown": None}
    # The committed offset is exported whether or not the lag is known.
    assert value(samples, "kafka_consumergroup_current_offset", consumergroup="g",
                 topic="unknown", partition="0") == 1
