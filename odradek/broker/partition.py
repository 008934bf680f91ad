"""Partition: one partition's replica on this broker, its log and its high watermark.

On a single node the leader is the whole in-sync replica set, so the high watermark
follows the log end offset; replication (issue 7) will track followers' log end offsets
here and move the high watermark to the smallest one in the ISR.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError
from odradek.storage.errors import OffsetOutOfRangeError
from odradek.storage.log import FetchDataInfo, Log, LogAppendInfo

HIGH_WATERMARK = -1  # DeleteRecords' offset meaning "up to the high watermark"


class NotEnoughReplicasError(KafkaError):
    error_code = ErrorCode.NOT_ENOUGH_REPLICAS


class PolicyViolationError(KafkaError):
    error_code = ErrorCode.POLICY_VIOLATION


@dataclass(slots=True)
class LogReadResult:
    info: FetchDataInfo
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


class Partition:
    def __init__(self, topic: str, index: int, topic_id: UUID, log: Log, *, node_id: int,
                 leader_epoch: int, replicas: list[int], isr: list[int]) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = log
        self.node_id = node_id
        self.leader_epoch = leader_epoch
        self.replicas = replicas
        self.isr = isr
        self.high_watermark = log.log_end_offset

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.index})"

    @property
    def is_leader(self) -> bool:
        return self.node_id in self.isr

    @property
    def last_stable_offset(self) -> int:
        # Without open transactions the last stable offset is the high watermark.
        return self.high_watermark

    def append_records_to_leader(self, records: bytearray | memoryview,
                                 required_acks: int) -> LogAppendInfo:
        min_isr = self.log.config.min_insync_replicas
        if required_acks == -1 and len(self.isr) < min_isr:
            raise NotEnoughReplicasError(
                f"{self.topic}-{self.index} has {len(self.isr)} in-sync replicas, fewer than "
                f"min.insync.replicas={min_isr}"
            )
        info = self.log.append_as_leader(records, self.leader_epoch)
        self._maybe_increment_high_watermark()
        return info

    def _maybe_increment_high_watermark(self) -> None:
        # The ISR is this broker alone until replication lands.
        self.high_watermark = self.log.log_end_offset

    def read(self, offset: int, max_bytes: int, *, up_to_committed: bool,
             min_one_message: bool) -> LogReadResult:
        """Reads from `offset`; consumers see nothing at or above the high watermark."""
        hw = self.high_watermark
        info = self.log.read(offset, max_bytes, hw if up_to_committed else None, min_one_message)
        return LogReadResult(info, hw, self.log.log_start_offset, self.log.log_end_offset)

    def delete_records_on_leader(self, offset: int) -> int:
        """DeleteRecords: records below `offset` (-1: the high watermark) become unreadable.
        Returns the low watermark: the smallest log start offset among the ISR, here ours."""
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
