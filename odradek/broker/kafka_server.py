"""KafkaServer: one broker, its components started and stopped in order.

Start: metadata store (the embedded one, or a ZooKeeper session) -> log dirs checked
against meta.properties, and the dynamic broker configs kept in the store applied -> logs
loaded (and recovered after a crash) -> the group coordinator starts -> on one node, the
controller hands partitions to the ReplicaManager (the coordinator loads the
__consumer_offsets partitions it now leads) -> listeners open -> in a cluster, the broker
registers in ZooKeeper and its KafkaController joins the election -> the HTTP listener
(http.listeners: health, metrics) opens; the controller's LeaderAndIsr then says what to
lead and follow.
Stop (SIGTERM, SIGINT): /health/ready says not ready at once -> in a cluster, a
controlled shutdown (leaderships move away while the listeners still serve) -> the group
coordinator answers waiting joins and syncs -> fetchers stop, waiting fetches and
produces are released, HWs checkpointed -> the controller resigns -> listeners close and
in-flight requests finish -> the HTTP listener closes -> the ZooKeeper session ends ->
logs flushed, checkpointed, clean-shutdown marker written.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from odradek.broker.admin import AdminManager
from odradek.broker.alter_partition_manager import AlterPartitionManager
from odradek.broker.apis import KafkaApis
from odradek.broker.auth_helper import ALLOW_ALL, AuthHelper
from odradek.broker.config_manager import CLUSTER_DEFAULT_ENTITY, load_dynamic_broker_configs
from odradek.broker.controller_channel import ControllerChannelManager
from odradek.broker.health import broker_readiness
from odradek.broker.inter_broker_client import DisconnectedError, InterBrokerClient
from odradek.broker.metadata_cache import Broker, MetadataCache
from odradek.broker.producer_ids import ProducerIdManager
from odradek.broker.quota_apis import QuotaApis
from odradek.broker.replica_fetcher import FetcherConfig, ReplicaFetcherManager
from odradek.broker.replica_manager import ReplicaManager
from odradek.broker.scram_apis import ScramApis
from odradek.broker.txn_verification import TransactionVerifier
from odradek.cluster.controller import Controller
from odradek.cluster.embedded import EmbeddedMetadataStore
from odradek.cluster.metadata import MetadataStore
from odradek.coordinator.group.group_coordinator import GroupConfig, GroupCoordinator
from odradek.coordinator.group.group_metadata_manager import GroupMetadataManager, OffsetConfig
from odradek.coordinator.timer import AsyncioTimer, SystemTime, Time, Timer, TimerTask
from odradek.coordinator.transaction.marker_channel import TxnMarkerChannel
from odradek.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from odradek.coordinator.transaction.transaction_state_manager import (
    TransactionConfig,
    TransactionStateManager,
)
from odradek.metrics.broker_metrics import BrokerMetrics
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError
from odradek.protocol.messages.controlled_shutdown_request import ControlledShutdownRequest
from odradek.protocol.messages.controlled_shutdown_response import ControlledShutdownResponse
from odradek.security.credential_cache import CredentialCache
from odradek.security.principal import ANONYMOUS, KafkaPrincipal
from odradek.server.channel_builder import (
    SSL_CONFIGS,
    build_listener_security,
    listener_ssl_values,
    prepare_tls_reload,
)
from odradek.server.config import BrokerConfig, HttpListener
from odradek.server.connection_quotas import ConnectionLimits, ConnectionQuotas
from odradek.server.network import BoundListener, SocketServer
from odradek.server.quota_manager import QuotaManagers
from odradek.storage.checkpoints import write_durably
from odradek.storage.config import LogConfig
from odradek.storage.errors import InvalidConfigError, StorageError
from odradek.storage.log import system_clock
from odradek.storage.log_dir import LogDir, lock_log_dir
from odradek.storage.log_manager import LogManager

if TYPE_CHECKING:
    # A ZooKeeper cluster's parts (and kazoo) load in startup() when zookeeper.connect is
    # set, the ACL store with an authorizer, TLS and SCRAM with a listener that uses them:
    # a single node starts without them.
    from odradek.broker.inter_broker_apis import InterBrokerApis
    from odradek.broker.inter_broker_security import InterBrokerSecurity
    from odradek.cluster.kafka_controller import KafkaController
    from odradek.cluster.zookeeper.store import ZkWatch, ZooKeeperMetadataStore
    from odradek.console import Console
    from odradek.registry.server import RegistryServer
    from odradek.security.acl_store import AclStore
    from odradek.server.http_server import HttpServer

log = logging.getLogger(__name__)

META_PROPERTIES = "meta.properties"
ACL_FILE = "acls.json"  # the ACLs of a single node without ZooKeeper, in its first log dir
SLOW_SHUTDOWN_S = 15.0  # a shutdown longer than this logs what it still waits on


class BrokerClock(Protocol):
    """Time for everything of a broker that reads or waits on it: the coordinators' Time
    and Timer, and (called) the storage layer's clock. odradek.testing's TestClock."""

    def milliseconds(self) -> int: ...

    def __call__(self) -> int: ...

    def schedule(self, delay_ms: int, callback: Callable[[], object]) -> TimerTask: ...


class KafkaServer:
    def __init__(self, config: BrokerConfig, clock: BrokerClock | None = None) -> None:
        self.config = config
        self.clock = clock  # None: the system's
        self.log_manager: LogManager | None = None
        self.socket_server: SocketServer | None = None
        self.credentials = CredentialCache()  # SCRAM users, for the SASL listeners
        self.inter_broker_security: InterBrokerSecurity | None = None  # TLS/SASL to peers
        self.acl_store: AclStore | None = None  # with an authorizer only
        self.quotas: QuotaManagers | None = None
        self.quota_apis: QuotaApis | None = None
        self.replica_manager: ReplicaManager | None = None
        self.group_coordinator: GroupCoordinator | None = None
        self.transaction_coordinator: TransactionCoordinator | None = None
        self.marker_client: InterBrokerClient | None = None
        self.txn_verifier: TransactionVerifier | None = None
        self.metadata_cache: MetadataCache | None = None
        self.zk_store: ZooKeeperMetadataStore | None = None
        self.kafka_controller: KafkaController | None = None
        self.alter_partition_manager: AlterPartitionManager | None = None
        self._periodic: asyncio.Task[None] | None = None
        self._config_watch: ZkWatch | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._static_config = config  # without the dynamic configs kept in the store
        self.admin: AdminManager | None = None
        self.bound: list[BoundListener] = []
        self.http_server: HttpServer | None = None  # http.listeners: health and metrics
        self.console: Console | None = None  # the web console on the HTTP listener
        self.registry: RegistryServer | None = None  # registry.listeners
        self.auth: AuthHelper = ALLOW_ALL
        self.stopping = False  # from the start of shutdown: /health/ready says not ready
        self._stop = asyncio.Event()
        self._dir_locks: list[int] = []
        self.exit_code = 0  # non-zero when the broker stopped because its dirs failed
        # Prometheus metrics (/metrics): counted on the request paths, the rest read
        # from the components when scraped.
        self.metrics = BrokerMetrics(self)

    async def startup(self) -> None:
        config = self.config
        # First of all: a second broker on these dirs stops here, having changed nothing.
        for log_dir in config.log_dirs:
            self._dir_locks.append(lock_log_dir(log_dir))
        zk_store: ZooKeeperMetadataStore | None = None
        store: MetadataStore
        if config.zookeeper_connect:
            from odradek.cluster.zookeeper.store import ZooKeeperMetadataStore  # kazoo: here

            zk_store = self.zk_store = ZooKeeperMetadataStore(
                config.zookeeper_connect, config.node_id,
                session_timeout_ms=config.get("zookeeper.session.timeout.ms"),
                connection_timeout_ms=config.get("zookeeper.connection.timeout.ms"))
            store = await asyncio.to_thread(zk_store.start)
        else:
            store = EmbeddedMetadataStore(config.log_dirs[0])
        for log_dir in config.log_dirs:
            check_meta_properties(log_dir, config.node_id, store.cluster_id)
        self._static_config = config
        config = self.config = load_dynamic_broker_configs(config, store)
        # SCRAM users, then each listener's TLS and SASL: a mistake in them stops the
        # broker here, before anything is served.
        self.credentials.load(await asyncio.to_thread(store.user_configs))
        # How this broker connects to the others: the inter-broker listener's TLS and
        # SASL (sasl.mechanism.inter.broker.protocol, its JAAS line's username/password).
        if zk_store is not None:
            from odradek.broker.inter_broker_security import inter_broker_security

            self.inter_broker_security = inter_broker_security(config)
        security = {li.name: build_listener_security(config, li, self.credentials.lookup)
                    for li in config.listeners if li.security_protocol != "PLAINTEXT"}
        auth = self.auth = await self._start_authorizer(config, zk_store)
        cache: MetadataCache
        controller: Controller
        if zk_store is not None:
            from odradek.cluster.zk_topic_admin import ZkTopicAdmin

            cache = MetadataCache(config.node_id, store.cluster_id)
            controller = ZkTopicAdmin(
                config.node_id, zk_store, cache.topics, cache.topics_by_id,
                lambda: {b.id: b.rack for b in cache.brokers.values()})
        else:
            controller = Controller(config.node_id, store)
            cache = MetadataCache(config.node_id, store.cluster_id, controller.topics,
                                  controller.topics_by_id)
        self.metadata_cache = cache
        self.log_manager = LogManager(
            config.log_manager_config, config.log_config,
            topic_config=self._topic_log_config,
            clock=self.clock or system_clock,
        )
        loop = asyncio.get_running_loop()
        self.log_manager.on_log_dir_failure = lambda d: loop.call_soon_threadsafe(
            self._log_dir_failed, d)
        self.log_manager.startup()
        fetcher_manager: ReplicaFetcherManager | None = None
        if zk_store is not None:
            listener = config.inter_broker_listener_name
            fetcher_manager = ReplicaFetcherManager(
                config.node_id, lambda broker_id: cache.endpoint(broker_id, listener),
                FetcherConfig.from_broker_config(config.get),
                security=self.inter_broker_security, topic_stats=self.metrics.topic_stats)
        self.replica_manager = ReplicaManager(
            config.node_id, self.log_manager, clock=self.clock or system_clock,
            replica_lag_time_max_ms=config.get("replica.lag.time.max.ms"),
            fetcher_manager=fetcher_manager, topic_stats=self.metrics.topic_stats)
        # Started before the controller hands out partitions, so that leading a
        # __consumer_offsets partition loads its groups.
        time: Time = self.clock or SystemTime()
        timer: Timer = self.clock or AsyncioTimer()
        self.group_coordinator = GroupCoordinator(
            GroupConfig.from_broker_config(config),
            GroupMetadataManager(OffsetConfig.from_broker_config(config), self.replica_manager,
                                 time, timer),
            time, timer)
        self.group_coordinator.startup()
        # Likewise for __transaction_state: leading one of its partitions loads its
        # transactions (and completes those a previous coordinator left half done).
        self.marker_client = (InterBrokerClient(client_id=f"broker-{config.node_id}-txn-markers",
                                               security=self.inter_broker_security)
                              if zk_store is not None else None)
        group_coordinator = self.group_coordinator
        markers = TxnMarkerChannel(
            config.node_id, cache, config.inter_broker_listener_name, self.replica_manager,
            self.marker_client, lambda: group_coordinator.on_transaction_completed)
        transaction_config = TransactionConfig.from_broker_config(config)
        self.transaction_coordinator = TransactionCoordinator(
            transaction_config,
            TransactionStateManager(transaction_config, self.replica_manager, time, timer),
            ProducerIdManager(store), markers, group_coordinator.partition_for, time, timer)
        self.transaction_coordinator.startup()
        inter_broker: InterBrokerApis | None = None
        if zk_store is not None:
            from odradek.broker.inter_broker_apis import InterBrokerApis
            from odradek.cluster.kafka_controller import KafkaController

            self.kafka_controller = KafkaController(
                config.node_id, zk_store,
                ControllerChannelManager(InterBrokerClient(
                    client_id=f"broker-{config.node_id}-controller",
                    security=self.inter_broker_security)),
                inter_broker_listener=config.inter_broker_listener_name,
                unclean_leader_election=lambda configs: config.log_config.with_overrides(
                    configs).unclean_leader_election_enable,
                auto_leader_rebalance=config.get("auto.leader.rebalance.enable"),
                imbalance_check_interval_s=config.get("leader.imbalance.check.interval.seconds"),
                imbalance_percentage=config.get("leader.imbalance.per.broker.percentage"))
            inter_broker = InterBrokerApis(config.node_id, zk_store, cache, self.replica_manager,
                                           self.kafka_controller)
            self.alter_partition_manager = AlterPartitionManager(
                config.node_id, lambda: self._controller_endpoint(cache),
                InterBrokerClient(client_id=f"broker-{config.node_id}-alter-partition",
                                  security=self.inter_broker_security),
                self.replica_manager.alter_partition_completed,
                broker_epoch=self._broker_epoch)
            self.alter_partition_manager.start()
            self.replica_manager.alter_partition = self.alter_partition_manager.submit
        else:
            await controller.startup(self.replica_manager)
            self._report_stray_logs(controller)
        admin = self.admin = AdminManager(config, controller, self.replica_manager,
                                          self.kafka_controller)
        admin.configs.on_broker_config_change = self._broker_config_changed
        admin.configs.prepare_reconfiguration = self._prepare_tls_reload
        # KIP-890: a transactional produce's partition must be in its transaction.
        self.txn_verifier = TransactionVerifier(
            config.node_id, cache, config.inter_broker_listener_name,
            self.transaction_coordinator,
            InterBrokerClient(client_id=f"broker-{config.node_id}-txn-verification",
                              security=self.inter_broker_security)
            if zk_store is not None else None,
            enabled=config.get("transaction.partition.verification.enable"),
            request_timeout_ms=config.get("request.timeout.ms"))
        # Client quotas (KIP-13, KIP-55, KIP-124, KIP-599): the stored ones, before the
        # listeners open.
        self.quotas = QuotaManagers(
            samples=config.get("quota.window.num"),
            window_s=config.get("quota.window.size.seconds"),
            controller_samples=config.get("controller.quota.window.num"),
            controller_window_s=config.get("controller.quota.window.size.seconds"))
        self.quota_apis = QuotaApis(store, self.quotas)
        await self.quota_apis.reload()
        apis = KafkaApis(config, self.replica_manager, controller, admin,
                         self.transaction_coordinator, self.group_coordinator, cache,
                         inter_broker, self.txn_verifier,
                         ScramApis(store, self.credentials), auth, self.acl_store,
                         self.quota_apis)
        self.socket_server = SocketServer(
            apis, max_frame_size=config.socket_request_max_bytes,
            connections_max_idle_ms=config.connections_max_idle_ms,
            queued_max_request_bytes=config.get("queued.max.request.bytes"),
            request_receive_timeout_ms=config.get("socket.request.receive.timeout.ms"),
            connection_quotas=ConnectionQuotas(
                samples=config.get("quota.window.num"),
                window_s=config.get("quota.window.size.seconds")),
            request_metrics=self.metrics.requests,
        )
        # max.connections(.per.ip), max.connection.creation.rate: followed as they change.
        await self.socket_server.set_connection_limits(ConnectionLimits.from_config(config))
        self.bound = await self.socket_server.start(
            [(li.name, li.host, li.port) for li in config.listeners], security)
        endpoints = self._advertised_endpoints()
        if zk_store is not None:
            from odradek.cluster.zookeeper.znodes import BrokerEndpoint

            assert self.kafka_controller is not None
            # Registered once the listeners are bound: the controller's first request
            # comes at once.
            protocols = {li.name: li.security_protocol for li in config.advertised_listeners}
            await asyncio.to_thread(zk_store.register_broker, [
                BrokerEndpoint(name, host, port, protocols[name])
                for name, (host, port) in endpoints.items()], config.broker_rack)
            await self.kafka_controller.startup()
            loop = asyncio.get_running_loop()
            self._config_watch = await asyncio.to_thread(
                zk_store.watch_config_changes,
                lambda entities: loop.call_soon_threadsafe(self._config_changes, entities))
        else:
            cache.set_local_broker(Broker(config.node_id, endpoints, config.broker_rack))
        self._periodic = asyncio.get_running_loop().create_task(
            self.replica_manager.run_periodic_tasks(
                config.get("replica.high.watermark.checkpoint.interval.ms")),
            name="replica-manager-periodic")
        if config.http_listeners:
            # Health, metrics and the console (odradek/server/http_server.py,
            # odradek/console/), on this event loop; aiohttp imported only for them.
            from odradek.console import console_for
            from odradek.server.http_server import HttpServer

            if config.get("http.console.enabled"):
                from odradek.broker.inter_broker_security import inter_broker_security

                self.console = console_for(self, self.inter_broker_security
                                           or inter_broker_security(config))
            self.http_server = HttpServer(
                config.http_listeners, lambda: broker_readiness(self),
                self.metrics.exposition_async, name=f"Odradek broker {config.node_id}",
                routes=self.console.add_routes if self.console is not None else None)
            await self.http_server.start()
        if config.registry_listener is not None:
            await self._start_registry(config.registry_listener)
        log.info("broker %d started (cluster %s), data in %s", config.node_id,
                 store.cluster_id, ", ".join(str(d) for d in config.log_dirs))

    async def _start_registry(self, listener: HttpListener) -> None:
        """registry.listeners: a schema registry in this process (odradek/registry), a
        client of this broker's first PLAINTEXT listener, as `odradek registry` would be.
        It reads _schemas in a thread while the broker serves; a registry that cannot
        start is logged, and the broker goes on."""
        from odradek.registry.server import RegistryServer  # only when asked for

        plaintext = {li.name for li in self.config.listeners
                     if li.security_protocol == "PLAINTEXT"}  # one at least: checked
        host, port = next(endpoint for name, endpoint in self._advertised_endpoints().items()
                          if name in plaintext)
        self.registry = RegistryServer(
            {"bootstrap.servers": f"{host}:{port}", "client.id": "odradek-registry",
             "log_level": 3}, str(listener), replication_factor=1)
        try:
            await self.registry.start()
        except Exception as e:
            log.error("the schema registry at %s did not start: %s", listener, e)
            await self.registry.stop()
            self.registry = None

    async def _controlled_shutdown(self) -> None:
        """Asks the controller to move this broker's leaderships away and take it out of
        the ISRs (Kafka's controlledShutdown), while the listeners still serve its
        LeaderAndIsr; tries again while partitions it leads have no other replica in sync."""
        config = self.config
        assert self.metadata_cache is not None
        client = InterBrokerClient(client_id=f"broker-{config.node_id}-controlled-shutdown",
                                   security=self.inter_broker_security)
        retries = config.get("controlled.shutdown.max.retries")
        try:
            for attempt in range(1, retries + 1):
                controller = self._controller_endpoint(self.metadata_cache)
                if controller is not None:
                    controller_id, address = controller
                    client.update_endpoints({controller_id: address})
                    try:
                        response = cast(ControlledShutdownResponse, await client.send(
                            controller_id, ControlledShutdownRequest(
                                broker_id=config.node_id, broker_epoch=self._broker_epoch())))
                    except (DisconnectedError, KafkaError) as e:
                        log.info("controlled shutdown attempt %d failed: %s", attempt, e)
                    else:
                        remaining = [f"{p.topic_name}-{p.partition_index}"
                                     for p in response.remaining_partitions]
                        if response.error_code == ErrorCode.NONE and not remaining:
                            log.info("controlled shutdown of broker %d done", config.node_id)
                            return
                        log.info("controlled shutdown attempt %d: %s; still leading %s",
                                 attempt, ErrorCode(response.error_code).name, remaining)
                if attempt < retries:
                    await asyncio.sleep(config.get("controlled.shutdown.retry.backoff.ms") / 1000)
            log.warning("controlled shutdown of broker %d failed: stopping anyway; the "
                        "controller elects new leaders when its session ends", config.node_id)
        finally:
            await client.close()

    def _controller_endpoint(self, cache: MetadataCache) -> tuple[int, tuple[str, int]] | None:
        controller_id = cache.controller_id
        if controller_id is None:
            return None
        address = cache.endpoint(controller_id, self.config.inter_broker_listener_name)
        return None if address is None else (controller_id, address)

    def _advertised_endpoints(self) -> dict[str, tuple[str, int]]:
        """Listener name -> (host, port) as clients are told; port 0 means the one bound."""
        ports = {b.name: b.port for b in self.bound}
        return {adv.name: (adv.host or socket.getfqdn(), adv.port or ports[adv.name])
                for adv in self.config.advertised_listeners}

    def _topic_log_config(self, topic: str) -> LogConfig | None:
        assert self.metadata_cache is not None
        metadata = self.metadata_cache.topics.get(topic)
        configs = (metadata.configs if metadata is not None
                   else self.metadata_cache.topic_configs.get(topic))
        if not configs:
            return None
        return self.config.log_config.with_overrides(configs)

    def _config_changes(self, entities: list[str]) -> None:
        """Config changes another broker wrote to ZooKeeper (its change notifications):
        a topic's overrides apply to this broker's replicas at once."""
        from odradek.cluster.zookeeper.znodes import desanitize

        for entity in entities:
            kind, _, name = entity.partition("/")
            if kind == "topics":
                self._in_background(self._reload_topic_configs(name))
            elif kind == "brokers" and name in (CLUSTER_DEFAULT_ENTITY, str(self.config.node_id)):
                self._in_background(self._reload_broker_configs())
            if kind == "users" and "/" not in name:
                self._in_background(self._reload_user(desanitize(name)))
            if kind in ("users", "clients") and self.quota_apis is not None:
                self._in_background(self.quota_apis.reload())  # client quotas

    async def _start_authorizer(self, config: BrokerConfig,
                                zk_store: ZooKeeperMetadataStore | None) -> AuthHelper:
        """authorizer.class.name: Kafka's ACL authorizer over every ACL, loaded before the
        listeners open and followed as other brokers change them (ZooKeeper's change
        notifications); its store is /kafka-acl on ZooKeeper, acls.json on one node."""
        if not config.get("authorizer.class.name"):
            return ALLOW_ALL
        from odradek.broker.inter_broker_security import inter_broker_security
        from odradek.security.acl_store import EmbeddedAclStore, ZkAclStore
        from odradek.security.authorizer import AclAuthorizer, parse_super_users

        super_users = parse_super_users(config.get("super.users") or "")
        # Brokers send each other LeaderAndIsr, Fetch, AddPartitionsToTxn... which need
        # CLUSTER_ACTION: the principal they connect as must be a super user, as in Kafka.
        # So do the web console's requests (odradek/console), on a single node too.
        console = bool(config.http_listeners) and config.get("http.console.enabled")
        security = (self.inter_broker_security if zk_store is not None
                    else inter_broker_security(config) if console else None)
        broker: KafkaPrincipal | None = None  # over SSL alone: its certificate's name
        if (zk_store is not None or console) and security is None:
            broker = ANONYMOUS
        elif security is not None and security.sasl_mechanism:
            broker = KafkaPrincipal.user(security.username or "")
        if broker is not None and broker not in super_users:
            who = ("brokers connect to each other as" if zk_store is not None else
                   "the web console's requests use (or set http.console.enabled=false)")
            raise InvalidConfigError(
                f"with an authorizer, super.users must hold {broker}: the principal {who} "
                f"on the inter-broker listener {config.inter_broker_listener_name}",
                key="super.users")
        authorizer = AclAuthorizer(
            super_users=super_users,
            allow_everyone_if_no_acl_found=config.get("allow.everyone.if.no.acl.found"))
        store: AclStore = (ZkAclStore(zk_store.client) if zk_store is not None
                           else EmbeddedAclStore(config.log_dirs[0] / ACL_FILE))
        await asyncio.to_thread(store.start, authorizer.apply)
        self.acl_store = store
        log.info("authorizer: %d ACLs, super users %s", authorizer.acl_count,
                 sorted(authorizer.super_users) or "none")
        return AuthHelper(authorizer)

    async def _reload_user(self, user: str) -> None:
        """A user's SCRAM credentials, changed through another broker."""
        assert self.zk_store is not None
        configs = await asyncio.to_thread(self.zk_store.user_configs)
        self.credentials.update_user(user, configs.get(user))

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)  # referenced until done
        task.add_done_callback(self._background.discard)

    async def _reload_broker_configs(self) -> None:
        """The cluster-wide or this broker's dynamic configs, changed through another
        broker: applied as if changed here."""
        assert self.zk_store is not None and self.admin is not None
        config = await asyncio.to_thread(load_dynamic_broker_configs, self._static_config,
                                         self.zk_store)
        if config.dynamic != self.config.dynamic or (
                config.dynamic_defaults != self.config.dynamic_defaults):
            self.admin.configs.config = config
            self._broker_config_changed(config)
            log.info("dynamic broker configs changed: %s", {**config.dynamic_defaults,
                                                             **config.dynamic})

    async def _reload_topic_configs(self, name: str) -> None:
        assert self.zk_store is not None and self.metadata_cache is not None
        assert self.replica_manager is not None
        topic = await asyncio.to_thread(self.zk_store.topic, name)
        if topic is None:
            return
        configs = self.metadata_cache.topic_configs.setdefault(name, {})
        configs.clear()  # in place: the cache's TopicMetadata shares this dict
        configs.update(topic.configs)
        known = self.metadata_cache.topics.get(name)
        if known is not None:
            self.replica_manager.topic_config_changed(known)
        log.info("topic %s configs changed: %s", name, topic.configs)

    def _broker_config_changed(self, config: BrokerConfig) -> None:
        # Dynamic broker configs: the topic defaults and connection limits apply at once;
        # the other dynamic settings (log.cleaner.threads, producer.id.expiration.ms) at
        # the next start.
        self.config = config
        if self.txn_verifier is not None:
            self.txn_verifier.enabled = config.get("transaction.partition.verification.enable")
        if self.socket_server is not None:
            self.socket_server.update_connection_limits(ConnectionLimits.from_config(config))
        assert self.replica_manager is not None
        self.replica_manager.default_log_config_changed(config.log_config)

    def _broker_epoch(self) -> int:
        return -1 if self.zk_store is None else self.zk_store.broker_epoch

    def _prepare_tls_reload(self, config: BrokerConfig) -> Callable[[], None] | None:
        """The TLS listeners whose keystore or truststore settings or files changed, with
        their new contexts checked (KIP-226; in a worker thread: files are read); what
        installs them, and the inter-broker client's side of its listener, or None."""
        assert self.socket_server is not None
        reloads = []
        for listener in config.listeners:
            security = self.socket_server.security.get(listener.name)
            if security is None or security.tls is None:
                continue
            context = prepare_tls_reload(config, security, listener)
            if context is not None:
                reloads.append((security, context, listener_ssl_values(config, listener)))
        if not reloads:
            return None
        client_values = None
        if self.inter_broker_security is not None and \
                self.inter_broker_security.ssl_context is not None and any(
                    s.name == config.inter_broker_listener_name for s, _, _ in reloads):
            client_values = config.listener_values(config.inter_broker_listener_name,
                                                   SSL_CONFIGS)

        def install() -> None:
            for security, context, values in reloads:
                assert security.tls is not None
                security.tls.install(context, values)
                log.info("listener %s: reloaded its TLS keystore and truststore; new "
                         "connections use them", security.name)
            if client_values is not None:
                from odradek.security.ssl_factory import SslConfigError, reload_client_context

                assert self.inter_broker_security is not None
                assert self.inter_broker_security.ssl_context is not None
                try:
                    reload_client_context(self.inter_broker_security.ssl_context,
                                          client_values)
                except SslConfigError as e:  # the files changed again since prepared
                    log.error("inter-broker client: the reloaded TLS stores cannot be "
                              "used; connections keep the previous ones: %s", e)

        return install

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
        self.stopping = True
        watchdog = asyncio.create_task(_report_slow_shutdown(SLOW_SHUTDOWN_S))
        try:
            await self._shut_down()
        finally:
            watchdog.cancel()
        log.info("broker %d stopped", self.config.node_id)

    async def _shut_down(self) -> None:
        if self.registry is not None:
            # First, while the broker it is a client of still serves: it leaves its group
            # and flushes its producer at once rather than waiting on a broker gone.
            await self.registry.stop()
        if (self.kafka_controller is not None and self.socket_server is not None
                and self.config.get("controlled.shutdown.enable")):
            await self._controlled_shutdown()
        if self.group_coordinator is not None:
            # Waiting JoinGroup and SyncGroup requests answer now (NOT_COORDINATOR), so the
            # connections can finish them.
            self.group_coordinator.shutdown()
        if self.transaction_coordinator is not None:
            self.transaction_coordinator.shutdown()  # markers in flight: the next one resends
        if self.marker_client is not None:
            await self.marker_client.close()
        if self.txn_verifier is not None and self.txn_verifier.client is not None:
            await self.txn_verifier.client.close()
        if self._periodic is not None:
            self._periodic.cancel()
            await asyncio.gather(self._periodic, return_exceptions=True)
        if self.replica_manager is not None:
            if self.replica_manager.fetcher_manager is not None:
                await self.replica_manager.fetcher_manager.shutdown()
            self.replica_manager.shutdown()  # waiting fetches answer now, not at max_wait
        if self.alter_partition_manager is not None:
            await self.alter_partition_manager.shutdown()
        if self.kafka_controller is not None:
            await self.kafka_controller.shutdown()
        if self.socket_server is not None:
            await self.socket_server.stop()
        if self.http_server is not None:
            await self.http_server.stop()
        if self.console is not None:
            await self.console.close()
        if self._config_watch is not None:
            self._config_watch.cancel()
        if self.acl_store is not None:
            await asyncio.to_thread(self.acl_store.close)
        if self.zk_store is not None:
            # The session ends: the controller sees this broker leave at once.
            await asyncio.to_thread(self.zk_store.close)
        if self.log_manager is not None:
            self.log_manager.shutdown()
        while self._dir_locks:  # last: the dirs are another broker's to take from here
            os.close(self._dir_locks.pop())

    def _log_dir_failed(self, log_dir: LogDir) -> None:
        """A log dir went offline (KIP-112): its partitions answer KAFKA_STORAGE_ERROR; in a
        cluster the controller hears of it and moves their leadership to other brokers; a
        broker with no dir left stops, as Kafka's does."""
        assert self.log_manager is not None
        if not self.log_manager.online_dirs():
            log.error("every log dir is offline: shutting down")
            self.exit_code = 1
            self.request_stop()
        elif self.zk_store is not None:
            if self.replica_manager is not None:  # stop leading and fetching there now
                self.replica_manager.handle_log_dir_failure(log_dir.path)
            self._in_background(self._notify_log_dir_event())

    async def _notify_log_dir_event(self) -> None:
        assert self.zk_store is not None
        try:
            await asyncio.to_thread(self.zk_store.notify_log_dir_event)
        except Exception as e:  # the controller learns at its next LeaderAndIsr instead
            log.error("cannot notify the controller of the log dir failure: %s", e)

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self, handle_signals: bool = True,
                  started: Callable[[], None] | None = None) -> None:
        """Starts, serves until SIGTERM or SIGINT (or request_stop()), stops cleanly.
        `started` is called once the broker serves (odradek.testing's embedded brokers run
        on a thread of their own, without signal handlers)."""
        loop = asyncio.get_running_loop()
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.request_stop)
        try:
            await self.startup()
            if started is not None:
                started()
            await self._stop.wait()
        finally:
            await self.shutdown()


async def _report_slow_shutdown(after_s: float) -> None:
    """Logs where a shutdown that takes longer than `after_s` waits, once: an operator
    (or `cluster up`, which kills a broker that does not stop) then knows why."""
    await asyncio.sleep(after_s)
    current = asyncio.current_task()
    stacks = []
    for task in asyncio.all_tasks():
        if task is current:
            continue
        frames = []
        awaited: Any = task.get_coro()
        while awaited is not None and getattr(awaited, "cr_frame", None) is not None:
            frame = awaited.cr_frame  # the whole await chain, not just the task's own frame
            frames.append(f"\n    {frame.f_code.co_filename}:{frame.f_lineno} "
                          f"in {frame.f_code.co_name}")
            awaited = awaited.cr_await
        stacks.append(f"{task.get_name()}:{''.join(frames)}")
    log.warning("shutdown still running after %.0f s; its tasks:\n%s", after_s,
                "\n".join(stacks))


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
