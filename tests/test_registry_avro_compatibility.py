"""Avro compatibility as Confluent's registry judges it: schema resolution (Avro Java's
SchemaCompatibility) in each compatibility level, and parsing that refuses what Avro Java
refuses."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from odradek.registry.avro_compatibility import (
    AvroSchema,
    Incompatibility,
    IncompatibilityType,
    InvalidSchemaError,
    check_compatibility,
    find_incompatibility,
    parse,
    parse_text,
    reader_writer_incompatibilities,
)
from odradek.registry.state import COMPATIBILITY_LEVELS

T = IncompatibilityType


def field(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


def record(*fields: dict[str, Any], name: str = "User", **extra: Any) -> AvroSchema:
    return parse({"type": "record", "name": name, "namespace": "com.x", "fields": list(fields),
                  **extra})


def problems(reader: AvroSchema, writer: AvroSchema) -> list[tuple[str, str, str]]:
    return [(i.type, i.location, i.message)
            for i in reader_writer_incompatibilities(reader, writer)]


def ok(level: str, new: AvroSchema, *existing: AvroSchema) -> bool:
    return check_compatibility(level, new, list(existing)) == []


ID = field("id", "int")


# --- the classic evolutions ------------------------------------------------------------------


def test_adding_a_field_with_a_default_is_fully_compatible() -> None:
    old = record(ID)
    new = record(ID, field("email", ["null", "string"], default=None))
    for level in COMPATIBILITY_LEVELS:
        assert ok(level, new, old), level


def test_adding_a_field_without_a_default_breaks_backward_only() -> None:
    old = record(ID)
    new = record(ID, field("email", "string"))
    assert check_compatibility("BACKWARD", new, [old]) == [
        "{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE', description:'The field 'email' at "
        "path '/fields/1' in the new schema has no default value and is missing in the old "
        "schema', additionalInfo:'email'}"]
    assert ok("FORWARD", new, old)  # old readers ignore the new field
    assert not ok("FULL", new, old)


def test_removing_a_field_breaks_forward_when_the_old_field_had_no_default() -> None:
    old = record(ID, field("email", "string"))
    new = record(ID)
    assert ok("BACKWARD", new, old)  # the new reader skips the old field
    # FORWARD: the old schema, as reader, must read data written with the new one.
    assert check_compatibility("FORWARD", new, [old]) == [
        "{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE', description:'The field 'email' at "
        "path '/fields/1' in the old schema has no default value and is missing in the new "
        "schema', additionalInfo:'email'}"]
    assert problems(old, new) == [(T.READER_FIELD_MISSING_DEFAULT_VALUE, "/fields/1", "email")]


def test_removing_a_field_that_had_a_default_is_fully_compatible() -> None:
    old = record(ID, field("email", "string", default=""))
    new = record(ID)
    for level in COMPATIBILITY_LEVELS:
        assert ok(level, new, old), level


def test_none_accepts_anything_and_nothing_to_follow_is_compatible() -> None:
    assert ok("NONE", record(ID), parse("string"))
    assert ok("FULL_TRANSITIVE", record(ID))


def test_levels_are_checked_and_case_insensitive() -> None:
    with pytest.raises(ValueError, match="SIDEWAYS"):
        check_compatibility("SIDEWAYS", record(ID), [])
    assert not ok("backward", record(ID, field("x", "int")), record(ID))


def test_full_lists_what_the_old_schema_cannot_read_first() -> None:
    old = record(field("a", "int"))
    new = record(field("b", "int"))
    messages = check_compatibility("FULL", new, [old])
    assert len(messages) == 2
    assert "The field 'a' at path '/fields/0' in the old schema" in messages[0]
    assert "The field 'b' at path '/fields/0' in the new schema" in messages[1]


# --- transitive levels: three versions, only the oldest one conflicts ----------------------------


def test_backward_transitive() -> None:
    v1 = record(ID)
    v2 = record(ID, field("b", "string", default="x"))
    v3 = record(ID, field("b", "string"))  # reads v2 (which has b), not v1
    assert ok("BACKWARD", v3, v1, v2)
    assert find_incompatibility("BACKWARD_TRANSITIVE", v3, [v1, v2]) == (0, [
        "{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE', description:'The field 'b' at path "
        "'/fields/1' in the new schema has no default value and is missing in the old schema', "
        "additionalInfo:'b'}"])


def test_forward_transitive() -> None:
    v1 = record(ID, field("b", "string"))
    v2 = record(ID, field("b", "string", default="x"))
    v3 = record(ID)  # v2 reads it (b's default), v1 cannot
    assert ok("FORWARD", v3, v1, v2)
    found = find_incompatibility("FORWARD_TRANSITIVE", v3, [v1, v2])
    assert found is not None and found[0] == 0
    assert "'b' at path '/fields/1' in the old schema has no default" in found[1][0]


def test_full_transitive() -> None:
    v1 = record(ID, field("b", "string"))
    v2 = record(ID, field("b", "string", default="x"))
    v3 = record(ID)
    assert ok("FULL", v3, v1, v2)
    assert not ok("FULL_TRANSITIVE", v3, v1, v2)
    assert ok("FULL_TRANSITIVE", v3, v2)


def test_transitive_checks_newest_first() -> None:
    v1 = record(field("a", "int"))
    v2 = record(field("a", "long"))
    new = record(field("a", "string"))  # conflicts with both
    found = find_incompatibility("BACKWARD_TRANSITIVE", new, [v1, v2])
    assert found is not None and found[0] == 1


# --- primitives and promotions ---------------------------------------------------------------

PROMOTABLE = [("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"),
              ("long", "double"), ("float", "double"), ("string", "bytes"), ("bytes", "string")]


@pytest.mark.parametrize(("writer", "reader"), PROMOTABLE)
def test_promotions(writer: str, reader: str) -> None:
    assert problems(parse(reader), parse(writer)) == []


@pytest.mark.parametrize(("writer", "reader"), [
    (w, r) for r, w in PROMOTABLE if (w, r) not in PROMOTABLE] + [
    ("int", "string"), ("boolean", "int"), ("null", "string"), ("string", "int")])
def test_no_promotion(writer: str, reader: str) -> None:
    assert problems(parse(reader), parse(writer)) == [
        (T.TYPE_MISMATCH, "/",
         f"reader type: {reader.upper()} not compatible with writer type: {writer.upper()}")]


def test_widening_a_field_is_backward_but_not_forward() -> None:
    old = record(field("n", "int"))
    new = record(field("n", "long"))
    assert ok("BACKWARD", new, old)
    assert check_compatibility("FORWARD", new, [old]) == [
        "{errorType:'TYPE_MISMATCH', description:'The type (path '/fields/0/type') of a field in "
        "the old schema does not match with the new schema', additionalInfo:'reader type: INT "
        "not compatible with writer type: LONG'}"]


def test_logical_types_are_compared_by_their_underlying_type() -> None:
    date = parse({"type": "int", "logicalType": "date"})
    assert problems(date, parse("int")) == problems(parse("long"), date) == []


# --- enums -----------------------------------------------------------------------------------


def enum(*symbols: str, **extra: Any) -> dict[str, Any]:
    return {"type": "enum", "name": "Color", "symbols": list(symbols), **extra}


def test_adding_an_enum_symbol_is_backward_not_forward() -> None:
    old = record(field("c", enum("RED", "GREEN")))
    new = record(field("c", enum("RED", "GREEN", "BLUE", "AMBER")))
    assert ok("BACKWARD", new, old)
    assert problems(old, new) == [(T.MISSING_ENUM_SYMBOLS, "/fields/0/type/symbols",
                                   "[AMBER, BLUE]")]
    assert check_compatibility("FORWARD", new, [old]) == [
        "{errorType:'MISSING_ENUM_SYMBOLS', description:'The old schema is missing enum symbols "
        "'[AMBER, BLUE]' at path '/fields/0/type/symbols' in the new schema', "
        "additionalInfo:'[AMBER, BLUE]'}"]


def test_an_enum_default_reads_unknown_symbols() -> None:
    old = record(field("c", enum("RED", "GREEN", "UNKNOWN", default="UNKNOWN")))
    new = record(field("c", enum("RED", "GREEN", "BLUE", "UNKNOWN", default="UNKNOWN")))
    assert ok("FULL", new, old)


def test_removing_an_enum_symbol_is_forward_not_backward() -> None:
    old = record(field("c", enum("RED", "GREEN", "BLUE")))
    new = record(field("c", enum("RED", "GREEN")))
    assert ok("FORWARD", new, old)
    assert problems(new, old) == [(T.MISSING_ENUM_SYMBOLS, "/fields/0/type/symbols", "[BLUE]")]
    with_default = record(field("c", enum("RED", "GREEN", default="RED")))
    assert ok("BACKWARD", with_default, old)


def test_renamed_enum_is_a_name_mismatch() -> None:
    old = record(field("c", enum("RED")))
    new = record(field("c", {**enum("RED"), "name": "Colour"}))
    assert problems(new, old) == [(T.NAME_MISMATCH, "/fields/0/type/name", "expected: com.x.Color")]


# --- unions ----------------------------------------------------------------------------------


def test_adding_a_union_branch_is_backward_not_forward() -> None:
    old = record(field("v", ["null", "string"], default=None))
    new = record(field("v", ["null", "string", "int"], default=None))
    assert ok("BACKWARD", new, old)
    assert problems(old, new) == [(T.MISSING_UNION_BRANCH, "/fields/0/type/2",
                                   "reader union lacking writer type: INT")]
    assert check_compatibility("FORWARD", new, [old]) == [
        "{errorType:'MISSING_UNION_BRANCH', description:'The old schema is missing a type inside "
        "a union field at path '/fields/0/type/2' in the new schema', "
        "additionalInfo:'reader union lacking writer type: INT'}"]


def test_reader_union_reads_a_writer_that_is_not_a_union_through_any_branch() -> None:
    assert problems(parse(["null", "long"]), parse("int")) == []  # by promotion
    assert problems(parse(["null", "string"]), parse("int")) == [
        (T.MISSING_UNION_BRANCH, "/", "reader union lacking writer type: INT")]


def test_writer_union_needs_every_branch_readable_by_a_reader_that_is_not_a_union() -> None:
    assert problems(parse("double"), parse(["int", "float"])) == []
    assert problems(parse("string"), parse(["null", "string"])) == [
        (T.TYPE_MISMATCH, "/", "reader type: STRING not compatible with writer type: NULL")]


def test_making_a_field_optional() -> None:
    old = record(field("v", "string"))
    new = record(field("v", ["null", "string"], default=None))
    assert ok("BACKWARD", new, old)
    assert not ok("FORWARD", new, old)


def test_union_branches_of_named_types_match_by_name() -> None:
    a = {"type": "record", "name": "A", "fields": [field("x", "int")]}
    b = {"type": "record", "name": "B", "fields": [field("y", "int")]}
    reader = parse([a, b])
    assert problems(reader, parse({**b, "fields": [field("y", "int")]})) == []
    assert problems(parse(a), parse(b)) == [
        (T.NAME_MISMATCH, "/name", "expected: B"),
        (T.READER_FIELD_MISSING_DEFAULT_VALUE, "/fields/0", "x")]


# --- records: nested, in arrays and maps, recursive, renamed ---------------------------------

ADDRESS = {"type": "record", "name": "Address", "fields": [field("street", "string")]}


def test_nested_record_changes_are_located() -> None:
    old = record(field("home", ADDRESS))
    new = record(field("home", {**ADDRESS, "fields": [field("street", "string"),
                                                      field("zip", "string")]}))
    assert problems(new, old) == [(T.READER_FIELD_MISSING_DEFAULT_VALUE,
                                   "/fields/0/type/fields/1", "zip")]
    assert ok("FORWARD", new, old)


def test_named_type_used_twice_is_checked_through_both_fields() -> None:
    old = record(field("home", ADDRESS), field("work", "Address"))
    new = record(field("home", {**ADDRESS, "fields": [field("street", "bytes")]}),
                 field("work", "Address"))
    assert ok("FULL", new, old)  # string and bytes read each other
    worse = record(field("home", {**ADDRESS, "fields": [field("street", "int")]}),
                   field("work", "Address"))
    # Avro Java memoizes a pair of named types: the second use repeats the first's result.
    assert [i.location for i in reader_writer_incompatibilities(worse, old)] == [
        "/fields/0/type/fields/0/type", "/fields/0/type/fields/0/type"]


def test_arrays_and_maps_of_records() -> None:
    def item(*fields: dict[str, Any]) -> dict[str, Any]:
        return {"type": "record", "name": "Item", "fields": list(fields)}

    old = record(field("items", {"type": "array", "items": item(field("sku", "string"))}),
                 field("tags", {"type": "map", "values": "Item"}))
    new = record(field("items", {"type": "array",
                                 "items": item(field("sku", "string"), field("qty", "int"))}),
                 field("tags", {"type": "map", "values": "Item"}))
    assert problems(new, old) == [
        (T.READER_FIELD_MISSING_DEFAULT_VALUE, "/fields/0/type/items/fields/1", "qty"),
        (T.READER_FIELD_MISSING_DEFAULT_VALUE, "/fields/0/type/items/fields/1", "qty")]
    assert problems(parse({"type": "array", "items": "int"}),
                    parse({"type": "map", "values": "int"})) == [
        (T.TYPE_MISMATCH, "/", "reader type: ARRAY not compatible with writer type: MAP")]
    assert problems(parse({"type": "map", "values": "long"}),
                    parse({"type": "map", "values": "int"})) == []


def linked_list(value_type: str, *extra: dict[str, Any]) -> AvroSchema:
    return parse({"type": "record", "name": "Node", "fields": [
        field("value", value_type), field("next", ["null", "Node"], default=None), *extra]})


def test_recursive_linked_list() -> None:
    ints, longs = linked_list("int"), linked_list("long")
    assert problems(ints, ints) == []
    assert problems(longs, ints) == []
    assert problems(ints, longs) == [
        (T.TYPE_MISMATCH, "/fields/0/type",
         "reader type: INT not compatible with writer type: LONG")]
    labelled = linked_list("int", field("label", "string"))
    assert problems(labelled, ints) == [
        (T.READER_FIELD_MISSING_DEFAULT_VALUE, "/fields/2", "label")]


def test_mutually_recursive_tree() -> None:
    def tree(leaf: str) -> AvroSchema:
        return parse({"type": "record", "name": "Tree", "fields": [
            field("leaf", leaf),
            field("forest", {"type": "record", "name": "Forest", "fields": [
                field("trees", {"type": "array", "items": "Tree"})]})]})

    assert ok("FULL_TRANSITIVE", tree("int"), tree("int"))
    assert ok("BACKWARD", tree("double"), tree("float"))
    assert not ok("FORWARD", tree("double"), tree("float"))


def test_field_renamed_with_an_alias() -> None:
    old = record(ID, field("mail", "string"))
    renamed = record(ID, field("email", "string", aliases=["mail"]))
    assert ok("BACKWARD", renamed, old)  # the new reader finds "mail" by its alias
    assert not ok("FORWARD", renamed, old)  # the old reader has no alias for "email"
    assert not ok("BACKWARD", record(ID, field("email", "string")), old)


def test_record_renamed_with_an_alias() -> None:
    old = record(ID, name="Customer")
    assert problems(record(ID), old) == [(T.NAME_MISMATCH, "/name", "expected: com.x.Customer")]
    assert problems(record(ID, aliases=["Customer"]), old) == []  # qualified by com.x
    assert problems(record(ID, aliases=["org.y.Customer"]), old) == [
        (T.NAME_MISMATCH, "/name", "expected: com.x.Customer")]


def test_only_unqualified_names_must_match() -> None:
    # Avro's spec and Java compare records' unqualified names.
    moved = parse({"type": "record", "name": "org.y.User", "fields": [ID]})
    assert problems(moved, record(ID)) == []


def test_a_field_matching_two_writer_fields_is_an_error() -> None:
    old = record(field("a", "int"), field("b", "int"))
    new = record(field("a", "int", aliases=["b"]))
    with pytest.raises(ValueError, match="matches multiple fields"):
        reader_writer_incompatibilities(new, old)
    [message] = check_compatibility("BACKWARD", new, [old])
    assert message.startswith("Unexpected exception during compatibility check: Reader record")


def test_missing_enum_field_with_an_enum_default_is_a_type_mismatch() -> None:
    # Avro Java checks such a field's enum against the writer record itself.
    old = record(ID)
    new = record(ID, field("c", enum("RED", default="RED")))
    assert problems(new, old) == [
        (T.TYPE_MISMATCH, "/fields/1/type", "reader type: ENUM not compatible with writer type: "
                                            "RECORD")]


# --- fixed -----------------------------------------------------------------------------------


def test_fixed_size_and_name() -> None:
    def fixed(size: int, name: str = "Hash") -> AvroSchema:
        return record(field("h", {"type": "fixed", "name": name, "size": size}))

    assert problems(fixed(16), fixed(16)) == []
    assert problems(fixed(8), fixed(16)) == [
        (T.FIXED_SIZE_MISMATCH, "/fields/0/type/size", "expected: 16, found: 8")]
    assert check_compatibility("BACKWARD", fixed(8), [fixed(16)]) == [
        "{errorType:'FIXED_SIZE_MISMATCH', description:'The size of FIXED type field at path "
        "'/fields/0/type/size' in the new schema does not match with the old schema', "
        "additionalInfo:'expected: 16, found: 8'}"]
    assert problems(fixed(16, "Digest"), fixed(16)) == [
        (T.NAME_MISMATCH, "/fields/0/type/name", "expected: com.x.Hash")]
    assert check_compatibility("BACKWARD", fixed(16, "Digest"), [fixed(16)]) == [
        "{errorType:'NAME_MISMATCH', description:'The name of the schema has changed (path "
        "'/fields/0/type/name')', additionalInfo:'expected: com.x.Hash'}"]


def test_incompatibility_describes_itself_with_either_labels() -> None:
    i = Incompatibility(T.TYPE_MISMATCH, "/", "reader type: INT not compatible with writer type: "
                                             "LONG")
    assert "in the old schema does not match with the new schema" in i.describe("old", "new")
    assert "in the new schema does not match with the old schema" in i.describe()


# --- parsing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "why"), [
    ("{", "Invalid JSON"),
    ('{"type": "record", "name": "R", "fields": [], }', "Invalid JSON"),
    ("NaN", "Invalid JSON"),
    ("42", "Schema not yet supported"),
    ('"integer"', "Undefined name: integer"),
    ('{"type": "decimal"}', "Undefined name: decimal"),
    ('{"type": "record", "name": "R", "fields": [{"name": "a", "type": "Missing"}]}',
     "Undefined name: Missing"),
    ('{"type": {"type": "int"}}', "No type"),
    ('{"type": "record", "name": "R"}', "Record has no fields"),
    ('{"type": "record", "fields": []}', "No name"),
    ('{"type": "record", "name": "R", "fields": [{"type": "int"}]}', "No field name"),
    ('{"type": "record", "name": "R", "fields": [{"name": "a"}]}', "No field type"),
    ('{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}, '
     '{"name": "a", "type": "long"}]}', "Duplicate field a"),
    ('{"type": "record", "name": "1R", "fields": []}', "Illegal name"),
    ('{"type": "record", "name": "R", "fields": [{"name": "a-b", "type": "int"}]}',
     "Illegal name"),
    ('{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int", '
     '"order": "sideways"}]}', "order"),
    ('{"type": "array"}', "Array has no items type"),
    ('{"type": "map", "values": "nope"}', "Undefined name: nope"),
    ('{"type": "enum", "name": "E"}', "Enum has no symbols"),
    ('{"type": "enum", "name": "E", "symbols": ["A", "A"]}', "unique"),
    ('{"type": "enum", "name": "E", "symbols": ["A"], "default": "B"}', "symbols"),
    ('{"type": "fixed", "name": "F"}', "Invalid or no size"),
    ('{"type": "fixed", "name": "F", "size": "16"}', "Invalid or no size"),
    ('["int", "int"]', "Duplicate in union:int"),
    ('["int", {"type": "int", "logicalType": "date"}]', "Duplicate in union:int"),
    ('["null", ["int"]]', "Nested union"),
    ('[{"type": "array", "items": "int"}, {"type": "array", "items": "long"}]',
     "Duplicate in union:array"),
    ('{"type": "record", "name": "R", "fields": [{"name": "a", "type": '
     '{"type": "fixed", "name": "F", "size": 1}}, {"name": "b", "type": '
     '{"type": "fixed", "name": "F", "size": 1}}]}', "redefined"),
])
def test_invalid_schemas(text: str, why: str) -> None:
    with pytest.raises(InvalidSchemaError, match=re.escape(why)):
        parse_text(text)


def with_default(type_: Any, default: Any) -> dict[str, Any]:
    return {"type": "record", "name": "R", "fields": [
        field("a", type_, default=default)]}


POINT = {"type": "record", "name": "Point", "fields": [
    field("x", "int"), field("y", "int", default=0)]}


@pytest.mark.parametrize(("type_", "default"), [
    ("int", "1"), ("int", 1.5), ("int", True), ("int", 2**31), ("long", 2**63), ("long", None),
    ("string", None), ("string", 1), ("bytes", 1), ("boolean", 0), ("null", 0),
    ("float", "one"), ("double", False),
    (["null", "int"], 1),  # a union's default is its first branch's
    (["int", "null"], None),
    ({"type": "array", "items": "int"}, [1, "2"]),
    ({"type": "map", "values": "int"}, {"a": "b"}),
    ({"type": "map", "values": "int"}, [1]),
    (POINT, {"y": 1}),  # x has no default
    (POINT, {"x": "1"}),
    ({"type": "enum", "name": "E", "symbols": ["A"]}, 1),
    ({"type": "fixed", "name": "F", "size": 2}, 12),
])
def test_invalid_defaults(type_: Any, default: Any) -> None:
    schema = with_default(type_, default)
    with pytest.raises(InvalidSchemaError, match="Invalid default for field a"):
        parse(schema)
    parse(schema, validate_defaults=False)  # what Confluent does with stored schemas


@pytest.mark.parametrize(("type_", "default"), [
    ("int", -(2**31)), ("long", 2**63 - 1), ("float", 1), ("double", 0.5), ("double", "NaN"),
    ("float", "1.5"), ("string", ""), ("bytes", "\u00ff"), ("boolean", False), ("null", None),
    (["null", "int"], None), (["int", "null"], 3),
    ({"type": "array", "items": ["null", "int"]}, [None, None]),
    ({"type": "map", "values": "long"}, {"a": 1}),
    (POINT, {"x": 1}),
    ({"type": "enum", "name": "E", "symbols": ["A"]}, "A"),
    ({"type": "fixed", "name": "F", "size": 2}, "\u0000\u0001"),
    ({"type": "int", "logicalType": "date"}, 0),
])
def test_valid_defaults(type_: Any, default: Any) -> None:
    parse(with_default(type_, default))


def test_a_record_whose_defaults_never_end_is_refused() -> None:
    endless = {"type": "record", "name": "Loop", "fields": [
        field("next", "Loop", default={})]}
    with pytest.raises(InvalidSchemaError, match="Invalid default"):
        parse(endless)


def test_named_types_are_referred_to_after_their_definition() -> None:
    schema = parse({"type": "record", "name": "Person", "namespace": "com.x", "fields": [
        field("home", {"type": "record", "name": "Address", "fields": [field("s", "string")]}),
        field("work", "com.x.Address"),
        field("other", "Address"),  # same namespace
        field("old", {"type": "Address"}),  # Java's object form of a reference
        field("many", {"type": "array", "items": "Address"})]})
    assert set(schema.named) == {"com.x.Person", "com.x.Address"}
    assert '{"name":"old","type":"com.x.Address"}' in schema.canonical


def test_named_types_of_other_schemas() -> None:
    named: dict[str, Any] = {}
    address = parse_text('{"type": "record", "name": "Address", "namespace": "com.x", '
                         '"fields": [{"name": "street", "type": "string"}]}', named)
    assert set(named) == {"com.x.Address"}  # updated in place, as fastavro's named_schemas
    person_json = {"type": "record", "name": "Person", "fields": [
        field("home", "com.x.Address")]}
    with pytest.raises(InvalidSchemaError, match=r"Undefined name: com\.x\.Address"):
        parse(person_json)
    person = parse(person_json, dict(named))
    assert person.canonical == ('{"name":"Person","type":"record","fields":[{"name":"home",'
                                '"type":"com.x.Address"}]}')
    assert parse("com.x.Address", dict(named)).canonical == '"com.x.Address"'
    # Compatibility follows the references.
    assert problems(person, person) == []
    assert problems(parse("com.x.Address", dict(named)), address) == []
    # Parsing the same referenced schema again is harmless; redefining a name is not.
    parse_text('{"type": "record", "name": "Address", "namespace": "com.x", '
               '"fields": [{"name": "street", "type": "string"}]}', named)
    before = dict(named)
    with pytest.raises(InvalidSchemaError, match=r"Can't redefine: com\.x\.Address"):
        parse({"type": "record", "name": "Address", "namespace": "com.x", "fields": []}, named)
    with pytest.raises(InvalidSchemaError):
        parse({"type": "record", "name": "Bad", "fields": [field("a", "nope")]}, named)
    assert named == before  # a schema that fails leaves no names behind


def test_canonical_form_ignores_whitespace_docs_and_attribute_order() -> None:
    compact = parse_text('{"type":"record","name":"User","namespace":"com.x","fields":'
                         '[{"name":"id","type":"int"},{"name":"tags","type":{"type":"array",'
                         '"items":"string"}}]}')
    spaced = parse_text(json.dumps({
        "fields": [{"doc": "key", "type": "int", "name": "id"},
                   {"type": {"items": "string", "type": "array"}, "doc": "labels",
                    "name": "tags", "default": []}],
        "doc": "a person", "name": "com.x.User", "type": "record", "aliases": ["Person"],
    }, indent=4))
    assert compact.canonical == spaced.canonical == (
        '{"name":"com.x.User","type":"record","fields":[{"name":"id","type":"int"},'
        '{"name":"tags","type":{"type":"array","items":"string"}}]}')
    assert parse_text(' "string" ').canonical == parse_text('{"type": "string"}').canonical


SAMPLES = [
    "int", ["null", "string"], {"type": "map", "values": ["null", "double"]},
    {"type": "record", "name": "Node", "fields": [
        field("value", "int"), field("next", ["null", "Node"], default=None)]},
    {"type": "record", "name": "R", "fields": [
        field("e", {"type": "enum", "name": "E", "symbols": ["A", "B"]}),
        field("f", {"type": "fixed", "name": "F", "size": 4}),
        field("a", {"type": "array", "items": "F"})]},
]


@pytest.mark.parametrize("sample", SAMPLES)
def test_every_schema_is_compatible_with_itself(sample: Any) -> None:
    schema = parse(sample)
    for level in COMPATIBILITY_LEVELS:
        assert ok(level, schema, schema, parse(sample)), level
