"""The `odradek` PySpark data source against a real broker and a real Spark (local[2])."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerProcess
from support.spark import Record, collect, create_topic, expected_rows, produce, read, wait_for

from odradek.spark.options import OdradekOptionError, parse_read_options
from odradek.spark.ranges import OffsetRange, split_ranges


def test_batch_read_returns_every_record_exactly(spark: Any, broker: BrokerProcess) -> None:
    topic = create_topic(broker, 3)
    records = produce(broker, topic, 3, 300)
    df = read(spark, broker, subscribe=topic, INCLUDEHEADERS="true")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>")
    assert collect(df) == expected_rows(topic, records)
    # Without includeHeaders there is no headers column, as with Spark's Kafka source.
    plain = read(spark, broker, subscribePattern=topic.replace("spark-", "spark-.?"))
    assert "headers" not in plain.columns
    assert collect(plain, headers=False) == [r[:7] for r in expected_rows(topic, records)]


def test_starting_and_ending_offsets_json(spark: Any, broker: BrokerProcess) -> None:
    topic = create_topic(broker, 2)
    records = produce(broker, topic, 2, 40)   # 20 records per partition
    df = read(spark, broker, assign=json.dumps({topic: [0, 1]}),
              startingOffsets=json.dumps({topic: {"0": 5, "1": -2}}),
              endingOffsets=json.dumps({topic: {"0": 12, "1": -1}}), includeHeaders="true")
    want = [r for r in expected_rows(topic, records)
            if (r[3] == 0 and 5 <= r[4] < 12) or r[3] == 1]
    assert collect(df) == want
    # Only some partitions assigned.
    one = read(spark, broker, assign=json.dumps({topic: [1]}), endingOffsets="latest")
    assert {(r.partition, r.offset) for r in one.select("partition", "offset").collect()} == {
        (1, o) for o in range(20)}


def test_min_partitions_splits_ranges(spark: Any, broker: BrokerProcess) -> None:
    topic = create_topic(broker, 1)
    records = produce(broker, topic, 1, 100)
    df = read(spark, broker, subscribe=topic, minPartitions="4", includeHeaders="true")
    assert df.rdd.getNumPartitions() == 4
    assert collect(df) == expected_rows(topic, records)
    pieces = split_ranges([OffsetRange("a", 0, 0, 90), OffsetRange("b", 0, 5, 15),
                           OffsetRange("c", 0, 3, 3)], 10)
    assert sum(p.size for p in pieces) == 100 and len(pieces) == 10
    assert [(p.start, p.end) for p in pieces if p.topic == "b"] == [(5, 15)]


def test_batch_write_then_read_back(spark: Any, broker: BrokerProcess) -> None:
    topic = create_topic(broker, 2)
    rows = [(f"k{i}", f"v{i}".encode(), i % 2, [(f"h{i}", b"x")]) for i in range(50)]
    df = spark.createDataFrame(
        rows, "key string, value binary, partition int, headers array<struct<key:string,"
              "value:binary>>")
    (df.write.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap)
       .option("topic", topic).mode("append").save())
    back = read(spark, broker, subscribe=topic, includeHeaders="true").collect()
    got = sorted((bytes(r.key).decode(), bytes(r.value), r.partition,
                  [(h.key, bytes(h.value)) for h in r.headers]) for r in back)
    assert got == sorted(rows)
    # A topic column instead of the option, and a timestamp column: the record's CreateTime.
    other = create_topic(broker, 1)
    stamp = datetime(2024, 5, 6, 7, 8, 9, 123000)
    (spark.createDataFrame([(other, "only", stamp)], "topic string, value string, timestamp "
                           "timestamp")
       .write.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap)
       .mode("append").save())
    [row] = read(spark, broker, subscribe=other).collect()
    assert (bytes(row.value), row.timestamp, row.timestampType) == (b"only", stamp, 0)


@pytest.mark.parametrize(("options", "message"), [
    ({"subscribe": "a", "assign": '{"a":[0]}'}, "exactly one of subscribe"),
    ({}, "exactly one of subscribe"),
    ({"subscribe": "a", "startingOffsets": "latest"}, "startingOffsets=latest is not allowed"),
    ({"subscribe": "a", "endingOffsets": "earliest"}, "endingOffsets=earliest is not allowed"),
    ({"subscribe": "a", "startingOffsets": "{oops"}, "must be earliest, latest or JSON"),
    ({"subscribe": "a", "minPartitions": "0"}, "minPartitions must be at least 1"),
    ({"subscribe": "a", "failOnDataLoss": "maybe"}, "must be true or false"),
    ({"subscribe": "a", "kafka.group.id": "g"}, "kafka.group.id is not supported"),
    ({"subscribe": "a", "colour": "blue"}, "unknown option 'colour'"),
    ({"subscribe": "a", "maxTriggerDelay": "1m"}, "not supported by the odradek data source"),
    ({"subscribe": "a", "startingTimestamp": "soon"}, "timestamp in milliseconds"),
    ({"subscribe": "a", "startingOffsetsByTimestampStrategy": "guess"}, "must be error or"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "5"}, "streaming queries only"),
    ({"assign": '{"a":[0,1]}', "startingOffsets": '{"a":{"0":1}}'}, "assigned partitions"),
])
def test_option_errors(options: dict[str, str], message: str) -> None:
    with pytest.raises(OdradekOptionError, match=message):
        parse_read_options({"kafka.bootstrap.servers": "x:1", **options}, streaming=False)


def test_option_errors_fail_the_query_before_it_starts(spark: Any, broker: BrokerProcess) -> None:
    topic = create_topic(broker, 1)
    produce(broker, topic, 1, 5)
    with pytest.raises(Exception, match="exactly one of subscribe"):
        read(spark, broker, subscribe=topic, subscribePattern=".*").collect()
    with pytest.raises(Exception, match="before its starting offset"):
        read(spark, broker, subscribe=topic, startingOffsets=json.dumps({topic: {"0": 4}}),
             endingOffsets=json.dumps({topic: {"0": 2}})).collect()
    with pytest.raises(Exception, match="beyond its latest offset"):
        read(spark, broker, subscribe=topic,
             endingOffsets=json.dumps({topic: {"0": 99}})).collect()
    with pytest.raises(Exception, match="does not exist"):
        read(spark, broker, subscribe="no-such-topic-" + topic).collect()
    with pytest.raises(Exception, match="needs a value column"):
        (spark.createDataFrame([("k",)], "key string").write.format("odradek")
           .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", topic)
           .mode("append").save())


def run_available_now(spark: Any, broker: BrokerProcess, topic: str, output: str,
                      checkpoint: str, **options: str) -> list[int]:
    """Runs a streaming query to a Parquet table until the data present at its start is read;
    returns the number of rows of each micro-batch."""
    reader = (spark.readStream.format("odradek")
              .option("kafka.bootstrap.servers", broker.bootstrap).option("subscribe", topic))
    for name, value in options.items():
        reader = reader.option(name, value)
    query = (reader.load().writeStream.format("parquet").option("path", output)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_streaming_resumes_from_checkpoint_with_max_offsets_per_trigger(
        spark: Any, broker: BrokerProcess, tmp_path: Any) -> None:
    topic = create_topic(broker, 2)
    records = produce(broker, topic, 2, 100)
    output, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    batches = run_available_now(spark, broker, topic, output, checkpoint,
                                startingOffsets="earliest", maxOffsetsPerTrigger="30",
                                includeHeaders="true")
    assert batches == [30, 30, 30, 10]
    records += produce(broker, topic, 2, 20)
    # Restarted from its checkpoint, the query reads only the new records.
    assert run_available_now(spark, broker, topic, output, checkpoint,
                             startingOffsets="earliest", includeHeaders="true") == [20]
    table = spark.read.parquet(output)
    assert collect(table) == expected_rows(topic, records)


def test_streaming_starts_at_latest_and_rejects_batch_options(
        spark: Any, broker: BrokerProcess, tmp_path: Any) -> None:
    topic = create_topic(broker, 1)
    produce(broker, topic, 1, 10)
    assert run_available_now(spark, broker, topic, str(tmp_path / "o"),
                             str(tmp_path / "c")) == []
    with pytest.raises(OdradekOptionError, match="endingOffsets is for batch queries only"):
        parse_read_options({"kafka.bootstrap.servers": "x:1", "subscribe": "a",
                            "endingOffsets": "latest"}, streaming=True)


def test_fail_on_data_loss(spark: Any, broker: BrokerProcess) -> None:
    from confluent_kafka import TopicPartition

    topic = create_topic(broker, 1)
    records = produce(broker, topic, 1, 20)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    [future] = admin.delete_records([TopicPartition(topic, 0, 8)]).values()
    future.result(30)
    from_zero = json.dumps({topic: {"0": 0}})
    with pytest.raises(Exception, match="were deleted"):
        read(spark, broker, subscribe=topic, startingOffsets=from_zero).collect()
    rows = read(spark, broker, subscribe=topic, startingOffsets=from_zero,
                failOnDataLoss="false", includeHeaders="true")
    assert collect(rows) == expected_rows(topic, records)[8:]
    # earliest means the earliest offset still there.
    assert read(spark, broker, subscribe=topic).count() == 12


def test_rate_limit_is_proportional_to_lag() -> None:
    from odradek.spark.stream import rate_limit

    start = {("a", 0): 0, ("a", 1): 10, ("b", 0): 5}
    latest = {("a", 0): 100, ("a", 1): 10, ("b", 0): 55}
    limited = rate_limit(start, latest, 30)
    assert sum(limited[tp] - start[tp] for tp in start) == 30
    assert limited == {("a", 0): 20, ("a", 1): 10, ("b", 0): 15}
    assert rate_limit(start, latest, 1000) == latest


def test_streaming_write_copies_a_topic_and_resumes(
        spark: Any, broker: BrokerProcess, tmp_path: Any) -> None:
    source, sink = create_topic(broker, 2), create_topic(broker, 2)
    checkpoint = str(tmp_path / "checkpoint")

    def copy() -> list[int]:
        query = (spark.readStream.format("odradek")
                 .option("kafka.bootstrap.servers", broker.bootstrap)
                 .option("subscribe", source).option("startingOffsets", "earliest")
                 .option("includeHeaders", "true").load()
                 .select("key", "value", "partition", "headers")
                 .writeStream.format("odradek")
                 .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", sink)
                 .option("checkpointLocation", checkpoint)
                 .queryName(f"copy_{sink}".replace("-", "_"))   # passed to the sink as option
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

    def copied() -> list[tuple[Any, ...]]:
        # (key, value, partition, headers) in offset order: the copy keeps partitions and
        # order. Not the offsets: each micro-batch's transaction markers take one per partition.
        rows = collect(read(spark, broker, subscribe=sink, includeHeaders="true"))
        return [(r[0], r[1], r[3], r[7]) for r in rows]

    def wanted(records: list[Record]) -> list[tuple[Any, ...]]:
        return [(r[0], r[1], r[3], r[7]) for r in expected_rows(source, records)]

    records = produce(broker, source, 2, 60)
    assert copy() == [60]
    assert copied() == wanted(records)
    records += produce(broker, source, 2, 10)
    # Restarted from its checkpoint, the query writes only the new records.
    assert copy() == [10]
    assert copied() == wanted(records)


def test_offsets_by_timestamp_in_batch(spark: Any, broker: BrokerProcess) -> None:
    topic = create_topic(broker, 2)
    records = produce(broker, topic, 2, 40)   # timestamps one second apart, alternating
    rows = expected_rows(topic, records)
    stamp_of = {(r[3], r[4]): int(r[5].replace(tzinfo=UTC).timestamp() * 1000) for r in rows}
    start, end = records[10][3], records[30][3]

    def between(first: int, stop: int | None) -> list[tuple[Any, ...]]:
        return [r for r in rows
                if stamp_of[(r[3], r[4])] >= first and (stop is None or stamp_of[(r[3], r[4])]
                                                        < stop)]

    got = read(spark, broker, subscribe=topic, startingTimestamp=str(start),
               endingTimestamp=str(end), includeHeaders="true")
    assert collect(got) == between(start, end) and len(between(start, end)) == 20
    # Per partition; a timestamp after every record ends at the latest offset.
    per_partition = json.dumps({topic: {"0": start, "1": records[0][3]}})
    got = read(spark, broker, subscribe=topic, startingOffsetsByTimestamp=per_partition,
               endingOffsetsByTimestamp=json.dumps({topic: {"0": 2 ** 50, "1": 2 ** 50}}),
               includeHeaders="true")
    assert collect(got) == [r for r in rows if r[3] == 1 or stamp_of[(r[3], r[4])] >= start]
    # startingTimestamp wins over startingOffsets, as in Spark.
    got = read(spark, broker, subscribe=topic, startingTimestamp=str(start),
               startingOffsets=json.dumps({topic: {"0": 0, "1": 0}}))
    assert got.count() == 30
    late = str(records[-1][3] + 1)
    with pytest.raises(Exception, match="has a timestamp at or after"):
        read(spark, broker, subscribe=topic, startingTimestamp=late).collect()
    assert read(spark, broker, subscribe=topic, startingTimestamp=late,
                startingOffsetsByTimestampStrategy="latest").count() == 0
    with pytest.raises(Exception, match="must give every partition"):
        read(spark, broker, subscribe=topic,
             startingOffsetsByTimestamp=json.dumps({topic: {"0": start}})).collect()


def test_streaming_starts_at_offsets_by_timestamp(
        spark: Any, broker: BrokerProcess, tmp_path: Any) -> None:
    topic = create_topic(broker, 2)
    records = produce(broker, topic, 2, 40)
    start = records[25][3]
    by_time = json.dumps({topic: {"0": start, "1": start}})
    assert run_available_now(spark, broker, topic, str(tmp_path / "o"), str(tmp_path / "c"),
                             startingOffsetsByTimestamp=by_time, includeHeaders="true") == [15]
    table = spark.read.parquet(str(tmp_path / "o"))
    assert collect(table) == [r for r in expected_rows(topic, records)
                              if r[5] >= expected_rows(topic, records[25:26])[0][5]]


def test_streaming_follows_topics_created_grown_and_deleted(
        spark: Any, broker: BrokerProcess) -> None:
    """A subscribed topic that does not exist yet is waited for; partitions added later are
    read from their start; a deleted topic fails the query with failOnDataLoss=true and is
    dropped with false."""
    from confluent_kafka.admin import NewPartitions

    topic = f"spark-later-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def start(name: str, fail_on_data_loss: str) -> Any:
        return (spark.readStream.format("odradek")
                .option("kafka.bootstrap.servers", broker.bootstrap).option("subscribe", topic)
                .option("startingOffsets", "earliest")
                .option("failOnDataLoss", fail_on_data_loss).load()
                .writeStream.format("memory").queryName(name)
                .trigger(processingTime="200 milliseconds").start())

    def rows(name: str) -> set[tuple[int, int, bytes]]:
        return {(r.partition, r.offset, bytes(r.value))
                for r in spark.sql(f"select * from {name}").collect()}

    lenient, strict = f"lenient_{uuid.uuid4().hex[:6]}", f"strict_{uuid.uuid4().hex[:6]}"
    queries = [start(lenient, "false")]
    producer = Producer({"bootstrap.servers": broker.bootstrap})

    def send(prefix: bytes, partition: int, count: int) -> set[tuple[int, int, bytes]]:
        for i in range(count):
            producer.produce(topic, value=prefix + b"%d" % i, partition=partition)
        assert producer.flush(30) == 0
        return {(partition, i, prefix + b"%d" % i) for i in range(count)}

    try:
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        want = send(b"a", 0, 5)
        wait_for(lambda: rows(lenient) == want, "the first records")
        admin.create_partitions([NewPartitions(topic, 2)])[topic].result(30)
        wait_for(lambda: len(producer.list_topics(topic, timeout=10).topics[topic].partitions)
                 == 2, "the producer to see two partitions")
        want |= send(b"b", 1, 3)
        wait_for(lambda: rows(lenient) == want, "the new partition's records")
        queries.append(start(strict, "true"))
        wait_for(lambda: rows(strict) == want, "the strict query to catch up")
        admin.delete_topics([topic])[topic].result(30)
        with pytest.raises(Exception, match="were deleted while the query read them"):
            queries[1].awaitTermination(60)
        # The lenient query goes on, and reads the topic created again from its start.
        wait_for(lambda: admin.create_topics([NewTopic(topic, 1, 1)])[topic].exception(30)
                 is None, "the topic to be created again")
        want |= send(b"c", 0, 2)
        wait_for(lambda: rows(lenient) == want, "the records of the new topic")
        assert queries[0].isActive and queries[0].exception() is None
    finally:
        for query in queries:
            query.stop()


def test_executors_reuse_consumers() -> None:
    from odradek.spark.data_consumer import ConsumerCache

    options = parse_read_options({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"},
                                 streaming=False)
    other = parse_read_options({"kafka.bootstrap.servers": "127.0.0.1:2", "subscribe": "t"},
                               streaming=False)
    cache = ConsumerCache(capacity=2, idle_s=60)
    first = cache.take(options)
    cache.give_back(options, first, reusable=True)
    assert cache.take(other) is not first          # other settings, another consumer
    assert cache.take(options) is first            # same settings: the same connections
    cache.give_back(options, first, reusable=False)   # failed mid-range: closed, not kept
    assert cache.take(options) is not first
