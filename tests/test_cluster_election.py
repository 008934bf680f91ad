"""Leader election algorithms (after Kafka's PartitionLeaderElectionAlgorithmsTest)."""

from __future__ import annotations

from odradek.cluster import election
from odradek.cluster.election import Election


def test_offline_partition_prefers_live_in_sync_replicas_in_assignment_order() -> None:
    assert election.offline_partition([2, 4], [4], {2, 4}, False) == Election(4, [4])
    assert election.offline_partition([2, 4, 5], [2, 4, 5], {4, 5}, False) == Election(4, [4, 5])
    # Nobody in the ISR is alive: no leader, unless unclean election is allowed.
    assert election.offline_partition([2, 4], [], {4}, False) == Election(None, [])
    assert election.offline_partition([2, 4], [], {4}, True) == Election(4, [4], unclean=True)
    assert election.offline_partition([2, 4], [2], set(), True) == Election(None, [2])


def test_preferred_replica() -> None:
    assert election.preferred_replica([2, 4], [2, 4], {2, 4}) == Election(2, [2, 4])
    assert election.preferred_replica([2, 4], [4], {2, 4}).leader is None
    assert election.preferred_replica([2, 4], [2, 4], {4}).leader is None


def test_controlled_shutdown_moves_leadership_and_shrinks_the_isr() -> None:
    assert election.controlled_shutdown([2, 4], [2, 4], {2, 4}, {2}) == Election(4, [4])
    assert election.controlled_shutdown([2, 4], [2], {2, 4}, {2}) == Election(None, [2])


def test_reassignment_uses_the_target_replicas() -> None:
    assert election.reassignment([2, 4], [4, 2], {2, 4}) == Election(2, [4, 2])
    assert election.reassignment([2, 4], [4], {2, 4}) == Election(4, [4])
    assert election.reassignment([2, 4], [2, 4], set()).leader is None
