"""The cluster's metadata in ZooKeeper, in Kafka's own znodes (docs/zookeeper.md).

znodes.py holds the paths and formats (Kafka's ZkData.scala), store.py the
ZooKeeperMetadataStore that reads and writes them with kazoo. The names below load on
first use, so that importing znodes (or this package) does not import kazoo.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "BrokerIdInUseError": "store",
    "ControllerMovedError": "store",
    "PartitionStateConflictError": "store",
    "SessionEvent": "store",
    "ZkWatch": "store",
    "ZooKeeperConnectionError": "store",
    "ZooKeeperMetadataStore": "store",
    "BrokerEndpoint": "znodes",
    "BrokerRegistration": "znodes",
    "Endpoint": "znodes",
    "TopicPartition": "znodes",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
