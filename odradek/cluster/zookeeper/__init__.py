"""The cluster's metadata in ZooKeeper, in Kafka's own znodes (docs/zookeeper.md).

znodes.py holds the paths and formats (Kafka's ZkData.scala), store.py the
ZooKeeperMetadataStore that reads and writes them with kazoo.
"""

from odradek.cluster.zookeeper.store import (
    BrokerIdInUseError,
    ControllerMovedError,
    PartitionStateConflictError,
    SessionEvent,
    ZkWatch,
    ZooKeeperConnectionError,
    ZooKeeperMetadataStore,
)
from odradek.cluster.zookeeper.znodes import (
    BrokerEndpoint,
    BrokerRegistration,
    Endpoint,
    TopicPartition,
)

__all__ = [
    "BrokerEndpoint",
    "BrokerIdInUseError",
    "BrokerRegistration",
    "ControllerMovedError",
    "Endpoint",
    "PartitionStateConflictError",
    "SessionEvent",
    "TopicPartition",
    "ZkWatch",
    "ZooKeeperConnectionError",
    "ZooKeeperMetadataStore",
]
