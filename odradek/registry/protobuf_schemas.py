"""Protobuf schemas, as Confluent's registry takes them: .proto text (proto2 or proto3), or a
base64-encoded serialized FileDescriptorProto (what confluent-kafka's ProtobufSerializer
registers). Either becomes one model, a FileDescriptorProto with every type name resolved,
checked by building it in a DescriptorPool; the registry stores and answers the canonical
.proto text rendered from it, so a schema registered either way has one text and one id.

Imports resolve through the schema's references (a reference's name is the import path), or,
for google/protobuf/*.proto, to the well-known files the protobuf package ships, with no
reference (as Confluent does). The compatibility rules are protobuf_compatibility.py's.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from antlr4.error.ErrorListener import ErrorListener
from google.protobuf import (
    any_pb2,
    api_pb2,
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    empty_pb2,
    field_mask_pb2,
    source_context_pb2,
    struct_pb2,
    timestamp_pb2,
    type_pb2,
    wrappers_pb2,
)
from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet
from proto_schema_parser import ast
from proto_schema_parser.parser import Parser

from odradek.registry.avro_compatibility import InvalidSchemaError
from odradek.registry.state import Reference

FileProto = descriptor_pb2.FileDescriptorProto
MessageProto = descriptor_pb2.DescriptorProto
EnumProto = descriptor_pb2.EnumDescriptorProto
FieldProto = descriptor_pb2.FieldDescriptorProto

MAIN_FILE = "default"  # the schema's own file name, Confluent's default name for it
WELL_KNOWN: dict[str, FileProto] = {
    module.DESCRIPTOR.name: FileProto.FromString(module.DESCRIPTOR.serialized_pb)
    for module in (any_pb2, api_pb2, descriptor_pb2, duration_pb2, empty_pb2, field_mask_pb2,
                   source_context_pb2, struct_pb2, timestamp_pb2, type_pb2, wrappers_pb2)}

SCALARS = {
    "double": FieldProto.TYPE_DOUBLE, "float": FieldProto.TYPE_FLOAT,
    "int64": FieldProto.TYPE_INT64, "uint64": FieldProto.TYPE_UINT64,
    "int32": FieldProto.TYPE_INT32, "fixed64": FieldProto.TYPE_FIXED64,
    "fixed32": FieldProto.TYPE_FIXED32, "bool": FieldProto.TYPE_BOOL,
    "string": FieldProto.TYPE_STRING, "bytes": FieldProto.TYPE_BYTES,
    "uint32": FieldProto.TYPE_UINT32, "sfixed32": FieldProto.TYPE_SFIXED32,
    "sfixed64": FieldProto.TYPE_SFIXED64, "sint32": FieldProto.TYPE_SINT32,
    "sint64": FieldProto.TYPE_SINT64,
}
SCALAR_NAMES = {number: name for name, number in SCALARS.items()}
MAX_FIELD_NUMBER = 536_870_911
MAX_ENUM_NUMBER = 2_147_483_647
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]+")


@dataclass(frozen=True, slots=True)
class Dependency:
    """An imported file: a referenced schema's, or a well-known one (no reference)."""

    file: FileProto  # named by its import path
    reference: Reference | None


@dataclass(frozen=True, slots=True)
class ProtobufSchema:
    file: FileProto  # named MAIN_FILE, type names fully qualified
    dependencies: Mapping[str, Dependency]  # every file it imports, transitively
    text: str  # canonical .proto text

    def serialized(self) -> str:
        """The FileDescriptorProto in base64, as `?format=serialized` answers it."""
        return base64.standard_b64encode(self.file.SerializeToString()).decode("ascii")


def parse(text: str, imports: Mapping[str, Dependency]) -> ProtobufSchema:
    """Parses .proto text or a base64 FileDescriptorProto whose imports are `imports` (by
    import path) or well-known files; InvalidSchemaError says what is wrong with it."""
    if _BASE64.fullmatch(text):
        # A descriptor is rendered as text and that text parsed: what is stored is what the
        # schema is, whichever form it came in.
        text = _render_descriptor(_decode(text))
    file = _Builder(_parse_text(text), imports).build()
    dependencies = _dependencies(file, imports)
    _check(file, dependencies)
    return ProtobufSchema(file, dependencies, render(file))


def dependency(name: str, schema: ProtobufSchema, reference: Reference) -> Dependency:
    """A referenced schema as the file another imports by `name`."""
    file = FileProto()
    file.CopyFrom(schema.file)
    file.name = name
    return Dependency(file, reference)


# ---- reading --------------------------------------------------------------------------------


class _Raise(ErrorListener):
    def syntaxError(self, recognizer: Any, symbol: Any, line: int, column: int, msg: str,
                    e: Any) -> None:
        raise InvalidSchemaError(f"not a .proto file: line {line}:{column + 1}: {msg}")


def _quiet(recognizer: Any) -> None:
    recognizer.removeErrorListeners()  # the default one prints to stderr and goes on
    recognizer.addErrorListener(_Raise())


def _parse_text(text: str) -> ast.File:
    try:
        return Parser(setup_lexer=_quiet, setup_parser=_quiet).parse(text)
    except InvalidSchemaError:
        raise
    except (AttributeError, ValueError) as e:  # what a half-parsed tree can throw
        raise InvalidSchemaError(f"not a .proto file: {e}") from None


def _decode(text: str) -> FileProto:
    try:
        return FileProto.FromString(base64.b64decode("".join(text.split()), validate=True))
    except (binascii.Error, DecodeError) as e:
        raise InvalidSchemaError(f"neither .proto text nor a serialized FileDescriptorProto: "
                                 f"{e}") from None


def _render_descriptor(file: FileProto) -> str:
    try:
        return render(file)
    except InvalidSchemaError:
        raise
    except (KeyError, IndexError, ValueError) as e:  # a type or oneof that is not there
        raise InvalidSchemaError(f"a malformed FileDescriptorProto: {e!r}") from None


def _dependencies(file: FileProto, imports: Mapping[str, Dependency]
                  ) -> dict[str, Dependency]:
    found: dict[str, Dependency] = {}

    def visit(names: Iterable[str]) -> None:
        for name in names:
            if name in found:
                continue
            if name in imports:
                found[name] = imports[name]
            elif name in WELL_KNOWN:
                found[name] = Dependency(WELL_KNOWN[name], None)
            else:
                raise InvalidSchemaError(f"import \"{name}\" is neither a well-known file nor "
                                         "the name of one of the schema's references")
            visit(found[name].file.dependency)
    visit(file.dependency)
    return found


def _check(file: FileProto, dependencies: Mapping[str, Dependency]) -> None:
    """protobuf's own checks (numbers, names, types): the file built into a DescriptorPool."""
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(proto: FileProto) -> None:
        for name in proto.dependency:
            if name not in added:
                added.add(name)
                add(dependencies[name].file)
        pool.AddSerializedFile(proto.SerializeToString())
    try:
        add(file)
    except (TypeError, ValueError, KeyError) as e:
        raise InvalidSchemaError(str(e)) from None


def _ranges(texts: Iterable[str], maximum: int, end_offset: int) -> list[tuple[int, int]]:
    """`1`, `2 to 5`, `10 to max` as (start, end); end exclusive when end_offset is 1."""
    found = []
    for text in texts:
        low, _, high = (part.strip() for part in text.partition(" to "))
        try:
            start = int(low, 0)
            end = maximum if high == "max" else int(high or low, 0)
        except ValueError:
            raise InvalidSchemaError(f"bad range {text!r}") from None
        found.append((start, end + end_offset))
    return found


_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
            "\\": "\\", "'": "'", '"': '"', "?": "?"}
_ESCAPE = re.compile(r"\\(x[0-9A-Fa-f]{1,2}|[0-7]{1,3}|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|.)")


def _unescape(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        if code[0] in "xuU":
            return chr(int(code[1:], 16))
        if code[0] in "01234567":
            return chr(int(code, 8))
        return _ESCAPES.get(code, code)
    return _ESCAPE.sub(one, text)


def _camel(name: str) -> str:
    """protoc's json_name (and map entry names, capitalized): foo_bar -> fooBar."""
    parts = name.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


class _Builder:
    """The FileDescriptorProto of a parsed .proto file, its type names resolved as protoc
    resolves them (innermost scope first)."""

    def __init__(self, tree: ast.File, imports: Mapping[str, Dependency]) -> None:
        if tree.edition is not None:
            raise InvalidSchemaError("Protobuf editions are not supported: proto2 or proto3")
        self.tree = tree
        self.syntax = tree.syntax or "proto2"
        if self.syntax not in ("proto2", "proto3"):
            raise InvalidSchemaError(f"unknown syntax {self.syntax!r}")
        self.imports = imports
        self.package = next((e.name for e in tree.file_elements if isinstance(e, ast.Package)),
                            "")
        self.types: dict[str, int] = {}  # full name: TYPE_MESSAGE or TYPE_ENUM
        self.namespaces: set[str] = set()  # packages and their prefixes

    def build(self) -> FileProto:
        file = FileProto(name=MAIN_FILE, package=self.package)
        if self.syntax == "proto3":
            file.syntax = "proto3"
        for element in self.tree.file_elements:
            if isinstance(element, ast.Import):
                if element.public:
                    file.public_dependency.append(len(file.dependency))
                if element.weak:
                    file.weak_dependency.append(len(file.dependency))
                file.dependency.append(element.name)
        self._declare(self.package, self.tree.file_elements)
        for dep in _dependencies(file, self.imports).values():
            self._declare_file(dep.file)
        for element in self.tree.file_elements:
            if isinstance(element, ast.Message):
                file.message_type.append(self._message(element, self.package))
            elif isinstance(element, ast.Enum):
                file.enum_type.append(self._enum(element))
            elif isinstance(element, ast.Service):
                file.service.append(self._service(element))
            elif isinstance(element, ast.Option):
                _set_options(file.options, [element], "the file")
            elif isinstance(element, ast.Extension):
                raise InvalidSchemaError("extensions (extend) are not supported")
        return file

    # -- names --

    def _declare(self, scope: str, elements: Iterable[Any]) -> None:
        for part in _prefixes(scope):
            self.namespaces.add(part)
        for element in elements:
            if isinstance(element, ast.Message | ast.Enum):
                name = f"{scope}.{element.name}" if scope else element.name
                if name in self.types:
                    raise InvalidSchemaError(f"{name} is declared twice")
                is_message = isinstance(element, ast.Message)
                self.types[name] = FieldProto.TYPE_MESSAGE if is_message else FieldProto.TYPE_ENUM
                if is_message:
                    self._declare(name, element.elements)

    def _declare_file(self, file: FileProto) -> None:
        self.namespaces.update(_prefixes(file.package))

        def walk(scope: str, messages: Iterable[MessageProto], enums: Iterable[EnumProto]
                 ) -> None:
            for enum in enums:
                self.types.setdefault(f"{scope}.{enum.name}".lstrip("."), FieldProto.TYPE_ENUM)
            for message in messages:
                name = f"{scope}.{message.name}".lstrip(".")
                self.types.setdefault(name, FieldProto.TYPE_MESSAGE)
                walk(name, message.nested_type, message.enum_type)
        walk(file.package, file.message_type, file.enum_type)

    def _resolve(self, name: str, scope: str) -> tuple[str, int]:
        """(.full.name, TYPE_MESSAGE or TYPE_ENUM) of a type named in `scope`."""
        if name.startswith("."):
            if name[1:] in self.types:
                return name, self.types[name[1:]]
        else:
            first = name.split(".")[0]
            parts = scope.split(".") if scope else []
            for i in range(len(parts), -1, -1):
                outer = ".".join(parts[:i])
                candidate = f"{outer}.{first}" if outer else first
                full = f"{outer}.{name}" if outer else name
                if (candidate in self.types or candidate in self.namespaces) \
                        and full in self.types:
                    return "." + full, self.types[full]
        raise InvalidSchemaError(f"type {name} (in {scope or 'the file'}) is not defined")

    # -- elements --

    def _message(self, element: ast.Message, scope: str) -> MessageProto:
        name = f"{scope}.{element.name}" if scope else element.name
        message = MessageProto(name=element.name)
        optional3: list[FieldProto] = []  # proto3 `optional` fields: a synthetic oneof each
        for item in element.elements:
            if isinstance(item, ast.Field):
                field = self._field(item, name)
                message.field.append(field)
                if field.proto3_optional:
                    optional3.append(message.field[-1])
            elif isinstance(item, ast.MapField):
                message.field.append(self._map(item, name, message))
            elif isinstance(item, ast.OneOf):
                index = len(message.oneof_decl)
                oneof = message.oneof_decl.add(name=item.name)
                for member in item.elements:
                    if isinstance(member, ast.Field):
                        if member.cardinality is not None:
                            raise InvalidSchemaError(f"oneof field {member.name} has a label")
                        field = self._field(member, name)
                        field.oneof_index = index
                        message.field.append(field)
                    elif isinstance(member, ast.Option):
                        _set_options(oneof.options, [member], f"oneof {item.name}")
                    elif isinstance(member, ast.Group):
                        raise InvalidSchemaError("groups are not supported")
            elif isinstance(item, ast.Message):
                message.nested_type.append(self._message(item, name))
            elif isinstance(item, ast.Enum):
                message.enum_type.append(self._enum(item))
            elif isinstance(item, ast.Option):
                _set_options(message.options, [item], f"message {name}")
            elif isinstance(item, ast.Reserved):
                for start, end in _ranges(item.ranges, MAX_FIELD_NUMBER, 1):
                    message.reserved_range.add(start=start, end=end)
                message.reserved_name.extend(item.names)
            elif isinstance(item, ast.ExtensionRange):
                for start, end in _ranges(item.ranges, MAX_FIELD_NUMBER, 1):
                    extension_range = message.extension_range.add(start=start, end=end)
                    _set_options(extension_range.options, item.options, "extensions")
            elif isinstance(item, ast.Group):
                raise InvalidSchemaError("groups are not supported")
            elif isinstance(item, ast.Extension):
                raise InvalidSchemaError("extensions (extend) are not supported")
        for field in optional3:  # after the real oneofs, as protoc adds them
            field.oneof_index = len(message.oneof_decl)
            message.oneof_decl.add(name="_" + field.name)
        return message

    def _field(self, item: ast.Field, scope: str) -> FieldProto:
        field = FieldProto(name=item.name, number=item.number)
        cardinality = item.cardinality
        if cardinality == ast.FieldCardinality.REPEATED:
            field.label = FieldProto.LABEL_REPEATED
        elif cardinality == ast.FieldCardinality.REQUIRED:
            if self.syntax == "proto3":
                raise InvalidSchemaError(f"required field {item.name}: proto3 has none")
            field.label = FieldProto.LABEL_REQUIRED
        else:
            field.label = FieldProto.LABEL_OPTIONAL
            if cardinality == ast.FieldCardinality.OPTIONAL and self.syntax == "proto3":
                field.proto3_optional = True
        self._set_type(field, item.type, scope)
        options = []
        for option in item.options:
            if option.name == "default":
                field.default_value = _default_text(field, option.value)
            elif option.name == "json_name":
                field.json_name = _unescape(str(option.value))
            else:
                options.append(option)
        _set_options(field.options, options, f"field {item.name}")
        return field

    def _set_type(self, field: FieldProto, type_name: str, scope: str) -> None:
        if type_name in SCALARS:
            field.type = SCALARS[type_name]
        else:
            field.type_name, field.type = self._resolve(type_name, scope)

    def _map(self, item: ast.MapField, scope: str, message: MessageProto) -> FieldProto:
        """A map field: a repeated field of a nested XxxEntry message, as protoc makes it (the
        grammar allows only integer, bool and string keys)."""
        entry_name = (_camel(item.name)[:1].upper() + _camel(item.name)[1:]) + "Entry"
        entry = message.nested_type.add(name=entry_name)
        entry.options.map_entry = True
        key = entry.field.add(name="key", number=1, label=FieldProto.LABEL_OPTIONAL)
        self._set_type(key, item.key_type, scope)
        value = entry.field.add(name="value", number=2, label=FieldProto.LABEL_OPTIONAL)
        self._set_type(value, item.value_type, scope)
        field = FieldProto(name=item.name, number=item.number,
                           label=FieldProto.LABEL_REPEATED, type=FieldProto.TYPE_MESSAGE,
                           type_name=f".{scope}.{entry_name}")
        _set_options(field.options, item.options, f"field {item.name}")
        return field

    def _enum(self, element: ast.Enum) -> EnumProto:
        enum = EnumProto(name=element.name)
        for item in element.elements:
            if isinstance(item, ast.EnumValue):
                value = enum.value.add(name=item.name, number=item.number)
                _set_options(value.options, item.options, f"enum value {item.name}")
            elif isinstance(item, ast.Option):
                _set_options(enum.options, [item], f"enum {element.name}")
            elif isinstance(item, ast.EnumReserved):
                for start, end in _ranges(item.ranges, MAX_ENUM_NUMBER, 0):
                    enum.reserved_range.add(start=start, end=end)
                enum.reserved_name.extend(item.names)
        return enum

    def _service(self, element: ast.Service) -> descriptor_pb2.ServiceDescriptorProto:
        service = descriptor_pb2.ServiceDescriptorProto(name=element.name)
        for item in element.elements:
            if isinstance(item, ast.Method):
                method = service.method.add(
                    name=item.name,
                    input_type=self._resolve(item.input_type.type, self.package)[0],
                    output_type=self._resolve(item.output_type.type, self.package)[0],
                    client_streaming=item.input_type.stream,
                    server_streaming=item.output_type.stream)
                _set_options(method.options, [o for o in item.elements
                                              if isinstance(o, ast.Option)],
                             f"rpc {item.name}")
            elif isinstance(item, ast.Option):
                _set_options(service.options, [item], f"service {element.name}")
        return service


def _prefixes(name: str) -> list[str]:
    parts = name.split(".") if name else []
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _default_text(field: FieldProto, value: Any) -> str:
    """A default as FieldDescriptorProto.default_value holds it."""
    if isinstance(value, ast.Identifier):
        return value.name
    if isinstance(value, bool):
        return "true" if value else "false"
    if field.type == FieldProto.TYPE_STRING:
        return _unescape(str(value))
    if field.type == FieldProto.TYPE_BYTES:
        return str(value)  # C-escaped, as the descriptor holds it
    return str(value)


def _set_options(options: Message, items: Iterable[ast.Option], where: str) -> None:
    for item in items:
        name = item.name
        if name.startswith("("):
            raise InvalidSchemaError(f"custom option {name} on {where} is not supported")
        field = options.DESCRIPTOR.fields_by_name.get(name)
        if field is None or field.message_type is not None or \
                field.is_repeated:
            raise InvalidSchemaError(f"unknown or unsupported option {name} on {where}")
        value = item.value
        if field.enum_type is not None:
            names = field.enum_type.values_by_name
            if not isinstance(value, ast.Identifier) or value.name not in names:
                raise InvalidSchemaError(f"option {name} on {where}: one of {', '.join(names)}")
            value = names[value.name].number
        elif field.type == field.TYPE_STRING:
            value = _unescape(str(value))
        elif isinstance(value, ast.Identifier | ast.MessageLiteral | list):
            raise InvalidSchemaError(f"option {name} on {where}: bad value")
        try:
            setattr(options, name, value)
        except (TypeError, ValueError) as e:
            raise InvalidSchemaError(f"option {name} on {where}: {e}") from None


# ---- rendering ------------------------------------------------------------------------------


def render(file: FileProto) -> str:
    """Canonical .proto text: type names fully qualified, declarations in the model's order,
    two-space indents, json_name only where it is not the default."""
    syntax = file.syntax or "proto2"
    if syntax not in ("proto2", "proto3"):
        raise InvalidSchemaError(f"Protobuf {syntax} is not supported: proto2 or proto3")
    if file.extension:
        raise InvalidSchemaError("extensions (extend) are not supported")
    lines = [f'syntax = "{syntax}";']
    if file.package:
        lines.append(f"package {file.package};")
    if file.dependency:
        lines.append("")
        for i, name in enumerate(file.dependency):
            kind = ("public " if i in file.public_dependency
                    else "weak " if i in file.weak_dependency else "")
            lines.append(f"import {kind}{_quote(name)};")
    options = _option_lines(file.options, "the file")
    if options:
        lines.append("")
        lines.extend(options)
    writer = _Writer(syntax == "proto3", file.package)
    for message in file.message_type:
        lines.append("")
        lines.extend(writer.message(message, file.package))
    for enum in file.enum_type:
        lines.append("")
        lines.extend(writer.enum(enum))
    for service in file.service:
        lines.append("")
        lines.extend(writer.service(service))
    return "\n".join(lines) + "\n"


def _indent(lines: list[str]) -> list[str]:
    return ["  " + line if line else line for line in lines]


class _Writer:
    def __init__(self, proto3: bool, package: str) -> None:
        self.proto3 = proto3
        self.package = package

    def message(self, message: MessageProto, scope: str) -> list[str]:
        name = f"{scope}.{message.name}" if scope else message.name
        entries = {f".{name}.{m.name}": m for m in message.nested_type if m.options.map_entry}
        body = _option_lines(message.options, f"message {name}")
        for reserved in message.reserved_range:  # end exclusive
            body.append(f"reserved {_range_text(reserved.start, reserved.end - 1)};")
        if message.reserved_name:
            body.append(f"reserved {', '.join(_quote(n) for n in message.reserved_name)};")
        done: set[int] = set()
        for field in message.field:
            synthetic = field.proto3_optional
            if field.HasField("oneof_index") and not synthetic:
                index = field.oneof_index
                if index in done:
                    continue
                done.add(index)
                oneof = message.oneof_decl[index]
                body.append(f"oneof {oneof.name} {{")
                members = [f for f in message.field
                           if f.HasField("oneof_index") and f.oneof_index == index]
                body.extend(_indent(_option_lines(oneof.options, f"oneof {oneof.name}")))
                body.extend(_indent([self.field(f, entries, in_oneof=True) for f in members]))
                body.append("}")
            else:
                body.append(self.field(field, entries, in_oneof=False))
        if message.extension:
            raise InvalidSchemaError("extensions (extend) are not supported")
        for extension_range in message.extension_range:
            options = _compact_options(extension_range.options, "extensions", [])
            numbers = _range_text(extension_range.start, extension_range.end - 1)
            body.append(f"extensions {numbers}{options};")
        for nested in message.nested_type:
            if nested.options.map_entry:
                continue
            body.append("")
            body.extend(self.message(nested, name))
        for enum in message.enum_type:
            body.append("")
            body.extend(self.enum(enum))
        return [f"message {message.name} {{", *_indent(body), "}"]

    def field(self, field: FieldProto, entries: dict[str, MessageProto], in_oneof: bool
              ) -> str:
        if field.type == FieldProto.TYPE_GROUP:
            raise InvalidSchemaError("groups are not supported")
        entry = entries.get(field.type_name)
        if entry is not None:
            key, value = sorted(entry.field, key=lambda f: f.number)
            kind = f"map<{_type_text(key)}, {_type_text(value)}>"
            label = ""
        else:
            kind = _type_text(field)
            label = "" if in_oneof else self._label(field)
        extra = []
        if field.HasField("default_value"):
            extra.append(f"default = {_default_render(field)}")
        if field.json_name and field.json_name != _camel(field.name):
            extra.append(f"json_name = {_quote(field.json_name)}")
        options = _compact_options(field.options, f"field {field.name}", extra)
        return f"{label}{kind} {field.name} = {field.number}{options};"

    def _label(self, field: FieldProto) -> str:
        if field.label == FieldProto.LABEL_REPEATED:
            return "repeated "
        if field.label == FieldProto.LABEL_REQUIRED:
            return "required "
        if not self.proto3 or field.proto3_optional:
            return "optional "
        return ""

    def enum(self, enum: EnumProto) -> list[str]:
        body = _option_lines(enum.options, f"enum {enum.name}")
        for reserved in enum.reserved_range:  # end inclusive
            body.append(f"reserved {_range_text(reserved.start, reserved.end, MAX_ENUM_NUMBER)};")
        if enum.reserved_name:
            body.append(f"reserved {', '.join(_quote(n) for n in enum.reserved_name)};")
        for value in enum.value:
            options = _compact_options(value.options, f"enum value {value.name}", [])
            body.append(f"{value.name} = {value.number}{options};")
        return [f"enum {enum.name} {{", *_indent(body), "}"]

    def service(self, service: descriptor_pb2.ServiceDescriptorProto) -> list[str]:
        body = _option_lines(service.options, f"service {service.name}")
        for method in service.method:
            streams = ("stream " if method.client_streaming else "",
                       "stream " if method.server_streaming else "")
            head = (f"rpc {method.name}({streams[0]}{method.input_type}) returns "
                    f"({streams[1]}{method.output_type})")
            options = _option_lines(method.options, f"rpc {method.name}")
            body.extend([f"{head} {{", *_indent(options), "}"] if options else [f"{head};"])
        return [f"service {service.name} {{", *_indent(body), "}"]


def _type_text(field: FieldProto) -> str:
    return field.type_name if field.type_name else SCALAR_NAMES[field.type]


def _range_text(start: int, end: int, maximum: int = MAX_FIELD_NUMBER) -> str:
    if start == end:
        return str(start)
    return f"{start} to {'max' if end == maximum else end}"


def _option_items(options: Message, where: str) -> list[str]:
    if len(UnknownFieldSet(options)):
        raise InvalidSchemaError(f"custom options on {where} are not supported")
    items = []
    for field, value in options.ListFields():
        if field.message_type is not None or field.is_repeated:
            raise InvalidSchemaError(f"option {field.name} on {where} is not supported")
        items.append(f"{field.name} = {_value_text(field, value)}")
    return items


def _option_lines(options: Message, where: str) -> list[str]:
    return [f"option {item};" for item in _option_items(options, where)]


def _compact_options(options: Message, where: str, extra: list[str]) -> str:
    items = extra + _option_items(options, where)
    return f" [{', '.join(items)}]" if items else ""


def _value_text(field: Any, value: Any) -> str:
    if field.enum_type is not None:
        return str(field.enum_type.values_by_number[value].name)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _quote(value)
    return repr(value) if isinstance(value, float) else str(value)


def _default_render(field: FieldProto) -> str:
    if field.type == FieldProto.TYPE_STRING:
        return _quote(field.default_value)
    if field.type == FieldProto.TYPE_BYTES:
        return f'"{field.default_value}"'  # C-escaped already
    return field.default_value


def _quote(text: str) -> str:
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\{ord(char):03o}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'
