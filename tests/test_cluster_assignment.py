"""Replica assignment: Kafka's AdminUtils results for the same inputs, and its balance."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from odradek.cluster.assignment import RackMismatchError, assign_replicas, rack_alternated


def test_rack_unaware_matches_kafka() -> None:
    # AdminUtilsTest.testReplicaAssignment: brokers 0-4, 10 partitions, RF 3, start index 0.
    expected = {0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
                5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2]}
    assert assign_replicas(10, 3, dict.fromkeys(range(5)), start_index=0) == expected


def test_rack_alternated_list() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated(racks) == [0, 3, 1, 5, 4, 2]


def test_rack_aware_puts_replicas_on_distinct_racks_and_balances_leaders() -> None:
    racks = {0: "a", 1: "b", 2: "c", 3: "a", 4: "b", 5: "c"}
    assignment = assign_replicas(12, 3, racks, rng=random.Random(7))
    for replicas in assignment.values():
        assert len({racks[b] for b in replicas}) == 3
    assert set(Counter(r[0] for r in assignment.values()).values()) == {2}
    assert set(Counter(b for r in assignment.values() for b in r).values()) == {6}


def test_more_replicas_than_racks_uses_every_rack_then_other_brokers() -> None:
    racks = {0: "a", 1: "a", 2: "b", 3: "b"}
    for replicas in assign_replicas(8, 3, racks, rng=random.Random(1)).values():
        assert len(set(replicas)) == 3 and {racks[b] for b in replicas} == {"a", "b"}


def test_rack_unaware_balance_and_partitions_added_later() -> None:
    brokers = dict.fromkeys([1, 2, 3])
    assignment = assign_replicas(6, 2, brokers, rng=random.Random(3))
    assert set(Counter(r[0] for r in assignment.values()).values()) == {2}
    assert all(len(set(r)) == 2 for r in assignment.values())
    more = assign_replicas(3, 2, brokers, first_partition=6, rng=random.Random(3))
    assert sorted(more) == [6, 7, 8]


def test_some_brokers_without_a_rack_are_refused() -> None:
    with pytest.raises(RackMismatchError, match=r"no broker\.rack"):
        assign_replicas(1, 1, {0: "a", 1: None})
