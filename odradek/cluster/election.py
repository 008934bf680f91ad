"""Leader election: Kafka's PartitionLeaderElectionAlgorithms, as pure functions.

Each returns the new leader (None when no replica may lead) and the ISR that goes with it.
The replicas are tried in assignment order, so the preferred replica (the first) wins when
it can.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Election:
    leader: int | None
    isr: list[int]
    unclean: bool = False


def offline_partition(replicas: Sequence[int], isr: Sequence[int], live: Collection[int],
                      unclean_allowed: bool) -> Election:
    """The leader died (or the partition is new): the first live replica in the ISR; with
    unclean.leader.election.enable, else the first live replica, whose log may lack
    acknowledged records (the ISR becomes that replica alone)."""
    live_isr = [b for b in isr if b in live]
    leader = next((b for b in replicas if b in live_isr), None)
    if leader is not None:
        return Election(leader, live_isr)
    if unclean_allowed:
        leader = next((b for b in replicas if b in live), None)
        if leader is not None:
            return Election(leader, [leader], unclean=True)
    return Election(None, list(isr))


def preferred_replica(replicas: Sequence[int], isr: Sequence[int],
                      live: Collection[int]) -> Election:
    """Preferred leader election: the first replica, if it is alive and in sync."""
    if replicas and replicas[0] in live and replicas[0] in isr:
        return Election(replicas[0], list(isr))
    return Election(None, list(isr))


def controlled_shutdown(replicas: Sequence[int], isr: Sequence[int], live: Collection[int],
                        shutting_down: Collection[int]) -> Election:
    """Leadership moves off brokers that are shutting down; they leave the ISR."""
    isr_left = [b for b in isr if b not in shutting_down]
    leader = next((b for b in replicas if b in live and b in isr_left), None)
    return Election(leader, isr_left if leader is not None else list(isr))


def reassignment(target: Sequence[int], isr: Sequence[int], live: Collection[int]) -> Election:
    """After a reassignment: the first replica of the new assignment that is live and in
    sync."""
    leader = next((b for b in target if b in live and b in isr), None)
    return Election(leader, list(isr))
