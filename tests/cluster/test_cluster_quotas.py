"""controller_mutation_rate (KIP-599) in a ZooKeeper cluster: every Odradek broker takes
CreateTopics (Kafka's clients send it to the controller), so each broker holds a client to
the rate with a bucket of its own, from the quota ZooKeeper notifies it of; a topic refused
for the quota is never written to ZooKeeper."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cluster import Cluster, running
from support.quota_wire import Wire, alter_quotas, existing
from support.wait import wait_until

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import create_topics_request as create_topics

# A bucket of rate x 1 sample x 1 s: a rate of 2 takes 3 one-partition topics at once.
SETTINGS = {"controller.quota.window.num": "1", "controller.quota.window.size.seconds": "1"}


@pytest.fixture
def pair(tmp_path: Path, connect: str) -> Iterator[Cluster]:
    yield from running(Cluster(tmp_path, connect, brokers=2, settings=SETTINGS))


def create(bootstrap: str, names: list[str]) -> dict[str, int]:
    """CreateTopics v7 of one-partition topics from client id "strict": each one's error."""
    wire = Wire(bootstrap)
    try:
        response = wire.call(create_topics.CreateTopicsRequest(
            topics=[create_topics.CreatableTopic(name=n, num_partitions=1,
                                                 replication_factor=1) for n in names],
            timeout_ms=30_000), 7, client_id="strict")
    finally:
        wire.close()
    if any(t.error_code for t in response.topics):
        assert response.throttle_time_ms > 0
    return {t.name: t.error_code for t in response.topics}


def test_each_broker_holds_a_client_to_its_controller_mutation_rate(pair: Cluster) -> None:
    one, two = pair.brokers[1].bootstrap, pair.brokers[2].bootstrap
    wire = Wire(one)
    try:
        assert alter_quotas(wire, {"client-id": "strict"},
                            {"controller_mutation_rate": 2}) == (0, None)
    finally:
        wire.close()
    # Broker 1 applied it before answering.
    names = [f"first-{i}" for i in range(10)]
    codes = create(one, names)
    created = {n for n, code in codes.items() if code == ErrorCode.NONE}
    refused = {n for n, code in codes.items() if code == ErrorCode.THROTTLING_QUOTA_EXCEEDED}
    assert created | refused == set(names) and len(created) >= 3 and refused, codes
    # Broker 2 learns of it from ZooKeeper; until then it creates all it is asked for.
    # Then its own bucket, full, takes 3 again.
    round_ = iter(range(1000))

    def refused_on_two() -> dict[str, int] | None:
        batch = [f"second-{next(round_)}-{i}" for i in range(10)]
        codes = create(two, batch)
        return codes if any(codes.values()) else None

    # Each try creates topics: tried at most twice a second.
    codes_two = wait_until(refused_on_two, what="broker 2 to refuse topics", interval=0.5)
    created_two = {n for n, code in codes_two.items() if code == ErrorCode.NONE}
    assert len(created_two) >= 3, codes_two
    assert all(code in (ErrorCode.NONE, ErrorCode.THROTTLING_QUOTA_EXCEEDED)
               for code in codes_two.values())
    # The created topics reach every broker's metadata; the refused ones never exist.
    everything = names + list(codes_two)
    wanted = created | created_two
    for bootstrap in (one, two):
        wait_until(lambda b=bootstrap: wanted <= existing(b, everything),  # type: ignore[misc]
                   what="the created topics in the cluster's metadata")
        assert existing(bootstrap, everything) == wanted
