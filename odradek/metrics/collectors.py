"""prometheus_client collectors over the broker's counters and state, run when scraped.

Each metric is named as the Prometheus JMX exporter's standard Kafka rules
(example_configs/kafka-2_0_0.yml, `lowercaseOutputName: true`) name the MBean Kafka
has for it, with the MBean's keys as labels:

    kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=t  (Count)
        -> kafka_server_brokertopicmetrics_bytesin_total{topic="t"}
    kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions  (Value)
        -> kafka_server_replicamanager_underreplicatedpartitions
    kafka.log:type=Log,name=Size,topic=t,partition=0  (Value)
        -> kafka_log_log_size{topic="t",partition="0"}

Consumer group lag is named as kafka-exporter (danielqsj/kafka_exporter) names it:
kafka_consumergroup_lag{consumergroup,topic,partition}.

The collectors read the broker's components through zero-argument callables (None
until the broker has started them), and duck-typed: this module imports nothing of the
broker, so tests drive it with plain fakes. Containers are copied before they are walked:
a scrape may run in another thread than the event loop that changes them.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from odradek.metrics import stats as s

log = logging.getLogger(__name__)

Getter = Callable[[], Any]


def _counter(name: str, documentation: str) -> Metric:
    """A counter family: its samples are named `name` + "_total" (the text format keeps
    that; OpenMetrics names the family without it)."""
    return Metric(name, documentation, "counter")


def _gauge(name: str, documentation: str) -> Metric:
    return Metric(name, documentation, "gauge")


def _copy(items: Callable[[], Iterable[Any]], attempts: int = 3) -> list[Any]:
    """list(items()), tried again if another thread changed the container meanwhile."""
    for attempt in range(attempts):
        try:
            return list(items())
        except RuntimeError:  # "changed size during iteration"
            if attempt == attempts - 1:
                raise
    return []


# How many partitions (or groups) a scrape walks between two chances for the event loop
# to serve other work (collect_async): some 5 ms of walking on this machine.
SLICE = 200

# What metrics() yields between slices: the async walk lets the loop run there.
YIELD_POINT = None


class SafeCollector(Collector):
    """A collector whose failure costs its own metrics, not the whole scrape.

    `metrics()` yields the families, and YIELD_POINT (None) every SLICE items of a long
    walk: `collect()` (prometheus_client's, synchronous) skips them, `collect_async()` on
    the broker's event loop lets other work run there, so that a scrape of ten thousand
    partitions never holds the loop for the whole walk."""

    name = "metrics"

    def describe(self) -> Iterable[Metric]:
        return []  # not asked to collect when registered: the broker may not be up yet

    def collect(self) -> Iterable[Metric]:
        try:
            return [m for m in self.metrics() if m is not YIELD_POINT]
        except Exception:
            log.exception("the %s metrics failed; this scrape goes without them", self.name)
            return []

    async def collect_async(self) -> list[Metric]:
        families: list[Metric] = []
        try:
            for family in self.metrics():
                if family is YIELD_POINT:
                    await asyncio.sleep(0)
                else:
                    families.append(family)
        except Exception:
            log.exception("the %s metrics failed; this scrape goes without them", self.name)
            return []
        return families

    def metrics(self) -> Iterator[Metric | None]:
        raise NotImplementedError


# ---- BrokerTopicMetrics --------------------------------------------------------------

# (index in a topic's counters, JMX exporter name, Kafka's MBean name)
_TOPIC_METRICS = (
    (s.MESSAGES_IN, "kafka_server_brokertopicmetrics_messagesin", "MessagesInPerSec"),
    (s.BYTES_IN, "kafka_server_brokertopicmetrics_bytesin", "BytesInPerSec"),
    (s.BYTES_OUT, "kafka_server_brokertopicmetrics_bytesout", "BytesOutPerSec"),
    (s.PRODUCE_REQUESTS, "kafka_server_brokertopicmetrics_totalproducerequests",
     "TotalProduceRequestsPerSec"),
    (s.FAILED_PRODUCE, "kafka_server_brokertopicmetrics_failedproducerequests",
     "FailedProduceRequestsPerSec"),
    (s.FETCH_REQUESTS, "kafka_server_brokertopicmetrics_totalfetchrequests",
     "TotalFetchRequestsPerSec"),
    (s.FAILED_FETCH, "kafka_server_brokertopicmetrics_failedfetchrequests",
     "FailedFetchRequestsPerSec"),
)


class BrokerTopicCollector(SafeCollector):
    """Kafka's BrokerTopicMetrics: per topic (label `topic`) and for all topics (no
    label, as the exporter gives the MBean without a topic key)."""

    name = "BrokerTopicMetrics"

    def __init__(self, stats: s.BrokerTopicStats,
                 known_topics: Getter | None = None) -> None:
        self.stats = stats
        # The topics that exist (a container of names), to forget deleted ones; None
        # keeps every topic ever counted.
        self.known_topics = known_topics

    def metrics(self) -> Iterator[Metric | None]:
        stats = self.stats
        known = self.known_topics() if self.known_topics is not None else None
        if known is not None:
            stats.retain(known)
        snapshot = stats.snapshot()
        totals = stats.all_topics(snapshot)
        for index, name, mbean in _TOPIC_METRICS:
            family = _counter(name, f"Kafka's BrokerTopicMetrics {mbean} count, per topic "
                                    "and (without the topic label) for all topics")
            family.add_sample(name + "_total", {}, totals[index])
            for i, topic in enumerate(sorted(snapshot)):
                if i % (SLICE * 5) == SLICE * 5 - 1:  # a sample a topic: cheaper
                    yield YIELD_POINT
                family.add_sample(name + "_total", {"topic": topic}, snapshot[topic][index])
            yield family
        for name, value, what in (
                ("replicationbytesout", stats.replication_bytes_out,
                 "ReplicationBytesOutPerSec count: record bytes sent to followers"),
                ("replicationbytesin", stats.replication_bytes_in,
                 "ReplicationBytesInPerSec count: record bytes fetched as a follower")):
            family = _counter(f"kafka_server_brokertopicmetrics_{name}",
                              f"Kafka's BrokerTopicMetrics {what}")
            family.add_sample(f"kafka_server_brokertopicmetrics_{name}_total", {}, value)
            yield family


# ---- RequestMetrics ------------------------------------------------------------------


class RequestCollector(SafeCollector):
    """Kafka's RequestMetrics: RequestsPerSec per request and version, and TotalTimeMs
    per request as a Prometheus histogram (in ms)."""

    name = "RequestMetrics"

    def __init__(self, requests: s.RequestMetrics) -> None:
        self.requests = requests

    def metrics(self) -> Iterator[Metric | None]:
        snapshot = self.requests.snapshot()
        name = "kafka_network_requestmetrics_requests"
        counts = _counter(name, "Kafka's RequestMetrics RequestsPerSec count, per request "
                                "name and version")
        bounds = [floatToGoString(b) for b in self.requests.bounds_ms] + ["+Inf"]
        times = HistogramMetricFamily(
            "kafka_network_requestmetrics_totaltimems",
            "Kafka's RequestMetrics TotalTimeMs: from the request read to its response "
            "written, in ms", labels=["request"])
        for request in sorted(snapshot):
            versions, buckets, sum_ns = snapshot[request]
            for version in sorted(versions):
                counts.add_sample(name + "_total",
                                  {"request": request, "version": str(version)},
                                  versions[version])
            cumulative, running = [], 0
            for bound, count in zip(bounds, buckets, strict=True):
                running += count
                cumulative.append((bound, running))
            times.add_metric([request], cumulative, sum_ns / 1e6)
        yield counts
        yield times


# ---- ReplicaManager, Log, DelayedOperationPurgatory ----------------------------------


class ReplicaManagerCollector(SafeCollector):
    """Kafka's ReplicaManager gauges and ISR change counts, each local log's Log gauges
    and the produce and fetch purgatories' sizes, in one pass over the partitions."""

    name = "ReplicaManager"

    def __init__(self, replica_manager: Getter) -> None:
        self.replica_manager = replica_manager

    def metrics(self) -> Iterator[Metric | None]:
        rm = self.replica_manager()
        if rm is None:
            return
        partitions = _copy(lambda: rm.partitions.values())
        offline = set(_copy(lambda: rm.offline_partitions))
        leaders = under_replicated = under_min_isr = at_min_isr = 0
        size = _gauge("kafka_log_log_size", "Kafka's Log Size: bytes of the log's segments")
        start = _gauge("kafka_log_log_logstartoffset", "Kafka's Log LogStartOffset")
        end = _gauge("kafka_log_log_logendoffset", "Kafka's Log LogEndOffset")
        segments = _gauge("kafka_log_log_numlogsegments", "Kafka's Log NumLogSegments")
        for i, partition in enumerate(sorted(partitions, key=lambda p: (p.topic, p.index))):
            if i % SLICE == SLICE - 1:
                yield YIELD_POINT
            if partition.is_leader:
                leaders += 1
                isr = len(partition.isr)
                if isr < len(partition.replicas):
                    under_replicated += 1
                min_isr = partition.log.config.min_insync_replicas
                if isr < min_isr:
                    under_min_isr += 1
                elif isr == min_isr:
                    at_min_isr += 1
            if partition.tp in offline:
                continue  # its log is in a failed dir: nothing to read
            labels = {"topic": partition.topic, "partition": str(partition.index)}
            partition_log = partition.log
            try:
                log_segments = partition_log.segments()
                log_size = sum(seg.size for seg in log_segments)
                log_start, log_end = partition_log.log_start_offset, partition_log.log_end_offset
            except Exception:  # deleted or failed meanwhile
                continue
            size.add_sample("kafka_log_log_size", labels, log_size)
            start.add_sample("kafka_log_log_logstartoffset", labels, log_start)
            end.add_sample("kafka_log_log_logendoffset", labels, log_end)
            segments.add_sample("kafka_log_log_numlogsegments", labels, len(log_segments))
        yield from (size, start, end, segments)
        for name, value, what in (
                ("partitioncount", len(partitions), "PartitionCount: partitions here"),
                ("leadercount", leaders, "LeaderCount: partitions led here"),
                ("underreplicatedpartitions", under_replicated,
                 "UnderReplicatedPartitions: led here, with fewer in-sync replicas than "
                 "replicas"),
                ("underminisrpartitioncount", under_min_isr,
                 "UnderMinIsrPartitionCount: led here, ISR below min.insync.replicas"),
                ("atminisrpartitioncount", at_min_isr,
                 "AtMinIsrPartitionCount: led here, ISR at min.insync.replicas"),
                ("offlinereplicacount", len(offline),
                 "OfflineReplicaCount: replicas in failed log dirs")):
            family = _gauge(f"kafka_server_replicamanager_{name}", f"Kafka's ReplicaManager {what}")
            family.add_sample(family.name, {}, value)
            yield family
        for name, value, what in (("isrshrinks", rm.isr_shrinks, "IsrShrinksPerSec"),
                                  ("isrexpands", rm.isr_expands, "IsrExpandsPerSec")):
            family = _counter(f"kafka_server_replicamanager_{name}",
                              f"Kafka's ReplicaManager {what} count: ISR changes of "
                              "partitions led here, as the controller confirmed them")
            family.add_sample(f"kafka_server_replicamanager_{name}_total", {}, value)
            yield family
        watched = _gauge("kafka_server_delayedoperationpurgatory_purgatorysize",
                         "Kafka's DelayedOperationPurgatory PurgatorySize: waiting "
                         "requests, counted once per partition each waits on")
        delayed = _gauge("kafka_server_delayedoperationpurgatory_numdelayedoperations",
                         "Kafka's DelayedOperationPurgatory NumDelayedOperations: waiting "
                         "requests")
        for operation, purgatory in (("Produce", rm.produce_purgatory),
                                     ("Fetch", rm.purgatory)):
            labels = {"delayedOperation": operation}
            waiting = _copy(lambda p=purgatory: p.watchers())
            watched.add_sample(watched.name, labels, sum(len(w) for w in waiting))
            delayed.add_sample(delayed.name, labels,
                               len({f for w in waiting for f in w}))
        yield watched
        yield delayed


# ---- KafkaController -----------------------------------------------------------------


class ControllerCollector(SafeCollector):
    """Kafka's KafkaController gauges. In a ZooKeeper cluster the active controller
    counts the offline partitions and the others say 0, as in Kafka; a single node is
    its own active controller, and its offline partitions are those with no leader or
    in a failed log dir."""

    name = "KafkaController"

    def __init__(self, kafka_controller: Getter, embedded_controller: Getter,
                 replica_manager: Getter) -> None:
        self.kafka_controller = kafka_controller  # ZooKeeper mode
        self.embedded_controller = embedded_controller  # a single node
        self.replica_manager = replica_manager

    def metrics(self) -> Iterator[Metric | None]:
        zk = self.kafka_controller()
        active = topic_count = partition_count = offline = 0
        if zk is not None:
            if zk.is_active:
                active = 1
                offline, topic_count, partition_count = zk.partition_counts()
        else:
            controller = self.embedded_controller()
            if controller is not None:
                active = 1
                rm = self.replica_manager()
                failed = set(_copy(lambda: rm.offline_partitions)) if rm is not None else set()
                for topic in _copy(lambda: controller.topics.values()):
                    topic_count += 1
                    for index, state in list(topic.partitions.items()):
                        partition_count += 1
                        if state.leader < 0 or (topic.name, index) in failed:
                            offline += 1
        for name, value, what in (
                ("activecontrollercount", active, "ActiveControllerCount: 1 on the active "
                 "controller; the cluster's sum is 1 when healthy"),
                ("offlinepartitionscount", offline, "OfflinePartitionsCount: partitions "
                 "without a live leader (active controller only)"),
                ("globaltopiccount", topic_count, "GlobalTopicCount (active controller only)"),
                ("globalpartitioncount", partition_count,
                 "GlobalPartitionCount (active controller only)")):
            family = _gauge(f"kafka_controller_kafkacontroller_{name}",
                            f"Kafka's KafkaController {what}")
            family.add_sample(family.name, {}, value)
            yield family


# ---- socket-server-metrics -----------------------------------------------------------


class SocketServerCollector(SafeCollector):
    """Kafka's socket-server-metrics connection-count per listener (and network
    processor: this broker's one event loop is processor 0)."""

    name = "socket-server-metrics"

    def __init__(self, socket_server: Getter, listeners: Getter | None = None) -> None:
        self.socket_server = socket_server
        self.listeners = listeners  # every listener's name, so idle ones show 0

    def metrics(self) -> Iterator[Metric | None]:
        server = self.socket_server()
        if server is None:
            return
        counts = Counter(c.listener_name for c in _copy(lambda: server.connections))
        names = set(counts) | {b.name for b in _copy(lambda: server.listeners)}
        name = "kafka_server_socket_server_metrics_connection_count"
        family = _gauge(name, "Kafka's socket-server-metrics connection-count: open "
                              "connections per listener")
        for listener in sorted(names):
            family.add_sample(name, {"listener": listener, "networkProcessor": "0"},
                              counts.get(listener, 0))
        yield family


# ---- consumer groups -----------------------------------------------------------------


class GroupLagCollector(SafeCollector):
    """Each consumer group's committed offsets and lag, from the group coordinator
    itself, named as kafka-exporter names them. A group is exported by the broker that
    coordinates it; a partition's lag is its high watermark less the committed offset, as
    `odradek groups describe` computes it, with the high watermark of the replica here
    (a follower's trails the leader's by a fetch) or else the one in `remote_high_watermarks`
    (the console's history sampler asks the leaders for them every few seconds); neither:
    no lag sample for that partition."""

    name = "consumer groups"

    def __init__(self, group_coordinator: Getter, replica_manager: Getter,
                 remote_high_watermarks: dict[tuple[str, int], int] | None = None) -> None:
        self.group_coordinator = group_coordinator
        self.replica_manager = replica_manager
        self.remote_high_watermarks = {} if remote_high_watermarks is None else (
            remote_high_watermarks)

    def metrics(self) -> Iterator[Metric | None]:
        coordinator = self.group_coordinator()
        rm = self.replica_manager()
        if coordinator is None or rm is None:
            return
        groups = sorted(_copy(lambda: coordinator.manager.groups.values()),
                        key=lambda g: g.group_id)
        members = _gauge("kafka_consumergroup_members", "Members of the consumer group")
        current = _gauge("kafka_consumergroup_current_offset",
                         "The group's committed offset of the partition")
        current_sum = _gauge("kafka_consumergroup_current_offset_sum",
                             "The group's committed offsets of the topic, summed")
        lag = _gauge("kafka_consumergroup_lag",
                     "The partition's high watermark less the group's committed offset")
        lag_sum = _gauge("kafka_consumergroup_lag_sum", "The group's lag on the topic")
        partitions = rm.partitions
        remote = self.remote_high_watermarks
        walked = 0  # groups and partitions since the last yield point
        for group in groups:
            walked += 1
            if str(group.state) == "Dead":
                continue
            group_id = group.group_id
            members.add_sample(members.name, {"consumergroup": group_id}, len(group.members))
            offsets = dict(_copy(lambda g=group: g.offsets.items()))
            offset_sums: dict[str, int] = {}
            lag_sums: dict[str, int] = {}
            for (topic, index), committed in sorted(offsets.items()):
                walked += 1
                if walked >= SLICE:
                    walked = 0
                    yield YIELD_POINT
                labels = {"consumergroup": group_id, "topic": topic, "partition": str(index)}
                current.add_sample(current.name, labels, committed.offset)
                offset_sums[topic] = offset_sums.get(topic, 0) + committed.offset
                partition = partitions.get((topic, index))
                if partition is not None:
                    high_watermark = partition.high_watermark
                else:
                    high_watermark = remote.get((topic, index))
                    if high_watermark is None:
                        continue  # not here, and not asked of its leader
                value = high_watermark - committed.offset
                lag.add_sample(lag.name, labels, value)
                lag_sums[topic] = lag_sums.get(topic, 0) + value
            for topic, value in offset_sums.items():
                current_sum.add_sample(current_sum.name,
                                       {"consumergroup": group_id, "topic": topic}, value)
            for topic, value in lag_sums.items():
                lag_sum.add_sample(lag_sum.name, {"consumergroup": group_id, "topic": topic},
                                   value)
        yield from (members, current, current_sum, lag, lag_sum)
