"""GroupMetadataManager: __consumer_offsets in Kafka's record format, the group's
partition as Kafka picks it, loading at start-up (COORDINATOR_LOAD_IN_PROGRESS until
done), durable commits, offset.metadata.max.bytes, tombstones for deletions, and expiry
of offsets after offsets.retention.minutes, all on a manual clock."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.groups import GroupHarness, subscription

from odradek.cluster.topics import GROUP_METADATA_TOPIC
from odradek.coordinator.group.group_coordinator import LeavingMember
from odradek.coordinator.group.group_metadata import GroupState
from odradek.coordinator.group.group_metadata_manager import OffsetConfig
from odradek.coordinator.group.offsets_topic import (
    OtherKey,
    group_metadata_key,
    java_string_hash,
    offset_commit_key,
    offset_commit_value,
    partition_for,
    read_group_metadata_value,
    read_key,
    read_offset_commit_value,
)
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages.group_metadata_key import GroupMetadataKey
from odradek.protocol.messages.offset_commit_key import OffsetCommitKey
from odradek.protocol.records import SimpleRecord, build_record_batch

G = "group-a"
EVENTS = ("events", 0)
MINUTE = 60_000
DAY = 24 * 60 * MINUTE


@pytest.fixture
def h(tmp_path: Path) -> Iterator[GroupHarness]:
    harness = GroupHarness(tmp_path)
    yield harness
    harness.close()


def records_of(h: GroupHarness, group_id: str) -> list[tuple[bytes | None, bytes | None]]:
    partition = h.replica_manager.get_partition(
        (GROUP_METADATA_TOPIC, h.manager.partition_for(group_id)))
    assert partition is not None
    return [(r.key, r.value) for r in partition.log.read_records(0)]


# ---- the format -------------------------------------------------------------------------


def test_group_partition_is_javas_string_hash_through_utils_abs() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("polygenelubricants") == -(2**31)  # Utils.abs gives 0
    assert partition_for("polygenelubricants", 50) == 0
    assert java_string_hash("𝄞") == 0xD834 * 31 + 0xDD1E  # UTF-16 code units, not bytes
    assert java_string_hash("my-group") == -1906497762
    # Utils.abs, not & 0x7fffffff: the two differ for negative hashes.
    assert partition_for("my-group", 50) == 12 != (-1906497762 & 0x7FFFFFFF) % 50


def test_records_are_kafkas_bytes() -> None:
    # Built by hand from Kafka's schemas: int16 version, then the fields.
    key = offset_commit_key("g", "t", 3)
    assert key == struct.pack(">hh", 1, 1) + b"g" + struct.pack(">h", 1) + b"t" + struct.pack(
        ">i", 3)
    value = offset_commit_value(42, 7, "meta", 1000)
    assert value == (struct.pack(">hqi", 3, 42, 7) + struct.pack(">h", 4) + b"meta"
                     + struct.pack(">q", 1000))
    expiring = offset_commit_value(42, 7, "", 1000, 5000)  # v1 has no leader epoch
    assert expiring == struct.pack(">hq", 1, 42) + struct.pack(">hqq", 0, 1000, 5000)
    assert group_metadata_key("g") == struct.pack(">hh", 2, 1) + b"g"
    parsed = read_key(key)
    assert isinstance(parsed, OffsetCommitKey) and (parsed.group, parsed.topic,
                                                     parsed.partition) == ("g", "t", 3)
    assert isinstance(read_key(group_metadata_key("g")), GroupMetadataKey)
    assert read_key(struct.pack(">h", 3) + b"whatever") == OtherKey(3)
    v = read_offset_commit_value(expiring)
    assert (v.offset, v.commit_timestamp, v.expire_timestamp) == (42, 1000, 5000)
    # Version 0, as Kafka 0.8.2 wrote it, still reads.
    v0 = read_offset_commit_value(struct.pack(">hq", 0, 9) + struct.pack(">h", 0)
                                  + struct.pack(">q", 77))
    assert (v0.offset, v0.commit_timestamp) == (9, 77)


def test_a_stable_group_is_written_as_kafka_writes_it(h: GroupHarness) -> None:
    a, b = h.form_group(G, 2, instance_id=None, client_id="me")
    key, value = records_of(h, G)[-1]
    assert key == group_metadata_key(G)
    assert value is not None and struct.unpack_from(">h", value)[0] == 3
    stored = read_group_metadata_value(value)
    assert (stored.protocol_type, stored.generation, stored.protocol) == ("consumer", 1, "range")
    assert stored.leader in (a, b) and stored.current_state_timestamp == h.time.now
    assert {m.member_id for m in stored.members} == {a, b}
    member = stored.members[0]
    assert (member.client_id, member.client_host, member.session_timeout) == (
        "me", "/127.0.0.1", 10_000)
    assert bytes(member.subscription) == subscription("events")
    assert bytes(member.assignment) == f"assignment of {member.member_id}".encode()


# ---- durability and loading -------------------------------------------------------------


def test_commits_and_groups_survive_a_restart(h: GroupHarness) -> None:
    a, b = h.form_group(G, 2)
    assert h.commit(G, {EVENTS: 10, ("events", 1): 20}, member_id=a, generation=1,
                    metadata="checkpoint") == {EVENTS: 0, ("events", 1): 0}
    h.commit(G, {EVENTS: 11}, member_id=b, generation=1)
    h.commit("standalone", {("events", 5): 3})
    h.restart()
    assert h.committed(G) == {EVENTS: 11, ("events", 1): 20}
    assert h.committed("standalone") == {("events", 5): 3}
    _error, offsets = h.coordinator.handle_fetch_offsets(G, False, [("events", 1)])
    assert offsets[("events", 1)].metadata == "checkpoint"
    group = h.group(G)
    assert group.is_(GroupState.STABLE) and group.generation_id == 1
    assert set(group.members) == {a, b}
    assert group.get(a).assignment == f"assignment of {a}".encode()
    # Members that come back within their session carry on without a rebalance...
    assert h.heartbeat(G, a, 1) == ErrorCode.NONE
    h.advance(9_000)
    assert h.heartbeat(G, a, 1) == ErrorCode.NONE
    # ...those that do not are removed after it.
    h.advance(1_000)
    assert not group.has(b) and group.is_(GroupState.PREPARING_REBALANCE)


def test_partitions_load_step_by_step_and_answer_load_in_progress_meanwhile(
        tmp_path: Path) -> None:
    h = GroupHarness(tmp_path, partitions=1, offset_config=OffsetConfig(load_buffer_size=200))
    try:
        a, _ = h.form_group(G, 2)
        for i in range(50):
            h.commit(G, {("events", i % 6): i}, member_id=a, generation=1)
        h.restart(load=False)
        assert h.manager.is_partition_loading(0)
        assert h.join(G).result.error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert h.coordinator.handle_fetch_offsets(G, False, None)[0] == (
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        assert h.heartbeat(G, a, 1) == ErrorCode.NONE  # answered blindly, as Kafka does
        assert h.sync(G, a, 1).result.error == ErrorCode.REBALANCE_IN_PROGRESS
        assert h.coordinator.handle_list_groups()[0] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        steps = []
        read_chunk = h.manager.loader._read_chunk
        h.manager.loader._read_chunk = (  # type: ignore[method-assign]
            lambda load: steps.append(1) or read_chunk(load))
        h.time.run_pending()
        assert not h.manager.is_partition_loading(0)
        assert len(steps) > 5  # 200 bytes at a time, each step a timer task
        assert h.committed(G) == {("events", i % 6): i for i in range(44, 50)}
    finally:
        h.close()


def test_records_kafka_wrote_load_and_unknown_kinds_are_skipped(h: GroupHarness) -> None:
    tp = (GROUP_METADATA_TOPIC, h.manager.partition_for("legacy"))
    v0_key = struct.pack(">h", 0) + struct.pack(">h", 6) + b"legacy" + struct.pack(
        ">h", 6) + b"events" + struct.pack(">i", 2)
    v0_value = struct.pack(">hq", 0, 123) + struct.pack(">h", 2) + b"md" + struct.pack(">q", 1)
    consumer_group_record = (struct.pack(">h", 3) + b"\x00\x00", b"\x00\x00")  # KIP-848
    batch = build_record_batch([SimpleRecord(v0_key, v0_value), consumer_group_record,
                                SimpleRecord(b"\x00", None)])
    assert h.replica_manager.append_records(-1, {tp: bytearray(batch)})[tp].error_code == 0
    h.restart()
    assert h.committed("legacy") == {("events", 2): 123}


# ---- writes: limits, deletions ----------------------------------------------------------


def test_oversized_metadata_is_refused_and_the_rest_of_the_commit_kept(h: GroupHarness) -> None:
    limit = h.offset_config.max_metadata_size
    errors = h.coordinator.handle_commit_offsets(G, "", None, -1, {
        EVENTS: _offset(1, "x" * limit), ("events", 1): _offset(2, "y" * (limit + 1))})
    assert errors == {EVENTS: ErrorCode.NONE, ("events", 1): ErrorCode.OFFSET_METADATA_TOO_LARGE}
    assert h.committed(G) == {EVENTS: 1}


def _offset(offset: int, metadata: str):  # type: ignore[no-untyped-def]
    from odradek.coordinator.group.group_metadata import OffsetAndMetadata
    return OffsetAndMetadata(offset, metadata=metadata, commit_timestamp=0)


def test_deleted_groups_and_offsets_stay_deleted_after_a_restart(h: GroupHarness) -> None:
    a, b = h.form_group(G, 2)
    h.commit(G, {EVENTS: 1, ("events", 1): 2}, member_id=a, generation=1)
    h.coordinator.handle_leave_group(G, [LeavingMember(a), LeavingMember(b)])
    assert h.group(G).is_(GroupState.EMPTY)
    assert h.coordinator.handle_delete_offsets(G, [("events", 1)])[1] == {
        ("events", 1): ErrorCode.NONE}
    h.commit("other", {EVENTS: 5})
    assert h.coordinator.handle_delete_groups(["other"]) == {"other": ErrorCode.NONE}
    h.restart()
    assert h.committed(G) == {EVENTS: 1}
    assert h.manager.get_group("other") is None
    assert h.coordinator.handle_delete_groups([G]) == {G: ErrorCode.NONE}
    assert (group_metadata_key(G), None) in records_of(h, G)
    h.restart()
    assert h.manager.get_group(G) is None


# ---- expiry ----------------------------------------------------------------------------

HOUR = 60 * MINUTE


@pytest.fixture
def short(tmp_path: Path) -> Iterator[GroupHarness]:
    """Offsets kept for an hour, expiry checked every minute."""
    harness = GroupHarness(tmp_path, offset_config=OffsetConfig(
        offsets_retention_ms=HOUR, offsets_retention_check_interval_ms=MINUTE))
    yield harness
    harness.close()


def keep_alive(h: GroupHarness, member_id: str, ms: int) -> None:
    for _ in range(ms // 5000):
        h.advance(5000)
        assert h.heartbeat(G, member_id, 1) == ErrorCode.NONE


def test_offsets_of_an_empty_group_expire_after_the_retention(short: GroupHarness) -> None:
    h = short
    a, = h.form_group(G, 1)
    h.commit(G, {EVENTS: 7}, member_id=a, generation=1)
    keep_alive(h, a, 2 * HOUR)  # committed long ago, but the group is not empty: kept
    assert h.committed(G) == {EVENTS: 7}
    h.coordinator.handle_leave_group(G, [LeavingMember(a)])
    h.advance(HOUR - MINUTE)
    assert h.committed(G) == {EVENTS: 7}
    h.advance(2 * MINUTE)  # the retention, and the next check
    assert h.manager.get_group(G) is None  # no offsets left: Dead, and gone
    h.restart()
    assert h.manager.get_group(G) is None
    assert h.committed(G) == {}


def test_a_stable_group_loses_only_offsets_of_topics_it_no_longer_consumes(
        short: GroupHarness) -> None:
    h = short
    a, = h.form_group(G, 1)
    h.commit(G, {EVENTS: 1, ("retired", 0): 2}, member_id=a, generation=1)
    keep_alive(h, a, HOUR + MINUTE)
    assert h.committed(G) == {EVENTS: 1}


def test_offsets_without_group_management_expire_from_their_commit(
        short: GroupHarness) -> None:
    h = short
    h.commit("standalone", {EVENTS: 1})
    h.advance(30 * MINUTE)
    h.commit("standalone", {("events", 1): 2})
    h.advance(31 * MINUTE)
    assert h.committed("standalone") == {("events", 1): 2}
    # An explicit retention (OffsetCommit v2-v4) sets the offset's own expiry.
    h.commit("standalone", {("events", 2): 3}, expire_timestamp=h.time.now + 2 * MINUTE)
    h.advance(2 * MINUTE)
    assert h.committed("standalone") == {("events", 1): 2}


def test_a_group_that_comes_back_after_expiry_starts_without_offsets(
        short: GroupHarness) -> None:
    h = short
    a, = h.form_group(G, 1)
    h.commit(G, {EVENTS: 7}, member_id=a, generation=1)
    h.coordinator.handle_leave_group(G, [LeavingMember(a)])
    h.advance(HOUR + MINUTE)
    join = h.join(G)
    h.settle([join])
    assert join.result.generation_id == 1  # a new group: its history is gone
    assert h.committed(G) == {}
