"""ReplicaManager: the partitions this broker holds, and the produce and fetch paths.

Appends go to each partition's leader log and wake the fetches waiting on it. A fetch
that finds fewer than min_bytes waits (Kafka's DelayedFetch) until appends bring enough
or max_wait_ms passes. Reads return file slices that the connection sends from the files.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from uuid import UUID

from odradek.broker.partition import LogReadResult, Partition
from odradek.cluster.metadata import PartitionState, TopicMetadata
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError
from odradek.storage.config import LogConfig
from odradek.storage.errors import InvalidConfigError, OffsetOutOfRangeError, StorageError
from odradek.storage.log_manager import LogManager
from odradek.storage.segment import FileSlice

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# Told of leadership changes (Kafka's onLeadershipChange): the topic, the partitions this
# broker now leads, and those it no longer holds. The coordinators load and unload their
# internal topics' partitions on it.
LeadershipListener = Callable[[TopicMetadata, list[int], list[int]], None]
CONSUMER_REPLICA_ID = -1  # Fetch's replica id for consumers; followers send their node id
READ_COMMITTED = 1


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


@dataclass(slots=True)
class FetchPartitionRequest:
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1


@dataclass(slots=True)
class FetchPartitionResult:
    error_code: int = ErrorCode.NONE
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    slices: list[FileSlice] = field(default_factory=list)  # the records, in the files
    size: int = 0


class FetchPurgatory:
    """Fetches waiting for data, keyed by partition; an append wakes them."""

    def __init__(self) -> None:
        self._waiters: dict[TopicPartition, set[asyncio.Future[None]]] = {}

    async def wait(self, partitions: Iterable[TopicPartition], timeout: float) -> None:
        future = asyncio.get_running_loop().create_future()
        keys = list(partitions)
        for tp in keys:
            self._waiters.setdefault(tp, set()).add(future)
        try:
            await asyncio.wait_for(future, timeout)
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


class ReplicaManager:
    def __init__(self, node_id: int, log_manager: LogManager) -> None:
        self.node_id = node_id
        self.log_manager = log_manager
        self.partitions: dict[TopicPartition, Partition] = {}
        self.purgatory = FetchPurgatory()
        self.shutting_down = False
        self.leadership_listeners: list[LeadershipListener] = []

    def add_leadership_listener(self, listener: LeadershipListener) -> None:
        self.leadership_listeners.append(listener)

    # ---- partition lifecycle ----------------------------------------------------------

    def make_leader(self, topic: str, index: int, topic_id: UUID,
                    state: PartitionState) -> Partition:
        partition = self.partitions.get((topic, index))
        if partition is None:
            partition_log = self.log_manager.get_or_create_log(topic, index)
            partition = Partition(topic, index, topic_id, partition_log, node_id=self.node_id,
                                  leader_epoch=state.leader_epoch, replicas=state.replicas,
                                  isr=state.isr)
            self.partitions[(topic, index)] = partition
        else:
            partition.leader_epoch = state.leader_epoch
            partition.isr = state.isr
            partition.replicas = state.replicas
        return partition

    # The controller's instructions (cluster.controller.PartitionListener).

    def become_leader(self, topic: TopicMetadata, partitions: list[int]) -> None:
        for index in partitions:
            self.make_leader(topic.name, index, topic.topic_id, topic.partitions[index])
        for listener in self.leadership_listeners:
            listener(topic, partitions, [])

    def remove_partitions(self, topic: TopicMetadata) -> None:
        for listener in self.leadership_listeners:
            listener(topic, [], sorted(topic.partitions))
        for index in topic.partitions:
            self.delete_partition(topic.name, index)

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
        self.purgatory.notify((topic, index))

    def get_partition(self, tp: TopicPartition) -> Partition | None:
        return self.partitions.get(tp)

    def shutdown(self) -> None:
        self.shutting_down = True
        self.purgatory.wake_all()

    # ---- produce ----------------------------------------------------------------------

    def append_records(self, required_acks: int,
                       entries: dict[TopicPartition, bytearray | memoryview | None]
                       ) -> dict[TopicPartition, ProducePartitionResult]:
        results: dict[TopicPartition, ProducePartitionResult] = {}
        for tp, records in entries.items():
            partition = self.partitions.get(tp)
            if partition is None:
                results[tp] = ProducePartitionResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            if records is None or len(records) == 0:
                results[tp] = ProducePartitionResult(
                    ErrorCode.CORRUPT_MESSAGE, error_message="the request carries no records")
                continue
            try:
                info = partition.append_records_to_leader(records, required_acks)
            except Exception as e:  # every failure is this partition's answer, not the request's
                results[tp] = self._append_failure(partition, e)
                continue
            results[tp] = ProducePartitionResult(
                ErrorCode.NONE, info.first_offset, info.log_append_time, info.log_start_offset)
            self.purgatory.notify(tp)
        return results

    def _append_failure(self, partition: Partition, e: Exception) -> ProducePartitionResult:
        code = error_of(e)
        if type(e) is StorageError or isinstance(e, OSError):
            log.error("append to %s-%d failed: %s", partition.topic, partition.index, e)
        elif code == ErrorCode.UNKNOWN_SERVER_ERROR:
            log.exception("append to %s-%d failed", partition.topic, partition.index)
        return ProducePartitionResult(code, log_start_offset=partition.log.log_start_offset,
                                      error_message=str(e) or None)

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
            results = self.read_from_local_logs(replica_id, max_bytes, requests)
            size = sum(r.size for r in results)
            remaining = deadline - loop.time()
            if (size >= min_bytes or remaining <= 0 or self.shutting_down
                    or any(r.error_code for r in results) or not requests):
                return results
            await self.purgatory.wait((tp for tp, _ in requests), remaining)

    def read_from_local_logs(
        self, replica_id: int, max_bytes: int,
        requests: list[tuple[TopicPartition, FetchPartitionRequest]],
    ) -> list[FetchPartitionResult]:
        # KIP-74: the response limit is soft for the first batch of the first partition
        # with data, so a consumer always progresses; after it, limits are hard.
        remaining = max_bytes
        min_one_message = True
        results = []
        for tp, request in requests:
            result = self._read_partition(tp, request, replica_id, remaining, min_one_message)
            if result.size:
                remaining = max(0, remaining - result.size)
                min_one_message = False
            results.append(result)
        return results

    def _read_partition(self, tp: TopicPartition, request: FetchPartitionRequest,
                        replica_id: int, limit: int, min_one_message: bool
                        ) -> FetchPartitionResult:
        partition = self.partitions.get(tp)
        if partition is None:
            return FetchPartitionResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        error = partition.check_leader_epoch(request.current_leader_epoch)
        if error:
            return FetchPartitionResult(error)
        try:
            read: LogReadResult = partition.read(
                request.fetch_offset, min(request.max_bytes, limit),
                up_to_committed=replica_id == CONSUMER_REPLICA_ID,
                min_one_message=min_one_message,
            )
        except OffsetOutOfRangeError:
            plog = partition.log
            return FetchPartitionResult(ErrorCode.OFFSET_OUT_OF_RANGE, partition.high_watermark,
                                        partition.last_stable_offset, plog.log_start_offset)
        except Exception as e:
            log.error("fetch from %s-%d failed: %s", tp[0], tp[1], e)
            return FetchPartitionResult(error_of(e), partition.high_watermark)
        return FetchPartitionResult(
            ErrorCode.NONE, read.high_watermark, partition.last_stable_offset,
            read.log_start_offset, read.info.slices, read.info.size,
        )
