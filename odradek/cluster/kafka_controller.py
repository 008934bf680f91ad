"""KafkaController: the controller of a cluster on ZooKeeper (Kafka's KafkaController).

Every broker runs one; the one elected through /controller is active. The active
controller keeps the cluster's state (live brokers, topics, each partition's leader,
leader epoch and ISR), watches ZooKeeper for brokers coming and going and topics created
and deleted, elects leaders (odradek/cluster/election.py), writes the partition states
fenced by its controller epoch, and tells the brokers: LeaderAndIsr to the replicas of a
partition whose leader or ISR changed, UpdateMetadata to every live broker, StopReplica
to the replicas of a deleted topic. Leaders ask it to change their ISR (AlterPartition);
brokers about to stop ask it to move their leaderships (ControlledShutdown); admin
clients ask it for leader elections (ElectLeaders; it also rebalances leaders by itself)
and partition reassignments (KIP-455). docs/cluster.md tells the whole story.

Like Kafka's, it works through one queue of events, one at a time, on the broker's event
loop: ZooKeeper's watches (on kazoo's threads) only put events in the queue, and the
blocking ZooKeeper calls run in worker threads. A controller that finds its epoch fenced
(ControllerMovedError) or loses its session resigns, and the broker goes on as a broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar, cast

from odradek.broker.inter_broker_client import RequestBuilder
from odradek.cluster import election
from odradek.cluster.controller import NotControllerError
from odradek.cluster.metadata import PartitionState, TopicMetadata
from odradek.cluster.zookeeper.store import (
    ControllerMovedError,
    PartitionStateConflictError,
    SessionEvent,
    ZkWatch,
    ZooKeeperMetadataStore,
)
from odradek.cluster.zookeeper.znodes import BrokerRegistration
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError
from odradek.protocol.message import Message
from odradek.protocol.messages import (
    leader_and_isr_request as lai,
)
from odradek.protocol.messages import (
    leader_and_isr_response as lair,
)
from odradek.protocol.messages import (
    stop_replica_request as sr,
)
from odradek.protocol.messages import (
    update_metadata_request as um,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
TopicPartition = tuple[str, int]

NO_LEADER = -1
LEADER_DURING_DELETE = -2  # UpdateMetadata: the partition's topic is being deleted
# Kafka's SecurityProtocol ids, as UpdateMetadata carries them.
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


class ControllerChannel(Protocol):
    """How the controller reaches the brokers (odradek/broker/controller_channel.py):
    requests to one broker go out in the order they were queued, and are retried until
    they are answered or the broker leaves."""

    def update_brokers(self, endpoints: Mapping[int, tuple[str, int]],
                       epochs: Mapping[int, int] | None = None) -> None: ...

    def send(self, broker_id: int, request: Message | RequestBuilder,
             callback: Callable[[Message], None] | None = None) -> None: ...


@dataclass(frozen=True, slots=True)
class IsrChange:
    """One partition of an AlterPartition request."""

    topic: str
    partition: int
    leader_epoch: int
    new_isr: list[int]
    partition_epoch: int
    leader_recovery_state: int = 0


@dataclass(frozen=True, slots=True)
class IsrChangeResult:
    error_code: int
    state: PartitionState | None = None


class BrokerNotAvailableError(KafkaError):
    error_code = ErrorCode.BROKER_NOT_AVAILABLE


class KafkaController:
    def __init__(self, node_id: int, store: ZooKeeperMetadataStore, channel: ControllerChannel,
                 *, inter_broker_listener: str,
                 unclean_leader_election: Callable[[Mapping[str, str]], bool] = (
                     lambda configs: False),
                 on_activation: Callable[[bool], None] | None = None,
                 auto_leader_rebalance: bool = True,
                 imbalance_check_interval_s: float = 300,
                 imbalance_percentage: int = 10) -> None:
        self.node_id = node_id
        self.auto_leader_rebalance = auto_leader_rebalance
        self.imbalance_check_interval_s = imbalance_check_interval_s
        self.imbalance_percentage = imbalance_percentage
        self._rebalancer: asyncio.Task[None] | None = None
        self.store = store
        self.channel = channel
        self.inter_broker_listener = inter_broker_listener
        self.unclean_leader_election = unclean_leader_election
        self.on_activation = on_activation
        self.epoch: int | None = None  # set while active
        self.live: dict[int, BrokerRegistration] = {}
        self.topics: dict[str, TopicMetadata] = {}
        self.shutting_down: set[int] = set()
        # KIP-112: replicas in a failed log dir, by broker, as its LeaderAndIsr answers
        # said (KAFKA_STORAGE_ERROR); never elected or let into an ISR until it restarts.
        self.offline_replicas: dict[int, set[TopicPartition]] = {}
        self._watches: list[ZkWatch] = []
        self._topic_watches: dict[str, ZkWatch] = {}
        self._queue: asyncio.Queue[Callable[[], Awaitable[None]]] = asyncio.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._worker: asyncio.Task[None] | None = None
        self._controller_watch: ZkWatch | None = None

    @property
    def is_active(self) -> bool:
        return self.epoch is not None

    def partition_counts(self) -> tuple[int, int, int]:
        """(offline partitions, topics, partitions) as this controller knows them, for
        the metrics (Kafka's OfflinePartitionsCount, GlobalTopicCount,
        GlobalPartitionCount; all 0 unless active). A partition is offline when its
        leader is no live broker, or holds it in a failed log dir (KIP-112)."""
        live = set(self.live)
        failed = {b: set(tps) for b, tps in list(self.offline_replicas.items())}
        topics = list(self.topics.values())
        offline = partitions = 0
        for topic in topics:
            for index, state in list(topic.partitions.items()):
                partitions += 1
                leader = state.leader
                if leader not in live or (topic.name, index) in failed.get(leader, ()):
                    offline += 1
        return offline, len(topics), partitions

    # ---- life cycle -------------------------------------------------------------------

    async def startup(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._worker = self._loop.create_task(self._process_events(), name="controller")
        self.store.add_session_listener(self._on_session_event)
        self._controller_watch = await self._zk(
            self.store.watch_controller,
            lambda controller_id: self._post(lambda: self._on_controller_change(controller_id)))

    async def shutdown(self) -> None:
        if self._worker is None:  # never started: the broker failed before (a port in use)
            return
        if self._controller_watch is not None:
            self._controller_watch.cancel()
        self.store.remove_session_listener(self._on_session_event)
        done = asyncio.get_running_loop().create_future()

        async def stop() -> None:
            await self._resign(delete_znode=True)
            if not done.done():  # given up on after its timeout
                done.set_result(None)

        self._post(stop)
        try:
            async with asyncio.timeout(10):
                await done
        except TimeoutError:
            log.warning("the controller did not resign in time")
        self._worker.cancel()

    # ---- the event queue --------------------------------------------------------------

    def _post(self, event: Callable[[], Awaitable[None]]) -> None:
        """Queues an event; callable from any thread."""
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):  # the loop closed: the broker stopped
            self._loop.call_soon_threadsafe(self._queue.put_nowait, event)

    async def _process_events(self) -> None:
        while True:
            event = await self._queue.get()
            try:
                await event()
            except ControllerMovedError as e:
                log.warning("controller %d: %s; resigning", self.node_id, e)
                await self._resign()
            except Exception:
                log.exception("controller %d: an event failed", self.node_id)

    async def _zk(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.to_thread(fn, *args)

    async def _call(self, event: Callable[[], Awaitable[T]]) -> T:
        """Runs `event` in the queue and returns its result (the requests from brokers)."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        async def run() -> None:
            try:
                future.set_result(await event())
            except BaseException as e:
                future.set_exception(e)
                if isinstance(e, (ControllerMovedError, asyncio.CancelledError)):
                    raise  # the worker stops (cancelled), or resigns

        self._post(run)
        return await future

    def _on_session_event(self, event: SessionEvent) -> None:
        if event is SessionEvent.EXPIRED:
            self._post(self._resign)
        elif event is SessionEvent.NEW_SESSION:
            self._post(self._elect)

    # ---- election ---------------------------------------------------------------------

    async def _on_controller_change(self, controller_id: int | None) -> None:
        if controller_id is None:
            await self._elect()
        elif controller_id != self.node_id and self.is_active:
            log.warning("controller %d: broker %d is the controller now", self.node_id,
                        controller_id)
            await self._resign()

    async def _elect(self) -> None:
        if self.is_active:
            return
        epoch = await self._zk(self.store.try_elect_controller)
        if epoch is None:
            return
        self.epoch = epoch
        try:
            await self._on_controller_failover()
        except Exception:
            await self._resign()
            raise
        if self.auto_leader_rebalance:
            self._rebalancer = asyncio.get_running_loop().create_task(
                self._rebalance_leaders_periodically(), name="controller-leader-rebalance")
        if self.on_activation is not None:
            self.on_activation(True)

    async def _resign(self, delete_znode: bool = False) -> None:
        was_active = self.is_active
        for watch in [*self._watches, *self._topic_watches.values()]:
            watch.cancel()
        self._watches = []
        self._topic_watches = {}
        if self._rebalancer is not None:
            self._rebalancer.cancel()
            self._rebalancer = None
        self.epoch = None
        self.live = {}
        self.topics = {}
        self.shutting_down = set()
        self.offline_replicas = {}
        if was_active:
            log.info("controller %d resigned", self.node_id)
            if delete_znode:
                await self._zk(self.store.resign_controller)
            if self.on_activation is not None:
                self.on_activation(False)

    async def _on_controller_failover(self) -> None:
        """Kafka's onControllerFailover: read the cluster's state, make every partition
        have a live leader where one may lead, and tell every broker."""
        log.info("controller %d: taking over with epoch %s", self.node_id, self.epoch)
        self.live = await self._zk(self.store.live_brokers)
        self._update_channel()
        self.topics = await self._zk(self.store.topics)
        await self._watch_partitions(list(self.topics))
        self._watches.append(await self._zk(
            self.store.watch_brokers,
            lambda ids: self._post(lambda: self._on_broker_change(ids))))
        self._watches.append(await self._zk(
            self.store.watch_topics,
            lambda names: self._post(lambda: self._on_topic_change(names))))
        self._watches.append(await self._zk(
            self.store.watch_log_dir_events,
            lambda names: self._post(lambda: self._on_log_dir_events(names))))
        changed = await self._elect_leaders(self._all_partitions())
        del changed  # every broker gets everything below
        self._send_update_metadata(self.live, self._all_partitions())
        self._send_leader_and_isr(self._all_partitions(), self.live)
        log.info("controller %d: %d live brokers %s, %d topics", self.node_id, len(self.live),
                 sorted(self.live), len(self.topics))
        for tp, state in self._partition_states():  # reassignments the last one left going
            if state.adding_replicas or state.removing_replicas:
                await self._maybe_complete_reassignment(tp)

    # ---- brokers ----------------------------------------------------------------------

    async def _on_broker_change(self, ids: set[int]) -> None:
        if not self.is_active:
            return
        registrations = await self._zk(self.store.live_brokers)
        # A broker that restarted within its old session's timeout has a new registration.
        bounced = {i for i in ids & set(self.live)
                   if i in registrations and registrations[i] != self.live[i]}
        dead = (set(self.live) - set(registrations)) | bounced
        new = (set(registrations) - set(self.live)) | bounced
        if not dead and not new:
            return
        if dead:
            log.info("controller %d: brokers %s are gone", self.node_id, sorted(dead))
            for broker_id in dead:
                self.live.pop(broker_id, None)
                self.shutting_down.discard(broker_id)
                self.offline_replicas.pop(broker_id, None)
            self._update_channel()
            await self._on_brokers_failure(dead)
        if new:
            log.info("controller %d: brokers %s joined", self.node_id, sorted(new))
            for broker_id in new:
                self.live[broker_id] = registrations[broker_id]
                self.offline_replicas.pop(broker_id, None)  # restarted: its dirs are back
            self._update_channel()
            await self._on_brokers_startup(new)

    async def _on_brokers_failure(self, dead: set[int]) -> None:
        """Leaders on dead brokers are replaced; dead followers leave the ISR (the last
        replica in it stays, so that it can lead cleanly when it comes back)."""
        affected = [tp for tp, s in self._partition_states()
                    if s.leader in dead or any(b in dead for b in s.isr)]
        changed = await self._elect_leaders(affected, removed=dead)
        self._send_update_metadata(self.live, self._all_partitions())
        self._send_leader_and_isr(changed, self.live)

    # ---- log dir failures (KIP-112) ---------------------------------------------------

    async def _on_log_dir_events(self, names: list[str]) -> None:
        """Brokers whose log dirs failed wrote notifications: each is sent LeaderAndIsr for
        all its replicas, and answers KAFKA_STORAGE_ERROR for those in an offline dir
        (Kafka's onBrokerLogDirFailure); the answers move leadership away."""
        if not self.is_active or not names:
            return
        brokers = await self._zk(self.store.read_log_dir_events, names)
        try:
            for broker_id in sorted(brokers & set(self.live)):
                log.info("controller %d: a log dir of broker %d failed; asking which of its "
                         "replicas are offline", self.node_id, broker_id)
                self._send_leader_and_isr(
                    [tp for tp, s in self._partition_states() if broker_id in s.replicas],
                    {broker_id: self.live[broker_id]}, probe=True)
        finally:
            await self._zk(self.store.delete_log_dir_events, names)

    def _on_leader_and_isr_response(self, broker_id: int, answer: Message) -> None:
        """The channel's callback: per partition errors of a LeaderAndIsr answer, handled in
        the event queue (Kafka's LeaderAndIsrResponseReceived)."""
        response = cast(lair.LeaderAndIsrResponse, answer)
        if response.error_code != ErrorCode.NONE:  # STALE_CONTROLLER_EPOCH: not ours now
            log.warning("controller %d: broker %d refused LeaderAndIsr (error %d)",
                        self.node_id, broker_id, response.error_code)
            return
        errors: dict[TopicPartition, int] = {}
        names = {t.topic_id: name for name, t in self.topics.items()}
        for topic in response.topics:  # v5+: by topic id
            name = names.get(topic.topic_id)
            if name is not None:
                for p in topic.partition_errors:
                    errors[(name, p.partition_index)] = p.error_code
        for p in response.partition_errors:  # v0-v4: by name
            errors[(p.topic_name, p.partition_index)] = p.error_code
        if any(e == ErrorCode.KAFKA_STORAGE_ERROR for e in errors.values()) or (
                broker_id in self.offline_replicas):
            self._post(lambda: self._on_replica_errors(broker_id, errors))

    async def _on_replica_errors(self, broker_id: int, errors: dict[TopicPartition, int]
                                 ) -> None:
        if not self.is_active or broker_id not in self.live:
            return
        previous = self.offline_replicas.get(broker_id, set())
        current = ({tp for tp in previous if errors.get(tp) != ErrorCode.NONE}
                   | {tp for tp, e in errors.items() if e == ErrorCode.KAFKA_STORAGE_ERROR
                      and tp[0] in self.topics and tp[1] in self.topics[tp[0]].partitions})
        if current:
            self.offline_replicas[broker_id] = current
        else:
            self.offline_replicas.pop(broker_id, None)
        new = sorted(current - previous)
        if not new:
            return
        log.warning("controller %d: replicas of %s on broker %d are in an offline log dir",
                    self.node_id, [f"{t}-{p}" for t, p in new], broker_id)
        # Leaders elected elsewhere and the offline replica out of the ISRs: _elect_leaders
        # leaves out offline replicas (_online_brokers). Partitions whose whole ISR is
        # offline stay leaderless with their last ISR member, as for dead brokers.
        changed = await self._elect_leaders(new)
        self._send_update_metadata(self.live, new)  # also their offline_replicas
        self._send_leader_and_isr(changed, self.live)

    def _online_brokers(self, tp: TopicPartition, live: set[int]) -> set[int]:
        """`live` less the brokers whose replica of `tp` is in an offline log dir."""
        offline = {b for b, tps in self.offline_replicas.items() if tp in tps}
        return live - offline if offline else live

    async def _on_brokers_startup(self, new: set[int]) -> None:
        """New brokers learn everything, then follow or lead their replicas; partitions
        without a leader may have one now."""
        others = {i: r for i, r in self.live.items() if i not in new}
        self._send_update_metadata(self.live, self._all_partitions())
        offline = [tp for tp, s in self._partition_states() if s.leader not in self.live]
        changed = await self._elect_leaders(offline)
        self._send_leader_and_isr(
            [tp for tp, s in self._partition_states() if any(r in new for r in s.replicas)],
            {i: self.live[i] for i in new})
        if changed:
            self._send_leader_and_isr(changed, others)
            self._send_update_metadata(self.live, changed)

    # ---- topics -----------------------------------------------------------------------

    async def _on_topic_change(self, names: set[str]) -> None:
        if not self.is_active:
            return
        created = sorted(names - set(self.topics))
        deleted = sorted(set(self.topics) - names)
        for name in deleted:
            await self._on_topic_deletion(name)
        if not created:
            return
        # Read together, their requests pipelined: hundreds of topics created at once
        # would otherwise cost a worker thread's round trip each.
        found = await self._zk(self.store.read_topics, created)
        self.topics.update(found)
        await self._watch_partitions(list(found))
        partitions = [(n, p) for n in created if n in self.topics
                      for p in sorted(self.topics[n].partitions)]
        await self._elect_leaders(partitions)
        log.info("controller %d: new topics %s", self.node_id, created)
        self._send_update_metadata(self.live, partitions)
        self._send_leader_and_isr(partitions, self.live)

    async def _watch_partitions(self, names: list[str]) -> None:
        """Kafka's partition modification watch, on each of the topics (in one worker
        thread's call): CreatePartitions on any broker adds partitions to a topic's
        assignment."""
        def changed(name: str) -> Callable[[set[int] | None], None]:
            def on_change(partitions: set[int] | None) -> None:
                if partitions is not None:
                    self._post(lambda: self._on_partitions_added(name, partitions))
            return on_change

        def watch_all() -> dict[str, ZkWatch]:
            return {name: self.store.watch_topic_partitions(name, changed(name))
                    for name in names}

        self._topic_watches.update(await self._zk(watch_all))

    async def _on_partitions_added(self, name: str, partitions: set[int]) -> None:
        known = self.topics.get(name)
        if not self.is_active or known is None or partitions <= set(known.partitions):
            return
        topic = await self._zk(self.store.topic, name)
        if topic is None:
            return
        added = sorted((name, p) for p in set(topic.partitions) - set(known.partitions))
        for _, p in added:
            known.partitions[p] = topic.partitions[p]
        await self._elect_leaders(added)
        log.info("controller %d: partitions added to %s: %s", self.node_id, name,
                 [p for _, p in added])
        self._send_update_metadata(self.live, [(name, p) for p in sorted(known.partitions)])
        self._send_leader_and_isr(added, self.live)

    async def _on_topic_deletion(self, name: str) -> None:
        topic = self.topics.pop(name)
        for offline in self.offline_replicas.values():
            offline.difference_update((name, p) for p in topic.partitions)
        watch = self._topic_watches.pop(name, None)
        if watch is not None:
            watch.cancel()
        log.info("controller %d: topic %s was deleted", self.node_id, name)
        for broker_id in self.live:
            replicas = [p for p, s in sorted(topic.partitions.items()) if broker_id in s.replicas]
            if replicas:
                self.channel.send(broker_id, self._stop_replica_deleting(name, replicas))
        deleting = TopicMetadata(name, topic.topic_id, {
            p: replace(s, leader=LEADER_DURING_DELETE)
            for p, s in topic.partitions.items()})
        for broker_id in self.live:
            self.channel.send(broker_id, self._update_metadata_request(
                [(name, p, s) for p, s in sorted(deleting.partitions.items())], deleting))

    # ---- elections --------------------------------------------------------------------

    async def _elect_leaders(self, partitions: Iterable[TopicPartition],
                             removed: Collection[int] = ()) -> list[TopicPartition]:
        """Gives each partition a live leader if one may lead, creating the states of new
        partitions, and takes `removed` brokers out of the ISR. Writes the states that
        change (fenced); returns their partitions."""
        live = set(self.live) - set(removed)
        new_states: dict[TopicPartition, PartitionState] = {}
        changes: dict[TopicPartition, PartitionState] = {}
        for tp in partitions:
            state = self.topics[tp[0]].partitions[tp[1]]
            if state.partition_epoch < 0:  # written by an admin tool: no state znode yet
                replicas = [r for r in state.replicas if r in live]
                if replicas:
                    new_states[tp] = replace(state, leader=replicas[0], leader_epoch=0,
                                             isr=replicas)
                continue
            new = self._elect_leader(tp[0], state, self._online_brokers(tp, live))
            if new is not None:
                changes[tp] = new
        if new_states:
            try:  # in several transactions for thousands of partitions: some may fail
                await self._zk(self.store.create_partition_states, new_states)
            except PartitionStateConflictError as e:
                # Made meanwhile by another writer: go on with what is there.
                log.warning("controller %d: %s", self.node_id, e)
                for name in sorted({t for t, _ in e.conflicts}):
                    fresh = await self._zk(self.store.topic, name)
                    for tp in (c for c in e.conflicts if c[0] == name):
                        state = fresh.partitions.get(tp[1]) if fresh is not None else None
                        if state is not None and state.partition_epoch >= 0:
                            new_states[tp] = state
            for (t, p), s in list(new_states.items()):
                if s.partition_epoch < 0:  # not written: no leader yet
                    del new_states[(t, p)]
                else:
                    self.topics[t].partitions[p] = s
        await self._write_states(changes)
        return sorted(new_states) + sorted(changes)

    def _elect_leader(self, topic: str, state: PartitionState,
                      live: set[int]) -> PartitionState | None:
        """The partition's next state, None when it keeps this one."""
        isr = list(state.isr)
        leader = state.leader
        if leader not in live:
            result = election.offline_partition(
                state.replicas, isr, live,
                self.unclean_leader_election(self.topics[topic].configs))
            if result.unclean:
                log.warning("controller %d: unclean leader election for %s: broker %d leads "
                            "without being in the ISR %s; acknowledged records may be lost",
                            self.node_id, topic, result.leader, isr)
            if result.leader is not None:
                return replace(state, leader=result.leader, isr=result.isr,
                               leader_epoch=state.leader_epoch + 1)
            # No replica may lead: the partition is offline. The last ISR member stays in
            # the ISR, so that it leads cleanly when it comes back (Kafka's rule).
            if leader == NO_LEADER:
                return None
            live_isr = [b for b in isr if b in live]
            return replace(state, leader=NO_LEADER, isr=live_isr or isr[-1:],
                           leader_epoch=state.leader_epoch + 1)
        shrunk = [b for b in isr if b in live]
        if shrunk != isr and shrunk:
            return replace(state, isr=shrunk, leader_epoch=state.leader_epoch + 1)
        return None

    async def _write_states(self, changes: dict[TopicPartition, PartitionState]) -> None:
        if not changes:
            return
        try:
            await self._zk(self.store.set_partition_states, changes)
        except PartitionStateConflictError as e:
            # Changed meanwhile (a leader's ISR change written by an older controller):
            # read them again; the next event that touches them elects with fresh states.
            log.warning("controller %d: %s", self.node_id, e)
            for tp in e.conflicts:
                changes.pop(tp, None)
                fresh = await self._zk(self.store.topic, tp[0])
                if fresh is not None and tp[1] in fresh.partitions:
                    self.topics[tp[0]].partitions[tp[1]] = fresh.partitions[tp[1]]
        for (t, p), s in changes.items():
            self.topics[t].partitions[p] = s

    # ---- requests from brokers --------------------------------------------------------

    async def alter_partition(self, broker_id: int, changes: list[IsrChange]
                              ) -> list[IsrChangeResult]:
        """A leader's ISR changes (AlterPartition, KIP-497); NotControllerError when this
        broker is not the controller."""
        if not self.is_active:
            raise NotControllerError()
        return await self._call(lambda: self._alter_partition(broker_id, changes))

    async def _alter_partition(self, broker_id: int, changes: list[IsrChange]
                               ) -> list[IsrChangeResult]:
        if not self.is_active:
            raise NotControllerError()
        results: list[IsrChangeResult] = []
        writes: dict[TopicPartition, PartitionState] = {}
        for change in changes:
            topic = self.topics.get(change.topic)
            state = topic.partitions.get(change.partition) if topic is not None else None
            if state is None:
                results.append(IsrChangeResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            elif state.leader != broker_id:
                results.append(IsrChangeResult(ErrorCode.NOT_LEADER_OR_FOLLOWER))
            elif change.leader_epoch != state.leader_epoch:
                results.append(IsrChangeResult(ErrorCode.FENCED_LEADER_EPOCH))
            elif change.partition_epoch != state.partition_epoch:
                results.append(IsrChangeResult(ErrorCode.INVALID_UPDATE_VERSION))
            elif (broker_id not in change.new_isr
                  or any(b not in state.replicas or b not in self.live
                         or (b not in state.isr and (b in self.shutting_down or (
                             change.topic, change.partition) in self.offline_replicas.get(b, ())))
                         for b in change.new_isr)):
                results.append(IsrChangeResult(ErrorCode.INELIGIBLE_REPLICA))
            elif change.new_isr == state.isr:
                results.append(IsrChangeResult(ErrorCode.NONE, state))
            else:
                writes[(change.topic, change.partition)] = replace(state,
                                                                   isr=list(change.new_isr))
                results.append(IsrChangeResult(ErrorCode.NONE))
        await self._write_states(writes)
        for i, change in enumerate(changes):
            tp = (change.topic, change.partition)
            if tp in writes:
                state = self.topics[tp[0]].partitions[tp[1]]
                ok = state.isr == writes[tp].isr
                results[i] = IsrChangeResult(ErrorCode.NONE if ok
                                             else ErrorCode.INVALID_UPDATE_VERSION,
                                             state if ok else None)
        if writes:
            log.info("controller %d: ISR changes %s", self.node_id,
                     {f"{t}-{p}": s.isr for (t, p), s in writes.items()})
            self._send_update_metadata(self.live, list(writes))
            for tp in writes:  # a new replica caught up: its reassignment may be done
                await self._maybe_complete_reassignment(tp)
        return results

    async def elect_leaders(self, partitions: list[TopicPartition] | None, unclean: bool
                            ) -> dict[TopicPartition, tuple[int, str | None]]:
        """ElectLeaders (KIP-460): the preferred replica (the first) for each partition, or
        with `unclean` any live replica for partitions without a leader; None: every
        partition. Per partition (error, message)."""
        if not self.is_active:
            raise NotControllerError()
        return await self._call(lambda: self._elect_requested(partitions, unclean))

    async def _elect_requested(self, partitions: list[TopicPartition] | None, unclean: bool
                               ) -> dict[TopicPartition, tuple[int, str | None]]:
        if not self.is_active:
            raise NotControllerError()
        live = set(self.live) - self.shutting_down
        results: dict[TopicPartition, tuple[int, str | None]] = {}
        changes: dict[TopicPartition, PartitionState] = {}
        for tp in self._all_partitions() if partitions is None else partitions:
            topic = self.topics.get(tp[0])
            state = topic.partitions.get(tp[1]) if topic is not None else None
            if state is None:
                results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
                continue
            if unclean:
                if state.leader in live:
                    results[tp] = (ErrorCode.ELECTION_NOT_NEEDED, "the partition has a leader")
                    continue
                result = election.offline_partition(state.replicas, state.isr,
                                                    self._online_brokers(tp, live), True)
                error = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
            else:
                if state.replicas and state.leader == state.replicas[0]:
                    results[tp] = (ErrorCode.ELECTION_NOT_NEEDED,
                                   "the preferred replica leads already")
                    continue
                result = election.preferred_replica(state.replicas, state.isr,
                                                    self._online_brokers(tp, live))
                error = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
            if result.leader is None:
                results[tp] = (error, f"no replica of {tp[0]}-{tp[1]} may lead: replicas "
                               f"{state.replicas}, ISR {state.isr}, live {sorted(live)}")
                continue
            if result.unclean:
                log.warning("controller %d: unclean leader election for %s-%d: broker %d "
                            "leads without being in the ISR %s; acknowledged records may "
                            "be lost", self.node_id, tp[0], tp[1], result.leader, state.isr)
            changes[tp] = replace(state, leader=result.leader, isr=result.isr,
                                  leader_epoch=state.leader_epoch + 1)
        await self._write_states(changes)  # leaves out what conflicted
        for tp in changes:
            results[tp] = (ErrorCode.NONE, None)
        for tp in set(results) ^ set(self._all_partitions() if partitions is None
                                     else partitions):
            results[tp] = (ErrorCode.UNKNOWN_SERVER_ERROR, "the partition changed meanwhile")
        written = sorted(changes)
        if written:
            log.info("controller %d: elected leaders %s", self.node_id,
                     {f"{t}-{p}": self.topics[t].partitions[p].leader for t, p in written})
            self._send_update_metadata(self.live, written)
            self._send_leader_and_isr(written, self.live)
        return results

    async def _check_leader_imbalance(self) -> None:
        """auto.leader.rebalance.enable: a broker leading too few of the partitions whose
        preferred replica it is (more than leader.imbalance.per.broker.percentage not led
        by it) gets them back, where it is alive and in sync."""
        if not self.is_active:
            return
        states = self._partition_states()
        to_elect: list[TopicPartition] = []
        for broker_id in set(self.live) - self.shutting_down:
            preferred = [(tp, s) for tp, s in states if s.replicas and s.replicas[0] == broker_id]
            elsewhere = [tp for tp, s in preferred if s.leader != broker_id]
            if preferred and len(elsewhere) / len(preferred) * 100 > self.imbalance_percentage:
                to_elect.extend(tp for tp in elsewhere
                                if broker_id in self.topics[tp[0]].partitions[tp[1]].isr)
        if to_elect:
            log.info("controller %d: leader imbalance: preferred replicas lead %s again",
                     self.node_id, [f"{t}-{p}" for t, p in sorted(to_elect)])
            await self._elect_requested(sorted(to_elect), unclean=False)

    async def _rebalance_leaders_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.imbalance_check_interval_s)
            self._post(self._check_leader_imbalance)

    # ---- partition reassignment (KIP-455) ----------------------------------------------

    async def alter_partition_reassignments(
        self, targets: dict[TopicPartition, list[int] | None],
    ) -> dict[TopicPartition, tuple[int, str | None]]:
        """AlterPartitionReassignments: moves each partition to its target replicas (None
        cancels its reassignment). The new replicas are added first and copy the data; once
        they are all in the ISR the old ones are dropped (their logs deleted) and, if the
        leader is not among the targets, a target leads. Per partition (error, message)."""
        if not self.is_active:
            raise NotControllerError()
        return await self._call(lambda: self._alter_reassignments(targets))

    async def _alter_reassignments(self, targets: dict[TopicPartition, list[int] | None]
                                   ) -> dict[TopicPartition, tuple[int, str | None]]:
        if not self.is_active:
            raise NotControllerError()
        results: dict[TopicPartition, tuple[int, str | None]] = {}
        for tp, target in targets.items():
            topic = self.topics.get(tp[0])
            state = topic.partitions.get(tp[1]) if topic is not None else None
            if state is None:
                results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
                continue
            original = [b for b in state.replicas if b not in state.adding_replicas]
            if target is None:
                if not state.adding_replicas and not state.removing_replicas:
                    results[tp] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)
                    continue
                target = original
            else:
                problem = self._invalid_assignment(target)
                if problem:
                    results[tp] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
                    continue
            if target == state.replicas and not state.adding_replicas:
                results[tp] = (ErrorCode.NONE, None)  # nothing to move
                continue
            adding = [b for b in target if b not in original]
            removing = [b for b in original if b not in target]
            replicas = target + removing
            new = replace(state, replicas=replicas, adding_replicas=adding,
                          removing_replicas=removing, leader_epoch=state.leader_epoch + 1,
                          isr=[b for b in state.isr if b in replicas])
            if new.leader not in replicas:  # cancelled: the leader was a new replica
                result = election.reassignment(original, new.isr, set(self.live))
                if result.leader is None:
                    results[tp] = (ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, None)
                    continue
                new.leader = result.leader
            dropped = [b for b in state.replicas if b not in replicas]
            if not await self._write_assignment(tp, new):
                results[tp] = (ErrorCode.UNKNOWN_SERVER_ERROR, "the partition changed meanwhile")
                continue
            log.info("controller %d: reassigning %s-%d from %s to %s", self.node_id, tp[0],
                     tp[1], original, target)
            self._send_update_metadata(self.live, [tp])
            self._send_leader_and_isr([tp], self.live)
            self._stop_replicas(tp, dropped)
            await self._maybe_complete_reassignment(tp)
            results[tp] = (ErrorCode.NONE, None)
        return results

    def _invalid_assignment(self, replicas: list[int]) -> str | None:
        if not replicas:
            return "the replica list is empty"
        if len(set(replicas)) != len(replicas):
            return f"the replica list {replicas} has duplicates"
        dead = [b for b in replicas if b not in self.live]
        if dead:
            return f"brokers {dead} are not alive"
        return None

    async def _maybe_complete_reassignment(self, tp: TopicPartition) -> None:
        """Ends a reassignment once every target replica is in sync: the removed replicas
        go (StopReplica with delete) and a target leads."""
        topic = self.topics.get(tp[0])
        state = topic.partitions.get(tp[1]) if topic is not None else None
        if state is None or not (state.adding_replicas or state.removing_replicas):
            return
        target = [b for b in state.replicas if b not in state.removing_replicas]
        if not all(b in state.isr for b in target):
            return
        leader = state.leader
        if leader not in target or leader not in self.live:
            result = election.reassignment(target, state.isr, set(self.live))
            if result.leader is None:
                return
            leader = result.leader
        new = replace(state, replicas=target, adding_replicas=[], removing_replicas=[],
                      leader=leader, isr=[b for b in state.isr if b in target],
                      leader_epoch=state.leader_epoch + 1)
        if not await self._write_assignment(tp, new):
            return
        log.info("controller %d: reassignment of %s-%d to %s done", self.node_id, tp[0], tp[1],
                 target)
        self._send_update_metadata(self.live, [tp])
        self._send_leader_and_isr([tp], self.live)
        self._stop_replicas(tp, state.removing_replicas)

    async def _write_assignment(self, tp: TopicPartition, state: PartitionState) -> bool:
        """Writes a partition's replicas and state together; False on a conflict (the state
        is read again)."""
        topic = copy.deepcopy(self.topics[tp[0]])
        topic.partitions[tp[1]] = state
        try:
            await self._zk(self.store.update_topic, topic)
        except PartitionStateConflictError as e:
            log.warning("controller %d: %s", self.node_id, e)
            fresh = await self._zk(self.store.topic, tp[0])
            if fresh is not None and tp[1] in fresh.partitions:
                self.topics[tp[0]].partitions[tp[1]] = fresh.partitions[tp[1]]
            return False
        self.topics[tp[0]].partitions[tp[1]] = topic.partitions[tp[1]]
        return True

    def _stop_replicas(self, tp: TopicPartition, brokers: Iterable[int]) -> None:
        for broker_id in brokers:
            if broker_id in self.live:
                self.channel.send(broker_id, self._stop_replica_deleting(tp[0], [tp[1]]))

    def list_partition_reassignments(self, partitions: list[TopicPartition] | None
                                     ) -> dict[TopicPartition, PartitionState]:
        """The partitions being reassigned (all of them, or those of `partitions`)."""
        if not self.is_active:
            raise NotControllerError()
        return {tp: s for tp, s in self._partition_states()
                if (s.adding_replicas or s.removing_replicas)
                and (partitions is None or tp in partitions)}

    async def controlled_shutdown(self, broker_id: int) -> list[TopicPartition]:
        """A broker is about to stop (ControlledShutdown): its leaderships move to other
        in-sync replicas and it leaves every ISR, so that producers and consumers move on
        before it goes. Returns the replicated partitions it still leads (no other replica
        is in sync); NotControllerError when this broker is not the controller."""
        if not self.is_active:
            raise NotControllerError()
        return await self._call(lambda: self._controlled_shutdown(broker_id))

    async def _controlled_shutdown(self, broker_id: int) -> list[TopicPartition]:
        if not self.is_active:
            raise NotControllerError()
        if broker_id not in self.live:
            raise BrokerNotAvailableError(f"broker {broker_id} is not registered")
        log.info("controller %d: broker %d is shutting down", self.node_id, broker_id)
        self.shutting_down.add(broker_id)
        changes: dict[TopicPartition, PartitionState] = {}
        for tp, state in self._partition_states():
            if len(state.replicas) < 2 or broker_id not in state.isr:
                continue
            if state.leader == broker_id:
                result = election.controlled_shutdown(state.replicas, state.isr, self.live,
                                                      self.shutting_down)
                if result.leader is not None:
                    changes[tp] = replace(state, leader=result.leader, isr=result.isr,
                                          leader_epoch=state.leader_epoch + 1)
            elif len(state.isr) > 1:
                changes[tp] = replace(state, isr=[b for b in state.isr if b != broker_id],
                                      leader_epoch=state.leader_epoch + 1)
        await self._write_states(changes)  # leaves out what conflicted
        written = sorted(changes)
        self._send_update_metadata(self.live, written)
        self._send_leader_and_isr(written, self.live)
        return [tp for tp, s in self._partition_states()
                if s.leader == broker_id and len(s.replicas) > 1]

    # ---- requests to brokers ----------------------------------------------------------

    def _epoch(self) -> int:
        assert self.epoch is not None
        return self.epoch

    def broker_epoch_is_stale(self, broker_id: int, broker_epoch: int) -> bool:
        """A request of a broker's earlier registration (a smaller epoch than the live one;
        -1, which Kafka lets through for old brokers, too)."""
        registration = self.live.get(broker_id)
        return registration is not None and broker_epoch < registration.epoch

    def _update_channel(self) -> None:
        self.channel.update_brokers(self._endpoints(),
                                    {b: r.epoch for b, r in self.live.items()})

    def _endpoints(self) -> dict[int, tuple[str, int]]:
        endpoints = {}
        for broker_id, registration in self.live.items():
            endpoint = next((e for e in registration.endpoints
                             if e.name == self.inter_broker_listener), None)
            if endpoint is not None:
                endpoints[broker_id] = (endpoint.host, endpoint.port)
        return endpoints

    def _all_partitions(self) -> list[TopicPartition]:
        return [(t, p) for t, topic in sorted(self.topics.items())
                for p in sorted(topic.partitions)]

    def _partition_states(self) -> list[tuple[TopicPartition, PartitionState]]:
        return [((t, p), s) for t, topic in sorted(self.topics.items())
                for p, s in sorted(topic.partitions.items())]

    def _send_leader_and_isr(self, partitions: Iterable[TopicPartition],
                             brokers: Mapping[int, BrokerRegistration],
                             probe: bool = False) -> None:
        """LeaderAndIsr to each of `brokers` for its replicas among `partitions`, but for
        those known to be in an offline log dir unless `probe` (a log dir event asks about
        them all). The answers' KAFKA_STORAGE_ERRORs mark replicas offline."""
        partitions = list(partitions)
        endpoints = self._endpoints()
        for broker_id in brokers:
            by_topic: dict[str, list[lai.LeaderAndIsrPartitionState]] = {}
            leaders: set[int] = set()
            for t, p in partitions:
                topic = self.topics.get(t)
                state = topic.partitions.get(p) if topic is not None else None
                if state is None or broker_id not in state.replicas or (
                        not probe and (t, p) in self.offline_replicas.get(broker_id, ())):
                    continue
                by_topic.setdefault(t, []).append(lai.LeaderAndIsrPartitionState(
                    topic_name=t, partition_index=p, controller_epoch=state.controller_epoch,
                    leader=state.leader, leader_epoch=state.leader_epoch, isr=list(state.isr),
                    partition_epoch=state.partition_epoch, replicas=list(state.replicas),
                    adding_replicas=list(state.adding_replicas),
                    removing_replicas=list(state.removing_replicas),
                    leader_recovery_state=state.leader_recovery_state))
                if state.leader in endpoints:
                    leaders.add(state.leader)
            if not by_topic:
                continue
            request = lai.LeaderAndIsrRequest(
                controller_id=self.node_id, controller_epoch=self._epoch(),
                topic_states=[lai.LeaderAndIsrTopicState(
                    topic_name=t, topic_id=self.topics[t].topic_id, partition_states=states)
                    for t, states in by_topic.items()],
                live_leaders=[lai.LeaderAndIsrLiveLeader(
                    broker_id=b, host_name=endpoints[b][0], port=endpoints[b][1])
                    for b in sorted(leaders)])
            self.channel.send(broker_id, _grouped_from(ApiKey.LEADER_AND_ISR, 2, request),
                              lambda r, b=broker_id: self._on_leader_and_isr_response(b, r))

    def _stop_replica_deleting(self, topic: str, partitions: list[int]) -> RequestBuilder:
        """StopReplica with delete, in the layout of the version chosen: partitions
        ungrouped (v0), grouped by topic (v1-v2), with per-partition states (v3+)."""
        controller_epoch = self._epoch()

        def build(version: int) -> Message:
            request = sr.StopReplicaRequest(controller_id=self.node_id,
                                            controller_epoch=controller_epoch)
            if version >= 3:
                request.topic_states = [sr.StopReplicaTopicState(
                    topic_name=topic, partition_states=[sr.StopReplicaPartitionState(
                        partition_index=p, leader_epoch=LEADER_DURING_DELETE,
                        delete_partition=True) for p in partitions])]
            else:
                request.delete_partitions = True
                if version >= 1:
                    request.topics = [sr.StopReplicaTopicV1(name=topic,
                                                            partition_indexes=partitions)]
                else:
                    request.ungrouped_partitions = [sr.StopReplicaPartitionV0(
                        topic_name=topic, partition_index=p) for p in partitions]
            return request

        return RequestBuilder(ApiKey.STOP_REPLICA, build)

    def _send_update_metadata(self, brokers: Mapping[int, BrokerRegistration],
                              partitions: Iterable[TopicPartition]) -> None:
        states = [(t, p, self.topics[t].partitions[p]) for t, p in partitions
                  if t in self.topics and p in self.topics[t].partitions]
        for broker_id in brokers:
            self.channel.send(broker_id, self._update_metadata_request(states))

    def _update_metadata_request(self, states: list[tuple[str, int, PartitionState]],
                                 topic: TopicMetadata | None = None) -> RequestBuilder:
        by_topic: dict[str, list[um.UpdateMetadataPartitionState]] = {}
        for t, p, s in states:
            by_topic.setdefault(t, []).append(um.UpdateMetadataPartitionState(
                topic_name=t, partition_index=p, controller_epoch=s.controller_epoch,
                leader=s.leader, leader_epoch=s.leader_epoch, isr=list(s.isr),
                zk_version=s.partition_epoch, replicas=list(s.replicas),
                offline_replicas=[r for r in s.replicas if r not in self.live
                                  or (t, p) in self.offline_replicas.get(r, ())]))
        topic_ids = {t: (topic.topic_id if topic is not None and topic.name == t
                         else self.topics[t].topic_id) for t in by_topic}
        return _grouped_from(ApiKey.UPDATE_METADATA, 5, um.UpdateMetadataRequest(
            controller_id=self.node_id, controller_epoch=self._epoch(),
            topic_states=[um.UpdateMetadataTopicState(
                topic_name=t, topic_id=topic_ids[t], partition_states=ss)
                for t, ss in by_topic.items()],
            live_brokers=[um.UpdateMetadataBroker(
                id=broker_id, rack=registration.rack, endpoints=[um.UpdateMetadataEndpoint(
                    port=e.port, host=e.host, listener=e.name,
                    security_protocol=SECURITY_PROTOCOL_IDS.get(e.security_protocol, 0))
                    for e in registration.endpoints])
                for broker_id, registration in sorted(self.live.items())]))


def _grouped_from(api_key: int, version: int, request: Any) -> RequestBuilder:
    """LeaderAndIsr (v2+) and UpdateMetadata (v5+) group partition states by topic; older
    versions carry them in one ungrouped list. The version chosen decides which."""

    def build(chosen: int) -> Message:
        if chosen >= version:
            return request
        return replace(request, topic_states=[], ungrouped_partition_states=[
            s for t in request.topic_states for s in t.partition_states])

    return RequestBuilder(api_key, build)
