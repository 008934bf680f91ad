"""The schema types the registry holds, parsed and compared: Avro (fastavro parses it;
the compatibility rules fastavro lacks are avro_compatibility.py's) and JSON Schema (the
jsonschema library checks it against its draft's meta-schema; Confluent's compatibility
rules are json_schema_compatibility.py's) and Protobuf
(protobuf_schemas.py parses it, protobuf_compatibility.py has Confluent's rules).

A ParsedSchema's `canonical` form decides identity (registering a schema already in a
subject answers its id, and the same schema in two subjects shares one id): the schema's
JSON without insignificant whitespace, so schemas that differ in a default or a doc are
different schemas, as in Confluent's registry. A Protobuf schema's is its canonical .proto
text, which is also what is stored.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators

from odradek.registry import (
    avro_compatibility,
    json_schema_compatibility,
    protobuf_compatibility,
    protobuf_schemas,
)
from odradek.registry.avro_compatibility import InvalidSchemaError
from odradek.registry.state import Reference, SchemaVersion

__all__ = ["SCHEMA_TYPES", "InvalidSchemaError", "ParsedSchema", "incompatibilities",
           "parse_schema"]

SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")


@dataclass(frozen=True, slots=True)
class ParsedSchema:
    schema_type: str
    text: str  # as stored: as registered, or normalized when asked
    canonical: str
    references: tuple[Reference, ...]
    parsed: Any  # fastavro's parsed schema, or the JSON Schema document


Resolver = Callable[[Reference], SchemaVersion]


def parse_schema(schema_type: str, text: str,
                 references: Sequence[tuple[Reference, SchemaVersion]] = (), *,
                 normalize: bool = False, resolve: Resolver | None = None,
                 validate_defaults: bool = True) -> ParsedSchema:
    """Parses a schema of `schema_type` whose references name registered versions;
    InvalidSchemaError says what is wrong with it. Defaults are validated for a schema
    being registered, not for one stored (as Confluent: an older registry let it in)."""
    refs = tuple(reference for reference, _ in references)
    if schema_type == "PROTOBUF":
        imports: dict[str, protobuf_schemas.Dependency] = {}
        for reference, version in references:
            _protobuf_import(reference, version, imports, resolve, depth=0)
        proto = protobuf_schemas.parse(text, imports)
        # Stored and answered as its canonical .proto text, whichever form it came in.
        return ParsedSchema(schema_type, proto.text, proto.text, refs, proto)
    try:  # Avro and JSON Schema: JSON documents
        document = json.loads(text)
    except ValueError as e:
        raise InvalidSchemaError(f"not JSON: {e}") from None
    if schema_type == "AVRO":
        named: dict[str, Any] = {}
        for _, version in references:
            _avro_named(version, named, resolve, depth=0)
        parsed = avro_compatibility.parse(document, named,
                                          validate_defaults=validate_defaults)
        if normalize:
            text = json.dumps(document, separators=(",", ":"), sort_keys=True)
    elif schema_type == "JSON":
        if not isinstance(document, dict | bool):
            raise InvalidSchemaError("a JSON Schema is an object or a boolean")
        try:
            jsonschema.validators.validator_for(document).check_schema(document)
        except jsonschema.exceptions.SchemaError as e:
            raise InvalidSchemaError(e.message) from None
        parsed = document
        if normalize:
            text = json.dumps(document, separators=(",", ":"), sort_keys=True)
    else:
        raise InvalidSchemaError(f"unknown schema type {schema_type!r}")
    canonical = json.dumps(document, separators=(",", ":"))
    return ParsedSchema(schema_type, text, canonical, refs, parsed)


def _avro_named(version: SchemaVersion, named: dict[str, Any], resolve: Resolver | None,
                depth: int) -> None:
    """Adds the named types of a referenced Avro schema (and of its own references)."""
    if depth > 32:
        raise InvalidSchemaError("references nested too deep (a cycle?)")
    if version.schema_type != "AVRO":
        raise InvalidSchemaError(f"an Avro schema cannot refer to a {version.schema_type} "
                                 "schema")
    if version.references and resolve is None:
        raise InvalidSchemaError("nested references cannot be resolved here")
    for reference in version.references:
        assert resolve is not None
        _avro_named(resolve(reference), named, resolve, depth + 1)
    avro_compatibility.parse(json.loads(version.schema), named, validate_defaults=False)


def _protobuf_import(reference: Reference, version: SchemaVersion,
                     imports: dict[str, protobuf_schemas.Dependency], resolve: Resolver | None,
                     depth: int) -> None:
    """Adds the file a Protobuf schema imports by the reference's name (after the files it
    imports itself)."""
    if depth > 32:
        raise InvalidSchemaError("references nested too deep (a cycle?)")
    if version.schema_type != "PROTOBUF":
        raise InvalidSchemaError(f"a Protobuf schema cannot import a {version.schema_type} "
                                 "schema")
    if reference.name in imports:
        return
    if version.references and resolve is None:
        raise InvalidSchemaError("nested references cannot be resolved here")
    for nested in version.references:
        assert resolve is not None
        _protobuf_import(nested, resolve(nested), imports, resolve, depth + 1)
    imported = protobuf_schemas.parse(version.schema, imports)
    imports[reference.name] = protobuf_schemas.dependency(reference.name, imported, reference)


def incompatibilities(level: str, new: ParsedSchema, existing: list[ParsedSchema]
                      ) -> list[str]:
    """Why `new` may not follow `existing` (oldest first) under a compatibility level;
    empty when it may."""
    if level == "NONE" or not existing:
        return []
    kinds = {s.schema_type for s in existing}
    if kinds != {new.schema_type}:
        return [f"{{errorType:'TYPE_MISMATCH', description:'The new schema is "
                f"{new.schema_type}, earlier ones are {', '.join(sorted(kinds))}'}}"]
    if new.schema_type == "AVRO":
        return avro_compatibility.check_compatibility(level, new.parsed,
                                                      [s.parsed for s in existing])
    if new.schema_type == "PROTOBUF":
        return protobuf_compatibility.check_compatibility(level, new.parsed,
                                                          [s.parsed for s in existing])
    # JSON Schema: Confluent's schema diff. Documents of referenced subjects are not
    # passed, so a $ref to one is compared by its text.
    return json_schema_compatibility.check_compatibility(level, new.parsed,
                                                         [s.parsed for s in existing])
