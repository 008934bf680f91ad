"""Values of generated messages for tests: every field present in a version set, and
none left at its default, drawn from a seeded generator."""

from __future__ import annotations

import importlib
import random
import uuid
from pathlib import Path

from odradek.protocol.codegen.emit_message import module_name
from odradek.protocol.codegen.spec import FieldSpec, MessageSpec, StructSpec, load_all

SPECS = load_all(Path(__file__).parent.parent / "odradek" / "protocol" / "specs" / "message")
RANGES = {
    "int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1), "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1), "uint32": (0, 2**32 - 1), "int64": (-(2**63), 2**63 - 1),
}


class ValueMaker:
    """Builds a value of a message for one version, every present field set, none default."""

    def __init__(self, spec: MessageSpec, version: int, seed: int) -> None:
        self.spec = spec
        self.version = version
        self.rng = random.Random(seed)
        self.module = importlib.import_module(f"odradek.protocol.messages.{module_name(spec)}")

    def struct(self, struct: StructSpec, depth: int = 0) -> object:
        cls = getattr(self.module, struct.name)
        values = {
            f.py_name: self.field(f, depth) for f in struct.fields if f.present(self.version)
        }
        if self.spec.flexible(self.version) and self.rng.random() < 0.5:
            # Tags far above any the spec defines: carried through as unknown tagged fields.
            values["unknown_tagged_fields"] = [(10_000 + self.rng.randrange(10), b"\x01\x02")]
        return cls(**values)

    def field(self, f: FieldSpec, depth: int) -> object:
        if f.nullable(self.version) and self.rng.random() < 0.25:
            return None
        if f.is_array:
            n = self.rng.randrange(1, 3) if depth < 3 else 0
            return [self.scalar(f, depth) for _ in range(n)]
        return self.scalar(f, depth)

    def scalar(self, f: FieldSpec, depth: int) -> object:
        t = f.element_type
        rng = self.rng
        if f.struct is not None:
            return self.struct(f.struct, depth + 1)
        if t in RANGES:
            low, high = RANGES[t]
            return rng.choice([low, high, rng.randint(low, high), 1])
        if t == "bool":
            return True
        if t == "float64":
            return rng.choice([0.5, -1e300, 3.25])
        if t == "string":
            return rng.choice(["odradek", "", "ünïcödé-topic", "x" * 300])
        if t in ("bytes", "records"):
            return rng.choice([b"", b"\x00\xffbytes", bytes(range(256)) * 3])
        if t == "uuid":
            return uuid.UUID(int=rng.getrandbits(128))
        raise AssertionError(f"unknown type {t}")
