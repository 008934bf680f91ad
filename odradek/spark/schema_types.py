"""Spark SQL types of registry schemas (Avro, JSON Schema) and the conversions of values
between a decoded record and a Spark row.

Avro maps to Spark types as Spark's own spark-avro does (SchemaConverters.toSqlType):
records are structs, enums strings, fixed and bytes binary, unions with null nullable, a
union of int and long a long, of float and double a double, and any other union a struct
with one nullable field per branch (`member0`, `member1`, ...). JSON Schema maps objects
with properties to structs, `integer` to long, `number` to double, arrays to arrays,
objects with only `additionalProperties` to maps; a part without one plain type (oneOf,
anyOf, mixed types) is a string column holding that part's JSON text.

Writing goes the other way: a Spark type becomes an Avro schema or a JSON Schema when no
registered one fits the column, and rows become the values fastavro or json.dumps take.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import uuid
from collections.abc import Callable
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

Convert = Callable[[Any], Any]


class SchemaTypeError(ValueError):
    """A schema (or a Spark type) this mapping cannot express."""


def _identity(value: Any) -> Any:
    return value


# ---- Avro ------------------------------------------------------------------------------

_AVRO_PRIMITIVES: dict[str, DataType] = {
    "null": NullType(), "boolean": BooleanType(), "int": IntegerType(), "long": LongType(),
    "float": FloatType(), "double": DoubleType(), "bytes": BinaryType(), "string": StringType(),
}


class AvroTypes:
    """The Spark type of an Avro schema (a JSON document, as registered) and the converter of
    fastavro's decoded values into what Arrow takes for that type. `named` holds the named
    types of the schema's references, by full name."""

    def __init__(self, document: Any, named: dict[str, Any] | None = None) -> None:
        self.named: dict[str, Any] = dict(named or {})
        self._visiting: set[str] = set()
        self.spark_type, self.nullable = self._type(document, "")
        self.convert = self._converter(document, "")

    # Named types are looked up by full name; a short name means the enclosing namespace's.
    def _full(self, name: str, namespace: str) -> str:
        return name if "." in name or not namespace else f"{namespace}.{name}"

    def _lookup(self, node: Any, namespace: str) -> tuple[Any, str]:
        if isinstance(node, str) and node not in _AVRO_PRIMITIVES:
            full = self._full(node, namespace)
            found = self.named.get(full, self.named.get(node))
            if found is None:
                raise SchemaTypeError(f"unknown Avro type {node!r}")
            return found, full.rpartition(".")[0]
        if isinstance(node, dict) and node.get("type") in ("record", "error", "enum", "fixed"):
            full = self._full(node["name"], node.get("namespace", namespace))
            self.named.setdefault(full, node)
            return node, full.rpartition(".")[0]
        return node, namespace

    def _type(self, node: Any, namespace: str) -> tuple[DataType, bool]:
        """(the Spark type, whether null is a possible value)."""
        node, namespace = self._lookup(node, namespace)
        if isinstance(node, str):
            return _AVRO_PRIMITIVES[node], node == "null"
        if isinstance(node, list):
            return self._union(node, namespace)
        kind, logical = node.get("type"), node.get("logicalType")
        if logical is None and (isinstance(kind, list | dict) or kind in _AVRO_PRIMITIVES):
            return self._type(kind, namespace)  # {"type": "string"}, {"type": [...]}
        if logical == "decimal" and kind in ("bytes", "fixed"):
            return DecimalType(int(node["precision"]), int(node.get("scale", 0))), False
        if logical == "date" and kind == "int":
            return DateType(), False
        if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
            return TimestampType(), False
        if logical in ("local-timestamp-millis", "local-timestamp-micros") and kind == "long":
            return TimestampNTZType(), False
        if kind in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[kind], kind == "null"
        if kind == "enum":
            return StringType(), False
        if kind == "fixed":
            return BinaryType(), False
        if kind == "array":
            items, nullable = self._type(node["items"], namespace)
            return ArrayType(items, nullable), False
        if kind == "map":
            values, nullable = self._type(node["values"], namespace)
            return MapType(StringType(), values, nullable), False
        if kind in ("record", "error"):
            full = self._full(node["name"], node.get("namespace", namespace))
            if full in self._visiting:
                raise SchemaTypeError(f"the Avro record {full} contains itself: recursive "
                                      "types have no Spark type")
            self._visiting.add(full)
            fields = []
            for f in node["fields"]:
                spark_type, nullable = self._type(f["type"], namespace)
                fields.append(StructField(f["name"], spark_type, nullable))
            self._visiting.discard(full)
            return StructType(fields), False
        raise SchemaTypeError(f"Avro type {kind!r} has no Spark type")

    def _union(self, branches: list[Any], namespace: str) -> tuple[DataType, bool]:
        nullable = any(self._lookup(b, namespace)[0] == "null" for b in branches)
        rest = [b for b in branches if self._lookup(b, namespace)[0] != "null"]
        if not rest:
            return NullType(), True
        types = [self._type(b, namespace)[0] for b in rest]
        if len(types) == 1:
            return types[0], nullable
        if set(map(type, types)) == {IntegerType, LongType}:
            return LongType(), nullable
        if set(map(type, types)) == {FloatType, DoubleType}:
            return DoubleType(), nullable
        return StructType([StructField(f"member{i}", t, True) for i, t in enumerate(types)]
                          ), nullable

    def _converter(self, node: Any, namespace: str) -> Convert:
        node, namespace = self._lookup(node, namespace)
        if isinstance(node, str):
            return _identity
        if isinstance(node, list):
            return self._union_converter(node, namespace)
        kind, logical = node.get("type"), node.get("logicalType")
        if logical in ("time-millis", "time-micros") and kind in ("int", "long"):
            scale = 1_000 if logical == "time-millis" else 1_000_000
            return lambda v: None if v is None else _time_units(v, scale)
        if logical == "uuid":
            return lambda v: None if v is None else str(v)
        if kind == "array":
            items = self._converter(node["items"], namespace)
            if items is _identity:
                return _identity
            return lambda v: None if v is None else [items(x) for x in v]
        if kind == "map":
            values = self._converter(node["values"], namespace)
            if values is _identity:
                return _identity
            return lambda v: None if v is None else {k: values(x) for k, x in v.items()}
        if kind in ("record", "error"):
            fields = [(f["name"], self._converter(f["type"], namespace))
                      for f in node["fields"]]
            if all(c is _identity for _, c in fields):
                return _identity
            return lambda v: None if v is None else {n: c(v.get(n)) for n, c in fields}
        if logical is None and (isinstance(kind, list | dict) or kind in _AVRO_PRIMITIVES):
            return self._converter(kind, namespace)
        return _identity

    def _union_converter(self, branches: list[Any], namespace: str) -> Convert:
        rest = [b for b in branches if self._lookup(b, namespace)[0] != "null"]
        spark_type, _ = self._union(branches, namespace)
        if len(rest) == 1 or not isinstance(spark_type, StructType):
            if len(rest) == 1:
                return self._converter(rest[0], namespace)
            return _identity  # int/long or float/double: a number either way
        # A struct of members: fastavro gives records of a union as (name, value) when it
        # has more than one record; other branches are told apart by the value's type.
        members = [(self._branch_test(b, namespace), self._converter(b, namespace))
                   for b in rest]

        def convert(value: Any) -> Any:
            if value is None:
                return None
            out: dict[str, Any] = {f"member{i}": None for i in range(len(members))}
            for i, (test, conv) in enumerate(members):
                if test(value):
                    out[f"member{i}"] = conv(value[1] if isinstance(value, tuple) else value)
                    return out
            raise SchemaTypeError(f"a union value {value!r} fits none of its branches")
        return convert

    def _branch_test(self, branch: Any, namespace: str) -> Callable[[Any], bool]:
        node, namespace = self._lookup(branch, namespace)
        kind = node if isinstance(node, str) else node.get("type")
        if kind in ("record", "error"):
            full = self._full(node["name"], node.get("namespace", namespace))
            short = node["name"]
            return lambda v: (isinstance(v, tuple) and v[0] in (full, short)) or (
                isinstance(v, dict) and not isinstance(v, tuple))
        if isinstance(node, dict) and node.get("logicalType"):
            python = {"date": datetime.date, "timestamp-millis": datetime.datetime,
                      "timestamp-micros": datetime.datetime, "decimal": decimal.Decimal,
                      "uuid": uuid.UUID}.get(node["logicalType"])
            if python is not None:
                return lambda v: isinstance(v, python)
        tests: dict[str, Callable[[Any], bool]] = {
            "boolean": lambda v: isinstance(v, bool),
            "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
            "long": lambda v: isinstance(v, int) and not isinstance(v, bool),
            "float": lambda v: isinstance(v, float), "double": lambda v: isinstance(v, float),
            "string": lambda v: isinstance(v, str), "enum": lambda v: isinstance(v, str),
            "bytes": lambda v: isinstance(v, bytes), "fixed": lambda v: isinstance(v, bytes),
            "array": lambda v: isinstance(v, list), "map": lambda v: isinstance(v, dict),
        }
        return tests.get(kind, lambda v: False)


def _time_units(value: Any, scale: int) -> int:
    if isinstance(value, datetime.time):
        seconds = value.hour * 3600 + value.minute * 60 + value.second
        return seconds * scale + value.microsecond * scale // 1_000_000
    return int(value)


def spark_to_avro(spark_type: DataType, name: str = "topLevelRecord",
                  namespace: str = "") -> Any:
    """An Avro schema for values of a Spark type, as spark-avro's to_avro writes one: nested
    records named after their field within the parent's namespace. Nullable fields are
    unions with null first and a null default, so a later version may drop them."""
    if isinstance(spark_type, StructType):
        full = f"{namespace}.{name}" if namespace else name
        fields = []
        for f in spark_type.fields:
            avro = spark_to_avro(f.dataType, f.name, full)
            field: dict[str, Any] = {"name": f.name, "type": avro}
            if f.nullable:
                field = {"name": f.name, "type": ["null", avro], "default": None}
            fields.append(field)
        record: dict[str, Any] = {"type": "record", "name": name, "fields": fields}
        if namespace:
            record["namespace"] = namespace
        return record
    simple: dict[type, Any] = {
        BooleanType: "boolean", ByteType: "int", ShortType: "int", IntegerType: "int",
        LongType: "long", FloatType: "float", DoubleType: "double", StringType: "string",
        BinaryType: "bytes", DateType: {"type": "int", "logicalType": "date"},
        TimestampType: {"type": "long", "logicalType": "timestamp-micros"},
        TimestampNTZType: {"type": "long", "logicalType": "local-timestamp-micros"},
    }
    if type(spark_type) in simple:
        return simple[type(spark_type)]
    if isinstance(spark_type, DecimalType):
        return {"type": "bytes", "logicalType": "decimal", "precision": spark_type.precision,
                "scale": spark_type.scale}
    if isinstance(spark_type, ArrayType):
        items = spark_to_avro(spark_type.elementType, name, namespace)
        return {"type": "array", "items": ["null", items] if spark_type.containsNull else items}
    if isinstance(spark_type, MapType):
        if not isinstance(spark_type.keyType, StringType):
            raise SchemaTypeError("Avro maps have string keys, not "
                                  f"{spark_type.keyType.simpleString()}")
        values = spark_to_avro(spark_type.valueType, name, namespace)
        return {"type": "map",
                "values": ["null", values] if spark_type.valueContainsNull else values}
    raise SchemaTypeError(f"Spark type {spark_type.simpleString()} has no Avro type")


def avro_writer_converter(spark_type: DataType) -> Convert:
    """Arrow's Python values of a Spark type (to_pylist()) into what fastavro writes: maps
    from (key, value) pairs to dicts, a union's member struct to the member that is set."""
    if isinstance(spark_type, StructType):
        fields = [(f.name, avro_writer_converter(f.dataType)) for f in spark_type.fields]
        if [f.name for f in spark_type.fields] == [f"member{i}" for i in range(len(fields))]:
            # A union written as its member struct: the one member that is set.
            def member(value: Any) -> Any:
                if value is None:
                    return None
                return next((c(value[n]) for n, c in fields if value[n] is not None), None)
            return member
        if all(c is _identity for _, c in fields):
            return _identity
        return lambda v: None if v is None else {n: c(v[n]) for n, c in fields}
    if isinstance(spark_type, ArrayType):
        items = avro_writer_converter(spark_type.elementType)
        return _identity if items is _identity else (
            lambda v: None if v is None else [items(x) for x in v])
    if isinstance(spark_type, MapType):
        values = avro_writer_converter(spark_type.valueType)
        return lambda v: None if v is None else {k: values(x) for k, x in _pairs(v)}
    return _identity


def _pairs(value: Any) -> Any:
    return value.items() if isinstance(value, dict) else value


def same_shape(a: DataType, b: DataType) -> bool:
    """Whether two Spark types hold the same values, nullability aside (Spark widens and
    narrows nullability through a query's operators)."""
    return _shape(a) == _shape(b)


def _shape(t: DataType) -> Any:
    if isinstance(t, StructType):
        return ("struct", tuple((f.name, _shape(f.dataType)) for f in t.fields))
    if isinstance(t, ArrayType):
        return ("array", _shape(t.elementType))
    if isinstance(t, MapType):
        return ("map", _shape(t.keyType), _shape(t.valueType))
    return t.simpleString()


# ---- JSON Schema -----------------------------------------------------------------------

_JSON_PRIMITIVES: dict[str, DataType] = {
    "string": StringType(), "integer": LongType(), "number": DoubleType(),
    "boolean": BooleanType(),
}
_MAX_REF_DEPTH = 16


class JsonSchemaTypes:
    """The Spark type of a JSON Schema (a JSON document) and the converter of a decoded JSON
    value into what Arrow takes for that type."""

    def __init__(self, document: Any) -> None:
        self.root = document
        self.spark_type = self._type(document, 0)
        self.convert = self._converter(document, 0, "$")

    def _deref(self, node: Any, depth: int) -> tuple[Any, int]:
        while isinstance(node, dict) and isinstance(node.get("$ref"), str):
            ref = node["$ref"]
            if not ref.startswith("#") or depth >= _MAX_REF_DEPTH:
                return None, depth  # external, or recursive: JSON text
            target: Any = self.root
            for part in ref[1:].split("/")[1:]:
                part = part.replace("~1", "/").replace("~0", "~")
                target = target.get(part) if isinstance(target, dict) else None
            node, depth = target, depth + 1
        return node, depth

    def _kind(self, node: Any) -> str | None:
        """The node's one plain type, or None (then it is JSON text)."""
        if not isinstance(node, dict) or any(k in node for k in ("oneOf", "anyOf", "not")):
            return None
        kind = node.get("type")
        if isinstance(kind, list):
            rest = [k for k in kind if k != "null"]
            kind = rest[0] if len(rest) == 1 else None
        if kind is None and "properties" in node:
            kind = "object"
        return kind if isinstance(kind, str) else None

    def _type(self, node: Any, depth: int) -> DataType:
        node, depth = self._deref(node, depth)
        kind = self._kind(node)
        if kind in _JSON_PRIMITIVES:
            return _JSON_PRIMITIVES[kind]
        if kind == "array" and isinstance(node.get("items"), dict):
            return ArrayType(self._type(node["items"], depth), True)
        if kind == "object" and isinstance(node.get("properties"), dict) and node["properties"]:
            return StructType([StructField(name, self._type(sub, depth), True)
                               for name, sub in node["properties"].items()])
        if kind == "object" and isinstance(node.get("additionalProperties"), dict):
            return MapType(StringType(), self._type(node["additionalProperties"], depth), True)
        return StringType()  # JSON text

    def _converter(self, node: Any, depth: int, path: str) -> Convert:
        node, depth = self._deref(node, depth)
        kind = self._kind(node)
        spark_type = self._type(node, depth)
        if kind == "string":
            return lambda v: _checked(v, str, path, "a string")
        if kind == "integer":
            return lambda v: _integer(v, path)
        if kind == "number":
            return lambda v: _number(v, path)
        if kind == "boolean":
            return lambda v: _checked(v, bool, path, "a boolean")
        if isinstance(spark_type, ArrayType):
            items = self._converter(node["items"], depth, f"{path}[]")
            return lambda v: None if v is None else [
                items(x) for x in _checked(v, list, path, "an array")]
        if isinstance(spark_type, StructType):
            fields = [(name, self._converter(sub, depth, f"{path}.{name}"))
                      for name, sub in node["properties"].items()]
            return lambda v: None if v is None else {
                n: c(_checked(v, dict, path, "an object").get(n)) for n, c in fields}
        if isinstance(spark_type, MapType):
            values = self._converter(node["additionalProperties"], depth, f"{path}{{}}")
            return lambda v: None if v is None else {
                k: values(x) for k, x in _checked(v, dict, path, "an object").items()}
        # No one plain type: the part's JSON text.
        return lambda v: None if v is None else json.dumps(v, separators=(",", ":"),
                                                           ensure_ascii=False)


def _checked(value: Any, kind: type, path: str, what: str) -> Any:
    if value is None or (isinstance(value, kind) and
                         (kind is bool or not isinstance(value, bool))):
        return value
    raise SchemaTypeError(f"{path} is {_json_kind(value)}, not {what}")


def _integer(value: Any, path: str) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise SchemaTypeError(f"{path} is {_json_kind(value)}, not an integer")


def _number(value: Any, path: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise SchemaTypeError(f"{path} is {_json_kind(value)}, not a number")


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object" if isinstance(value, dict) else "null"


def spark_to_json_schema(spark_type: DataType, title: str | None = None) -> dict[str, Any]:
    """A JSON Schema (draft 7) for values of a Spark type: structs are objects whose
    non-nullable fields are required, nullable parts also allow null."""
    schema = _json_schema_of(spark_type)
    if title is not None:
        schema = {"$schema": "http://json-schema.org/draft-07/schema#", "title": title,
                  **schema}
    return schema


def _json_schema_of(spark_type: DataType, nullable: bool = False) -> dict[str, Any]:
    def typed(kind: str, **more: Any) -> dict[str, Any]:
        return {"type": [kind, "null"] if nullable else kind, **more}

    if isinstance(spark_type, StructType):
        required = [f.name for f in spark_type.fields if not f.nullable]
        more: dict[str, Any] = {"properties": {
            f.name: _json_schema_of(f.dataType, f.nullable) for f in spark_type.fields}}
        if required:
            more["required"] = required
        return typed("object", **more)
    if isinstance(spark_type, ArrayType):
        return typed("array", items=_json_schema_of(spark_type.elementType,
                                                    spark_type.containsNull))
    if isinstance(spark_type, MapType):
        if not isinstance(spark_type.keyType, StringType):
            raise SchemaTypeError("JSON objects have string keys, not "
                                  f"{spark_type.keyType.simpleString()}")
        return typed("object", additionalProperties=_json_schema_of(
            spark_type.valueType, spark_type.valueContainsNull))
    if isinstance(spark_type, BooleanType):
        return typed("boolean")
    if isinstance(spark_type, ByteType | ShortType | IntegerType | LongType):
        return typed("integer")
    if isinstance(spark_type, FloatType | DoubleType | DecimalType):
        return typed("number")
    if isinstance(spark_type, StringType):
        return typed("string")
    if isinstance(spark_type, BinaryType):
        return typed("string", contentEncoding="base64")
    if isinstance(spark_type, DateType):
        return typed("string", format="date")
    if isinstance(spark_type, TimestampType | TimestampNTZType):
        return typed("string", format="date-time")
    raise SchemaTypeError(f"Spark type {spark_type.simpleString()} has no JSON Schema type")


def json_writer_converter(spark_type: DataType) -> Convert:
    """Arrow's Python values of a Spark type into JSON values: bytes as base64, dates and
    times as ISO 8601, decimals as numbers, maps as objects."""
    if isinstance(spark_type, StructType):
        fields = [(f.name, json_writer_converter(f.dataType)) for f in spark_type.fields]
        return lambda v: None if v is None else {n: c(v[n]) for n, c in fields}
    if isinstance(spark_type, ArrayType):
        items = json_writer_converter(spark_type.elementType)
        return lambda v: None if v is None else [items(x) for x in v]
    if isinstance(spark_type, MapType):
        values = json_writer_converter(spark_type.valueType)
        return lambda v: None if v is None else {k: values(x) for k, x in _pairs(v)}
    if isinstance(spark_type, BinaryType):
        return lambda v: None if v is None else base64.b64encode(v).decode()
    if isinstance(spark_type, DateType | TimestampType | TimestampNTZType):
        return lambda v: None if v is None else v.isoformat()
    if isinstance(spark_type, DecimalType):
        return lambda v: None if v is None else float(v)
    return _identity
