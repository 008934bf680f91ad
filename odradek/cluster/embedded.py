"""The embedded single-node metadata store: one JSON file, rewritten atomically.

A broker without zookeeper.connect keeps its cluster metadata (topics, topic ids,
partition states, topic and dynamic broker configs, the producer id counter) in
`odradek-metadata.json` in its first log directory. Every change is written to a
temporary file, fsynced and renamed over the old one, so a crash leaves either the old
state or the new one. The file is small: it grows with topics and partitions, not data.

Each topic is kept encoded (one line of the file) and encoded again only when it changes:
a change costs one topic's encoding and a write of the file, not an encoding of every
topic (which made creating n topics O(n^2): minutes for a few thousand). The store is
thread-safe: the Controller calls it from worker threads, off the event loop.
"""

from __future__ import annotations

import base64
import json
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path

from odradek.cluster.metadata import (
    QuotaEntity,
    TopicMetadata,
    merge_config,
    quota_entity_from_path,
    quota_entity_path,
)
from odradek.storage.checkpoints import write_durably
from odradek.storage.errors import StorageError

METADATA_FILE = "odradek-metadata.json"
_FORMAT_VERSION = 1
_ENCODE_SLICE = 500  # partitions per call of the C encoder (about 1.5 ms)


def new_cluster_id() -> str:
    """A cluster id as Kafka makes them: a random UUID in URL-safe base64, unpadded."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class EmbeddedMetadataStore:
    def __init__(self, directory: Path) -> None:
        self.path = directory / METADATA_FILE
        self._topics: dict[str, str] = {}  # name -> the topic's JSON
        self._broker_configs: dict[str, str] = {}
        self._user_configs: dict[str, dict[str, str]] = {}
        # Client quotas by entity path (users/<user>[/clients/<id>], clients/<id>).
        self._quota_configs: dict[str, dict[str, str]] = {}
        self._next_producer_id = 0
        self.cluster_id = ""
        self._lock = threading.Lock()  # one change and its write at a time
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
        self._topics = {n: _encode(TopicMetadata.from_json(n, t))
                        for n, t in data["topics"].items()}
        self._broker_configs = dict(data.get("broker_configs", {}))
        self._user_configs = {u: dict(c) for u, c in data.get("user_configs", {}).items()}
        self._quota_configs = {e: dict(c) for e, c in data.get("quota_configs", {}).items()}
        self._next_producer_id = int(data.get("next_producer_id", 0))

    def _save(self) -> None:
        head = json.dumps({
            "version": _FORMAT_VERSION,
            "cluster_id": self.cluster_id,
            "next_producer_id": self._next_producer_id,
            "broker_configs": dict(sorted(self._broker_configs.items())),
            "user_configs": dict(sorted(self._user_configs.items())),
            "quota_configs": dict(sorted(self._quota_configs.items())),
        }, indent=1)
        lines = [f"  {json.dumps(n)}: {encoded}" for n, encoded in sorted(self._topics.items())]
        topics = "{\n" + ",\n".join(lines) + "\n }" if lines else "{}"
        text = f'{head[:-2]},\n "topics": {topics}\n}}\n'
        write_durably(self.path, text.encode())

    # ---- topics -----------------------------------------------------------------------

    def topics(self) -> dict[str, TopicMetadata]:
        with self._lock:
            encoded = dict(self._topics)
        return {n: TopicMetadata.from_json(n, json.loads(t)) for n, t in encoded.items()}

    def create_topic(self, topic: TopicMetadata) -> None:
        encoded = _encode(topic)
        with self._lock:
            if topic.name in self._topics:
                raise ValueError(f"topic {topic.name} exists already")
            self._topics[topic.name] = encoded
            self._save_or_undo()

    def delete_topic(self, name: str) -> None:
        with self._lock:
            if self._topics.pop(name, None) is not None:
                self._save_or_undo()

    def update_topic(self, topic: TopicMetadata) -> None:
        encoded = _encode(topic)
        with self._lock:
            if topic.name not in self._topics:
                raise ValueError(f"topic {topic.name} does not exist")
            self._topics[topic.name] = encoded
            self._save_or_undo()

    def _save_or_undo(self) -> None:
        """Saves the change just made in memory; a save that fails (a full disk) undoes it,
        so memory never holds what the file does not. Call with the lock held."""
        try:
            self._save()
        except BaseException:
            self._load()
            raise

    # ---- broker configs and producer ids ----------------------------------------------

    def broker_configs(self) -> dict[str, str]:
        with self._lock:
            return dict(self._broker_configs)

    def set_broker_configs(self, configs: dict[str, str]) -> None:
        with self._lock:
            self._broker_configs = dict(configs)
            self._save_or_undo()

    def user_configs(self) -> dict[str, dict[str, str]]:
        """Each user's configs (SCRAM credentials by mechanism, quotas), by user name."""
        with self._lock:
            return {u: dict(c) for u, c in self._user_configs.items()}

    def alter_user_configs(self, changes: Mapping[str, Mapping[str, str | None]]) -> None:
        """Sets (or, for None, removes) configs of users, in one write."""
        with self._lock:
            for user, updates in changes.items():
                configs = merge_config(self._user_configs.get(user, {}), updates)
                if configs:
                    self._user_configs[user] = configs
                else:
                    self._user_configs.pop(user, None)
            self._save_or_undo()

    def quota_configs(self) -> dict[QuotaEntity, dict[str, str]]:
        with self._lock:
            stored = {e: dict(c) for e, c in self._quota_configs.items()}
        found = {}
        for path, configs in stored.items():
            entity = quota_entity_from_path(path)
            if entity is not None:
                found[entity] = configs
        return found

    def alter_quota_configs(self, changes: Mapping[QuotaEntity, Mapping[str, str | None]]
                            ) -> None:
        """Sets (or, for None, removes) quota configs of entities, in one write."""
        with self._lock:
            for entity, updates in changes.items():
                path = quota_entity_path(entity)
                configs = merge_config(self._quota_configs.get(path, {}), updates)
                if configs:
                    self._quota_configs[path] = configs
                else:
                    self._quota_configs.pop(path, None)
            self._save_or_undo()

    def allocate_producer_ids(self, count: int) -> int:
        with self._lock:
            first = self._next_producer_id
            self._next_producer_id += count
            self._save_or_undo()
            return first


def _encode(topic: TopicMetadata) -> str:
    """The topic on one line, by the C encoder (an indent would take the pure Python one,
    ten times slower). The C encoder holds the GIL for a whole call, so the partitions go
    a slice at a time: a worker thread encoding 10,000 of them keeps the event loop's
    thread from the GIL for a few milliseconds at most, not for 30."""
    data = topic.to_json()
    partitions = list(data["partitions"].items())
    encoded = ", ".join(json.dumps(dict(partitions[i:i + _ENCODE_SLICE]))[1:-1]
                        for i in range(0, len(partitions), _ENCODE_SLICE))
    return (f'{{"topic_id": {json.dumps(data["topic_id"])}, "partitions": {{{encoded}}}, '
            f'"configs": {json.dumps(data["configs"])}}}')
