"""Reprocessing (event sourcing): the latest state of every key, rebuilt from a topic.

A batch query reads the input from its earliest to its latest offset (what is there when it
starts), keeps the record with the highest offset of each key, drops the keys whose latest
record is a tombstone (a null value: the entity was deleted), and writes the result as a
Parquet snapshot table, replacing the previous snapshot. Records without a key are ignored.

The order of a key's records is their order in its partition, so a key must live in one
partition, as Kafka's partitioners keep it (unless the topic's partition count changed).
Keys and values are decoded as UTF-8 text.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.pipelines.common import (
    DEFAULT_PARTITIONS,
    Clock,
    Record,
    ensure_topics,
    iso,
    option,
    send,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SUMMARY = "a topic of entity changes, read in batch -> the latest state per key (Parquet)"
TOPIC = "customers"


@dataclass
class ReprocessConfig:
    bootstrap: str = option("localhost:9092", "the cluster's bootstrap servers",
                            flag="--bootstrap-server")
    input: str = option(TOPIC, "the topic(s) of change events, comma-separated")
    table: str = option("tables/customers-snapshot", "the Parquet snapshot table (replaced)")


def latest_state(spark: SparkSession, config: ReprocessConfig) -> DataFrame:
    """key, value, partition, offset, timestamp of each key's latest record (no tombstones)."""
    from pyspark.sql import functions as F

    changes = (spark.read.format("odradek")
               .option("kafka.bootstrap.servers", config.bootstrap)
               .option("subscribe", config.input)
               .option("startingOffsets", "earliest").option("endingOffsets", "latest")
               .load().where("key IS NOT NULL"))
    last = (changes.groupBy("key")
            .agg(F.max_by(F.struct("value", "partition", "offset", "timestamp"), "offset")
                 .alias("last")))
    return (last.where("last.value IS NOT NULL")
            .select(F.col("key").cast("string").alias("key"),
                    F.col("last.value").cast("string").alias("value"),
                    "last.partition", "last.offset", "last.timestamp"))


def run(spark: SparkSession, config: ReprocessConfig) -> DataFrame:
    """Writes the snapshot and returns it, read back from the table."""
    latest_state(spark, config).write.mode("overwrite").parquet(config.table)
    return spark.read.parquet(config.table)


# ---- the generator -------------------------------------------------------------------------

FIRST = ["Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Radia"]
LAST = ["Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov", "Knuth", "Allen", "Thompson"]
CITIES = ["Lisbon", "Prague", "Oslo", "Lyon", "Porto", "Ghent", "Turin", "Kraków"]
TIERS = ["free", "pro", "business"]


def generate(bootstrap: str, topic: str = TOPIC, count: int = 1000, rate: float = 10.0,
             seed: int | None = None, start: int | None = None, customers: int = 100,
             partitions: int = DEFAULT_PARTITIONS) -> list[Record]:
    """Changes of `customers` customers keyed by their id, each value the customer's whole
    new state (JSON): created, then updated (email, city, tier), sometimes deleted (a
    tombstone: null value) and, once in a while, created again."""
    rng = random.Random(seed)
    clock = Clock(rate, start)
    ensure_topics(bootstrap, {topic: partitions})
    state: dict[str, dict[str, Any]] = {}
    records = []
    for i in range(count):
        key = f"customer-{rng.randint(1, customers):04d}"
        now = clock.at(i)
        current = state.get(key)
        if current is not None and rng.random() < 0.1:
            del state[key]
            records.append(Record(topic, key.encode(), None, now))
            continue
        if current is None:
            first, last = rng.choice(FIRST), rng.choice(LAST)
            current = {"id": key, "name": f"{first} {last}",
                       "email": f"{first.lower()}.{last.lower()}@example.com",
                       "city": rng.choice(CITIES), "tier": "free", "version": 0}
        else:
            changed = rng.choice(["email", "city", "tier"])
            current = dict(current)
            if changed == "email":
                first = current["name"].split()[0].lower()
                current["email"] = f"{first}{rng.randint(1, 99)}@example.org"
            elif changed == "city":
                current["city"] = rng.choice(CITIES)
            else:
                current["tier"] = rng.choice(TIERS)
        current["version"] += 1
        current["updated_at"] = iso(now)
        state[key] = current
        records.append(Record(topic, key.encode(), json.dumps(current).encode(), now))
    return send(bootstrap, records, clock)
