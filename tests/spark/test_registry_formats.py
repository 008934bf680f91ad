"""Keys and values through the schema registry in Spark (valueFormat / keyFormat = avro or
json-schema): records written by confluent-kafka's serializers read as typed columns, typed
columns written in Confluent's wire format that the serializers' deserializers read back,
and streaming queries over a subject whose schema evolves while they run."""

from __future__ import annotations

import datetime
import decimal
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from support.broker import BrokerProcess
from support.registry import RegistryProcess
from support.spark import (
    await_query,
    consume_all,
    create_topic,
    read,
    stream,
    wait_for,
)

pytestmark = pytest.mark.timeout(240)

ORDER_V1 = {
    "type": "record", "name": "Order", "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9,
                                   "scale": 2}},
        {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "status", "type": {"type": "enum", "name": "Status",
                                    "symbols": ["NEW", "PAID", "SENT"]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "extras", "type": {"type": "map", "values": "int"}},
        {"name": "customer", "type": {
            "type": "record", "name": "Customer",
            "fields": [{"name": "name", "type": "string"},
                       {"name": "vip", "type": "boolean"}]}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "ref", "type": ["null", "long", "string"], "default": None},
    ],
}
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"],
                                   {"name": "email", "type": "string", "default": "unknown"}]}


def order(i: int, **more: Any) -> dict[str, Any]:
    return {"id": i, "item": f"book {i}", "price": decimal.Decimal(f"{i}.25"),
            "placed": datetime.datetime(2026, 1, 1, 12, 0, i % 60,
                                        tzinfo=datetime.UTC),
            "status": ["NEW", "PAID", "SENT"][i % 3], "tags": [f"t{i}"] * (i % 3),
            "extras": {"gift": i} if i % 2 else {},
            "customer": {"name": f"c{i}", "vip": i % 2 == 0},
            "note": None if i % 2 else f"note {i}", "ref": [None, i, f"r{i}"][i % 3], **more}


@pytest.fixture
def client(registry: RegistryProcess) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": registry.url})


def produce(broker: BrokerProcess, topic: str, serializer: Any, values: list[Any],
            keys: list[Any] | None = None, key_serializer: Any = None) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i, value in enumerate(values):
        key = None
        if keys is not None:
            key = key_serializer(keys[i], SerializationContext(topic, MessageField.KEY))
        producer.produce(topic, key=key,
                         value=serializer(value, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0


def avro_options(registry: RegistryProcess, **more: str) -> dict[str, str]:
    return {"valueFormat": "avro", "schema.registry.url": registry.url, **more}


def expected_row(value: dict[str, Any], schema_fields: list[str]) -> dict[str, Any]:
    """What Spark shows of an order: enums as strings, maps as dicts, the [long, string]
    union as a struct of members."""
    row = {k: value.get(k) for k in schema_fields}
    ref = value["ref"]
    row["ref"] = None if ref is None else {"member0": ref if isinstance(ref, int) else None,
                                           "member1": ref if isinstance(ref, str) else None}
    return row


def as_python(row: Any) -> Any:
    if hasattr(row, "asDict"):
        return {k: as_python(v) for k, v in row.asDict().items()}
    if isinstance(row, list):
        return [as_python(v) for v in row]
    if isinstance(row, dict):
        return {k: as_python(v) for k, v in row.items()}
    if isinstance(row, datetime.datetime) and row.tzinfo is None:
        return row.replace(tzinfo=datetime.UTC)  # the session's time zone is UTC
    return row


def test_a_batch_read_types_avro_values_by_their_subject(
        spark: Any, broker: BrokerProcess, registry: RegistryProcess,
        client: SchemaRegistryClient) -> None:
    topic = create_topic(broker, 2)
    orders = [order(i) for i in range(30)]
    produce(broker, topic, AvroSerializer(client, json.dumps(ORDER_V1)), orders,
            keys=[str(i) for i in range(30)],
            key_serializer=AvroSerializer(client, '"string"'))
    df = read(spark, broker, subscribe=topic, keyFormat="avro",
              **avro_options(registry))
    value_type = df.schema["value"].dataType.simpleString()
    assert value_type == (
        "struct<id:bigint,item:string,price:decimal(9,2),placed:timestamp,status:string,"
        "tags:array<string>,extras:map<string,int>,customer:struct<name:string,vip:boolean>,"
        "note:string,ref:struct<member0:bigint,member1:string>>")
    assert df.schema["key"].dataType.simpleString() == "string"
    rows = {row.key: as_python(row.value) for row in df.collect()}
    names = [f["name"] for f in ORDER_V1["fields"]]
    assert rows == {str(i): expected_row(o, names) for i, o in enumerate(orders)}
    # SQL on the typed columns.
    df.createOrReplaceTempView("orders_avro")
    paid = spark.sql("SELECT count(*) AS n, sum(value.price) AS total FROM orders_avro "
                     "WHERE value.status = 'PAID'").collect()[0]
    assert paid.n == 10
    assert paid.total == sum(o["price"] for o in orders if o["status"] == "PAID")


def test_a_write_registers_the_columns_schema_and_serializers_read_it(
        spark: Any, broker: BrokerProcess, registry: RegistryProcess,
        client: SchemaRegistryClient) -> None:
    source = create_topic(broker, 1)
    target = create_topic(broker, 1)
    orders = [order(i) for i in range(12)]
    produce(broker, source, AvroSerializer(client, json.dumps(ORDER_V1)), orders)
    df = read(spark, broker, subscribe=source, **avro_options(registry))
    # The source's schema is not registered under the target's subject: the sink makes one
    # from the column's type, registers it, and writes with its id.
    (df.selectExpr("CAST(value.id AS STRING) AS key",
                   "named_struct('id', value.id, 'item', upper(value.item), "
                   "'price', value.price, 'tags', value.tags) AS value")
     .write.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap)
     .option("topic", target).option("valueFormat", "avro")
     .option("schema.registry.url", registry.url).mode("append").save())
    registered = client.get_latest_version(f"{target}-value")
    written = json.loads(registered.schema.schema_str)
    assert [f["name"] for f in written["fields"]] == ["id", "item", "price", "tags"]
    deserialize = AvroDeserializer(client)
    got = sorted((deserialize(r[4], SerializationContext(target, MessageField.VALUE))
                  for r in consume_all(broker.bootstrap, target)), key=lambda v: v["id"])
    assert got == [{"id": o["id"], "item": o["item"].upper(), "price": o["price"],
                    "tags": o["tags"]} for o in orders]
    # A second write finds the registered schema fits and registers nothing new.
    (df.selectExpr("named_struct('id', value.id, 'item', value.item, 'price', value.price, "
                   "'tags', value.tags) AS value")
     .write.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap)
     .option("topic", target).option("valueFormat", "avro")
     .option("schema.registry.url", registry.url).mode("append").save())
    assert client.get_versions(f"{target}-value") == [1]
    assert len(consume_all(broker.bootstrap, target)) == 24


def test_json_schema_values_read_and_written(
        spark: Any, broker: BrokerProcess, registry: RegistryProcess,
        client: SchemaRegistryClient) -> None:
    source, target = create_topic(broker, 1), create_topic(broker, 1)
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Reading",
              "type": "object",
              "properties": {"sensor": {"type": "string"}, "value": {"type": "number"},
                             "count": {"type": "integer"},
                             "labels": {"type": "array", "items": {"type": "string"}},
                             "extra": {"oneOf": [{"type": "string"}, {"type": "integer"}]}},
              "required": ["sensor", "value"]}
    readings = [{"sensor": f"s{i}", "value": i * 1.5, "count": i,
                 "labels": ["a"] * (i % 2), "extra": i if i % 2 else f"x{i}"}
                for i in range(8)]
    produce(broker, source, JSONSerializer(json.dumps(schema), client), readings)
    df = read(spark, broker, subscribe=source, valueFormat="json-schema",
              **{"schema.registry.url": registry.url})
    assert df.schema["value"].dataType.simpleString() == (
        "struct<sensor:string,value:double,count:bigint,labels:array<string>,extra:string>")
    rows = sorted((as_python(r.value) for r in df.collect()), key=lambda v: v["count"])
    assert rows == [{**r, "extra": json.dumps(r["extra"])} for r in readings]
    (df.selectExpr("named_struct('sensor', value.sensor, 'doubled', value.value * 2) AS value")
     .write.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap)
     .option("topic", target).option("valueFormat", "json-schema")
     .option("schema.registry.url", registry.url).mode("append").save())
    assert client.get_latest_version(f"{target}-value").schema.schema_type == "JSON"
    deserialize = JSONDeserializer(None, schema_registry_client=client)
    got = sorted((deserialize(r[4], SerializationContext(target, MessageField.VALUE))
                  for r in consume_all(broker.bootstrap, target)), key=lambda v: v["sensor"])
    assert got == [{"sensor": r["sensor"], "doubled": r["value"] * 2} for r in readings]


def test_bad_records_and_options_say_what_is_wrong(
        spark: Any, broker: BrokerProcess, registry: RegistryProcess,
        client: SchemaRegistryClient) -> None:
    topic = create_topic(broker, 1)
    client.register_schema(f"{topic}-value", Schema(json.dumps(ORDER_V1), "AVRO"))
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, value=b"plain text, not Avro")
    assert producer.flush(30) == 0
    with pytest.raises(Exception, match=rf"the value of {topic}-0 offset 0: not in the "
                       r"schema registry's wire format \(its first byte is 112, not 0\)"):
        read(spark, broker, subscribe=topic, **avro_options(registry)).collect()
    with pytest.raises(Exception, match=r"valueFormat=avro needs the schema\.registry\.url"):
        read(spark, broker, subscribe=topic, valueFormat="avro").collect()
    with pytest.raises(Exception, match=r"subject nothing-value .* Subject 'nothing-value' "
                       r"not found"):
        read(spark, broker, subscribe=topic, valueSubject="nothing-value",
             **avro_options(registry)).collect()
    with pytest.raises(Exception, match=r"subject .* holds AVRO schemas, not JSON: use "
                       r"valueFormat=avro"):
        read(spark, broker, subscribe=topic, valueFormat="json-schema",
             **{"schema.registry.url": registry.url}).collect()
    # An incompatible column type is refused by the registry before anything is written.
    target = create_topic(broker, 1)
    client.register_schema(f"{target}-value", Schema(json.dumps(ORDER_V1), "AVRO"))
    with pytest.raises(Exception, match="registering the value column's schema under "
                       f"{target}-value: .*incompatible"):
        (spark.createDataFrame([(1,)], "value int").write.format("odradek")
         .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", target)
         .option("valueFormat", "avro").option("schema.registry.url", registry.url)
         .mode("append").save())
    assert consume_all(broker.bootstrap, target) == []


def _collected(spark: Any, table: str) -> list[dict[str, Any]]:
    return [as_python(r.value) for r in spark.sql(f"SELECT value FROM {table}").collect()]


@pytest.mark.parametrize("mode", ["none", "restart"])
def test_a_streaming_query_follows_a_schema_that_evolves_mid_stream(
        spark: Any, broker: BrokerProcess, registry: RegistryProcess,
        client: SchemaRegistryClient, tmp_path: Path, mode: str) -> None:
    topic = create_topic(broker, 2)
    first = [order(i) for i in range(10)]
    produce(broker, topic, AvroSerializer(client, json.dumps(ORDER_V1)), first)
    checkpoint = tmp_path / "checkpoint"
    batches: dict[int, list[tuple[int, int, dict[str, Any]]]] = {}  # a replay replaces

    def keep(df: Any, batch_id: int) -> None:
        batches[batch_id] = [(r.partition, r.offset, as_python(r.value)) for r in df.collect()]

    def start() -> Any:
        df = stream(spark, broker, subscribe=topic, startingOffsets="earliest",
                    schemaEvolutionMode=mode, **avro_options(registry))
        return (df.select("value", "partition", "offset").writeStream.foreachBatch(keep)
                .option("checkpointLocation", str(checkpoint))
                .trigger(processingTime="200 milliseconds").start())

    def rows() -> list[dict[str, Any]]:
        return [value for rows in list(batches.values()) for _, _, value in rows]

    query = start()
    try:
        wait_for(lambda: len(rows()) == 10, "the v1 records")
        # Version 2 adds a field with a default (BACKWARD compatible); its records arrive
        # while the query runs.
        second = [order(i, email=f"u{i}@example.com") for i in range(10, 20)]
        produce(broker, topic, AvroSerializer(client, json.dumps(ORDER_V2)), second)
        assert client.get_versions(f"{topic}-value") == [1, 2]
        if mode == "none":
            # Decoded with version 2, resolved to the query's version 1: the new field is
            # not a column yet, nothing fails.
            wait_for(lambda: len(rows()) == 20, "the v2 records, as v1 rows")
            assert query.isActive
            # Stopped before its commit, Spark would replay that micro-batch after the
            # restart, with version 2: wait until the batch's progress (after the commit).
            last = max(batches)
            wait_for(lambda: (query.lastProgress or {}).get("batchId", -1) >= last,
                     f"micro-batch {last} committed")
            query.stop()
        else:
            error = await_query(query, 60)
            assert error is not None and "written with version 2" in str(error) and \
                "restart the query" in str(error), error
            assert len(rows()) == 10  # the micro-batch with v2 records failed
    finally:
        query.stop()
    # Restarted from its checkpoint, the query reads with version 2: email is a column.
    third = [order(i, email=f"u{i}@example.com") for i in range(20, 25)]
    produce(broker, topic, AvroSerializer(client, json.dumps(ORDER_V2)), third)
    query = start()
    try:
        wait_for(lambda: len(rows()) == 25, "every record")
    finally:
        query.stop()
    places = [(p, o) for rows in batches.values() for p, o, _ in rows]
    assert len(places) == len(set(places)) == 25  # each record once
    got = {r["id"]: r for r in rows()}
    assert sorted(got) == list(range(25))
    for i in range(10):
        assert got[i].get("email") is None  # written as v1, before the restart: no column
    for i in range(10, 20):
        # As v1 rows (none) or, after the restart, read with v2 (restart).
        assert got[i].get("email") == (None if mode == "none" else f"u{i}@example.com")
    for i in range(20, 25):
        assert got[i]["email"] == f"u{i}@example.com"
    assert got[3]["item"] == "book 3" and got[13]["customer"] == {"name": "c13", "vip": False}


def test_keys_and_values_with_uuid_and_dates(spark: Any, broker: BrokerProcess,
                                            registry: RegistryProcess,
                                            client: SchemaRegistryClient) -> None:
    topic = create_topic(broker, 1)
    schema = {"type": "record", "name": "Event", "fields": [
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "payload", "type": "bytes"},
        {"name": "score", "type": ["int", "long"]},
    ]}
    events = [{"id": uuid.UUID(int=i), "day": datetime.date(2026, 2, 1 + i),
               "at": datetime.datetime(2026, 2, 1, 8, i), "payload": bytes([i] * 3),
               "score": i} for i in range(5)]
    produce(broker, topic, AvroSerializer(client, json.dumps(schema)), events)
    df = read(spark, broker, subscribe=topic, **avro_options(registry))
    assert df.schema["value"].dataType.simpleString() == (
        "struct<id:string,day:date,at:timestamp_ntz,payload:binary,score:bigint>")
    got = sorted((r.value.asDict() for r in df.collect()), key=lambda v: v["score"])
    assert got == [{**e, "id": str(e["id"]), "payload": bytearray(e["payload"])}
                   for e in events]
