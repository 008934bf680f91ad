"""Transactional offset commits in the group coordinator (KIP-98, KIP-447), over real logs:
TxnOffsetCommit writes the producer's transactional batch to __consumer_offsets, the
offsets stay pending (invisible to OffsetFetch, UNSTABLE_OFFSET_COMMIT with
require_stable) until the COMMIT or ABORT marker, written by the partition side
(odradek.broker.txn_markers), completes them; a reload of the partition rebuilds the
same committed and pending state from the log and its control batches."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.groups import GroupHarness

from odradek.broker.txn_markers import handle_write_txn_markers
from odradek.cluster.topics import GROUP_METADATA_TOPIC
from odradek.coordinator.group.group_metadata import GroupState, OffsetAndMetadata
from odradek.coordinator.group.group_metadata_manager import OffsetConfig
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages.write_txn_markers_request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from odradek.protocol.records import build_control_batch, iter_batch_headers
from odradek.storage.log_validator import AppendOrigin

G = "txn-group"
E0, E1, E2 = ("events", 0), ("events", 1), ("events", 2)
PID, OTHER, THIRD = 7000, 8000, 9000
MINUTE = 60_000
DAY = 24 * 60 * MINUTE


@pytest.fixture
def h(tmp_path: Path) -> Iterator[GroupHarness]:
    harness = GroupHarness(tmp_path)
    yield harness
    harness.close()


def txn_commit(h: GroupHarness, group_id: str, offsets: dict[tuple[str, int], int], *,
               pid: int = PID, epoch: int = 0, member_id: str = "", generation: int = -1,
               instance_id: str | None = None) -> dict[tuple[str, int], int]:
    now = h.time.milliseconds()
    return h.coordinator.handle_txn_commit_offsets(
        group_id, pid, epoch, member_id, instance_id, generation,
        {tp: OffsetAndMetadata(o, metadata=f"m{o}", commit_timestamp=now)
         for tp, o in offsets.items()})


def fetch(h: GroupHarness, group_id: str, partitions: list[tuple[str, int]],
          require_stable: bool = False) -> dict[tuple[str, int], tuple[int, int]]:
    error, offsets = h.coordinator.handle_fetch_offsets(group_id, require_stable, partitions)
    assert error == ErrorCode.NONE
    return {tp: (r.offset, r.error) for tp, r in offsets.items()}


def offsets_tp(h: GroupHarness, group_id: str) -> tuple[str, int]:
    return (GROUP_METADATA_TOPIC, h.manager.partition_for(group_id))


def write_marker(h: GroupHarness, group_id: str, pid: int, commit: bool,
                 epoch: int = 0) -> None:
    """The partition side: WriteTxnMarkers' handler appends the control batch (origin
    COORDINATOR) and tells the group coordinator, as KafkaApis wires it."""
    topic, index = offsets_tp(h, group_id)
    h.replica_manager.clock = h.time.milliseconds  # the harness's logs run on its clock
    request = WriteTxnMarkersRequest(markers=[WritableTxnMarker(
        producer_id=pid, producer_epoch=epoch, transaction_result=commit,
        coordinator_epoch=0,
        topics=[WritableTxnMarkerTopic(name=topic, partition_indexes=[index])])])
    response = asyncio.run(handle_write_txn_markers(
        h.replica_manager, request, timeout_ms=1000,
        on_transaction_completed=h.coordinator.on_transaction_completed))
    assert response.markers[0].topics[0].partitions[0].error_code == ErrorCode.NONE


def append_marker_only(h: GroupHarness, group_id: str, pid: int, commit: bool) -> None:
    """A marker in the log that the coordinator was not told of (it crashed first)."""
    tp = offsets_tp(h, group_id)
    batch = bytearray(build_control_batch(commit, pid, 0, 0, h.time.milliseconds()))
    result = h.replica_manager.append_records(-1, {tp: batch},
                                              origin=AppendOrigin.COORDINATOR)[tp]
    assert result.error_code == ErrorCode.NONE


def state_of(h: GroupHarness, group_id: str) -> tuple[dict[tuple[str, int], int],
                                                    dict[int, dict[tuple[str, int], int]]]:
    group = h.group(group_id)
    return ({tp: o.offset for tp, o in group.offsets.items()},
            {pid: {tp: o.offset for tp, (o, _pos) in p.items()}
             for pid, p in group.pending_transactional_offsets.items()})


# ---- pending until the marker --------------------------------------------------------------


def test_pending_offsets_are_invisible_until_the_transaction_commits(h: GroupHarness) -> None:
    h.commit(G, {E0: 5})
    assert txn_commit(h, G, {E0: 10, E1: 20}) == {E0: 0, E1: 0}
    # The stable view: the last committed offsets; require_stable: not yet.
    assert fetch(h, G, [E0, E1]) == {E0: (5, 0), E1: (-1, 0)}
    assert fetch(h, G, [E0, E1, E2], require_stable=True) == {
        E0: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT), E1: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT),
        E2: (-1, 0)}
    assert h.committed(G) == {E0: 5}
    write_marker(h, G, PID, commit=True)
    assert fetch(h, G, [E0, E1], require_stable=True) == {E0: (10, 0), E1: (20, 0)}
    _error, offsets = h.coordinator.handle_fetch_offsets(G, True, [E0])
    assert offsets[E0].metadata == "m10"
    assert not h.group(G).pending_transactional_offsets
    assert not h.manager.open_groups_for_producer


def test_the_batch_is_the_producers_transaction_in_the_partition(h: GroupHarness) -> None:
    tp = offsets_tp(h, G)
    partition = h.replica_manager.get_partition(tp)
    assert partition is not None
    txn_commit(h, G, {E0: 10}, pid=PID, epoch=3)
    data = partition.log.read(0, 1 << 20, partition.log.log_end_offset).read()
    [(_pos, header)] = list(iter_batch_headers(data))
    assert header.is_transactional and not header.is_control
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (PID, 3, 0)
    # The open transaction holds the last stable offset at its first offset.
    assert partition.last_stable_offset == header.base_offset
    write_marker(h, G, PID, commit=True, epoch=3)
    assert partition.last_stable_offset == partition.log.log_end_offset
    # A zombie with an older epoch is fenced by the partition's producer state.
    assert txn_commit(h, G, {E0: 11}, pid=PID, epoch=2) == {
        E0: ErrorCode.INVALID_PRODUCER_EPOCH}
    assert h.committed(G) == {E0: 10}


def test_an_aborted_transaction_drops_its_offsets(h: GroupHarness) -> None:
    h.commit(G, {E0: 5})
    txn_commit(h, G, {E0: 10, E1: 20})
    write_marker(h, G, PID, commit=False)
    assert fetch(h, G, [E0, E1], require_stable=True) == {E0: (5, 0), E1: (-1, 0)}
    assert not h.group(G).pending_transactional_offsets


def test_producers_complete_independently_and_markers_elsewhere_change_nothing(
        h: GroupHarness) -> None:
    txn_commit(h, G, {E0: 10}, pid=PID)
    txn_commit(h, G, {E1: 20}, pid=OTHER)
    other_partition = (h.manager.partition_for(G) + 1) % h.partitions
    h.coordinator.on_transaction_completed(PID, [(GROUP_METADATA_TOPIC, other_partition),
                                                 ("events", 0)], True)
    assert h.committed(G) == {}
    write_marker(h, G, OTHER, commit=True)
    assert h.committed(G) == {E1: 20}
    assert fetch(h, G, [E0], require_stable=True) == {E0: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)}
    write_marker(h, G, PID, commit=True)
    assert h.committed(G) == {E0: 10, E1: 20}


def test_a_commit_written_after_the_transactions_offset_wins(h: GroupHarness) -> None:
    txn_commit(h, G, {E0: 10, E1: 20})
    h.commit(G, {E0: 15})  # later in the log than the transaction's record
    write_marker(h, G, PID, commit=True)
    assert h.committed(G) == {E0: 15, E1: 20}
    h.restart()
    assert h.committed(G) == {E0: 15, E1: 20}


# ---- TxnOffsetCommit's checks (KIP-447) -----------------------------------------------------


def test_generation_member_and_instance_are_checked_when_given(h: GroupHarness) -> None:
    [a] = h.form_group(G, 1)
    # Pre-KIP-447 clients name no member: accepted whatever the group's state.
    assert txn_commit(h, G, {E0: 1}) == {E0: 0}
    assert txn_commit(h, G, {E0: 2}, member_id=a, generation=1) == {E0: 0}
    assert txn_commit(h, G, {E0: 3}, member_id=a, generation=2) == {
        E0: ErrorCode.ILLEGAL_GENERATION}
    assert txn_commit(h, G, {E0: 3}, member_id="ghost", generation=1) == {
        E0: ErrorCode.UNKNOWN_MEMBER_ID}
    assert txn_commit(h, G, {E0: 3}, member_id=a, generation=1, instance_id="nobody") == {
        E0: ErrorCode.UNKNOWN_MEMBER_ID}
    # A group unknown here: created Empty; a member id or generation is then unknown.
    assert txn_commit(h, "fresh", {E0: 1}, member_id="m", generation=3) == {
        E0: ErrorCode.UNKNOWN_MEMBER_ID}
    assert txn_commit(h, "fresh", {E0: 1}, generation=-1) == {E0: 0}
    # An Empty group takes a commit without a generation, even naming a member.
    assert txn_commit(h, "fresh", {E0: 2}, member_id="m", generation=-1) == {E0: 0}
    assert h.coordinator.handle_txn_commit_offsets("", PID, 0, "", None, -1, {
        E0: OffsetAndMetadata(1)}) == {E0: ErrorCode.INVALID_GROUP_ID}


def test_a_fenced_static_member_cannot_commit(h: GroupHarness) -> None:
    [a] = h.form_group(G, 1, instance_id="static-1")
    assert txn_commit(h, G, {E0: 1}, member_id=a, generation=1, instance_id="static-1") == {
        E0: 0}
    assert txn_commit(h, G, {E0: 1}, member_id="old", generation=1,
                      instance_id="static-1") == {E0: ErrorCode.FENCED_INSTANCE_ID}


def test_oversized_metadata_is_refused(h: GroupHarness) -> None:
    big = OffsetAndMetadata(1, metadata="x" * 5000)
    assert h.coordinator.handle_txn_commit_offsets(G, PID, 0, "", None, -1, {
        E0: big, E1: OffsetAndMetadata(2)}) == {
        E0: ErrorCode.OFFSET_METADATA_TOO_LARGE, E1: 0}


# ---- reload ---------------------------------------------------------------------------------


def test_a_reload_rebuilds_committed_and_pending_offsets(h: GroupHarness) -> None:
    [a] = h.form_group(G, 1)
    h.commit(G, {E0: 1, E1: 1, E2: 1}, member_id=a, generation=1)
    txn_commit(h, G, {E0: 10}, pid=PID)              # committed below
    txn_commit(h, G, {E1: 20}, pid=OTHER)            # aborted below
    txn_commit(h, G, {E2: 30}, pid=THIRD)            # still open at the restart
    txn_commit(h, "assigned", {E0: 40}, pid=THIRD)   # a group of pending offsets only
    write_marker(h, G, PID, commit=True)
    write_marker(h, G, OTHER, commit=False)
    before = state_of(h, G)
    assert before == ({E0: 10, E1: 1, E2: 1}, {THIRD: {E2: 30}})
    assigned = state_of(h, "assigned")
    h.restart()
    assert state_of(h, G) == before
    assert state_of(h, "assigned") == assigned == ({}, {THIRD: {E0: 40}})
    assert h.group(G).is_(GroupState.STABLE)
    assert fetch(h, G, [E2], require_stable=True) == {E2: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)}
    # The loaded pending offsets complete on the marker as if never reloaded.
    write_marker(h, G, THIRD, commit=True)
    assert h.committed(G) == {E0: 10, E1: 1, E2: 30}
    if h.manager.partition_for("assigned") != h.manager.partition_for(G):
        write_marker(h, "assigned", THIRD, commit=True)
    assert h.committed("assigned") == {E0: 40}
    h.restart()
    assert h.committed(G) == {E0: 10, E1: 1, E2: 30}
    assert h.committed("assigned") == {E0: 40}


def test_markers_the_coordinator_missed_are_replayed_by_the_reload(h: GroupHarness) -> None:
    txn_commit(h, G, {E0: 10}, pid=PID)
    txn_commit(h, G, {E1: 20}, pid=OTHER)
    append_marker_only(h, G, PID, commit=True)
    append_marker_only(h, G, OTHER, commit=False)
    assert h.committed(G) == {}  # nobody told the coordinator
    h.restart()
    assert state_of(h, G) == ({E0: 10}, {})
    assert h.committed(G) == {E0: 10}


def test_a_reload_in_small_steps_keeps_transactions_across_chunks(tmp_path: Path) -> None:
    h = GroupHarness(tmp_path, offset_config=OffsetConfig(load_buffer_size=1))
    try:
        txn_commit(h, G, {E0: 10}, pid=PID)
        h.commit(G, {E1: 5})
        txn_commit(h, G, {E1: 20}, pid=OTHER)
        write_marker(h, G, PID, commit=True)
        h.restart()
        assert state_of(h, G) == ({E0: 10, E1: 5}, {OTHER: {E1: 20}})
    finally:
        h.close()


# ---- expiry and deletion keep open transactions' offsets ------------------------------------


@pytest.fixture
def short(tmp_path: Path) -> Iterator[GroupHarness]:
    harness = GroupHarness(tmp_path, offset_config=OffsetConfig(
        offsets_retention_ms=DAY, offsets_retention_check_interval_ms=10 * MINUTE))
    yield harness
    harness.close()


def test_expiry_keeps_pending_offsets_and_their_partitions_offsets(short: GroupHarness) -> None:
    h = short
    h.commit(G, {E0: 1, E1: 1})
    txn_commit(h, G, {E0: 10})
    txn_commit(h, "only-pending", {E2: 10})
    h.advance(DAY + 10 * MINUTE)
    # E1 expired; E0 waits for its transaction; the group of pending offsets lives on.
    assert state_of(h, G) == ({E0: 1}, {PID: {E0: 10}})
    assert state_of(h, "only-pending") == ({}, {PID: {E2: 10}})
    write_marker(h, G, PID, commit=True)
    if h.manager.partition_for("only-pending") != h.manager.partition_for(G):
        write_marker(h, "only-pending", PID, commit=True)
    assert h.committed(G) == {E0: 10}
    assert h.committed("only-pending") == {E2: 10}


def test_deleting_a_group_keeps_its_open_transactions_offsets(h: GroupHarness) -> None:
    h.commit(G, {E0: 1, E1: 1})
    txn_commit(h, G, {E0: 10})
    assert h.coordinator.handle_delete_groups([G]) == {G: ErrorCode.NONE}
    assert state_of(h, G) == ({}, {PID: {E0: 10}})
    assert fetch(h, G, [E0, E1]) == {E0: (-1, 0), E1: (-1, 0)}
    h.restart()
    assert state_of(h, G) == ({}, {PID: {E0: 10}})
    write_marker(h, G, PID, commit=True)
    assert h.committed(G) == {E0: 10}
    h.restart()
    assert h.committed(G) == {E0: 10}


def test_unloading_forgets_and_reloading_restores_pending_offsets(h: GroupHarness) -> None:
    txn_commit(h, G, {E0: 10})
    partition = h.manager.partition_for(G)
    h.coordinator.on_resignation(partition)
    assert h.manager.get_group(G) is None and not h.manager.open_groups_for_producer
    h.coordinator.on_election(partition, load_now=True)
    assert state_of(h, G) == ({}, {PID: {E0: 10}})
    write_marker(h, G, PID, commit=True)
    assert h.committed(G) == {E0: 10}
