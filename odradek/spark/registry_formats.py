"""Keys and values in Confluent's wire format (a zero byte, the 4-byte schema id, the Avro
or JSON payload) as typed Spark columns, through a schema registry.

Reading, the column's type is the subject's schema when the query starts (its latest
version, or `valueSchemaVersion`): that schema is the reader's. Each record is decoded
with the schema its id names (its writer's) and resolved to the reader's by Avro's rules,
so records written with earlier or later versions of a subject are read while the query
runs. With `schemaEvolutionMode=restart`, a record written with a version newer than the
query's stops the query instead, saying so: restarted from its checkpoint, the query
reads with the newest version (and shows its new fields).

Writing, the column is encoded with the subject's latest schema when that schema has the
column's type, else with a schema made from the column's type, registered under the
subject first (the registry checks it against the subject's compatibility level).
"""

from __future__ import annotations

import io
import json
import struct
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import DataType, StructField, StructType

from .options import ColumnFormat
from .schema_types import (
    AvroTypes,
    JsonSchemaTypes,
    SchemaTypeError,
    avro_writer_converter,
    json_writer_converter,
    same_shape,
    spark_to_avro,
    spark_to_json_schema,
)

MAGIC = 0
_HEADER = struct.Struct(">bI")


class OdradekSchemaError(RuntimeError):
    """A record that cannot be decoded or encoded with its schema, or a registry that
    cannot give the schema a query needs."""


class OdradekSchemaChangedError(OdradekSchemaError):
    """schemaEvolutionMode=restart: a record was written with a newer version of the
    subject than the query reads with."""


# ---- the registry, one client per process and settings ----------------------------------

_CLIENTS: dict[tuple[tuple[str, str], ...], Any] = {}
_LOCK = threading.Lock()


def registry_client(settings: tuple[tuple[str, str], ...]) -> Any:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    with _LOCK:
        client = _CLIENTS.get(settings)
        if client is None:
            client = _CLIENTS[settings] = SchemaRegistryClient(dict(settings))
        return client


def _fetch(what: str, call: Callable[[], Any], missing_ok: bool = False) -> Any:
    """call()'s answer; the registry's refusal, or its absence, as an OdradekSchemaError
    that says what was asked (None for "not found" when missing_ok)."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    try:
        return call()
    except SchemaRegistryError as e:
        if missing_ok and e.http_status_code == 404:
            return None
        raise OdradekSchemaError(f"{what}: {e.error_message} (error {e.error_code})") from None
    except OSError as e:
        raise OdradekSchemaError(f"{what}: the schema registry cannot be reached: {e}") from None
    except Exception as e:  # httpx's errors: timeouts, refused connections
        if type(e).__module__.startswith(("httpx", "httpcore")):
            raise OdradekSchemaError(f"{what}: the schema registry cannot be reached: "
                                     f"{e}") from None
        raise


@dataclass(frozen=True)
class RegisteredType:
    """A registered schema and the Spark type of its values."""

    schema_id: int
    version: int | None
    schema_type: str
    text: str
    named: tuple[tuple[str, str], ...]  # Avro: named types of its references (name, JSON)
    spark_type: DataType


def _named_of(client: Any, schema: Any, depth: int = 0) -> dict[str, Any]:
    """The named Avro types of a schema's references (and theirs), by full name."""
    named: dict[str, Any] = {}
    if depth > 32:
        raise OdradekSchemaError("schema references nested too deep (a cycle?)")
    for ref in schema.references or ():
        registered = _fetch(f"reference {ref.name} ({ref.subject} version {ref.version})",
                            lambda r=ref: client.get_version(r.subject, r.version))
        named.update(_named_of(client, registered.schema, depth + 1))
        types = AvroTypes(json.loads(registered.schema.schema_str), named)
        named.update(types.named)
    return named


def _typed(client: Any, schema_id: int, version: int | None, schema: Any) -> RegisteredType:
    schema_type = (schema.schema_type or "AVRO").upper()
    document = json.loads(schema.schema_str)
    try:
        if schema_type == "AVRO":
            named = _named_of(client, schema)
            types = AvroTypes(document, named)
            spark_type = types.spark_type
            named_docs = tuple((k, json.dumps(v)) for k, v in named.items())
        elif schema_type == "JSON":
            spark_type, named_docs = JsonSchemaTypes(document).spark_type, ()
        else:
            raise OdradekSchemaError(f"schema {schema_id} is {schema_type}: only AVRO and "
                                     "JSON schemas are read")
    except SchemaTypeError as e:
        raise OdradekSchemaError(f"schema {schema_id}: {e}") from None
    return RegisteredType(schema_id, version, schema_type, schema.schema_str, named_docs,
                          spark_type)


def reader_type(fmt: ColumnFormat, wanted: DataType | None = None) -> RegisteredType:
    """The subject's version a query reads with: `fmt.version`, or the latest. Given the
    type Spark settled on for the column (`wanted`), the newest version of that type, so
    that the planning and the reading of one query agree even when a version is registered
    between the two."""
    client = registry_client(fmt.registry)
    what = f"subject {fmt.subject} ({fmt.column}Format={fmt.format})"
    registered = _fetch(what, lambda: client.get_version(
        fmt.subject, "latest" if fmt.version == "latest" else int(fmt.version)))
    found = _typed(client, registered.schema_id, registered.version, registered.schema)
    if wanted is None or same_shape(found.spark_type, wanted):
        _check_type(fmt, found)
        return found
    for version in sorted(_fetch(what, lambda: client.get_versions(fmt.subject)),
                          reverse=True):
        older = _fetch(what, lambda v=version: client.get_version(fmt.subject, v))
        typed = _typed(client, older.schema_id, older.version, older.schema)
        if same_shape(typed.spark_type, wanted):
            return typed
    raise OdradekSchemaError(f"{what}: no version has the type {wanted.simpleString()} "
                             "the query was planned with")


def _check_type(fmt: ColumnFormat, found: RegisteredType) -> None:
    if found.schema_type != fmt.schema_type:
        raise OdradekSchemaError(
            f"subject {fmt.subject} holds {found.schema_type} schemas, not "
            f"{fmt.schema_type}: use {fmt.column}Format="
            f"{'avro' if found.schema_type == 'AVRO' else 'json-schema'}")


def column_field(fmt: ColumnFormat, registered: RegisteredType) -> StructField:
    return StructField(fmt.column, registered.spark_type, True)


# ---- reading ---------------------------------------------------------------------------

class ColumnDecoder:
    """Decodes a column of wire-format values into Arrow values of the reader's type."""

    def __init__(self, fmt: ColumnFormat, reader: RegisteredType) -> None:
        self.fmt = fmt
        self.reader = reader
        self.client = registry_client(fmt.registry)
        self.arrow_type = to_arrow_type(reader.spark_type, timezone="UTC")
        named = {k: json.loads(v) for k, v in reader.named}
        if reader.schema_type == "AVRO":
            import fastavro

            document = json.loads(reader.text)
            self._reader_parsed = fastavro.parse_schema(document, named_schemas=dict(named))
            self.convert = AvroTypes(document, named).convert
        else:
            self.convert = JsonSchemaTypes(json.loads(reader.text)).convert
        self._writers: dict[int, Any] = {}  # schema id -> parsed writer schema (Avro)
        self._checked: set[int] = set()  # ids seen not to be newer than the reader's

    def decode(self, values: list[bytes | None], where: Callable[[int], str]) -> pa.Array:
        out = []
        for i, value in enumerate(values):
            if value is None:
                out.append(None)
                continue
            try:
                out.append(self._one(value))
            except OdradekSchemaError as e:
                raise type(e)(f"the {self.fmt.column} of {where(i)}: {e}") from None
            except (SchemaTypeError, ValueError, EOFError, IndexError, KeyError) as e:
                raise OdradekSchemaError(
                    f"the {self.fmt.column} of {where(i)} cannot be decoded with its "
                    f"{self.reader.schema_type} schema: {e}") from None
        return pa.array(out, type=self.arrow_type)

    def _one(self, value: bytes) -> Any:
        if len(value) < _HEADER.size or value[0] != MAGIC:
            why = (f"{len(value)} bytes" if len(value) < _HEADER.size
                   else f"its first byte is {value[0]}, not {MAGIC}")
            raise OdradekSchemaError(f"not in the schema registry's wire format ({why})")
        _, schema_id = _HEADER.unpack_from(value)
        if schema_id != self.reader.schema_id and schema_id not in self._checked:
            self._check_writer(schema_id)
        payload = memoryview(value)[_HEADER.size:]
        if self.reader.schema_type == "JSON":
            return self.convert(json.loads(bytes(payload)))
        import fastavro

        writer = self._writer(schema_id)
        decoded = fastavro.schemaless_reader(io.BytesIO(payload), writer, self._reader_parsed,
                                             return_record_name=True,
                                             return_record_name_override=True)
        return self.convert(decoded)

    def _check_writer(self, schema_id: int) -> None:
        """The writer's schema has the subject's type; under restart, it is not newer than
        the reader's version."""
        schema = _fetch(f"schema {schema_id}", lambda: self.client.get_schema(schema_id))
        kind = (schema.schema_type or "AVRO").upper()
        if kind != self.reader.schema_type:
            raise OdradekSchemaError(f"written with {kind} schema {schema_id}, not "
                                     f"{self.reader.schema_type}")
        if self.fmt.evolution == "restart" and self.reader.version is not None:
            # Not a version of this subject (None): resolved as it is.
            registered = _fetch(f"schema {schema_id} in {self.fmt.subject}", lambda: (
                self.client.lookup_schema(self.fmt.subject, schema)), missing_ok=True)
            if registered is not None and registered.version > self.reader.version:
                raise OdradekSchemaChangedError(
                    f"written with version {registered.version} (schema {schema_id}) of "
                    f"subject {self.fmt.subject}, newer than version {self.reader.version} "
                    "the query reads with (schemaEvolutionMode=restart): restart the query "
                    "from its checkpoint to read with the newest version")
        self._checked.add(schema_id)

    def _writer(self, schema_id: int) -> Any:
        parsed = self._writers.get(schema_id)
        if parsed is None:
            import fastavro

            if schema_id == self.reader.schema_id:
                parsed = self._reader_parsed
            else:
                schema = _fetch(f"schema {schema_id}", lambda: self.client.get_schema(schema_id))
                named = _named_of(self.client, schema)
                parsed = fastavro.parse_schema(json.loads(schema.schema_str),
                                               named_schemas=named)
            self._writers[schema_id] = parsed
        return parsed


def decode_batch(batch: pa.RecordBatch, decoders: Mapping[str, ColumnDecoder],
                 schema: pa.Schema) -> pa.RecordBatch:
    """The batch with its key and/or value column decoded, as `schema` (the query's)."""
    names = batch.schema.names
    topics, partitions, offsets = (batch.column(names.index(n))
                                   for n in ("topic", "partition", "offset"))

    def where(i: int) -> str:
        return f"{topics[i].as_py()}-{partitions[i].as_py()} offset {offsets[i].as_py()}"

    arrays = [decoders[name].decode(batch.column(i).to_pylist(), where)
              if name in decoders else batch.column(i) for i, name in enumerate(names)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def with_formats(base: StructType, fields: Mapping[str, StructField]) -> StructType:
    """The row schema with the key/value fields replaced by their decoded types."""
    return StructType([fields.get(f.name, f) for f in base.fields])


# ---- writing ---------------------------------------------------------------------------

def writer_schema(fmt: ColumnFormat, column_type: DataType) -> RegisteredType:
    """The registered schema a column is written with: the subject's latest when it has
    the column's type, else one made from the type and registered (on the driver, before
    any task runs: a schema the registry refuses stops the write with its reason)."""
    from confluent_kafka.schema_registry import Schema

    client = registry_client(fmt.registry)
    what = f"subject {fmt.subject} ({fmt.column}Format={fmt.format})"
    latest = _fetch(what, lambda: client.get_latest_version(fmt.subject), missing_ok=True)
    if latest is not None:
        found = _typed(client, latest.schema_id, latest.version, latest.schema)
        if found.schema_type == fmt.schema_type and same_shape(found.spark_type, column_type):
            return found
    try:
        if fmt.schema_type == "AVRO":
            document = spark_to_avro(column_type, name=_record_name(fmt.subject))
        else:
            document = spark_to_json_schema(column_type, title=fmt.subject)
    except SchemaTypeError as e:
        raise OdradekSchemaError(f"the {fmt.column} column cannot be written as "
                                 f"{fmt.format}: {e}") from None
    schema = Schema(json.dumps(document), fmt.schema_type)
    schema_id = _fetch(f"registering the {fmt.column} column's schema under {fmt.subject}",
                       lambda: client.register_schema(fmt.subject, schema))
    return _typed(client, schema_id, None, schema)


def _record_name(subject: str) -> str:
    """An Avro name from a subject: orders-value -> orders_value."""
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in subject)
    return name if name and not name[0].isdigit() else f"_{name}"


class ColumnEncoder:
    """Encodes a column's Python values (Arrow's to_pylist()) into the wire format."""

    def __init__(self, fmt: ColumnFormat, writer: RegisteredType, column_type: DataType
                 ) -> None:
        self.fmt = fmt
        self.header = _HEADER.pack(MAGIC, writer.schema_id)
        document = json.loads(writer.text)
        if writer.schema_type == "AVRO":
            import fastavro

            named = {k: json.loads(v) for k, v in writer.named}
            self._parsed = fastavro.parse_schema(document, named_schemas=named)
            self.convert = avro_writer_converter(column_type)
            self._encode = self._avro
        else:
            import jsonschema.validators

            self._validator = jsonschema.validators.validator_for(document)(document)
            self.convert = json_writer_converter(column_type)
            self._encode = self._json

    def _avro(self, value: Any) -> bytes:
        import fastavro

        out = io.BytesIO()
        out.write(self.header)
        fastavro.schemaless_writer(out, self._parsed, value)
        return out.getvalue()

    def _json(self, value: Any) -> bytes:
        error = next(iter(self._validator.iter_errors(value)), None)
        if error is not None:
            path = "".join(f"[{p!r}]" for p in error.absolute_path)
            raise ValueError(f"{path or 'the value'} does not match its JSON Schema: "
                             f"{error.message}")
        return self.header + json.dumps(value, separators=(",", ":"),
                                        ensure_ascii=False).encode()

    def encode(self, values: list[Any], where: Callable[[int], str]) -> list[bytes | None]:
        out: list[bytes | None] = []
        for i, value in enumerate(values):
            if value is None:
                out.append(None)  # a null key, or a tombstone
                continue
            try:
                out.append(self._encode(self.convert(value)))
            except (ValueError, TypeError, KeyError, AttributeError) as e:
                raise OdradekSchemaError(f"the {self.fmt.column} of {where(i)} cannot be "
                                         f"written as {self.fmt.format}: {e}") from None
        return out
