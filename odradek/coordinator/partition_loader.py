"""A coordinator's state read back from its internal topic partition, chunk by chunk.

The group coordinator (__consumer_offsets) and the transaction coordinator
(__transaction_state) load a partition they come to lead the same way, as Kafka's
GroupMetadataManager and TransactionStateManager do: from the log start to the log end
(a new leader's records above its high watermark are the ones its followers will take from
it), a load buffer at a time, one chunk per timer turn so that a large partition does not
hold the event loop. What a batch means is the manager's: it is given each batch, and told
when the load reached the end.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic, TypeVar

from odradek.broker.replica_manager import ReplicaManager
from odradek.coordinator.timer import Timer, TimerTask
from odradek.protocol.records import RecordBatchHeader
from odradek.protocol.records import iter_batch_headers as iter_batches
from odradek.storage.errors import OffsetOutOfRangeError

log = logging.getLogger(__name__)


class PartitionLoad:
    """What has been read so far of one partition being loaded (managers add their own
    state in a subclass)."""

    def __init__(self, partition: int, started_ms: int) -> None:
        self.partition = partition
        self.started_ms = started_ms
        self.next_offset = 0
        self.records = 0
        self.task: TimerTask | None = None


L = TypeVar("L", bound=PartitionLoad)


class PartitionLoader(Generic[L]):
    """The loads in progress of one internal topic's partitions (`loading`, by partition).

    read_batch(load, data, pos, header, start): one batch of the chunk read from `start`
    (a batch may begin below it). finish(load): the log end is reached; the load has left
    `loading` by then."""

    def __init__(self, topic: str, replica_manager: ReplicaManager, timer: Timer,
                 buffer_size: int,
                 read_batch: Callable[[L, bytes, int, RecordBatchHeader, int], None],
                 finish: Callable[[L], None]) -> None:
        self.topic = topic
        self.replica_manager = replica_manager
        self.timer = timer
        self.buffer_size = buffer_size
        self.read_batch = read_batch
        self.finish = finish
        self.loading: dict[int, L] = {}

    def start(self, load: L, now: bool = False) -> None:
        """Loads the partition (replacing a load of it in progress): on the timer, or all
        of it now (tests, empty partitions)."""
        self.stop(load.partition)
        self.loading[load.partition] = load
        if now:
            while not self._read_chunk(load):
                pass
        else:
            load.task = self.timer.schedule(0, lambda: self._step(load))

    def stop(self, partition: int) -> L | None:
        """Ends the partition's load in progress, if any; returns it."""
        load = self.loading.pop(partition, None)
        if load is not None and load.task is not None:
            load.task.cancel()
        return load

    def stop_all(self) -> None:
        for partition in list(self.loading):
            self.stop(partition)

    def _step(self, load: L) -> None:
        if self.loading.get(load.partition) is not load:
            return  # stopped or restarted meanwhile
        try:
            done = self._read_chunk(load)
        except Exception:
            log.exception("loading %s-%d failed", self.topic, load.partition)
            del self.loading[load.partition]
            return
        if not done:
            load.task = self.timer.schedule(0, lambda: self._step(load))

    def _read_chunk(self, load: L) -> bool:
        """Reads up to buffer_size bytes; True once the load is over (finished, or the
        partition is no longer led here)."""
        tp = (self.topic, load.partition)
        partition = self.replica_manager.get_partition(tp)
        if partition is None or not partition.is_leader:
            log.info("%s-%d is no longer led here: not loading it", *tp)
            del self.loading[load.partition]
            return True
        plog = partition.log
        end = plog.log_end_offset
        load.next_offset = max(load.next_offset, plog.log_start_offset)
        if load.next_offset < end:
            try:
                data = plog.read(load.next_offset, self.buffer_size, end).read()
            except OffsetOutOfRangeError:  # the log start moved (retention): read from it
                load.next_offset = plog.log_start_offset
                return False
            start = load.next_offset
            for pos, header in iter_batches(data, allow_partial=True):
                load.next_offset = header.next_offset
                self.read_batch(load, data, pos, header, start)
            if load.next_offset == start:  # nothing readable below the log end
                load.next_offset = end
            if load.next_offset < end:
                return False
        del self.loading[load.partition]
        self.finish(load)
        return True
