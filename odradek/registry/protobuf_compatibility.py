"""Confluent's Protobuf compatibility rules (io.confluent.kafka.schemaregistry.protobuf.diff:
SchemaDiff, MessageSchemaDiff, FieldSchemaDiff, EnumSchemaDiff), over our model: the
FileDescriptorProtos of protobuf_schemas.py, whose type names are resolved already.

A diff lists every Difference between an original (the writer's) and an update (the reader's)
schema, each a type and a path (#/Message/field-number, #/Message/oneof/number, #/Enum/number);
the update can read data written with the original when each is one of COMPATIBLE_CHANGES.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from odradek.registry.compatibility import first_incompatibility
from odradek.registry.protobuf_schemas import (
    EnumProto,
    FieldProto,
    FileProto,
    MessageProto,
    ProtobufSchema,
)

COMPATIBLE_CHANGES = frozenset({
    "MESSAGE_ADDED", "MESSAGE_MOVED", "ENUM_ADDED", "ENUM_REMOVED", "ENUM_CONST_ADDED",
    "ENUM_CONST_CHANGED", "ENUM_CONST_REMOVED", "FIELD_ADDED", "FIELD_REMOVED",
    "FIELD_NAME_CHANGED", "FIELD_STRING_OR_BYTES_LABEL_CHANGED", "ONEOF_ADDED", "ONEOF_REMOVED",
    "ONEOF_FIELD_ADDED", "ONEOF_FIELD_MOVED_TO_TOP_LEVEL",
})

# Difference.error()'s texts: {reader} and {writer} are the schemas called "new" and "old".
_DESCRIPTIONS = {
    "PACKAGE_CHANGED": "The package at '{path}' in the {reader} schema does not match the "
                       "package in the {writer} schema",
    "MESSAGE_REMOVED": "The {reader} schema is missing a MESSAGE type at path '{path}' in the "
                       "{writer} schema",
    "FIELD_KIND_CHANGED": "The type of a field at path '{path}' in the {reader} schema does "
                          "not match the {writer} schema",
    "FIELD_SCALAR_KIND_CHANGED": "The kind of a SCALAR field at path '{path}' in the {reader} "
                                 "schema does not match its kind in the {writer} schema",
    "FIELD_NAMED_TYPE_CHANGED": "The type of a MESSAGE field at path '{path}' in the {reader} "
                                "schema does not match its type in the {writer} schema",
    "FIELD_NUMERIC_LABEL_CHANGED": "The label for a NUMERIC field at path '{path}' in the "
                                   "{reader} schema does not match its label in the {writer} "
                                   "schema",
    "REQUIRED_FIELD_ADDED": "A required field  at path '{path}' in the {reader} schema is "
                            "missing in the {writer} schema",
    "REQUIRED_FIELD_REMOVED": "The {reader} schema is missing a required field at path: "
                              "'{path}' in the {writer} schema",
    "ONEOF_FIELD_REMOVED": "The {reader} schema is missing a oneof field at path '{path}' in "
                           "the {writer} schema",
    "ONEOF_FIELD_MOVED_TO_TOP_LEVEL": "The oneof field at path '{path}' in the {reader} schema "
                                      "was moved out of its oneof to a top-level field in the "
                                      "{writer} schema",
    "MULTIPLE_FIELDS_MOVED_TO_ONEOF": "Multiple fields in the oneof at path '{path}' in the "
                                      "{reader} schema are outside a oneof in the {writer} "
                                      "schema",
    "FIELD_MOVED_TO_EXISTING_ONEOF": "A field in the oneof at path '{path}' in the {reader} "
                                     "schema is outside an existing oneof in the {writer} "
                                     "schema",
}

# FieldSchemaDiff.scalarKind: the scalars that read each other's data (enums are numbers).
_SCALAR_KINDS = {
    FieldProto.TYPE_INT32: "GENERAL_NUMBER", FieldProto.TYPE_INT64: "GENERAL_NUMBER",
    FieldProto.TYPE_UINT32: "GENERAL_NUMBER", FieldProto.TYPE_UINT64: "GENERAL_NUMBER",
    FieldProto.TYPE_BOOL: "GENERAL_NUMBER", FieldProto.TYPE_ENUM: "GENERAL_NUMBER",
    FieldProto.TYPE_SINT32: "SIGNED_NUMBER", FieldProto.TYPE_SINT64: "SIGNED_NUMBER",
    FieldProto.TYPE_STRING: "STRING_OR_BYTES", FieldProto.TYPE_BYTES: "STRING_OR_BYTES",
    FieldProto.TYPE_FIXED32: "FIXED32", FieldProto.TYPE_SFIXED32: "FIXED32",
    FieldProto.TYPE_FIXED64: "FIXED64", FieldProto.TYPE_SFIXED64: "FIXED64",
    FieldProto.TYPE_FLOAT: "FLOAT", FieldProto.TYPE_DOUBLE: "DOUBLE",
}
_NUMERIC = {"GENERAL_NUMBER", "SIGNED_NUMBER", "FIXED32", "FIXED64", "FLOAT", "DOUBLE"}
_LOCAL = ("", -1)  # the schema's own types: Confluent's dummy reference for them


@dataclass(frozen=True, slots=True)
class Difference:
    type: str
    path: str

    def describe(self, reader: str = "new", writer: str = "old") -> str:
        """Confluent's Difference.toString(), the schemas called `reader` and `writer`."""
        template = _DESCRIPTIONS.get(self.type, "")
        description = template.format(path=self.path, reader=reader, writer=writer)
        return f'{{errorType:"{self.type}", description:"{description}"}}'

    def __str__(self) -> str:
        return f"{self.type} {self.path}"


@dataclass(frozen=True, slots=True)
class _Type:
    package: str
    reference: tuple[str, int] | None  # (subject, version); None: a well-known type
    proto: MessageProto | EnumProto


@dataclass(slots=True)
class _Context:
    types: tuple[dict[str, _Type], dict[str, _Type]]  # the original's, the update's
    proto3: set[int]  # the messages declared in proto3 files (by id), either side's
    in_progress: set[int] = field(default_factory=set)  # messages being compared: recursion
    path: list[str] = field(default_factory=list)
    differences: list[Difference] = field(default_factory=list)

    def add(self, kind: str, *more: str) -> None:
        self.differences.append(Difference(kind, "#/" + "/".join([*self.path, *more])))

    def sub(self, path: list[str]) -> _Context:
        return _Context(self.types, self.proto3, set(self.in_progress), path)

    def compatible(self) -> bool:
        return all(d.type in COMPATIBLE_CHANGES for d in self.differences)


def differences(original: ProtobufSchema, update: ProtobufSchema) -> list[Difference]:
    """Every difference from `original` to `update` (SchemaDiff.compare)."""
    proto3: set[int] = set()
    ctx = _Context((_types(original, proto3), _types(update, proto3)), proto3)
    if original.file.package != update.file.package:
        ctx.add("PACKAGE_CHANGED")
    _compare_types(ctx, original.file.message_type, original.file.enum_type,
                   update.file.message_type, update.file.enum_type)
    return ctx.differences


def check_compatibility(level: str, new: ProtobufSchema, existing: Sequence[ProtobufSchema]
                        ) -> list[str]:
    """Confluent's messages saying why `new` may not follow `existing` (oldest first, checked
    newest first) under a compatibility level; empty when it may. ValueError for an unknown
    level."""
    found = first_incompatibility(
        level, len(existing),
        lambda i: _problems(new, existing[i], "old", "new"),  # the old schema reads the new
        lambda i: _problems(existing[i], new, "new", "old"))  # the new schema reads the old
    return found[1] if found else []


def _problems(writer: ProtobufSchema, reader: ProtobufSchema, reader_label: str,
              writer_label: str) -> list[str]:
    return [d.describe(reader_label, writer_label) for d in differences(writer, reader)
            if d.type not in COMPATIBLE_CHANGES]


# ---- types ------------------------------------------------------------------------------------


def _types(schema: ProtobufSchema, proto3: set[int]) -> dict[str, _Type]:
    """Every message and enum the schema can name, by full name (Context.collectTypeInfo);
    the ids of those of proto3 files added to `proto3`."""
    found: dict[str, _Type] = {}

    def walk(file: FileProto, reference: tuple[str, int] | None) -> None:
        def visit(scope: str, messages: Iterable[MessageProto], enums: Iterable[EnumProto]
                  ) -> None:
            for message in messages:
                name = f"{scope}.{message.name}" if scope else message.name
                found[name] = _Type(file.package, reference, message)
                if file.syntax == "proto3":
                    proto3.add(id(message))
                visit(name, message.nested_type, message.enum_type)
            for enum in enums:
                name = f"{scope}.{enum.name}" if scope else enum.name
                found[name] = _Type(file.package, reference, enum)
        visit(file.package, file.message_type, file.enum_type)

    for dependency in schema.dependencies.values():
        ref = dependency.reference
        walk(dependency.file, (ref.subject, ref.version) if ref is not None else None)
    walk(schema.file, _LOCAL)
    return found


def _is_map(message: MessageProto) -> bool:
    return message.options.map_entry


# ---- messages and enums (SchemaDiff.compareTypeElements, MessageSchemaDiff) -------------------


def _compare_types(ctx: _Context, original_messages: Iterable[MessageProto],
                   original_enums: Iterable[EnumProto], update_messages: Iterable[MessageProto],
                   update_enums: Iterable[EnumProto]) -> None:
    # Map entries are no declarations of the .proto text: they are compared as map fields.
    originals = {m.name: (i, m) for i, m in
                 enumerate(m for m in original_messages if not _is_map(m))}
    updates = {m.name: (i, m) for i, m in
               enumerate(m for m in update_messages if not _is_map(m))}
    for name in [*originals, *(n for n in updates if n not in originals)]:
        ctx.path.append(name)
        if name not in updates:
            ctx.add("MESSAGE_REMOVED")
        elif name not in originals:
            ctx.add("MESSAGE_ADDED")
        else:
            _compare_messages(ctx, originals[name][1], updates[name][1])
            if originals[name][0] != updates[name][0]:
                # compatible: a record's message indexes are those of its own schema id
                ctx.add("MESSAGE_MOVED")
        ctx.path.pop()
    original_by_name = {e.name: e for e in original_enums}
    update_by_name = {e.name: e for e in update_enums}
    for name in [*original_by_name, *(n for n in update_by_name if n not in original_by_name)]:
        ctx.path.append(name)
        if name not in update_by_name:
            ctx.add("ENUM_REMOVED")
        elif name not in original_by_name:
            ctx.add("ENUM_ADDED")
        else:
            _compare_enums(ctx, original_by_name[name], update_by_name[name])
        ctx.path.pop()


def _compare_enums(ctx: _Context, original: EnumProto, update: EnumProto) -> None:
    original_by_number = {v.number: v.name for v in original.value}  # an alias: the last
    update_by_number = {v.number: v.name for v in update.value}
    for number in sorted(original_by_number.keys() | update_by_number.keys()):
        if number not in update_by_number:
            ctx.add("ENUM_CONST_REMOVED", str(number))
        elif number not in original_by_number:
            ctx.add("ENUM_CONST_ADDED", str(number))
        elif original_by_number[number] != update_by_number[number]:
            ctx.add("ENUM_CONST_CHANGED", str(number))


@dataclass(slots=True)
class _Fields:
    """A message's fields by number, the (real) oneof of each, the oneofs' members."""

    by_number: dict[int, FieldProto]
    oneof_of: dict[int, str]
    oneofs: dict[str, list[int]]

    @classmethod
    def of(cls, message: MessageProto) -> _Fields:
        # proto3 `optional` makes a synthetic oneof: its field is a top-level one
        synthetic = {f.oneof_index for f in message.field if f.proto3_optional}
        fields = cls({}, {}, {oneof.name: [] for i, oneof in enumerate(message.oneof_decl)
                              if i not in synthetic})
        for f in message.field:
            fields.by_number[f.number] = f
            if f.HasField("oneof_index") and f.oneof_index not in synthetic:
                oneof = message.oneof_decl[f.oneof_index].name
                fields.oneof_of[f.number] = oneof
                fields.oneofs[oneof].append(f.number)
        return fields


def _compare_messages(ctx: _Context, original: MessageProto, update: MessageProto) -> None:
    if id(original) not in ctx.in_progress:
        ctx.in_progress.add(id(original))
        _compare_fields(ctx, _Fields.of(original), _Fields.of(update),
                        (id(original) in ctx.proto3, id(update) in ctx.proto3))
        ctx.in_progress.discard(id(original))
    _compare_types(ctx, original.nested_type, original.enum_type, update.nested_type,
                   update.enum_type)


def _compare_fields(ctx: _Context, original: _Fields, update: _Fields,
                    proto3: tuple[bool, bool]) -> None:
    # A oneof removed none of whose members survive anywhere is deleted whole: compatible.
    deleted = {name for name, members in original.oneofs.items()
               if name not in update.oneofs
               and not any(n in update.by_number for n in members)}
    # Fields that were independent made mutually exclusive: each update oneof's surviving
    # members must come from one original oneof (or be one former top-level field).
    for name, members in update.oneofs.items():
        groups = set()
        moved_in = 0
        for number in members:
            if number in original.oneof_of:
                groups.add("oneof:" + original.oneof_of[number])
            elif number in original.by_number:
                groups.add(f"field:{number}")
                moved_in += 1
        if len(groups) > 1:
            kind = "MULTIPLE_FIELDS_MOVED_TO_ONEOF" if moved_in > 1 else \
                "FIELD_MOVED_TO_EXISTING_ONEOF"
            ctx.add(kind, name)
    for name in sorted(original.oneofs.keys() | update.oneofs.keys()):
        if name not in update.oneofs:
            ctx.add("ONEOF_REMOVED", name)
        elif name not in original.oneofs:
            ctx.add("ONEOF_ADDED", name)
    for number in sorted(original.by_number.keys() | update.by_number.keys()):
        old, new = original.by_number.get(number), update.by_number.get(number)
        old_oneof, new_oneof = original.oneof_of.get(number), update.oneof_of.get(number)
        if new is None:
            assert old is not None
            if old_oneof is not None:
                if old_oneof not in deleted:
                    ctx.add("ONEOF_FIELD_REMOVED", old_oneof, str(number))
            else:
                required = old.label == FieldProto.LABEL_REQUIRED
                ctx.add("REQUIRED_FIELD_REMOVED" if required else "FIELD_REMOVED", str(number))
        elif old is None:
            if new_oneof is not None:
                ctx.add("ONEOF_FIELD_ADDED", new_oneof, str(number))
            else:
                required = new.label == FieldProto.LABEL_REQUIRED
                ctx.add("REQUIRED_FIELD_ADDED" if required else "FIELD_ADDED", str(number))
        else:
            if old_oneof is not None and new_oneof is None:
                ctx.add("ONEOF_FIELD_MOVED_TO_TOP_LEVEL", str(number))
            where = [new_oneof, str(number)] if new_oneof is not None else [str(number)]
            ctx.path.extend(where)
            if old.name != new.name:
                ctx.add("FIELD_NAME_CHANGED")
            _compare_labels_and_types(ctx, _label(old, proto3[0]), _label(new, proto3[1]),
                                      old, new)
            del ctx.path[-len(where):]


# ---- fields (FieldSchemaDiff) -----------------------------------------------------------------


def _label(f: FieldProto, proto3: bool) -> str | None:
    """The label as written: proto3's implicit presence has none."""
    if f.label == FieldProto.LABEL_REPEATED:
        return "REPEATED"
    if f.label == FieldProto.LABEL_REQUIRED:
        return "REQUIRED"
    return "OPTIONAL" if f.proto3_optional or not proto3 else None


def _kind(ctx: _Context, f: FieldProto, side: int) -> str:
    if f.type != FieldProto.TYPE_MESSAGE:
        return "SCALAR"  # enums too
    found = ctx.types[side].get(f.type_name.lstrip("."))
    if found is not None and isinstance(found.proto, MessageProto) and _is_map(found.proto):
        return "MAP"
    return "MESSAGE"


def _compare_labels_and_types(ctx: _Context, original_label: str | None,
                              update_label: str | None, original: FieldProto,
                              update: FieldProto) -> None:
    original_kind, update_kind = _kind(ctx, original, 0), _kind(ctx, update, 1)
    if original_kind != update_kind:
        ctx.add("FIELD_KIND_CHANGED")
    elif original_kind == "SCALAR":
        scalar = _SCALAR_KINDS[original.type]
        if scalar != _SCALAR_KINDS[update.type]:
            ctx.add("FIELD_SCALAR_KIND_CHANGED")
        elif original_label is not None and update_label is not None \
                and original_label != update_label:
            if scalar in _NUMERIC:
                ctx.add("FIELD_NUMERIC_LABEL_CHANGED")
            elif scalar == "STRING_OR_BYTES":
                ctx.add("FIELD_STRING_OR_BYTES_LABEL_CHANGED")
    elif original_kind == "MESSAGE":
        _compare_message_types(ctx, original.type_name, update.type_name)
    else:  # MAP: the keys, then the values
        original_entry = ctx.types[0][original.type_name.lstrip(".")].proto
        update_entry = ctx.types[1][update.type_name.lstrip(".")].proto
        assert isinstance(original_entry, MessageProto) and isinstance(update_entry, MessageProto)
        for number in (1, 2):
            old = next(f for f in original_entry.field if f.number == number)
            new = next(f for f in update_entry.field if f.number == number)
            _compare_labels_and_types(ctx, None, None, old, new)


def _compare_message_types(ctx: _Context, original_name: str, update_name: str) -> None:
    original = ctx.types[0].get(original_name.lstrip("."))
    update = ctx.types[1].get(update_name.lstrip("."))
    if original is None or update is None:
        if original_name != update_name:
            ctx.add("FIELD_NAMED_TYPE_CHANGED")
        return
    original_local = _local(original_name.lstrip("."), original.package)
    if original_local != _local(update_name.lstrip("."), update.package):
        ctx.add("FIELD_NAMED_TYPE_CHANGED")
        return
    if original.reference is not None and original.reference == update.reference:
        return  # the same file on both sides (both local, or one subject's version)
    assert isinstance(original.proto, MessageProto) and isinstance(update.proto, MessageProto)
    sub = ctx.sub(original_local.split("."))
    _compare_messages(sub, original.proto, update.proto)
    ctx.differences.extend(sub.differences)
    if not sub.compatible():
        ctx.add("FIELD_NAMED_TYPE_CHANGED")


def _local(full_name: str, package: str) -> str:
    return full_name[len(package) + 1:] if package and full_name.startswith(package + ".") \
        else full_name

