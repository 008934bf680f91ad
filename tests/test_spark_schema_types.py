"""Unit tests of the Spark types of registry schemas (odradek/spark/schema_types.py) and of
the format options (options.column_formats): pure logic, no Spark session."""

from __future__ import annotations

import datetime
import decimal
import io
from typing import Any

import pytest

pytest.importorskip("pyspark")

import fastavro
import jsonschema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from odradek.spark.options import OdradekOptionError, column_formats
from odradek.spark.schema_types import (
    AvroTypes,
    JsonSchemaTypes,
    SchemaTypeError,
    avro_writer_converter,
    json_writer_converter,
    same_shape,
    spark_to_avro,
    spark_to_json_schema,
)


def avro_type(schema: Any, named: dict[str, Any] | None = None) -> str:
    return AvroTypes(schema, named).spark_type.simpleString()


@pytest.mark.parametrize(("schema", "expected"), [
    ("long", "bigint"),
    ({"type": "string", "logicalType": "uuid"}, "string"),
    ({"type": "int", "logicalType": "date"}, "date"),
    ({"type": "int", "logicalType": "time-millis"}, "int"),
    ({"type": "long", "logicalType": "timestamp-micros"}, "timestamp"),
    ({"type": "long", "logicalType": "local-timestamp-millis"}, "timestamp_ntz"),
    ({"type": "fixed", "name": "F", "size": 8, "logicalType": "decimal", "precision": 18,
      "scale": 4}, "decimal(18,4)"),
    ({"type": "fixed", "name": "Md5", "size": 16}, "binary"),
    ({"type": "enum", "name": "E", "symbols": ["A", "B"]}, "string"),
    (["null", "int", "long"], "bigint"),
    (["float", "double", "null"], "double"),
    (["null", "string", "int"], "struct<member0:string,member1:int>"),
    ({"type": "map", "values": ["null", "double"]}, "map<string,double>"),
    ({"type": "array", "items": {"type": "array", "items": "bytes"}}, "array<array<binary>>"),
])
def test_avro_types_map_as_spark_avro_maps_them(schema: Any, expected: str) -> None:
    assert avro_type(schema) == expected


def test_records_their_named_types_and_nullability() -> None:
    schema = {"type": "record", "name": "Outer", "namespace": "a.b", "fields": [
        {"name": "inner", "type": {"type": "record", "name": "Inner",
                                   "fields": [{"name": "x", "type": "int"}]}},
        {"name": "again", "type": ["null", "Inner"]},          # by short name
        {"name": "other", "type": "c.Shared"},                   # from a reference
    ]}
    types = AvroTypes(schema, {"c.Shared": {"type": "enum", "name": "Shared",
                                            "namespace": "c", "symbols": ["X"]}})
    assert types.spark_type == StructType([
        StructField("inner", StructType([StructField("x", IntegerType(), False)]), False),
        StructField("again", StructType([StructField("x", IntegerType(), False)]), True),
        StructField("other", StringType(), False)])
    with pytest.raises(SchemaTypeError, match="unknown Avro type 'Nowhere'"):
        AvroTypes({"type": "array", "items": "Nowhere"})
    recursive = {"type": "record", "name": "Node", "fields": [
        {"name": "next", "type": ["null", "Node"]}]}
    with pytest.raises(SchemaTypeError, match="Node contains itself"):
        AvroTypes(recursive)


def decoded(schema: Any, value: Any) -> Any:
    parsed = fastavro.parse_schema(schema)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, value)
    out.seek(0)
    raw = fastavro.schemaless_reader(out, parsed, None, return_record_name=True,
                                     return_record_name_override=True)
    return AvroTypes(schema).convert(raw)


def test_decoded_values_become_arrow_ready() -> None:
    a = {"type": "record", "name": "A", "fields": [{"name": "x", "type": "int"}]}
    b = {"type": "record", "name": "B", "fields": [{"name": "y", "type": "string"}]}
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "u", "type": ["null", a, b, "string"]},
        {"name": "t", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "m", "type": {"type": "map", "values": ["null", "long", "string"]}},
    ]}
    value = {"u": {"y": "yes"}, "t": datetime.time(0, 0, 1, 500_000),
             "id": "6f1c50ae-0d2e-4b3c-9d53-3c2b1b9cbe71", "m": {"k": 5, "s": "v"}}
    assert decoded(schema, value) == {
        "u": {"member0": None, "member1": {"y": "yes"}, "member2": None}, "t": 1500,
        "id": "6f1c50ae-0d2e-4b3c-9d53-3c2b1b9cbe71",
        "m": {"k": {"member0": 5, "member1": None}, "s": {"member0": None, "member1": "v"}}}
    assert decoded(schema, {**value, "u": "text", "m": {}})["u"] == {
        "member0": None, "member1": None, "member2": "text"}


SPARK_ROW = StructType([
    StructField("id", LongType(), False),
    StructField("name", StringType(), True),
    StructField("price", DecimalType(9, 2), True),
    StructField("when", TimestampType(), True),
    StructField("day", DateType(), True),
    StructField("raw", BinaryType(), True),
    StructField("tags", ArrayType(StringType(), True), True),
    StructField("scores", MapType(StringType(), DoubleType(), False), True),
    StructField("inner", StructType([StructField("ok", BooleanType(), False)]), True),
])
ROW = {"id": 7, "name": None, "price": decimal.Decimal("3.25"),
       "when": datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
       "day": datetime.date(2026, 1, 2), "raw": b"\x00\x01", "tags": ["a", None],
       "scores": [("x", 1.5)], "inner": {"ok": True}}


def test_a_spark_type_makes_an_avro_schema_that_maps_back_and_takes_its_rows() -> None:
    schema = spark_to_avro(SPARK_ROW, "orders_value")
    assert schema["name"] == "orders_value"
    assert {"name": "name", "type": ["null", "string"], "default": None} in schema["fields"]
    assert same_shape(AvroTypes(schema).spark_type, SPARK_ROW)
    parsed = fastavro.parse_schema(schema)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, avro_writer_converter(SPARK_ROW)(ROW))
    out.seek(0)
    back = fastavro.schemaless_reader(out, parsed, None)
    assert back == {**ROW, "scores": {"x": 1.5}}
    with pytest.raises(SchemaTypeError, match="Avro maps have string keys, not int"):
        spark_to_avro(MapType(IntegerType(), StringType()))


def test_a_union_member_struct_is_written_as_the_member_that_is_set() -> None:
    members = StructType([StructField("member0", LongType()), StructField("member1",
                                                                          StringType())])
    convert = avro_writer_converter(StructType([StructField("ref", members)]))
    assert convert({"ref": {"member0": None, "member1": "r1"}}) == {"ref": "r1"}
    assert convert({"ref": None}) == {"ref": None}


def test_json_schemas_map_to_spark_types() -> None:
    schema = {
        "type": "object",
        "definitions": {"Point": {"type": "object", "properties": {
            "x": {"type": "number"}, "y": {"type": "number"}}}},
        "properties": {
            "name": {"type": "string"},
            "count": {"type": ["integer", "null"]},
            "where": {"$ref": "#/definitions/Point"},
            "path": {"type": "array", "items": {"$ref": "#/definitions/Point"}},
            "attrs": {"type": "object", "additionalProperties": {"type": "boolean"}},
            "either": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
            "anything": {},
        }}
    types = JsonSchemaTypes(schema)
    assert types.spark_type.simpleString() == (
        "struct<name:string,count:bigint,where:struct<x:double,y:double>,"
        "path:array<struct<x:double,y:double>>,attrs:map<string,boolean>,either:string,"
        "anything:string>")
    assert types.convert({"name": "n", "count": 3.0, "where": {"x": 1, "y": 2.5},
                          "path": [], "attrs": {"a": True}, "either": 5,
                          "anything": {"k": [1]}}) == {
        "name": "n", "count": 3, "where": {"x": 1.0, "y": 2.5}, "path": [],
        "attrs": {"a": True}, "either": "5", "anything": '{"k":[1]}'}
    assert types.convert({})["where"] is None
    with pytest.raises(SchemaTypeError, match=r"\$\.count is a string, not an integer"):
        types.convert({"count": "three"})
    with pytest.raises(SchemaTypeError, match=r"\$\.where\.x is a boolean, not a number"):
        types.convert({"where": {"x": True}})
    recursive = {"type": "object", "properties": {"next": {"$ref": "#"}}}
    assert JsonSchemaTypes(recursive).spark_type.simpleString().startswith(
        "struct<next:struct<next:")


def test_a_spark_type_makes_a_json_schema_that_validates_its_rows() -> None:
    schema = spark_to_json_schema(SPARK_ROW, title="orders-value")
    assert schema["title"] == "orders-value" and schema["required"] == ["id"]
    value = json_writer_converter(SPARK_ROW)(ROW)
    jsonschema.validate(value, schema)
    assert value["raw"] == "AAE=" and value["when"] == "2026-01-02T03:04:05+00:00"
    assert value["scores"] == {"x": 1.5} and value["price"] == 3.25
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**value, "id": None}, schema)


def test_format_options_are_checked() -> None:
    registry = {"schema.registry.url": "http://r:8081"}
    [fmt] = column_formats({"valueFormat": "AVRO", **registry}, "orders", reading=True)
    assert (fmt.column, fmt.format, fmt.subject, fmt.version, fmt.registry) == (
        "value", "avro", "orders-value", "latest", (("url", "http://r:8081"),))
    key, value = column_formats({"keyFormat": "json-schema", "valueFormat": "avro",
                                 "keySubject": "k", "valueSchemaVersion": "3",
                                 "schema.registry.basic.auth.user.info": "u:p", **registry},
                                "t", reading=True)
    assert (key.subject, key.schema_type, value.version) == ("k", "JSON", "3")
    assert ("basic.auth.user.info", "u:p") in value.registry
    assert column_formats({}, "t", reading=True) == ()
    for options, topic, message in [
        ({"valueFormat": "protobuf", **registry}, "t", "valueFormat must be one of"),
        ({"valueFormat": "avro"}, "t", "needs the schema.registry.url option"),
        ({"valueFormat": "avro", **registry}, None, "needs option valueSubject"),
        ({"valueSubject": "s"}, "t", "option valueSubject needs valueFormat"),
        ({"valueFormat": "avro", "valueSchemaVersion": "new", **registry}, "t",
         "must be latest or a version number"),
        ({"schemaEvolutionMode": "sometimes"}, "t", "must be none or restart"),
        ({"schemaEvolutionMode": "restart"}, "t", "needs keyFormat or valueFormat"),
    ]:
        with pytest.raises(OdradekOptionError, match=message):
            column_formats(options, topic, reading=True)
