"""Replica assignment for new topics and partitions: Kafka's AdminUtils algorithm.

Leaders are spread evenly (partition p's first replica is broker (p + start) mod n), and the
followers of consecutive partitions are shifted so that a broker's followers are spread over
the other brokers too. With a rack for every broker, the broker list alternates racks and
each partition's replicas go to as many different racks as there are (rack-aware).
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError


class RackMismatchError(KafkaError):
    error_code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


def assign_replicas(partitions: int, replication_factor: int, racks: Mapping[int, str | None],
                    *, first_partition: int = 0, start_index: int | None = None,
                    rng: random.Random | None = None) -> dict[int, list[int]]:
    """Replicas for partitions first_partition .. first_partition + partitions - 1, leader
    first. `racks` maps every live broker id to its rack (None without broker.rack).
    start_index fixes the otherwise random starting broker and follower shift (tests)."""
    if not 0 < replication_factor <= len(racks):  # the controller checked it already
        raise ValueError(f"replication factor {replication_factor} with {len(racks)} brokers")
    with_rack = {b: r for b, r in racks.items() if r is not None}
    if with_rack and len(with_rack) != len(racks):
        raise RackMismatchError(  # as Kafka: "Not all brokers have rack information"
            f"brokers {sorted(set(racks) - set(with_rack))} have no broker.rack while others "
            "do: give every broker a rack, or none")
    rng = rng or random.Random()
    if with_rack:
        return _rack_aware(partitions, replication_factor, with_rack, first_partition,
                           start_index, rng)
    brokers = sorted(racks)
    start = rng.randrange(len(brokers)) if start_index is None else start_index
    shift = rng.randrange(len(brokers)) if start_index is None else start_index
    out: dict[int, list[int]] = {}
    for p in range(first_partition, first_partition + partitions):
        if p > 0 and p % len(brokers) == 0:
            shift += 1
        first = (p + start) % len(brokers)
        out[p] = [brokers[first]] + [brokers[_replica_index(first, shift, j, len(brokers))]
                                     for j in range(replication_factor - 1)]
    return out


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """Brokers ordered rack by rack in turn (racks sorted, brokers sorted within a rack)."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    queues = [by_rack[r] for r in sorted(by_rack)]
    out: list[int] = []
    i = 0
    while len(out) < len(racks):
        if queues[i]:
            out.append(queues[i].pop(0))
        i = (i + 1) % len(queues)
    return out


def _rack_aware(partitions: int, replication_factor: int, racks: Mapping[int, str],
                first_partition: int, start_index: int | None,
                rng: random.Random) -> dict[int, list[int]]:
    brokers = rack_alternated(racks)
    n, rack_count = len(brokers), len(set(racks.values()))
    start = rng.randrange(n) if start_index is None else start_index
    shift = rng.randrange(n) if start_index is None else start_index
    out: dict[int, list[int]] = {}
    for p in range(first_partition, first_partition + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        leader = brokers[first]
        replicas, used_racks, used = [leader], {racks[leader]}, {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                broker = brokers[_replica_index(first, shift * rack_count, k, n)]
                k += 1
                # Skip a broker on a rack that has a replica while some rack has none, and a
                # broker that has one while some broker has none.
                if ((racks[broker] not in used_racks or len(used_racks) == rack_count)
                        and (broker not in used or len(used) == n)):
                    replicas.append(broker)
                    used_racks.add(racks[broker])
                    used.add(broker)
                    break
        out[p] = replicas
    return out
