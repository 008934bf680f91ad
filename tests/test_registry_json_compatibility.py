"""JSON Schema compatibility (odradek/registry/json_schema_compatibility.py): Confluent's
schema diff rules, one test per family of rules with real schemas and the exact messages
BACKWARD and FORWARD answer, and the transitive levels. (Confluent's own diff cases are
under the Confluent Community License: checked against once, not copied here.)"""

from __future__ import annotations

from typing import Any

import pytest

from odradek.registry import json_schema_compatibility
from odradek.registry.json_schema_compatibility import (
    check_compatibility,
    differences,
    find_incompatibility,
)

STRING = {"type": "string"}
INTEGER = {"type": "integer"}
NUMBER = {"type": "number"}


def obj(properties: dict[str, Any], required: tuple[str, ...] = (), **more: Any
        ) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema | more


def message(error_type: str, description: str) -> str:
    """Confluent 7.x's Difference.toString() (its closing quote is a single one)."""
    return f'{{errorType:"{error_type}", description:"{description}\'}}'


def backward(old: Any, new: Any) -> list[str]:
    return check_compatibility("BACKWARD", new, [old])


def forward(old: Any, new: Any) -> list[str]:
    return check_compatibility("FORWARD", new, [old])


def test_property_added_to_open_content_model() -> None:
    old = obj({"id": INTEGER})
    new = obj({"id": INTEGER, "email": STRING})
    # Old data may hold any "email": the new schema cannot read it all.
    assert backward(old, new) == [message(
        "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL",
        "The new schema has an open content model and has a property or item at path "
        "'#/properties/email' which is missing in the old schema")]
    assert forward(old, new) == []  # removed from an open content model: compatible
    # A property anything is valid for is fine both ways.
    assert backward(old, obj({"id": INTEGER, "email": {}})) == []
    assert forward(old, obj({"id": INTEGER, "email": {}})) == []


def test_property_added_to_closed_content_model() -> None:
    old = obj({"id": INTEGER}, additionalProperties=False)
    optional = obj({"id": INTEGER, "email": STRING}, additionalProperties=False)
    assert backward(old, optional) == []
    removed = message("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL",
                      "The old has a closed content model and is missing a property or item "
                      "present at path '#/properties/email' in the new schema")
    assert forward(old, optional) == [removed]
    required = obj({"id": INTEGER, "email": STRING}, ("email",), additionalProperties=False)
    assert backward(old, required) == [message(
        "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL",
        "The new schema has an unopen content model and has a required property at path "
        "'#/properties/email' which is missing in the old schema")]
    assert forward(old, required) == [removed]
    # Required with a default: readers fill it in.
    defaulted = obj({"id": INTEGER, "email": {"type": "string", "default": ""}}, ("email",),
                    additionalProperties=False)
    assert backward(old, defaulted) == []
    # Removing a property a closed model had as `false` (never present): compatible.
    never = obj({"id": INTEGER, "legacy": False}, additionalProperties=False)
    assert backward(never, old) == []


def test_property_covered_by_partially_open_content_model() -> None:
    old = obj({"id": INTEGER}, patternProperties={"^x_": STRING})
    assert backward(old, obj({"id": INTEGER, "x_note": STRING},
                             patternProperties={"^x_": STRING})) == []
    assert backward(old, obj({"id": INTEGER, "x_note": INTEGER},
                             patternProperties={"^x_": STRING})) == [
        message("TYPE_CHANGED", "A type at path '#/properties/x_note' is different between "
                "the new schema and the old schema"),
        message("PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                "The new schema has a property or item at path '#/properties/x_note' which "
                "is missing in the old schema and is not covered by its partially open "
                "content model")]


def test_required_added_and_removed() -> None:
    old = obj({"id": INTEGER, "email": STRING})
    new = obj({"id": INTEGER, "email": STRING}, ("email",))
    assert backward(old, new) == [message(
        "REQUIRED_ATTRIBUTE_ADDED", "The keyword at path '#/required/email' in the new "
        "schema is not present in the old schema")]
    assert forward(old, new) == []
    with_default = obj({"id": INTEGER, "email": {"type": "string", "default": "-"}},
                       ("email",))
    assert backward(old, with_default) == []


def test_types_extended_narrowed_and_changed() -> None:
    old, new = obj({"n": INTEGER}), obj({"n": NUMBER})
    assert backward(old, new) == []  # integer to number: extended
    assert forward(old, new) == [message(
        "TYPE_NARROWED", "A type at path '#/properties/n' is different between the old "
        "schema and the new schema")]
    assert backward(obj({"n": STRING}), obj({"n": INTEGER})) == [message(
        "TYPE_CHANGED", "A type at path '#/properties/n' is different between the new "
        "schema and the old schema")]
    # A type made nullable: a union that still holds the old type.
    nullable = obj({"n": {"type": ["string", "null"]}})
    assert backward(obj({"n": STRING}), nullable) == []
    assert forward(obj({"n": STRING}), nullable) == [message(
        "TYPE_CHANGED", "A type at path '#/properties/n' is different between the old "
        "schema and the new schema")]
    # Anything may become the empty schema; the empty schema may not become a type.
    assert backward(STRING, {}) == []
    assert backward({}, STRING) == [message(
        "TYPE_CHANGED", "A type at path '#/' is different between the new schema and the "
        "old schema")]


def test_string_bounds_and_pattern() -> None:
    old = {"type": "string", "minLength": 2, "maxLength": 10}
    new = {"type": "string", "minLength": 1, "maxLength": 5, "pattern": "^[a-z]+$"}
    assert backward(old, new) == [
        message("MAX_LENGTH_DECREASED", "The value at path '#/maxLength' in the new schema "
                "is less than its value in the old schema"),
        message("PATTERN_ADDED", "The keyword at path '#/pattern' in the new schema is not "
                "present in the old schema")]
    assert forward(old, new) == [message(
        "MIN_LENGTH_INCREASED", "The value at path '#/minLength' in the old schema is more "
        "than its value in the new schema")]
    assert backward({"type": "string", "pattern": "^a"}, {"type": "string",
                                                          "pattern": "^b"}) == [
        message("PATTERN_CHANGED", "The value at path '#/pattern' is different between "
                "the new and old schema")]


def test_number_bounds() -> None:
    old = {"type": "number", "minimum": 0, "exclusiveMaximum": 100, "multipleOf": 2}
    new = {"type": "number", "minimum": 1, "exclusiveMaximum": 200, "multipleOf": 4}
    assert backward(old, new) == [
        message("MINIMUM_INCREASED", "The value at path '#/minimum' in the new schema is "
                "more than its value in the old schema"),
        message("MULTIPLE_OF_EXPANDED", "The value at path '#/multipleOf' in the new "
                "schema is more than its value in the old schema")]
    assert forward(old, new) == [message(
        "EXCLUSIVE_MAXIMUM_DECREASED", "The value at path '#/exclusiveMaximum' in the old "
        "schema is less than its value in the new schema")]
    assert backward({"type": "number"}, {"type": "number", "maximum": 5}) == [message(
        "MAXIMUM_ADDED", "The keyword at path '#/maximum' in the new schema is not present "
        "in the old schema")]
    # Draft 4's boolean exclusiveMaximum is a flag on maximum, not a limit of its own.
    draft4 = "http://json-schema.org/draft-04/schema#"
    assert backward({"$schema": draft4, "type": "number", "maximum": 5},
                    {"$schema": draft4, "type": "number", "maximum": 5,
                     "exclusiveMaximum": True}) == []


def test_array_bounds_items_and_tuples() -> None:
    old = {"type": "array", "items": STRING, "maxItems": 5}
    new = {"type": "array", "items": STRING, "maxItems": 3, "minItems": 1,
           "uniqueItems": True}
    assert backward(old, new) == [
        message("MAX_ITEMS_DECREASED", "The value at path '#/maxItems' in the new schema is "
                "less than its value in the old schema"),
        message("MIN_ITEMS_ADDED", "The keyword at path '#/minItems' in the new schema is "
                "not present in the old schema"),
        message("UNIQUE_ITEMS_ADDED", "The keyword at path '#/uniqueItems' in the new "
                "schema is not present in the old schema")]
    assert forward(old, new) == []
    assert backward({"type": "array", "items": STRING},
                    {"type": "array", "items": INTEGER}) == [message(
        "TYPE_CHANGED", "A type at path '#/items' is different between the new schema and "
        "the old schema")]
    # A tuple that may not grow (additionalItems false) may get an item appended.
    closed = {"type": "array", "items": [STRING], "additionalItems": False}
    longer = {"type": "array", "items": [STRING, INTEGER], "additionalItems": False}
    assert backward(closed, longer) == []
    assert forward(closed, longer) == [message(
        "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL", "The old has a closed content model and is "
        "missing a property or item present at path '#/items/1' in the new schema")]
    # 2020-12 spells the tuple prefixItems.
    modern = "https://json-schema.org/draft/2020-12/schema"
    assert backward({"$schema": modern, "prefixItems": [STRING], "items": False},
                    {"$schema": modern, "prefixItems": [STRING, INTEGER],
                     "items": False}) == []


def test_enums_and_const() -> None:
    old, new = {"enum": ["a", "b"]}, {"enum": ["a", "b", "c"]}
    assert backward(old, new) == []
    assert forward(old, new) == [message(
        "ENUM_ARRAY_NARROWED", "An array or combined type at path '#/enum' has fewer "
        "elements in the old schema than the new schema")]
    assert backward({"enum": ["a", "b"]}, {"enum": ["a", "c"]}) == [message(
        "ENUM_ARRAY_CHANGED", "A type at path '#/enum' is different between the new schema "
        "and the old schema")]
    assert backward(obj({"kind": {"const": "x"}}), obj({"kind": {"const": "y"}})) == [
        message("ENUM_ARRAY_CHANGED", "A type at path '#/properties/kind/const' is "
                "different between the new schema and the old schema")]
    # With a type beside it, an enum is one member of everit's allOf of the two.
    assert backward({"type": "string", "enum": ["a"]}, {"type": "string"}) == []
    assert backward({"type": "string"}, {"type": "string", "enum": ["a"]}) == [message(
        "TYPE_CHANGED", "A type at path '#/' is different between the new schema and the "
        "old schema")]


def test_one_of_any_of_all_of() -> None:
    old = {"oneOf": [STRING, INTEGER]}
    new = {"oneOf": [STRING, INTEGER, {"type": "null"}]}
    assert backward(old, new) == []
    assert forward(old, new) == [message(
        "SUM_TYPE_NARROWED", "An array or combined type at path '#/' has fewer elements in "
        "the old schema than the new schema")]
    assert backward({"anyOf": [STRING, INTEGER]}, {"oneOf": [STRING, INTEGER]}) == [message(
        "COMBINED_TYPE_CHANGED", "A type at path '#/' is different between the new schema "
        "and the old schema")]
    assert forward({"anyOf": [STRING, INTEGER]}, {"oneOf": [STRING, INTEGER]}) == []
    product_old = {"allOf": [obj({"a": STRING}), obj({"b": INTEGER})]}
    product_new = {"allOf": [obj({"a": STRING}), obj({"b": INTEGER}), obj({"c": NUMBER})]}
    assert backward(product_old, product_new) == [message(
        "PRODUCT_TYPE_EXTENDED", "An array or combined type at path '#/' has more elements "
        "in the new schema than the old schema")]
    assert forward(product_old, product_new) == []
    # The same number of members, one of them changed beyond what the other accepts.
    assert backward({"oneOf": [STRING, INTEGER]}, {"oneOf": [STRING, {"type": "boolean"}]}
                    ) == [message("COMBINED_TYPE_SUBSCHEMAS_CHANGED", "A type at path '#/' "
                                  "is different between the new schema and the old schema")]
    # A plain schema made a union that still holds it.
    assert backward(STRING, {"anyOf": [STRING, INTEGER]}) == []


def test_not() -> None:
    old, new = {"not": STRING}, {"not": {"type": ["string", "integer"]}}
    assert backward(old, new) == [message(
        "NOT_TYPE_EXTENDED", "An array or combined type at path '#/not' has more elements "
        "in the new schema than the old schema")]
    assert forward(old, new) == []


def test_refs_are_followed() -> None:
    old = {"definitions": {"Id": INTEGER}, "type": "object",
           "properties": {"id": {"$ref": "#/definitions/Id"}}}
    same = {"$defs": {"Key": INTEGER}, "type": "object",
            "properties": {"id": {"$ref": "#/$defs/Key"}}}
    changed = {"$defs": {"Key": STRING}, "type": "object",
               "properties": {"id": {"$ref": "#/$defs/Key"}}}
    inline = obj({"id": INTEGER})
    assert backward(old, same) == forward(old, same) == []
    assert backward(old, inline) == backward(inline, old) == []
    assert backward(old, changed) == [message(
        "TYPE_CHANGED", "A type at path '#/properties/id' is different between the new "
        "schema and the old schema")]
    assert forward(old, changed) == [message(
        "TYPE_CHANGED", "A type at path '#/properties/id' is different between the old "
        "schema and the new schema")]


def test_recursive_refs_terminate() -> None:
    def tree(value: Any) -> dict[str, Any]:
        return {"$ref": "#/definitions/Node", "definitions": {"Node": obj(
            {"value": value, "children": {"type": "array",
                                          "items": {"$ref": "#/definitions/Node"}}})}}
    assert backward(tree(INTEGER), tree(INTEGER)) == []
    assert backward(tree(INTEGER), tree(NUMBER)) == []
    assert forward(tree(INTEGER), tree(NUMBER)) == [message(
        "TYPE_NARROWED", "A type at path '#/properties/value' is different between the old "
        "schema and the new schema")]
    self_ref = {"type": "object", "properties": {"next": {"$ref": "#"}}}
    assert backward(self_ref, self_ref) == []


def product_catalog(branches: int, circular: int) -> dict[str, Any]:
    """The schema of Confluent's CircularRefSchemaDiffTest: 2020-12, a oneOf of types each
    referring back to the union through several properties."""
    defs: dict[str, Any] = {
        "SimpleId": obj({"id": STRING}, ("id",)),
        "Base": obj({"name": STRING}),
        "ProductOrId": {"oneOf": [{"$ref": "#/$defs/SimpleId"},
                                  {"$ref": "#/$defs/Product"}]},
        "Product": {"oneOf": [{"$ref": f"#/$defs/Type{i}"} for i in range(branches)]}}
    for i in range(branches):
        properties: dict[str, Any] = {f"ref{p}": {"$ref": "#/$defs/ProductOrId"}
                                      for p in range(circular)}
        properties["tag"] = {"type": "string", "const": f"type{i}"}
        defs[f"Type{i}"] = {"$ref": "#/$defs/Base"} | obj(properties, ("ref0", "tag"))
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$defs": defs,
            "$ref": "#/$defs/Product"}


def test_recursive_unions_terminate() -> None:
    assert backward(product_catalog(12, 5), product_catalog(12, 5)) == []


def test_too_complex_to_compare(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(json_schema_compatibility, "COMPARISON_BUDGET", 1000)
    assert backward(product_catalog(12, 5), product_catalog(12, 5)) == [
        "Unexpected exception during compatibility check: the schemas are too complex to "
        "compare (over 1000 comparisons)"]


def test_external_refs() -> None:
    new = obj({"address": {"$ref": "address.json"}})
    # Not passed in: compared by the $ref's text.
    assert backward(new, new) == []
    assert backward(obj({"address": {"$ref": "other.json"}}), new) == [message(
        "TYPE_CHANGED", "A type at path '#/properties/address' is different between the "
        "new schema and the old schema")]
    # Passed in: followed like a local one.
    external = {"address.json": obj({"city": STRING})}
    assert check_compatibility("BACKWARD", new, [obj({"address": obj({"city": STRING})})],
                               external) == []
    assert check_compatibility("BACKWARD", new, [obj({"address": obj({"city": INTEGER})})],
                               external) == [message(
        "TYPE_CHANGED", "A type at path '#/properties/address/properties/city' is different "
        "between the new schema and the old schema")]


def test_additional_properties() -> None:
    closed = obj({"id": INTEGER}, additionalProperties=False)
    opened = obj({"id": INTEGER}, additionalProperties=True)
    strings = obj({"id": INTEGER}, additionalProperties=STRING)
    assert backward(closed, opened) == []
    assert forward(closed, opened) == [message(
        "ADDITIONAL_PROPERTIES_REMOVED", "The keyword at path '#/additionalProperties' in "
        "the old schema is not present in the new schema")]
    assert backward(opened, strings) == [message(
        "ADDITIONAL_PROPERTIES_NARROWED", "An array or combined type at path "
        "'#/additionalProperties' has fewer elements in the new schema than the old schema")]
    assert forward(opened, strings) == []
    assert backward(strings, obj({"id": INTEGER}, additionalProperties=INTEGER)) == [message(
        "TYPE_CHANGED", "A type at path '#/additionalProperties' is different between the "
        "new schema and the old schema")]


def test_nested_objects() -> None:
    old = obj({"address": obj({"city": STRING}, additionalProperties=False)})
    new = obj({"address": obj({"city": STRING, "zip": {"type": "string", "maxLength": 10}},
                              ("zip",), additionalProperties=False)})
    assert backward(old, new) == [message(
        "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", "The new schema has an unopen "
        "content model and has a required property at path "
        "'#/properties/address/properties/zip' which is missing in the old schema")]
    assert forward(old, new) == [message(
        "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", "The old has a closed content model "
        "and is missing a property or item present at path "
        "'#/properties/address/properties/zip' in the new schema")]


def test_several_properties_come_in_confluents_order() -> None:
    # Confluent visits property names in Java HashSet order: "bar" before "foo".
    assert [f"{d.type} {d.json_path}" for d in differences(
        obj({"foo": STRING}), obj({"bar": STRING}))] == [
        "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL #/properties/bar",
        "PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL #/properties/foo"]


# Three versions where v2 broke v1 (registered while the level was NONE): id a string,
# then an integer, then a number; the new one only retitles the latest.
V1 = obj({"id": STRING})
V2 = obj({"id": INTEGER})
V3 = obj({"id": NUMBER})
NEW = obj({"id": NUMBER}, title="Order")
ID_CHANGED_BACKWARD = message("TYPE_CHANGED", "A type at path '#/properties/id' is "
                              "different between the new schema and the old schema")
ID_NARROWED_FORWARD = message("TYPE_NARROWED", "A type at path '#/properties/id' is "
                              "different between the old schema and the new schema")


@pytest.mark.parametrize(("level", "expected"), [
    ("NONE", None),
    ("BACKWARD", None),
    ("FORWARD", None),
    ("FULL", None),
    # Checked newest first: v2 reads as a number, v1's strings do not.
    ("BACKWARD_TRANSITIVE", (0, [ID_CHANGED_BACKWARD])),
    # v2's integer schema cannot read the new numbers.
    ("FORWARD_TRANSITIVE", (1, [ID_NARROWED_FORWARD])),
    ("FULL_TRANSITIVE", (1, [ID_NARROWED_FORWARD])),
])
def test_transitive_levels_against_three_versions(
        level: str, expected: tuple[int, list[str]] | None) -> None:
    assert find_incompatibility(level, NEW, [V1, V2, V3]) == expected
    assert check_compatibility(level, NEW, [V1, V2, V3]) == (expected[1] if expected else [])


def test_full_lists_the_forward_problems_first() -> None:
    old = obj({"n": INTEGER, "s": {"type": "string", "maxLength": 5}})
    new = obj({"n": NUMBER, "s": {"type": "string", "maxLength": 3}})
    assert check_compatibility("FULL", new, [old]) == [
        message("TYPE_NARROWED", "A type at path '#/properties/n' is different between the "
                "old schema and the new schema"),
        message("MAX_LENGTH_DECREASED", "The value at path '#/properties/s/maxLength' in "
                "the new schema is less than its value in the old schema")]


def test_levels_and_no_history() -> None:
    assert check_compatibility("BACKWARD", STRING, []) == []
    assert check_compatibility("NONE", STRING, [INTEGER]) == []
    assert check_compatibility("backward", STRING, [INTEGER]) != []
    with pytest.raises(ValueError, match="Invalid compatibility level"):
        check_compatibility("SIDEWAYS", STRING, [INTEGER])
