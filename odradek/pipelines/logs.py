"""Log and metrics aggregation: error counts and rates per service per window, and alerts.

Application log lines (`2024-05-01T12:00:03.120Z ERROR payments message...`) are parsed;
lines that do not have this shape (the `at ...` lines of a stack trace, truncated lines)
are dropped. Per service and tumbling window of the lines' own time, the query counts the
lines, the errors (level ERROR or FATAL) and their rate, and writes one JSON record per
window to the output topic. When a window has at least `max_errors` errors, or an error
rate of at least `max_error_rate` over at least `min_lines` lines, it also writes an alert
to the alert topic.

A window is written once, when the watermark has passed its end (append mode): so each
window alerts at most once, `window + watermark` after it began. Both topics are written by
one query, exactly once for read_committed consumers (the sink's transactions: a micro-batch
replayed after a failure is not sent again).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

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
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

SUMMARY = "log lines -> error counts and rates per service per window, alerts on thresholds"
TOPIC = "app-logs"
# time, level, service, message: the same pattern in Spark (Java) and in the tests (Python).
LINE = r"^(\S+) +(TRACE|DEBUG|INFO|WARN|ERROR|FATAL) +([\w.-]+) +(.*)$"
ERROR_LEVELS = ("ERROR", "FATAL")


@dataclass
class LogsConfig(StreamConfig):
    checkpoint: str = option("checkpoints/logs", "the checkpoint directory")
    input: str = option(TOPIC, "the topic of log lines")
    output: str = option("service-error-rates", "the topic of per-window counts")
    alerts: str = option("service-alerts", "the topic of alerts")
    window: str = option("1 minute", "the length of the tumbling windows")
    watermark: str = option("30 seconds", "how late a line may arrive and still be counted")
    max_errors: int = option(10, "alert when a window has at least this many errors")
    max_error_rate: float = option(0.5, "alert when a window's error rate is at least this")
    min_lines: int = option(10, "... over at least this many lines (no alert for 1 of 1)")


def window_stats(spark: SparkSession, config: LogsConfig) -> DataFrame:
    """service, window_start, window_end, lines, errors, error_rate: final per window."""
    from pyspark.sql import functions as F

    text = read_stream(spark, config, subscribe=config.input).select(
        F.col("value").cast("string").alias("line"))
    parts = [F.regexp_extract("line", LINE, i) for i in (1, 2, 3)]
    lines = (text.select(F.try_to_timestamp(parts[0]).alias("time"), parts[1].alias("level"),
                         parts[2].alias("service"))
             .where("time IS NOT NULL AND service != ''"))   # not a log line: dropped
    return (lines.withWatermark("time", config.watermark)
            .groupBy(F.window("time", config.window), "service")
            .agg(F.count("*").alias("lines"),
                 F.count_if(F.col("level").isin(*ERROR_LEVELS)).alias("errors"))
            .select("service", F.col("window.start").alias("window_start"),
                    F.col("window.end").alias("window_end"), "lines", "errors",
                    (F.col("errors") / F.col("lines")).alias("error_rate")))


def run(spark: SparkSession, config: LogsConfig) -> list[StreamingQuery]:
    from pyspark.sql import functions as F

    ensure_topics(config.bootstrap, {name: DEFAULT_PARTITIONS
                                     for name in (config.input, config.output, config.alerts)})
    stats = window_stats(spark, config)
    crossed = F.filter(F.array(
        F.when(F.col("errors") >= config.max_errors, F.lit("errors")),
        F.when((F.col("lines") >= config.min_lines)
               & (F.col("error_rate") >= config.max_error_rate), F.lit("error_rate"))),
        lambda reason: reason.isNotNull())
    columns = ["service", "window_start", "window_end", "lines", "errors", "error_rate"]
    metric = F.struct(F.lit(config.output).alias("topic"),
                      F.to_json(F.struct(*columns)).alias("value"))
    alert = F.struct(F.lit(config.alerts).alias("topic"), F.to_json(F.struct(
        *columns, crossed.alias("crossed"), F.lit(config.max_errors).alias("max_errors"),
        F.lit(config.max_error_rate).alias("max_error_rate"))).alias("value"))
    # One query writes both topics: each window's row becomes one or two records.
    records = stats.select(
        F.col("service").alias("key"),
        F.explode(F.when(F.size(crossed) > 0, F.array(metric, alert))
                  .otherwise(F.array(metric))).alias("record"))
    out = records.select("key", "record.topic", "record.value")
    return [start(to_topic(out, config.bootstrap).outputMode("append"), config, "logs")]


# ---- the generator -------------------------------------------------------------------------

SERVICES = {"checkout": 3, "payments": 2, "search": 5, "auth": 3, "inventory": 2}
MESSAGES = {
    "DEBUG": ["cache hit for key {id}", "span {id} finished in {ms} ms"],
    "INFO": ["GET /api/v1/{svc}/{id} 200 in {ms} ms", "POST /api/v1/{svc} 201 in {ms} ms",
             "user user-{n} session refreshed", "processed job {id} in {ms} ms"],
    "WARN": ["slow query on {svc}_db took {ms} ms", "retrying request {id} (attempt 2)"],
    "ERROR": ["GET /api/v1/{svc}/{id} 500: NullPointerException",
              "timeout calling {svc}-db after 3000 ms"],
}
BURST_ERRORS = ["charge {id} failed: bank-gateway timed out after 3000 ms",
                "connection refused: bank-gateway.internal:443 (request {id})"]
STACK = ["\tat com.example.{svc}.Client.call(Client.java:{n})",
         "\tat java.base/java.lang.Thread.run(Thread.java:840)"]


def generate(bootstrap: str, topic: str = TOPIC, count: int = 1000, rate: float = 20.0,
             seed: int | None = None, start: int | None = None,
             partitions: int = DEFAULT_PARTITIONS) -> list[Record]:
    """Log lines of five services, keyed by service: mostly INFO, some DEBUG and WARN, 3%
    ERROR, and a two-line stack trace after some errors. During the middle fifth of the
    stream `payments` has an outage: it logs three times as much, 70% of it errors, so its
    windows there cross the alert thresholds."""
    rng = random.Random(seed)
    clock = Clock(rate, start)
    ensure_topics(bootstrap, {topic: partitions})
    names, weights = list(SERVICES), list(SERVICES.values())
    records: list[Record] = []
    i = 0
    while len(records) < count:
        outage = 0.4 * count <= len(records) < 0.6 * count
        service = rng.choices(names, [w * (6 if outage and s == "payments" else 1)
                                      for s, w in zip(names, weights, strict=True)])[0]
        if outage and service == "payments" and rng.random() < 0.7:
            level, template = "ERROR", rng.choice(BURST_ERRORS)
        else:
            level = rng.choices(["DEBUG", "INFO", "WARN", "ERROR"], [5, 82, 10, 3])[0]
            template = rng.choice(MESSAGES[level])
        fields = {"svc": service, "id": f"{rng.getrandbits(32):08x}",
                  "ms": rng.randint(2, 900), "n": rng.randint(1, 999)}
        sent_at = clock.at(i)
        lines = [f"{iso(sent_at - rng.randint(0, 400))} {level:<5} {service} "
                 + template.format(**fields)]
        if level == "ERROR" and rng.random() < 0.3:
            lines += [s.format(**fields) for s in STACK]
        for line in lines[:count - len(records)]:
            records.append(Record(topic, service.encode(), line.encode(), sent_at))
        i += 1
    return send(bootstrap, records, clock)
