"""JSON Schema compatibility as Confluent's registry (7.x) judges it: the schema diff of
its json-schema-provider (io.confluent.kafka.schemaregistry.json.diff: SchemaDiff and the
per-kind *SchemaDiff classes), rewritten in Python.

Confluent loads a JSON Schema with the everit library (drafts 4, 6, 7; 2019-09 and 2020-12
through json-sKema, translated to everit's classes) and diffs the two trees: every change
found is a `Difference` (a type such as PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL and a JSON path
such as `#/properties/bar`), and a version may follow another when every difference is in
COMPATIBLE_CHANGES. BACKWARD diffs original=old against update=new, FORWARD the other way
round. So this module does the same in two steps: `_Loader` turns a document (json.loads
output) into a small tree mirroring everit's schema classes (one class per kind; several
kinds in one object become a synthetic allOf, as everit does), and the `_compare_*`
functions diff two trees, one per kind of schema.

`$ref`s inside the document (`#`, `#/definitions/...`, `#/$defs/...`) are followed, with
Confluent 7.x's cycle rule: a referred schema already being compared higher up is not
compared again. References to other documents (schema references registered under other
subjects) are followed when their documents are passed in `external` (by the name the
`$ref` uses); otherwise an unresolved `$ref` is compared by its text only (the same text
is the same schema; a different one is TYPE_CHANGED).

Deviations from Confluent, on purpose: EXCLUSIVE_MAXIMUM_DECREASED compares the two
exclusive limits (7.x compares against the new `maximum` and fails without one), and
multipleOf is compared as decimals (as Confluent's later fix does, not with intValue()).
Property names are visited in Java's HashMap order so messages come in Confluent's order.
Pure logic, no I/O.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from odradek.registry.compatibility import first_incompatibility

# SchemaDiff.COMPATIBLE_CHANGES of Confluent 7.x: every other difference is incompatible.
COMPATIBLE_CHANGES = frozenset({
    "ID_CHANGED", "DESCRIPTION_CHANGED", "TITLE_CHANGED", "DEFAULT_CHANGED",
    "SCHEMA_REMOVED", "TYPE_EXTENDED",
    "MAX_LENGTH_INCREASED", "MAX_LENGTH_REMOVED", "MIN_LENGTH_DECREASED",
    "MIN_LENGTH_REMOVED", "PATTERN_REMOVED",
    "MAXIMUM_INCREASED", "MAXIMUM_REMOVED", "MINIMUM_DECREASED", "MINIMUM_REMOVED",
    "EXCLUSIVE_MAXIMUM_INCREASED", "EXCLUSIVE_MAXIMUM_REMOVED",
    "EXCLUSIVE_MINIMUM_DECREASED", "EXCLUSIVE_MINIMUM_REMOVED",
    "MULTIPLE_OF_REDUCED", "MULTIPLE_OF_REMOVED",
    "REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED", "REQUIRED_ATTRIBUTE_REMOVED",
    "DEPENDENCY_ARRAY_NARROWED", "DEPENDENCY_ARRAY_REMOVED", "DEPENDENCY_SCHEMA_REMOVED",
    "MAX_PROPERTIES_INCREASED", "MAX_PROPERTIES_REMOVED", "MIN_PROPERTIES_DECREASED",
    "MIN_PROPERTIES_REMOVED", "ADDITIONAL_PROPERTIES_ADDED", "ADDITIONAL_PROPERTIES_EXTENDED",
    "PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL",
    "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL",
    "OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL",
    "PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL",
    "PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL",
    "PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
    "PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
    "MAX_ITEMS_INCREASED", "MAX_ITEMS_REMOVED", "MIN_ITEMS_DECREASED", "MIN_ITEMS_REMOVED",
    "UNIQUE_ITEMS_REMOVED", "ADDITIONAL_ITEMS_ADDED", "ADDITIONAL_ITEMS_EXTENDED",
    "ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL", "ITEM_ADDED_TO_CLOSED_CONTENT_MODEL",
    "ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL", "ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL",
    "ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
    "ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
    "ENUM_ARRAY_EXTENDED",
    "COMBINED_TYPE_EXTENDED", "PRODUCT_TYPE_NARROWED", "SUM_TYPE_EXTENDED", "NOT_TYPE_NARROWED",
})


# ---- messages (Difference.toString) ------------------------------------------------------

def _types(*names: str) -> frozenset[str]:
    return frozenset(names)


# Difference.error(): which sentence describes a type; {a} and {b} are the two labels
# ("new"/"old") Confluent's SchemaValidatorBuilder substitutes for its %s.
_SENTENCES: tuple[tuple[frozenset[str], str], ...] = (
    (_types("MAXIMUM_ADDED", "MINIMUM_ADDED", "EXCLUSIVE_MAXIMUM_ADDED",
            "EXCLUSIVE_MINIMUM_ADDED", "MULTIPLE_OF_ADDED", "MAX_LENGTH_ADDED",
            "MIN_LENGTH_ADDED", "PATTERN_ADDED", "REQUIRED_ATTRIBUTE_ADDED",
            "MAX_PROPERTIES_ADDED", "MIN_PROPERTIES_ADDED", "DEPENDENCY_ARRAY_ADDED",
            "DEPENDENCY_SCHEMA_ADDED", "MAX_ITEMS_ADDED", "MIN_ITEMS_ADDED", "UNIQUE_ITEMS_ADDED",
            "ADDITIONAL_ITEMS_REMOVED", "ADDITIONAL_PROPERTIES_REMOVED"),
     "The keyword at path '{path}' in the {a} schema is not present in the {b} schema"),
    (_types("MIN_LENGTH_INCREASED", "MINIMUM_INCREASED", "EXCLUSIVE_MINIMUM_INCREASED",
            "MIN_PROPERTIES_INCREASED", "MULTIPLE_OF_EXPANDED", "MIN_ITEMS_INCREASED"),
     "The value at path '{path}' in the {a} schema is more than its value in the {b} schema"),
    (_types("MAX_LENGTH_DECREASED", "MAXIMUM_DECREASED", "MAX_ITEMS_DECREASED",
            "EXCLUSIVE_MAXIMUM_DECREASED", "MAX_PROPERTIES_DECREASED"),
     "The value at path '{path}' in the {a} schema is less than its value in the {b} schema"),
    (_types("PATTERN_CHANGED", "MULTIPLE_OF_CHANGED", "DEPENDENCY_ARRAY_CHANGED"),
     "The value at path '{path}' is different between the {a} and {b} schema"),
    (_types("ADDITIONAL_ITEMS_NARROWED", "ENUM_ARRAY_NARROWED", "SUM_TYPE_NARROWED",
            "ADDITIONAL_PROPERTIES_NARROWED"),
     "An array or combined type at path '{path}' has fewer elements in the {a} schema than "
     "the {b} schema"),
    (_types("DEPENDENCY_ARRAY_EXTENDED", "PRODUCT_TYPE_EXTENDED", "SUM_TYPE_EXTENDED",
            "NOT_TYPE_EXTENDED"),
     "An array or combined type at path '{path}' has more elements in the {a} schema than "
     "the {b} schema"),
    (_types("TYPE_CHANGED", "TYPE_NARROWED", "COMBINED_TYPE_CHANGED",
            "COMBINED_TYPE_SUBSCHEMAS_CHANGED", "ENUM_ARRAY_CHANGED"),
     "A type at path '{path}' is different between the {a} schema and the {b} schema"),
    (_types("PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", "ITEM_ADDED_TO_OPEN_CONTENT_MODEL"),
     "The {a} schema has an open content model and has a property or item at path '{path}' "
     "which is missing in the {b} schema"),
    (_types("REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"),
     "The {a} schema has an unopen content model and has a required property at path "
     "'{path}' which is missing in the {b} schema"),
    (_types("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL"),
     "The {a} has a closed content model and is missing a property or item present at path "
     "'{path}' in the {b} schema"),
    (_types("PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
            "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"),
     "A property or item is missing in the {a} schema but present at path '{path}' in the "
     "{b} schema and is not covered by its partially open content model"),
    (_types("PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
            "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"),
     "The {a} schema has a property or item at path '{path}' which is missing in the {b} "
     "schema and is not covered by its partially open content model"),
)


@dataclass(frozen=True, slots=True)
class Difference:
    type: str
    json_path: str

    def describe(self, a: str, b: str) -> str:
        """Confluent's Difference.toString() with its labels filled in (its closing quote
        really is a single one)."""
        sentence = next((s for types, s in _SENTENCES if self.type in types), "")
        description = sentence.format(path=self.json_path, a=a, b=b)
        return f'{{errorType:"{self.type}", description:"{description}\'}}'


# ---- the schema tree (everit's classes) ---------------------------------------------------

_ABSENT: Any = object()


@dataclass(eq=False)
class _Schema:
    id: str | None = None
    title: str | None = None
    description: str | None = None
    default: Any = _ABSENT
    connect_type: Any = None  # Kafka Connect's "connect.type": bytes-vs-bytes is equal
    key: str = ""  # the subschema's identity when a combined schema collapses duplicates


@dataclass(eq=False)
class _EmptySchema(_Schema):
    pass


@dataclass(eq=False)
class _TrueSchema(_EmptySchema):  # everit: TrueSchema extends EmptySchema
    pass


@dataclass(eq=False)
class _FalseSchema(_Schema):
    pass


@dataclass(eq=False)
class _BooleanSchema(_Schema):
    pass


@dataclass(eq=False)
class _NullSchema(_Schema):
    pass


@dataclass(eq=False)
class _StringSchema(_Schema):
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None


@dataclass(eq=False)
class _NumberSchema(_Schema):
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: float | None = None  # the limit (draft 6+), not draft 4's flag
    exclusive_maximum: float | None = None
    multiple_of: Any = None
    integer: bool = False


@dataclass(eq=False)
class _ObjectSchema(_Schema):
    properties: dict[str, _Schema] = field(default_factory=dict)
    required: list[str] = field(default_factory=list)
    pattern_properties: list[tuple[str, _Schema]] = field(default_factory=list)
    additional: bool = True
    additional_schema: _Schema | None = None
    property_dependencies: dict[str, set[str]] = field(default_factory=dict)
    schema_dependencies: dict[str, _Schema] = field(default_factory=dict)
    min_properties: int | None = None
    max_properties: int | None = None


@dataclass(eq=False)
class _ArraySchema(_Schema):
    all_items: _Schema | None = None
    item_schemas: list[_Schema] = field(default_factory=list)
    additional: bool = True
    additional_schema: _Schema | None = None
    min_items: int | None = None
    max_items: int | None = None
    unique_items: bool = False


@dataclass(eq=False)
class _EnumSchema(_Schema):
    values: list[Any] = field(default_factory=list)


@dataclass(eq=False)
class _ConstSchema(_Schema):
    value: Any = None


@dataclass(eq=False)
class _CombinedSchema(_Schema):
    criterion: str = "allOf"  # allOf, anyOf, oneOf: everit's ValidationCriterion names
    subschemas: list[_Schema] = field(default_factory=list)


@dataclass(eq=False)
class _NotSchema(_Schema):
    must_not_match: _Schema = field(default_factory=_EmptySchema)


@dataclass(eq=False)
class _ConditionalSchema(_Schema):  # if/then/else: Confluent compares only id, title...
    pass


@dataclass(eq=False)
class _ReferenceSchema(_Schema):
    ref: str = ""
    resolve: Callable[[], _Schema | None] = lambda: None


@dataclass(eq=False)
class _UnresolvedReference(_Schema):
    ref: str = ""


# ---- loading a document ------------------------------------------------------------------

_STRING_KEYWORDS = frozenset({"minLength", "maxLength", "pattern", "format"})
_NUMBER_KEYWORDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                              "multipleOf"})
_ARRAY_KEYWORDS = {4: frozenset({"items", "additionalItems", "minItems", "maxItems",
                                 "uniqueItems"})}
_ARRAY_KEYWORDS[6] = _ARRAY_KEYWORDS[7] = _ARRAY_KEYWORDS[4] | {"contains"}
_ARRAY_KEYWORDS[2019] = _ARRAY_KEYWORDS[2020] = _ARRAY_KEYWORDS[7] | {
    "prefixItems", "minContains", "maxContains", "unevaluatedItems"}
_OBJECT_KEYWORDS = {4: frozenset({"properties", "required", "minProperties", "maxProperties",
                                  "dependencies", "patternProperties",
                                  "additionalProperties"})}
_OBJECT_KEYWORDS[6] = _OBJECT_KEYWORDS[7] = _OBJECT_KEYWORDS[4] | {"propertyNames"}
_OBJECT_KEYWORDS[2019] = _OBJECT_KEYWORDS[2020] = _OBJECT_KEYWORDS[7] | {
    "dependentRequired", "dependentSchemas", "unevaluatedProperties"}
# everit reads allOf/anyOf/oneOf from a Java HashSet: this is its iteration order.
_COMBINERS = ("allOf", "oneOf", "anyOf")
_DRAFTS = (("draft-04", 4), ("draft-06", 6), ("draft-07", 7), ("2019-09", 2019),
           ("2020-12", 2020))


def _draft(document: Any) -> int:
    """The draft a document declares in `$schema`; draft 7 without one, as Confluent."""
    declared = document.get("$schema") if isinstance(document, dict) else None
    if isinstance(declared, str):
        for marker, draft in _DRAFTS:
            if marker in declared:
                return draft
    return 7


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


class _Loader:
    """Turns one document into everit-like schema objects. Each JSON pointer is loaded
    once, so a `$ref` always leads to the same object (the cycle rule relies on identity)."""

    def __init__(self, document: Any, external: Mapping[str, Any],
                 loaders: dict[str, _Loader] | None = None) -> None:
        self.document = document
        self.draft = _draft(document)
        self.modern = self.draft >= 2019
        self.external = external
        self.loaders = loaders if loaders is not None else {}
        self.by_pointer: dict[str, _Schema | None] = {}

    def root(self) -> _Schema:
        root = self.pointer("")
        assert root is not None  # the empty pointer is the document itself
        return root

    def pointer(self, pointer: str) -> _Schema | None:
        """The schema at a JSON pointer (None when there is none), loaded on first use:
        $refs resolve lazily, so recursive documents load in finite time."""
        if pointer not in self.by_pointer:
            value: Any = self.document
            for token in pointer.split("/")[1:]:
                token = token.replace("~1", "/").replace("~0", "~")
                if isinstance(value, dict) and token in value:
                    value = value[token]
                elif isinstance(value, list) and token.isdigit() and int(token) < len(value):
                    value = value[int(token)]
                else:
                    self.by_pointer[pointer] = None
                    break
            else:
                self.by_pointer[pointer] = self.load(value)
        return self.by_pointer[pointer]

    def load(self, raw: Any) -> _Schema:
        if raw is True or raw is False:
            node: _Schema = _TrueSchema() if raw else _FalseSchema()
            node.key = _canonical(raw)
            return node
        if not isinstance(raw, dict):
            return _EmptySchema(key=_canonical(raw))
        if "$ref" in raw and isinstance(raw["$ref"], str):
            reference = self._reference(raw["$ref"])
            # Before 2019-09 a $ref's siblings are ignored (everit); later they apply too.
            rest = self._extract({k: v for k, v in raw.items() if k != "$ref"}) \
                if self.modern else []
            node = reference if not rest else _CombinedSchema(
                criterion="allOf", subschemas=[reference, *rest])
        else:
            parts = self._extract(raw)
            node = parts[0] if len(parts) == 1 else (
                _CombinedSchema(criterion="allOf", subschemas=parts) if parts
                else _EmptySchema())
        # 2019-09+ schemas go through json-sKema, whose translation drops $id.
        identifier = raw.get("id" if self.draft == 4 else "$id")
        node.id = None if self.modern else identifier
        node.title = raw.get("title")
        node.description = raw.get("description")
        node.default = raw.get("default", _ABSENT)
        node.connect_type = raw.get("connect.type")
        node.key = _canonical(raw)
        return node

    def _reference(self, ref: str) -> _Schema:
        uri, _, fragment = ref.partition("#")
        fragment = urllib.parse.unquote(fragment)
        if fragment and not fragment.startswith("/"):
            return _UnresolvedReference(ref=ref)  # an anchor: not followed
        if not uri:
            loader: _Loader | None = self
        elif uri in self.external:
            loader = self.loaders.get(uri)
            if loader is None:
                loader = self.loaders[uri] = _Loader(self.external[uri], self.external,
                                                     self.loaders)
        else:
            return _UnresolvedReference(ref=ref)
        assert loader is not None
        target = loader
        return _ReferenceSchema(ref=ref, resolve=lambda: target.pointer(fragment))

    def _extract(self, raw: dict[str, Any]) -> list[_Schema]:
        """everit's extractors, in its order: enum, combined, not, const, type, then the
        keywords no explicit type consumed, each kind sniffed from its keywords."""
        parts: list[_Schema] = []
        if "enum" in raw and isinstance(raw["enum"], list):
            parts.append(_EnumSchema(values=list(raw["enum"])))
        for criterion in _COMBINERS:
            if isinstance(raw.get(criterion), list):
                subschemas = [self.load(s) for s in raw[criterion]]
                parts.append(_CombinedSchema(criterion=criterion, subschemas=subschemas))
        if "not" in raw:
            parts.append(_NotSchema(must_not_match=self.load(raw["not"])))
        if "const" in raw and self.draft != 4:
            parts.append(_ConstSchema(value=raw["const"]))
        consumed: set[str] = set()
        declared = raw.get("type")
        if isinstance(declared, str):
            parts.append(self._typed(raw, declared, consumed))
        elif isinstance(declared, list):  # a list of types: an anyOf of one schema each
            members = []
            for name in declared:
                if isinstance(name, str):
                    member = self._typed(raw, name, consumed)
                    member.key = f"{_canonical(raw)}#{name}"
                    members.append(member)
            parts.append(_CombinedSchema(criterion="anyOf", subschemas=members))
        present = {k for k in raw if k not in consumed}
        if self.modern:  # json-sKema makes nothing of an empty properties object
            present -= {k for k in ("properties", "patternProperties") if raw.get(k) == {}}
        if present & _ARRAY_KEYWORDS[self.draft]:
            parts.append(self._array(raw))
        if present & _OBJECT_KEYWORDS[self.draft]:
            parts.append(self._object(raw))
        if present & _NUMBER_KEYWORDS:
            parts.append(self._number(raw, integer=False))
        if present & _STRING_KEYWORDS:
            parts.append(self._string(raw))
        if self.draft >= 7 and present & {"if", "then", "else"}:
            parts.append(_ConditionalSchema())
        return parts

    def _typed(self, raw: dict[str, Any], name: str, consumed: set[str]) -> _Schema:
        if name == "string":
            consumed |= _STRING_KEYWORDS
            return self._string(raw)
        if name in ("integer", "number"):
            consumed |= _NUMBER_KEYWORDS
            return self._number(raw, integer=name == "integer")
        if name == "array":
            consumed |= _ARRAY_KEYWORDS[self.draft]
            return self._array(raw)
        if name == "object":
            consumed |= _OBJECT_KEYWORDS[self.draft]
            return self._object(raw)
        if name == "boolean":
            return _BooleanSchema()
        if name == "null":
            return _NullSchema()
        return _EmptySchema()  # an unknown type: the registry's validation refuses it

    @staticmethod
    def _string(raw: dict[str, Any]) -> _StringSchema:
        pattern = raw.get("pattern")
        return _StringSchema(min_length=_int(raw.get("minLength")),
                             max_length=_int(raw.get("maxLength")),
                             pattern=pattern if isinstance(pattern, str) else None)

    @staticmethod
    def _number(raw: dict[str, Any], integer: bool) -> _NumberSchema:
        def limit(keyword: str) -> float | None:
            value = raw.get(keyword)  # a boolean is draft 4's flag on minimum/maximum
            return value if _is_number(value) else None
        return _NumberSchema(minimum=limit("minimum"), maximum=limit("maximum"),
                             exclusive_minimum=limit("exclusiveMinimum"),
                             exclusive_maximum=limit("exclusiveMaximum"),
                             multiple_of=limit("multipleOf"), integer=integer)

    def _object(self, raw: dict[str, Any]) -> _ObjectSchema:
        node = _ObjectSchema(min_properties=_int(raw.get("minProperties")),
                             max_properties=_int(raw.get("maxProperties")))
        properties = raw.get("properties")
        if isinstance(properties, dict):
            node.properties = {k: self.load(v) for k, v in properties.items()}
        required = raw.get("required")
        if isinstance(required, list):
            node.required = [r for r in required if isinstance(r, str)]
        patterns = raw.get("patternProperties")
        if isinstance(patterns, dict):
            node.pattern_properties = [(p, self.load(s)) for p, s in patterns.items()]
        additional = raw.get("additionalProperties", True)
        if isinstance(additional, bool):
            node.additional = additional
        elif isinstance(additional, dict):
            node.additional_schema = self.load(additional)
        dependencies: dict[str, Any] = {}
        for keyword in ("dependencies", "dependentRequired", "dependentSchemas"):
            if isinstance(raw.get(keyword), dict):
                dependencies.update(raw[keyword])
        for name, dependency in dependencies.items():
            if isinstance(dependency, list):
                node.property_dependencies[name] = {d for d in dependency
                                                    if isinstance(d, str)}
            else:
                node.schema_dependencies[name] = self.load(dependency)
        return node

    def _array(self, raw: dict[str, Any]) -> _ArraySchema:
        node = _ArraySchema(min_items=_int(raw.get("minItems")),
                            max_items=_int(raw.get("maxItems")),
                            unique_items=raw.get("uniqueItems") is True)
        items = raw.get("items", _ABSENT)
        prefix = raw.get("prefixItems") if self.modern else None
        if isinstance(prefix, list):
            # 2020-12: prefixItems are the tuple, items what may follow them.
            node.item_schemas = [self.load(s) for s in prefix]
            self._additional_items(node, items)
        else:
            if isinstance(items, list):
                node.item_schemas = [self.load(s) for s in items]
            elif self.modern and isinstance(items, bool):
                node.additional = items  # json-sKema's items: true/false (no tuple)
            elif items is not _ABSENT:
                node.all_items = self.load(items)
            self._additional_items(node, raw.get("additionalItems", _ABSENT))
        return node

    def _additional_items(self, node: _ArraySchema, value: Any) -> None:
        if isinstance(value, bool):
            node.additional = value
        elif isinstance(value, dict):
            node.additional_schema = self.load(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _int(value: Any) -> int | None:
    return int(value) if _is_number(value) else None


def _java_hash_bucket(key: str, capacity: int) -> int:
    """The bucket java.util.HashMap puts a String key in."""
    h = 0
    data = key.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return (h ^ (h >> 16)) & (capacity - 1)


def _capacity(size: int, initial: int = 16) -> int:
    capacity = initial
    while size > capacity * 0.75:
        capacity *= 2
    return capacity


def _java_order(keys: Iterable[str], capacity: int) -> list[str]:
    """Keys as a Java HashMap/HashSet of that capacity iterates them, from their insertion
    order (a bucket keeps its keys in insertion order; resizing does not reorder them)."""
    return sorted(keys, key=lambda k: _java_hash_bucket(k, capacity))


def _map_order(keys: Iterable[str]) -> list[str]:
    """A HashMap filled one key at a time (everit's property maps, org.json's objects)."""
    keys = list(keys)
    return _java_order(keys, _capacity(len(keys)))


def _union_order(original: Iterable[str], update: Iterable[str]) -> list[str]:
    """Confluent's `new HashSet<>(original.keySet()); addAll(update.keySet())`."""
    first = _map_order(original)
    seen = set(first)
    keys = first + [k for k in _map_order(update) if k not in seen]
    initial = 16
    while initial < int(len(first) / 0.75) + 1:
        initial *= 2
    return _java_order(keys, _capacity(len(keys), initial))


# ---- the diff ----------------------------------------------------------------------------

# Pairs of schemas one check may compare. Unions of $refs can make the diff exponential
# (Confluent 7.x has no bound; later versions memoize and time out): a registry request
# must not hang on one schema, so past this it answers an error instead.
COMPARISON_BUDGET = 200_000  # about 4 s; a 12-way recursive oneOf needs 16 000


class _TooComplexError(Exception):
    pass


class _Context:
    """Where the diff is (a JSON path), what it found, and which original schemas are
    being compared higher up (Confluent 7.x stops a cycle by not re-entering those)."""

    def __init__(self, path: Sequence[str] = (), entered: Iterable[int] = (),
                 budget: list[int] | None = None) -> None:
        self.path = list(path)
        self.entered = set(entered)
        self.differences: list[Difference] = []
        self.budget = budget if budget is not None else [COMPARISON_BUDGET]  # shared

    def subcontext(self) -> _Context:
        return _Context(self.path, self.entered, self.budget)

    def spend(self) -> None:
        self.budget[0] -= 1
        if self.budget[0] < 0:
            raise _TooComplexError

    def add(self, kind: str, attribute: str | None = None) -> None:
        path = [*self.path, attribute] if attribute is not None else self.path
        self.differences.append(Difference(kind, "#/" + "/".join(path)))

    def extend(self, differences: Iterable[Difference]) -> None:
        self.differences.extend(differences)

    def compatible(self) -> bool:
        return all(d.type in COMPATIBLE_CHANGES for d in self.differences)

    def at(self, segment: str) -> _PathScope:
        return _PathScope(self, segment)


class _PathScope:
    def __init__(self, ctx: _Context, segment: str) -> None:
        self.ctx, self.segment = ctx, segment

    def __enter__(self) -> None:
        self.ctx.path.append(self.segment)

    def __exit__(self, *_: object) -> None:
        self.ctx.path.pop()


def _normalize(schema: _Schema) -> _Schema:
    """A $ref stands for the schema it refers to (a chain of them too)."""
    for _ in range(64):
        if not isinstance(schema, _ReferenceSchema):
            return schema
        target = schema.resolve()
        if target is None:
            return _UnresolvedReference(ref=schema.ref)
        schema = target
    return _UnresolvedReference(ref="(a cycle of $refs)")


def _compare(ctx: _Context, original: _Schema | None, update: _Schema | None) -> None:
    """SchemaDiff.compare: the differences between two schemas, added to ctx."""
    ctx.spend()
    if original is None and update is None:
        return
    if original is None:
        ctx.add("SCHEMA_ADDED")
        return
    if update is None:
        ctx.add("SCHEMA_REMOVED")
        return
    original, update = _normalize(original), _normalize(update)
    if _compare_with_one_combined(ctx, original, update):
        return
    if not _same_kind(original, update):
        if isinstance(original, _FalseSchema) or isinstance(update, _EmptySchema):
            return  # nothing was valid before, or anything is valid now
        if original.connect_type == "bytes" and update.connect_type == "bytes":
            return  # Connect's decimals: Confluent lets their JSON types change
        ctx.add("TYPE_CHANGED")
        return
    if id(original) in ctx.entered:
        return  # a cycle: being compared higher up already
    ctx.entered.add(id(original))
    try:
        if original.id != update.id:
            ctx.add("ID_CHANGED")
        if original.title != update.title:
            ctx.add("TITLE_CHANGED")
        if original.description != update.description:
            ctx.add("DESCRIPTION_CHANGED")
        if not _same_value(original.default, update.default):
            ctx.add("DEFAULT_CHANGED")
        compare = _COMPARE_BY_KIND.get(type(original))
        if compare is not None:
            compare(ctx, original, update)
    finally:
        ctx.entered.discard(id(original))


def _same_kind(a: _Schema, b: _Schema) -> bool:
    return type(a) is type(b) or (isinstance(a, _CombinedSchema)
                                  and isinstance(b, _CombinedSchema))


def _same_value(a: Any, b: Any) -> bool:
    """Java's Objects.equals on JSON values: 1 and 1.0 differ."""
    return a is b or (type(a) is type(b) and a == b)


def _compare_with_one_combined(ctx: _Context, original: _Schema, update: _Schema) -> bool:
    """A plain schema made a union (anyOf/oneOf) that still accepts it, or an allOf made a
    plain schema one of its members accepts: compatible, and compared no further."""
    if not isinstance(original, _CombinedSchema) and isinstance(update, _CombinedSchema):
        subschemas, criteria, extended = update.subschemas, ("anyOf", "oneOf"), "SUM_TYPE_EXTENDED"
        pairs = [(original, s) for s in subschemas]
    elif isinstance(original, _CombinedSchema) and not isinstance(update, _CombinedSchema):
        subschemas, criteria = original.subschemas, ("allOf",)
        extended = "PRODUCT_TYPE_NARROWED"
        pairs = [(s, update) for s in subschemas]
    else:
        return False
    combined = update if isinstance(update, _CombinedSchema) else original
    assert isinstance(combined, _CombinedSchema)
    if len(subschemas) == 1:  # a singleton union is its member
        sub = ctx.subcontext()
        _compare(sub, *pairs[0])
        if sub.compatible():
            ctx.extend(sub.differences)
            return True
    elif combined.criterion in criteria:
        for pair in pairs:
            sub = ctx.subcontext()
            _compare(sub, *pair)
            if sub.compatible():
                ctx.extend(sub.differences)
                ctx.add(extended)
                return True
    return False


def _compare_bound(ctx: _Context, keyword: str, original: float | None,
                   update: float | None, prefix: str) -> None:
    """maxLength, minimum, ...: added, removed, increased or decreased."""
    if original is None and update is None:
        return
    if original is None:
        ctx.add(f"{prefix}_ADDED", keyword)
    elif update is None:
        ctx.add(f"{prefix}_REMOVED", keyword)
    elif float(original) < float(update):
        ctx.add(f"{prefix}_INCREASED", keyword)
    elif float(original) > float(update):
        ctx.add(f"{prefix}_DECREASED", keyword)


def _compare_string(ctx: _Context, original: _StringSchema, update: _StringSchema) -> None:
    _compare_bound(ctx, "maxLength", original.max_length, update.max_length, "MAX_LENGTH")
    _compare_bound(ctx, "minLength", original.min_length, update.min_length, "MIN_LENGTH")
    if original.pattern is None and update.pattern is not None:
        ctx.add("PATTERN_ADDED", "pattern")
    elif original.pattern is not None and update.pattern is None:
        ctx.add("PATTERN_REMOVED", "pattern")
    elif original.pattern != update.pattern:
        ctx.add("PATTERN_CHANGED", "pattern")


def _decimal(value: Any) -> Decimal | None:
    try:
        return Decimal(str(value)) if value is not None else None
    except InvalidOperation:
        return None


def _compare_number(ctx: _Context, original: _NumberSchema, update: _NumberSchema) -> None:
    _compare_bound(ctx, "maximum", original.maximum, update.maximum, "MAXIMUM")
    _compare_bound(ctx, "minimum", original.minimum, update.minimum, "MINIMUM")
    _compare_bound(ctx, "exclusiveMaximum", original.exclusive_maximum,
                   update.exclusive_maximum, "EXCLUSIVE_MAXIMUM")
    _compare_bound(ctx, "exclusiveMinimum", original.exclusive_minimum,
                   update.exclusive_minimum, "EXCLUSIVE_MINIMUM")
    before, after = _decimal(original.multiple_of), _decimal(update.multiple_of)
    if before != after:
        if before is None:
            ctx.add("MULTIPLE_OF_ADDED", "multipleOf")
        elif after is None:
            ctx.add("MULTIPLE_OF_REMOVED", "multipleOf")
        elif before != 0 and after % before == 0:
            ctx.add("MULTIPLE_OF_EXPANDED", "multipleOf")  # fewer values are multiples
        elif after != 0 and before % after == 0:
            ctx.add("MULTIPLE_OF_REDUCED", "multipleOf")
        else:
            ctx.add("MULTIPLE_OF_CHANGED", "multipleOf")
    if original.integer != update.integer:
        ctx.add("TYPE_EXTENDED" if original.integer else "TYPE_NARROWED")


def _json_set(values: Iterable[Any]) -> set[str]:
    return {_canonical(v) for v in values}


def _compare_enum(ctx: _Context, original: _EnumSchema, update: _EnumSchema) -> None:
    before, after = _json_set(original.values), _json_set(update.values)
    if before != after:
        if after >= before:
            ctx.add("ENUM_ARRAY_EXTENDED", "enum")
        elif before >= after:
            ctx.add("ENUM_ARRAY_NARROWED", "enum")
        else:
            ctx.add("ENUM_ARRAY_CHANGED", "enum")


def _compare_const(ctx: _Context, original: _ConstSchema, update: _ConstSchema) -> None:
    if _canonical(original.value) != _canonical(update.value):
        ctx.add("ENUM_ARRAY_CHANGED", "const")


def _compare_not(ctx: _Context, original: _NotSchema, update: _NotSchema) -> None:
    with ctx.at("not"):
        sub = ctx.subcontext()
        # What must not match grows when the reversed comparison is compatible.
        _compare(sub, update.must_not_match, original.must_not_match)
        ctx.add("NOT_TYPE_NARROWED" if sub.compatible() else "NOT_TYPE_EXTENDED")


def _compare_combined(ctx: _Context, original: _CombinedSchema,
                      update: _CombinedSchema) -> None:
    if _compare_criteria(ctx, original, update) == "COMBINED_TYPE_CHANGED":
        return
    before = _distinct(original.subschemas)
    after = _distinct(update.subschemas)
    if len(before) < len(after):
        ctx.add("PRODUCT_TYPE_EXTENDED" if update.criterion == "allOf"
                else "SUM_TYPE_EXTENDED")
    elif len(before) > len(after):
        ctx.add("SUM_TYPE_NARROWED" if original.criterion in ("anyOf", "oneOf")
                else "PRODUCT_TYPE_NARROWED")
    # Which old member each new one can stand for: a maximum matching over the compatible
    # pairs; if it cannot cover the smaller side, the members changed.
    compatible: dict[tuple[int, int], list[Difference]] = {}
    for i, old in enumerate(before):
        with ctx.at(f"{original.criterion}/{i}"):
            for j, new in enumerate(after):
                sub = ctx.subcontext()
                _compare(sub, old, new)
                if sub.compatible():
                    compatible[(i, j)] = sub.differences
    matching = _maximum_matching(len(before), len(after), compatible)
    for pair in sorted(matching):
        ctx.extend(compatible[pair])
    if len(matching) < min(len(before), len(after)):
        ctx.add("COMBINED_TYPE_SUBSCHEMAS_CHANGED")


def _compare_criteria(ctx: _Context, original: _CombinedSchema,
                      update: _CombinedSchema) -> str | None:
    before, after = original.criterion, update.criterion
    if before == after:
        return None
    single_before, single_after = len(original.subschemas) == 1, len(update.subschemas) == 1
    if (after == "anyOf" or (single_before and single_after)
            or (single_before and after == "oneOf") or (single_after and before == "allOf")):
        change = "COMBINED_TYPE_EXTENDED"
    else:
        change = "COMBINED_TYPE_CHANGED"
    ctx.add(change)
    return change


def _distinct(schemas: Sequence[_Schema]) -> list[_Schema]:
    """Members without duplicates (Confluent collects them in a LinkedHashSet)."""
    seen: dict[str, _Schema] = {}
    for schema in schemas:
        seen.setdefault(f"{type(schema).__name__}:{schema.key}", schema)
    return list(seen.values())


def _maximum_matching(left: int, right: int, edges: Mapping[tuple[int, int], Any]
                      ) -> set[tuple[int, int]]:
    """A maximum bipartite matching (augmenting paths)."""
    partner: dict[int, int] = {}  # right -> left

    def augment(i: int, visited: set[int]) -> bool:
        for j in range(right):
            if (i, j) in edges and j not in visited:
                visited.add(j)
                if j not in partner or augment(partner[j], visited):
                    partner[j] = i
                    return True
        return False

    for i in range(left):
        augment(i, set())
    return {(i, j) for j, i in partner.items()}


def _is_open(schema: _ObjectSchema) -> bool:
    return (not schema.pattern_properties and schema.additional_schema is None
            and schema.additional)


def _partially_open(schema: _ObjectSchema, name: str) -> _Schema | None:
    """The schema a property not listed gets from patternProperties or a schema of
    additionalProperties (Java's Matcher.find: a match anywhere in the name)."""
    for pattern, subschema in schema.pattern_properties:
        try:
            if re.search(pattern, name):
                return subschema
        except re.error:
            continue
    return schema.additional_schema


def _compare_object(ctx: _Context, original: _ObjectSchema, update: _ObjectSchema) -> None:
    _compare_required(ctx, original, update)
    _compare_properties(ctx, original, update)
    _compare_dependencies(ctx, original, update)
    _compare_additional_properties(ctx, original, update)
    _compare_bound(ctx, "maxProperties", original.max_properties, update.max_properties,
                   "MAX_PROPERTIES")
    _compare_bound(ctx, "minProperties", original.min_properties, update.min_properties,
                   "MIN_PROPERTIES")


def _compare_required(ctx: _Context, original: _ObjectSchema, update: _ObjectSchema) -> None:
    with ctx.at("required"):
        for name in _map_order(original.properties):
            if name not in update.properties:
                continue
            was, now = name in original.required, name in update.required
            if was and not now:
                ctx.add("REQUIRED_ATTRIBUTE_REMOVED", name)
            elif now and not was:
                ctx.add("REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED"
                        if update.properties[name].default is not _ABSENT
                        else "REQUIRED_ATTRIBUTE_ADDED", name)


def _compare_properties(ctx: _Context, original: _ObjectSchema,
                        update: _ObjectSchema) -> None:
    with ctx.at("properties"):
        for name in _union_order(original.properties, update.properties):
            with ctx.at(name):
                before, after = original.properties.get(name), update.properties.get(name)
                if after is None:
                    assert before is not None
                    _property_removed(ctx, before, update, name)
                elif before is None:
                    _property_added(ctx, original, after, update, name)
                else:
                    _compare(ctx, before, after)


def _property_removed(ctx: _Context, before: _Schema, update: _ObjectSchema,
                      name: str) -> None:
    # Only the update's content model matters: may it still hold the property?
    if _is_open(update):
        ctx.add("PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL")
        return
    partial = _partially_open(update, name)
    if partial is not None:
        sub = ctx.subcontext()
        _compare(sub, before, partial)
        ctx.extend(sub.differences)
        ctx.add("PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                if sub.compatible()
                else "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
    elif isinstance(before, _FalseSchema):
        ctx.add("PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL")
    else:
        ctx.add("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL")


def _property_added(ctx: _Context, original: _ObjectSchema, after: _Schema,
                    update: _ObjectSchema, name: str) -> None:
    # Only the original's content model matters: could old data hold anything there?
    if _is_open(original):
        ctx.add("PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL"
                if isinstance(after, _EmptySchema) else "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
        return
    partial = _partially_open(original, name)
    if partial is not None:
        sub = ctx.subcontext()
        _compare(sub, partial, after)
        ctx.extend(sub.differences)
        ctx.add("PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                if sub.compatible()
                else "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
    if name in update.required:
        ctx.add("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL"
                if after.default is not _ABSENT
                else "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")
    else:
        ctx.add("OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")


def _compare_dependencies(ctx: _Context, original: _ObjectSchema,
                          update: _ObjectSchema) -> None:
    with ctx.at("dependencies"):
        for name in _union_order(original.property_dependencies, update.property_dependencies):
            before = original.property_dependencies.get(name)
            after = update.property_dependencies.get(name)
            if after is None:
                ctx.add("DEPENDENCY_ARRAY_REMOVED", name)
            elif before is None:
                ctx.add("DEPENDENCY_ARRAY_ADDED", name)
            elif before != after:
                ctx.add("DEPENDENCY_ARRAY_EXTENDED" if after >= before
                        else "DEPENDENCY_ARRAY_NARROWED" if before >= after
                        else "DEPENDENCY_ARRAY_CHANGED", name)
        for name in _union_order(original.schema_dependencies, update.schema_dependencies):
            before_schema = original.schema_dependencies.get(name)
            after_schema = update.schema_dependencies.get(name)
            if after_schema is None:
                ctx.add("DEPENDENCY_SCHEMA_REMOVED", name)
            elif before_schema is None:
                ctx.add("DEPENDENCY_SCHEMA_ADDED", name)
            else:
                with ctx.at(name):
                    _compare(ctx, before_schema, after_schema)


def _compare_additional_properties(ctx: _Context, original: _ObjectSchema,
                                   update: _ObjectSchema) -> None:
    with ctx.at("additionalProperties"):
        if original.additional != update.additional:
            ctx.add("ADDITIONAL_PROPERTIES_ADDED" if update.additional
                    else "ADDITIONAL_PROPERTIES_REMOVED")
        elif original.additional_schema is None and update.additional_schema is not None:
            ctx.add("ADDITIONAL_PROPERTIES_NARROWED")
        elif update.additional_schema is None and original.additional_schema is not None:
            ctx.add("ADDITIONAL_PROPERTIES_EXTENDED")
        else:
            _compare(ctx, original.additional_schema, update.additional_schema)


def _compare_array(ctx: _Context, original: _ArraySchema, update: _ArraySchema) -> None:
    with ctx.at("items"):
        _compare(ctx, original.all_items, update.all_items)
    _compare_tuple(ctx, original, update)
    _compare_additional_items(ctx, original, update)
    _compare_bound(ctx, "maxItems", original.max_items, update.max_items, "MAX_ITEMS")
    _compare_bound(ctx, "minItems", original.min_items, update.min_items, "MIN_ITEMS")
    if original.unique_items != update.unique_items:
        ctx.add("UNIQUE_ITEMS_REMOVED" if original.unique_items else "UNIQUE_ITEMS_ADDED",
                "uniqueItems")


def _array_is_open(schema: _ArraySchema) -> bool:
    return schema.additional_schema is None and schema.additional


def _compare_tuple(ctx: _Context, original: _ArraySchema, update: _ArraySchema) -> None:
    before, after = original.item_schemas, update.item_schemas
    for index in range(max(len(before), len(after))):
        with ctx.at(f"items/{index}"):
            if index < len(before) and index < len(after):
                _compare(ctx, before[index], after[index])
            elif index < len(before):
                _item_removed(ctx, before[index], update)
            else:
                _item_added(ctx, original, after[index])


def _item_removed(ctx: _Context, before: _Schema, update: _ArraySchema) -> None:
    if _array_is_open(update):
        ctx.add("ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL")
    elif update.additional_schema is not None:
        sub = ctx.subcontext()
        _compare(sub, before, update.additional_schema)
        ctx.extend(sub.differences)
        ctx.add("ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if sub.compatible()
                else "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
    elif isinstance(before, _FalseSchema):
        ctx.add("ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL")
    else:
        ctx.add("ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL")


def _item_added(ctx: _Context, original: _ArraySchema, after: _Schema) -> None:
    if _array_is_open(original):
        ctx.add("ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL"
                if isinstance(after, _EmptySchema) else "ITEM_ADDED_TO_OPEN_CONTENT_MODEL")
    elif original.additional_schema is not None:
        sub = ctx.subcontext()
        _compare(sub, original.additional_schema, after)
        ctx.extend(sub.differences)
        ctx.add("ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if sub.compatible()
                else "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
    else:
        ctx.add("ITEM_ADDED_TO_CLOSED_CONTENT_MODEL")


def _compare_additional_items(ctx: _Context, original: _ArraySchema,
                              update: _ArraySchema) -> None:
    with ctx.at("additionalItems"):
        if original.additional != update.additional:
            ctx.add("ADDITIONAL_ITEMS_REMOVED" if original.additional
                    else "ADDITIONAL_ITEMS_ADDED")
        elif original.additional_schema is None and update.additional_schema is not None:
            ctx.add("ADDITIONAL_ITEMS_NARROWED")
        elif update.additional_schema is None and original.additional_schema is not None:
            ctx.add("ADDITIONAL_ITEMS_EXTENDED")
        else:
            _compare(ctx, original.additional_schema, update.additional_schema)


def _compare_unresolved(ctx: _Context, original: _UnresolvedReference,
                        update: _UnresolvedReference) -> None:
    if original.ref != update.ref:
        ctx.add("TYPE_CHANGED")


_COMPARE_BY_KIND: dict[type, Callable[[_Context, Any, Any], None]] = {
    _StringSchema: _compare_string,
    _NumberSchema: _compare_number,
    _ConstSchema: _compare_const,
    _EnumSchema: _compare_enum,
    _CombinedSchema: _compare_combined,
    _NotSchema: _compare_not,
    _ObjectSchema: _compare_object,
    _ArraySchema: _compare_array,
    _UnresolvedReference: _compare_unresolved,
}


# ---- the public functions ----------------------------------------------------------------

def load(document: Any, external: Mapping[str, Any] | None = None) -> Any:
    """A document as the diff sees it (everit's view of it); for `differences`."""
    return _Loader(document, external or {}).root()


def differences(original: Any, update: Any, external: Mapping[str, Any] | None = None
                ) -> list[Difference]:
    """Every difference (compatible or not) from `original` to `update`, as Confluent's
    SchemaDiff.compare(original, update) lists them."""
    ctx = _Context()
    _compare(ctx, load(original, external), load(update, external))
    return ctx.differences


def _messages(original: Any, update: Any, a: str, b: str,
              external: Mapping[str, Any] | None) -> list[str]:
    try:
        found = differences(original, update, external)
    except RecursionError:
        return ["Unexpected exception during compatibility check: schema nested too deep"]
    except _TooComplexError:
        return ["Unexpected exception during compatibility check: the schemas are too "
                f"complex to compare (over {COMPARISON_BUDGET} comparisons)"]
    return [d.describe(a, b) for d in found if d.type not in COMPATIBLE_CHANGES]


def find_incompatibility(level: str, new: Any, existing: Sequence[Any],
                         external: Mapping[str, Any] | None = None
                         ) -> tuple[int, list[str]] | None:
    """The first of `existing` (oldest first; checked newest first, as Confluent does)
    that `new` may not follow under a level, as its index and Confluent's messages; None
    when `new` may follow them all. ValueError for an unknown level."""
    # Confluent diffs old (original) to new (update) for BACKWARD, labels "new" then "old".
    return first_incompatibility(
        level, len(existing),
        lambda i: _messages(new, existing[i], "old", "new", external),
        lambda i: _messages(existing[i], new, "new", "old", external))


def check_compatibility(level: str, new: Any, existing: Sequence[Any],
                        external: Mapping[str, Any] | None = None) -> list[str]:
    """Confluent's messages saying why JSON Schema `new` may not follow `existing` (oldest
    first) under a compatibility level (NONE, BACKWARD, FORWARD, FULL, each also
    _TRANSITIVE); empty when it may. `external` maps the names other documents are
    `$ref`ed by to those documents. ValueError for an unknown level."""
    found = find_incompatibility(level, new, existing, external)
    return found[1] if found else []
