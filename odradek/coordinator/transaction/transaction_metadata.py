"""TransactionMetadata and its state machine (Kafka's TransactionState and
TransactionMetadata, as Kafka 3.9 runs them: transaction version 1, no KIP-890 epoch bump
per transaction).

A change is made in two steps, as Kafka does: `prepare_*` checks the transition, sets
`pending_state` and returns a `TxnTransitMetadata` (the state to write to
__transaction_state); once that record is in the log and replicated,
`complete_transition_to` applies it. While a transition is pending, other requests for
the transactional id are answered CONCURRENT_TRANSACTIONS. A transition that is not
valid raises IllegalTransitionError: the coordinator checks the state first, so that is
a bug, never a client's error.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import Enum

from odradek.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SHORT_MAX = 2**15 - 1


class IllegalTransitionError(Exception):
    """A transition the state machine does not allow (Kafka's IllegalStateException)."""


class TransactionState(Enum):
    # (id in the log, name as DescribeTransactions and ListTransactions show it)
    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    @property
    def id(self) -> int:
        return self.value[0]

    @property
    def state_name(self) -> str:
        return self.value[1]

    @property
    def valid_previous_states(self) -> frozenset[TransactionState]:
        return _VALID_PREVIOUS_STATES[self]

    @property
    def is_expiration_allowed(self) -> bool:
        """transactional.id.expiration.ms applies only to ids without a transaction."""
        return self in (TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT,
                        TransactionState.COMPLETE_ABORT)

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState:
        for state in cls:
            if state.id == state_id:
                return state
        raise ValueError(f"unknown transaction state id {state_id}")

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        """By Kafka's name (case-sensitive, as Kafka's ListTransactions filter)."""
        for state in cls:
            if state.state_name == name:
                return state
        return None

    def __str__(self) -> str:
        return self.state_name


_S = TransactionState
_VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}


def is_epoch_exhausted(producer_epoch: int) -> bool:
    """Kafka never hands out Short.MaxValue, so that the coordinator can always fence the
    last epoch: from Short.MaxValue - 1 on, the next InitProducerId rotates the id."""
    return producer_epoch >= SHORT_MAX - 1


@dataclass(frozen=True, slots=True)
class TxnTransitMetadata:
    """The state a transition leads to: what is written to __transaction_state."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    txn_state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int


@dataclass(eq=False)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    last_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    txn_timeout_ms: int = 60_000
    state: TransactionState = TransactionState.EMPTY
    topic_partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    # The state a transition in progress leads to (written, not yet replicated).
    pending_state: TransactionState | None = None
    # A fence whose record could not be written: the next fence does not bump again (the
    # bumped epoch was never given to anyone).
    has_failed_epoch_fence: bool = False

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    def has_pending_transaction(self) -> bool:
        return self.state in (TransactionState.ONGOING, TransactionState.PREPARE_ABORT,
                              TransactionState.PREPARE_COMMIT)

    def add_partitions(self, partitions: set[TopicPartition] | frozenset[TopicPartition]
                       ) -> None:
        self.topic_partitions |= partitions

    def remove_partition(self, tp: TopicPartition) -> None:
        """A partition whose marker is written, or that no longer exists."""
        if self.state not in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT):
            raise IllegalTransitionError(
                f"{self.transactional_id}: removing a partition whose marker was sent in "
                f"state {self.state} (pending {self.pending_state}), not expected")
        self.topic_partitions.discard(tp)

    # ---- preparing transitions -------------------------------------------------------------

    def prepare_no_transit(self) -> TxnTransitMetadata:
        """The current state, without a transition (no pending state set)."""
        return self._transit(self.state, self.producer_id, self.producer_epoch,
                             self.last_producer_epoch, self.txn_timeout_ms,
                             frozenset(self.topic_partitions), self.txn_start_timestamp,
                             self.txn_last_update_timestamp)

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        """Fences the producer of an ongoing transaction (InitProducerId from another
        producer, or the transaction's timeout): the epoch goes up by one and the
        transaction is aborted with it. This epoch is never handed out."""
        if self.producer_epoch == SHORT_MAX:
            raise IllegalTransitionError(
                f"{self.transactional_id}: cannot fence a producer with epoch Short.MaxValue")
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self.prepare_transition_to(TransactionState.PREPARE_EPOCH_FENCE,
                                          producer_epoch=bumped,
                                          last_producer_epoch=NO_PRODUCER_EPOCH)

    def prepare_increment_producer_epoch(self, new_txn_timeout_ms: int,
                                         expected_producer_epoch: int | None,
                                         update_timestamp: int
                                         ) -> TxnTransitMetadata | int:
        """InitProducerId on an existing id: the next epoch, or (KIP-360, with the
        client's current epoch) a retry's answer; PRODUCER_FENCED (an int error) for an
        epoch that is neither the current nor the last one."""
        bump = (expected_producer_epoch is None or self.producer_epoch == NO_PRODUCER_EPOCH
                or expected_producer_epoch == self.producer_epoch)
        # (Kafka checks exhaustion before anything; a retry or a zombie at the last epoch
        # is answered here as at any other, rather than with a server error.)
        if bump and self.is_producer_epoch_exhausted:
            raise IllegalTransitionError(
                f"{self.transactional_id}: no more epochs for producer id {self.producer_id}")
        bumped = self.producer_epoch + 1
        if expected_producer_epoch is None:
            next_epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif bump:
            next_epoch, last_epoch = bumped, self.producer_epoch
        elif expected_producer_epoch == self.last_producer_epoch:
            # A retry of a bump whose answer the producer never got: the same answer.
            next_epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            log.info("%s: expected producer epoch %d is neither the current epoch %d nor "
                     "the previous one %d", self.transactional_id, expected_producer_epoch,
                     self.producer_epoch, self.last_producer_epoch)
            return ErrorCode.PRODUCER_FENCED
        return self.prepare_transition_to(
            TransactionState.EMPTY, producer_epoch=next_epoch, last_producer_epoch=last_epoch,
            txn_timeout_ms=new_txn_timeout_ms, topic_partitions=frozenset(),
            txn_start_timestamp=-1, txn_last_update_timestamp=update_timestamp)

    def prepare_producer_id_rotation(self, new_producer_id: int, new_txn_timeout_ms: int,
                                     update_timestamp: int, record_last_epoch: bool
                                     ) -> TxnTransitMetadata:
        """The epochs of the producer id are exhausted: a new producer id, epoch 0."""
        if self.has_pending_transaction():
            raise IllegalTransitionError(
                f"{self.transactional_id}: cannot rotate producer ids while a transaction "
                f"is pending")
        return self.prepare_transition_to(
            TransactionState.EMPTY, producer_id=new_producer_id, producer_epoch=0,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            txn_timeout_ms=new_txn_timeout_ms, topic_partitions=frozenset(),
            txn_start_timestamp=-1, txn_last_update_timestamp=update_timestamp)

    def prepare_add_partitions(self, added: set[TopicPartition] | frozenset[TopicPartition],
                               update_timestamp: int) -> TxnTransitMetadata:
        start = (update_timestamp if self.state in (
            TransactionState.EMPTY, TransactionState.COMPLETE_ABORT,
            TransactionState.COMPLETE_COMMIT) else self.txn_start_timestamp)
        return self.prepare_transition_to(
            TransactionState.ONGOING, topic_partitions=frozenset(self.topic_partitions | added),
            txn_start_timestamp=start, txn_last_update_timestamp=update_timestamp)

    def prepare_abort_or_commit(self, new_state: TransactionState, update_timestamp: int
                                ) -> TxnTransitMetadata:
        return self.prepare_transition_to(new_state, txn_last_update_timestamp=update_timestamp)

    def prepare_complete(self, update_timestamp: int) -> TxnTransitMetadata:
        new_state = (TransactionState.COMPLETE_COMMIT
                     if self.state is TransactionState.PREPARE_COMMIT
                     else TransactionState.COMPLETE_ABORT)
        # The Prepare* record is in the log: a failed fence before it no longer matters.
        self.has_failed_epoch_fence = False
        return self.prepare_transition_to(new_state, topic_partitions=frozenset(),
                                          txn_last_update_timestamp=update_timestamp)

    def prepare_dead(self) -> TxnTransitMetadata:
        return self.prepare_transition_to(TransactionState.DEAD, topic_partitions=frozenset())

    def prepare_transition_to(self, state: TransactionState, *,
                              producer_id: int | None = None,
                              producer_epoch: int | None = None,
                              last_producer_epoch: int | None = None,
                              txn_timeout_ms: int | None = None,
                              topic_partitions: frozenset[TopicPartition] | None = None,
                              txn_start_timestamp: int | None = None,
                              txn_last_update_timestamp: int | None = None
                              ) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise IllegalTransitionError(
                f"{self.transactional_id}: preparing a transition to {state} while one to "
                f"{self.pending_state} is pending")
        pid = self.producer_id if producer_id is None else producer_id
        epoch = self.producer_epoch if producer_epoch is None else producer_epoch
        if pid < 0:
            raise IllegalTransitionError(f"illegal new producer id {pid}")
        # A new id's epoch is -1 until its first InitProducerId completes.
        if state is not TransactionState.DEAD and epoch < 0:
            raise IllegalTransitionError(f"illegal new producer epoch {epoch}")
        if self.state not in state.valid_previous_states:
            raise IllegalTransitionError(
                f"{self.transactional_id}: preparing a transition to {state} failed: "
                f"{self.state} is not a valid previous state of {state}")
        transit = self._transit(
            state, pid, epoch,
            self.last_producer_epoch if last_producer_epoch is None else last_producer_epoch,
            self.txn_timeout_ms if txn_timeout_ms is None else txn_timeout_ms,
            frozenset(self.topic_partitions) if topic_partitions is None else topic_partitions,
            self.txn_start_timestamp if txn_start_timestamp is None else txn_start_timestamp,
            (self.txn_last_update_timestamp if txn_last_update_timestamp is None
             else txn_last_update_timestamp))
        log.debug("%s: prepare transition from %s to %s", self.transactional_id, self.state,
                  transit)
        self.pending_state = state
        return transit

    def _transit(self, state: TransactionState, producer_id: int, producer_epoch: int,
                 last_producer_epoch: int, txn_timeout_ms: int,
                 topic_partitions: frozenset[TopicPartition], txn_start_timestamp: int,
                 txn_last_update_timestamp: int) -> TxnTransitMetadata:
        # The last producer id is the one in use before this transition.
        return TxnTransitMetadata(producer_id, self.producer_id, producer_epoch,
                                  last_producer_epoch, txn_timeout_ms, state, topic_partitions,
                                  txn_start_timestamp, txn_last_update_timestamp)

    # ---- completing a transition -----------------------------------------------------------

    def complete_transition_to(self, transit: TxnTransitMetadata) -> None:
        """Applies a prepared transition once its record is written and replicated, with
        Kafka's checks: the pending state matches; the epoch is the same, the next one,
        or 0 with a new producer id; partitions only grow while Ongoing."""
        to_state = self.pending_state
        if to_state is None:
            raise IllegalTransitionError(
                f"{self.transactional_id}: completing a transition to {transit.txn_state} "
                f"without a pending state")
        if to_state is not transit.txn_state:
            self._fail(transit)
        S = TransactionState
        if to_state is S.EMPTY:  # InitProducerId
            if ((self.producer_epoch != transit.producer_epoch
                 and not self._valid_producer_epoch_bump(transit))
                    or transit.topic_partitions or transit.txn_start_timestamp != -1):
                self._fail(transit)
            self.txn_timeout_ms = transit.txn_timeout_ms
            self.producer_epoch = transit.producer_epoch
            self.last_producer_epoch = transit.last_producer_epoch
            self.producer_id = transit.producer_id
            self.last_producer_id = transit.last_producer_id
        elif to_state is S.ONGOING:  # AddPartitionsToTxn, AddOffsetsToTxn
            if (not self._valid_producer_epoch(transit)
                    or not self.topic_partitions <= transit.topic_partitions
                    or self.txn_timeout_ms != transit.txn_timeout_ms
                    or self.txn_start_timestamp > transit.txn_start_timestamp):
                self._fail(transit)
            self.txn_start_timestamp = transit.txn_start_timestamp
            self.add_partitions(transit.topic_partitions)
        elif to_state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):  # EndTxn
            if (not self._valid_producer_epoch(transit)
                    or frozenset(self.topic_partitions) != transit.topic_partitions
                    or self.txn_timeout_ms != transit.txn_timeout_ms
                    or self.txn_start_timestamp != transit.txn_start_timestamp):
                self._fail(transit)
        elif to_state in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT):  # markers written
            if (not self._valid_producer_epoch(transit)
                    or self.txn_timeout_ms != transit.txn_timeout_ms
                    or transit.txn_start_timestamp == -1):
                self._fail(transit)
            self.txn_start_timestamp = transit.txn_start_timestamp
            self.topic_partitions.clear()
        elif to_state is S.PREPARE_EPOCH_FENCE:
            # The fence goes on to PrepareAbort before anything is written: never completed.
            self._fail(transit)
        else:  # DEAD: an expired id leaves the cache; its state is never applied
            raise IllegalTransitionError(
                f"{self.transactional_id}: a transition to Dead is completed by removing "
                f"the id from the cache, not by applying it")
        log.debug("%s: complete transition from %s to %s", self.transactional_id, self.state,
                  transit)
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.pending_state = None
        self.state = to_state

    def _valid_producer_epoch(self, transit: TxnTransitMetadata) -> bool:
        return (transit.producer_epoch == self.producer_epoch
                and transit.producer_id == self.producer_id)

    def _valid_producer_epoch_bump(self, transit: TxnTransitMetadata) -> bool:
        return (transit.producer_epoch == self.producer_epoch + 1
                or (transit.producer_epoch == 0 and transit.producer_id != self.producer_id))

    def _fail(self, transit: TxnTransitMetadata) -> None:
        raise IllegalTransitionError(
            f"{self.transactional_id}: {self} failed its transition to {transit}: not valid")

    def __str__(self) -> str:
        return (f"TransactionMetadata(transactionalId={self.transactional_id}, "
                f"producerId={self.producer_id}, lastProducerId={self.last_producer_id}, "
                f"producerEpoch={self.producer_epoch}, "
                f"lastProducerEpoch={self.last_producer_epoch}, "
                f"txnTimeoutMs={self.txn_timeout_ms}, state={self.state}, "
                f"pendingState={self.pending_state}, "
                f"topicPartitions={sorted(self.topic_partitions)}, "
                f"txnStartTimestamp={self.txn_start_timestamp}, "
                f"txnLastUpdateTimestamp={self.txn_last_update_timestamp})")
