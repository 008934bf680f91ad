"""RegistryState: the registry's state as the records of _schemas make it, in Confluent's
key and value formats (pure logic: the records are fed by hand)."""

from __future__ import annotations

from odradek.registry.state import (
    RegistryState,
    SchemaVersion,
    config_record,
    delete_subject_record,
    mode_record,
    schema_record,
    schema_tombstone,
)


def version(subject: str, number: int, schema_id: int, deleted: bool = False) -> SchemaVersion:
    return SchemaVersion(subject, number, schema_id, f'"{subject}-{number}"', deleted=deleted)


def test_records_are_confluents() -> None:
    key, value = schema_record(version("s", 1, 7))
    assert key == b'{"keytype":"SCHEMA","subject":"s","version":1,"magic":1}'
    assert value == b'{"subject":"s","version":1,"id":7,"schema":"\\"s-1\\"","deleted":false}'
    assert config_record(None, "FULL") == (
        b'{"keytype":"CONFIG","subject":null,"magic":0}', b'{"compatibilityLevel":"FULL"}')
    assert mode_record("s", None) == (b'{"keytype":"MODE","subject":"s","magic":0}', None)


def test_versions_deletes_and_tombstones() -> None:
    state = RegistryState()
    for v in (version("s", 1, 1), version("s", 2, 2), version("t", 1, 2)):
        state.apply(*schema_record(v))
    assert state.subject_names() == ["s", "t"] and state.max_id == 2
    assert [v.subject for v in state.versions_of_id(2)] == ["s", "t"]
    state.apply(*delete_subject_record("s", 2))  # soft: every version up to 2
    assert state.subject_names() == ["t"] and state.subject_names(deleted=True) == ["s", "t"]
    state.apply(*schema_tombstone("s", 1))
    state.apply(*schema_tombstone("s", 2))
    assert "s" not in state.subjects
    assert state.schemas_by_id[1].schema == '"s-1"'  # ids are never reused: max_id stays
    assert state.max_id == 2


def test_configs_and_modes_fall_back_to_the_global_ones() -> None:
    state = RegistryState()
    assert state.compatibility("s") == "BACKWARD" and state.mode("s") == "READWRITE"
    state.apply(*config_record(None, "FULL"))
    state.apply(*config_record("s", "NONE"))
    state.apply(*mode_record("s", "READONLY"))
    assert (state.compatibility("s"), state.compatibility("t")) == ("NONE", "FULL")
    state.apply(*config_record("s", None))
    assert state.compatibility("s") == "FULL" and state.mode("s") == "READONLY"


def test_records_it_cannot_read_are_skipped() -> None:
    state = RegistryState()
    state.apply(b"not json", b"{}")
    state.apply(b'{"keytype":"SCHEMA","subject":"s"}', b'{"id":1}')  # no version
    state.apply(b'{"keytype":"FUTURE_THING","magic":0}', b"{}")
    state.apply(b'{"keytype":"NOOP","magic":0}', None)
    assert state.subjects == {} and state.applied == 4
