"""GroupMetadataManager: groups and committed offsets, cached in memory and kept in
__consumer_offsets (Kafka's GroupMetadataManager).

- Writes: a group's metadata after each rebalance (and when it becomes empty) and each
  offset commit are appended to the group's partition of __consumer_offsets with
  acks=-1 through the ReplicaManager, in Kafka's record format (offsets_topic.py); the
  cache changes, and the client hears back, only once the append succeeded.
- Loading: when this broker becomes leader of a __consumer_offsets partition (at start-up,
  or when the topic is created), the partition is read from its log start to its high
  watermark, offsets.load.buffer.size bytes per step, each step a timer task so the
  event loop serves requests in between; meanwhile the partition's groups answer
  COORDINATOR_LOAD_IN_PROGRESS. The last record of each key wins; a tombstone removes.
- Expiry: every offsets.retention.check.interval.ms, offsets past offsets.retention.minutes
  (group.remove_expired_offsets has the rules) are removed with tombstones; an empty group
  left without offsets becomes Dead and its metadata gets a tombstone too.
- Transactional offsets (TxnOffsetCommit, KIP-98): written as a transactional batch of
  the producer (its id and epoch, origin COORDINATOR), so the partition's producer state
  and last stable offset see the transaction; kept pending in the group until the
  COMMIT or ABORT marker reaches the partition (handle_txn_completion). Loading replays
  them the same way: a producer's offsets become committed at its COMMIT marker, go at
  its ABORT marker, and stay pending when the log ends inside the transaction.

Appends are synchronous here: the ReplicaManager answers acks=-1 once the batch is in the
leader's log, which on one node is the whole ISR. With replication (issue 7) the append
waits for the ISR and these methods take callbacks, as Kafka's do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from odradek.broker.replica_manager import ReplicaManager
from odradek.cluster.topics import GROUP_METADATA_TOPIC
from odradek.coordinator.group.group_metadata import (
    GroupMetadata,
    GroupState,
    MemberMetadata,
    OffsetAndMetadata,
    TopicPartition,
)
from odradek.coordinator.group.offsets_topic import (
    OtherKey,
    group_metadata_key,
    group_metadata_value,
    offset_commit_key,
    offset_commit_value,
    partition_for,
    read_group_metadata_value,
    read_key,
    read_offset_commit_value,
)
from odradek.coordinator.partition_loader import PartitionLoad, PartitionLoader
from odradek.coordinator.timer import Time, Timer, TimerTask
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import ProtocolError
from odradek.protocol.messages.group_metadata_key import GroupMetadataKey
from odradek.protocol.messages.group_metadata_value import (
    GroupMetadataValue,
)
from odradek.protocol.messages.group_metadata_value import (
    MemberMetadata as MemberMetadataValue,
)
from odradek.protocol.records import (
    ControlRecordType,
    RecordBatchHeader,
    SimpleRecord,
    build_record_batch,
    decode_control_record,
    decode_records,
)
from odradek.server.config import BrokerConfig
from odradek.storage.log_validator import AppendOrigin

log = logging.getLogger(__name__)

INVALID_OFFSET = -1


@dataclass(frozen=True, slots=True)
class OffsetConfig:
    """Kafka's OffsetConfig: the offsets settings, in milliseconds and bytes."""

    max_metadata_size: int = 4096  # offset.metadata.max.bytes
    load_buffer_size: int = 5 * 1024 * 1024  # offsets.load.buffer.size
    offsets_retention_ms: int = 7 * 24 * 60 * 60 * 1000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600_000
    offsets_topic_num_partitions: int = 50
    offsets_topic_segment_bytes: int = 100 * 1024 * 1024
    offsets_topic_replication_factor: int = 3

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> OffsetConfig:
        return cls(
            max_metadata_size=config.get("offset.metadata.max.bytes"),
            load_buffer_size=config.get("offsets.load.buffer.size"),
            offsets_retention_ms=config.get("offsets.retention.minutes") * 60_000,
            offsets_retention_check_interval_ms=config.get(
                "offsets.retention.check.interval.ms"),
            offsets_topic_num_partitions=config.get("offsets.topic.num.partitions"),
            offsets_topic_segment_bytes=config.get("offsets.topic.segment.bytes"),
            offsets_topic_replication_factor=config.get("offsets.topic.replication.factor"),
        )


@dataclass(frozen=True, slots=True)
class OffsetFetchResult:
    offset: int = INVALID_OFFSET
    leader_epoch: int = -1
    metadata: str = ""
    error: int = ErrorCode.NONE


# Kafka's mapping of a failed append to what the group's client is told.
_STORE_GROUP_ERRORS: dict[int, int] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.UNKNOWN_SERVER_ERROR,
}
_STORE_OFFSETS_ERRORS: dict[int, int] = {
    **_STORE_GROUP_ERRORS,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}


class _PartitionLoad(PartitionLoad):
    """What has been read so far of one __consumer_offsets partition being loaded."""

    def __init__(self, partition: int, on_group_loaded: Callable[[GroupMetadata], None],
                 started_ms: int) -> None:
        super().__init__(partition, started_ms)
        self.on_group_loaded = on_group_loaded
        self.offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        # The base offset of the batch of each committed offset's record.
        self.positions: dict[tuple[str, TopicPartition], int] = {}
        # Open transactions' offsets: producer id -> {(group, partition): (offset, position)}.
        self.pending: dict[int, dict[tuple[str, TopicPartition],
                                     tuple[OffsetAndMetadata, int]]] = {}
        self.groups: dict[str, GroupMetadataValue] = {}
        self.removed_groups: set[str] = set()


class GroupMetadataManager:
    def __init__(self, config: OffsetConfig, replica_manager: ReplicaManager, time: Time,
                 timer: Timer) -> None:
        self.config = config
        self.replica_manager = replica_manager
        self.time = time
        self.timer = timer
        self.groups: dict[str, GroupMetadata] = {}
        # __consumer_offsets partitions this broker leads and has loaded, and those it is
        # loading.
        self.owned_partitions: set[int] = set()
        # Per partition: (the end of the last append, its leader epoch), which commits wait
        # to be replicated up to.
        self.last_appended: dict[int, tuple[int, int]] = {}
        self.loader: PartitionLoader[_PartitionLoad] = PartitionLoader(
            GROUP_METADATA_TOPIC, replica_manager, timer, config.load_buffer_size,
            self._read_batch, self._finish_load)
        self.loading = self.loader.loading
        # Fixed once the topic exists: the coordinator sets it from the topic's metadata.
        self.partition_count = config.offsets_topic_num_partitions
        self._expiry_task: TimerTask | None = None
        self._active = False
        # Producer id -> the groups holding offsets of its open transaction (Kafka's
        # openGroupsForProducer), for the markers' completion.
        self.open_groups_for_producer: dict[int, set[str]] = {}

    # ---- lifecycle --------------------------------------------------------------------

    def startup(self, enable_metadata_expiration: bool = True) -> None:
        self._active = True
        if enable_metadata_expiration:
            self._schedule_expiry()

    def shutdown(self) -> None:
        self._active = False
        if self._expiry_task is not None:
            self._expiry_task.cancel()
            self._expiry_task = None
        self.loader.stop_all()
        self.owned_partitions.clear()
        self.groups.clear()
        self.open_groups_for_producer.clear()

    # ---- where groups live ------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.partition_count)

    def is_partition_owned(self, partition: int) -> bool:
        return partition in self.owned_partitions

    def is_partition_loading(self, partition: int) -> bool:
        return partition in self.loading

    def is_group_local(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.owned_partitions

    def is_group_loading(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.loading

    def is_loading(self) -> bool:
        return bool(self.loading)

    # ---- the cache --------------------------------------------------------------------

    def get_group(self, group_id: str) -> GroupMetadata | None:
        return self.groups.get(group_id)

    def add_group(self, group: GroupMetadata) -> GroupMetadata:
        """Adds the group unless one of that id is cached; returns the cached one."""
        return self.groups.setdefault(group.group_id, group)

    def current_groups(self) -> list[GroupMetadata]:
        return list(self.groups.values())

    # ---- writes -----------------------------------------------------------------------

    def _append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]]) -> int:
        """Appends key/value records to the partition with acks=-1; the error code."""
        return self._append_batch(partition, records)[0]

    def _append_batch(self, partition: int, records: Sequence[tuple[bytes, bytes | None]],
                      producer_id: int = -1, producer_epoch: int = -1
                      ) -> tuple[int, int]:
        """Appends key/value records to the partition with acks=-1, as one batch:
        transactional, of the producer, with a producer id (Kafka writes it with base
        sequence 0; the coordinator's batches skip the sequence checks). The error code
        and the batch's base offset."""
        now = self.time.milliseconds()
        transactional = producer_id >= 0
        batch = build_record_batch(
            [SimpleRecord(k, v, (), now) for k, v in records],
            producer_id=producer_id, producer_epoch=producer_epoch,
            base_sequence=0 if transactional else -1, is_transactional=transactional)
        tp = (GROUP_METADATA_TOPIC, partition)
        result = self.replica_manager.append_records(
            -1, {tp: bytearray(batch)},
            origin=AppendOrigin.COORDINATOR if transactional else AppendOrigin.CLIENT)[tp]
        if result.error_code:
            log.warning("appending %d records to %s-%d failed: %s", len(records),
                        GROUP_METADATA_TOPIC, partition,
                        result.error_message or ErrorCode(result.error_code).name)
        else:
            leader = self.replica_manager.get_partition(tp)
            if leader is not None:
                self.last_appended[partition] = (result.last_offset + 1, leader.leader_epoch)
        return result.error_code, result.base_offset

    async def wait_for_replication(self, group_id: str, timeout_ms: int) -> int:
        """Waits until every in-sync replica of the group's partition has what was
        appended to it so far (acks=all for the coordinator's writes); NONE or the error
        the client is told."""
        partition = self.partition_for(group_id)
        appended = self.last_appended.get(partition)
        if appended is None:
            return ErrorCode.NONE
        tp = (GROUP_METADATA_TOPIC, partition)
        error = (await self.replica_manager.wait_for_isr({tp: appended}, timeout_ms))[tp]
        return _STORE_OFFSETS_ERRORS.get(error, error)

    def store_group(self, group: GroupMetadata, assignment: dict[str, bytes]) -> int:
        """Writes the group's metadata with each member's assignment; NONE or the error
        its client is told (Kafka's storeGroup)."""
        partition = self.partition_for(group.group_id)
        if partition not in self.owned_partitions:
            return ErrorCode.NOT_COORDINATOR
        value = group_metadata_to_value(group, assignment)
        error = self._append(partition, [(group_metadata_key(group.group_id),
                                          group_metadata_value(value))])
        return _STORE_GROUP_ERRORS.get(error, error)

    def valid_metadata(self, metadata: str | None) -> bool:
        # Java's String.length(): UTF-16 code units.
        return metadata is None or len(metadata.encode("utf-16-le", "surrogatepass")) // 2 <= (
            self.config.max_metadata_size)

    def store_offsets(self, group: GroupMetadata, offsets: dict[TopicPartition, OffsetAndMetadata],
                      producer_id: int = -1, producer_epoch: int = -1
                      ) -> dict[TopicPartition, int]:
        """Writes the commits, then caches them; per partition NONE or its error.
        Metadata longer than offset.metadata.max.bytes is OFFSET_METADATA_TOO_LARGE and
        not written; the rest of the commit still is. With a producer id (TxnOffsetCommit)
        the batch is the producer's, transactional, and the offsets stay pending until
        its transaction ends."""
        valid = {tp: o for tp, o in offsets.items() if self.valid_metadata(o.metadata)}
        too_large = {tp: int(ErrorCode.OFFSET_METADATA_TOO_LARGE) for tp in offsets
                     if tp not in valid}
        if not valid:
            return too_large
        partition = self.partition_for(group.group_id)
        if partition not in self.owned_partitions:
            return {tp: ErrorCode.NOT_COORDINATOR for tp in offsets}
        records = [(offset_commit_key(group.group_id, tp[0], tp[1]),
                    offset_commit_value(o.offset, o.leader_epoch, o.metadata,
                                        o.commit_timestamp, o.expire_timestamp))
                   for tp, o in valid.items()]
        error, position = self._append_batch(partition, records, producer_id, producer_epoch)
        error = _STORE_OFFSETS_ERRORS.get(error, error)
        if error == ErrorCode.NONE and not group.is_(GroupState.DEAD):
            if producer_id >= 0:
                group.add_pending_txn_offsets(producer_id, valid, position)
                self.open_groups_for_producer.setdefault(producer_id, set()).add(
                    group.group_id)
            else:
                group.commit_offsets(valid, position)
        return {**{tp: error for tp in valid}, **too_large}

    def handle_txn_completion(self, producer_id: int, partitions: Iterable[int],
                              is_commit: bool) -> None:
        """A COMMIT or ABORT marker of the producer is in these __consumer_offsets
        partitions: its pending offsets in their groups become committed, or go (Kafka's
        handleTxnCompletion)."""
        completed = set(partitions)
        groups = self.open_groups_for_producer.get(producer_id)
        if not groups:
            return
        for group_id in [g for g in groups if self.partition_for(g) in completed]:
            groups.discard(group_id)
            group = self.groups.get(group_id)
            if group is None or group.is_(GroupState.DEAD):
                log.info("group %s moved away after the marker of producer %d was written; "
                         "its new coordinator loads the outcome", group_id, producer_id)
                continue
            group.complete_pending_txn_offset_commit(producer_id, is_commit)
        if not groups:
            del self.open_groups_for_producer[producer_id]

    def get_offsets(self, group_id: str, require_stable: bool,
                    partitions: Iterable[TopicPartition] | None
                    ) -> dict[TopicPartition, OffsetFetchResult]:
        """The committed offsets of the partitions (all of the group's for None); -1 for
        a partition without one. With require_stable (KIP-447), a partition with an open
        transaction's offset answers UNSTABLE_OFFSET_COMMIT (the client retries);
        without, the last committed offset (Kafka's getOffsets)."""
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return {tp: OffsetFetchResult() for tp in partitions or ()}
        wanted = list(group.offsets) if partitions is None else partitions
        out = {}
        for tp in wanted:
            if require_stable and group.has_pending_offset_commits_for_partition(tp):
                out[tp] = OffsetFetchResult(error=ErrorCode.UNSTABLE_OFFSET_COMMIT)
                continue
            o = group.offsets.get(tp)
            out[tp] = (OffsetFetchResult() if o is None else
                       OffsetFetchResult(o.offset, o.leader_epoch, o.metadata))
        return out

    # ---- removal: deletion, OffsetDelete, expiry ---------------------------------------

    def cleanup_group_metadata(self, groups: Iterable[GroupMetadata],
                               selector: Callable[[GroupMetadata],
                                                  dict[TopicPartition, OffsetAndMetadata]]
                               ) -> int:
        """Removes the offsets `selector` picks from each group, writes their tombstones;
        an empty group left without offsets becomes Dead, leaves the cache and gets a
        tombstone for its metadata. Returns how many offsets were removed."""
        removed_count = 0
        for group in groups:
            removed = selector(group)
            if group.is_(GroupState.EMPTY) and not group.has_offsets():
                log.info("group %s transitioned to Dead in generation %d", group.group_id,
                         group.generation_id)
                group.transition_to(GroupState.DEAD)
            tombstones: list[tuple[bytes, bytes | None]] = [
                (offset_commit_key(group.group_id, t, p), None) for t, p in removed]
            if group.is_(GroupState.DEAD) and self.groups.get(group.group_id) is group:
                del self.groups[group.group_id]
                # A group that only ever stored offsets (generation 0) has no metadata
                # record to remove.
                if group.generation_id > 0:
                    tombstones.append((group_metadata_key(group.group_id), None))
                if group.pending_transactional_offsets:
                    # A deleted group's open transactions still commit their offsets: a
                    # group of offsets only holds them, as a reload of the log would.
                    successor = GroupMetadata(group.group_id, GroupState.EMPTY, self.time)
                    successor.pending_transactional_offsets = (
                        group.pending_transactional_offsets)
                    group.pending_transactional_offsets = {}
                    self.groups[group.group_id] = successor
            partition = self.partition_for(group.group_id)
            # If the tombstones are lost, the next start loads the group again and expiry
            # removes it again, as in Kafka.
            if (tombstones and partition in self.owned_partitions
                    and self._append(partition, tombstones) == ErrorCode.NONE):
                removed_count += len(removed)
        return removed_count

    def cleanup_expired_offsets(self) -> int:
        """One pass of offset expiry over the loaded groups; how many offsets it removed."""
        now = self.time.milliseconds()
        retention = self.config.offsets_retention_ms
        groups = [g for g in self.groups.values()
                  if self.partition_for(g.group_id) in self.owned_partitions]
        removed = self.cleanup_group_metadata(
            groups, lambda g: g.remove_expired_offsets(now, retention))
        if removed:
            log.info("removed %d expired offsets", removed)
        return removed

    def _schedule_expiry(self) -> None:
        self._expiry_task = self.timer.schedule(
            self.config.offsets_retention_check_interval_ms, self._run_expiry)

    def _run_expiry(self) -> None:
        if not self._active:
            return
        try:
            self.cleanup_expired_offsets()
        finally:
            self._schedule_expiry()

    # ---- loading and unloading --------------------------------------------------------

    def schedule_load_group_and_offsets(self, partition: int,
                                        on_group_loaded: Callable[[GroupMetadata], None]
                                        ) -> None:
        """Loads the partition step by step on the timer; its groups answer
        COORDINATOR_LOAD_IN_PROGRESS until done."""
        if partition in self.loading or partition in self.owned_partitions:
            return
        leader = self.replica_manager.get_partition((GROUP_METADATA_TOPIC, partition))
        if leader is not None and leader.log.log_end_offset <= leader.log.log_start_offset:
            # Nothing to read (e.g. the topic was just created): serve at once.
            self.load_group_and_offsets(partition, on_group_loaded)
            return
        self.loader.start(_PartitionLoad(partition, on_group_loaded, self.time.milliseconds()))

    def load_group_and_offsets(self, partition: int,
                               on_group_loaded: Callable[[GroupMetadata], None]) -> None:
        """Loads the whole partition now (tests, benchmarks, empty partitions)."""
        if partition in self.owned_partitions:
            return
        self.loader.start(_PartitionLoad(partition, on_group_loaded, self.time.milliseconds()),
                          now=True)

    def _read_batch(self, load: _PartitionLoad, data: bytes, pos: int,
                    header: RecordBatchHeader, start: int) -> None:
        if header.is_control:
            if header.last_offset >= start:
                self._read_marker(load, data, pos, header)
            return
        producer_id = header.producer_id if header.is_transactional else -1
        for record in decode_records(data, pos, header):
            if record.offset >= start:
                self._read_record(load, record.key, record.value, record.offset,
                                  header.base_offset, producer_id)

    def _read_marker(self, load: _PartitionLoad, data: bytes, pos: int,
                     header: RecordBatchHeader) -> None:
        """A COMMIT marker makes the producer's pending offsets committed, unless a
        commit written later is there; an ABORT marker drops them (Kafka's
        loadGroupsAndOffsets)."""
        for record in decode_records(data, pos, header):
            try:
                control_type, _epoch = decode_control_record(record)
            except ProtocolError as e:
                log.error("%s-%d at offset %d: a control record that does not parse (%s); "
                          "skipped", GROUP_METADATA_TOPIC, load.partition, record.offset, e)
                return
            if control_type not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
                return
            pending = load.pending.pop(header.producer_id, {})
            if control_type == ControlRecordType.COMMIT:
                for (group_id, tp), (offset, position) in pending.items():
                    current = load.positions.get((group_id, tp))
                    offsets = load.offsets.setdefault(group_id, {})
                    if tp not in offsets or current is None or current < position:
                        offsets[tp] = offset
                        load.positions[(group_id, tp)] = position
            return

    def _read_record(self, load: _PartitionLoad, key: bytes | None, value: bytes | None,
                     offset: int, position: int = -1, producer_id: int = -1) -> None:
        where = f"{GROUP_METADATA_TOPIC}-{load.partition} at offset {offset}"
        if key is None:
            log.warning("%s: a record without a key; skipped", where)
            return
        load.records += 1
        try:
            parsed = read_key(key)
            if isinstance(parsed, OtherKey):
                log.debug("%s: a record of key version %d (not a classic group); skipped",
                          where, parsed.version)
            elif isinstance(parsed, GroupMetadataKey):
                if value is None:
                    load.groups.pop(parsed.group, None)
                    load.removed_groups.add(parsed.group)
                else:
                    load.groups[parsed.group] = read_group_metadata_value(value)
                    load.removed_groups.discard(parsed.group)
            else:
                tp = (parsed.topic, parsed.partition)
                key_ = (parsed.group, tp)
                if producer_id >= 0:  # an open transaction's offset: pending until its marker
                    pending = load.pending.setdefault(producer_id, {})
                    if value is None:
                        pending.pop(key_, None)
                    else:
                        pending[key_] = (_offset_of(value), position)
                    return
                offsets = load.offsets.setdefault(parsed.group, {})
                if value is None:
                    offsets.pop(tp, None)
                    load.positions.pop(key_, None)
                else:
                    offsets[tp] = _offset_of(value)
                    load.positions[key_] = position
        except ProtocolError as e:
            log.error("%s: a record that does not parse (%s); skipped", where, e)

    def _finish_load(self, load: _PartitionLoad) -> None:
        self.owned_partitions.add(load.partition)
        # Transactions still open at the log end: their offsets stay pending.
        pending_by_group: dict[str, dict[int, dict[TopicPartition,
                                                   tuple[OffsetAndMetadata, int]]]] = {}
        for producer_id, producer_offsets in load.pending.items():
            for (group_id, tp), pending in producer_offsets.items():
                pending_by_group.setdefault(group_id, {}).setdefault(producer_id, {})[tp] = (
                    pending)
        loaded = []
        for group_id, value in load.groups.items():
            group = group_metadata_from_value(group_id, value, self.time)
            if group is not None:
                group.offsets = load.offsets.get(group_id, {})
                loaded.append(group)
        # Groups that only store offsets (no metadata record, e.g. assign() consumers).
        for group_id in {**load.offsets, **pending_by_group}:
            if group_id not in load.groups and (load.offsets.get(group_id)
                                                or group_id in pending_by_group):
                group = GroupMetadata(group_id, GroupState.EMPTY, self.time)
                group.offsets = load.offsets.get(group_id, {})
                loaded.append(group)
        for group in loaded:
            group.offset_positions = {
                tp: load.positions[(group.group_id, tp)] for tp in group.offsets
                if (group.group_id, tp) in load.positions}
            group.pending_transactional_offsets = pending_by_group.get(group.group_id, {})
        for group in loaded:
            if self.add_group(group) is group:
                for producer_id in group.pending_transactional_offsets:
                    self.open_groups_for_producer.setdefault(producer_id, set()).add(
                        group.group_id)
                load.on_group_loaded(group)
        took = self.time.milliseconds() - load.started_ms
        log.log(logging.INFO if load.records else logging.DEBUG,
                "loaded %s-%d: %d groups, %d offsets from %d records in %d ms",
                GROUP_METADATA_TOPIC, load.partition, len(loaded),
                sum(len(g.offsets) for g in loaded), load.records, took)

    def remove_groups_for_partition(self, partition: int,
                                    on_group_unloaded: Callable[[GroupMetadata], None]) -> None:
        """This broker no longer leads the partition: its groups leave the cache."""
        self.loader.stop(partition)
        self.owned_partitions.discard(partition)
        for group in list(self.groups.values()):
            if self.partition_for(group.group_id) == partition:
                on_group_unloaded(group)
                del self.groups[group.group_id]
                for producer_id in group.pending_transactional_offsets:
                    groups = self.open_groups_for_producer.get(producer_id)
                    if groups is not None:
                        groups.discard(group.group_id)
                        if not groups:
                            del self.open_groups_for_producer[producer_id]


def _offset_of(value: bytes) -> OffsetAndMetadata:
    v = read_offset_commit_value(value)
    return OffsetAndMetadata(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp,
                             None if v.expire_timestamp == -1 else v.expire_timestamp)


# ---- GroupMetadata <-> GroupMetadataValue ---------------------------------------------------


def group_metadata_to_value(group: GroupMetadata, assignment: dict[str, bytes]
                            ) -> GroupMetadataValue:
    protocol = group.protocol_name
    return GroupMetadataValue(
        protocol_type=group.protocol_type or "",
        generation=group.generation_id,
        protocol=protocol,
        leader=group.leader_id,
        current_state_timestamp=(-1 if group.current_state_timestamp is None
                                 else group.current_state_timestamp),
        members=[MemberMetadataValue(
            member_id=m.member_id, group_instance_id=m.group_instance_id,
            client_id=m.client_id, client_host=m.client_host,
            rebalance_timeout=m.rebalance_timeout_ms, session_timeout=m.session_timeout_ms,
            subscription=m.metadata(protocol) if protocol is not None else b"",
            assignment=assignment.get(m.member_id, b""),
        ) for m in group.members.values()],
    )


def group_metadata_from_value(group_id: str, value: GroupMetadataValue, time: Time
                              ) -> GroupMetadata | None:
    """The group as its record describes it: Stable with its members, or Empty."""
    if value.members and value.protocol is None:
        log.error("group %s: its record has members but no protocol; not loaded", group_id)
        return None
    state = GroupState.STABLE if value.members else GroupState.EMPTY
    group = GroupMetadata(group_id, state, time)
    group.generation_id = value.generation
    group.protocol_type = value.protocol_type or None
    group.protocol_name = value.protocol
    group.current_state_timestamp = (None if value.current_state_timestamp == -1
                                     else value.current_state_timestamp)
    for m in value.members:
        member = MemberMetadata(
            m.member_id, m.group_instance_id, m.client_id, m.client_host,
            m.rebalance_timeout if m.rebalance_timeout >= 0 else m.session_timeout,
            m.session_timeout, value.protocol_type,
            [(value.protocol or "", bytes(m.subscription))], bytes(m.assignment))
        group.add(member)
    group.leader_id = value.leader if value.leader in group.members else group.leader_id
    group.subscribed_topics = group.compute_subscribed_topics()
    return group
