"""Topic to topic: parse, check, enrich and route JSON events by their type.

Each input record should be a JSON object with a `type` (order, click or signup) and that
type's required fields. A valid event goes to the topic `<output>.<type>`, keyed by its user,
as JSON with the known fields (others are dropped: the schema is EVENT_FIELDS) and two
derived ones: `event_date` (the UTC date of `ts`) and, for orders, `amount_eur` (the amount
in euros at the fixed RATES_TO_EUR). An invalid record (not JSON, no or an unknown type, a
required field missing or malformed, an unknown currency, an amount not positive) goes
unchanged to the dead-letter topic with an `error` header saying why, or is dropped when the
dead-letter topic is ''. Every output record keeps the input's headers and gains
`pipeline`, `source` (topic/partition/offset) and `processed-at` headers.

One query writes every output topic through the writer's topic column, exactly once for
read_committed consumers (the sink's default).
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
    StreamConfig,
    ensure_topics,
    iso,
    option,
    read_stream,
    send,
    start,
    to_topic,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

SUMMARY = "mixed JSON events -> parsed, checked, enriched, routed to a topic per type"
TOPIC = "events"
EVENT_FIELDS = {"type": "string", "id": "string", "user": "string", "ts": "string",
                "amount": "double", "currency": "string", "items": "int", "page": "string",
                "element": "string", "plan": "string", "country": "string"}
REQUIRED = {"order": ["id", "user", "ts", "amount", "currency"],
            "click": ["user", "ts", "page"],
            "signup": ["user", "ts", "plan"]}
RATES_TO_EUR = {"EUR": 1.0, "USD": 0.92, "GBP": 1.17, "CHF": 1.04}


@dataclass
class RouteConfig(StreamConfig):
    checkpoint: str = option("checkpoints/route", "the checkpoint directory")
    input: str = option(TOPIC, "the topic of mixed events")
    output: str = option("events", "valid events go to <output>.<type>")
    dead_letter: str = option("events.invalid", "the topic of invalid records ('' drops them)")


def output_topics(config: RouteConfig) -> list[str]:
    return [f"{config.output}.{kind}" for kind in REQUIRED] + (
        [config.dead_letter] if config.dead_letter else [])


def _rates() -> Column:
    from pyspark.sql import functions as F

    return F.create_map(*[F.lit(x) for pair in RATES_TO_EUR.items() for x in pair])


def _error(event: Column) -> Column:
    """Why a parsed event is invalid; null when it is valid."""
    from pyspark.sql import functions as F

    kind, currency = event["type"], event["currency"]
    missing = F.lit(None).cast("array<string>")
    for known, names in REQUIRED.items():
        missing = F.when(kind == known, F.filter(
            F.array(*[F.when(event[n].isNull(), F.lit(n)) for n in names]),
            lambda name: name.isNotNull())).otherwise(missing)
    order = kind == "order"
    return (F.when(event.isNull(), F.lit("not JSON"))
            .when(kind.isNull(), F.lit("no type"))
            .when(~kind.isin(*REQUIRED), F.concat(F.lit("unknown type "), kind))
            .when(F.size(missing) > 0,
                  F.concat(F.lit("missing or malformed: "), F.array_join(missing, ", ")))
            .when(order & _rates()[currency].isNull(),
                  F.concat(F.lit("unknown currency "), currency))
            .when(order & (event["amount"] <= 0), F.lit("amount not positive")))


def routed(spark: SparkSession, config: RouteConfig) -> DataFrame:
    """key, value, topic, headers of every output record."""
    from pyspark.sql import functions as F

    records = read_stream(spark, config, subscribe=config.input, headers=True)
    parsed = F.try_parse_json(F.col("value").cast("string"))
    fields = {name: F.try_variant_get(parsed, f"$.{name}", kind)
              for name, kind in EVENT_FIELDS.items()}
    fields["ts"] = F.try_to_timestamp(fields["ts"])   # malformed times count as missing
    event = F.when(parsed.isNotNull(), F.struct(*[c.alias(n) for n, c in fields.items()]))
    checked = records.select("*", event.alias("event")).withColumn("error",
                                                                   _error(F.col("event")))
    enriched = F.col("event").withField("event_date", F.to_date("event.ts").cast("string"))
    enriched = enriched.withField("amount_eur", F.when(
        F.col("event.type") == "order",
        F.round(F.col("event.amount") * _rates()[F.col("event.currency")], 2)))

    def header(name: str, value: Column) -> Column:
        return F.struct(F.lit(name).alias("key"), value.cast("binary").alias("value"))

    ours = [header("pipeline", F.lit("route")),
            header("source", F.concat_ws("/", "topic", "partition", "offset")),
            header("processed-at", F.date_format(F.current_timestamp(),
                                                 "yyyy-MM-dd'T'HH:mm:ss.SSSXXX"))]
    headers = F.concat(F.coalesce("headers", F.array().cast(
        "array<struct<key:string,value:binary>>")), F.array(*ours))
    if not config.dead_letter:
        checked = checked.where("error IS NULL")
    # One projection, not a union of valid and invalid rows: a union would read the input
    # twice per micro-batch.
    valid = F.col("error").isNull()
    return checked.select(
        F.when(valid, F.col("event.user").cast("binary")).otherwise(F.col("key")).alias("key"),
        F.when(valid, F.to_json(enriched).cast("binary")).otherwise(F.col("value"))
        .alias("value"),
        F.when(valid, F.concat(F.lit(config.output + "."), F.col("event.type")))
        .otherwise(F.lit(config.dead_letter)).alias("topic"),
        F.when(valid, headers).otherwise(F.concat(headers, F.array(
            header("error", F.col("error"))))).alias("headers"))


def run(spark: SparkSession, config: RouteConfig) -> list[StreamingQuery]:
    ensure_topics(config.bootstrap, {name: DEFAULT_PARTITIONS
                                     for name in [config.input, *output_topics(config)]})
    return [start(to_topic(routed(spark, config), config.bootstrap), config, "route")]


# ---- the generator -------------------------------------------------------------------------

PAGES = ["/", "/search", "/products/7", "/products/12", "/cart", "/checkout"]
ELEMENTS = ["add-to-cart", "buy-now", "search-box", "banner", "menu"]
APPS = [b"web", b"ios", b"android"]


def _event(rng: random.Random, user: str, ts: str, n: int) -> dict[str, Any]:
    kind = rng.choices(["click", "order", "signup"], [70, 22, 8])[0]
    if kind == "click":
        return {"type": "click", "user": user, "ts": ts, "page": rng.choice(PAGES),
                "element": rng.choice(ELEMENTS)}
    if kind == "order":
        return {"type": "order", "id": f"ord-{n:06d}", "user": user, "ts": ts,
                "amount": round(rng.uniform(3, 250), 2), "currency":
                rng.choice(list(RATES_TO_EUR)), "items": rng.randint(1, 6)}
    return {"type": "signup", "user": user, "ts": ts, "plan": rng.choice(["free", "pro"]),
            "country": rng.choice(["PT", "CZ", "NO", "FR", "BE", "IT", "PL"])}


def _spoil(rng: random.Random, event: dict[str, Any]) -> bytes:
    """An invalid record as real producers make them."""
    text = json.dumps(event)
    how = rng.choice(["truncated", "text", "unknown type", "missing", "currency", "amount"])
    if how == "truncated":
        return text[:len(text) // 2].encode()
    if how == "text":
        return b"GET /healthz 200 OK"
    if how == "unknown type":
        return json.dumps({**event, "type": "heartbeat"}).encode()
    if how == "missing":
        return json.dumps({k: v for k, v in event.items() if k != "user"}).encode()
    if how == "currency":
        return json.dumps({**event, "type": "order", "id": "ord-x", "amount": 10.0,
                           "currency": "DOGE"}).encode()
    return json.dumps({**event, "type": "order", "id": "ord-y", "amount": -4.5,
                       "currency": "EUR"}).encode()


def generate(bootstrap: str, topic: str = TOPIC, count: int = 1000, rate: float = 10.0,
             seed: int | None = None, start: int | None = None,
             partitions: int = DEFAULT_PARTITIONS) -> list[Record]:
    """Clicks, orders and signups of 40 users, keyed by user, with a `source-app` header;
    about 6% of the records are invalid: truncated JSON, plain text, an unknown type, a
    missing field, an unknown currency, a negative amount."""
    rng = random.Random(seed)
    clock = Clock(rate, start)
    ensure_topics(bootstrap, {topic: partitions})
    records = []
    for i in range(count):
        user = f"user-{rng.randint(1, 40):03d}"
        now = clock.at(i)
        event = _event(rng, user, iso(now), i)
        value = _spoil(rng, event) if rng.random() < 0.06 else json.dumps(event).encode()
        records.append(Record(topic, user.encode(), value, now,
                              [("source-app", rng.choice(APPS))]))
    return send(bootstrap, records, clock)
