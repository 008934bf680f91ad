"""PartitionState's fields for the cluster keep a single node's metadata file as it was."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from odradek.cluster.embedded import EmbeddedMetadataStore
from odradek.cluster.metadata import PartitionState, TopicMetadata


def test_default_state_writes_the_same_json_as_before() -> None:
    state = PartitionState([1, 2], 1, 3, [1, 2])
    assert state.to_json() == {"replicas": [1, 2], "leader": 1, "leader_epoch": 3,
                               "isr": [1, 2]}
    # A file written before the fields existed reads with their defaults.
    assert PartitionState.from_json(state.to_json()) == state


def test_cluster_fields_round_trip_through_the_embedded_store(tmp_path: Path) -> None:
    state = PartitionState([1, 2], 2, 4, [2], controller_epoch=3, leader_recovery_state=1,
                           partition_epoch=7, adding_replicas=[3], removing_replicas=[1])
    topic = TopicMetadata("t", uuid.uuid4(), {0: state, 1: PartitionState([1], 1)})
    EmbeddedMetadataStore(tmp_path).create_topic(topic)
    assert EmbeddedMetadataStore(tmp_path).topics()["t"] == topic
    stored = json.loads((tmp_path / "odradek-metadata.json").read_text())
    assert set(stored["topics"]["t"]["partitions"]["1"]) == {"replicas", "leader",
                                                              "leader_epoch", "isr"}
