"""What "ready" means for a broker: /health/ready on its HTTP listener.

A broker is ready when a client sent to it is served:

- listeners: its Kafka listeners are bound, and it is not shutting down;
- logs: its logs are loaded (and recovered) from at least one online log dir;
- registered: it is a member of its cluster: with ZooKeeper, its registration
  (/brokers/ids/<id>) is in force in a live session, and the controller has told it the
  cluster's metadata, itself among the brokers; on a single node, it is its own cluster
  once its listeners are known;
- partitions: no partition it leads is offline here (its log dir failed).

Each check reads a flag or a small set the broker keeps (offline partitions are few, and
only they are looked at): cheap enough for a probe every second.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.server.readiness import Readiness

if TYPE_CHECKING:
    from odradek.broker.kafka_server import KafkaServer

MAX_SHOWN = 5  # offline partitions named in a reason


def broker_readiness(server: KafkaServer) -> Readiness:
    config = server.config
    checks: dict[str, str | None] = {}
    if getattr(server, "stopping", False):
        checks["listeners"] = "the broker is shutting down"
    elif server.socket_server is None or not server.bound:
        checks["listeners"] = "the Kafka listeners are not bound yet"
    else:
        checks["listeners"] = None

    log_manager, replica_manager = server.log_manager, server.replica_manager
    if log_manager is None or replica_manager is None:
        checks["logs"] = "the logs are not loaded yet"
    elif not log_manager.online_dirs():
        checks["logs"] = "every log dir is offline"
    else:
        checks["logs"] = None

    cache, zk_store = server.metadata_cache, server.zk_store
    if cache is None:
        checks["registered"] = "not started"
    elif zk_store is not None:
        if zk_store.broker_epoch < 0:
            checks["registered"] = "not registered in ZooKeeper yet"
        elif not zk_store.registered:
            checks["registered"] = "the ZooKeeper session is lost or suspended"
        elif config.node_id not in cache.brokers:
            checks["registered"] = "the controller has not sent this broker the cluster " \
                                   "metadata yet"
        else:
            checks["registered"] = None
    else:
        checks["registered"] = (None if config.node_id in cache.brokers
                                else "the broker's listeners are not published yet")

    offline_led = []
    if replica_manager is not None and cache is not None:
        for tp in replica_manager.offline_partitions:
            info = cache.partition(tp)
            if info is not None and info.state.leader == config.node_id:
                offline_led.append(f"{tp[0]}-{tp[1]}")
    if offline_led:
        shown = ", ".join(sorted(offline_led)[:MAX_SHOWN])
        more = f" and {len(offline_led) - MAX_SHOWN} more" if len(offline_led) > MAX_SHOWN else ""
        checks["partitions"] = (f"{len(offline_led)} partitions led here are offline: "
                                f"{shown}{more}")
    else:
        checks["partitions"] = None

    details = {"broker": config.node_id, "cluster": cache.cluster_id if cache else None,
               "mode": "zookeeper" if zk_store is not None else "single node"}
    if log_manager is not None:
        offline_dirs = sorted(str(d) for d in log_manager.config.log_dirs
                              if d not in log_manager.online_dirs())
        if offline_dirs:
            details["offline_log_dirs"] = offline_dirs
    return Readiness(checks, details)
