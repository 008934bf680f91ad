"""The schema types the registry holds, parsed and compared: Avro (fastavro parses it;
the compatibility rules fastavro lacks are avro_compatibility.py's) and JSON Schema (the
jsonschema library checks it against its draft's meta-schema).

A ParsedSchema's `canonical` form decides identity (registering a schema already in a
subject answers its id, and the same schema in two subjects shares one id): the schema's
JSON without insignificant whitespace, so schemas that differ in a default or a doc are
different schemas, as in Confluent's registry.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators

from odradek.registry import avro_compatibility
from odradek.registry.avro_compatibility import InvalidSchemaError
from odradek.registry.state import Reference, SchemaVersion

__all__ = ["SCHEMA_TYPES", "InvalidSchemaError", "ParsedSchema", "incompatibilities",
           "parse_schema"]

SCHEMA_TYPES = ("AVRO", "JSON")  # Protobuf: not yet


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
    try:
        document = json.loads(text)
    except ValueError as e:
        raise InvalidSchemaError(f"not JSON: {e}") from None
    refs = tuple(reference for reference, _ in references)
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
    # Confluent's JSON Schema rules (JsonSchemaDiff) are not implemented yet: say so
    # rather than accept a change that may break consumers.
    return [f"JSON Schema compatibility ({level}) is not checked by this registry yet: "
            "set the subject's compatibility to NONE to register new versions"]
