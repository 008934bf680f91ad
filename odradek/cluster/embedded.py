"""The embedded single-node metadata store: one JSON file, rewritten atomically.

A broker without zookeeper.connect keeps its cluster metadata (topics, topic ids,
partition states, topic and dynamic broker configs, the producer id counter) in
`odradek-metadata.json` in its first log directory. Every change is written to a
temporary file, fsynced and renamed over the old one, so a crash leaves either the old
state or the new one. The file is small: it grows with topics and partitions, not data.
"""

from __future__ import annotations

import base64
import copy
import json
import uuid
from pathlib import Path
from typing import Any

from odradek.cluster.metadata import TopicMetadata
from odradek.storage.checkpoints import write_durably
from odradek.storage.errors import StorageError

METADATA_FILE = "odradek-metadata.json"
_FORMAT_VERSION = 1


def new_cluster_id() -> str:
    """A cluster id as Kafka makes them: a random UUID in URL-safe base64, unpadded."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class EmbeddedMetadataStore:
    def __init__(self, directory: Path) -> None:
        self.path = directory / METADATA_FILE
        self._topics: dict[str, TopicMetadata] = {}
        self._broker_configs: dict[str, str] = {}
        self._next_producer_id = 0
        self.cluster_id = ""
        self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.cluster_id = new_cluster_id()
            self._save()
            return
        except (OSError, ValueError) as e:
            raise StorageError(f"cannot read the cluster metadata in {self.path}: {e}") from e
        if data.get("version") != _FORMAT_VERSION:
            raise StorageError(f"{self.path}: unknown format version {data.get('version')!r}")
        self.cluster_id = data["cluster_id"]
        self._topics = {n: TopicMetadata.from_json(n, t) for n, t in data["topics"].items()}
        self._broker_configs = dict(data.get("broker_configs", {}))
        self._next_producer_id = int(data.get("next_producer_id", 0))

    def _save(self) -> None:
        data: dict[str, Any] = {
            "version": _FORMAT_VERSION,
            "cluster_id": self.cluster_id,
            "next_producer_id": self._next_producer_id,
            "broker_configs": dict(sorted(self._broker_configs.items())),
            "topics": {n: t.to_json() for n, t in sorted(self._topics.items())},
        }
        write_durably(self.path, json.dumps(data, indent=1).encode())

    # ---- topics -----------------------------------------------------------------------

    def topics(self) -> dict[str, TopicMetadata]:
        return copy.deepcopy(self._topics)

    def create_topic(self, topic: TopicMetadata) -> None:
        if topic.name in self._topics:
            raise ValueError(f"topic {topic.name} exists already")
        self._topics[topic.name] = copy.deepcopy(topic)
        self._save()

    def delete_topic(self, name: str) -> None:
        if self._topics.pop(name, None) is not None:
            self._save()

    def update_topic(self, topic: TopicMetadata) -> None:
        if topic.name not in self._topics:
            raise ValueError(f"topic {topic.name} does not exist")
        self._topics[topic.name] = copy.deepcopy(topic)
        self._save()

    # ---- broker configs and producer ids ----------------------------------------------

    def broker_configs(self) -> dict[str, str]:
        return dict(self._broker_configs)

    def set_broker_configs(self, configs: dict[str, str]) -> None:
        self._broker_configs = dict(configs)
        self._save()

    def allocate_producer_ids(self, count: int) -> int:
        first = self._next_producer_id
        self._next_producer_id += count
        self._save()
        return first
