"""Values (and keys) through a schema registry for `odradek produce` and `odradek consume`,
as Confluent's kafka-avro-console-producer and -consumer do.

`produce --value-schema` registers the schema under the topic name strategy's subject
(`<topic>-value`, `<topic>-key`) and turns each line's JSON into Confluent's wire format (a
zero byte, the 4-byte schema id, the Avro or JSON payload) with confluent-kafka's
AvroSerializer / JSONSerializer; `consume --value-format avro|json` reads that format back,
fetching each writer schema by its id, with AvroDeserializer / JSONDeserializer, and prints
the value as JSON. The registry is confluent-kafka's SchemaRegistryClient at --registry-url.
"""

from __future__ import annotations

import argparse
import datetime
import decimal
import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
from confluent_kafka.schema_registry import (
    Schema,
    SchemaRegistryClient,
    prefix_schema_id_deserializer,
)
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from fastavro.validation import ValidationError, validate

from odradek.cli.client import EXIT_USAGE, CliError
from odradek.cli.schemas import registry_url  # $ODRADEK_REGISTRY_URL, the default

try:  # the HTTP client SchemaRegistryClient uses, as confluent-kafka picks it
    import httpx2 as httpx
except ImportError:  # pragma: no cover
    import httpx  # type: ignore[no-redef]

SCHEMA_TYPES = ("AVRO", "JSON")
FORMATS = ("string", "avro", "json")  # consume --key-format / --value-format
MAGIC = 0
HEADER = 5  # the magic byte and the 4-byte schema id
TOO_LONG = 300  # fastavro quotes whole schemas in some of its messages
# What a registry that cannot be reached (or does not answer in time) raises.
TRANSPORT_ERRORS = (httpx.HTTPError, OSError)


def registry_client(url: str, timeout: float) -> SchemaRegistryClient:
    # A command should not sit through the client's default backoff (3 retries from 1 s)
    # before saying that the registry is down; a registry restarting gets a second chance.
    return SchemaRegistryClient({"url": url, "timeout": max(1.0, timeout),
                                 "max.retries": 2, "retries.wait.ms": 200,
                                 "retries.max.wait.ms": 1000})


class Registry:
    """SchemaRegistryClient with the CLI's errors: a registry that cannot be reached is a
    CliError (the command cannot go on); its refusals are SchemaRegistryError."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url
        self.client = registry_client(url, timeout)

    def unreachable(self, error: Exception) -> CliError:
        return CliError(f"cannot reach the schema registry at {self.url}: "
                        f"{_describe(error)}")


def _describe(error: BaseException) -> str:
    if isinstance(error, SchemaRegistryError):
        return f"{error.error_message} (error {error.error_code})"
    text = str(error) or type(error).__name__
    return text if len(text) <= TOO_LONG else text[:TOO_LONG] + "..."


# ---- produce ---------------------------------------------------------------------------

def read_schema(text: str | None, path: str | None, option: str) -> str | None:
    """The schema of --value-schema TEXT or --value-schema-file PATH, if any."""
    if path is not None:
        try:
            return Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            reason = e.strerror if isinstance(e, OSError) and e.strerror else e
            raise CliError(f"{option}-file: cannot read {path}: {reason}", EXIT_USAGE) from e
    return text


def encoders(args: argparse.Namespace, timeout: float
             ) -> tuple[Encoder | None, Encoder | None]:
    """The key's and value's encoders that produce's --key-schema and --value-schema ask
    for, their schemas registered: a registry that is down, or refuses a schema, stops the
    command before any input is read."""
    value_schema = read_schema(args.value_schema, args.value_schema_file, "--value-schema")
    key_schema = read_schema(args.key_schema, args.key_schema_file, "--key-schema")
    if key_schema is not None and args.key_separator is None:
        raise CliError("--key-schema needs --key-separator: the key is the part of each "
                       "line before it", EXIT_USAGE)
    if key_schema is None and value_schema is None:
        return None, None
    registry = Registry(registry_url(args.registry_url), timeout)
    key = (None if key_schema is None else
           Encoder(registry, args.topic, MessageField.KEY, key_schema, args.schema_type))
    value = (None if value_schema is None else
             Encoder(registry, args.topic, MessageField.VALUE, value_schema,
                     args.schema_type))
    return key, value


class Encoder:
    """One line's JSON -> Confluent's wire format, with a schema registered under the topic
    name strategy's subject when the encoder is made."""

    def __init__(self, registry: Registry, topic: str, field: MessageField, schema_text: str,
                 schema_type: str) -> None:
        self.registry = registry
        self.what = "key" if field == MessageField.KEY else "value"
        self.context = SerializationContext(topic, field)
        self.subject = f"{topic}-{self.what}"
        self.schema_type = schema_type
        option = f"--{self.what}-schema"
        try:
            parsed_json = json.loads(schema_text)
        except ValueError as e:
            raise CliError(f"{option} is not JSON: {e}", EXIT_USAGE) from None
        self.avro: Any = None
        if schema_type == "AVRO":
            try:
                self.avro = fastavro.parse_schema(parsed_json)
            except Exception as e:  # fastavro raises SchemaParseException, ValueError...
                raise CliError(f"{option} is not an Avro schema: {e}", EXIT_USAGE) from None
        elif not isinstance(parsed_json, dict | bool):
            raise CliError(f"{option} is not a JSON Schema: not an object", EXIT_USAGE)
        try:
            self.schema_id = registry.client.register_schema(
                self.subject, Schema(schema_text, schema_type))
        except SchemaRegistryError as e:
            raise CliError(f"the schema registry at {registry.url} refused the {self.what} "
                           f"schema for subject {self.subject}: {_describe(e)}") from None
        except TRANSPORT_ERRORS as e:
            raise registry.unreachable(e) from None
        # Registered above: the serializer finds it in the client's cache.
        self.serialize = (AvroSerializer(registry.client, schema_text)
                          if schema_type == "AVRO" else
                          JSONSerializer(schema_text, registry.client))

    def encode(self, data: bytes, number: int) -> bytes | None:
        """The wire-format bytes of one line's JSON (None for `null`); a CliError naming
        the line when it is not JSON or does not match the schema."""
        where = f"line {number}: the {self.what}"
        try:
            obj = json.loads(data)
        except ValueError as e:
            text = data.decode("utf-8", "replace")
            shown = text if len(text) <= 60 else text[:57] + "..."
            raise CliError(f"{where} is not JSON ({e}): {shown!r}") from None
        if obj is None:
            return None  # a null value (a tombstone), as the serializers do
        if self.avro is not None:
            problem = avro_mismatch(obj, self.avro)
            if problem is not None:
                raise CliError(f"{where} does not match its Avro schema: {problem}")
        try:
            encoded: bytes | None = self.serialize(obj, self.context)
        except SchemaRegistryError as e:
            raise CliError(f"{where}: the schema registry at {self.registry.url} refused "
                           f"it: {_describe(e)}") from None
        except TRANSPORT_ERRORS as e:
            raise self.registry.unreachable(e) from None
        except Exception as e:  # SerializationError, TypeError, ValueError...
            kind = "Avro schema" if self.avro is not None else "JSON Schema"
            raise CliError(f"{where} does not match its {kind}: {_describe(e)}") from None
        return encoded


def avro_mismatch(datum: Any, schema: Any) -> str | None:
    """Why `datum` does not fit the parsed Avro schema, or None. fastavro's own check is
    lenient about records: a field the schema lacks passes (and would be dropped), a missing
    one counts as null; here the first is a mismatch, the second one unless the field has a
    default or allows null."""
    named = schema.get("__named_schemas", {}) if isinstance(schema, dict) else {}
    if isinstance(schema, dict) and schema.get("type") == "record" and \
            not isinstance(datum, dict):
        return f"a record {schema['name']} wants a JSON object, not {_json_kind(datum)}"
    problem = _fields_problem(datum, schema, named, "")
    if problem is not None:
        return problem
    try:
        validate(datum, schema, raise_errors=True)
    except ValidationError as e:
        errors = e.args[0] if e.args else str(e)
        try:
            messages = json.loads(errors) if isinstance(errors, str) else list(errors)
        except ValueError:
            messages = [str(errors)]
        text = "; ".join(str(m).strip() for m in messages)
        return text if len(text) <= TOO_LONG else text[:TOO_LONG] + "..."
    return None


def _fields_problem(datum: Any, schema: Any, named: dict[str, Any], path: str) -> str | None:
    if isinstance(schema, str):
        schema = named.get(schema, schema)
    if isinstance(schema, list):  # a union: the first branch the datum fits
        for branch in schema:
            if validate(datum, _resolve(branch, named), raise_errors=False):
                return _fields_problem(datum, branch, named, path)
        return None  # validate() says why below
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if kind == "record" and isinstance(datum, dict):
        fields = schema["fields"]
        names = {f["name"] for f in fields}
        if unknown := [k for k in datum if k not in names]:
            return (f"{path or schema['name']} has no field {unknown[0]!r} (record "
                    f"{schema['name']} has {', '.join(sorted(names)) or 'none'})")
        for f in fields:
            where = f"{path}.{f['name']}" if path else f"{schema['name']}.{f['name']}"
            if f["name"] not in datum:
                if "default" not in f and not _nullable(f["type"], named):
                    return f"{where} is missing (no default)"
                continue
            if problem := _fields_problem(datum[f["name"]], f["type"], named, where):
                return problem
    elif kind == "array" and isinstance(datum, list):
        for i, item in enumerate(datum):
            if problem := _fields_problem(item, schema["items"], named, f"{path}[{i}]"):
                return problem
    elif kind == "map" and isinstance(datum, dict):
        for k, item in datum.items():
            if problem := _fields_problem(item, schema["values"], named, f"{path}[{k!r}]"):
                return problem
    return None


def _resolve(schema: Any, named: dict[str, Any]) -> Any:
    return named.get(schema, schema) if isinstance(schema, str) else schema


def _nullable(schema: Any, named: dict[str, Any]) -> bool:
    schema = _resolve(schema, named)
    if isinstance(schema, list):
        return any(_nullable(branch, named) for branch in schema)
    return schema == "null" or (isinstance(schema, dict) and schema.get("type") == "null")


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


# ---- consume ---------------------------------------------------------------------------

class BadRecord(Exception):
    """A key or value the decoder cannot read: printed with the record's place, skipped."""


class Decoder:
    """Confluent's wire format -> a JSON-ready value, with the writer schema fetched by
    its id (and kept) through the registry."""

    def __init__(self, registry: Registry, fmt: str) -> None:
        self.registry = registry
        self.schema_type = fmt.upper()  # AVRO or JSON
        conf = {"schema.id.deserializer": prefix_schema_id_deserializer}
        self.deserialize = (AvroDeserializer(registry.client, conf=conf)
                            if self.schema_type == "AVRO" else
                            JSONDeserializer(None, schema_registry_client=registry.client,
                                             conf=conf))
        self.types: dict[int, str] = {}

    def decode(self, data: bytes | None, topic: str, field: MessageField
               ) -> tuple[Any, int | None]:
        """(the value, the id of its schema); (None, None) for a null."""
        if data is None:
            return None, None
        if len(data) < HEADER or data[0] != MAGIC:
            why = (f"{len(data)} bytes" if len(data) < HEADER
                   else f"its first byte is {data[0]}, not {MAGIC}")
            raise BadRecord(f"not in the schema registry's wire format ({why})")
        schema_id = int.from_bytes(data[1:HEADER], "big")
        schema_type = self._type_of(schema_id)
        if schema_type != self.schema_type:
            raise BadRecord(f"written with {schema_type} schema {schema_id}, not "
                            f"{self.schema_type}: try --{_option(field)}-format "
                            f"{schema_type.lower()}")
        try:
            value = self.deserialize(data, SerializationContext(topic, field))
        except TRANSPORT_ERRORS as e:
            raise self.registry.unreachable(e) from None
        except Exception as e:  # SerializationError, EOFError, ValueError...
            raise BadRecord(f"cannot decode it with {schema_type} schema {schema_id}: "
                            f"{_describe(e)}") from None
        return jsonable(value), schema_id

    def _type_of(self, schema_id: int) -> str:
        if schema_id not in self.types:
            try:
                schema = self.registry.client.get_schema(schema_id)
            except SchemaRegistryError as e:
                if e.http_status_code == 404:
                    raise BadRecord(f"schema id {schema_id} is unknown to the schema "
                                    f"registry at {self.registry.url}") from None
                raise BadRecord(f"cannot fetch schema {schema_id}: {_describe(e)}") from None
            except TRANSPORT_ERRORS as e:
                raise self.registry.unreachable(e) from None
            self.types[schema_id] = (schema.schema_type or "AVRO").upper()
        return self.types[schema_id]


def _option(field: MessageField) -> str:
    return "key" if field == MessageField.KEY else "value"


@dataclass
class Decoded:
    """A record's key and value as decoded; `None` fields were left as they are."""

    key: tuple[Any, int | None] | None = None
    value: tuple[Any, int | None] | None = None


class RecordDecoder:
    """The decoders --key-format and --value-format ask for."""

    def __init__(self, args: argparse.Namespace, timeout: float) -> None:
        registry = Registry(registry_url(args.registry_url), timeout)
        self.key = Decoder(registry, args.key_format) if args.key_format != "string" else None
        self.value = (Decoder(registry, args.value_format) if args.value_format != "string"
                      else None)

    @staticmethod
    def wanted(args: argparse.Namespace) -> bool:
        return bool(args.key_format != "string" or args.value_format != "string")

    def decode(self, topic: str, key: bytes | None, value: bytes | None) -> Decoded:
        decoded = Decoded()
        if self.key is not None:
            try:
                decoded.key = self.key.decode(key, topic, MessageField.KEY)
            except BadRecord as e:
                raise BadRecord(f"key: {e}") from None
        if self.value is not None:
            try:
                decoded.value = self.value.decode(value, topic, MessageField.VALUE)
            except BadRecord as e:
                raise BadRecord(f"value: {e}") from None
        return decoded


def jsonable(value: Any) -> Any:
    """A decoded value as JSON can carry it: bytes as Avro's JSON encoding writes them (one
    character per byte), decimals, times and UUIDs as text."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    return value


def json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))

