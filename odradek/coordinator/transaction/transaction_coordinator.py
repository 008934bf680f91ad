"""TransactionCoordinator: transactional producers' InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn and EndTxn, and the coordinator's own work (Kafka's
TransactionCoordinator, transaction version 1: KIP-98, KIP-360, KIP-588, KIP-664).

- Each operation checks the id's metadata, prepares a transition, writes it to
  __transaction_state (TransactionStateManager.append_transaction_to_log, which waits for
  the ISR) and answers; the transition applies once written.
- EndTxn: PrepareCommit or PrepareAbort is written and the client answered; then the
  markers go to every partition of the transaction through the `TxnMarkerSender`, and
  once every leader has them CompleteCommit or CompleteAbort is written. Meanwhile the id
  answers CONCURRENT_TRANSACTIONS, except that AddPartitionsToTxn and AddOffsetsToTxn, the
  next transaction's first request, wait up to COMPLETION_WAIT_MS for that completion
  (a producer that commits and begins again at once would otherwise back off 20 ms).
- InitProducerId on an id with an ongoing transaction fences its producer: the epoch is
  bumped (PrepareEpochFence, never written), the transaction aborted with it, and the
  caller told CONCURRENT_TRANSACTIONS; its retry then gets the next epoch.
- Epochs run up to Short.MaxValue - 1; then the id gets a new producer id at epoch 0.
- Every transaction.abort.timed.out.transaction.cleanup.interval.ms, Ongoing transactions
  older than their transaction.timeout.ms are aborted the same way (their producer is
  fenced).
- A coordinator that loads a partition completes the transactions its predecessor left
  in PrepareCommit or PrepareAbort (markers, then Complete*).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Protocol

from odradek.cluster.topics import GROUP_METADATA_TOPIC, TRANSACTION_STATE_TOPIC
from odradek.coordinator.timer import Time, Timer, TimerTask
from odradek.coordinator.transaction.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    IllegalTransitionError,
    TopicPartition,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
    is_epoch_exhausted,
)
from odradek.coordinator.transaction.transaction_state_manager import (
    ListedTransaction,
    PendingCompletion,
    TransactionConfig,
    TransactionStateManager,
)
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError

log = logging.getLogger(__name__)

# How long a Complete* write that found the coordinator unavailable waits to try again.
COMPLETION_RETRY_BACKOFF_MS = 100
# How long AddPartitionsToTxn (and AddOffsetsToTxn) waits for the completion of the id's
# previous transaction (its markers and Complete* write) when that is in flight here,
# before answering CONCURRENT_TRANSACTIONS as Kafka does at once. The completion takes well
# under a millisecond when this broker leads the partitions, a few over the network; a
# client told CONCURRENT_TRANSACTIONS waits 20 ms (Java, librdkafka) before it asks again.
COMPLETION_WAIT_MS = 50


class TransactionResult(IntEnum):
    """The marker's type (Kafka's TransactionResult; WriteTxnMarkers' `committed`)."""

    ABORT = 0
    COMMIT = 1


class TxnMarkerSender(Protocol):
    """Writes a transaction's markers to the leaders of its partitions (WriteTxnMarkers)."""

    async def send_markers(self, producer_id: int, producer_epoch: int,
                           result: TransactionResult, coordinator_epoch: int,
                           partitions: frozenset[TopicPartition]) -> None:
        """Returns once the leader of every partition has written the marker, retrying
        (a partition that no longer exists needs none). Cancelled when this coordinator
        resigns the transaction's partition or stops."""
        ...


class ProducerIdGenerator(Protocol):
    """odradek.broker.producer_ids.ProducerIdManager."""

    async def generate(self) -> int: ...


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    producer_id: int
    producer_epoch: int
    error: int = ErrorCode.NONE


def _init_error(error: int) -> InitProducerIdResult:
    return InitProducerIdResult(NO_PRODUCER_ID, NO_PRODUCER_EPOCH, error)


def _drop_untaken_fence(metadata: TransactionMetadata) -> None:
    """A fence the abort did not take over (the abort was refused before its write) must
    not leave the id busy for ever."""
    if metadata.pending_state is TransactionState.PREPARE_EPOCH_FENCE:
        metadata.pending_state = None


@dataclass(frozen=True, slots=True)
class DescribedTransaction:
    """DescribeTransactions' view of one id."""

    transactional_id: str
    error: int = ErrorCode.NONE
    state: str = ""
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    txn_timeout_ms: int = 0
    txn_start_timestamp: int = -1
    topic_partitions: dict[str, list[int]] = field(default_factory=dict)


class TransactionCoordinator:
    def __init__(self, config: TransactionConfig, manager: TransactionStateManager,
                 producer_ids: ProducerIdGenerator, marker_sender: TxnMarkerSender,
                 group_partition_for: Callable[[str], int], time: Time, timer: Timer) -> None:
        self.config = config
        self.manager = manager
        self.producer_ids = producer_ids
        self.marker_sender = marker_sender
        self.group_partition_for = group_partition_for
        self.time = time
        self.timer = timer
        self.is_active = False
        self._abort_task: TimerTask | None = None
        # Marker sending and Complete* writes in flight, by __transaction_state partition:
        # cancelled when the partition is resigned.
        self._completions: dict[int, set[asyncio.Task[None]]] = {}
        # The same tasks by transactional id (the latest one of each id).
        self._completing: dict[str, asyncio.Task[None]] = {}

    # ---- lifecycle and partitions -----------------------------------------------------

    def startup(self, enable_transactional_id_expiration: bool = True) -> None:
        """Starts serving; loads the __transaction_state partitions this broker leads now
        and, through the ReplicaManager's leadership listener, those it comes to lead."""
        self.manager.startup(enable_transactional_id_expiration)
        self.is_active = True
        self._schedule_abort()
        replica_manager = self.manager.replica_manager
        replica_manager.add_leadership_listener(self.on_leadership_change)
        for (topic, index), partition in list(replica_manager.partitions.items()):
            if topic == TRANSACTION_STATE_TOPIC and partition.is_leader:
                self.on_election(index)
        log.info("transaction coordinator started")

    def shutdown(self) -> None:
        self.is_active = False
        if self._abort_task is not None:
            self._abort_task.cancel()
            self._abort_task = None
        for tasks in self._completions.values():
            for task in tasks:
                task.cancel()
        self._completions.clear()
        self._completing.clear()
        self.manager.shutdown()
        log.info("transaction coordinator stopped")

    def on_leadership_change(self, topic: str, partition_count: int, led: list[int],
                             resigned: list[int]) -> None:
        if topic != TRANSACTION_STATE_TOPIC or not self.is_active:
            return
        if led:
            # Fixed once the topic exists, whatever the setting says now.
            self.manager.partition_count = partition_count
        for index in resigned:
            self.on_resignation(index)
        for index in led:
            self.on_election(index)

    def partition_for(self, transactional_id: str) -> int:
        return self.manager.partition_for(transactional_id)

    def on_election(self, partition: int, coordinator_epoch: int | None = None,
                    load_now: bool = False) -> None:
        """This broker now leads a __transaction_state partition: load it (step by step
        on the timer, or at once with load_now) at the partition's leader epoch."""
        if coordinator_epoch is None:
            leader = self.manager.replica_manager.get_partition(
                (TRANSACTION_STATE_TOPIC, partition))
            coordinator_epoch = leader.leader_epoch if leader is not None else 0
        log.info("elected as the transaction coordinator of %s-%d at epoch %d",
                 TRANSACTION_STATE_TOPIC, partition, coordinator_epoch)
        self._cancel_completions(partition)
        if load_now:
            self.manager.load_transactions_for_partition(partition, coordinator_epoch,
                                                         self._on_partition_loaded)
        else:
            self.manager.schedule_load_transactions_for_partition(
                partition, coordinator_epoch, self._on_partition_loaded)

    def on_resignation(self, partition: int, coordinator_epoch: int | None = None) -> None:
        log.info("resigned as the transaction coordinator of %s-%d", TRANSACTION_STATE_TOPIC,
                 partition)
        self.manager.remove_transactions_for_partition(partition, coordinator_epoch)
        self._cancel_completions(partition)

    def _cancel_completions(self, partition: int) -> None:
        for task in self._completions.pop(partition, set()):
            task.cancel()

    def _on_partition_loaded(self, coordinator_epoch: int,
                             pending: list[PendingCompletion]) -> None:
        for p in pending:
            result = (TransactionResult.COMMIT
                      if p.metadata.state is TransactionState.PREPARE_COMMIT
                      else TransactionResult.ABORT)
            log.info("%s: completing the transaction left in %s (producer id %d, epoch %d)",
                     p.transactional_id, p.metadata.state, p.metadata.producer_id,
                     p.metadata.producer_epoch)
            self._add_txn_markers_to_send(p.transactional_id, coordinator_epoch, result,
                                          p.metadata, p.transit)

    # ---- InitProducerId ---------------------------------------------------------------

    async def handle_init_producer_id(self, transactional_id: str | None,
                                      transaction_timeout_ms: int,
                                      expected: tuple[int, int] | None = None
                                      ) -> InitProducerIdResult:
        """A producer id and epoch for the producer. `expected` is the client's current
        (producer id, epoch) when it asks to bump its epoch (KIP-360), None otherwise."""
        if transactional_id is None:
            # Idempotent producers: a new producer id each time, epoch 0.
            producer_id = await self._generate_producer_id()
            if producer_id < 0:
                return _init_error(-producer_id)
            return InitProducerIdResult(producer_id, 0)
        if not transactional_id:
            return _init_error(ErrorCode.INVALID_REQUEST)
        if not self.manager.validate_transaction_timeout_ms(transaction_timeout_ms):
            return _init_error(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        error, entry = self.manager.get_transaction_state(transactional_id)
        if error:
            return _init_error(error)
        if entry is None:
            producer_id = await self._generate_producer_id()
            if producer_id < 0:
                return _init_error(-producer_id)
            created = TransactionMetadata(
                transactional_id, producer_id, txn_timeout_ms=transaction_timeout_ms,
                state=TransactionState.EMPTY,
                txn_last_update_timestamp=self.time.milliseconds())
            error, entry = self.manager.put_transaction_state_if_not_exists(created)
            if error:
                return _init_error(error)
            assert entry is not None
        coordinator_epoch = entry.coordinator_epoch
        metadata = entry.metadata
        prepared = await self._prepare_init_producer_id_transit(
            transactional_id, transaction_timeout_ms, metadata, expected)
        if isinstance(prepared, int):
            return _init_error(prepared)
        if prepared.txn_state is TransactionState.PREPARE_EPOCH_FENCE:
            # Abort the ongoing transaction with the fenced epoch, then let the client
            # retry: its retry bumps the epoch again (or rotates the producer id).
            error = await self._end_transaction(
                transactional_id, prepared.producer_id, prepared.producer_epoch,
                TransactionResult.ABORT, is_from_client=False)
            _drop_untaken_fence(metadata)
            return _init_error(error or ErrorCode.CONCURRENT_TRANSACTIONS)
        error = await self.manager.append_transaction_to_log(transactional_id,
                                                             coordinator_epoch, prepared)
        if error:
            log.info("%s: answering %s to InitProducerId", transactional_id,
                     ErrorCode(error).name)
            return _init_error(error)
        log.info("initialized transactional id %s with producer id %d and epoch %d on "
                 "partition %s-%d", transactional_id, prepared.producer_id,
                 prepared.producer_epoch, TRANSACTION_STATE_TOPIC,
                 self.partition_for(transactional_id))
        return InitProducerIdResult(prepared.producer_id, prepared.producer_epoch)

    async def _generate_producer_id(self) -> int:
        """A new producer id, or minus the error code when none can be reserved."""
        try:
            return await self.producer_ids.generate()
        except KafkaError as e:
            log.warning("cannot reserve producer ids: %s", e)
            code = e.error_code if e.error_code > 0 else ErrorCode.UNKNOWN_SERVER_ERROR
            return -int(code)
        except Exception:
            log.exception("cannot reserve producer ids")
            return -int(ErrorCode.COORDINATOR_NOT_AVAILABLE)

    async def _prepare_init_producer_id_transit(
            self, transactional_id: str, transaction_timeout_ms: int,
            metadata: TransactionMetadata, expected: tuple[int, int] | None
            ) -> TxnTransitMetadata | int:
        def is_valid_producer_id(pid: int, epoch: int) -> bool:
            # A new id (epoch -1, e.g. recovering from UNKNOWN_PRODUCER_ID), the current
            # producer id, or the previous one after a rotation whose answer was lost.
            return (metadata.producer_epoch == NO_PRODUCER_EPOCH
                    or pid == metadata.producer_id
                    or (pid == metadata.last_producer_id and is_epoch_exhausted(epoch)))

        if metadata.pending_transition_in_progress:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if expected is not None and not is_valid_producer_id(*expected):
            return ErrorCode.PRODUCER_FENCED
        state = metadata.state
        if state in (TransactionState.PREPARE_ABORT, TransactionState.PREPARE_COMMIT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if state in (TransactionState.COMPLETE_ABORT, TransactionState.COMPLETE_COMMIT,
                     TransactionState.EMPTY):
            now = self.time.milliseconds()
            if metadata.is_producer_epoch_exhausted and (
                    expected is None or expected[1] == metadata.producer_epoch):
                producer_id = await self._generate_producer_id()
                if producer_id < 0:
                    return -producer_id
                # The id may have moved on while the producer id was reserved.
                if metadata.pending_transition_in_progress or metadata.state is not state:
                    return ErrorCode.CONCURRENT_TRANSACTIONS
                log.info("%s: producer id %d has exhausted its epochs: rotating to %d",
                         transactional_id, metadata.producer_id, producer_id)
                return metadata.prepare_producer_id_rotation(
                    producer_id, transaction_timeout_ms, now, expected is not None)
            return metadata.prepare_increment_producer_epoch(
                transaction_timeout_ms, None if expected is None else expected[1], now)
        if state is TransactionState.ONGOING:
            return metadata.prepare_fence_producer_epoch()
        raise IllegalTransitionError(
            f"found transactional id {transactional_id} in state {state}: never expected")

    # ---- AddPartitionsToTxn, AddOffsetsToTxn --------------------------------------------

    async def handle_add_partitions(self, transactional_id: str, producer_id: int,
                                    producer_epoch: int,
                                    partitions: Iterable[TopicPartition]) -> int:
        """Adds the partitions to the id's transaction (starting one); NONE or the error.
        While the id's previous transaction completes here, waits up to
        COMPLETION_WAIT_MS for it first."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        wanted = frozenset(partitions)
        error = await self._add_partitions(transactional_id, producer_id, producer_epoch,
                                           wanted)
        if error == ErrorCode.CONCURRENT_TRANSACTIONS and await self._wait_for_completion(
                transactional_id):
            error = await self._add_partitions(transactional_id, producer_id,
                                               producer_epoch, wanted)
        return error

    async def _wait_for_completion(self, transactional_id: str) -> bool:
        """Waits up to COMPLETION_WAIT_MS for the id's completion in flight, if any: True
        when there was one and it has ended (written, failed or cancelled)."""
        task = self._completing.get(transactional_id)
        if task is None:
            return False
        if not task.done():
            # asyncio.wait leaves the task running when the time is up.
            await asyncio.wait((task,), timeout=COMPLETION_WAIT_MS / 1000)
        return task.done()

    async def _add_partitions(self, transactional_id: str, producer_id: int,
                              producer_epoch: int, wanted: frozenset[TopicPartition]) -> int:
        error, entry = self.manager.get_transaction_state(transactional_id)
        if error:
            return error
        if entry is None:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        metadata = entry.metadata
        if metadata.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if metadata.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if metadata.pending_transition_in_progress:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if metadata.state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if metadata.state is TransactionState.ONGOING and wanted <= metadata.topic_partitions:
            return ErrorCode.NONE  # already in the transaction
        transit = metadata.prepare_add_partitions(wanted, self.time.milliseconds())
        return await self.manager.append_transaction_to_log(
            transactional_id, entry.coordinator_epoch, transit)

    def handle_verify_partitions(self, transactional_id: str, producer_id: int,
                                 producer_epoch: int, partitions: Iterable[TopicPartition]
                                 ) -> dict[TopicPartition, int]:
        """AddPartitionsToTxn v4+ with verify_only (KIP-890, from partition leaders): is
        each partition in the ongoing transaction? TRANSACTION_ABORTABLE if not."""
        wanted = list(partitions)

        def all_(error: int) -> dict[TopicPartition, int]:
            return dict.fromkeys(wanted, error)

        if not transactional_id:
            return all_(ErrorCode.INVALID_REQUEST)
        error, entry = self.manager.get_transaction_state(transactional_id)
        if error:
            return all_(error)
        if entry is None or entry.metadata.producer_id != producer_id:
            return all_(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        metadata = entry.metadata
        if metadata.producer_epoch != producer_epoch:
            return all_(ErrorCode.PRODUCER_FENCED)
        if metadata.state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT):
            return all_(ErrorCode.CONCURRENT_TRANSACTIONS)
        return {tp: ErrorCode.NONE if tp in metadata.topic_partitions
                else ErrorCode.TRANSACTION_ABORTABLE for tp in wanted}

    async def handle_add_offsets(self, transactional_id: str, producer_id: int,
                                 producer_epoch: int, group_id: str) -> int:
        """AddOffsetsToTxn: the group's __consumer_offsets partition joins the
        transaction (TxnOffsetCommit writes there)."""
        tp = (GROUP_METADATA_TOPIC, self.group_partition_for(group_id))
        return await self.handle_add_partitions(transactional_id, producer_id, producer_epoch,
                                                [tp])

    # ---- EndTxn -----------------------------------------------------------------------

    async def handle_end_transaction(self, transactional_id: str, producer_id: int,
                                     producer_epoch: int, result: TransactionResult) -> int:
        return await self._end_transaction(transactional_id, producer_id, producer_epoch,
                                           result, is_from_client=True)

    async def _end_transaction(self, transactional_id: str, producer_id: int,
                               producer_epoch: int, result: TransactionResult,
                               is_from_client: bool) -> int:
        # Everything up to the append runs without yielding: a fence prepared by the
        # caller is taken over here before any other request sees the id.
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        error, entry = self.manager.get_transaction_state(transactional_id)
        if error:
            return error
        if entry is None:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        coordinator_epoch = entry.coordinator_epoch
        metadata = entry.metadata
        prepared = self._prepare_end_transaction(metadata, producer_id, producer_epoch, result,
                                                 is_from_client)
        if isinstance(prepared, int):
            return prepared
        transit, is_epoch_fence = prepared
        error = await self.manager.append_transaction_to_log(transactional_id,
                                                             coordinator_epoch, transit)
        if error:
            log.info("%s: not sending markers, answering %s: writing %s with coordinator "
                     "epoch %d failed", transactional_id, ErrorCode(error).name, transit,
                     coordinator_epoch)
            if is_epoch_fence:
                found, now_entry = self.manager.get_transaction_state(transactional_id)
                if not found and now_entry is not None and (
                        now_entry.coordinator_epoch == coordinator_epoch):
                    # The bumped epoch was never written: the next fence does not bump again.
                    now_entry.metadata.has_failed_epoch_fence = True
            return error
        # Written: prepare the completion, answer the client, send the markers.
        found, entry = self.manager.get_transaction_state(transactional_id)
        if found:
            return found
        if entry is None:
            log.error("%s: this coordinator owns its partition but has no metadata for it",
                      transactional_id)
            return ErrorCode.NOT_COORDINATOR
        if entry.coordinator_epoch != coordinator_epoch:
            log.debug("%s: the coordinator epoch changed to %d after %s was written with %d",
                      transactional_id, entry.coordinator_epoch, result.name, coordinator_epoch)
            return ErrorCode.NOT_COORDINATOR
        metadata = entry.metadata
        if metadata.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if metadata.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if metadata.pending_transition_in_progress:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        expected = (TransactionState.PREPARE_COMMIT if result is TransactionResult.COMMIT
                    else TransactionState.PREPARE_ABORT)
        if metadata.state is not expected:
            return self._invalid_state(transactional_id, metadata.state, result)
        complete = metadata.prepare_complete(self.time.milliseconds())
        self._add_txn_markers_to_send(transactional_id, coordinator_epoch, result, metadata,
                                      complete)
        return ErrorCode.NONE

    def _prepare_end_transaction(self, metadata: TransactionMetadata, producer_id: int,
                                 producer_epoch: int, result: TransactionResult,
                                 is_from_client: bool
                                 ) -> tuple[TxnTransitMetadata, bool] | int:
        S = TransactionState
        tid = metadata.transactional_id
        if metadata.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        # Clients must use the current epoch; the coordinator's own aborts use a bumped one.
        if ((is_from_client and producer_epoch != metadata.producer_epoch)
                or producer_epoch < metadata.producer_epoch):
            return ErrorCode.PRODUCER_FENCED
        if (metadata.pending_state is not None
                and metadata.pending_state is not S.PREPARE_EPOCH_FENCE):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        state = metadata.state
        if state is S.ONGOING:
            next_state = S.PREPARE_COMMIT if result is TransactionResult.COMMIT else S.PREPARE_ABORT
            is_epoch_fence = False
            if next_state is S.PREPARE_ABORT and metadata.pending_state is S.PREPARE_EPOCH_FENCE:
                # Take over the fence: the abort is written with the bumped epoch.
                is_epoch_fence = True
                metadata.pending_state = None
                metadata.producer_epoch = producer_epoch
                metadata.last_producer_epoch = NO_PRODUCER_EPOCH
            return (metadata.prepare_abort_or_commit(next_state, self.time.milliseconds()),
                    is_epoch_fence)
        if state is S.COMPLETE_COMMIT:
            # A retried EndTxn whose answer was lost: the same answer.
            return (ErrorCode.NONE if result is TransactionResult.COMMIT
                    else self._invalid_state(tid, state, result))
        if state is S.COMPLETE_ABORT:
            return (ErrorCode.NONE if result is TransactionResult.ABORT
                    else self._invalid_state(tid, state, result))
        if state is S.PREPARE_COMMIT:
            return (ErrorCode.CONCURRENT_TRANSACTIONS if result is TransactionResult.COMMIT
                    else self._invalid_state(tid, state, result))
        if state is S.PREPARE_ABORT:
            return (ErrorCode.CONCURRENT_TRANSACTIONS if result is TransactionResult.ABORT
                    else self._invalid_state(tid, state, result))
        if state is S.EMPTY:
            return self._invalid_state(tid, state, result)
        raise IllegalTransitionError(
            f"found transactional id {tid} in state {state}: never expected")

    @staticmethod
    def _invalid_state(transactional_id: str, state: TransactionState,
                       result: TransactionResult) -> int:
        log.debug("%s: cannot %s a transaction in state %s", transactional_id,
                  result.name.lower(), state)
        return ErrorCode.INVALID_TXN_STATE

    # ---- markers and completion -------------------------------------------------------

    def _add_txn_markers_to_send(self, transactional_id: str, coordinator_epoch: int,
                                 result: TransactionResult, metadata: TransactionMetadata,
                                 complete: TxnTransitMetadata) -> None:
        partition = self.partition_for(transactional_id)
        task = self.manager.background.spawn(
            self._send_markers_and_complete(transactional_id, coordinator_epoch, result,
                                            metadata, complete),
            f"markers of {transactional_id}")
        if task is not None:
            tasks = self._completions.setdefault(partition, set())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            self._completing[transactional_id] = task

            def forget(done: asyncio.Task[None]) -> None:
                if self._completing.get(transactional_id) is done:
                    del self._completing[transactional_id]

            task.add_done_callback(forget)

    async def _send_markers_and_complete(self, transactional_id: str, coordinator_epoch: int,
                                         result: TransactionResult,
                                         metadata: TransactionMetadata,
                                         complete: TxnTransitMetadata) -> None:
        await self.marker_sender.send_markers(
            metadata.producer_id, metadata.producer_epoch, result, coordinator_epoch,
            frozenset(metadata.topic_partitions))
        while True:
            error, entry = self.manager.get_transaction_state(transactional_id)
            if error in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
                log.info("%s: no longer its coordinator at epoch %d (%s): not writing %s; the "
                         "next coordinator completes it", transactional_id, coordinator_epoch,
                         ErrorCode(error).name, complete.txn_state)
                return
            if entry is None:
                log.error("%s: this coordinator owns its partition but has no metadata for it",
                          transactional_id)
                return
            if entry.coordinator_epoch != coordinator_epoch or entry.metadata is not metadata:
                log.info("%s: its metadata changed after its markers were sent with "
                         "coordinator epoch %d: not writing %s", transactional_id,
                         coordinator_epoch, complete.txn_state)
                return
            error = await self.manager.append_transaction_to_log(
                transactional_id, coordinator_epoch, complete,
                retry_on_error=lambda e: e == ErrorCode.COORDINATOR_NOT_AVAILABLE)
            if error == ErrorCode.NONE:
                log.debug("%s: completed its transaction: %s", transactional_id,
                          complete.txn_state)
                return
            if error != ErrorCode.COORDINATOR_NOT_AVAILABLE:
                if error not in (ErrorCode.NOT_COORDINATOR,
                                 ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
                    log.error("%s: writing %s failed: %s", transactional_id,
                              complete.txn_state, ErrorCode(error).name)
                return
            log.info("%s: the coordinator is not available to write %s; retrying",
                     transactional_id, complete.txn_state)
            await self._sleep(COMPLETION_RETRY_BACKOFF_MS)

    async def _sleep(self, ms: int) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not done.done():
                done.set_result(None)

        task = self.timer.schedule(ms, wake)
        try:
            await done
        finally:
            task.cancel()

    # ---- timeouts ---------------------------------------------------------------------

    def _schedule_abort(self) -> None:
        self._abort_task = self.timer.schedule(
            self.config.abort_timed_out_transactions_interval_ms, self._run_abort)

    def _run_abort(self) -> None:
        if not self.is_active:
            return
        try:
            self.abort_timed_out_transactions()
        finally:
            self._schedule_abort()

    def abort_timed_out_transactions(self) -> None:
        """Aborts each Ongoing transaction past its timeout, fencing its producer."""
        for transactional_id, producer_id, producer_epoch in (
                self.manager.timed_out_transactions()):
            self.manager.background.spawn(
                self._abort_timed_out(transactional_id, producer_id, producer_epoch),
                f"abort timed out transaction of {transactional_id}")

    async def _abort_timed_out(self, transactional_id: str, producer_id: int,
                               producer_epoch: int) -> int:
        error, entry = self.manager.get_transaction_state(transactional_id)
        if error or entry is None:
            return error or ErrorCode.INVALID_PRODUCER_ID_MAPPING
        metadata = entry.metadata
        if metadata.producer_id != producer_id:
            log.error("%s: found producer id %d, not %d, when aborting its timed out "
                      "transaction", transactional_id, metadata.producer_id, producer_id)
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if (metadata.pending_transition_in_progress or metadata.state is not
                TransactionState.ONGOING or metadata.producer_epoch != producer_epoch):
            return ErrorCode.CONCURRENT_TRANSACTIONS  # it moved on meanwhile
        log.info("%s: aborting its transaction (producer id %d, epoch %d): older than its "
                 "timeout of %d ms", transactional_id, producer_id, producer_epoch,
                 metadata.txn_timeout_ms)
        fence = metadata.prepare_fence_producer_epoch()
        error = await self._end_transaction(transactional_id, fence.producer_id,
                                            fence.producer_epoch, TransactionResult.ABORT,
                                            is_from_client=False)
        _drop_untaken_fence(metadata)
        if error == ErrorCode.NONE:
            log.info("%s: rolled back its ongoing transaction after its timeout",
                     transactional_id)
        elif error in (ErrorCode.INVALID_PRODUCER_ID_MAPPING, ErrorCode.PRODUCER_FENCED,
                       ErrorCode.CONCURRENT_TRANSACTIONS):
            log.debug("%s: the rollback of its timed out transaction was cancelled: %s",
                      transactional_id, ErrorCode(error).name)
        else:
            log.warning("%s: the rollback of its timed out transaction failed: %s",
                        transactional_id, ErrorCode(error).name)
        return error

    # ---- DescribeTransactions, ListTransactions ---------------------------------------

    def handle_describe_transactions(self, transactional_id: str) -> DescribedTransaction:
        if not self.is_active:
            return DescribedTransaction(transactional_id, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if not transactional_id:
            return DescribedTransaction(transactional_id, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
        error, entry = self.manager.get_transaction_state(transactional_id)
        if error:
            return DescribedTransaction(transactional_id, error)
        if entry is None or entry.metadata.state is TransactionState.DEAD:
            return DescribedTransaction(transactional_id, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
        m = entry.metadata
        topics: dict[str, list[int]] = {}
        for topic, index in sorted(m.topic_partitions):
            topics.setdefault(topic, []).append(index)
        return DescribedTransaction(transactional_id, ErrorCode.NONE, m.state.state_name,
                                    m.producer_id, m.producer_epoch, m.txn_timeout_ms,
                                    m.txn_start_timestamp, topics)

    def handle_list_transactions(self, producer_ids: Iterable[int] = (),
                                 states: Iterable[str] = (), duration_ms: int = -1
                                 ) -> tuple[int, list[str], list[ListedTransaction]]:
        """(error, unknown state filters, transactions)."""
        if not self.is_active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, [], []
        return self.manager.list_transaction_states(producer_ids, states, duration_ms)
