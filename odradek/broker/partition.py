"""Partition: one partition's replica on this broker, its log and its high watermark.

As the leader it appends producers' records, tracks how far each follower has fetched,
and moves the high watermark (HW) to the smallest log end offset of the in-sync replica
set (ISR): a record below the HW is on every in-sync replica, so it survives any of them.
A follower that stops fetching, or falls behind for replica.lag.time.max.ms, is dropped
from the ISR; one that catches up is added back. ISR changes are proposed to the
controller (AlterPartition, one at a time, Kafka's KIP-497) and take effect when it
answers; until then the HW counts the larger of the two sets (Kafka's maximal ISR), so a
shrink never lets the HW pass a record the leaving replica may be missing.

As a follower it takes the leader's records with their offsets and epochs (the replica
fetcher calls it) and follows the leader's HW.

Transactions (KIP-98): the last stable offset (LSO) is the smaller of the HW and the log's
first unstable offset (the first offset of the oldest transaction not decided, or decided
with its marker not yet below the HW); read_committed consumers read up to it and are told
the aborted transactions of what they read. Every HW change is passed on to the log, which
then counts the transactions whose markers it passed as stable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

from odradek.cluster.metadata import PartitionState
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError
from odradek.storage.errors import OffsetOutOfRangeError
from odradek.storage.log import FetchDataInfo, Log, LogAppendInfo, system_clock
from odradek.storage.log_validator import AppendOrigin
from odradek.storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)

HIGH_WATERMARK = -1  # DeleteRecords' offset meaning "up to the high watermark"
NO_LEADER = -1


class NotEnoughReplicasError(KafkaError):
    error_code = ErrorCode.NOT_ENOUGH_REPLICAS


class NotLeaderOrFollowerError(KafkaError):
    error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class PolicyViolationError(KafkaError):
    error_code = ErrorCode.POLICY_VIOLATION


@dataclass(slots=True)
class LogReadResult:
    info: FetchDataInfo
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int = -1
    # read_committed reads: the aborted transactions overlapping what was read.
    aborted_transactions: list[AbortedTxn] | None = None


@dataclass(slots=True)
class FollowerReplica:
    """What the leader knows of one follower (Kafka's Replica): where it fetched from
    last, and when it was last caught up with the leader's log end."""

    broker_id: int
    log_end_offset: int = -1  # unknown until it fetches
    log_start_offset: int = -1
    last_caught_up_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = -1
    last_fetch_time_ms: int = 0

    def update_fetch_state(self, fetch_offset: int, log_start_offset: int,
                           leader_log_end_offset: int, now: int) -> None:
        # Caught up now if it asked from the leader's end; caught up as of the previous
        # fetch if it asked from where the leader's end was then (Kafka's Replica).
        if fetch_offset >= leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, now)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms,
                                              self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.log_start_offset = log_start_offset
        self.last_fetch_leader_log_end_offset = leader_log_end_offset
        self.last_fetch_time_ms = now


# Sends a proposed ISR to the controller: (partition, new ISR); the answer comes back
# through Partition.alter_partition_completed.
AlterPartitionSender = Callable[["Partition", list[int]], None]


class Partition:
    def __init__(self, topic: str, index: int, topic_id: UUID, log: Log, *, node_id: int,
                 high_watermark: int | None = None,
                 clock: Callable[[], int] = system_clock,
                 replica_lag_time_max_ms: int = 30_000,
                 alter_partition: AlterPartitionSender | None = None) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = log
        self.node_id = node_id
        self.clock = clock
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self._alter_partition = alter_partition
        self.leader_id = NO_LEADER
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: list[int] = []
        self.isr: list[int] = []  # as the controller last confirmed it
        self.pending_isr: list[int] | None = None  # proposed, not answered yet
        self._proposed_in = (-1, -1)  # the (leader, partition) epochs it was proposed in
        self.followers: dict[int, FollowerReplica] = {}
        # The first offset of this leader's epoch: a follower joins the ISR only once it
        # has everything from there (it has the records of earlier epochs the new leader
        # kept, and this epoch's new ones).
        self.leader_epoch_start_offset = -1
        self._high_watermark = -1
        # A restart takes the checkpointed HW (never above the log end): consumers see
        # nothing that was not committed before.
        end = log.log_end_offset
        self.high_watermark = (end if high_watermark is None
                               else max(log.log_start_offset, min(high_watermark, end)))

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.index})"

    @property
    def tp(self) -> tuple[str, int]:
        return self.topic, self.index

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.node_id

    @property
    def maximal_isr(self) -> list[int]:
        """The ISR the HW must wait for: the confirmed one and, while an expansion is
        pending, the replica joining (a pending shrink keeps the larger confirmed ISR)."""
        if self.pending_isr is None:
            return self.isr
        return self.isr + [b for b in self.pending_isr if b not in self.isr]

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        self._high_watermark = value
        # Completed transactions become stable once the HW passes their markers.
        self.log.update_high_watermark(value)

    @property
    def last_stable_offset(self) -> int:
        """min(first unstable offset, HW): what read_committed consumers may read."""
        return self.log.last_stable_offset(self.high_watermark)

    # ---- leadership (LeaderAndIsr) ------------------------------------------------------

    def make_leader(self, state: PartitionState) -> bool:
        """Leads from `state`; True when this is a new leadership (another epoch) rather
        than the same leader with a new ISR."""
        new_epoch = not self.is_leader or state.leader_epoch != self.leader_epoch
        now = self.clock()
        self._adopt(state)
        if new_epoch:
            # Records appended from here on carry the new epoch; followers truncate to
            # where the previous one ended (KIP-101).
            self.leader_epoch_start_offset = self.log.log_end_offset
            self.log.leader_epoch_cache.assign(state.leader_epoch, self.leader_epoch_start_offset)
            # Followers start from nothing known, caught up as of now if in the ISR, so
            # they get replica.lag.time.max.ms to fetch before they are dropped.
            self.followers = {
                b: FollowerReplica(b, last_caught_up_time_ms=now if b in state.isr else 0)
                for b in state.replicas if b != self.node_id}
        else:
            for b in state.replicas:
                if b != self.node_id and b not in self.followers:
                    self.followers[b] = FollowerReplica(b)
            for b in list(self.followers):
                if b not in state.replicas:
                    del self.followers[b]
        self.maybe_increment_high_watermark()
        return new_epoch

    def make_follower(self, state: PartitionState) -> bool:
        """Follows `state.leader`; True when the leader or its epoch changed (the fetcher
        must start over, truncating first)."""
        changed = state.leader != self.leader_id or state.leader_epoch != self.leader_epoch
        self._adopt(state)
        self.followers = {}
        self.leader_epoch_start_offset = -1
        return changed

    def make_offline(self) -> None:
        """Its log dir failed (KIP-112): it neither leads nor follows any more. The epochs
        stay, so that older LeaderAndIsr requests are still refused."""
        self.leader_id = NO_LEADER
        self.followers = {}
        self.pending_isr = None
        self.leader_epoch_start_offset = -1

    def _adopt(self, state: PartitionState) -> None:
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.partition_epoch = state.partition_epoch
        self.replicas = list(state.replicas)
        self.isr = list(state.isr)
        self.pending_isr = None  # whatever was in flight was for the previous state

    # ---- the leader: produce ------------------------------------------------------------

    def append_records_to_leader(self, records: bytearray | memoryview | bytes,
                                 required_acks: int, *,
                                 origin: AppendOrigin = AppendOrigin.CLIENT) -> LogAppendInfo:
        """Appends to the leader's log: a client's batches, or a coordinator's (origin
        COORDINATOR: transaction markers, which only the broker writes)."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.node_id} is not the leader of {self.topic}-{self.index}")
        min_isr = self.log.config.min_insync_replicas
        if required_acks == -1 and len(self.isr) < min_isr:
            raise NotEnoughReplicasError(
                f"{self.topic}-{self.index} has {len(self.isr)} in-sync replicas, fewer than "
                f"min.insync.replicas={min_isr}"
            )
        info = self.log.append_as_leader(records, self.leader_epoch, origin=origin)
        self.maybe_increment_high_watermark()
        return info

    def check_enough_replicas_reach_offset(self, required_offset: int,
                                           leader_epoch: int) -> tuple[bool, int]:
        """acks=all: (done, error) for records ending at `required_offset`, appended in
        `leader_epoch` (Kafka's checkEnoughReplicasReachOffset)."""
        if not self.is_leader or self.leader_epoch != leader_epoch:
            # Leadership moved meanwhile: the records may be truncated away.
            return True, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.high_watermark < required_offset:
            return False, ErrorCode.NONE
        if len(self.maximal_isr) < self.log.config.min_insync_replicas:
            return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return True, ErrorCode.NONE

    def maybe_increment_high_watermark(self) -> bool:
        """The leader's HW: the smallest log end offset in the maximal ISR; it never goes
        back. True when it moved."""
        if not self.is_leader:
            return False
        new_hw = self.log.log_end_offset
        for broker_id in self.maximal_isr:
            follower = self.followers.get(broker_id)
            if follower is not None:
                new_hw = min(new_hw, follower.log_end_offset)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            return True
        return False

    # ---- the leader: followers' fetches and the ISR ------------------------------------

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int,
                                    log_start_offset: int, leader_log_end_offset: int) -> bool:
        """A follower fetched from `fetch_offset`, so it has everything below it. Returns
        True when the HW moved."""
        follower = self.followers.get(replica_id)
        if follower is None:
            return False
        follower.update_fetch_state(fetch_offset, log_start_offset, leader_log_end_offset,
                                    self.clock())
        self._maybe_expand_isr(follower)
        return self.maybe_increment_high_watermark()

    def _maybe_expand_isr(self, follower: FollowerReplica) -> None:
        if (self.pending_isr is not None or follower.broker_id in self.isr
                or self._alter_partition is None):
            return
        if (follower.log_end_offset >= self.high_watermark
                and follower.log_end_offset >= self.leader_epoch_start_offset):
            log.info("%s-%d: expanding the ISR %s with broker %d", self.topic, self.index,
                     self.isr, follower.broker_id)
            self._propose_isr([*self.isr, follower.broker_id])

    def maybe_shrink_isr(self) -> None:
        """Drops the in-sync followers not caught up for replica.lag.time.max.ms (called
        periodically, Kafka every lag/2)."""
        if not self.is_leader or self.pending_isr is not None or self._alter_partition is None:
            return
        now = self.clock()
        out_of_sync = [b for b in self.isr if b != self.node_id and (
            b not in self.followers
            or now - self.followers[b].last_caught_up_time_ms > self.replica_lag_time_max_ms)]
        if out_of_sync:
            log.info("%s-%d: shrinking the ISR %s: %s out of sync (HW %d, log end %d)",
                     self.topic, self.index, self.isr, out_of_sync, self.high_watermark,
                     self.log.log_end_offset)
            self._propose_isr([b for b in self.isr if b not in out_of_sync])

    def _propose_isr(self, isr: list[int]) -> None:
        assert self._alter_partition is not None
        self.pending_isr = isr
        self._proposed_in = (self.leader_epoch, self.partition_epoch)
        self._alter_partition(self, isr)

    def alter_partition_completed(self, leader_epoch: int, partition_epoch: int, error: int,
                                  state: PartitionState | None) -> bool:
        """The controller's answer to the ISR proposed in (`leader_epoch`,
        `partition_epoch`). Returns True when the HW moved (a shrink can let it advance)."""
        if self.pending_isr is None or (leader_epoch, partition_epoch) != self._proposed_in:
            # A LeaderAndIsr came meanwhile and settled the state; the answer is to a
            # proposal made before it (Kafka: partitionState != proposedIsrState).
            return False
        self.pending_isr = None
        if error != ErrorCode.NONE or state is None:
            # Refused (a newer partition or leader epoch, or an ineligible replica): the
            # next fetch or shrink check proposes again from what LeaderAndIsr tells us.
            log.info("%s-%d: the controller refused the ISR change: %s", self.topic,
                     self.index, ErrorCode(error).name if error in ErrorCode._value2member_map_
                     else error)
            return False
        if state.leader_epoch != self.leader_epoch or state.leader != self.node_id:
            return False  # the controller moved leadership; its LeaderAndIsr follows
        self.isr = list(state.isr)
        self.partition_epoch = state.partition_epoch
        return self.maybe_increment_high_watermark()

    # ---- the follower (the replica fetcher) ----------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def latest_epoch(self) -> int:
        return self.log.leader_epoch_cache.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.log.leader_epoch_cache.end_offset_for(epoch, self.log.log_end_offset)

    def append_records_as_follower(self, records: memoryview | bytes) -> LogAppendInfo:
        return self.log.append_as_follower(records)

    def truncate_to(self, offset: int) -> None:
        self.log.truncate_to(offset)
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset)
        self.high_watermark = offset

    def update_follower_high_watermark(self, leader_high_watermark: int,
                                       leader_log_start_offset: int) -> None:
        self.high_watermark = max(self.log.log_start_offset,
                                  min(leader_high_watermark, self.log.log_end_offset))
        if self.log.log_start_offset < leader_log_start_offset <= self.log.log_end_offset:
            self.log.maybe_increment_log_start_offset(leader_log_start_offset)

    # ---- reads and the leader's other requests ------------------------------------------

    def read(self, offset: int, max_bytes: int, *, up_to_committed: bool,
             min_one_message: bool, read_committed: bool = False) -> LogReadResult:
        """Reads from `offset`; consumers see nothing at or above the high watermark, and
        read_committed ones (with `up_to_committed`) nothing at or above the last stable
        offset, and get the aborted transactions of what they read."""
        hw = self.high_watermark
        lso = self.last_stable_offset
        committed = up_to_committed and read_committed
        limit = (lso if committed else hw) if up_to_committed else None
        info = self.log.read(offset, max_bytes, limit, min_one_message)
        aborted = self.log.aborted_transactions_of(info) if committed else None
        return LogReadResult(info, hw, self.log.log_start_offset, self.log.log_end_offset,
                             lso, aborted)

    def delete_records_on_leader(self, offset: int) -> int:
        """DeleteRecords: records below `offset` (-1: the high watermark) become unreadable.
        Returns the low watermark: here the leader's log start (followers follow it on
        their next fetch)."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.node_id} is not the leader of {self.topic}-{self.index}")
        log = self.log
        if not log.config.delete:
            raise PolicyViolationError(f"Records of partition {self.topic}-{self.index} can "
                                       "not be deleted due to the configured policy")
        if offset == HIGH_WATERMARK:
            offset = self.high_watermark
        if offset < 0:
            raise OffsetOutOfRangeError(f"The offset {offset} for partition "
                                        f"{self.topic}-{self.index} is not valid")
        if offset > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"Cannot increment the log start offset to {offset} of partition "
                f"{self.topic}-{self.index} since it is larger than the high watermark "
                f"{self.high_watermark}")
        log.maybe_increment_log_start_offset(offset)
        return log.log_start_offset

    def last_offset_for_leader_epoch(self, current_leader_epoch: int,
                                     leader_epoch: int) -> tuple[int, int, int]:
        """OffsetForLeaderEpoch (KIP-101, KIP-320): (error, the largest epoch <= the one
        asked, the offset where it ended) from the leader epoch cache; (NONE, -1, -1) when
        the cache knows nothing of it."""
        error = self.check_leader_epoch(current_leader_epoch)
        if error:
            return error, -1, -1
        if not self.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1
        epoch, offset = self.log.leader_epoch_cache.end_offset_for(leader_epoch,
                                                                   self.log.log_end_offset)
        return ErrorCode.NONE, epoch, offset

    def check_leader_epoch(self, current_leader_epoch: int) -> int:
        """The error for a request that names a leader epoch (-1: no check), KIP-320."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return ErrorCode.NONE
        if current_leader_epoch > self.leader_epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        return ErrorCode.FENCED_LEADER_EPOCH
