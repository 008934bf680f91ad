"""KafkaServer: one broker, its components started and stopped in order.

Start: log dirs checked against meta.properties -> metadata store, and the dynamic broker
configs kept there applied -> logs loaded (and recovered after a crash) -> the group
coordinator starts -> the controller hands partitions to the ReplicaManager (the
coordinator loads the __consumer_offsets partitions it now leads) -> listeners open.
Stop (SIGTERM, SIGINT): the group coordinator answers waiting joins and syncs -> waiting
fetches are released -> listeners close and in-flight requests finish -> logs flushed,
checkpointed, clean-shutdown marker written.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from pathlib import Path

from odradek.broker.admin import AdminManager
from odradek.broker.apis import KafkaApis
from odradek.broker.config_manager import load_dynamic_broker_configs
from odradek.broker.producer_ids import ProducerIdManager
from odradek.broker.replica_manager import ReplicaManager
from odradek.cluster.controller import Controller
from odradek.cluster.embedded import EmbeddedMetadataStore
from odradek.coordinator.group.group_coordinator import GroupConfig, GroupCoordinator
from odradek.coordinator.group.group_metadata_manager import GroupMetadataManager, OffsetConfig
from odradek.coordinator.timer import AsyncioTimer, SystemTime
from odradek.server.config import BrokerConfig
from odradek.server.network import BoundListener, SocketServer
from odradek.storage.checkpoints import write_durably
from odradek.storage.config import LogConfig
from odradek.storage.errors import StorageError
from odradek.storage.log_manager import LogManager

log = logging.getLogger(__name__)

META_PROPERTIES = "meta.properties"


class KafkaServer:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.log_manager: LogManager | None = None
        self.socket_server: SocketServer | None = None
        self.replica_manager: ReplicaManager | None = None
        self.group_coordinator: GroupCoordinator | None = None
        self.bound: list[BoundListener] = []
        self._stop = asyncio.Event()

    async def startup(self) -> None:
        config = self.config
        store = EmbeddedMetadataStore(config.log_dirs[0])
        for log_dir in config.log_dirs:
            check_meta_properties(log_dir, config.node_id, store.cluster_id)
        config = self.config = load_dynamic_broker_configs(config, store)
        controller = Controller(config.node_id, store)
        self.log_manager = LogManager(
            config.log_manager_config, config.log_config,
            topic_config=lambda topic: self._topic_log_config(controller, topic),
        )
        self.log_manager.startup()
        self.replica_manager = ReplicaManager(config.node_id, self.log_manager)
        # Started before the controller hands out partitions, so that leading a
        # __consumer_offsets partition loads its groups.
        time, timer = SystemTime(), AsyncioTimer()
        self.group_coordinator = GroupCoordinator(
            GroupConfig.from_broker_config(config),
            GroupMetadataManager(OffsetConfig.from_broker_config(config), self.replica_manager,
                                 time, timer),
            time, timer)
        self.group_coordinator.startup()
        controller.startup(self.replica_manager)
        self._report_stray_logs(controller)
        admin = AdminManager(config, controller, self.replica_manager)
        admin.configs.on_broker_config_change = self._broker_config_changed
        apis = KafkaApis(config, self.replica_manager, controller, admin,
                         ProducerIdManager(store), self.group_coordinator)
        self.socket_server = SocketServer(
            apis, max_frame_size=config.socket_request_max_bytes,
            connections_max_idle_ms=config.connections_max_idle_ms,
        )
        self.bound = await self.socket_server.start(
            [(li.name, li.host, li.port) for li in config.listeners])
        ports = {b.name: b.port for b in self.bound}
        for adv in config.advertised_listeners:
            host = adv.host or socket.getfqdn()
            apis.advertised[adv.name] = (host, adv.port or ports[adv.name])
        log.info("broker %d started (cluster %s), data in %s", config.node_id,
                 store.cluster_id, ", ".join(str(d) for d in config.log_dirs))

    def _topic_log_config(self, controller: Controller, topic: str) -> LogConfig | None:
        metadata = controller.topics.get(topic)
        if metadata is None or not metadata.configs:
            return None
        return self.config.log_config.with_overrides(metadata.configs)

    def _broker_config_changed(self, config: BrokerConfig) -> None:
        # Dynamic broker configs: the topic defaults apply at once; the other dynamic
        # settings (log.cleaner.threads, producer.id.expiration.ms) at the next start.
        self.config = config
        assert self.replica_manager is not None
        self.replica_manager.default_log_config_changed(config.log_config)

    def _report_stray_logs(self, controller: Controller) -> None:
        # Logs of topics the metadata does not know (e.g. a deletion interrupted by a
        # crash) are left on disk for the operator, as Kafka's stray logs are.
        assert self.log_manager is not None
        for partition_log in self.log_manager.logs():
            if partition_log.topic not in controller.topics:
                log.warning("%s: no such topic in the cluster metadata; its log is kept "
                            "but not served", partition_log.directory)

    async def shutdown(self) -> None:
        log.info("broker %d shutting down", self.config.node_id)
        if self.group_coordinator is not None:
            # Waiting JoinGroup and SyncGroup requests answer now (NOT_COORDINATOR), so the
            # connections can finish them.
            self.group_coordinator.shutdown()
        if self.replica_manager is not None:
            self.replica_manager.shutdown()  # waiting fetches answer now, not at max_wait
        if self.socket_server is not None:
            await self.socket_server.stop()
        if self.log_manager is not None:
            self.log_manager.shutdown()
        log.info("broker %d stopped", self.config.node_id)

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        """Starts, serves until SIGTERM or SIGINT, stops cleanly."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        try:
            await self.startup()
            await self._stop.wait()
        finally:
            await self.shutdown()


def check_meta_properties(log_dir: Path, node_id: int, cluster_id: str) -> None:
    """Each log dir remembers which broker and cluster it belongs to (Kafka's
    meta.properties), so a misconfigured broker never serves another broker's data."""
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / META_PROPERTIES
    if path.exists():
        props = dict(line.split("=", 1) for line in path.read_text().splitlines()
                     if "=" in line and not line.startswith("#"))
        if props.get("broker.id") not in (None, str(node_id)):
            raise StorageError(f"{path} says this log dir belongs to broker "
                               f"{props['broker.id']}, but this is broker {node_id} (node.id)")
        if props.get("cluster.id") not in (None, cluster_id):
            raise StorageError(f"{path} says this log dir belongs to cluster "
                               f"{props['cluster.id']}, not {cluster_id}")
        return
    text = f"#odradek\nversion=0\nbroker.id={node_id}\ncluster.id={cluster_id}\n"
    write_durably(path, text.encode())
