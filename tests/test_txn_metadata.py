"""TransactionMetadata's state machine, as Kafka's TransactionMetadataTest checks it:
every transition valid or not, epoch bumps, KIP-360 retries, exhaustion and rotation,
fencing, and completing a transition only as prepared."""

from __future__ import annotations

import itertools

import pytest

from odradek.coordinator.transaction.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    SHORT_MAX,
    IllegalTransitionError,
    TransactionMetadata,
    TransactionState,
    is_epoch_exhausted,
)
from odradek.protocol.errors import ErrorCode

S = TransactionState
NOW = 1_700_000_000_000
PID = 1000

# Kafka 3.9's TransactionState: state -> the states it may be reached from.
KAFKA_VALID_PREVIOUS = {
    S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_COMMIT: {S.ONGOING},
    S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE},
    S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT: {S.PREPARE_ABORT},
    S.DEAD: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_EPOCH_FENCE: {S.ONGOING},
}


def metadata(state: TransactionState = S.EMPTY, epoch: int = 5, **kwargs: object
             ) -> TransactionMetadata:
    m = TransactionMetadata("txn", PID, producer_epoch=epoch, txn_timeout_ms=30_000,
                            state=state, txn_last_update_timestamp=NOW, **kwargs)  # type: ignore[arg-type]
    if state not in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT, S.DEAD):
        m.topic_partitions = {("t", 0)}
        m.txn_start_timestamp = NOW
    return m


def test_ids_and_names_are_kafkas() -> None:
    assert [(s.id, s.state_name) for s in S] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"),
        (4, "CompleteCommit"), (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]
    assert all(S.from_id(s.id) is s and S.from_name(s.state_name) is s for s in S)
    assert S.from_name("ongoing") is None  # case-sensitive, as Kafka's ListTransactions
    with pytest.raises(ValueError):
        S.from_id(8)
    assert {s for s in S if s.is_expiration_allowed} == {
        S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}


@pytest.mark.parametrize(("source", "target"), list(itertools.product(S, S)),
                         ids=lambda s: s.state_name)
def test_every_transition(source: TransactionState, target: TransactionState) -> None:
    m = metadata(source)
    if source in KAFKA_VALID_PREVIOUS[target]:
        transit = m.prepare_transition_to(target)
        assert transit.txn_state is target and m.pending_state is target
        assert m.state is source  # nothing applies before the write
    else:
        with pytest.raises(IllegalTransitionError):
            m.prepare_transition_to(target)
        assert m.pending_state is None


def test_one_pending_transition_at_a_time() -> None:
    m = metadata(S.ONGOING)
    m.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW + 1)
    with pytest.raises(IllegalTransitionError):
        m.prepare_abort_or_commit(S.PREPARE_ABORT, NOW + 2)


def test_negative_epoch_only_towards_dead() -> None:
    m = metadata(S.EMPTY, epoch=NO_PRODUCER_EPOCH)
    with pytest.raises(IllegalTransitionError):
        m.prepare_transition_to(S.ONGOING)
    assert m.prepare_dead().txn_state is S.DEAD


def test_full_transaction_cycle() -> None:
    m = metadata(S.EMPTY, epoch=NO_PRODUCER_EPOCH)
    transit = m.prepare_increment_producer_epoch(60_000, None, NOW + 1)
    assert not isinstance(transit, int)
    assert (transit.producer_epoch, transit.last_producer_epoch) == (0, NO_PRODUCER_EPOCH)
    m.complete_transition_to(transit)
    assert (m.state, m.producer_epoch, m.txn_timeout_ms) == (S.EMPTY, 0, 60_000)
    assert m.last_producer_id == PID

    add = m.prepare_add_partitions({("a", 0), ("b", 1)}, NOW + 2)
    assert add.txn_start_timestamp == NOW + 2
    m.complete_transition_to(add)
    assert m.state is S.ONGOING and m.topic_partitions == {("a", 0), ("b", 1)}
    # More partitions keep the start time.
    more = m.prepare_add_partitions({("c", 0)}, NOW + 3)
    assert more.txn_start_timestamp == NOW + 2
    m.complete_transition_to(more)
    assert len(m.topic_partitions) == 3

    prepare = m.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW + 4)
    m.complete_transition_to(prepare)
    assert m.state is S.PREPARE_COMMIT and m.txn_last_update_timestamp == NOW + 4
    m.remove_partition(("c", 0))  # its marker is written
    complete = m.prepare_complete(NOW + 5)
    assert complete.txn_state is S.COMPLETE_COMMIT and not complete.topic_partitions
    m.complete_transition_to(complete)
    assert m.state is S.COMPLETE_COMMIT and not m.topic_partitions
    assert m.txn_start_timestamp == NOW + 2

    # The next transaction starts from CompleteCommit with a new start time.
    again = m.prepare_add_partitions({("a", 0)}, NOW + 6)
    assert again.txn_start_timestamp == NOW + 6


def test_abort_completes_as_complete_abort() -> None:
    m = metadata(S.ONGOING)
    m.complete_transition_to(m.prepare_abort_or_commit(S.PREPARE_ABORT, NOW + 1))
    complete = m.prepare_complete(NOW + 2)
    assert complete.txn_state is S.COMPLETE_ABORT
    m.complete_transition_to(complete)
    assert m.state is S.COMPLETE_ABORT


def test_remove_partition_only_while_preparing() -> None:
    with pytest.raises(IllegalTransitionError):
        metadata(S.ONGOING).remove_partition(("t", 0))


def test_epoch_bump_with_kip360_expected_epoch() -> None:
    # The client's current epoch: bump, and remember it as the last epoch.
    m = metadata(S.COMPLETE_COMMIT, epoch=5)
    transit = m.prepare_increment_producer_epoch(30_000, 5, NOW + 1)
    assert not isinstance(transit, int)
    assert (transit.producer_epoch, transit.last_producer_epoch) == (6, 5)
    m.complete_transition_to(transit)
    # A retry with the epoch it had (its answer lost): the same answer, no bump.
    retry = m.prepare_increment_producer_epoch(30_000, 5, NOW + 2)
    assert not isinstance(retry, int)
    assert (retry.producer_epoch, retry.last_producer_epoch) == (6, 5)
    m.complete_transition_to(retry)
    assert m.producer_epoch == 6
    # Any other epoch is a zombie.
    assert m.prepare_increment_producer_epoch(30_000, 3, NOW + 3) == ErrorCode.PRODUCER_FENCED
    assert m.pending_state is None


def test_epoch_exhaustion_and_rotation() -> None:
    assert not is_epoch_exhausted(SHORT_MAX - 2)
    assert is_epoch_exhausted(SHORT_MAX - 1) and is_epoch_exhausted(SHORT_MAX)
    m = metadata(S.EMPTY, epoch=SHORT_MAX - 2)
    transit = m.prepare_increment_producer_epoch(30_000, None, NOW + 1)
    assert not isinstance(transit, int) and transit.producer_epoch == SHORT_MAX - 1
    m.complete_transition_to(transit)
    assert m.is_producer_epoch_exhausted
    with pytest.raises(IllegalTransitionError):
        m.prepare_increment_producer_epoch(30_000, None, NOW + 2)
    rotation = m.prepare_producer_id_rotation(PID + 1, 30_000, NOW + 2, record_last_epoch=True)
    assert (rotation.producer_id, rotation.producer_epoch) == (PID + 1, 0)
    assert (rotation.last_producer_id, rotation.last_producer_epoch) == (PID, SHORT_MAX - 1)
    m.complete_transition_to(rotation)
    assert (m.producer_id, m.producer_epoch, m.last_producer_id) == (PID + 1, 0, PID)
    assert m.last_producer_epoch == SHORT_MAX - 1


def test_retry_or_zombie_at_the_last_epoch() -> None:
    m = metadata(S.EMPTY, epoch=SHORT_MAX - 1, last_producer_epoch=SHORT_MAX - 2)
    retry = m.prepare_increment_producer_epoch(30_000, SHORT_MAX - 2, NOW)
    assert not isinstance(retry, int)
    assert (retry.producer_epoch, retry.last_producer_epoch) == (SHORT_MAX - 1, SHORT_MAX - 2)
    m.pending_state = None
    assert m.prepare_increment_producer_epoch(30_000, 3, NOW) == ErrorCode.PRODUCER_FENCED


def test_no_rotation_with_a_pending_transaction() -> None:
    m = metadata(S.ONGOING, epoch=SHORT_MAX - 1)
    with pytest.raises(IllegalTransitionError):
        m.prepare_producer_id_rotation(PID + 1, 30_000, NOW, record_last_epoch=False)


def test_fence_bumps_once_and_goes_to_prepare_abort() -> None:
    m = metadata(S.ONGOING, epoch=5, last_producer_epoch=4)
    fence = m.prepare_fence_producer_epoch()
    assert (fence.txn_state, fence.producer_epoch, fence.last_producer_epoch) == (
        S.PREPARE_EPOCH_FENCE, 6, NO_PRODUCER_EPOCH)
    # A fence is never completed: it is taken over by the abort.
    with pytest.raises(IllegalTransitionError):
        m.complete_transition_to(fence)
    m.pending_state = None
    # A fence whose write failed does not bump again.
    m.has_failed_epoch_fence = True
    assert m.prepare_fence_producer_epoch().producer_epoch == 5
    m.pending_state = None
    m.producer_epoch = SHORT_MAX
    with pytest.raises(IllegalTransitionError):
        m.prepare_fence_producer_epoch()


def test_prepare_complete_clears_failed_fence() -> None:
    m = metadata(S.PREPARE_ABORT)
    m.has_failed_epoch_fence = True
    m.prepare_complete(NOW)
    assert not m.has_failed_epoch_fence


def test_complete_transition_checks() -> None:
    # Without a pending state.
    m = metadata(S.ONGOING)
    transit = m.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW + 1)
    m.pending_state = None
    with pytest.raises(IllegalTransitionError):
        m.complete_transition_to(transit)
    # Another state than prepared.
    m = metadata(S.ONGOING)
    m.prepare_abort_or_commit(S.PREPARE_ABORT, NOW + 1)
    with pytest.raises(IllegalTransitionError):
        m.complete_transition_to(transit)
    # Empty with an epoch that is neither the same nor the next.
    m = metadata(S.EMPTY, epoch=5)
    bad = m.prepare_transition_to(S.EMPTY, producer_epoch=7)
    with pytest.raises(IllegalTransitionError):
        m.complete_transition_to(bad)
    # Ongoing with another epoch.
    m = metadata(S.ONGOING, epoch=5)
    bad = m.prepare_transition_to(S.ONGOING, producer_epoch=6)
    with pytest.raises(IllegalTransitionError):
        m.complete_transition_to(bad)
    # Ongoing losing partitions.
    m = metadata(S.ONGOING)
    bad = m.prepare_transition_to(S.ONGOING, topic_partitions=frozenset())
    with pytest.raises(IllegalTransitionError):
        m.complete_transition_to(bad)
    # Prepare* with other partitions than the transaction's.
    m = metadata(S.ONGOING)
    bad = m.prepare_transition_to(S.PREPARE_COMMIT, topic_partitions=frozenset({("x", 1)}))
    with pytest.raises(IllegalTransitionError):
        m.complete_transition_to(bad)
    # Complete* without a start time.
    m = metadata(S.PREPARE_COMMIT)
    bad = m.prepare_transition_to(S.COMPLETE_COMMIT, txn_start_timestamp=-1)
    with pytest.raises(IllegalTransitionError):
        m.complete_transition_to(bad)
    # Dead is never applied: the id leaves the cache.
    m = metadata(S.COMPLETE_ABORT)
    dead = m.prepare_dead()
    with pytest.raises(IllegalTransitionError):
        m.complete_transition_to(dead)


def test_new_producer_id_is_a_valid_bump() -> None:
    m = metadata(S.EMPTY, epoch=9)
    transit = m.prepare_transition_to(S.EMPTY, producer_id=PID + 5, producer_epoch=0)
    m.complete_transition_to(transit)
    assert (m.producer_id, m.producer_epoch) == (PID + 5, 0)


def test_illegal_producer_id() -> None:
    m = TransactionMetadata("txn", NO_PRODUCER_ID, producer_epoch=0)
    with pytest.raises(IllegalTransitionError):
        m.prepare_transition_to(S.ONGOING)
