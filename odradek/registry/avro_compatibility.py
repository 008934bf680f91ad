"""Avro schemas as Confluent's registry judges them: parsing and the compatibility rules.

Parsing is fastavro's, plus the checks Avro Java's Schema.Parser makes and fastavro does not
(duplicate fields, unions, names, field defaults): the registry must refuse what Confluent
refuses. Compatibility follows Avro's "Schema Resolution" as Apache Avro Java's
SchemaCompatibility.checkReaderWriterCompatibility implements it (Confluent's AvroSchema calls
it), and its messages have the shape of Confluent's verbose answers (its Difference class).
Pure logic, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fastavro.schema import (
    SchemaParseException,
    UnknownType,
    parse_schema,
    to_parsing_canonical_form,
)

from odradek.registry.compatibility import first_incompatibility

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAMED = frozenset({"record", "error", "enum", "fixed"})
_COMPLEX = _NAMED | {"array", "map"}

# What each reader type can also read (the spec's promotions).
_PROMOTIONS = {
    "long": {"int"},
    "float": {"int", "long"},
    "double": {"int", "long", "float"},
    "bytes": {"string"},
    "string": {"bytes"},
}


_ORDERS = frozenset({"ASCENDING", "DESCENDING", "IGNORE"})
_ABSENT = object()  # a field without a default (JSON null is a default: None)


class InvalidSchemaError(ValueError):
    """The schema is not valid Avro; the message says why."""


@dataclass(frozen=True, eq=False)
class AvroSchema:
    """A parsed, valid Avro schema."""

    schema: Any  # fastavro's parsed form: full names; named types used again are names
    named: Mapping[str, Any]  # full name -> definition, for this schema's and referenced types
    canonical: str  # Avro's Parsing Canonical Form


class IncompatibilityType(StrEnum):
    """Avro Java's SchemaIncompatibilityType."""

    NAME_MISMATCH = "NAME_MISMATCH"
    FIXED_SIZE_MISMATCH = "FIXED_SIZE_MISMATCH"
    MISSING_ENUM_SYMBOLS = "MISSING_ENUM_SYMBOLS"
    READER_FIELD_MISSING_DEFAULT_VALUE = "READER_FIELD_MISSING_DEFAULT_VALUE"
    TYPE_MISMATCH = "TYPE_MISMATCH"
    MISSING_UNION_BRANCH = "MISSING_UNION_BRANCH"


# Confluent's Difference descriptions; {reader} and {writer} are "new"/"old" or the other way.
_DESCRIPTIONS = {
    IncompatibilityType.FIXED_SIZE_MISMATCH: "The size of FIXED type field at path '{path}' in "
    "the {reader} schema does not match with the {writer} schema",
    IncompatibilityType.TYPE_MISMATCH: "The type (path '{path}') of a field in the {reader} "
    "schema does not match with the {writer} schema",
    IncompatibilityType.NAME_MISMATCH: "The name of the schema has changed (path '{path}')",
    IncompatibilityType.MISSING_ENUM_SYMBOLS: "The {reader} schema is missing enum symbols "
    "'{info}' at path '{path}' in the {writer} schema",
    IncompatibilityType.MISSING_UNION_BRANCH: "The {reader} schema is missing a type inside a "
    "union field at path '{path}' in the {writer} schema",
    IncompatibilityType.READER_FIELD_MISSING_DEFAULT_VALUE: "The field '{info}' at path "
    "'{path}' in the {reader} schema has no default value and is missing in the {writer} schema",
}


@dataclass(frozen=True)
class Incompatibility:
    """Why a reader schema cannot read what a writer schema wrote, at one place."""

    type: IncompatibilityType
    location: str  # JSON pointer into the reader schema, e.g. "/fields/1/type"
    message: str  # Avro Java's message: Confluent's additionalInfo

    def describe(self, reader: str = "new", writer: str = "old") -> str:
        """Confluent's message, the reader and writer schemas called `reader` and `writer`."""
        description = _DESCRIPTIONS[self.type].format(
            path=self.location, info=self.message, reader=reader, writer=writer)
        return (f"{{errorType:'{self.type}', description:'{description}', "
                f"additionalInfo:'{self.message}'}}")


# --- parsing ---------------------------------------------------------------------------------


def parse_text(text: str, named: dict[str, Any] | None = None, *,
               validate_defaults: bool = True) -> AvroSchema:
    """Parses a schema's JSON text; see parse()."""
    try:
        document = json.loads(text, parse_constant=_no_constant)
    except ValueError as e:
        raise InvalidSchemaError(f"Invalid JSON: {e}") from None
    return parse(document, named, validate_defaults=validate_defaults)


def parse(document: Any, named: dict[str, Any] | None = None, *,
          validate_defaults: bool = True) -> AvroSchema:
    """Parses a schema given as decoded JSON, raising InvalidSchemaError if it is not valid.

    `named` holds named types (full name -> parsed definition) of other schemas that this one
    may refer to, as fastavro's named_schemas; like it, it is updated in place with the types
    this schema defines, but only when the schema is valid. Confluent validates defaults of
    schemas being registered, not of those already stored: hence `validate_defaults`.
    """
    given = named if named is not None else {}
    names = dict(given)
    prepared = _prepare(document)
    try:
        parsed = parse_schema(prepared, names, _write_hint=False,
                              _ignore_default_error=True)  # ours are Java's rules
    except UnknownType as e:
        raise InvalidSchemaError(f"Undefined name: {e.name}") from None
    except SchemaParseException as e:
        raise InvalidSchemaError(str(e)) from None
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise InvalidSchemaError(f"Invalid schema: {e!r}") from None
    for name, definition in given.items():
        if names[name] is not definition:
            # Referenced schemas parsed twice are fine; Java refuses other redefinitions.
            if names[name] != definition:
                raise InvalidSchemaError(f"Can't redefine: {name}")
            names[name] = definition
    _Validator(names, validate_defaults).check(parsed)
    given.update(names)
    return AvroSchema(parsed, names, _canonical(parsed, names))


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # Jackson refuses NaN and Infinity too


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _prepare(node: Any) -> Any:
    """Java's structural checks fastavro skips or answers with a bare KeyError, and Java's
    {"type": "Name"} way of referring to a named type, which fastavro lacks."""
    if isinstance(node, list):
        return [_prepare(branch) for branch in node]
    if isinstance(node, str):
        return node
    if not isinstance(node, dict):
        raise InvalidSchemaError(f"Schema not yet supported: {_dump(node)}")
    kind = node.get("type")
    if not isinstance(kind, str):
        raise InvalidSchemaError(f"No type: {_dump(node)}")
    if kind not in PRIMITIVES and kind not in _COMPLEX:
        return kind  # a reference; Java ignores the object's other attributes
    if kind in _NAMED:
        if not isinstance(node.get("name"), str):
            raise InvalidSchemaError(f"No name in schema: {_dump(node)}")
        _check_aliases(node)
    if kind in ("record", "error"):
        fields = node.get("fields")
        if not isinstance(fields, list):
            raise InvalidSchemaError(f"Record has no fields: {_dump(node)}")
        for field in fields:
            if not isinstance(field, dict) or not isinstance(field.get("name"), str):
                raise InvalidSchemaError(f"No field name: {_dump(field)}")
            if "type" not in field:
                raise InvalidSchemaError(f"No field type: {_dump(field)}")
            order = field.get("order", "ascending")
            if not isinstance(order, str) or order.upper() not in _ORDERS:
                raise InvalidSchemaError(f"Invalid field order: {_dump(field)}")
            _check_aliases(field)
        return {**node, "fields": [{**f, "type": _prepare(f["type"])} for f in fields]}
    if kind == "enum" and not isinstance(node.get("symbols"), list):
        raise InvalidSchemaError(f"Enum has no symbols: {_dump(node)}")
    if kind == "fixed":
        size = node.get("size")
        if not _is_int(size) or not 0 <= size < 2**31:
            raise InvalidSchemaError(f"Invalid or no size: {_dump(node)}")
    if kind == "array":
        if "items" not in node:
            raise InvalidSchemaError(f"Array has no items type: {_dump(node)}")
        return {**node, "items": _prepare(node["items"])}
    if kind == "map":
        if "values" not in node:
            raise InvalidSchemaError(f"Map has no values type: {_dump(node)}")
        return {**node, "values": _prepare(node["values"])}
    return node


def _check_aliases(node: dict[str, Any]) -> None:
    aliases = node.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise InvalidSchemaError(f"aliases are not an array of strings: {_dump(node)}")


def _canonical(parsed: Any, named: Mapping[str, Any]) -> str:
    if isinstance(parsed, str):
        return f'"{parsed}"'
    if isinstance(parsed, list):
        return "[" + ",".join(_canonical(branch, named) for branch in parsed) + "]"
    # fastavro re-parses what it is given unless marked as parsed; re-parsed, names from
    # referenced schemas would be undefined.
    return to_parsing_canonical_form({**parsed, "__fastavro_parsed": True,
                                      "__named_schemas": dict(named)})


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _valid_name(name: str) -> bool:
    # Java's Schema.validateName: a letter or _, then letters, digits or _ (Unicode ones too)
    return (bool(name) and (name[0].isalpha() or name[0] == "_")
            and all(c.isalpha() or c.isdecimal() or c == "_" for c in name[1:]))


def _resolve(node: Any, named: Mapping[str, Any]) -> Any:
    """A named type's definition for its name; the one shared definition for a named type."""
    if isinstance(node, str):
        return node if node in PRIMITIVES else named[node]
    if isinstance(node, dict) and node["type"] in _NAMED:
        return named.get(node["name"], node)
    return node


def _kind(node: Any) -> str:
    """Avro's type of a resolved node: a primitive's name, record, enum, ..., union."""
    if isinstance(node, list):
        return "union"
    if isinstance(node, str):
        return node
    return "record" if node["type"] == "error" else node["type"]


class _Validator:
    """Avro Java's checks on a parsed schema that fastavro does not make."""

    def __init__(self, named: Mapping[str, Any], validate_defaults: bool) -> None:
        self._named = named
        self._validate_defaults = validate_defaults

    def check(self, node: Any) -> None:
        if isinstance(node, str):
            return  # a primitive, or a reference to a type checked where it is defined
        if isinstance(node, list):
            self._union(node)
            return
        kind = _kind(node)
        if kind in _NAMED:
            short = node["name"].rpartition(".")[2]
            if not _valid_name(short):
                raise InvalidSchemaError(f"Illegal name: {node['name']}")
        if kind == "record":
            self._record(node)
        elif kind == "array":
            self.check(node["items"])
        elif kind == "map":
            self.check(node["values"])

    def _union(self, branches: list[Any]) -> None:
        seen: set[str] = set()
        for branch in branches:
            if isinstance(branch, list):
                raise InvalidSchemaError(f"Nested union: {_dump(branches)}")
            resolved = _resolve(branch, self._named)
            # Java tells branches apart by full name for named types, else by type.
            key = resolved["name"] if _kind(resolved) in _NAMED else _kind(resolved)
            if key in seen:
                raise InvalidSchemaError(f"Duplicate in union:{key}")
            seen.add(key)
            self.check(branch)

    def _record(self, record: dict[str, Any]) -> None:
        seen: set[str] = set()
        for field in record["fields"]:
            name = field["name"]
            if not _valid_name(name):
                raise InvalidSchemaError(f"Illegal name: {name} (a field of {record['name']})")
            if name in seen:
                raise InvalidSchemaError(f"Duplicate field {name} in record {record['name']}")
            seen.add(name)
            self.check(field["type"])
            if self._validate_defaults and "default" in field:
                value = self._field_default(field)
                if not self._valid_default(field["type"], value, frozenset()):
                    raise InvalidSchemaError(
                        f"Invalid default for field {name}: {_dump(field['default'])} "
                        f"not a {_dump(field['type'])}")

    def _field_default(self, field: dict[str, Any]) -> Any:
        value = field.get("default", _ABSENT)
        if isinstance(value, str) and _kind(_resolve(field["type"], self._named)) in (
                "float", "double"):
            try:  # Java's parser reads "NaN", "1.5" etc. as a float field's default
                return float(value)
            except ValueError:
                return value
        return value

    def _valid_default(self, schema: Any, value: Any, seen: frozenset[tuple[int, int]]) -> bool:
        """Avro Java's Schema.isValidDefault: a union's default is its first branch's."""
        if value is _ABSENT:
            return False
        node = _resolve(schema, self._named)
        kind = _kind(node)
        if kind in ("string", "bytes", "enum", "fixed"):
            return isinstance(value, str)
        if kind == "int":
            return _is_int(value) and -(2**31) <= value < 2**31
        if kind == "long":
            return _is_int(value) and -(2**63) <= value < 2**63
        if kind in ("float", "double"):
            return isinstance(value, int | float) and not isinstance(value, bool)
        if kind == "boolean":
            return isinstance(value, bool)
        if kind == "null":
            return value is None
        if kind == "array":
            return isinstance(value, list) and all(
                self._valid_default(node["items"], v, seen) for v in value)
        if kind == "map":
            return isinstance(value, dict) and all(
                self._valid_default(node["values"], v, seen) for v in value.values())
        if kind == "union":
            return bool(node) and self._valid_default(node[0], value, seen)
        # A record: its fields from the object, or their own defaults. A record whose field
        # defaults come back to it has no finite default (Java overflows its stack).
        key = (id(node), id(value))
        if not isinstance(value, dict) or key in seen:
            return False
        return all(
            self._valid_default(f["type"], value[f["name"]] if f["name"] in value
                                else self._field_default(f), seen | {key})
            for f in node["fields"])


# --- compatibility ---------------------------------------------------------------------------


def reader_writer_incompatibilities(reader: AvroSchema, writer: AvroSchema
                                    ) -> list[Incompatibility]:
    """Why `reader` cannot read data written with `writer`: empty when it can.

    Avro Java's checkReaderWriterCompatibility, rule for rule. Raises ValueError where Java
    throws: a reader field that matches two writer fields (by its name and its aliases).
    """
    return _Checker(reader.named, writer.named).check(reader.schema, writer.schema, ())


def _location(path: tuple[str, ...]) -> str:
    return "/" + "/".join(t.replace("~", "~0").replace("/", "~1") for t in path)


class _Checker:
    def __init__(self, reader_named: Mapping[str, Any], writer_named: Mapping[str, Any]) -> None:
        self._reader_named = reader_named
        self._writer_named = writer_named
        # (reader, writer) definitions -> result, or None while being checked: recursive
        # types come back to a pair being checked, which is compatible unless proven not.
        self._memo: dict[tuple[int, int], list[Incompatibility] | None] = {}

    def check(self, reader: Any, writer: Any, path: tuple[str, ...]) -> list[Incompatibility]:
        r = _resolve(reader, self._reader_named)
        w = _resolve(writer, self._writer_named)
        if isinstance(r, str) or isinstance(w, str):
            return self._calculate(r, w, path)  # a primitive: nothing recursive below it
        key = (id(r), id(w))  # Java's memo compares schemas by identity too
        if key in self._memo:
            return self._memo[key] or []
        self._memo[key] = None
        result = self._memo[key] = self._calculate(r, w, path)
        return result

    def _calculate(self, r: Any, w: Any, path: tuple[str, ...]) -> list[Incompatibility]:
        rk, wk = _kind(r), _kind(w)
        if rk == wk:
            if rk in PRIMITIVES:
                return []
            if rk == "array":
                return self.check(r["items"], w["items"], (*path, "items"))
            if rk == "map":
                return self.check(r["values"], w["values"], (*path, "values"))
            if rk == "fixed":
                return self._names(r, w, path) + self._size(r, w, path)
            if rk == "enum":
                return self._names(r, w, path) + self._symbols(r, w, path)
            if rk == "record":
                return self._names(r, w, path) + self._fields(r, w, path)
            # Two unions: the reader union must read every branch the writer may have written.
            found = []
            for i, branch in enumerate(w):
                if self.check(r, branch, (*path, str(i))):
                    found.append(self._missing_branch(branch, (*path, str(i))))
            return found
        if wk == "union":
            # A writer union and a reader that is not: every branch must be readable.
            return [found for branch in w for found in self.check(r, branch, path)]
        if rk == "union":
            # A reader union and a writer that is not: some branch must read it.
            if any(not self.check(branch, w, path) for branch in r):
                return []
            return [self._missing_branch(w, path)]
        if wk in _PROMOTIONS.get(rk, ()):
            return []
        return [Incompatibility(IncompatibilityType.TYPE_MISMATCH, _location(path),
                                f"reader type: {rk.upper()} not compatible with writer type: "
                                f"{wk.upper()}")]

    def _missing_branch(self, writer_branch: Any, path: tuple[str, ...]) -> Incompatibility:
        kind = _kind(_resolve(writer_branch, self._writer_named))
        return Incompatibility(IncompatibilityType.MISSING_UNION_BRANCH, _location(path),
                               f"reader union lacking writer type: {kind.upper()}")

    @staticmethod
    def _names(r: dict[str, Any], w: dict[str, Any], path: tuple[str, ...]
               ) -> list[Incompatibility]:
        # Java compares unqualified names (the spec's rule), or the writer's full name with
        # the reader's aliases (qualified by the reader's namespace).
        namespace = r["name"].rpartition(".")[0]
        aliases = {a if "." in a or not namespace else f"{namespace}.{a}"
                   for a in r.get("aliases", ())}
        if r["name"].rpartition(".")[2] == w["name"].rpartition(".")[2] or w["name"] in aliases:
            return []
        return [Incompatibility(IncompatibilityType.NAME_MISMATCH, _location((*path, "name")),
                                f"expected: {w['name']}")]

    @staticmethod
    def _size(r: dict[str, Any], w: dict[str, Any], path: tuple[str, ...]
              ) -> list[Incompatibility]:
        if r["size"] == w["size"]:
            return []
        return [Incompatibility(IncompatibilityType.FIXED_SIZE_MISMATCH,
                                _location((*path, "size")),
                                f"expected: {w['size']}, found: {r['size']}")]

    @staticmethod
    def _symbols(r: dict[str, Any], w: dict[str, Any], path: tuple[str, ...]
                 ) -> list[Incompatibility]:
        missing = sorted(set(w["symbols"]) - set(r["symbols"]))
        # Symbols the reader lacks read as its default symbol, when it has one.
        if not missing or r.get("default") in r["symbols"]:
            return []
        return [Incompatibility(IncompatibilityType.MISSING_ENUM_SYMBOLS,
                                _location((*path, "symbols")), "[" + ", ".join(missing) + "]")]

    def _fields(self, r: dict[str, Any], w: dict[str, Any], path: tuple[str, ...]
                ) -> list[Incompatibility]:
        writer_fields = {f["name"]: f for f in w["fields"]}
        found: list[Incompatibility] = []
        for pos, field in enumerate(r["fields"]):
            here = (*path, "fields", str(pos))
            names = [field["name"], *dict.fromkeys(field.get("aliases", ()))]
            matches = [writer_fields[n] for n in names if n in writer_fields]
            if len(matches) > 1:
                raise ValueError(
                    f"Reader record field {field['name']} matches multiple fields in writer "
                    f"record schema {w['name']}")
            if matches:
                found += self.check(field["type"], matches[0]["type"], (*here, "type"))
            elif "default" in field:
                continue  # the reader fills it with its default
            elif self._is_enum_with_default(field["type"]):
                # Java's quirk: it checks the enum against the writer *record* (so reports a
                # TYPE_MISMATCH), rather than a missing default.
                found += self.check(field["type"], w, (*here, "type"))
            else:
                found.append(Incompatibility(
                    IncompatibilityType.READER_FIELD_MISSING_DEFAULT_VALUE, _location(here),
                    field["name"]))
        return found

    def _is_enum_with_default(self, schema: Any) -> bool:
        node = _resolve(schema, self._reader_named)
        return _kind(node) == "enum" and node.get("default") is not None


def find_incompatibility(level: str, new: AvroSchema, existing: Sequence[AvroSchema]
                         ) -> tuple[int, list[str]] | None:
    """The first of `existing` (oldest first; checked newest first, as Confluent does) that
    `new` may not follow under a compatibility level, as its index and Confluent's messages;
    None when `new` may follow them all. ValueError for an unknown level.

    The messages are Confluent's Difference strings only: the caller adds {oldSchemaVersion},
    {oldSchema} and {validateFields, compatibility} as Confluent's REST answers do.
    """
    return first_incompatibility(
        level, len(existing),
        lambda i: _messages(existing[i], new, "old", "new"),  # the old schema reads the new
        lambda i: _messages(new, existing[i], "new", "old"))  # the new schema reads the old


def check_compatibility(level: str, new: AvroSchema, existing: Sequence[AvroSchema]
                        ) -> list[str]:
    """Confluent's messages saying why `new` may not follow `existing` (oldest first) under a
    compatibility level (NONE, BACKWARD, FORWARD, FULL, each also _TRANSITIVE); empty when it
    may. ValueError for an unknown level."""
    found = find_incompatibility(level, new, existing)
    return found[1] if found else []


def _messages(reader: AvroSchema, writer: AvroSchema, reader_label: str, writer_label: str
              ) -> list[str]:
    try:
        return [i.describe(reader_label, writer_label)
                for i in reader_writer_incompatibilities(reader, writer)]
    except ValueError as e:  # Confluent's AvroSchema.isBackwardCompatible answers so
        return [f"Unexpected exception during compatibility check: {e}"]
