"""The generator: its reading of the specs, and the committed code being what it makes."""

from __future__ import annotations

import pytest

from odradek.protocol.codegen.__main__ import PROTOCOL, generate, stale_files
from odradek.protocol.codegen.spec import Versions, snake_case


def test_committed_code_is_what_the_generator_makes() -> None:
    stale = stale_files(generate())
    assert not stale, (
        f"regenerate with `python -m odradek.protocol.codegen`: {[str(p) for p in stale]}"
    )


def test_every_spec_has_a_module() -> None:
    specs = sorted((PROTOCOL / "specs" / "message").glob("*.json"))
    modules = {p.stem for p in (PROTOCOL / "messages").glob("*.py")} - {"__init__"}
    assert len(modules) == len(specs) == 218


@pytest.mark.parametrize(
    ("text", "inside", "outside"),
    [("3+", [3, 4, 32767], [2]), ("0-6", [0, 6], [7, -1]), ("none", [], [0, 1]),
     ("4", [4], [3, 5])],
)
def test_versions(text: str, inside: list[int], outside: list[int]) -> None:
    versions = Versions.parse(text)
    assert all(v in versions for v in inside)
    assert not any(v in versions for v in outside)
    assert str(versions) == text


@pytest.mark.parametrize(
    ("name", "expected"),
    [("ThrottleTimeMs", "throttle_time_ms"), ("IsrNodes", "isr_nodes"), ("TopicId", "topic_id"),
     ("ZkMigrationReady", "zk_migration_ready"), ("SASLAuthBytes", "sasl_auth_bytes")],
)
def test_snake_case(name: str, expected: str) -> None:
    assert snake_case(name) == expected
