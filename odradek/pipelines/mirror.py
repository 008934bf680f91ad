"""Mirror: copy topics from one cluster (A) to another (B), record for record.

The query reads the topics (a list, or every topic whose whole name matches a pattern;
internal `__` topics never) and writes each record to the topic of the same name on B
(after an optional prefix) with the same key, value (tombstones too), headers, timestamp
(written as CreateTime) and partition. Within a partition the order is kept: each Spark task
reads one partition's range and writes it in one transaction.

Topics on B must have at least as many partitions as on A. Missing ones are created from A's
metadata (its partition count, and the configs set on the topic, such as cleanup.policy);
this happens at the start and before every micro-batch, so topics created on A later that
match the pattern are mirrored too. A target with fewer partitions stops the mirror with an
error. Delivery is exactly once for read_committed consumers of B: each micro-batch is written
in transactions that are committed once (the sink's foreachBatch mode: checkpointLocation and
batchId), so a micro-batch replayed after a failure is not copied twice. Offsets on B differ
from A's: each micro-batch's commit markers take an offset per partition.
"""

from __future__ import annotations

import json
import os
import random
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.pipelines.common import (
    DEFAULT_PARTITIONS,
    Clock,
    Record,
    StreamConfig,
    admin,
    ensure_topics,
    option,
    read_stream,
    send,
    start,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

SUMMARY = "topics of cluster A -> cluster B, keeping keys, headers, timestamps and partitions"
TOPIC = "sensor-readings"
_TIMEOUT = 30.0


@dataclass
class MirrorConfig(StreamConfig):
    bootstrap: str = option("localhost:9092", "the source cluster (A)",
                            flag="--bootstrap-server")
    checkpoint: str = option("checkpoints/mirror", "the checkpoint directory")
    target: str = option("localhost:9093", "the target cluster's (B) bootstrap servers")
    topics: str = option("", "the topics to copy, comma-separated")
    pattern: str = option("", "or: a regular expression that whole topic names match")
    prefix: str = option("", "prepended to the topics' names on B, such as 'east.'")

    def __post_init__(self) -> None:
        if bool(self.topics) == bool(self.pattern):
            raise ValueError("give either topics or a pattern")


def source_topics(config: MirrorConfig) -> dict[str, int]:
    """The topics of A the mirror copies, with their partition counts."""
    topics = admin(config.bootstrap).list_topics(timeout=_TIMEOUT).topics
    if config.topics:
        wanted = [t.strip() for t in config.topics.split(",") if t.strip()]
        missing = [t for t in wanted if t not in topics]
        if missing:
            raise ValueError(f"topics {missing} do not exist on {config.bootstrap}")
    else:
        pattern = re.compile(config.pattern)
        wanted = [t for t in topics if pattern.fullmatch(t) and not t.startswith("__")]
    return {t: len(topics[t].partitions) for t in wanted}


def sync_topics(config: MirrorConfig) -> list[str]:
    """Creates the missing topics on B as they are on A; returns their names. Fails if a
    topic of B has fewer partitions than on A."""
    from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

    source = source_topics(config)
    targets = admin(config.target).list_topics(timeout=_TIMEOUT).topics
    for topic, count in source.items():
        found = targets.get(config.prefix + topic)
        if found is not None and len(found.partitions) < count:
            raise ValueError(f"topic {config.prefix + topic} has {len(found.partitions)} "
                             f"partitions on {config.target}, fewer than the {count} of "
                             f"{topic} on {config.bootstrap}")
    missing = [t for t in source if config.prefix + t not in targets]
    if not missing:
        return []
    client = admin(config.bootstrap)   # referenced until the futures are done
    futures = client.describe_configs(
        [ConfigResource(ResourceType.TOPIC, t) for t in missing], request_timeout=_TIMEOUT)
    configs = {config.prefix + resource.name: {
        name: entry.value for name, entry in future.result(_TIMEOUT).items()
        if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
        for resource, future in futures.items()}
    return ensure_topics(config.target, {config.prefix + t: source[t] for t in missing},
                         configs)


def records(spark: SparkSession, config: MirrorConfig) -> DataFrame:
    """The rows to write to B: key, value, headers, partition, timestamp, topic."""
    from pyspark.sql import functions as F

    rows = read_stream(spark, config, subscribe=config.topics, pattern=config.pattern,
                       headers=True)
    return rows.select("key", "value", "headers", "partition", "timestamp",
                       F.concat(F.lit(config.prefix), "topic").alias("topic"))


def run(spark: SparkSession, config: MirrorConfig) -> list[StreamingQuery]:
    sync_topics(config)   # a target with too few partitions fails before the query starts
    checkpoint = os.path.join(config.checkpoint, "mirror")   # the query's, as start() sets it

    def write(batch: DataFrame, batch_id: int) -> None:
        sync_topics(config)   # topics that appeared on A since the last micro-batch
        (batch.write.format("odradek").option("kafka.bootstrap.servers", config.target)
         .option("checkpointLocation", checkpoint).option("batchId", batch_id)
         .mode("append").save())

    return [start(records(spark, config).writeStream.foreachBatch(write), config, "mirror")]


# ---- the generator -------------------------------------------------------------------------

def generate(bootstrap: str, topic: str = TOPIC, count: int = 1000, rate: float = 10.0,
             seed: int | None = None, start: int | None = None,
             partitions: int = DEFAULT_PARTITIONS) -> list[Record]:
    """Readings of 30 sensors keyed by device id (a few without a key), with trace-id and
    content-type headers (some with an empty or null value) and now and then a tombstone:
    the shapes a mirror must keep."""
    rng = random.Random(seed)
    clock = Clock(rate, start)
    ensure_topics(bootstrap, {topic: partitions})
    records = []
    for i in range(count):
        device = f"sensor-{rng.randint(1, 30):02d}"
        key = None if rng.random() < 0.05 else device.encode()
        reading: dict[str, Any] = {"device": device, "temp_c": round(rng.gauss(21, 3), 1),
                                   "battery": rng.randint(5, 100)}
        value = None if rng.random() < 0.03 else json.dumps(reading).encode()
        headers: list[tuple[str, bytes | None]] = [
            ("trace-id", f"{rng.getrandbits(64):016x}".encode()),
            ("content-type", b"application/json")]
        if rng.random() < 0.1:
            headers.append(("debug", rng.choice([b"", None])))
        records.append(Record(topic, key, value, clock.at(i), headers))
    return send(bootstrap, records, clock)
