"""Kafka's JSON message specifications, read into a small model the emitters walk.

The JSON files carry `//` comments, version ranges as strings ("3+", "0-6", "none"), and
fields whose type is a primitive, an array ("[]T"), or a struct defined inline or among
the message's commonStructs. Everything the generator needs to know about a field in a
given version (present? nullable? tagged? compact?) is answered here, once.
"""

from __future__ import annotations

import json
import keyword
import re
from dataclasses import dataclass, field
from pathlib import Path

PRIMITIVES = frozenset(
    {"bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64",
     "string", "bytes", "records", "uuid"}
)
FIXED_FORMATS = {
    "bool": "?", "int8": "b", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I",
    "int64": "q", "float64": "d",
}
FIXED_SIZES = {"?": 1, "b": 1, "h": 2, "H": 2, "i": 4, "I": 4, "q": 8, "d": 8}

_INFINITY = 1 << 15  # versions are int16


@dataclass(frozen=True)
class Versions:
    """An inclusive version range; empty when low > high."""

    low: int
    high: int

    @classmethod
    def parse(cls, text: str | None) -> Versions:
        if text is None or text.strip() == "none":
            return NO_VERSIONS
        text = text.strip()
        if text.endswith("+"):
            return cls(int(text[:-1]), _INFINITY)
        if "-" in text:
            low, high = text.split("-")
            return cls(int(low), int(high))
        return cls(int(text), int(text))

    def __contains__(self, version: int) -> bool:
        return self.low <= version <= self.high

    def __and__(self, other: Versions) -> Versions:
        return Versions(max(self.low, other.low), min(self.high, other.high))

    @property
    def empty(self) -> bool:
        return self.low > self.high

    def __str__(self) -> str:
        if self.empty:
            return "none"
        if self.high >= _INFINITY:
            return f"{self.low}+"
        return f"{self.low}" if self.low == self.high else f"{self.low}-{self.high}"


NO_VERSIONS = Versions(0, -1)


def snake_case(name: str) -> str:
    """Kafka's CamelCase field names as Python attribute names (IsrNodes -> isr_nodes)."""
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()
    return s + "_" if keyword.iskeyword(s) else s


@dataclass
class FieldSpec:
    name: str
    type: str  # as written: "int32", "[]string", "[]FetchTopic", "ReplicaState"
    versions: Versions
    nullable_versions: Versions
    tagged_versions: Versions
    tag: int | None
    flexible_versions: Versions | None  # a per-field override (RequestHeader.ClientId)
    default: object  # as written in the spec; None when absent or "null"
    default_null: bool  # the spec says "default": "null" (only allowed on nullable fields)
    ignorable: bool
    about: str
    struct: StructSpec | None = None  # the struct this field holds (array element or single)

    @property
    def py_name(self) -> str:
        return snake_case(self.name)

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.element_type not in PRIMITIVES

    def present(self, version: int) -> bool:
        return version in self.versions

    def tagged(self, version: int) -> bool:
        return self.tag is not None and version in self.tagged_versions

    def nullable(self, version: int) -> bool:
        return version in self.nullable_versions


@dataclass
class StructSpec:
    name: str
    fields: list[FieldSpec]


@dataclass
class MessageSpec:
    name: str
    type: str  # "request", "response", "header" or "data"
    api_key: int | None
    valid_versions: Versions
    deprecated_versions: Versions
    flexible_versions: Versions
    latest_version_unstable: bool
    listeners: list[str]
    struct: StructSpec  # the top-level fields, as a struct named like the message
    structs: dict[str, StructSpec] = field(default_factory=dict)  # nested, in definition order
    source: str = ""

    @property
    def versions(self) -> range:
        return range(self.valid_versions.low, self.valid_versions.high + 1)

    def flexible(self, version: int) -> bool:
        return version in self.flexible_versions


def _strip_comments(text: str) -> str:
    # The specs put // comments on lines of their own.
    return re.sub(r"^\s*//[^\n]*", "", text, flags=re.MULTILINE)


def _is_null(raw: object) -> bool:
    return raw is None or (isinstance(raw, str) and raw.strip().lower() in ("null", "none"))


def load_message(path: Path) -> MessageSpec:
    data = json.loads(_strip_comments(path.read_text()))
    name = data["name"]
    structs: dict[str, StructSpec] = {}
    common = {c["name"]: c for c in data.get("commonStructs", [])}

    def parse_fields(items: list[dict]) -> list[FieldSpec]:
        return [parse_field(item) for item in items]

    def parse_field(item: dict) -> FieldSpec:
        tagged = Versions.parse(item.get("taggedVersions"))
        versions = Versions.parse(item.get("versions")) if "versions" in item else tagged
        tag = item.get("tag")
        f = FieldSpec(
            name=item["name"],
            type=item["type"],
            versions=versions,
            nullable_versions=Versions.parse(item.get("nullableVersions")),
            tagged_versions=tagged,
            tag=int(tag) if tag is not None else None,
            flexible_versions=(
                Versions.parse(item["flexibleVersions"]) if "flexibleVersions" in item else None
            ),
            default=None if _is_null(item.get("default")) else item["default"],
            default_null="default" in item and _is_null(item["default"]),
            ignorable=bool(item.get("ignorable", False)),
            about=item.get("about", ""),
        )
        if f.is_struct:
            struct_name = f.element_type
            if struct_name not in structs:
                definition = item.get("fields")
                if definition is None:
                    if struct_name not in common:
                        raise ValueError(f"{path.name}: {f.name} has unknown type {struct_name}")
                    definition = common[struct_name]["fields"]
                spec = StructSpec(struct_name, [])
                structs[struct_name] = spec  # registered before its fields: names stay in order
                spec.fields = parse_fields(definition)
            f.struct = structs[struct_name]
        return f

    top = StructSpec(name, parse_fields(data["fields"]))
    # Common structs that no field refers to still belong to the message's vocabulary.
    for struct_name, definition in common.items():
        if struct_name not in structs:
            spec = StructSpec(struct_name, [])
            structs[struct_name] = spec
            spec.fields = parse_fields(definition["fields"])
    return MessageSpec(
        name=name,
        type=data["type"],
        api_key=data.get("apiKey"),
        valid_versions=Versions.parse(data["validVersions"]),
        deprecated_versions=Versions.parse(data.get("deprecatedVersions")),
        flexible_versions=Versions.parse(data["flexibleVersions"]),
        latest_version_unstable=bool(data.get("latestVersionUnstable", False)),
        listeners=list(data.get("listeners", [])),
        struct=top,
        structs=structs,
        source=path.name,
    )


def load_all(directory: Path) -> list[MessageSpec]:
    return [load_message(p) for p in sorted(directory.glob("*.json"))]
