"""The transaction coordinator on real logs and a manual clock (the group harness's
LogManager, ReplicaManager and Controller, plus __transaction_state): InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, fencing, KIP-360, epoch exhaustion, timeouts,
loading after a coordinator change or a restart, expiry, DescribeTransactions and
ListTransactions; and the handlers through decoded requests at each version."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest
from support.groups import GroupHarness

from odradek.broker.producer_ids import ProducerIdManager
from odradek.cluster.topics import GROUP_METADATA_TOPIC, TRANSACTION_STATE_TOPIC
from odradek.coordinator.transaction import transaction_coordinator
from odradek.coordinator.transaction.apis import TransactionApis
from odradek.coordinator.transaction.transaction_coordinator import (
    TransactionCoordinator,
    TransactionResult,
)
from odradek.coordinator.transaction.transaction_log import key_to_bytes
from odradek.coordinator.transaction.transaction_metadata import (
    SHORT_MAX,
    TopicPartition,
    TransactionMetadata,
    TransactionState,
)
from odradek.coordinator.transaction.transaction_state_manager import (
    TransactionConfig,
    TransactionStateManager,
)
from odradek.protocol.api_keys import API_SPECS, ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.framing import Request
from odradek.protocol.message import Message
from odradek.protocol.messages import (
    add_offsets_to_txn_request,
    add_partitions_to_txn_request,
    describe_transactions_request,
    end_txn_request,
    init_producer_id_request,
    list_transactions_request,
)
from odradek.protocol.messages.request_header import RequestHeader
from odradek.protocol.records import SimpleRecord, build_record_batch
from odradek.server.config import BrokerConfig
from odradek.server.network import RequestContext

S = TransactionState
E = ErrorCode
COMMIT = TransactionResult.COMMIT
ABORT = TransactionResult.ABORT
TXN_PARTITIONS = 4
TIMEOUT_MS = 60_000
ABORT_INTERVAL_MS = 1_000
EXPIRATION_MS = 3_600_000
P0: TopicPartition = ("events", 0)
P1: TopicPartition = ("events", 1)


class FakeMarkerSender:
    """Records the markers asked for; holds them while `gate` is set and not open."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, TransactionResult, int, frozenset[TopicPartition]]] = []
        self.gate: asyncio.Event | None = None

    async def send_markers(self, producer_id: int, producer_epoch: int,
                           result: TransactionResult, coordinator_epoch: int,
                           partitions: frozenset[TopicPartition]) -> None:
        self.calls.append((producer_id, producer_epoch, result, coordinator_epoch, partitions))
        if self.gate is not None:
            await self.gate.wait()


class TxnHarness:
    def __init__(self, directory: Path, *, config: TransactionConfig | None = None) -> None:
        self.groups = GroupHarness(directory)
        self.config = config or TransactionConfig(
            transaction_log_num_partitions=TXN_PARTITIONS,
            abort_timed_out_transactions_interval_ms=ABORT_INTERVAL_MS,
            transactional_id_expiration_ms=EXPIRATION_MS,
            remove_expired_transactional_ids_interval_ms=60_000)
        self.sender = FakeMarkerSender()
        self._build()

        async def create() -> None:
            await self.groups.controller.create_topic(
                TRANSACTION_STATE_TOPIC, TXN_PARTITIONS, 1, self.config.topic_configs(1))

        asyncio.run(create())
        self.time.run_pending()

    @property
    def time(self) -> Any:
        return self.groups.time

    def _build(self) -> None:
        self.producer_ids = ProducerIdManager(self.groups.controller.store)
        self.manager, self.coordinator = self.new_coordinator(self.sender)
        self.coordinator.startup()

    def new_coordinator(self, sender: FakeMarkerSender
                        ) -> tuple[TransactionStateManager, TransactionCoordinator]:
        manager = TransactionStateManager(self.config, self.groups.replica_manager, self.time,
                                          self.time)
        coordinator = TransactionCoordinator(
            self.config, manager, self.producer_ids, sender,
            self.groups.coordinator.partition_for, self.time, self.time)
        return manager, coordinator

    def restart(self) -> None:
        """A broker restart: everything built again from the directory. The loads run at
        the next settle(), on the event loop (completions start tasks)."""
        self.coordinator.shutdown()
        self.groups.restart(load=False)
        self.sender = FakeMarkerSender()
        self._build()

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run(coro)

    async def settle(self) -> None:
        """Runs what is due and waits for the coordinator's background work."""
        for _ in range(10):
            self.time.run_pending()
            await asyncio.sleep(0)
            await self.manager.background.wait_idle()

    # ---- shorthands -------------------------------------------------------------------

    async def init(self, tid: str | None, timeout_ms: int = TIMEOUT_MS,
                   expected: tuple[int, int] | None = None) -> tuple[int, int, int]:
        r = await self.coordinator.handle_init_producer_id(tid, timeout_ms, expected)
        return r.producer_id, r.producer_epoch, r.error

    def metadata(self, tid: str) -> TransactionMetadata:
        error, entry = self.manager.get_transaction_state(tid)
        assert error == E.NONE and entry is not None, (error, entry)
        return entry.metadata

    def state(self, tid: str) -> TransactionState:
        return self.metadata(tid).state


@pytest.fixture
def h(tmp_path: Path) -> Any:
    harness = TxnHarness(tmp_path)
    yield harness
    harness.coordinator.shutdown()
    harness.groups.close()


# ---- InitProducerId ---------------------------------------------------------------------


def test_init_new_and_existing_ids(h: TxnHarness) -> None:
    async def run() -> None:
        pid, epoch, error = await h.init("t1")
        assert (error, epoch) == (E.NONE, 0) and pid >= 0
        m = h.metadata("t1")
        assert (m.state, m.producer_id, m.txn_timeout_ms) == (S.EMPTY, pid, TIMEOUT_MS)
        # Again: the same producer id, the next epoch, the new timeout.
        assert await h.init("t1", 30_000) == (pid, 1, E.NONE)
        assert h.metadata("t1").txn_timeout_ms == 30_000
        other, _, _ = await h.init("t2")
        assert other != pid
    h.run(run())


def test_concurrent_init_of_a_new_id(h: TxnHarness) -> None:
    async def run() -> None:
        results = await asyncio.gather(h.init("t"), h.init("t"), h.init("t"))
        # One creates the id; each other one bumps its epoch after it, or finds it in
        # the middle of a transition (and retries): never a second producer id.
        done = [r for r in results if r[2] == E.NONE]
        assert all(r[2] in (E.NONE, E.CONCURRENT_TRANSACTIONS) for r in results)
        assert {r[0] for r in done} == {h.metadata("t").producer_id}
        assert sorted(r[1] for r in done) == list(range(len(done)))
    h.run(run())


def test_init_without_transactional_id(h: TxnHarness) -> None:
    async def run() -> None:
        a = await h.init(None, 0)
        b = await h.init(None, 0)
        assert a[1:] == b[1:] == (0, E.NONE) and a[0] != b[0]
        assert (await h.init(""))[2] == E.INVALID_REQUEST
    h.run(run())


def test_init_transaction_timeout_bounds(h: TxnHarness) -> None:
    async def run() -> None:
        maximum = h.config.transaction_max_timeout_ms
        assert await h.init("t", 0) == (-1, -1, E.INVALID_TRANSACTION_TIMEOUT)
        assert (await h.init("t", maximum + 1))[2] == E.INVALID_TRANSACTION_TIMEOUT
        assert (await h.init("t", maximum))[2] == E.NONE
    h.run(run())


def test_kip360_recovery_with_current_producer_id_and_epoch(h: TxnHarness) -> None:
    async def run() -> None:
        pid, _, _ = await h.init("t")
        assert await h.init("t", expected=(pid, 0)) == (pid, 1, E.NONE)
        # The answer was lost: the retry with the same epoch gets the same answer.
        assert await h.init("t", expected=(pid, 0)) == (pid, 1, E.NONE)
        assert h.metadata("t").producer_epoch == 1
        assert await h.init("t", expected=(pid, 1)) == (pid, 2, E.NONE)
        # A zombie's epoch, or another producer id.
        assert (await h.init("t", expected=(pid, 0)))[2] == E.PRODUCER_FENCED
        assert (await h.init("t", expected=(pid + 100, 2)))[2] == E.PRODUCER_FENCED
        # An id created by the request itself accepts whatever the producer had.
        new_pid, epoch, error = await h.init("fresh", expected=(777, 3))
        assert error == E.NONE and epoch == 0 and new_pid != 777
    h.run(run())


def test_epoch_exhaustion_rotates_the_producer_id(h: TxnHarness) -> None:
    async def run() -> None:
        pid, _, _ = await h.init("t")
        h.metadata("t").producer_epoch = SHORT_MAX - 3
        assert await h.init("t") == (pid, SHORT_MAX - 2, E.NONE)
        assert await h.init("t") == (pid, SHORT_MAX - 1, E.NONE)
        new_pid, epoch, error = await h.init("t")
        assert (epoch, error) == (0, E.NONE) and new_pid != pid
        m = h.metadata("t")
        assert (m.producer_id, m.last_producer_id) == (new_pid, pid)

        # With KIP-360: the rotation remembers the last epoch, so a retry of it gets the
        # same answer.
        pid2, _, _ = await h.init("u")
        h.metadata("u").producer_epoch = SHORT_MAX - 1
        rotated, epoch, error = await h.init("u", expected=(pid2, SHORT_MAX - 1))
        assert (epoch, error) == (0, E.NONE) and rotated != pid2
        assert await h.init("u", expected=(pid2, SHORT_MAX - 1)) == (rotated, 0, E.NONE)
    h.run(run())


# ---- AddPartitionsToTxn, AddOffsetsToTxn ------------------------------------------------


def test_add_partitions(h: TxnHarness) -> None:
    async def run() -> None:
        pid, epoch, _ = await h.init("t")
        add = h.coordinator.handle_add_partitions
        assert await add("t", pid, epoch, [P0]) == E.NONE
        m = h.metadata("t")
        assert m.state is S.ONGOING and m.topic_partitions == {P0}
        start = m.txn_start_timestamp
        assert start == h.time.milliseconds()
        h.time.advance(5)
        assert await add("t", pid, epoch, [P0]) == E.NONE  # already there: nothing written
        assert await add("t", pid, epoch, [P1]) == E.NONE
        assert h.metadata("t").topic_partitions == {P0, P1}
        assert h.metadata("t").txn_start_timestamp == start
        assert await add("t", pid + 1, epoch, [P0]) == E.INVALID_PRODUCER_ID_MAPPING
        assert await add("t", pid, epoch + 1, [P0]) == E.PRODUCER_FENCED
        assert await add("nobody", pid, epoch, [P0]) == E.INVALID_PRODUCER_ID_MAPPING
        assert await add("", pid, epoch, [P0]) == E.INVALID_REQUEST
    h.run(run())


def test_add_offsets_adds_the_groups_offsets_partition(h: TxnHarness) -> None:
    async def run() -> None:
        pid, epoch, _ = await h.init("t")
        assert await h.coordinator.handle_add_offsets("t", pid, epoch, "my-group") == E.NONE
        group_partition = h.groups.coordinator.partition_for("my-group")
        assert h.metadata("t").topic_partitions == {(GROUP_METADATA_TOPIC, group_partition)}
    h.run(run())


def test_verify_partitions(h: TxnHarness) -> None:
    async def run() -> None:
        pid, epoch, _ = await h.init("t")
        await h.coordinator.handle_add_partitions("t", pid, epoch, [P0])
        verify = h.coordinator.handle_verify_partitions
        assert verify("t", pid, epoch, [P0, P1]) == {P0: E.NONE, P1: E.TRANSACTION_ABORTABLE}
        assert verify("t", pid, epoch + 1, [P0]) == {P0: E.PRODUCER_FENCED}
        assert verify("t", pid + 1, epoch, [P0]) == {P0: E.INVALID_PRODUCER_ID_MAPPING}
    h.run(run())


# ---- EndTxn -----------------------------------------------------------------------------


def test_commit_writes_markers_then_completes(h: TxnHarness) -> None:
    async def run() -> None:
        pid, epoch, _ = await h.init("t")
        await h.coordinator.handle_add_partitions("t", pid, epoch, [P0, P1])
        h.sender.gate = asyncio.Event()
        assert await h.coordinator.handle_end_transaction("t", pid, epoch, COMMIT) == E.NONE
        await asyncio.sleep(0)
        m = h.metadata("t")
        assert m.state is S.PREPARE_COMMIT and m.pending_state is S.COMPLETE_COMMIT
        ce = h.manager.transaction_metadata_cache[h.coordinator.partition_for("t")]
        assert h.sender.calls == [(pid, epoch, COMMIT, ce.coordinator_epoch,
                                   frozenset({P0, P1}))]
        # Until the markers are written, the id is busy.
        end = h.coordinator.handle_end_transaction
        assert await end("t", pid, epoch, COMMIT) == E.CONCURRENT_TRANSACTIONS
        assert await end("t", pid, epoch, ABORT) == E.CONCURRENT_TRANSACTIONS
        assert await h.coordinator.handle_add_partitions(
            "t", pid, epoch, [P0]) == E.CONCURRENT_TRANSACTIONS
        assert (await h.init("t"))[2] == E.CONCURRENT_TRANSACTIONS
        h.sender.gate.set()
        await h.settle()
        m = h.metadata("t")
        assert m.state is S.COMPLETE_COMMIT and m.pending_state is None
        assert not m.topic_partitions
        # A retried EndTxn gets the same answer; the other result is refused.
        assert await end("t", pid, epoch, COMMIT) == E.NONE
        assert await end("t", pid, epoch, ABORT) == E.INVALID_TXN_STATE
        # The next transaction.
        assert await h.coordinator.handle_add_partitions("t", pid, epoch, [P1]) == E.NONE
        assert await end("t", pid, epoch, ABORT) == E.NONE
        await h.settle()
        assert h.state("t") is S.COMPLETE_ABORT
        assert h.sender.calls[-1][2] is ABORT
        assert await end("t", pid, epoch, ABORT) == E.NONE
        assert await end("t", pid, epoch, COMMIT) == E.INVALID_TXN_STATE
    h.run(run())


def test_add_partitions_waits_for_the_previous_completion(
        h: TxnHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    """The next transaction's AddPartitionsToTxn, arriving while the previous one's
    markers are still being written here, is answered once they are (not
    CONCURRENT_TRANSACTIONS, which costs the client a 20 ms back-off); past
    COMPLETION_WAIT_MS it is CONCURRENT_TRANSACTIONS as before."""
    async def run() -> None:
        pid, epoch, _ = await h.init("t")
        add = h.coordinator.handle_add_partitions
        assert await add("t", pid, epoch, [P0]) == E.NONE
        h.sender.gate = asyncio.Event()
        assert await h.coordinator.handle_end_transaction("t", pid, epoch, COMMIT) == E.NONE
        waiting = asyncio.ensure_future(add("t", pid, epoch, [P1]))
        for _ in range(3):
            await asyncio.sleep(0)
        assert not waiting.done()
        assert h.state("t") is S.PREPARE_COMMIT
        h.sender.gate.set()
        assert await waiting == E.NONE
        m = h.metadata("t")
        assert m.state is S.ONGOING and m.topic_partitions == {P1}
        # A completion that does not end in time: the answer Kafka gives.
        monkeypatch.setattr(transaction_coordinator, "COMPLETION_WAIT_MS", 20)
        h.sender.gate = asyncio.Event()
        assert await h.coordinator.handle_end_transaction("t", pid, epoch, ABORT) == E.NONE
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await add("t", pid, epoch, [P0]) == E.CONCURRENT_TRANSACTIONS
        assert loop.time() - started >= 0.018
        # No completion in flight (a Prepare* state as loaded): answered at once.
        h.sender.gate.set()
        await h.settle()
        assert await add("t", pid, epoch, [P0]) == E.NONE
        h.metadata("t").state = S.PREPARE_ABORT
        monkeypatch.setattr(transaction_coordinator, "COMPLETION_WAIT_MS", 600_000)
        assert await asyncio.wait_for(add("t", pid, epoch, [P1]), 10) == (
            E.CONCURRENT_TRANSACTIONS)
    h.run(run())


def test_end_txn_errors(h: TxnHarness) -> None:
    async def run() -> None:
        pid, epoch, _ = await h.init("t")
        end = h.coordinator.handle_end_transaction
        assert await end("t", pid, epoch, COMMIT) == E.INVALID_TXN_STATE  # Empty
        assert await end("t", pid, epoch, ABORT) == E.INVALID_TXN_STATE
        assert await end("nobody", pid, epoch, COMMIT) == E.INVALID_PRODUCER_ID_MAPPING
        assert await end("", pid, epoch, COMMIT) == E.INVALID_REQUEST
        await h.coordinator.handle_add_partitions("t", pid, epoch, [P0])
        assert await end("t", pid + 1, epoch, COMMIT) == E.INVALID_PRODUCER_ID_MAPPING
        assert await end("t", pid, epoch + 1, COMMIT) == E.PRODUCER_FENCED
        assert await end("t", pid, epoch - 1, COMMIT) == E.PRODUCER_FENCED
        # Prepared, the other result is the wrong state.
        h.sender.gate = asyncio.Event()
        assert await end("t", pid, epoch, COMMIT) == E.NONE
        await asyncio.sleep(0)
        h.metadata("t").pending_state = None  # as if loaded, without a completion in flight
        assert await end("t", pid, epoch, ABORT) == E.INVALID_TXN_STATE
        assert await end("t", pid, epoch, COMMIT) == E.CONCURRENT_TRANSACTIONS
        h.coordinator.on_resignation(h.coordinator.partition_for("t"))
    h.run(run())


def test_end_txn_in_prepare_without_pending_completion(h: TxnHarness) -> None:
    """A Prepare* state whose completion is not in flight (as loaded): a retry of the same
    result is CONCURRENT_TRANSACTIONS, the other INVALID_TXN_STATE."""
    async def run() -> None:
        pid, epoch, _ = await h.init("t")
        await h.coordinator.handle_add_partitions("t", pid, epoch, [P0])
        m = h.metadata("t")
        m.state = S.PREPARE_ABORT
        end = h.coordinator.handle_end_transaction
        assert await end("t", pid, epoch, ABORT) == E.CONCURRENT_TRANSACTIONS
        assert await end("t", pid, epoch, COMMIT) == E.INVALID_TXN_STATE
        m.state = S.PREPARE_COMMIT
        assert await end("t", pid, epoch, COMMIT) == E.CONCURRENT_TRANSACTIONS
        assert await end("t", pid, epoch, ABORT) == E.INVALID_TXN_STATE
    h.run(run())


# ---- fencing and timeouts ---------------------------------------------------------------


def test_new_producer_fences_an_ongoing_transaction(h: TxnHarness) -> None:
    async def run() -> None:
        pid, epoch, _ = await h.init("t")
        await h.coordinator.handle_add_partitions("t", pid, epoch, [P0])
        h.sender.gate = asyncio.Event()
        # The new producer: its ongoing transaction is aborted with a bumped epoch first.
        assert await h.init("t") == (-1, -1, E.CONCURRENT_TRANSACTIONS)
        m = h.metadata("t")
        assert m.state is S.PREPARE_ABORT and m.producer_epoch == epoch + 1
        await asyncio.sleep(0)
        assert h.sender.calls[-1][:3] == (pid, epoch + 1, ABORT)
        assert (await h.init("t"))[2] == E.CONCURRENT_TRANSACTIONS  # still aborting
        # The zombie is fenced.
        end = h.coordinator.handle_end_transaction
        assert await end("t", pid, epoch, COMMIT) == E.PRODUCER_FENCED
        assert await h.coordinator.handle_add_partitions(
            "t", pid, epoch, [P1]) == E.PRODUCER_FENCED
        h.sender.gate.set()
        await h.settle()
        assert h.state("t") is S.COMPLETE_ABORT
        # The new producer's retry gets the epoch after the fence.
        assert await h.init("t") == (pid, epoch + 2, E.NONE)
    h.run(run())


def test_fencing_at_the_last_epoch_rotates_the_producer_id(h: TxnHarness) -> None:
    async def run() -> None:
        pid, _, _ = await h.init("t")
        h.metadata("t").producer_epoch = SHORT_MAX - 1
        await h.coordinator.handle_add_partitions("t", pid, SHORT_MAX - 1, [P0])
        assert (await h.init("t"))[2] == E.CONCURRENT_TRANSACTIONS
        await h.settle()
        m = h.metadata("t")
        assert (m.state, m.producer_epoch) == (S.COMPLETE_ABORT, SHORT_MAX)
        new_pid, epoch, error = await h.init("t")
        assert (epoch, error) == (0, E.NONE) and new_pid != pid
    h.run(run())


def test_failed_fence_write_does_not_bump_again(h: TxnHarness) -> None:
    async def run() -> None:
        pid, epoch, _ = await h.init("t")
        await h.coordinator.handle_add_partitions("t", pid, epoch, [P0])
        tp = (TRANSACTION_STATE_TOPIC, h.coordinator.partition_for("t"))
        partition = h.groups.replica_manager.partitions.pop(tp)  # the write fails
        assert (await h.init("t"))[2] == E.COORDINATOR_NOT_AVAILABLE
        m = h.metadata("t")
        assert m.has_failed_epoch_fence and m.pending_state is None
        assert m.state is S.ONGOING and m.producer_epoch == epoch + 1
        h.groups.replica_manager.partitions[tp] = partition
        assert (await h.init("t"))[2] == E.CONCURRENT_TRANSACTIONS
        assert h.metadata("t").producer_epoch == epoch + 1  # not bumped twice
        await h.settle()
        assert h.state("t") is S.COMPLETE_ABORT
    h.run(run())


def test_timed_out_transaction_is_aborted(h: TxnHarness) -> None:
    async def run() -> None:
        pid, epoch, _ = await h.init("t", 10_000)
        await h.coordinator.handle_add_partitions("t", pid, epoch, [P0])
        other, other_epoch, _ = await h.init("long", 100_000)
        await h.coordinator.handle_add_partitions("long", other, other_epoch, [P1])
        h.time.advance(10_000)  # not past the timeout yet
        await h.settle()
        assert h.state("t") is S.ONGOING
        h.time.advance(ABORT_INTERVAL_MS)
        await h.settle()
        m = h.metadata("t")
        assert (m.state, m.producer_epoch) == (S.COMPLETE_ABORT, epoch + 1)
        assert (pid, epoch + 1, ABORT) in [c[:3] for c in h.sender.calls]
        assert h.state("long") is S.ONGOING
        # The producer finds itself fenced; a new one carries on.
        end = h.coordinator.handle_end_transaction
        assert await end("t", pid, epoch, COMMIT) == E.PRODUCER_FENCED
        assert await h.init("t", 10_000) == (pid, epoch + 2, E.NONE)
    h.run(run())


# ---- loading: coordinator change, restart -----------------------------------------------


def test_new_coordinator_completes_prepare_commit(h: TxnHarness) -> None:
    async def run() -> None:
        pid, epoch, _ = await h.init("t")
        await h.coordinator.handle_add_partitions("t", pid, epoch, [P0, P1])
        h.sender.gate = asyncio.Event()  # the old coordinator never gets its markers out
        assert await h.coordinator.handle_end_transaction("t", pid, epoch, COMMIT) == E.NONE
        partition = h.coordinator.partition_for("t")
        old_epoch = h.manager.transaction_metadata_cache[partition].coordinator_epoch
        h.coordinator.on_resignation(partition)
        assert h.manager.get_transaction_state("t") == (E.NOT_COORDINATOR, None)

        sender = FakeMarkerSender()
        manager, coordinator = h.new_coordinator(sender)
        coordinator.startup(enable_transactional_id_expiration=False)
        coordinator.on_election(partition, coordinator_epoch=old_epoch + 1, load_now=True)
        await asyncio.sleep(0)
        await manager.background.wait_idle()
        assert sender.calls == [(pid, epoch, COMMIT, old_epoch + 1, frozenset({P0, P1}))]
        error, entry = manager.get_transaction_state("t")
        assert error == E.NONE and entry is not None
        assert entry.metadata.state is S.COMPLETE_COMMIT and entry.coordinator_epoch == (
            old_epoch + 1)
        assert await coordinator.handle_end_transaction("t", pid, epoch, COMMIT) == E.NONE
        coordinator.shutdown()
    h.run(run())


def test_restart_loads_the_last_state_of_each_id(h: TxnHarness) -> None:
    async def run() -> tuple[int, int, int]:
        pid, epoch, _ = await h.init("committed")
        await h.coordinator.handle_add_partitions("committed", pid, epoch, [P0])
        await h.coordinator.handle_end_transaction("committed", pid, epoch, COMMIT)
        await h.settle()
        ongoing, oepoch, _ = await h.init("ongoing", 30_000)
        await h.coordinator.handle_add_partitions("ongoing", ongoing, oepoch, [P0, P1])
        await h.init("empty")
        # Crash while the markers of a commit are out: the restart completes it.
        p3, e3, _ = await h.init("crashed")
        await h.coordinator.handle_add_partitions("crashed", p3, e3, [P1])
        h.sender.gate = asyncio.Event()
        assert await h.coordinator.handle_end_transaction("crashed", p3, e3, COMMIT) == E.NONE
        return ongoing, oepoch, p3

    ongoing, oepoch, p3 = h.run(run())
    h.restart()

    async def after() -> None:
        await h.settle()
        assert h.state("committed") is S.COMPLETE_COMMIT
        m = h.metadata("ongoing")
        assert (m.state, m.producer_id, m.producer_epoch, m.txn_timeout_ms) == (
            S.ONGOING, ongoing, oepoch, 30_000)
        assert m.topic_partitions == {P0, P1}
        assert h.state("empty") is S.EMPTY
        assert h.state("crashed") is S.COMPLETE_COMMIT
        assert [(c[0], c[2], c[4]) for c in h.sender.calls] == [(p3, COMMIT, frozenset({P1}))]
        # The producer carries on from where it was.
        assert await h.coordinator.handle_end_transaction(
            "ongoing", ongoing, oepoch, ABORT) == E.NONE
        await h.settle()
        assert h.state("ongoing") is S.COMPLETE_ABORT
    h.run(after())


def test_loading_answers_load_in_progress(h: TxnHarness) -> None:
    async def run() -> None:
        await h.init("t")
        partition = h.coordinator.partition_for("t")
        h.coordinator.on_resignation(partition)
        assert (await h.init("t"))[2] == E.NOT_COORDINATOR
        h.coordinator.on_election(partition, coordinator_epoch=7)  # loads on the timer
        assert (await h.init("t"))[2] == E.COORDINATOR_LOAD_IN_PROGRESS
        assert h.coordinator.handle_list_transactions()[0] == E.COORDINATOR_LOAD_IN_PROGRESS
        assert h.coordinator.handle_describe_transactions("t").error == (
            E.COORDINATOR_LOAD_IN_PROGRESS)
        h.time.run_pending()
        assert (await h.init("t"))[1:] == (1, E.NONE)
    h.run(run())


def test_chunked_load_skips_unknown_and_bad_records(tmp_path: Path) -> None:
    h = TxnHarness(tmp_path, config=TransactionConfig(
        transaction_log_num_partitions=TXN_PARTITIONS, transaction_log_load_buffer_size=200))
    ids = [f"txn-{i}" for i in range(12)]

    async def run() -> dict[str, int]:
        pids = {}
        for tid in ids:
            pid, epoch, _ = await h.init(tid)
            await h.init(tid)
            pids[tid] = pid
            await h.coordinator.handle_add_partitions(tid, pid, epoch + 1, [P0])
        # Records Kafka's loader skips: an unknown key version, a value that does not parse.
        partition = h.coordinator.partition_for(ids[0])
        tp = (TRANSACTION_STATE_TOPIC, partition)
        batch = build_record_batch([SimpleRecord(b"\x00\x05whatever", b"x"),
                                    SimpleRecord(key_to_bytes(ids[0]), b"\x00\x00\x01")])
        assert h.groups.replica_manager.append_records(
            -1, {tp: bytearray(batch)})[tp].error_code == E.NONE
        return pids

    try:
        pids = h.run(run())
        h.restart()

        async def after() -> None:
            await h.settle()
            for tid in ids:
                m = h.metadata(tid)
                assert (m.state, m.producer_id, m.producer_epoch) == (
                    S.ONGOING, pids[tid], 1), tid
                assert m.topic_partitions == {P0}
        h.run(after())
    finally:
        h.coordinator.shutdown()
        h.groups.close()


def test_complete_write_retries_while_the_coordinator_is_unavailable(h: TxnHarness) -> None:
    async def run() -> None:
        pid, epoch, _ = await h.init("t")
        await h.coordinator.handle_add_partitions("t", pid, epoch, [P0])
        h.sender.gate = asyncio.Event()
        assert await h.coordinator.handle_end_transaction("t", pid, epoch, ABORT) == E.NONE
        tp = (TRANSACTION_STATE_TOPIC, h.coordinator.partition_for("t"))
        partition = h.groups.replica_manager.partitions.pop(tp)  # appends fail meanwhile
        h.sender.gate.set()
        for _ in range(5):
            await asyncio.sleep(0)
        m = h.metadata("t")
        assert (m.state, m.pending_state) == (S.PREPARE_ABORT, S.COMPLETE_ABORT)  # kept
        h.groups.replica_manager.partitions[tp] = partition
        h.time.advance(100)
        await h.settle()
        assert (m.state, m.pending_state) == (S.COMPLETE_ABORT, None)
        assert len(h.sender.calls) == 1  # the markers are not sent again
    h.run(run())


def test_topic_configs() -> None:
    config = TransactionConfig.from_broker_config(BrokerConfig.default())
    assert (config.transaction_log_num_partitions, config.transaction_log_replication_factor,
            config.transaction_max_timeout_ms, config.transactional_id_expiration_ms,
            config.abort_timed_out_transactions_interval_ms,
            config.remove_expired_transactional_ids_interval_ms) == (
        50, 3, 900_000, 604_800_000, 10_000, 3_600_000)
    assert config.topic_configs() == {
        "unclean.leader.election.enable": "false", "compression.type": "uncompressed",
        "cleanup.policy": "compact", "min.insync.replicas": "2",
        "segment.bytes": str(100 * 1024 * 1024)}
    assert config.topic_configs(1)["min.insync.replicas"] == "1"
    assert config.topic_configs(3)["min.insync.replicas"] == "2"


# ---- expiry -----------------------------------------------------------------------------


def test_expired_transactional_ids_are_removed(h: TxnHarness) -> None:
    async def run() -> None:
        await h.init("idle")
        pid, epoch, _ = await h.init("busy", 900_000)
        await h.coordinator.handle_add_partitions("busy", pid, epoch, [P0])
        h.time.advance(EXPIRATION_MS - 1)
        assert await h.manager.remove_expired_transactional_ids() == 0
        h.time.advance(1)
        await h.settle()  # the periodic task runs on the clock
        assert h.manager.get_transaction_state("idle") == (E.NONE, None)
        # Aborted on its timeout (900 s in): updated since, so not expired.
        assert h.state("busy") is S.COMPLETE_ABORT
        assert h.coordinator.handle_describe_transactions("idle").error == (
            E.TRANSACTIONAL_ID_NOT_FOUND)
    h.run(run())
    h.restart()

    async def after() -> None:
        await h.settle()
        assert h.manager.get_transaction_state("idle") == (E.NONE, None)  # the tombstone
        assert h.state("busy") is S.COMPLETE_ABORT
        _, epoch, error = await h.init("idle")
        assert (epoch, error) == (0, E.NONE)
    h.run(after())


def test_ongoing_transactions_never_expire(tmp_path: Path) -> None:
    h = TxnHarness(tmp_path, config=TransactionConfig(
        transaction_log_num_partitions=TXN_PARTITIONS, transactional_id_expiration_ms=10_000,
        remove_expired_transactional_ids_interval_ms=5_000))

    async def run() -> None:
        pid, epoch, _ = await h.init("ongoing", 60_000)
        await h.coordinator.handle_add_partitions("ongoing", pid, epoch, [P0])
        await h.init("idle")
        p2, e2, _ = await h.init("done")
        await h.coordinator.handle_add_partitions("done", p2, e2, [P1])
        await h.coordinator.handle_end_transaction("done", p2, e2, COMMIT)
        await h.settle()
        h.time.advance(15_000)
        await h.settle()
        assert h.state("ongoing") is S.ONGOING
        assert h.manager.get_transaction_state("idle") == (E.NONE, None)
        assert h.manager.get_transaction_state("done") == (E.NONE, None)
        error, _, listed = h.coordinator.handle_list_transactions()
        assert error == E.NONE and [t.transactional_id for t in listed] == ["ongoing"]

    try:
        h.run(run())
    finally:
        h.coordinator.shutdown()
        h.groups.close()


# ---- DescribeTransactions, ListTransactions ---------------------------------------------


def test_describe_and_list_transactions(h: TxnHarness) -> None:
    async def run() -> None:
        a, ae, _ = await h.init("a")
        b, be, _ = await h.init("b")
        await h.init("c")
        await h.coordinator.handle_add_partitions("a", a, ae, [P1, P0, ("other", 2)])
        h.time.advance(5_000)
        await h.coordinator.handle_add_partitions("b", b, be, [P0])
        d = h.coordinator.handle_describe_transactions("a")
        assert (d.error, d.state, d.producer_id, d.producer_epoch, d.txn_timeout_ms) == (
            E.NONE, "Ongoing", a, ae, TIMEOUT_MS)
        assert d.topic_partitions == {"events": [0, 1], "other": [2]}
        assert h.coordinator.handle_describe_transactions("zzz").error == (
            E.TRANSACTIONAL_ID_NOT_FOUND)
        assert h.coordinator.handle_describe_transactions("").error == (
            E.TRANSACTIONAL_ID_NOT_FOUND)

        def listed(*args: Any) -> tuple[int, list[str], set[tuple[str, str]]]:
            error, unknown, txns = h.coordinator.handle_list_transactions(*args)
            return error, unknown, {(t.transactional_id, t.state) for t in txns}

        assert listed() == (E.NONE, [], {("a", "Ongoing"), ("b", "Ongoing"), ("c", "Empty")})
        assert listed((), ["Empty"]) == (E.NONE, [], {("c", "Empty")})
        assert listed((), ["Ongoing", "Bogus"]) == (
            E.NONE, ["Bogus"], {("a", "Ongoing"), ("b", "Ongoing")})
        assert listed([b], []) == (E.NONE, [], {("b", "Ongoing")})
        assert listed([b], ["Empty"]) == (E.NONE, [], set())
        # Running longer than 4 s: "a" (5 s) and "c" (never started: start -1).
        assert listed((), (), 4_000)[2] == {("a", "Ongoing"), ("c", "Empty")}
        h.coordinator.shutdown()
        assert h.coordinator.handle_list_transactions()[0] == E.COORDINATOR_NOT_AVAILABLE
        assert h.coordinator.handle_describe_transactions("a").error == (
            E.COORDINATOR_NOT_AVAILABLE)
    h.run(run())


# ---- the handlers, through decoded requests ---------------------------------------------


class Client:
    def __init__(self, h: TxnHarness) -> None:
        self.h = h
        self.apis = TransactionApis(BrokerConfig.default(), h.coordinator, h.groups.controller,
                                    lambda broker_id, context: ("localhost", 9092))

    async def call(self, key: ApiKey, version: int, body: Message) -> Any:
        """Runs the handler on the request decoded in `version`; returns the response
        after a round trip through its encoding in `version`."""
        body = type(body).decode(body.encode(version), version)
        header = RequestHeader(request_api_key=key, request_api_version=version,
                               client_id="tester")
        request = Request(header, API_SPECS[key], body)
        context = RequestContext(1, "127.0.0.1", 5555, "PLAINTEXT", header)
        result = self.apis.handlers()[key](request, context)
        if asyncio.iscoroutine(result):
            result = await result
        await self.h.settle()
        return type(result).decode(result.encode(version), version)


@pytest.mark.parametrize("version", range(0, 6))
def test_api_init_producer_id(h: TxnHarness, version: int) -> None:
    client = Client(h)

    async def run() -> None:
        req = init_producer_id_request.InitProducerIdRequest
        r = await client.call(ApiKey.INIT_PRODUCER_ID, version,
                              req(transactional_id="t", transaction_timeout_ms=TIMEOUT_MS))
        assert (r.error_code, r.producer_epoch) == (E.NONE, 0)
        pid = r.producer_id
        r = await client.call(ApiKey.INIT_PRODUCER_ID, version,
                              req(transactional_id=None, transaction_timeout_ms=0))
        assert r.error_code == E.NONE and r.producer_id != pid
        r = await client.call(ApiKey.INIT_PRODUCER_ID, version,
                              req(transactional_id="t", transaction_timeout_ms=10**9))
        assert r.error_code == E.INVALID_TRANSACTION_TIMEOUT
        assert (r.producer_id, r.producer_epoch) == (-1, -1)
        if version >= 3:  # KIP-360
            r = await client.call(ApiKey.INIT_PRODUCER_ID, version, req(
                transactional_id="t", transaction_timeout_ms=TIMEOUT_MS, producer_id=pid,
                producer_epoch=0))
            assert (r.error_code, r.producer_id, r.producer_epoch) == (E.NONE, pid, 1)
            r = await client.call(ApiKey.INIT_PRODUCER_ID, version, req(
                transactional_id="t", transaction_timeout_ms=TIMEOUT_MS, producer_id=pid,
                producer_epoch=-1))
            assert r.error_code == E.INVALID_REQUEST
            r = await client.call(ApiKey.INIT_PRODUCER_ID, version, req(
                transactional_id="t", transaction_timeout_ms=TIMEOUT_MS, producer_id=pid + 9,
                producer_epoch=1))
            # KIP-588: PRODUCER_FENCED from v4, INVALID_PRODUCER_EPOCH before.
            assert r.error_code == (E.PRODUCER_FENCED if version >= 4
                                    else E.INVALID_PRODUCER_EPOCH)
    h.run(run())


@pytest.mark.parametrize("version", range(0, 6))
def test_api_transaction_round(h: TxnHarness, version: int) -> None:
    """AddPartitionsToTxn (v0-3 for the client, v4+ batched), AddOffsetsToTxn, EndTxn and
    DescribeTransactions at each version."""
    client = Client(h)
    apt = add_partitions_to_txn_request

    async def run() -> None:
        pid, epoch, _ = await h.init("t")
        topics = [apt.AddPartitionsToTxnTopic(name="events", partitions=[0, 1])]
        if version < 4:
            body = apt.AddPartitionsToTxnRequest(
                v3_and_below_transactional_id="t", v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch, v3_and_below_topics=topics)
        else:
            body = apt.AddPartitionsToTxnRequest(transactions=[apt.AddPartitionsToTxnTransaction(
                transactional_id="t", producer_id=pid, producer_epoch=epoch, topics=topics)])
        r = await client.call(ApiKey.ADD_PARTITIONS_TO_TXN, version, body)
        results = (r.results_by_topic_v3_and_below if version < 4
                   else r.results_by_transaction[0].topic_results)
        assert [(t.name, [(p.partition_index, p.partition_error_code)
                          for p in t.results_by_partition]) for t in results] == [
            ("events", [(0, E.NONE), (1, E.NONE)])]
        assert h.metadata("t").topic_partitions == {P0, P1}

        if version <= 4:
            r = await client.call(ApiKey.ADD_OFFSETS_TO_TXN, version,
                                  add_offsets_to_txn_request.AddOffsetsToTxnRequest(
                                      transactional_id="t", producer_id=pid,
                                      producer_epoch=epoch, group_id="g"))
            assert r.error_code == E.NONE
            group_tp = (GROUP_METADATA_TOPIC, h.groups.coordinator.partition_for("g"))
            assert group_tp in h.metadata("t").topic_partitions
            r = await client.call(ApiKey.ADD_OFFSETS_TO_TXN, version,
                                  add_offsets_to_txn_request.AddOffsetsToTxnRequest(
                                      transactional_id="t", producer_id=pid,
                                      producer_epoch=epoch + 1, group_id="g"))
            assert r.error_code == (E.PRODUCER_FENCED if version >= 2
                                    else E.INVALID_PRODUCER_EPOCH)

        r = await client.call(ApiKey.DESCRIBE_TRANSACTIONS, 0,
                              describe_transactions_request.DescribeTransactionsRequest(
                                  transactional_ids=["t", "unknown"]))
        described, unknown = r.transaction_states
        assert (described.error_code, described.transaction_state, described.producer_id) == (
            E.NONE, "Ongoing", pid)
        assert ("events", [0, 1]) in [(t.topic, t.partitions) for t in described.topics]
        assert unknown.error_code == E.TRANSACTIONAL_ID_NOT_FOUND

        end = end_txn_request.EndTxnRequest
        r = await client.call(ApiKey.END_TXN, version, end(
            transactional_id="t", producer_id=pid, producer_epoch=epoch + 1, committed=True))
        assert r.error_code == (E.PRODUCER_FENCED if version >= 2 else E.INVALID_PRODUCER_EPOCH)
        r = await client.call(ApiKey.END_TXN, version, end(
            transactional_id="t", producer_id=pid, producer_epoch=epoch, committed=True))
        assert r.error_code == E.NONE
        if version >= 5:
            assert (r.producer_id, r.producer_epoch) == (pid, epoch)
        assert h.state("t") is S.COMPLETE_COMMIT
        assert h.sender.calls[-1][2] is COMMIT
    h.run(run())


def test_api_add_partitions_unknown_partition_fails_the_request(h: TxnHarness) -> None:
    client = Client(h)
    apt = add_partitions_to_txn_request

    async def run() -> None:
        pid, epoch, _ = await h.init("t")
        r = await client.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, apt.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id="t", v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
                apt.AddPartitionsToTxnTopic(name="events", partitions=[0, 99]),
                apt.AddPartitionsToTxnTopic(name="nope", partitions=[0])]))
        codes = {(t.name, p.partition_index): p.partition_error_code
                 for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}
        assert codes == {("events", 0): E.OPERATION_NOT_ATTEMPTED,
                         ("events", 99): E.UNKNOWN_TOPIC_OR_PARTITION,
                         ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
        assert h.state("t") is S.EMPTY
        # v4+ verify_only (partition leaders, KIP-890): nothing is added.
        await h.coordinator.handle_add_partitions("t", pid, epoch, [P0])
        r = await client.call(ApiKey.ADD_PARTITIONS_TO_TXN, 4, apt.AddPartitionsToTxnRequest(
            transactions=[apt.AddPartitionsToTxnTransaction(
                transactional_id="t", producer_id=pid, producer_epoch=epoch, verify_only=True,
                topics=[apt.AddPartitionsToTxnTopic(name="events", partitions=[0, 1])])]))
        codes = {p.partition_index: p.partition_error_code
                 for t in r.results_by_transaction[0].topic_results
                 for p in t.results_by_partition}
        assert codes == {0: E.NONE, 1: E.TRANSACTION_ABORTABLE}
        assert h.metadata("t").topic_partitions == {P0}
    h.run(run())


@pytest.mark.parametrize("version", [0, 1])
def test_api_list_transactions(h: TxnHarness, version: int) -> None:
    client = Client(h)
    req = list_transactions_request.ListTransactionsRequest

    async def run() -> None:
        pid, epoch, _ = await h.init("a")
        await h.init("b")
        await h.coordinator.handle_add_partitions("a", pid, epoch, [P0])
        h.time.advance(2_000)
        r = await client.call(ApiKey.LIST_TRANSACTIONS, version, req())
        assert r.error_code == E.NONE
        assert sorted((t.transactional_id, t.producer_id == pid, t.transaction_state)
                      for t in r.transaction_states) == [("a", True, "Ongoing"),
                                                         ("b", False, "Empty")]
        r = await client.call(ApiKey.LIST_TRANSACTIONS, version,
                              req(state_filters=["Ongoing", "Nope"]))
        assert [t.transactional_id for t in r.transaction_states] == ["a"]
        assert r.unknown_state_filters == ["Nope"]
        r = await client.call(ApiKey.LIST_TRANSACTIONS, version, req(producer_id_filters=[pid]))
        assert [t.transactional_id for t in r.transaction_states] == ["a"]
        if version >= 1:
            r = await client.call(ApiKey.LIST_TRANSACTIONS, version,
                                  req(state_filters=["Ongoing"], duration_filter=5_000))
            assert r.transaction_states == []
    h.run(run())
