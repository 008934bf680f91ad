"""Protobuf schemas in the registry: .proto text and base64 FileDescriptorProtos parsed to one
model and rendered as canonical text (odradek/registry/protobuf_schemas.py), and Confluent's
compatibility rules over it (odradek/registry/protobuf_compatibility.py), the change types and
paths as Confluent's SchemaDiff reports them."""

from __future__ import annotations

import base64

import pytest
from google.protobuf import any_pb2, descriptor_pb2

from odradek.registry import protobuf_schemas as ps
from odradek.registry.protobuf_compatibility import (
    COMPATIBLE_CHANGES,
    check_compatibility,
    differences,
)
from odradek.registry.schemas import InvalidSchemaError, incompatibilities, parse_schema
from odradek.registry.state import Reference, SchemaVersion

PROTO3 = """
// an order, as the shop writes it
syntax = "proto3";
package shop.v1;

import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

option java_package = "com.example.shop";
option java_multiple_files = true;

message Order {
  int64 id = 1;
  optional string note = 2;
  repeated Line lines = 3;
  map<string, int32> counts = 4;
  google.protobuf.Timestamp placed = 5;
  oneof payment {
    Card card = 6;
    string voucher = 7 [deprecated = true];
  }
  Status status = 8;
  google.protobuf.StringValue coupon = 9 [json_name = "couponCode"];
  reserved 20 to 29, 100;
  reserved "legacy";

  message Line { string item = 1; uint32 quantity = 2; }
  enum Status {
    option allow_alias = true;
    STATUS_UNKNOWN = 0;
    PLACED = 1;
    SENT = 2;
    SHIPPED = 2;
  }
}

message Card { string number = 1; }
"""

PROTO3_CANONICAL = """\
syntax = "proto3";
package shop.v1;

import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

option java_package = "com.example.shop";
option java_multiple_files = true;

message Order {
  reserved 20 to 29;
  reserved 100;
  reserved "legacy";
  int64 id = 1;
  optional string note = 2;
  repeated .shop.v1.Order.Line lines = 3;
  map<string, int32> counts = 4;
  .google.protobuf.Timestamp placed = 5;
  oneof payment {
    .shop.v1.Card card = 6;
    string voucher = 7 [deprecated = true];
  }
  .shop.v1.Order.Status status = 8;
  .google.protobuf.StringValue coupon = 9 [json_name = "couponCode"];

  message Line {
    string item = 1;
    uint32 quantity = 2;
  }

  enum Status {
    option allow_alias = true;
    STATUS_UNKNOWN = 0;
    PLACED = 1;
    SENT = 2;
    SHIPPED = 2;
  }
}

message Card {
  string number = 1;
}
"""

PROTO2 = """
syntax = "proto2";
package legacy;
option optimize_for = SPEED;

message Reading {
  required string sensor = 1;
  optional double value = 2 [default = -1.5];
  optional Unit unit = 3 [default = CELSIUS];
  optional string label = 4 [default = "say \\"hi\\""];
  repeated int32 samples = 5 [packed = true];
  extensions 100 to max;
  enum Unit { CELSIUS = 1; KELVIN = 2; }
}
"""

PROTO2_CANONICAL = """\
syntax = "proto2";
package legacy;

option optimize_for = SPEED;

message Reading {
  required string sensor = 1;
  optional double value = 2 [default = -1.5];
  optional .legacy.Reading.Unit unit = 3 [default = CELSIUS];
  optional string label = 4 [default = "say \\"hi\\""];
  repeated int32 samples = 5 [packed = true];
  extensions 100 to max;

  enum Unit {
    CELSIUS = 1;
    KELVIN = 2;
  }
}
"""


def parse(text: str, imports: dict[str, ps.Dependency] | None = None) -> ps.ProtobufSchema:
    return ps.parse(text, imports or {})


def base64_of(file: descriptor_pb2.FileDescriptorProto) -> str:
    return base64.standard_b64encode(file.SerializeToString()).decode()


# ---- parsing and rendering ------------------------------------------------------------------


def test_proto3_text_renders_canonically() -> None:
    schema = parse(PROTO3)
    assert schema.text == PROTO3_CANONICAL
    assert parse(schema.text).text == PROTO3_CANONICAL  # a fixed point
    assert sorted(schema.dependencies) == ["google/protobuf/timestamp.proto",
                                           "google/protobuf/wrappers.proto"]
    order = schema.file.message_type[0]
    counts = next(f for f in order.field if f.name == "counts")
    assert counts.type_name == ".shop.v1.Order.CountsEntry"  # a map, as protoc makes it
    note = next(f for f in order.field if f.name == "note")
    assert note.proto3_optional and order.oneof_decl[note.oneof_index].name == "_note"


def test_proto2_text_renders_canonically() -> None:
    assert parse(PROTO2).text == PROTO2_CANONICAL
    assert parse(PROTO2_CANONICAL).text == PROTO2_CANONICAL


def test_base64_descriptor_is_the_same_schema_as_its_text() -> None:
    """What confluent-kafka's ProtobufSerializer registers: its file's serialized
    FileDescriptorProto, in base64."""
    text_form = parse(PROTO3)
    assert parse(text_form.serialized()).text == PROTO3_CANONICAL
    # A descriptor as protoc makes it (json_name filled in, a file name): the same text.
    file = descriptor_pb2.FileDescriptorProto()
    file.CopyFrom(text_form.file)
    file.name = "shop/v1/order.proto"
    for field in file.message_type[0].field:
        if not field.json_name:
            field.json_name = ps._camel(field.name)
    assert parse(base64_of(file)).text == PROTO3_CANONICAL


def test_a_well_known_descriptor_renders_as_proto_text() -> None:
    text = parse(base64.b64encode(any_pb2.DESCRIPTOR.serialized_pb).decode()).text
    assert text.startswith('syntax = "proto3";\npackage google.protobuf;\n')
    assert 'option java_package = "com.google.protobuf";' in text
    assert "message Any {\n  string type_url = 1;\n  bytes value = 2;\n}\n" in text


def test_type_names_resolve_innermost_scope_first() -> None:
    schema = parse("""syntax = "proto3"; package p;
        message A { message B {} B b = 1; p.A.B c = 2; .p.A.B d = 3; }
        message B { A.B x = 1; B y = 2; }""")
    a, b = schema.file.message_type
    assert {f.type_name for f in a.field} == {".p.A.B"}
    assert [f.type_name for f in b.field] == [".p.A.B", ".p.B"]


def test_imports_resolve_through_references() -> None:
    common = parse('syntax = "proto3"; package common; message Money { int64 cents = 1; }')
    reference = Reference("common.proto", "common-value", 1)
    imports = {"common.proto": ps.dependency("common.proto", common, reference)}
    schema = parse('syntax = "proto3"; import "common.proto";\n'
                   "message Price { common.Money amount = 1; }", imports)
    assert ".common.Money amount = 1;" in schema.text
    assert schema.dependencies["common.proto"].reference == reference
    with pytest.raises(InvalidSchemaError, match=r'import "common\.proto" is neither'):
        parse('syntax = "proto3"; import "common.proto"; message P {}')


def test_references_through_parse_schema() -> None:
    """schemas.py resolves a reference's own references, and refuses other schema types."""
    base = SchemaVersion("base", 1, 1, 'syntax = "proto3"; package b; message Id { int64 v = 1; }',
                         "PROTOBUF")
    middle_ref = Reference("base.proto", "base", 1)
    middle = SchemaVersion("middle", 1, 2, 'syntax = "proto3"; package m; import "base.proto";'
                           " message Key { b.Id id = 1; }", "PROTOBUF", (middle_ref,))
    registry = {("base", 1): base, ("middle", 1): middle}
    top_ref = Reference("middle.proto", "middle", 1)
    parsed = parse_schema("PROTOBUF", 'syntax = "proto3"; import "middle.proto"; '
                          "message Row { m.Key key = 1; }", [(top_ref, middle)],
                          resolve=lambda r: registry[(r.subject, r.version)])
    assert ".m.Key key = 1;" in parsed.text and parsed.canonical == parsed.text
    assert parsed.references == (top_ref,)
    avro = SchemaVersion("a", 1, 3, '"string"')
    with pytest.raises(InvalidSchemaError, match="cannot import a AVRO schema"):
        parse_schema("PROTOBUF", 'syntax = "proto3"; import "a.proto"; message M {}',
                     [(Reference("a.proto", "a", 1), avro)])


@pytest.mark.parametrize(("text", "message"), [
    ("message {", r"not a \.proto file: line 1:9"),
    ('syntax = "proto3"; message M { Foo f = 1; }', "type Foo .* is not defined"),
    ('syntax = "proto3"; message M { int32 a = 1; int32 b = 1; }', "duplicate field number"),
    ('syntax = "proto3"; message M { required int32 a = 1; }', "proto3 has none"),
    ('syntax = "proto3"; enum E { A = 1; }', "first value must be zero"),
    ('syntax = "proto3"; message M { int32 a = 1 [colour = 2]; }', "unsupported option colour"),
    ('syntax = "proto3"; message M { int32 a = 1 [(my.opt) = 2]; }', "custom option"),
    ('syntax = "proto3"; message M { map<double, int32> m = 1; }', "mismatched input 'double'"),
    ('syntax = "proto2"; message M { optional group G = 1 { optional int32 a = 2; } }',
     "groups are not supported"),
    ('syntax = "proto2"; message M { extensions 10 to 20; } extend M { optional int32 x = 10; }',
     r"extensions \(extend\) are not supported"),
    ('edition = "2023"; message M {}', "editions are not supported"),
    ("AAAA", "neither .proto text nor a serialized FileDescriptorProto"),
])
def test_invalid_schemas_are_refused(text: str, message: str) -> None:
    with pytest.raises(InvalidSchemaError, match=message):
        parse(text)


def test_a_malformed_descriptor_is_refused() -> None:
    file = descriptor_pb2.FileDescriptorProto(name="x.proto", syntax="proto3")
    message = file.message_type.add(name="M")
    field = message.field.add(name="a", number=1, type=ps.FieldProto.TYPE_MESSAGE,
                              label=ps.FieldProto.LABEL_OPTIONAL)
    with pytest.raises(InvalidSchemaError, match="a malformed FileDescriptorProto"):
        parse(base64_of(file))  # a message field without its type's name
    field.type_name = ".Nope"
    with pytest.raises(InvalidSchemaError, match=r"type \.Nope .* is not defined"):
        parse(base64_of(file))


def test_a_descriptor_with_custom_options_is_refused() -> None:
    file = descriptor_pb2.FileDescriptorProto(name="x.proto", syntax="proto3")
    message = file.message_type.add(name="M")
    field = message.field.add(name="a", number=1, type=ps.FieldProto.TYPE_INT32,
                              label=ps.FieldProto.LABEL_OPTIONAL)
    field.options.MergeFromString(bytes([0xC8, 0x3E, 0x01]))  # extension 1001 = 1: unknown here
    with pytest.raises(InvalidSchemaError, match="custom options on field a"):
        parse(base64_of(file))


# ---- the diff -------------------------------------------------------------------------------


def changes(original: str, update: str) -> list[str]:
    return sorted(str(d) for d in differences(parse(original), parse(update)))


def compatible(original: str, update: str) -> bool:
    return all(d.type in COMPATIBLE_CHANGES
               for d in differences(parse(original), parse(update)))


P3 = 'syntax = "proto3";\n'
P2 = 'syntax = "proto2";\n'

# (what changes, original, update, the differences Confluent reports, compatible)
DIFF_CASES = [
    ("package", P3 + "package a; message M {}", P3 + "package b; message M {}",
     ["PACKAGE_CHANGED #/"], False),
    ("message added", P3 + "message M {}", P3 + "message M {} message N {}",
     ["MESSAGE_ADDED #/N"], True),
    ("message removed", P3 + "message M {} message N {}", P3 + "message M {}",
     ["MESSAGE_REMOVED #/N"], False),
    ("messages reordered", P3 + "message M {} message N {}", P3 + "message N {} message M {}",
     ["MESSAGE_MOVED #/M", "MESSAGE_MOVED #/N"], True),
    ("nested message added", P3 + "message M {}", P3 + "message M { message N {} }",
     ["MESSAGE_ADDED #/M/N"], True),
    ("field added", P3 + "message M { int32 a = 1; }",
     P3 + "message M { int32 a = 1; string b = 2; }", ["FIELD_ADDED #/M/2"], True),
    ("field removed", P3 + "message M { int32 a = 1; string b = 2; }",
     P3 + "message M { int32 a = 1; }", ["FIELD_REMOVED #/M/2"], True),
    ("required field added", P2 + "message M { optional int32 a = 1; }",
     P2 + "message M { optional int32 a = 1; required int32 b = 2; }",
     ["REQUIRED_FIELD_ADDED #/M/2"], False),
    ("required field removed", P2 + "message M { optional int32 a = 1; required int32 b = 2; }",
     P2 + "message M { optional int32 a = 1; }", ["REQUIRED_FIELD_REMOVED #/M/2"], False),
    ("field renamed", P3 + "message M { int32 a = 1; }", P3 + "message M { int32 b = 1; }",
     ["FIELD_NAME_CHANGED #/M/1"], True),
    ("number kinds that read each other", P3 + "message M { int32 a = 1; }",
     P3 + "message M { uint64 a = 1; }", [], True),
    ("string to bytes", P3 + "message M { string a = 1; }", P3 + "message M { bytes a = 1; }",
     [], True),
    ("enum to int", P3 + "message M { E a = 1; } enum E { Z = 0; }",
     P3 + "message M { int32 a = 1; }", ["ENUM_REMOVED #/E"], True),
    ("scalar kind", P3 + "message M { int32 a = 1; }", P3 + "message M { sint32 a = 1; }",
     ["FIELD_SCALAR_KIND_CHANGED #/M/1"], False),
    ("scalar to message", P3 + "message M { int32 a = 1; } message N {}",
     P3 + "message M { N a = 1; } message N {}", ["FIELD_KIND_CHANGED #/M/1"], False),
    ("message type renamed", P3 + "message M { N a = 1; } message N {}",
     P3 + "message M { O a = 1; } message O {}",
     ["FIELD_NAMED_TYPE_CHANGED #/M/1", "MESSAGE_ADDED #/O", "MESSAGE_REMOVED #/N"], False),
    ("numeric label", P3 + "message M { optional int32 a = 1; }",
     P3 + "message M { repeated int32 a = 1; }", ["FIELD_NUMERIC_LABEL_CHANGED #/M/1"], False),
    ("string label", P3 + "message M { optional string a = 1; }",
     P3 + "message M { repeated string a = 1; }",
     ["FIELD_STRING_OR_BYTES_LABEL_CHANGED #/M/1"], True),
    ("implicit proto3 label", P3 + "message M { int32 a = 1; }",
     P3 + "message M { repeated int32 a = 1; }", [], True),
    ("map value kind", P3 + "message M { map<string, int32> m = 1; }",
     P3 + "message M { map<string, string> m = 1; }", ["FIELD_SCALAR_KIND_CHANGED #/M/1"],
     False),
    ("map to repeated message", P3 + "message M { map<string, int32> m = 1; }",
     P3 + "message M { repeated E m = 1; message E { string key = 1; int32 value = 2; } }",
     ["FIELD_KIND_CHANGED #/M/1", "MESSAGE_ADDED #/M/E"], False),
    ("enum constants", P3 + "enum E { A = 0; B = 1; C = 2; }",
     P3 + "enum E { A = 0; BB = 1; D = 3; }",
     ["ENUM_CONST_ADDED #/E/3", "ENUM_CONST_CHANGED #/E/1", "ENUM_CONST_REMOVED #/E/2"], True),
    ("oneof added around a new field", P3 + "message M { int32 a = 1; }",
     P3 + "message M { int32 a = 1; oneof o { string b = 2; } }",
     ["ONEOF_ADDED #/M/o", "ONEOF_FIELD_ADDED #/M/o/2"], True),
    ("one field moved into a new oneof", P3 + "message M { int32 a = 1; }",
     P3 + "message M { oneof o { int32 a = 1; } }", ["ONEOF_ADDED #/M/o"], True),
    ("two fields moved into a oneof", P3 + "message M { int32 a = 1; int32 b = 2; }",
     P3 + "message M { oneof o { int32 a = 1; int32 b = 2; } }",
     ["MULTIPLE_FIELDS_MOVED_TO_ONEOF #/M/o", "ONEOF_ADDED #/M/o"], False),
    ("a field moved into an existing oneof",
     P3 + "message M { int32 a = 1; oneof o { int32 b = 2; } }",
     P3 + "message M { oneof o { int32 a = 1; int32 b = 2; } }",
     ["FIELD_MOVED_TO_EXISTING_ONEOF #/M/o"], False),
    ("oneof member removed", P3 + "message M { oneof o { int32 a = 1; int32 b = 2; } }",
     P3 + "message M { oneof o { int32 a = 1; } }", ["ONEOF_FIELD_REMOVED #/M/o/2"], False),
    ("oneof removed whole", P3 + "message M { int32 x = 3; oneof o { int32 a = 1; } }",
     P3 + "message M { int32 x = 3; }", ["ONEOF_REMOVED #/M/o"], True),
    ("oneof member moved to the top level", P3 + "message M { oneof o { int32 a = 1; } }",
     P3 + "message M { int32 a = 1; }",
     ["ONEOF_FIELD_MOVED_TO_TOP_LEVEL #/M/1", "ONEOF_REMOVED #/M/o"], True),
    ("type change inside a renamed oneof", P3 + "message M { oneof o { int32 a = 1; } }",
     P3 + "message M { oneof p { string a = 1; } }",
     ["FIELD_SCALAR_KIND_CHANGED #/M/p/1", "ONEOF_ADDED #/M/p", "ONEOF_REMOVED #/M/o"], False),
    ("a recursive message", P3 + "message T { T left = 1; int32 v = 2; }",
     P3 + "message T { T left = 1; int64 v = 2; T right = 3; }", ["FIELD_ADDED #/T/3"], True),
]


@pytest.mark.parametrize(("original", "update", "expected", "is_compatible"),
                         [case[1:] for case in DIFF_CASES], ids=[case[0] for case in DIFF_CASES])
def test_diff(original: str, update: str, expected: list[str], is_compatible: bool) -> None:
    assert changes(original, update) == sorted(expected)
    assert compatible(original, update) == is_compatible


def test_diff_through_imported_files() -> None:
    """A message type of another file is compared field by field unless both sides import
    the same subject's version; its differences are reported at its own path."""
    def with_home(home: str, reference: Reference) -> ps.ProtobufSchema:
        imported = parse(P3 + "package domain; message Outer { message Home { " + home + " } }")
        return parse(P3 + 'import "home.proto"; message T { domain.Outer.Home h = 1; }',
                     {"home.proto": ps.dependency("home.proto", imported, reference)})
    v1 = with_home("int32 id = 1;", Reference("home.proto", "home", 1))
    v2 = with_home("string id = 1;", Reference("home.proto", "home", 2))
    assert sorted(str(d) for d in differences(v1, v2)) == [
        "FIELD_NAMED_TYPE_CHANGED #/T/1", "FIELD_SCALAR_KIND_CHANGED #/Outer/Home/1"]
    same = with_home("string id = 1;", Reference("home.proto", "home", 1))
    assert differences(v1, same) == []  # one subject's version: the same file


# ---- levels ---------------------------------------------------------------------------------

V1 = parse(P3 + "message M { int32 a = 1; }")
V2 = parse(P3 + "message M { int32 a = 1; string b = 2; }")
V3 = parse(P3 + "message M { string b = 2; }")
REUSED = parse(P3 + "message M { string b = 2; string a = 1; }")  # number 1 again, a string
PACKED = parse(P3 + "message M { oneof o { int32 a = 1; string b = 2; } }")

MERGED = ('{errorType:"MULTIPLE_FIELDS_MOVED_TO_ONEOF", description:"Multiple fields in the '
          "oneof at path '#/M/o' in the %s schema are outside a oneof in the %s schema\"}")
KIND = ('{errorType:"FIELD_SCALAR_KIND_CHANGED", description:"The kind of a SCALAR field at '
        "path '#/M/1' in the %s schema does not match its kind in the %s schema\"}")


def test_backward_forward_and_full() -> None:
    # backward: the new schema reads data written with the latest one
    assert check_compatibility("BACKWARD", PACKED, [V2]) == [MERGED % ("new", "old")]
    assert check_compatibility("BACKWARD", V2, [V1]) == []
    # forward: the latest reads data written with the new one; a oneof split up is fine
    assert check_compatibility("FORWARD", V2, [PACKED]) == [MERGED % ("old", "new")]
    assert check_compatibility("FORWARD", PACKED, [V2]) == []
    # full: both, what the old schema cannot read first
    resigned = parse(P3 + "message M { sint32 a = 1; string b = 2; }")
    assert check_compatibility("FULL", resigned, [V2]) == [KIND % ("old", "new"),
                                                          KIND % ("new", "old")]
    assert check_compatibility("FULL", V2, [V1]) == []
    assert check_compatibility("NONE", resigned, [V2]) == []
    with pytest.raises(ValueError, match="Invalid compatibility level"):
        check_compatibility("SIDEWAYS", V2, [V1])


def test_transitive_levels_check_every_version() -> None:
    """A field number reused with another type: fine against the latest version (which
    removed it), not against the one before."""
    existing = [V1, V2, V3]
    for level in ("BACKWARD", "FORWARD", "FULL"):
        assert check_compatibility(level, REUSED, existing) == []
    assert check_compatibility("BACKWARD_TRANSITIVE", REUSED, existing) == [KIND % ("new", "old")]
    assert check_compatibility("FORWARD_TRANSITIVE", REUSED, existing) == [KIND % ("old", "new")]
    assert check_compatibility("FULL_TRANSITIVE", REUSED, existing) == [KIND % ("old", "new"),
                                                                       KIND % ("new", "old")]
    assert check_compatibility("FULL_TRANSITIVE", V3, [V1, V2]) == []


def test_incompatibilities_dispatches_protobuf() -> None:
    old = parse_schema("PROTOBUF", P3 + "message M { int32 a = 1; }")
    new = parse_schema("PROTOBUF", P3 + "message M { string a = 1; }")
    assert incompatibilities("BACKWARD", new, [old]) == [KIND % ("new", "old")]
    avro = parse_schema("AVRO", '"string"')
    assert "TYPE_MISMATCH" in incompatibilities("BACKWARD", new, [avro])[0]
