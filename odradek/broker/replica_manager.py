"""ReplicaManager: the partitions this broker holds, and the produce and fetch paths.

Appends go to each partition's leader log and wake the fetches waiting on it. A fetch
that finds fewer than min_bytes waits (Kafka's DelayedFetch) until appends bring enough
or max_wait_ms passes. Reads return file slices that the connection sends from the files.

With replication, the controller's LeaderAndIsr makes each partition a leader or a
follower; followers are handed to the ReplicaFetcherManager. An acks=all produce waits
(Kafka's DelayedProduce) until the high watermark passes its records, which happens as
followers fetch them. Followers' fetches tell the leader's Partition how far they are.
The high watermarks are checkpointed (replication-offset-checkpoint in each log dir), so
that a restarted broker shows consumers nothing that was not committed.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from uuid import UUID, uuid4

from odradek.broker.partition import LogReadResult, Partition
from odradek.broker.replica_fetcher import InitialFetchState, ReplicaFetcherManager
from odradek.cluster.metadata import PartitionState, TopicMetadata
from odradek.cluster.slices import Slices
from odradek.metrics.stats import (
    BYTES_IN,
    FAILED_PRODUCE,
    MESSAGES_IN,
    PRODUCE_REQUESTS,
    BrokerTopicStats,
)
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError
from odradek.storage.checkpoints import OffsetCheckpointFile
from odradek.storage.config import LogConfig
from odradek.storage.errors import InvalidConfigError, OffsetOutOfRangeError, StorageError
from odradek.storage.log import system_clock
from odradek.storage.log_manager import LogManager
from odradek.storage.log_validator import AppendOrigin
from odradek.storage.segment import FileSlice

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# Told of leadership changes (Kafka's onLeadershipChange): the topic, its partition count,
# the partitions this broker now leads, and those it no longer leads. The coordinators
# load and unload their internal topics' partitions on it.
LeadershipListener = Callable[[str, int, list[int], list[int]], None]
CONSUMER_REPLICA_ID = -1  # Fetch's replica id for consumers; followers send their node id
DEBUGGING_REPLICA_ID = -2  # tools that read any replica up to its log end
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
# New replicas' logs created, or deleted logs removed, per worker-thread call: a shutdown
# waits for one batch at most, and a thread hand-off per batch costs next to nothing.
IO_BATCH = 100
IO_THREADS = 4
# Replicas made after which their objects are taken out of the garbage collector's view
# (gc.freeze): a full collection walks every tracked object, about 35 per partition, and
# took 50-100 ms of the event loop with 5,000 partitions. Partitions live long and are
# freed by reference counting when deleted (they hold no cycles), so none leaks.
FREEZE_AFTER = 1000


def error_of(e: BaseException) -> int:
    if isinstance(e, KafkaError):
        return int(e.error_code)
    if isinstance(e, OSError):
        return ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.UNKNOWN_SERVER_ERROR


@dataclass(slots=True)
class ProducePartitionResult:
    error_code: int = ErrorCode.NONE
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    last_offset: int = -1  # the last offset appended: acks=all waits for the HW past it
    # INVALID_RECORD / INVALID_TIMESTAMP: the records at fault, (index in the batch, message)
    record_errors: list[tuple[int, str | None]] = field(default_factory=list)


@dataclass(slots=True)
class _NewReplica:
    """A replica this broker does not hold yet: made in a worker thread, then published."""

    topic: str
    index: int
    topic_id: UUID
    state: PartitionState
    config: LogConfig | None = None  # the log's, when not found by the topic's name
    partition: Partition | None = None
    error: Exception | None = None


@dataclass(slots=True)
class FetchPartitionRequest:
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1  # a follower's


@dataclass(slots=True)
class FetchPartitionResult:
    error_code: int = ErrorCode.NONE
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    slices: list[FileSlice] = field(default_factory=list)  # the records, in the files
    size: int = 0
    # read_committed consumers: (producer id, first offset) of each aborted transaction
    # overlapping the records read (Fetch v4+'s aborted_transactions); None otherwise.
    aborted_transactions: list[tuple[int, int]] | None = None


class Purgatory:
    """Requests waiting on partitions (fetches for data, produces for the high watermark),
    keyed by partition; a change to the partition wakes them to look again."""

    def __init__(self) -> None:
        self._waiters: dict[TopicPartition, set[asyncio.Future[None]]] = {}

    async def wait(self, partitions: Iterable[TopicPartition], timeout: float) -> None:
        future = asyncio.get_running_loop().create_future()
        keys = list(partitions)
        for tp in keys:
            self._waiters.setdefault(tp, set()).add(future)
        try:
            async with asyncio.timeout(timeout):
                await future
        except TimeoutError:
            pass
        finally:
            for tp in keys:
                waiting = self._waiters.get(tp)
                if waiting is not None:
                    waiting.discard(future)
                    if not waiting:
                        del self._waiters[tp]

    def notify(self, tp: TopicPartition) -> None:
        for future in self._waiters.pop(tp, ()):
            if not future.done():
                future.set_result(None)

    def wake_all(self) -> None:
        for tp in list(self._waiters):
            self.notify(tp)

    def watchers(self) -> list[set[asyncio.Future[None]]]:
        """The waiting requests of each partition waited on (the metrics: Kafka's
        PurgatorySize counts a request once per partition it waits on)."""
        return [set(waiting) for waiting in list(self._waiters.values())]


class ReplicaManager:
    def __init__(self, node_id: int, log_manager: LogManager, *,
                 clock: Callable[[], int] = system_clock,
                 replica_lag_time_max_ms: int = 30_000,
                 fetcher_manager: ReplicaFetcherManager | None = None,
                 topic_stats: BrokerTopicStats | None = None) -> None:
        self.node_id = node_id
        # Kafka's BrokerTopicStats: appends counted here, fetches by KafkaApis (metrics).
        self.topic_stats = topic_stats if topic_stats is not None else BrokerTopicStats()
        self.isr_shrinks = 0  # ISR changes of partitions led here, confirmed (metrics)
        self.isr_expands = 0
        self.log_manager = log_manager
        self.clock = clock
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.fetcher_manager = fetcher_manager
        # Sends a leader's ISR proposals to the controller (an AlterPartitionManager's
        # submit); without one (a single node) the ISR never changes.
        self.alter_partition: Callable[[Partition, list[int]], None] | None = None
        self.partitions: dict[TopicPartition, Partition] = {}
        self._hw_checkpoint_lock = threading.Lock()
        self._made_since_freeze = 0
        self.purgatory = Purgatory()  # fetches
        self.produce_purgatory = Purgatory()  # acks=all produces
        self.shutting_down = False
        self.leadership_listeners: list[LeadershipListener] = []
        # Partitions in a failed log dir (KIP-112, Kafka's HostedPartition.Offline): they
        # answer KAFKA_STORAGE_ERROR until the broker restarts.
        self.offline_partitions: set[TopicPartition] = set()
        # The checkpointed HWs of partitions not created yet (no LeaderAndIsr so far), by
        # log dir: written back with every checkpoint until their partitions take them.
        self._checkpointed_high_watermarks: dict[TopicPartition, tuple[Path, int]] = {}
        for log_dir in log_manager.config.log_dirs:
            try:
                entries = OffsetCheckpointFile(log_dir / HIGH_WATERMARK_CHECKPOINT).read()
            except StorageError as e:  # the logs are still there: start from their starts
                log.warning("ignoring the high watermark checkpoint: %s", e)
                continue
            self._checkpointed_high_watermarks.update(
                (tp, (log_dir, hw)) for tp, hw in entries.items())

    def add_leadership_listener(self, listener: LeadershipListener) -> None:
        self.leadership_listeners.append(listener)

    # ---- partition lifecycle ----------------------------------------------------------

    def get_or_create_partition(self, topic: str, index: int, topic_id: UUID) -> Partition:
        partition = self.partitions.get((topic, index))
        if partition is None:
            partition = self._new_partition(topic, index, topic_id)
            self._publish(partition)
        return partition

    def _alter_partition(self, partition: Partition, isr: list[int]) -> None:
        if self.alter_partition is not None:
            self.alter_partition(partition, isr)
        else:
            partition.alter_partition_completed(partition.leader_epoch,
                                                partition.partition_epoch,
                                                ErrorCode.NOT_CONTROLLER, None)

    def make_leader(self, topic: str, index: int, topic_id: UUID,
                    state: PartitionState) -> Partition:
        partition = self.get_or_create_partition(topic, index, topic_id)
        partition.make_leader(state)
        self._partition_changed(partition.tp)
        return partition

    # The embedded controller's instructions (cluster.controller.PartitionListener).

    async def become_leader(self, topic: TopicMetadata, partitions: list[int]) -> None:
        """Leads the partitions (one node: every replica is this broker). The logs of new
        replicas are created off the loop; raises the first partition's failure after
        doing the others."""
        new: list[_NewReplica] = []
        slices = Slices()
        # The controller shows a new topic once it is led, so its configs cannot be found
        # by name yet: its logs get them from here.
        config = (self.log_manager.default_log_config.with_overrides(topic.configs)
                  if topic.configs else None)
        for index in partitions:
            partition = self.partitions.get((topic.name, index))
            if partition is None:
                new.append(_NewReplica(topic.name, index, topic.topic_id,
                                       topic.partitions[index], config))
            else:
                partition.make_leader(topic.partitions[index])
                self._partition_changed(partition.tp)
                await slices.pause()
        errors: dict[TopicPartition, BaseException] = {}
        async for replica in self._open_new_replicas(new):
            if replica.error is not None:
                errors[(replica.topic, replica.index)] = replica.error
            elif replica.partition is not None and not self._publish(replica.partition):
                existing = self.partitions[(replica.topic, replica.index)]
                existing.make_leader(replica.state)
        self._tell_listeners(topic.name, len(topic.partitions),
                             [p for p in partitions if (topic.name, p) not in errors], [])
        if errors:
            (tp, first), *_ = errors.items()
            log.error("cannot lead %d partitions of %s, %s-%d first: %s", len(errors),
                      topic.name, tp[0], tp[1], first)
            raise first

    async def remove_partitions(self, topic: TopicMetadata) -> None:
        """The topic was deleted: its partitions go at once, their logs off the loop."""
        self._tell_listeners(topic.name, len(topic.partitions), [], sorted(topic.partitions))
        errors = await self._delete_partitions([(topic.name, p) for p in sorted(topic.partitions)])
        if errors:
            raise next(iter(errors.values()))

    def _tell_listeners(self, topic: str, partition_count: int, led: list[int],
                        resigned: list[int]) -> None:
        if led or resigned:
            for listener in self.leadership_listeners:
                listener(topic, partition_count, led, resigned)

    # ---- partitions made and removed off the event loop --------------------------------
    # A new replica's log is created (directories, segment and index files, the leader
    # epoch checkpoint with its fsync) in a worker thread, IO_BATCH at a time, and only
    # then published in self.partitions on the loop: until then nothing else can see the
    # Partition, so nothing races with the thread. Deleted partitions leave
    # self.partitions on the loop first; their logs are closed and removed in a thread.

    async def _open_new_replicas(self, replicas: list[_NewReplica]
                                 ) -> AsyncIterator[_NewReplica]:
        """Creates the replicas' Partitions (their state applied) in worker threads and
        yields each, to be published on the loop. Stops early when the broker shuts down:
        the next start makes the rest."""
        for start in range(0, len(replicas), IO_BATCH):
            if self.shutting_down:
                log.info("shutting down: %d new replicas not created", len(replicas) - start)
                return
            batch = replicas[start:start + IO_BATCH]
            # A few threads at once: their fsyncs (the leader epoch checkpoints) overlap,
            # as the file system commits them together.
            await asyncio.gather(*(asyncio.to_thread(self._open_replicas, batch[i::IO_THREADS])
                                   for i in range(min(IO_THREADS, len(batch)))))
            self._made_since_freeze += len(batch)
            if self._made_since_freeze >= FREEZE_AFTER:
                self._made_since_freeze = 0
                gc.freeze()
            for replica in batch:
                yield replica

    def _open_replicas(self, replicas: list[_NewReplica]) -> None:
        """In a worker thread: the log (opened or created) and first state of each."""
        for replica in replicas:
            try:
                partition = self._new_partition(replica.topic, replica.index, replica.topic_id,
                                                replica.config)
                if replica.state.leader == self.node_id:
                    partition.make_leader(replica.state)
                else:
                    partition.make_follower(replica.state)
            except Exception as e:  # this replica's failure, not the others'
                replica.error = e
            else:
                replica.partition = partition

    def _new_partition(self, topic: str, index: int, topic_id: UUID,
                       config: LogConfig | None = None) -> Partition:
        """A Partition over the (new or loaded) log, not published yet: callable from a
        worker thread (the log manager has its lock; the checkpointed HWs are only read)."""
        partition_log = self.log_manager.get_or_create_log(topic, index, config)
        checkpointed = self._checkpointed_high_watermarks.get((topic, index))
        return Partition(
            topic, index, topic_id, partition_log, node_id=self.node_id,
            high_watermark=(partition_log.log_start_offset if checkpointed is None
                            else checkpointed[1]),
            clock=self.clock, replica_lag_time_max_ms=self.replica_lag_time_max_ms,
            alter_partition=self._alter_partition)

    def _publish(self, partition: Partition) -> bool:
        """Makes a new Partition visible; False (and nothing done) if one exists already."""
        tp = partition.tp
        if tp in self.partitions:
            return False
        self.partitions[tp] = partition
        self._checkpointed_high_watermarks.pop(tp, None)  # the partition's own HW from now
        self._partition_changed(tp)
        return True

    async def _delete_partitions(self, tps: list[TopicPartition]
                                 ) -> dict[TopicPartition, BaseException]:
        """Forgets the partitions now (requests waiting on them wake up), then deletes
        their logs in worker threads; the failures, by partition."""
        slices = Slices()
        for tp in tps:
            self.partitions.pop(tp, None)
            self._partition_changed(tp)
            await slices.pause()
        errors: dict[TopicPartition, BaseException] = {}
        for start in range(0, len(tps), IO_BATCH):
            errors.update(await asyncio.to_thread(self._delete_logs, tps[start:start + IO_BATCH]))
        return errors

    def _delete_logs(self, tps: list[TopicPartition]) -> dict[TopicPartition, BaseException]:
        """In a worker thread: each log closed and its directory removed."""
        errors: dict[TopicPartition, BaseException] = {}
        for tp in tps:
            try:
                self.log_manager.delete_log(*tp)
            except Exception as e:
                log.exception("deleting %s-%d failed", *tp)
                errors[tp] = e
        return errors

    # The ZooKeeper controller's instructions (LeaderAndIsr, StopReplica).

    async def become_leader_or_follower(
        self, states: list[tuple[str, UUID | None, int, PartitionState]],
        partition_counts: dict[str, int],
    ) -> dict[TopicPartition, int]:
        """LeaderAndIsr: leads or follows each partition as told; per partition the error
        (Kafka's becomeLeaderOrFollower). A state older than the partition's is refused.
        New replicas are created off the loop; the others change on it, in slices."""
        errors: dict[TopicPartition, int] = {}
        led: dict[str, list[int]] = {}
        resigned: dict[str, list[int]] = {}
        to_follow: dict[TopicPartition, InitialFetchState] = {}
        not_fetching: list[TopicPartition] = []

        def done(partition: Partition, state: PartitionState, was_leader: bool,
                 changed: bool) -> None:
            tp = partition.tp
            if state.leader == self.node_id:
                not_fetching.append(tp)
                # As Kafka's makeLeaders: the listeners (the coordinators, which load the
                # partition's state and restart its pending work) hear of a new leadership,
                # not of the same one again (an ISR change, a LeaderAndIsr resent).
                if changed:
                    led.setdefault(tp[0], []).append(tp[1])
            else:
                if was_leader:
                    resigned.setdefault(tp[0], []).append(tp[1])
                if state.leader < 0:
                    not_fetching.append(tp)
                elif changed or (self.fetcher_manager is not None
                                 and self.fetcher_manager.leader_of(tp) is None):
                    to_follow[tp] = InitialFetchState(state.leader, state.leader_epoch,
                                                      partition)
            self._partition_changed(tp)

        new: list[_NewReplica] = []
        existing: list[tuple[Partition, UUID | None, PartitionState]] = []
        for topic, topic_id, index, state in states:
            tp = (topic, index)
            if self.node_id not in state.replicas:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if self._in_offline_dir(tp):
                # The controller takes this as "replica offline" and leads elsewhere.
                errors[tp] = ErrorCode.KAFKA_STORAGE_ERROR
                if self._mark_offline(tp):
                    resigned.setdefault(topic, []).append(index)
                not_fetching.append(tp)
                continue
            current = self.partitions.get(tp)
            if current is None:
                new.append(_NewReplica(topic, index, topic_id or uuid4(), state))
            else:
                existing.append((current, topic_id, state))
        async for replica in self._open_new_replicas(new):
            tp = (replica.topic, replica.index)
            if replica.error is not None:
                log.error("LeaderAndIsr for %s-%d failed", *tp, exc_info=replica.error)
                errors[tp] = error_of(replica.error)
            elif replica.partition is not None:
                if self._publish(replica.partition):
                    done(replica.partition, replica.state, False, True)
                else:  # made meanwhile: changed as the others are
                    existing.append((self.partitions[tp], replica.topic_id, replica.state))
        slices = Slices()
        for current, topic_id, state in existing:
            tp = current.tp
            await slices.pause()
            if tp in self.offline_partitions:  # its dir failed meanwhile
                errors[tp] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            if topic_id is not None and current.topic_id != topic_id:
                errors[tp] = ErrorCode.INCONSISTENT_TOPIC_ID
                continue
            if state.leader_epoch < current.leader_epoch:
                errors[tp] = ErrorCode.STALE_CONTROLLER_EPOCH
                continue
            if (state.leader_epoch == current.leader_epoch
                    and state.leader == current.leader_id
                    and state.partition_epoch < current.partition_epoch):
                continue  # an AlterPartition answer already brought a newer ISR
            try:
                was_leader = current.is_leader
                changed = (current.make_leader(state) if state.leader == self.node_id
                           else current.make_follower(state))
            except Exception as e:  # this partition's answer, not the request's
                log.exception("LeaderAndIsr for %s-%d failed", *tp)
                errors[tp] = error_of(e)
                continue
            done(current, state, was_leader, changed)
        if self.fetcher_manager is not None:
            self.fetcher_manager.remove_partitions(not_fetching)
            self.fetcher_manager.add_partitions(to_follow)  # moves those whose leader moved
        for topic in led.keys() | resigned.keys():
            self._tell_listeners(topic, partition_counts.get(topic, 0), led.get(topic, []),
                                 resigned.get(topic, []))
        return errors

    def handle_log_dir_failure(self, log_dir: Path) -> None:
        """A log dir went offline (Kafka's handleLogDirFailure): its partitions stop leading
        and fetching at once; producers and followers are answered KAFKA_STORAGE_ERROR
        until the controller, told through ZooKeeper, has moved their leadership."""
        failed = [tp for tp, p in self.partitions.items() if p.log.directory.parent == log_dir]
        if self.fetcher_manager is not None:
            self.fetcher_manager.remove_partitions(failed)
        resigned: dict[str, list[int]] = {}
        for tp in failed:
            if self._mark_offline(tp):
                resigned.setdefault(tp[0], []).append(tp[1])
        for topic, indexes in resigned.items():
            self._tell_listeners(topic, 0, [], indexes)
        log.warning("log dir %s failed: %d partitions offline here, %d of them led here",
                    log_dir, len(failed), sum(len(v) for v in resigned.values()))

    def _in_offline_dir(self, tp: TopicPartition) -> bool:
        """Whether the partition's log is in a failed dir, or failed on its own."""
        if tp in self.offline_partitions:
            return True
        log_dir = self.log_manager.log_dir_of(*tp)
        partition_log = self.log_manager.get_log(*tp)
        return (log_dir is not None and log_dir.offline) or (
            partition_log is not None and partition_log.offline_reason is not None)

    def _mark_offline(self, tp: TopicPartition) -> bool:
        """Takes a partition offline here; True if it was leading until now."""
        self.offline_partitions.add(tp)
        partition = self.partitions.get(tp)
        if partition is None:
            return False
        was_leader = partition.is_leader
        partition.make_offline()
        self._partition_changed(tp)  # waiting acks=all produces end: NOT_LEADER_OR_FOLLOWER
        return was_leader

    async def stop_replicas(self, stops: list[tuple[TopicPartition, bool]]
                            ) -> dict[TopicPartition, int]:
        """StopReplica: stops fetching the partitions and, when told, deletes them (their
        logs off the loop)."""
        if self.fetcher_manager is not None:
            self.fetcher_manager.remove_partitions(tp for tp, _ in stops)
        slices = Slices()
        for tp, _ in stops:
            partition = self.partitions.get(tp)
            if partition is not None and partition.is_leader:
                self._tell_listeners(tp[0], 0, [], [tp[1]])
            await slices.pause()
        failed = await self._delete_partitions([tp for tp, delete in stops if delete])
        return {tp: error_of(e) for tp, e in failed.items()}

    def _partition_changed(self, tp: TopicPartition) -> None:
        """Waiting requests look again: the HW, the ISR or the leadership changed."""
        self.purgatory.notify(tp)
        self.produce_purgatory.notify(tp)

    # ---- the leaders' periodic work ---------------------------------------------------

    def maybe_shrink_isrs(self) -> None:
        """Drops lagging followers from the ISRs this broker leads (Kafka runs it every
        replica.lag.time.max.ms / 2)."""
        for partition in list(self.partitions.values()):
            partition.maybe_shrink_isr()

    def alter_partition_completed(self, partition: Partition, leader_epoch: int,
                                  partition_epoch: int, error: int,
                                  state: PartitionState | None) -> None:
        if self.partitions.get(partition.tp) is not partition:
            return
        before = len(partition.isr)
        if partition.alter_partition_completed(leader_epoch, partition_epoch, error, state):
            self._partition_changed(partition.tp)
        after = len(partition.isr)
        if after < before:
            self.isr_shrinks += 1
        elif after > before:
            self.isr_expands += 1

    def checkpoint_high_watermarks(self) -> None:
        """Writes the HW checkpoints. The periodic one runs in a worker thread (thousands
        of partitions and an fsync per dir): the loop's dicts are copied in one step each
        (atomic under the GIL), and one writer at a time."""
        with self._hw_checkpoint_lock:
            self._checkpoint_high_watermarks()

    def _checkpoint_high_watermarks(self) -> None:
        by_dir: dict[Path, dict[TopicPartition, int]] = {
            d: {} for d in self.log_manager.config.log_dirs}
        for tp, (log_dir, hw) in dict(self._checkpointed_high_watermarks).items():
            by_dir.setdefault(log_dir, {})[tp] = hw
        for tp, partition in list(self.partitions.items()):
            by_dir.setdefault(partition.log.directory.parent, {})[tp] = partition.high_watermark
        online = set(self.log_manager.online_dirs())
        for log_dir, entries in by_dir.items():
            if log_dir not in online:
                continue  # offline: nothing more is written there
            try:
                OffsetCheckpointFile(log_dir / HIGH_WATERMARK_CHECKPOINT).write(entries)
            except StorageError as e:
                # The last checkpoint stays: a restart then starts from older high
                # watermarks, which the ISR soon moves on again.
                log.warning("cannot checkpoint the high watermarks: %s", e)

    async def run_periodic_tasks(self, checkpoint_interval_ms: int = 5000) -> None:
        """The ISR expiration and high watermark checkpoint schedules, until cancelled."""
        loop = asyncio.get_running_loop()
        isr_interval = self.replica_lag_time_max_ms / 2000
        next_isr = next_checkpoint = loop.time()
        while True:
            now = loop.time()
            if now >= next_isr:
                self.maybe_shrink_isrs()
                next_isr = now + isr_interval
            if now >= next_checkpoint:
                await asyncio.to_thread(self.checkpoint_high_watermarks)
                next_checkpoint = now + checkpoint_interval_ms / 1000
            await asyncio.sleep(max(0.0, min(next_isr, next_checkpoint) - loop.time()))

    def topic_config_changed(self, topic: TopicMetadata) -> None:
        config = self.log_manager.log_config(topic.name)
        for index in topic.partitions:
            partition = self.partitions.get((topic.name, index))
            if partition is not None:
                partition.log.config = config

    def default_log_config_changed(self, default: LogConfig) -> None:
        """The broker's topic defaults changed (a dynamic broker config): every log takes
        them, under its topic's overrides."""
        self.log_manager.default_log_config = default
        for partition_log in self.log_manager.logs():
            try:
                partition_log.config = self.log_manager.log_config(partition_log.topic)
            except InvalidConfigError as e:  # e.g. its overrides clash with the new default
                log.warning("%s keeps its log config: %s", partition_log.name, e)

    def delete_partition(self, topic: str, index: int) -> None:
        self.partitions.pop((topic, index), None)
        self.log_manager.delete_log(topic, index)
        self._partition_changed((topic, index))

    def get_partition(self, tp: TopicPartition) -> Partition | None:
        return self.partitions.get(tp)

    def shutdown(self) -> None:
        self.shutting_down = True
        self.purgatory.wake_all()
        self.produce_purgatory.wake_all()
        self.checkpoint_high_watermarks()

    # ---- produce ----------------------------------------------------------------------

    async def produce(self, required_acks: int, timeout_ms: int,
                      entries: dict[TopicPartition, bytearray | memoryview | None]
                      ) -> dict[TopicPartition, ProducePartitionResult]:
        """Appends to the leaders' logs; with acks=all, waits up to `timeout_ms` until the
        high watermark passes the records (Kafka's DelayedProduce): REQUEST_TIMED_OUT if
        it does not, NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below
        min.insync.replicas meanwhile."""
        results = self.append_records(required_acks, entries)
        if required_acks != -1:
            return results
        waiting = {tp: (r.last_offset + 1, self.partitions[tp].leader_epoch)
                   for tp, r in results.items() if r.error_code == ErrorCode.NONE}
        for tp, error in (await self.wait_for_isr(waiting, timeout_ms)).items():
            if error:
                results[tp] = ProducePartitionResult(
                    error, error_message=f"the records were appended, but not by every "
                    f"in-sync replica: {ErrorCode(error).name}")
        return results

    async def wait_for_isr(self, waiting: dict[TopicPartition, tuple[int, int]],
                           timeout_ms: int) -> dict[TopicPartition, int]:
        """Waits until the high watermark reaches each partition's (required offset,
        leader epoch of the append), at most `timeout_ms`; per partition NONE or the
        error (Kafka's DelayedProduce): REQUEST_TIMED_OUT, NOT_LEADER_OR_FOLLOWER (the
        leadership moved), NOT_ENOUGH_REPLICAS_AFTER_APPEND."""
        errors: dict[TopicPartition, int] = {}
        waiting = dict(waiting)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while waiting:
            for tp, (required_offset, leader_epoch) in list(waiting.items()):
                partition = self.partitions.get(tp)
                done, error = ((True, ErrorCode.NOT_LEADER_OR_FOLLOWER) if partition is None
                               else partition.check_enough_replicas_reach_offset(
                                   required_offset, leader_epoch))
                if done:
                    del waiting[tp]
                    errors[tp] = error
            remaining = deadline - loop.time()
            if waiting and (remaining <= 0 or self.shutting_down):
                errors.update(dict.fromkeys(waiting, ErrorCode.REQUEST_TIMED_OUT))
                break
            if waiting:
                await self.produce_purgatory.wait(waiting, remaining)
        return errors

    def append_records(self, required_acks: int,
                       entries: dict[TopicPartition, bytearray | memoryview | bytes | None],
                       *, origin: AppendOrigin = AppendOrigin.CLIENT,
                       ) -> dict[TopicPartition, ProducePartitionResult]:
        """Appends to the leaders' logs without waiting for the ISR. `origin` COORDINATOR
        is the broker's coordinators (they alone may write transaction markers)."""
        results: dict[TopicPartition, ProducePartitionResult] = {}
        stats = self.topic_stats
        counted = stats.topics
        for tp, records in entries.items():
            partition = self.partitions.get(tp)
            if partition is None:
                results[tp] = ProducePartitionResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            counts = counted.get(tp[0])
            if counts is None:
                counts = stats.counters(tp[0])
            counts[PRODUCE_REQUESTS] += 1
            if tp in self.offline_partitions:
                counts[FAILED_PRODUCE] += 1
                results[tp] = ProducePartitionResult(
                    ErrorCode.KAFKA_STORAGE_ERROR,
                    error_message=f"{tp[0]}-{tp[1]} is in an offline log dir on broker "
                    f"{self.node_id}")
                continue
            if records is None or len(records) == 0:
                counts[FAILED_PRODUCE] += 1
                results[tp] = ProducePartitionResult(
                    ErrorCode.CORRUPT_MESSAGE, error_message="the request carries no records")
                continue
            try:
                info = partition.append_records_to_leader(records, required_acks,
                                                          origin=origin)
            except Exception as e:  # every failure is this partition's answer, not the request's
                counts[FAILED_PRODUCE] += 1
                results[tp] = self._append_failure(partition, e)
                continue
            if info.valid_bytes:  # not a duplicate: written
                counts[MESSAGES_IN] += info.last_offset - info.first_offset + 1
                counts[BYTES_IN] += info.valid_bytes
            results[tp] = ProducePartitionResult(
                ErrorCode.NONE, info.first_offset, info.log_append_time, info.log_start_offset,
                last_offset=info.last_offset)
            self._partition_changed(tp)
        return results

    def _append_failure(self, partition: Partition, e: Exception) -> ProducePartitionResult:
        code = error_of(e)
        if type(e) is StorageError or isinstance(e, OSError):
            log.error("append to %s-%d failed: %s", partition.topic, partition.index, e)
        elif code == ErrorCode.UNKNOWN_SERVER_ERROR:
            log.exception("append to %s-%d failed", partition.topic, partition.index)
        return ProducePartitionResult(code, log_start_offset=partition.log.log_start_offset,
                                      error_message=str(e) or None,
                                      record_errors=getattr(e, "record_errors", []))

    # ---- records deletion -------------------------------------------------------------

    def delete_records(self, offsets: dict[TopicPartition, int]
                       ) -> dict[TopicPartition, tuple[int, int, str | None]]:
        """DeleteRecords: per partition (error code, low watermark or -1, error message)."""
        results: dict[TopicPartition, tuple[int, int, str | None]] = {}
        for tp, offset in offsets.items():
            partition = self.partitions.get(tp)
            if partition is None:
                results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, None)
                continue
            try:
                low_watermark = partition.delete_records_on_leader(offset)
            except Exception as e:  # every failure is this partition's answer
                if error_of(e) == ErrorCode.UNKNOWN_SERVER_ERROR:
                    log.exception("deleting records of %s-%d failed", tp[0], tp[1])
                results[tp] = (error_of(e), -1, str(e) or None)
                continue
            results[tp] = (ErrorCode.NONE, low_watermark, None)
        return results

    # ---- fetch ------------------------------------------------------------------------

    async def fetch_messages(
        self, *, replica_id: int, max_wait_ms: int, min_bytes: int, max_bytes: int,
        isolation_level: int, requests: list[tuple[TopicPartition, FetchPartitionRequest]],
    ) -> list[FetchPartitionResult]:
        """Reads every requested partition; when they hold fewer than min_bytes, waits for
        appends up to max_wait_ms and reads again."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_ms / 1000
        while True:
            results = self.read_from_local_logs(replica_id, max_bytes, requests,
                                                isolation_level)
            size = sum(r.size for r in results)
            remaining = deadline - loop.time()
            if (size >= min_bytes or remaining <= 0 or self.shutting_down
                    or any(r.error_code for r in results) or not requests):
                return results
            await self.purgatory.wait((tp for tp, _ in requests), remaining)

    def read_from_local_logs(
        self, replica_id: int, max_bytes: int,
        requests: list[tuple[TopicPartition, FetchPartitionRequest]],
        isolation_level: int = READ_UNCOMMITTED,
    ) -> list[FetchPartitionResult]:
        """Reads each partition: followers up to the log end, consumers up to the high
        watermark, read_committed consumers up to the last stable offset (with the
        aborted transactions of what they read)."""
        # KIP-74: the response limit is soft for the first batch of the first partition
        # with data, so a consumer always progresses; after it, limits are hard.
        remaining = max_bytes
        min_one_message = True
        results = []
        for tp, request in requests:
            result = self._read_partition(tp, request, replica_id, remaining, min_one_message,
                                          isolation_level == READ_COMMITTED)
            if result.size:
                remaining = max(0, remaining - result.size)
                min_one_message = False
            results.append(result)
        return results

    def _read_partition(self, tp: TopicPartition, request: FetchPartitionRequest,
                        replica_id: int, limit: int, min_one_message: bool,
                        read_committed: bool = False) -> FetchPartitionResult:
        partition = self.partitions.get(tp)
        if partition is None:
            return FetchPartitionResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if tp in self.offline_partitions:
            return FetchPartitionResult(ErrorCode.KAFKA_STORAGE_ERROR)
        error = partition.check_leader_epoch(request.current_leader_epoch)
        if error:
            return FetchPartitionResult(error)
        if not partition.is_leader and replica_id != DEBUGGING_REPLICA_ID:
            return FetchPartitionResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        try:
            read: LogReadResult = partition.read(
                request.fetch_offset, min(request.max_bytes, limit),
                up_to_committed=replica_id == CONSUMER_REPLICA_ID,
                min_one_message=min_one_message,
                read_committed=read_committed,
            )
        except OffsetOutOfRangeError:
            plog = partition.log
            return FetchPartitionResult(ErrorCode.OFFSET_OUT_OF_RANGE, partition.high_watermark,
                                        partition.last_stable_offset, plog.log_start_offset)
        except Exception as e:
            log.error("fetch from %s-%d failed: %s", tp[0], tp[1], e)
            return FetchPartitionResult(error_of(e), partition.high_watermark)
        if replica_id >= 0 and partition.update_follower_fetch_state(
                replica_id, request.fetch_offset, request.log_start_offset,
                read.log_end_offset):
            self._partition_changed(tp)
        aborted = (None if read.aborted_transactions is None else
                   [(t.producer_id, t.first_offset) for t in read.aborted_transactions])
        return FetchPartitionResult(
            ErrorCode.NONE, partition.high_watermark, partition.last_stable_offset,
            read.log_start_offset, read.info.slices, read.info.size,
            aborted_transactions=aborted,
        )
