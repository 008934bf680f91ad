"""The ZooKeeper metadata store: the cluster's metadata in Kafka's znodes, through kazoo.

A broker with zookeeper.connect keeps its cluster metadata here instead of the embedded
single-node store. It implements the same MetadataStore (topics, broker configs, producer
id blocks), so the Controller runs on either, and adds what a cluster needs:

- broker registration: an ephemeral /brokers/ids/<id>, made again in a new session after
  the old one expired (as Kafka's brokers do);
- controller election: the ephemeral /controller created, and /controller_epoch
  incremented, in one transaction; the controller remembers the epoch znode's version;
- fenced writes: every write of the elected controller carries a check of that version in
  its transaction (Kafka's MultiRequest with a CheckOp), so a deposed controller's writes
  fail with ControllerMovedError (STALE_CONTROLLER_EPOCH) and change nothing;
- conditional updates of a partition's state by its znode version (the partition epoch):
  a stale writer fails with PartitionStateConflictError;
- watches on brokers, the controller, topics, topic deletions and partition states, and
  session events (suspended, reconnected, expired, new session).

Every call blocks the calling thread until ZooKeeper answers, at most `request_timeout_ms`
(kazoo's KazooTimeoutError then): call them from a worker thread, not an event loop.
Watch and session callbacks run on kazoo's and the store's threads: hand their work to
your event loop (loop.call_soon_threadsafe) rather than doing it there.

A write that fails with ConnectionLoss or times out may or may not have been applied:
read again before retrying. Reads retry across reconnections by themselves.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import replace
from types import TracebackType
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState, TransactionRequest
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry

from odradek.cluster.embedded import new_cluster_id
from odradek.cluster.metadata import (
    QUOTA_CONFIG_KEYS,
    PartitionState,
    QuotaEntity,
    TopicMetadata,
    merge_config,
)
from odradek.cluster.zookeeper import znodes as z
from odradek.cluster.zookeeper.znodes import (
    BrokerEndpoint,
    BrokerRegistration,
    Endpoint,
    TopicAssignment,
    TopicPartition,
)
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError

log = logging.getLogger(__name__)

T = TypeVar("T")
MAX_PRODUCER_ID = 2**63 - 1
# Partitions whose znodes one transaction creates or deletes (two znodes each, about 125 KB
# for 500): ZooKeeper refuses a request larger than its jute.maxbuffer (1 MiB by default),
# and closes the connection, which a topic of 5,000 partitions in one transaction met.
PARTITIONS_PER_TRANSACTION = 500


class ZooKeeperConnectionError(KafkaError):
    """No connection to ZooKeeper within the connection timeout."""


class ControllerMovedError(KafkaError):
    """A controller's write fenced off: another broker was elected since (the epoch znode
    moved on), this broker's session expired, or it resigned. Nothing was written.
    Kafka's ControllerMovedException."""

    error_code = ErrorCode.STALE_CONTROLLER_EPOCH


class PartitionStateConflictError(KafkaError):
    """Conditional partition state updates that met a newer version (or no state znode):
    `conflicts` names them; `written` holds the new versions of the updates that succeeded
    in the same call."""

    error_code = ErrorCode.INVALID_UPDATE_VERSION

    def __init__(self, message: str, conflicts: Iterable[TopicPartition],
                 written: Mapping[TopicPartition, int] | None = None) -> None:
        super().__init__(message)
        self.conflicts = set(conflicts)
        self.written = dict(written or {})


class BrokerIdInUseError(NodeExistsError):  # type: ignore[misc]  # kazoo is untyped
    """/brokers/ids/<id> belongs to another live session: another broker has this id."""


class SessionEvent(enum.Enum):
    SUSPENDED = "suspended"      # the connection dropped; the session may still live
    RECONNECTED = "reconnected"  # back in the same session: ephemeral znodes kept
    EXPIRED = "expired"          # the session is gone, and this broker's ephemeral znodes
    NEW_SESSION = "new_session"  # a new session after expiry, the broker registered again


class ZkWatch:
    """A watch set by a store's watch_* method. Its callback is called once at once (in
    the caller's thread) with the current value, then on one of kazoo's threads after each
    change, also across reconnections and new sessions; cancel() stops it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def __repr__(self) -> str:
        return f"ZkWatch({self.path}{', cancelled' if self.cancelled else ''})"


class _TransactionError(Exception):
    def __init__(self, failures: list[tuple[str, str, Exception]]) -> None:
        super().__init__(", ".join(f"{kind} {path}: {type(e).__name__}"
                                   for kind, path, e in failures))
        self.failures = failures  # (operation, path, error) of the operations that failed

    def failed(self, path: str, kind: str | None = None) -> Exception | None:
        return next((e for k, p, e in self.failures
                     if p == path and (kind is None or k == kind)), None)


class _Transaction:
    """A kazoo transaction that knows which operation failed."""

    def __init__(self, client: KazooClient) -> None:
        self._tx: TransactionRequest = client.transaction()
        self.ops: list[tuple[str, str]] = []

    def create(self, path: str, value: bytes = b"", ephemeral: bool = False) -> None:
        self._tx.create(path, value, ephemeral=ephemeral)
        self.ops.append(("create", path))

    def set(self, path: str, value: bytes, version: int = -1) -> None:
        self._tx.set_data(path, value, version)
        self.ops.append(("set", path))

    def delete(self, path: str, version: int = -1) -> None:
        self._tx.delete(path, version)
        self.ops.append(("delete", path))

    def create_sequential(self, prefix: str, value: bytes) -> None:
        self._tx.create(prefix, value, sequence=True)
        self.ops.append(("create", prefix))

    def check(self, path: str, version: int) -> None:
        self._tx.check(path, version)
        self.ops.append(("check", path))

    def send(self) -> IAsyncResult:
        return self._tx.commit_async()

    def results(self, results: list[Any]) -> list[Any]:
        """The operations' results; _TransactionError if it failed."""
        failures = [(kind, path, r) for (kind, path), r in zip(self.ops, results, strict=True)
                    if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if failures:
            raise _TransactionError(failures)
        return results

    def commit(self, wait: Callable[[IAsyncResult], Any]) -> list[Any]:
        return self.results(wait(self.send())) if self.ops else []


def split_connect(connect: str) -> tuple[str, str]:
    """zookeeper.connect "host:port,host:port/chroot" -> ("host:port,host:port", "/chroot");
    the chroot is "" when there is none."""
    hosts, _, chroot = connect.strip().partition("/")
    chroot = chroot.strip("/")
    return hosts, f"/{chroot}" if chroot else ""


class ZooKeeperMetadataStore:
    """One broker's ZooKeeper session and the cluster metadata in it. start() connects
    (creating the chroot if missing, Kafka's persistent znodes and /cluster/id), close()
    ends the session, and with it the broker's registration and controllership."""

    def __init__(self, connect: str, broker_id: int, *, session_timeout_ms: int = 18_000,
                 connection_timeout_ms: int | None = None,
                 request_timeout_ms: int | None = None) -> None:
        self.connect = connect
        self.broker_id = broker_id
        self.hosts, self.chroot = split_connect(connect)
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout = (connection_timeout_ms or session_timeout_ms) / 1000
        self.request_timeout = (request_timeout_ms or session_timeout_ms) / 1000
        self.cluster_id = ""
        self.client = KazooClient(
            hosts=f"{self.hosts}{self.chroot}", timeout=session_timeout_ms / 1000,
            # Reconnect at once and then every second at most (kazoo's backoff grows to an
            # hour by default): a restarted ZooKeeper is found again quickly.
            connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0),
            command_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0))
        self._registration: BrokerRegistration | None = None
        self._controller_epoch: int | None = None
        self._controller_epoch_zk_version: int | None = None
        self._deposed = False  # was the controller, is no longer: fenced writes refused
        self._session_listeners: list[Callable[[SessionEvent], None]] = []
        self._ever_connected = False
        self._session_lost = False
        self._closing = False
        self._lock = threading.Lock()
        # Session events and re-registration, one at a time and in order, off kazoo's
        # connection thread (which must never block).
        self._events = ThreadPoolExecutor(1, thread_name_prefix=f"zk-session-{broker_id}")

    # ---- life cycle -------------------------------------------------------------------------

    def start(self) -> ZooKeeperMetadataStore:
        if self.chroot:
            self._create_chroot()
        self.client.add_listener(self._on_state)
        self._start_client(self.client)
        self._ensure_persistent_paths()
        self.cluster_id = self._create_or_get_cluster_id(new_cluster_id())
        log.info("broker %d: connected to ZooKeeper at %s (session 0x%x), cluster id %s",
                 self.broker_id, self.connect, self.session_id or 0, self.cluster_id)
        return self

    def close(self) -> None:
        """Ends the session: ZooKeeper deletes this broker's ephemeral znodes at once."""
        self._closing = True
        try:
            self.client.stop()
            self.client.close()
        finally:
            self._events.shutdown(wait=False)

    def __enter__(self) -> ZooKeeperMetadataStore:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def connected(self) -> bool:
        return bool(self.client.connected)

    @property
    def session_id(self) -> int | None:
        client_id = self.client.client_id
        return client_id[0] if client_id else None

    def add_session_listener(self, listener: Callable[[SessionEvent], None]) -> None:
        """Calls `listener` with each SessionEvent, in order, on the store's event thread.
        At NEW_SESSION the broker's registration is already made again; a controller
        learns at EXPIRED that it is one no more (its writes are fenced from then on)."""
        self._session_listeners.append(listener)

    def remove_session_listener(self, listener: Callable[[SessionEvent], None]) -> None:
        self._session_listeners.remove(listener)

    # ---- the MetadataStore interface ----------------------------------------------------------

    def topics(self) -> dict[str, TopicMetadata]:
        return self._read(lambda: self._load_topics(
            self._wait(self.client.get_children_async(z.TOPICS))))

    def topic(self, name: str) -> TopicMetadata | None:
        """One topic as topics() reads it, or None."""
        return self._read(lambda: self._load_topics([name])).get(name)

    def read_topics(self, names: Iterable[str]) -> dict[str, TopicMetadata]:
        """The topics of these names that exist, as topics() reads them, the requests of
        all of them pipelined."""
        names = list(names)
        return self._read(lambda: self._load_topics(names))

    def create_topic(self, topic: TopicMetadata) -> None:
        """Writes the topic's configs, assignment and partition states in one transaction
        (fenced when this broker is the elected controller). The states' partition_epoch
        and controller_epoch are set to what was written. A topic of more partitions than
        PARTITIONS_PER_TRANSACTION would not fit in one request: its configs and
        assignment are written alone, as Kafka's admin tools write every topic, and the
        controller creates its partition states (partition_epoch -1 until then)."""
        name = topic.name
        with_states = len(topic.partitions) <= PARTITIONS_PER_TRANSACTION
        config_exists = self._exists(z.topic_config_path(name))
        tx = _Transaction(self.client)
        epoch = self._fence(tx, required=False)
        if config_exists:
            tx.set(z.topic_config_path(name), z.encode_config(topic.configs))
        else:
            tx.create(z.topic_config_path(name), z.encode_config(topic.configs))
        tx.create(z.topic_path(name), z.encode_topic(TopicAssignment.of(topic)))
        if with_states:
            tx.create(z.partitions_path(name))
            for p, state in sorted(topic.partitions.items()):
                tx.create(z.partition_path(name, p))
                tx.create(z.partition_state_path(name, p),
                          z.encode_partition_state(state, _epoch(epoch, state)))
        try:
            self._commit(tx)
        except _TransactionError as e:
            # Another broker's creation won (its config znode may be the one that clashed).
            if any(isinstance(e.failed(path), NodeExistsError)
                   for path in (z.topic_path(name), z.topic_config_path(name))):
                raise ValueError(f"topic {name} exists already") from None
            raise
        for state in topic.partitions.values():
            state.partition_epoch = 0 if with_states else -1
            state.controller_epoch = _epoch(epoch, state)

    def update_topic(self, topic: TopicMetadata) -> None:
        """Writes what changed: the assignment (partitions added, reassignments), the
        configs (with a change notification) and the partition states that differ, each
        state conditional on its partition_epoch; one transaction, fenced when this broker
        is the elected controller. Raises PartitionStateConflictError if a state changed
        since the caller read it, ValueError if the topic does not exist."""
        name = topic.name
        try:  # the version first: a change after it makes the conditional set below fail
            assignment_version = self._read(lambda: self._stat(z.topic_path(name))).version
        except NoNodeError:
            raise ValueError(f"topic {name} does not exist") from None
        current = self.topic(name)
        if current is None:
            raise ValueError(f"topic {name} does not exist")
        if set(current.partitions) - set(topic.partitions):
            raise ValueError(f"topic {name}: partitions cannot be removed")
        # Which znodes exist: a topic whose assignment another broker wrote may lack some.
        config_exists = self._exists(z.topic_config_path(name))
        parent_exists = self._exists(z.partitions_path(name))
        partition_nodes = set(self._read(lambda: self._children_or_empty(
            z.partitions_path(name))))
        tx = _Transaction(self.client)
        epoch = self._fence(tx, required=False)
        assignment = TopicAssignment.of(topic)
        if assignment != TopicAssignment.of(current):
            tx.set(z.topic_path(name), z.encode_topic(assignment), assignment_version)
        if topic.configs != current.configs:
            if config_exists:
                tx.set(z.topic_config_path(name), z.encode_config(topic.configs))
            else:
                tx.create(z.topic_config_path(name), z.encode_config(topic.configs))
            self._notify_config_change(tx, f"{z.CONFIG_TOPICS}/{name}")
        written: dict[int, PartitionState] = {}
        # Too many new partitions for one request: the controller creates their states,
        # as for a new topic of that many (create_topic).
        with_states = sum(1 for p in topic.partitions if p not in current.partitions or
                          current.partitions[p].partition_epoch < 0
                          ) <= PARTITIONS_PER_TRANSACTION
        for p, state in sorted(topic.partitions.items()):
            old = current.partitions.get(p)
            encoded = z.encode_partition_state(state, _epoch(epoch, state))
            if old is None or old.partition_epoch < 0:  # no state znode yet
                if not with_states:
                    continue
                if not parent_exists:
                    tx.create(z.partitions_path(name))
                    parent_exists = True
                if str(p) not in partition_nodes:
                    tx.create(z.partition_path(name, p))
                tx.create(z.partition_state_path(name, p), encoded)
                written[p] = state
            elif not z.same_leader_and_isr(state, old):
                tx.set(z.partition_state_path(name, p), encoded, state.partition_epoch)
                written[p] = state
        try:
            results = self._commit(tx)
        except _TransactionError as e:
            conflicts = [(name, p) for p in written
                         if e.failed(z.partition_state_path(name, p))]
            if conflicts:
                raise PartitionStateConflictError(
                    f"partition states changed since they were read: {sorted(conflicts)}",
                    conflicts) from None
            if e.failed(z.topic_path(name)) is not None:
                raise PartitionStateConflictError(
                    f"the assignment of topic {name} changed meanwhile", []) from None
            raise
        versions = _versions_by_path(tx, results)
        for p, state in written.items():
            state.partition_epoch = versions[z.partition_state_path(name, p)]
            state.controller_epoch = _epoch(epoch, state)

    def delete_topic(self, name: str) -> None:
        """Marks the topic for deletion (/admin/delete_topics/<t>), then deletes its
        znodes, its configs and the mark in one transaction (fenced when this broker is the
        elected controller); a topic of more than PARTITIONS_PER_TRANSACTION partitions
        loses its partitions' znodes first, in transactions of that many. Nothing happens
        for a topic that does not exist."""
        for _ in range(10):  # partitions may be added meanwhile: read the tree again
            if not self._exists(z.topic_path(name)):
                with suppress(NoNodeError):
                    self._wait(self.client.delete_async(z.delete_topic_path(name)))
                return
            self.mark_topic_for_deletion(name)
            partitions = sorted(self._read(lambda: self._children_or_empty(
                z.partitions_path(name))), key=int)
            states = self._exist_all([z.partition_state_path(name, int(p)) for p in partitions])
            # Marked for deletion: the partitions' znodes may go a bounded transaction at a
            # time (all of them in one would not fit in a ZooKeeper request), the topic's
            # own znodes last, with the mark.
            if not self._delete_partition_znodes(name, partitions[:-PARTITIONS_PER_TRANSACTION],
                                                 states):
                continue
            partitions = partitions[-PARTITIONS_PER_TRANSACTION:]
            tx = _Transaction(self.client)
            self._fence(tx, required=False)
            for p in partitions:
                if states[z.partition_state_path(name, int(p))]:
                    tx.delete(z.partition_state_path(name, int(p)))
                tx.delete(z.partition_path(name, int(p)))
            if self._exists(z.partitions_path(name)):
                tx.delete(z.partitions_path(name))
            tx.delete(z.topic_path(name))
            if self._exists(z.topic_config_path(name)):
                tx.delete(z.topic_config_path(name))
            tx.delete(z.delete_topic_path(name))
            try:
                self._commit(tx)
            except _TransactionError as e:
                if all(isinstance(err, NotEmptyError | NoNodeError) for _, _, err in e.failures):
                    continue
                raise
            return
        raise RuntimeError(f"topic {name} kept changing while being deleted")

    def _delete_partition_znodes(self, name: str, partitions: list[str],
                                 states: Mapping[str, bool]) -> bool:
        """Deletes these partitions' znodes, PARTITIONS_PER_TRANSACTION at a time (fenced
        when this broker is the elected controller); False if some changed meanwhile."""
        for start in range(0, len(partitions), PARTITIONS_PER_TRANSACTION):
            tx = _Transaction(self.client)
            self._fence(tx, required=False)
            for p in partitions[start:start + PARTITIONS_PER_TRANSACTION]:
                if states[z.partition_state_path(name, int(p))]:
                    tx.delete(z.partition_state_path(name, int(p)))
                tx.delete(z.partition_path(name, int(p)))
            try:
                self._commit(tx)
            except _TransactionError as e:
                if all(isinstance(err, NotEmptyError | NoNodeError) for _, _, err in e.failures):
                    return False
                raise
        return True

    def mark_topic_for_deletion(self, name: str) -> None:
        """Creates /admin/delete_topics/<t>, as Kafka's admin tools did: the controller's
        cue (watch_topic_deletions) to delete the topic."""
        with suppress(NodeExistsError):
            self._wait(self.client.create_async(z.delete_topic_path(name)))

    def broker_configs(self) -> dict[str, str]:
        """Dynamic broker configs as "<entity>/<name>" keys: entity <default> for the
        cluster-wide ones, a broker id for one broker's (the ConfigManager's layout)."""
        entities = self._read_broker_configs()
        return {f"{entity}/{k}": v for entity, configs in sorted(entities.items())
                for k, v in sorted(configs.items())}

    def set_broker_configs(self, configs: dict[str, str]) -> None:
        """Replaces the dynamic broker configs: writes /config/brokers/<entity> for each
        entity whose configs changed (an empty config for one no longer set) with a change
        notification, in one transaction."""
        wanted: dict[str, dict[str, str]] = {}
        for key, value in configs.items():
            entity, sep, name = key.partition("/")
            if not sep or not entity or not name:
                raise ValueError(f"broker config key {key!r} is not <entity>/<name>")
            wanted.setdefault(entity, {})[name] = value
        current = self._read_broker_configs()
        tx = _Transaction(self.client)
        for entity in sorted(set(wanted) | set(current)):
            new = wanted.get(entity, {})
            if entity in current and current[entity] == new:
                continue
            path = z.broker_config_path(entity)
            if entity in current:
                tx.set(path, z.encode_config(new))
            else:
                tx.create(path, z.encode_config(new))
            self._notify_config_change(tx, f"{z.CONFIG_BROKERS}/{entity}")
        self._commit(tx)

    def user_configs(self) -> dict[str, dict[str, str]]:
        """/config/users/<user>: each user's configs (SCRAM credentials by mechanism, in
        Kafka's format, and quotas), by user name."""
        def read() -> dict[str, dict[str, str]]:
            entities = self._wait(self.client.get_children_async(
                f"{z.CONFIG}/{z.CONFIG_USERS}"))
            pending = {e: self.client.get_async(f"{z.CONFIG}/{z.CONFIG_USERS}/{e}")
                       for e in entities}
            configs = {}
            for entity, result in pending.items():
                with suppress(NoNodeError):
                    configs[z.desanitize(entity)] = z.decode_config(self._wait(result)[0])
            return configs

        return self._read(read)

    def alter_user_configs(self, changes: Mapping[str, Mapping[str, str | None]]) -> None:
        """Sets (or, for None, removes) configs of users, each user's znode rewritten with
        a change notification ("users/<user>"), all in one transaction conditional on the
        versions read: a concurrent change by another broker makes it fail, and the caller
        tries again."""
        tx = _Transaction(self.client)
        for user, updates in sorted(changes.items()):
            path = z.user_config_path(user)
            try:
                data, stat = self._wait(self.client.get_async(path))
                current, version = z.decode_config(data), stat.version
            except NoNodeError:
                current, version = {}, None
            new = merge_config(current, updates)
            if version is None:
                tx.create(path, z.encode_config(new))
            else:
                tx.set(path, z.encode_config(new), version)
            self._notify_config_change(tx, f"{z.CONFIG_USERS}/{z.sanitize(user)}")
        self._commit(tx)

    def quota_configs(self) -> dict[QuotaEntity, dict[str, str]]:
        """The client quotas of /config/users/<user>, /config/users/<user>/clients/<id> and
        /config/clients/<id> (<default> for either), by entity; SCRAM credentials, which
        share /config/users/<user>, are left out."""
        def read() -> dict[QuotaEntity, dict[str, str]]:
            users = f"{z.CONFIG}/{z.CONFIG_USERS}"
            clients = f"{z.CONFIG}/{z.CONFIG_CLIENTS}"
            paths = [f"{z.CONFIG_USERS}/{u}" for u in self._children_or_empty(users)]
            paths += [f"{p}/{z.CONFIG_CLIENTS}/{c}" for p in list(paths)
                      for c in self._children_or_empty(f"{z.CONFIG}/{p}/{z.CONFIG_CLIENTS}")]
            paths += [f"{z.CONFIG_CLIENTS}/{c}" for c in self._children_or_empty(clients)]
            pending = {p: self.client.get_async(f"{z.CONFIG}/{p}") for p in paths}
            found: dict[QuotaEntity, dict[str, str]] = {}
            for path, result in pending.items():
                entity = z.quota_entity_from_path(path)
                if entity is None:
                    continue
                with suppress(NoNodeError):
                    configs = {k: v for k, v in z.decode_config(self._wait(result)[0]).items()
                               if k in QUOTA_CONFIG_KEYS}
                    if configs:
                        found[entity] = configs
            return found

        return self._read(read)

    def alter_quota_configs(self, changes: Mapping[QuotaEntity, Mapping[str, str | None]]
                            ) -> None:
        """Sets (or, for None, removes) quota configs of entities: each entity's znode
        rewritten (its other configs, SCRAM credentials, kept) with a change notification
        (its entity path), all in one transaction conditional on the versions read."""
        tx = _Transaction(self.client)
        created: set[str] = set()
        for entity, updates in sorted(changes.items(), key=lambda c: str(c[0])):
            entity_path = z.quota_entity_path(entity)
            path = f"{z.CONFIG}/{entity_path}"
            parts = entity_path.split("/")
            for depth in (2, 3):  # users/<user> and users/<user>/clients, for a child
                if len(parts) == 4:
                    parent = f"{z.CONFIG}/{'/'.join(parts[:depth])}"
                    if parent not in created and not self._exists(parent):
                        tx.create(parent, z.encode_config({}) if depth == 2 else b"")
                        created.add(parent)
            try:
                data, stat = self._wait(self.client.get_async(path))
                current, version = z.decode_config(data), stat.version
            except NoNodeError:
                current, version = {}, None
            new = merge_config(current, updates)
            if version is None and path in created:  # made just now, as a parent
                tx.set(path, z.encode_config(new))
            elif version is None:
                tx.create(path, z.encode_config(new))
                created.add(path)
            else:
                tx.set(path, z.encode_config(new), version)
            self._notify_config_change(tx, entity_path)
        self._commit(tx)

    def allocate_producer_ids(self, count: int) -> int:
        """Reserves the next block of `count` producer ids for this broker, as Kafka's
        ProducerIdManager does: read /latest_producer_id_block, write the block after it
        conditional on the znode's version, and read again if another broker was first."""
        if count < 1:
            raise ValueError(f"cannot reserve {count} producer ids")
        deadline = time.monotonic() + self.request_timeout
        while True:
            data, stat = self._read(lambda: self._wait(self.client.get_async(z.PRODUCER_ID_BLOCK)))
            first = z.decode_producer_id_block(data)[2] + 1 if data else 0
            if first > MAX_PRODUCER_ID - count + 1:
                raise KafkaError("Have exhausted all producerIds.")
            block = z.encode_producer_id_block(self.broker_id, first, first + count - 1)
            try:
                self._wait(self.client.set_async(z.PRODUCER_ID_BLOCK, block, stat.version))
            except (BadVersionError, ConnectionLoss):
                # Another broker reserved a block first, or the answer was lost: a block
                # reserved but never used is skipped, never handed out twice.
                if time.monotonic() > deadline:
                    raise
                continue
            log.debug("broker %d reserved producer ids %d-%d", self.broker_id, first,
                      first + count - 1)
            return first

    # ---- brokers --------------------------------------------------------------------------------

    def register_broker(self, endpoints: Iterable[Endpoint], rack: str | None = None,
                        jmx_port: int = -1,
                        features: Mapping[str, Mapping[str, int]] | None = None
                        ) -> BrokerRegistration:
        """Registers this broker: the ephemeral /brokers/ids/<id> with its advertised
        endpoints and rack. Raises BrokerIdInUseError if another live session holds the
        id. Made again by the store in each new session after an expiry."""
        registration = BrokerRegistration(
            self.broker_id,
            tuple(BrokerEndpoint(e.name, e.host, e.port, e.security_protocol)
                  for e in endpoints),
            rack, jmx_port, {k: dict(v) for k, v in (features or {}).items()},
            int(time.time() * 1000))
        registration = replace(registration, epoch=self._create_registration(registration))
        self._registration = registration
        log.info("broker %d registered in ZooKeeper with broker epoch %d: %s", self.broker_id,
                 registration.epoch, ", ".join(str(e) for e in registration.endpoints))
        return registration

    @property
    def broker_epoch(self) -> int:
        """This broker's epoch: its registration's czxid (-1 before it registers)."""
        registration = self._registration
        return -1 if registration is None else registration.epoch

    @property
    def registered(self) -> bool:
        """Whether this broker's registration is in force: made, in a session that is
        connected and has not expired (a new session makes it again)."""
        return (self._registration is not None and bool(self.client.connected)
                and not self._session_lost)

    def live_brokers(self) -> dict[int, BrokerRegistration]:
        def read() -> dict[int, BrokerRegistration]:
            ids = [int(i) for i in self._wait(self.client.get_children_async(z.BROKER_IDS))]
            pending = {i: self.client.get_async(z.broker_path(i)) for i in ids}
            brokers = {}
            for i, result in sorted(pending.items()):
                with suppress(NoNodeError):  # gone meanwhile
                    data, stat = self._wait(result)
                    brokers[i] = replace(z.decode_broker(i, data), epoch=stat.czxid)
            return brokers

        return self._read(read)

    def watch_brokers(self, callback: Callable[[set[int]], None]) -> ZkWatch:
        """Calls `callback` with the ids of the live brokers, now and at each change."""
        return self._watch_children(z.BROKER_IDS, lambda ids: {int(i) for i in ids}, callback)

    # ---- the controller ---------------------------------------------------------------------

    @property
    def controller_epoch(self) -> int | None:
        """The epoch this broker was elected controller with; None when it is not the
        controller (never elected, resigned, or deposed by a session expiry or a newer
        controller's epoch)."""
        return None if self._deposed else self._controller_epoch

    def try_elect_controller(self) -> int | None:
        """Tries to become the controller: creates the ephemeral /controller and increments
        /controller_epoch in one transaction. Returns the new controller epoch, or None if
        another broker is the controller."""
        with suppress(NodeExistsError):
            self._wait(self.client.create_async(
                z.CONTROLLER_EPOCH, z.encode_controller_epoch(z.INITIAL_CONTROLLER_EPOCH)))
        deadline = time.monotonic() + self.request_timeout
        while True:
            data, stat = self._read(lambda: self._wait(self.client.get_async(z.CONTROLLER_EPOCH)))
            epoch = z.decode_controller_epoch(data) + 1
            tx = _Transaction(self.client)
            tx.create(z.CONTROLLER, z.encode_controller(self.broker_id, int(time.time() * 1000)),
                      ephemeral=True)
            tx.set(z.CONTROLLER_EPOCH, z.encode_controller_epoch(epoch), stat.version)
            try:
                tx.commit(self._wait)
            except _TransactionError as e:
                if e.failed(z.CONTROLLER) is not None:
                    return self._elected_before()
                if time.monotonic() > deadline:  # the epoch moved on: read it again
                    raise
                continue
            with self._lock:
                self._controller_epoch = epoch
                self._controller_epoch_zk_version = stat.version + 1
                self._deposed = False
            log.info("broker %d is the controller, epoch %d", self.broker_id, epoch)
            return epoch

    def _elected_before(self) -> int | None:
        """/controller exists: ours if this session created it (an answer lost in a
        reconnection), and then the epoch is the one in /controller_epoch."""
        try:
            _, controller = self._read(lambda: self._wait(self.client.get_async(z.CONTROLLER)))
        except NoNodeError:
            return None  # gone meanwhile: the next try may win
        if controller.ephemeralOwner != self.session_id:
            return None
        data, stat = self._read(lambda: self._wait(self.client.get_async(z.CONTROLLER_EPOCH)))
        with self._lock:
            self._controller_epoch = z.decode_controller_epoch(data)
            self._controller_epoch_zk_version = stat.version
            self._deposed = False
        return self._controller_epoch

    def resign_controller(self) -> None:
        """Deletes /controller if this broker holds it, and fences its own writes."""
        with self._lock:
            self._deposed = self._controller_epoch is not None
        with suppress(NoNodeError, BadVersionError):
            _, stat = self._read(lambda: self._wait(self.client.get_async(z.CONTROLLER)))
            if stat.ephemeralOwner == self.session_id:
                self._wait(self.client.delete_async(z.CONTROLLER, stat.version))

    def controller_id(self) -> int | None:
        """The controller's broker id, or None when there is none."""
        try:
            data, _ = self._read(lambda: self._wait(self.client.get_async(z.CONTROLLER)))
        except NoNodeError:
            return None
        return z.decode_controller(data)

    def watch_controller(self, callback: Callable[[int | None], None]) -> ZkWatch:
        """Calls `callback` with the controller's broker id (None: no controller), now and
        at each change."""
        return self._watch_data(z.CONTROLLER, lambda data, _: z.decode_controller(data),
                                callback)

    # ---- partition states ---------------------------------------------------------------------

    def create_partition_states(self, states: Mapping[TopicPartition, PartitionState]) -> None:
        """Creates the state znodes of new partitions (of topics whose assignment exists):
        the controller's job. PARTITIONS_PER_TRANSACTION to a transaction, each fenced by
        the controller epoch, all sent at once. The states written get partition_epoch 0
        and the controller epoch; PartitionStateConflictError names those of the
        transactions that failed (the others are written)."""
        epoch = self._require_controller()
        topics = sorted({t for t, _ in states})
        exists = self._exist_all([z.partitions_path(t) for t in topics] +
                                 [z.partition_path(*tp) for tp in states])
        have_parent = {t: exists[z.partitions_path(t)] for t in topics}
        items = sorted(states.items())
        pending: list[tuple[list[TopicPartition], _Transaction, IAsyncResult]] = []
        for start in range(0, len(items), PARTITIONS_PER_TRANSACTION):
            chunk = items[start:start + PARTITIONS_PER_TRANSACTION]
            tx = _Transaction(self.client)
            self._fence(tx, required=True)
            for (t, p), state in chunk:
                if not have_parent[t]:  # in the first transaction: ZooKeeper applies them in order
                    tx.create(z.partitions_path(t))
                    have_parent[t] = True
                if not exists[z.partition_path(t, p)]:
                    tx.create(z.partition_path(t, p))
                tx.create(z.partition_state_path(t, p), z.encode_partition_state(state, epoch))
            pending.append(([tp for tp, _ in chunk], tx, tx.send()))
        conflicts: list[TopicPartition] = []
        failures: list[str] = []
        fenced = False
        for tps, tx, sent in pending:
            try:
                tx.results(self._wait(sent))
            except _TransactionError as e:
                fenced = fenced or e.failed(z.CONTROLLER_EPOCH) is not None
                conflicts += tps
                failures.append(str(e))
                continue
            for tp in tps:
                states[tp].partition_epoch = 0
                states[tp].controller_epoch = epoch
        if fenced:
            self._depose()
            raise ControllerMovedError(
                f"broker {self.broker_id} is no longer the controller (epoch {epoch}): "
                "/controller_epoch moved on")
        if conflicts:
            raise PartitionStateConflictError(
                f"cannot create partition states: {'; '.join(failures)[:1000]}", conflicts,
                {tp: 0 for tp in states if tp not in set(conflicts)})

    def set_partition_states(self, states: Mapping[TopicPartition, PartitionState]
                             ) -> dict[TopicPartition, int]:
        """The controller's leader and ISR changes: each state is written conditional on
        its partition_epoch (the znode version it was read at) in a transaction that also
        checks the controller epoch. Returns the new versions (also set on the states).
        Raises ControllerMovedError if this broker is not the controller (nothing written),
        PartitionStateConflictError for the states that changed meanwhile (the others are
        written; see its `written`)."""
        epoch = self._require_controller()
        pending: dict[TopicPartition, tuple[_Transaction, IAsyncResult]] = {}
        for tp, state in sorted(states.items()):  # one transaction each, all sent at once
            tx = _Transaction(self.client)
            self._fence(tx, required=True)
            tx.set(z.partition_state_path(*tp), z.encode_partition_state(state, epoch),
                   state.partition_epoch)
            pending[tp] = (tx, tx.send())
        written: dict[TopicPartition, int] = {}
        conflicts: list[TopicPartition] = []
        fenced = False
        for tp, (tx, sent) in pending.items():
            try:
                version = int(tx.results(self._wait(sent))[1].version)
            except _TransactionError as e:
                if e.failed(z.CONTROLLER_EPOCH) is not None:
                    fenced = True
                else:
                    conflicts.append(tp)
                continue
            written[tp] = version
            states[tp].partition_epoch = version
            states[tp].controller_epoch = epoch
        if fenced:
            self._depose()
            raise ControllerMovedError(
                f"broker {self.broker_id} is no longer the controller (epoch {epoch}): "
                f"/controller_epoch moved on; {len(written)} of {len(states)} partition "
                "states were written before")
        if conflicts:
            raise PartitionStateConflictError(
                f"partition states changed since they were read: {sorted(conflicts)}",
                conflicts, written)
        return written

    def update_partition_state(self, tp: TopicPartition, state: PartitionState,
                               expected_version: int) -> int:
        """A leader's ISR change, as Kafka's leaders made them in ZooKeeper: the state znode
        written if its version is still `expected_version` (not fenced by the controller
        epoch: the state keeps its controller_epoch). Returns the new version (also set as
        the state's partition_epoch); PartitionStateConflictError if it moved on."""
        try:
            stat = self._wait(self.client.set_async(
                z.partition_state_path(*tp),
                z.encode_partition_state(state, state.controller_epoch), expected_version))
        except (BadVersionError, NoNodeError):
            raise PartitionStateConflictError(
                f"the state of {tp[0]}-{tp[1]} is no longer at version {expected_version}",
                [tp]) from None
        state.partition_epoch = stat.version
        return int(stat.version)

    def notify_isr_change(self, partitions: Iterable[TopicPartition]) -> str:
        """Creates an /isr_change_notification/isr_change_<seq> naming the partitions whose
        ISR a leader changed; returns its path."""
        path: str = self._wait(self.client.create_async(
            f"{z.ISR_CHANGE_NOTIFICATION}/{z.ISR_CHANGE_PREFIX}",
            z.encode_isr_change(partitions), sequence=True))
        return path

    def notify_log_dir_event(self) -> None:
        """Creates a persistent /log_dir_event_notification/log_dir_event_<seq> saying that
        a log dir of this broker failed (Kafka's propagateLogDirEvent, KIP-112). Retried
        across connection losses: a duplicate only makes the controller ask twice."""
        path = self._read(lambda: self._wait(self.client.create_async(
            f"{z.LOG_DIR_EVENT_NOTIFICATION}/{z.LOG_DIR_EVENT_PREFIX}",
            z.encode_log_dir_event(self.broker_id), sequence=True)))
        log.info("broker %d: log dir failure notified to the controller (%s)",
                 self.broker_id, path)

    def read_log_dir_events(self, names: Iterable[str]) -> set[int]:
        """The brokers named by these log dir event notifications (children of
        /log_dir_event_notification); those gone or unreadable are left out."""
        pending = {n: self.client.get_async(f"{z.LOG_DIR_EVENT_NOTIFICATION}/{n}")
                   for n in names}
        brokers = set()
        for name, result in pending.items():
            try:
                brokers.add(z.decode_log_dir_event(self._wait(result)[0])[0])
            except NoNodeError:
                continue
            except (ValueError, KeyError, TypeError) as e:
                log.warning("ignoring the log dir event notification %s: %s", name, e)
        return brokers

    def delete_log_dir_events(self, names: Iterable[str]) -> None:
        """Deletes handled log dir event notifications, fenced by the controller epoch
        (Kafka's deleteLogDirEventNotifications): ControllerMovedError if this broker is
        not the controller any more; those already gone are fine."""
        self._require_controller()
        pending = []
        for name in sorted(names):  # one transaction each: one gone fails no other
            tx = _Transaction(self.client)
            self._fence(tx, required=True)
            tx.delete(f"{z.LOG_DIR_EVENT_NOTIFICATION}/{name}")
            pending.append((tx, tx.send()))
        fenced = False
        for tx, sent in pending:
            try:
                tx.results(self._wait(sent))
            except _TransactionError as e:
                fenced = fenced or e.failed(z.CONTROLLER_EPOCH) is not None
        if fenced:
            self._depose()
            raise ControllerMovedError(
                f"broker {self.broker_id} is no longer the controller: /controller_epoch "
                "moved on")

    # ---- watches ----------------------------------------------------------------------------

    def watch_topics(self, callback: Callable[[set[str]], None]) -> ZkWatch:
        """Calls `callback` with the names of all topics, now and when one is created or
        deleted."""
        return self._watch_children(z.TOPICS, set, callback)

    def watch_topic_partitions(self, name: str,
                               callback: Callable[[set[int] | None], None]) -> ZkWatch:
        """Calls `callback` with the partitions of the topic's assignment (None once it
        is gone), now and when it changes: partitions added (Kafka's partition
        modification watch)."""
        def convert(data: bytes | None, stat: ZnodeStat | None) -> set[int] | None:
            return None if data is None else set(z.decode_topic(data).replicas)

        return self._watch_data(z.topic_path(name), convert, callback)

    def watch_config_changes(self, callback: Callable[[list[str]], None]) -> ZkWatch:
        """Calls `callback` with the entity paths ("topics/<name>", "brokers/<id>",
        "brokers/<default>") of the config changes notified after the watch began, in
        order (Kafka's ZkNodeChangeNotificationListener)."""
        seen: set[str] | None = None

        def convert(children: list[str]) -> list[str]:
            nonlocal seen
            if seen is None:  # what was changed before: read at start-up already
                seen = set(children)
                return []
            new = sorted(c for c in children if c not in seen)
            seen = set(children)
            entities = []
            for child in new:
                try:
                    data = self._wait(self.client.get_async(f"{z.CONFIG_CHANGES}/{child}"))[0]
                except NoNodeError:
                    continue
                entities.append(z.decode_config_change(data))
            return entities

        return self._watch_children(z.CONFIG_CHANGES, convert, callback)

    def watch_topic_deletions(self, callback: Callable[[set[str]], None]) -> ZkWatch:
        """Calls `callback` with the topics marked for deletion, now and at each change."""
        return self._watch_children(z.DELETE_TOPICS, set, callback)

    def watch_log_dir_events(self, callback: Callable[[list[str]], None]) -> ZkWatch:
        """Calls `callback` with the names of the log dir event notifications, now and at
        each change (the controller's LogDirEventNotificationHandler)."""
        return self._watch_children(z.LOG_DIR_EVENT_NOTIFICATION, sorted, callback)

    def watch_partition_state(self, tp: TopicPartition,
                              callback: Callable[[PartitionState | None], None]) -> ZkWatch:
        """Calls `callback` with the partition's state (its replicas from the topic's
        assignment), None while it has no state znode; now and at each change."""
        def convert(data: bytes | None, stat: ZnodeStat | None) -> PartitionState | None:
            if data is None or stat is None:
                return None
            try:
                assignment = z.decode_topic(self._wait(self.client.get_async(
                    z.topic_path(tp[0])))[0])
            except NoNodeError:
                return None
            return z.decode_partition_state(
                data, stat.version, assignment.replicas.get(tp[1], []),
                assignment.adding_replicas.get(tp[1], []),
                assignment.removing_replicas.get(tp[1], []))

        return self._watch_data(z.partition_state_path(*tp), convert, callback)

    # ---- internals ----------------------------------------------------------------------------

    def _start_client(self, client: KazooClient) -> None:
        try:
            client.start(timeout=self.connection_timeout)
        except KazooTimeoutError:
            client.stop()
            client.close()
            raise ZooKeeperConnectionError(
                f"Timed out waiting for connection to ZooKeeper at {self.hosts} "
                f"({self.connection_timeout:g} s)") from None

    def _create_chroot(self) -> None:
        """Creates the chroot with a client outside it, as Kafka does at start-up."""
        client = KazooClient(hosts=self.hosts, timeout=self.session_timeout_ms / 1000)
        self._start_client(client)
        try:
            client.ensure_path(self.chroot)
        finally:
            client.stop()
            client.close()

    def _ensure_persistent_paths(self) -> None:
        pending = [self.client.create_async(p, makepath=True) for p in z.PERSISTENT_PATHS]
        for result in pending:
            with suppress(NodeExistsError):
                self._wait(result)

    def _create_or_get_cluster_id(self, proposed: str) -> str:
        try:
            self._wait(self.client.create_async(z.CLUSTER_ID, z.encode_cluster_id(proposed),
                                                makepath=True))
            return proposed
        except NodeExistsError:
            data, _ = self._read(lambda: self._wait(self.client.get_async(z.CLUSTER_ID)))
            return z.decode_cluster_id(data)

    def _wait(self, result: IAsyncResult) -> Any:
        return result.get(timeout=self.request_timeout)

    def _read(self, read: Callable[[], T]) -> T:
        """A read, retried across connection losses until the request timeout."""
        retry = KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0,
                           deadline=self.request_timeout)
        return retry(read)  # type: ignore[no-any-return]

    def _exists(self, path: str) -> bool:
        return self._read(lambda: self._wait(self.client.exists_async(path))) is not None

    def _exist_all(self, paths: Iterable[str]) -> dict[str, bool]:
        """Which of the znodes exist, the requests pipelined (one round trip each, one
        after the other, would take seconds for thousands of partitions)."""
        def read() -> dict[str, bool]:
            pending = {path: self.client.exists_async(path) for path in paths}
            return {path: self._wait(result) is not None for path, result in pending.items()}

        paths = list(paths)
        return self._read(read)

    def _stat(self, path: str) -> ZnodeStat:
        stat = self._wait(self.client.exists_async(path))
        if stat is None:
            raise NoNodeError(path)
        return stat

    def _children_or_empty(self, path: str) -> list[str]:
        try:
            return list(self._wait(self.client.get_children_async(path)))
        except NoNodeError:
            return []

    def _load_topics(self, names: Iterable[str]) -> dict[str, TopicMetadata]:
        """Topics read with their requests pipelined: the assignments, configs and
        partition lists first, then every partition's state."""
        first = {n: (self.client.get_async(z.topic_path(n)),
                     self.client.get_async(z.topic_config_path(n)),
                     self.client.get_children_async(z.partitions_path(n))) for n in names}
        assignments: dict[str, TopicAssignment] = {}
        configs: dict[str, dict[str, str]] = {}
        states: dict[tuple[str, int], IAsyncResult] = {}
        for name, (topic, config, children) in first.items():
            try:
                assignments[name] = z.decode_topic(self._wait(topic)[0])
            except NoNodeError:
                continue
            try:
                configs[name] = z.decode_config(self._wait(config)[0])
            except NoNodeError:
                configs[name] = {}
            with suppress(NoNodeError):
                for p in self._wait(children):
                    if int(p) in assignments[name].replicas:
                        states[name, int(p)] = self.client.get_async(
                            z.partition_state_path(name, int(p)))
        topics = {}
        for name, a in sorted(assignments.items()):
            partitions = {}
            for p, replicas in sorted(a.replicas.items()):
                adding, removing = a.adding_replicas.get(p, []), a.removing_replicas.get(p, [])
                try:
                    data, stat = self._wait(states[name, p]) if (name, p) in states else (
                        None, None)
                except NoNodeError:
                    data, stat = None, None
                if data is None or stat is None:  # assigned, no state yet: no leader
                    partitions[p] = PartitionState(
                        list(replicas), z.NO_LEADER, 0, [], partition_epoch=-1,
                        adding_replicas=list(adding), removing_replicas=list(removing))
                else:
                    partitions[p] = z.decode_partition_state(data, stat.version, replicas,
                                                             adding, removing)
            topics[name] = TopicMetadata(name, a.topic_id, partitions, configs[name])
        return topics

    def _read_broker_configs(self) -> dict[str, dict[str, str]]:
        def read() -> dict[str, dict[str, str]]:
            entities = self._wait(self.client.get_children_async(
                f"{z.CONFIG}/{z.CONFIG_BROKERS}"))
            pending = {e: self.client.get_async(z.broker_config_path(e)) for e in entities}
            configs = {}
            for entity, result in pending.items():
                with suppress(NoNodeError):
                    configs[entity] = z.decode_config(self._wait(result)[0])
            return configs

        return self._read(read)

    def _notify_config_change(self, tx: _Transaction, entity_path: str) -> None:
        # A sequential create inside the transaction: the notification exists iff the
        # config change does.
        tx.create_sequential(f"{z.CONFIG_CHANGES}/{z.CONFIG_CHANGE_PREFIX}",
                             z.encode_config_change(entity_path))

    def _require_controller(self) -> int:
        with self._lock:
            if self._deposed:
                raise ControllerMovedError(
                    f"broker {self.broker_id} is no longer the controller "
                    f"(epoch {self._controller_epoch})")
            if self._controller_epoch is None:
                raise ControllerMovedError(f"broker {self.broker_id} is not the controller")
            return self._controller_epoch

    def _fence(self, tx: _Transaction, required: bool) -> int | None:
        """Adds the controller epoch check to `tx` when this broker was elected; returns
        the epoch to write in partition states (None: not elected, keep theirs)."""
        with self._lock:
            if self._deposed and not required:
                # What any broker may write (a topic's creation, its new partitions) is
                # written unfenced by a broker that is no longer the controller, as by any
                # other: its clients must not see the controller move (a ZooKeeper restart).
                return None
            if self._deposed:
                raise ControllerMovedError(
                    f"broker {self.broker_id} is no longer the controller "
                    f"(epoch {self._controller_epoch})")
            if self._controller_epoch_zk_version is None:
                if required:
                    raise ControllerMovedError(f"broker {self.broker_id} is not the controller")
                return None
            tx.check(z.CONTROLLER_EPOCH, self._controller_epoch_zk_version)
            return self._controller_epoch

    def _commit(self, tx: _Transaction) -> list[Any]:
        try:
            return tx.commit(self._wait)
        except _TransactionError as e:
            if e.failed(z.CONTROLLER_EPOCH, "check") is not None:
                epoch = self._controller_epoch
                self._depose()
                raise ControllerMovedError(
                    f"broker {self.broker_id} is no longer the controller (epoch {epoch}): "
                    "/controller_epoch moved on") from None
            raise

    def _depose(self) -> None:
        with self._lock:
            if self._controller_epoch is not None and not self._deposed:
                log.warning("broker %d: controller epoch %s is stale, not the controller "
                            "any more", self.broker_id, self._controller_epoch)
            self._deposed = True

    def _create_registration(self, registration: BrokerRegistration) -> int:
        """Kafka's checked ephemeral create: a znode that exists already is fine if this
        session made it (a lost answer), refused if another session holds it. Returns the
        znode's czxid, the broker epoch."""
        path = z.broker_path(registration.broker_id)
        data = z.encode_broker(registration)
        try:
            self._wait(self.client.create_async(path, data, ephemeral=True))
            return int(self._stat(path).czxid)
        except NodeExistsError:
            pass
        try:
            stat = self._stat(path)
        except NoNodeError:  # its owner's session ended meanwhile
            self._wait(self.client.create_async(path, data, ephemeral=True))
            return int(self._stat(path).czxid)
        if stat.ephemeralOwner == self.session_id:
            self._wait(self.client.set_async(path, data, stat.version))
            return int(stat.czxid)
        raise BrokerIdInUseError(
            f"Error while creating ephemeral at {path}, node already exists and owner "
            f"'0x{stat.ephemeralOwner:x}' does not match current session "
            f"'0x{self.session_id or 0:x}': is another broker running with "
            f"broker.id={registration.broker_id}?")

    def _watch_children(self, path: str, convert: Callable[[list[str]], T],
                        callback: Callable[[T], None]) -> ZkWatch:
        watch = ZkWatch(path)

        def on_children(children: list[str]) -> bool | None:
            if watch.cancelled or self._closing:
                return False
            try:
                callback(convert(children))
            except Exception:
                log.exception("a watch callback on %s failed", path)
            return None

        ChildrenWatch(self.client, path, on_children)
        return watch

    def _watch_data(self, path: str, convert: Callable[[bytes | None, ZnodeStat | None], T],
                    callback: Callable[[T], None]) -> ZkWatch:
        watch = ZkWatch(path)

        def on_data(data: bytes | None, stat: ZnodeStat | None, event: Any = None
                    ) -> bool | None:
            if watch.cancelled or self._closing:
                return False
            try:
                callback(convert(data, stat))
            except Exception:
                log.exception("a watch callback on %s failed", path)
            return None

        DataWatch(self.client, path, on_data)
        return watch

    def _on_state(self, state: str) -> None:
        """kazoo's connection thread: nothing here may block."""
        if self._closing:
            return
        if state == KazooState.CONNECTED:
            if not self._ever_connected:
                self._ever_connected = True
            elif self._session_lost:
                self._session_lost = False
                self._submit(self._on_new_session)
            else:
                self._submit(self._emit, SessionEvent.RECONNECTED)
        elif state == KazooState.SUSPENDED:
            self._submit(self._emit, SessionEvent.SUSPENDED)
        else:  # LOST: the session expired
            self._session_lost = True
            if self._controller_epoch is not None:
                self._deposed = True  # its /controller went with the session
            self._submit(self._emit, SessionEvent.EXPIRED)

    def _on_new_session(self) -> None:
        registration = self._registration
        if registration is not None:
            try:
                self._registration = replace(
                    registration, epoch=self._create_registration(registration))
                log.info("broker %d registered again in a new ZooKeeper session (0x%x) with "
                         "broker epoch %d", self.broker_id, self.session_id or 0,
                         self._registration.epoch)
            except Exception:
                log.exception("broker %d could not register again in its new session",
                              self.broker_id)
        self._emit(SessionEvent.NEW_SESSION)

    def _submit(self, fn: Callable[..., None], *args: Any) -> None:
        with suppress(RuntimeError):  # shut down: closing
            self._events.submit(fn, *args)

    def _emit(self, event: SessionEvent) -> None:
        log.log(logging.WARNING if event is SessionEvent.EXPIRED else logging.INFO,
                "broker %d: ZooKeeper session %s", self.broker_id, event.value)
        for listener in list(self._session_listeners):
            try:
                listener(event)
            except Exception:
                log.exception("a ZooKeeper session listener failed on %s", event.value)


def _epoch(controller_epoch: int | None, state: PartitionState) -> int:
    return state.controller_epoch if controller_epoch is None else controller_epoch


def _versions_by_path(tx: _Transaction, results: list[Any]) -> dict[str, int]:
    """The znode version each create (0) or set (the stat's) left."""
    versions = {}
    for (kind, path), result in zip(tx.ops, results, strict=True):
        if kind == "create":
            versions[path] = 0
        elif kind == "set":
            versions[path] = int(result.version)
    return versions


