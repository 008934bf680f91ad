"""Activity tracking: page views per page per minute, on Avro records.

Page-view events are Avro records (PAGE_VIEW: user, page, referrer, event_time) in
Confluent's wire format, their schema in the schema registry under `<input>-value`; the
source decodes them into typed columns with the subject's schema (valueFormat=avro), and
the counts are written as Avro too, their schema registered under `<output>-value`. They
are counted per page in tumbling
windows of event time. The watermark trails the latest event time seen by `watermark`; a
window is written once, with its final count, when the watermark passes its end. An event
still counts, however late, while its window is open; events of a window already written
are dropped.

One query writes both outputs from foreachBatch, so the input is read and aggregated once.
A micro-batch's counts go to the Parquet table under `batch_id=N`, overwritten as a whole:
a batch replayed after a failure (the same offsets and state, so the same rows) replaces
its own files, which keeps the table exactly once. The topic gets them exactly once too, for
read_committed consumers: the sink's foreachBatch mode (checkpointLocation and batchId)
commits a micro-batch's transactions once, and aborts those of a replay.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.pipelines.common import (
    DEFAULT_PARTITIONS,
    Clock,
    Record,
    StreamConfig,
    ensure_topics,
    option,
    read_stream,
    send,
    start,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

SUMMARY = "page views (Avro) -> views per page per minute, to a topic (Avro) and a Parquet table"
TOPIC = "page-views"
PAGE_VIEW = {
    "type": "record", "name": "PageView", "namespace": "shop.activity",
    "fields": [
        {"name": "user", "type": "string"},
        {"name": "page", "type": "string"},
        {"name": "referrer", "type": ["null", "string"], "default": None},
        {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}


@dataclass
class ActivityConfig(StreamConfig):
    checkpoint: str = option("checkpoints/activity", "the checkpoint directory (one "
                             "sub-directory per query)")
    input: str = option(TOPIC, "the topic of page-view events")
    output: str = option("page-views-per-minute", "the topic of the counts")
    table: str = option("tables/page-views-per-minute", "the Parquet table of the counts")
    window: str = option("1 minute", "the length of the tumbling windows")
    watermark: str = option("30 seconds", "how late (behind the latest event time seen) an "
                            "event may arrive and still be counted")
    schema_registry: str = option("http://localhost:8081", "the schema registry's URL",
                                  flag="--schema-registry-url")


def counts(spark: SparkSession, config: ActivityConfig) -> DataFrame:
    """page, window_start, window_end, views: the final count of each window."""
    from pyspark.sql import functions as F

    events = read_stream(spark, config, subscribe=config.input, valueFormat="avro",
                         **{"schema.registry.url": config.schema_registry})
    views = events.select("value.*")
    return (views.withWatermark("event_time", config.watermark)
            .groupBy(F.window("event_time", config.window), "page").count()
            .select("page", F.col("window.start").alias("window_start"),
                    F.col("window.end").alias("window_end"), F.col("count").alias("views")))


def run(spark: SparkSession, config: ActivityConfig) -> list[StreamingQuery]:
    from pyspark.sql import functions as F

    ensure_topics(config.bootstrap, {config.input: DEFAULT_PARTITIONS,
                                     config.output: DEFAULT_PARTITIONS})
    checkpoint = os.path.join(config.checkpoint, "activity")   # the query's, as start() sets it

    def write(batch: DataFrame, batch_id: int) -> None:
        batch.persist()   # written twice: computed once
        try:
            if batch.isEmpty():
                return
            batch.write.mode("overwrite").parquet(
                os.path.join(config.table, f"batch_id={batch_id}"))
            (batch.select(F.col("page").alias("key"),
                          F.struct("page", "window_start", "window_end", "views").alias("value"))
             .write.format("odradek").option("kafka.bootstrap.servers", config.bootstrap)
             .option("topic", config.output).option("valueFormat", "avro")
             .option("schema.registry.url", config.schema_registry)
             .option("checkpointLocation", checkpoint)
             .option("batchId", batch_id).mode("append").save())
        finally:
            batch.unpersist()

    # Append mode: each window once, when the watermark has passed it.
    return [start(counts(spark, config).writeStream.outputMode("append").foreachBatch(write),
                  config, "activity")]


# ---- the generator -------------------------------------------------------------------------

PAGES = (["/", "/search", "/cart", "/checkout", "/account", "/blog/spring-sale",
          "/blog/how-we-ship"] + [f"/products/{n}" for n in range(1, 21)])
# Popularity falls with the rank of a page, as it does on real sites.
WEIGHTS = [1 / (rank + 1) for rank in range(len(PAGES))]
EXTERNAL = ["https://www.google.com/", "https://duckduckgo.com/", "https://t.co/x7Kq2",
            "https://news.ycombinator.com/", "https://newsletter.example.com/may", ""]
LATE_FRACTION = 0.08


def generate(bootstrap: str, topic: str = TOPIC, count: int = 1000, rate: float = 10.0,
             seed: int | None = None, start: int | None = None, users: int = 50,
             partitions: int = DEFAULT_PARTITIONS,
             schema_registry: str = "http://localhost:8081") -> list[Record]:
    """Page views of `users` users browsing: referrers follow their previous page, and about
    8% of the events arrive late (their event_time 20 s to 3 min before the others: a phone
    that was offline). Values are Avro records (schema PAGE_VIEW, registered as
    <topic>-value at the schema registry); the record key is the user; the record timestamp
    is the time of sending, event_time the time of viewing."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    rng = random.Random(seed)
    clock = Clock(rate, start)
    ensure_topics(bootstrap, {topic: partitions})
    serialize = AvroSerializer(SchemaRegistryClient({"url": schema_registry}),
                               json.dumps(PAGE_VIEW))
    context = SerializationContext(topic, MessageField.VALUE)
    previous: dict[str, str] = {}
    records = []
    for i in range(count):
        user = f"user-{rng.randint(1, users):03d}"
        page = rng.choices(PAGES, WEIGHTS)[0]
        referrer = (f"https://shop.example.com{previous[user]}"
                    if user in previous and rng.random() < 0.8 else rng.choice(EXTERNAL))
        previous[user] = page
        sent_at = clock.at(i)
        viewed_at = sent_at - (rng.randint(20_000, 180_000) if rng.random() < LATE_FRACTION
                               else rng.randint(0, 1500))
        event = {"user": user, "page": page, "referrer": referrer or None,
                 "event_time": viewed_at}
        try:
            value = serialize(event, context)
        except Exception as e:  # the first registers the schema: SchemaRegistryError, httpx
            raise RuntimeError(f"the schema registry at {schema_registry} did not take the "
                               f"page views' schema: {e}") from e
        records.append(Record(topic, user.encode(), value, sent_at))
    return send(bootstrap, records, clock)
