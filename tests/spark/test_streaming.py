"""Structured Streaming over the `odradek` source, against a real broker and Spark local[2]:
event-time windows with a watermark across micro-batches and restarts, retention deleting
records a query still needed (failOnDataLoss), and maxOffsetsPerTrigger while data arrives.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from pyspark.sql import functions
from support.broker import BrokerProcess
from support.spark import (
    await_query,
    create_topic,
    data_batches,
    earliest_offset,
    produce_values,
    read,
    stream,
    wait_for,
)

# ---- windowed counts with a watermark -----------------------------------------------------

BASE = 1_700_000_000          # event times are BASE + t seconds; BASE is a multiple of WINDOW
WINDOW = 10                   # tumbling windows of 10 s
DELAY = 20                    # withWatermark(..., "20 seconds")

# What arrives in each step, (key, t). Each step is read by one run of the query (availableNow:
# one micro-batch with the records, then the no-data batch Spark runs when the watermark moved,
# which emits the windows it closed). "late" is relative to the largest t of earlier steps.
STEPS: list[list[tuple[str, int]]] = [
    # 1. Out of order within the batch; the watermark is still 0, so every event counts.
    #    max t 59 -> watermark 39: windows [0,10) [10,20) [20,30) are emitted.
    [("a", 3), ("b", 7), ("a", 14), ("a", 11), ("b", 25), ("a", 38), ("b", 31), ("a", 52),
     ("b", 47), ("a", 59), ("b", 5)],
    # 2. On time: 61 64 72 79 85. Late by less than the delay (14 s and 18 s behind 59, in the
    #    open window [40,50)): a@45, b@41, counted. Late beyond the watermark 39, their window
    #    already emitted or closed: a@12, b@25, c@5 (a key never seen in [0,10)), dropped.
    #    max t 85 -> watermark 65: windows [30,40) [40,50) [50,60) are emitted.
    [("a", 61), ("a", 45), ("b", 64), ("a", 12), ("b", 41), ("a", 72), ("b", 25), ("c", 5),
     ("b", 85), ("a", 79)],
    # 3. On time: 90 101 118 119, and z@400. Late but within the delay: a@70 (window [70,80)),
    #    b@66 (window [60,70)), counted. Beyond the watermark 65: a@44 (window [40,50), emitted
    #    after step 2 with a@45 counted), b@58, c@33, dropped.
    #    max t 400 -> watermark 380: every window but z's [400,410) is emitted.
    [("a", 90), ("a", 44), ("a", 70), ("b", 101), ("b", 58), ("b", 66), ("c", 33),
     ("a", 118), ("z", 400), ("a", 119)],
]


class WindowModel:
    """Spark's documented watermark semantics, in plain Python, one micro-batch at a time.

    The watermark a micro-batch runs with is max(event time of the earlier batches) - DELAY
    (never lower than before; 0 before any). In append mode a window is emitted, final, once
    the watermark passes its end, and its state is dropped: from then on a row of that window
    is dropped as too late. Rows of a window still open count, even if they are late.

    Spark's guarantee is one-sided: data later than the delay is not guaranteed to be dropped
    (a row older than the watermark whose window is still open counts), and a window ending
    exactly at the watermark is an edge. `step` asserts the input avoids both cases, so the
    expected result does not depend on them.
    """

    def __init__(self) -> None:
        self.watermark = 0
        self.counts: dict[tuple[int, str], int] = {}
        self.emitted: dict[tuple[int, str], int] = {}
        self.dropped_per_step: list[list[tuple[str, int]]] = []

    def step(self, events: list[tuple[str, int]]) -> None:
        dropped = []
        for key, t in events:
            start = t - t % WINDOW
            end = start + WINDOW
            assert end != self.watermark, f"{key}@{t}: window ends at the watermark"
            if end < self.watermark:
                dropped.append((key, t))
                continue
            assert t > self.watermark, f"{key}@{t}: older than the watermark, window open"
            assert (start, key) not in self.emitted
            self.counts[(start, key)] = self.counts.get((start, key), 0) + 1
        # Each dropped row is alone in its (window, key), so Spark's count of rows dropped by
        # the watermark (taken after partial aggregation) is the number of dropped events.
        groups = {(t - t % WINDOW, key) for key, t in dropped}
        assert len(groups) == len(dropped), dropped
        self.dropped_per_step.append(dropped)
        self.watermark = max(self.watermark, max(t for _, t in events) - DELAY)
        for window, key in sorted(self.counts):
            assert window + WINDOW != self.watermark, f"window {window} ends at the watermark"
            if window + WINDOW < self.watermark:
                self.emitted[(window, key)] = self.counts.pop((window, key))


def iso(seconds: int) -> str:
    """The watermark as Spark's progress reports it."""
    return datetime.fromtimestamp(BASE + seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def test_windowed_counts_with_watermark_match_a_plain_python_computation(
        spark: Any, broker: BrokerProcess, tmp_path: Path) -> None:
    """Counts per (10 s window, key) with a 20 s watermark, in append mode to Parquet, fed in
    three steps; each step is one availableNow run restarted from the checkpoint, so the
    watermark moves between micro-batches as it would in a long-running query.

    Dropped, as documented: a@12, b@25, c@5 in step 2 (watermark 39; their windows [10,20),
    [20,30), [0,10) end before it, two of them already emitted), a@44, b@58, c@33 in step 3
    (watermark 65; a@44's window [40,50) was emitted after step 2). Counted although out of
    order: a@45 and b@41 in step 2 (at most 18 s behind the largest event time, window [40,50)
    still open), a@70 and b@66 in step 3. The window of z@400 is never emitted: the watermark
    stays below its end.
    """
    topic = create_topic(broker, 2)
    output, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    model = WindowModel()

    def run() -> Any:
        events = (stream(spark, broker, subscribe=topic, startingOffsets="earliest")
                  .selectExpr("from_json(cast(value as string), 'key string, t long') as e")
                  .selectExpr("e.key as key", "timestamp_seconds(e.t) as time")
                  .withWatermark("time", f"{DELAY} seconds")
                  .groupBy("key", functions.window("time", f"{WINDOW} seconds"))
                  .count())
        query = (events.writeStream.format("parquet").outputMode("append")
                 .option("path", output).option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        assert await_query(query) is None
        return query

    for number, events in enumerate(STEPS, 1):
        produce_values(broker, topic, [(i % 2, json.dumps({"key": k, "t": BASE + t}), None)
                                       for i, (k, t) in enumerate(events)])
        model.step(events)
        query = run()
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        assert [p["numInputRows"] for p in progress] == [len(events)], number
        [operator] = progress[0]["stateOperators"]
        assert operator["numRowsDroppedByWatermark"] == len(model.dropped_per_step[-1]), number
        # The run ended with the watermark the model has (the no-data batch ran with it), so
        # the next step's batch starts from it.
        assert query.lastProgress["eventTime"]["watermark"] == iso(model.watermark), number

    table = spark.read.parquet(output).selectExpr(
        f"cast(window.start as long) - {BASE} as start", "cast(window.end as long) - "
        "cast(window.start as long) as width", "key", "count")
    got = sorted((r.start, r.key, r["count"]) for r in table.collect() if r.width == WINDOW)
    assert len(got) == table.count()
    assert got == sorted((w, k, c) for (w, k), c in model.emitted.items())
    # The model's answer, spelled out, so that a mistake in the model shows too.
    assert sorted(model.emitted.items()) == [
        ((0, "a"), 1), ((0, "b"), 2), ((10, "a"), 2), ((20, "b"), 1), ((30, "a"), 1),
        ((30, "b"), 1), ((40, "a"), 1), ((40, "b"), 2), ((50, "a"), 2), ((60, "a"), 1),
        ((60, "b"), 2), ((70, "a"), 3), ((80, "b"), 1), ((90, "a"), 1), ((100, "b"), 1),
        ((110, "a"), 2)]
    assert [len(d) for d in model.dropped_per_step] == [0, 3, 3]


# ---- maxOffsetsPerTrigger while records arrive ----------------------------------------------

def _offsets(value: Any) -> dict[str, int]:
    """A progress report's offsets of the one topic; none before the first micro-batch."""
    parsed = json.loads(value) if isinstance(value, str) else value
    if parsed is None:
        return {}
    [(_topic, offsets)] = parsed.items()
    return {str(p): int(o) for p, o in offsets.items()}


def test_max_offsets_per_trigger_bounds_every_batch_while_records_arrive(
        spark: Any, broker: BrokerProcess) -> None:
    """A query (default trigger) reads at most 10 records per micro-batch while 50 records
    arrive in two chunks of 25, the second produced once the query has started on the first.
    Every micro-batch's offset range holds at most 10 records (and as many as it says it
    read), the limit binds, and the memory sink holds every record once."""
    topic = create_topic(broker, 2)
    name = f"arriving_{uuid.uuid4().hex[:10]}"
    query = (stream(spark, broker, subscribe=topic, startingOffsets="earliest",
                    maxOffsetsPerTrigger="10")
             .selectExpr("partition", "offset", "cast(value as string) as value")
             .writeStream.format("memory").queryName(name).start())
    values: list[str] = []
    placed: list[tuple[int, int]] = []
    try:
        for chunk in range(2):
            new = [f"chunk{chunk}-{i}" for i in range(25)]
            placed += produce_values(broker, topic, [(i % 2, v, None) for i, v in enumerate(new)])
            values += new
            before = len(values) - len(new)
            wait_for(lambda: sum(data_batches(query)) > before,  # noqa: B023
                     f"the query to start on chunk {chunk}", timeout=60)
        wait_for(lambda: sum(data_batches(query)) >= len(values), "the query to read all",
                 timeout=60)
        assert query.exception() is None
    finally:
        query.stop()
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    for p in progress:
        [source] = p["sources"]
        start, end = _offsets(source["startOffset"]), _offsets(source["endOffset"])
        size = sum(end[k] - start.get(k, 0) for k in end)
        assert size == p["numInputRows"] <= 10, (p["batchId"], start, end)
    assert sum(p["numInputRows"] for p in progress) == 50
    assert max(p["numInputRows"] for p in progress) == 10 and len(progress) >= 5
    rows = spark.table(name).collect()
    got = sorted((r.partition, r.offset, r.value) for r in rows)
    assert got == sorted((p, o, v) for (p, o), v in zip(placed, values, strict=True))


def test_starting_at_latest_while_producers_write(spark: Any, broker: BrokerProcess) -> None:
    """startingOffsets=latest (the streaming default) while a producer writes: Spark asks for
    the initial offsets more than once, and each answer must be the same, or the first
    micro-batch starts past its own end and fails as data loss. From where it started, the
    query reads every record once, in order."""
    import threading

    from confluent_kafka import Producer

    topic = create_topic(broker, 2)
    stop = threading.Event()
    sent = [0]

    def write() -> None:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 2})
        while not stop.is_set():
            for _ in range(50):
                producer.produce(topic, b"%d" % sent[0], partition=sent[0] % 2)
                sent[0] += 1
            producer.poll(0)
            time.sleep(0.02)
        assert producer.flush(30) == 0

    writer = threading.Thread(target=write)
    writer.start()
    name = f"latest_{uuid.uuid4().hex[:10]}"
    try:
        wait_for(lambda: sent[0] > 500, "the producer to be writing")
        query = (stream(spark, broker, subscribe=topic, startingOffsets="latest")
                 .selectExpr("partition", "offset", "cast(value as string) as value")
                 .writeStream.format("memory").queryName(name)
                 .trigger(processingTime="200 milliseconds").start())
        try:
            wait_for(lambda: len(data_batches(query)) >= 3 or query.exception(),
                     "three micro-batches with records", timeout=90)
        finally:
            stop.set()
            writer.join(30)
            query.stop()
        assert query.exception() is None, query.exception()
    finally:
        stop.set()
    rows = sorted((r.partition, r.offset, int(r.value)) for r in spark.table(name).collect())
    for partition in (0, 1):
        offsets = [o for p, o, _ in rows if p == partition]
        values = [v for p, _, v in rows if p == partition]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
        assert values == sorted(values) and all(v % 2 == partition for v in values)


# ---- retention and failOnDataLoss ---------------------------------------------------------

@pytest.fixture(scope="module", autouse=True)
def retention_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker of its own that applies retention every 200 ms. As Kafka's, it first applies
    retention 30 s after it starts: this module starts it before its first test, and the test
    that needs it comes last, so it rarely has to wait for that."""
    process = BrokerProcess(tmp_path_factory.mktemp("retention-broker"),
                            {"auto.create.topics.enable": "false",
                             "log.retention.check.interval.ms": "200"}).start()
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


def test_records_deleted_by_retention_fail_the_query_unless_fail_on_data_loss_is_false(
        spark: Any, retention_broker: BrokerProcess, tmp_path: Path) -> None:
    """A streaming query reads offsets 0-9 and checkpoints 10. Then offsets 10-39 (stamped two
    hours ago, like 0-9) and 40-59 (stamped now) are produced, and retention.ms is set to one
    hour: retention deletes the segments of 0-39 (segment.bytes=100 puts every produce call's
    batch in a segment of its own, so the log starts at exactly 40). Restarted from its
    checkpoint, the query fails and names the lost offsets 10..39; restarted again with
    failOnDataLoss=false it reads 40-59 and goes on. A batch read from offset 5 fails the same
    way, or skips to 40."""
    broker = retention_broker
    topic = f"retention-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"segment.bytes": "100"})])[topic].result(
        30)
    now = int(time.time() * 1000)
    old = now - 2 * 3600 * 1000
    values = [f"v{i}" for i in range(60)]

    def produce(first: int, last: int, stamp: int) -> None:
        # A record batch per record, so old and new records never share a segment.
        placed = produce_values(broker, topic, [(0, values[i], stamp)
                                                for i in range(first, last)], batch_each=True)
        assert placed == [(0, i) for i in range(first, last)]

    output, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def run(**options: str) -> tuple[Exception | None, list[int]]:
        query = (stream(spark, broker, subscribe=topic, startingOffsets="earliest", **options)
                 .selectExpr("offset", "cast(value as string) as value")
                 .writeStream.format("parquet").option("path", output)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        return await_query(query), data_batches(query)

    def table() -> list[tuple[int, str]]:
        return sorted((r.offset, r.value) for r in spark.read.parquet(output).collect())

    produce(0, 10, old)
    assert run() == (None, [10])
    produce(10, 40, old)
    produce(40, 60, now)
    assert earliest_offset(broker, topic, 0) == 0
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", str(3600 * 1000),
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    # Within 30 s of the broker's start, plus a check interval, plus slack for a busy machine.
    assert wait_for(lambda: earliest_offset(broker, topic, 0) >= 40,
                    "retention to delete the old segments", timeout=60) and earliest_offset(
                        broker, topic, 0) == 40

    error, batches = run()
    assert error is not None and batches == []
    assert f"offsets 10..39 of {topic}-0 were deleted" in str(error), str(error)[:3000]
    assert table() == [(i, values[i]) for i in range(10)]

    assert run(failOnDataLoss="false") == (None, [20])
    assert table() == [(i, values[i]) for i in [*range(10), *range(40, 60)]]

    from_five = json.dumps({topic: {"0": 5}})
    with pytest.raises(Exception, match=f"offsets 5..39 of {topic}-0 were deleted"):
        read(spark, broker, subscribe=topic, startingOffsets=from_five).collect()
    rows = read(spark, broker, subscribe=topic, startingOffsets=from_five,
                failOnDataLoss="false").collect()
    assert sorted((r.offset, bytes(r.value).decode()) for r in rows) == [
        (i, values[i]) for i in range(40, 60)]
