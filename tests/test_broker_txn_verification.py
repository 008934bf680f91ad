"""The partition leader's transaction verification (KIP-890 part 1, Kafka's
AddPartitionsToTxnManager): TransactionVerifier against an in-process coordinator (this
broker's, and another broker's over a fake inter-broker client), and produce_error,
Kafka 3.9's translation of the coordinator's answers for each Produce version."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_txn_coordinator import P0, P1, TxnHarness

from odradek.broker.inter_broker_client import DisconnectedError
from odradek.broker.metadata_cache import Broker, MetadataCache
from odradek.broker.txn_verification import TransactionVerifier, produce_error
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode as E
from odradek.protocol.message import Message
from odradek.protocol.messages.add_partitions_to_txn_request import AddPartitionsToTxnRequest
from odradek.protocol.messages.add_partitions_to_txn_response import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopicResult,
)

LISTENER = "PLAINTEXT"


class FakeConnection:
    def __init__(self, max_version: int) -> None:
        self.max_version = max_version

    def version_for(self, api_key: int, max_version: int | None = None) -> int:
        assert api_key == ApiKey.ADD_PARTITIONS_TO_TXN
        return self.max_version


class FakeClient:
    """Another broker's coordinator behind an inter-broker client: requests answered by
    the harness's coordinator, as its TransactionApis would."""

    def __init__(self, h: TxnHarness, max_version: int = 5) -> None:
        self.h = h
        self.endpoints: dict[int, tuple[str, int]] = {}
        self.sent: list[tuple[int, AddPartitionsToTxnRequest, int | None]] = []
        self.max_version = max_version
        self.down = False

    def update_endpoints(self, endpoints: dict[int, tuple[str, int]]) -> None:
        self.endpoints = dict(endpoints)

    async def connection(self, broker_id: int, timeout_ms: int | None = None) -> Any:
        if self.down:
            raise DisconnectedError("down")
        return FakeConnection(self.max_version)

    async def send(self, broker_id: int, request: Message, api_version: int | None = None,
                   *, timeout_ms: int | None = None) -> Message:
        assert isinstance(request, AddPartitionsToTxnRequest)
        self.sent.append((broker_id, request, api_version))
        results = []
        for t in request.transactions:
            assert t.verify_only
            errors = self.h.coordinator.handle_verify_partitions(
                t.transactional_id, t.producer_id, t.producer_epoch,
                [(topic.name, p) for topic in t.topics for p in topic.partitions])
            by_topic: dict[str, list[AddPartitionsToTxnPartitionResult]] = {}
            for (name, index), error in errors.items():
                by_topic.setdefault(name, []).append(AddPartitionsToTxnPartitionResult(
                    partition_index=index, partition_error_code=error))
            results.append(AddPartitionsToTxnResult(
                transactional_id=t.transactional_id, topic_results=[
                    AddPartitionsToTxnTopicResult(name=n, results_by_partition=r)
                    for n, r in by_topic.items()]))
        return AddPartitionsToTxnResponse(results_by_transaction=results)


@pytest.fixture
def h(tmp_path: Path) -> Any:
    harness = TxnHarness(tmp_path)
    yield harness
    harness.coordinator.shutdown()
    harness.groups.close()


def verifier(h: TxnHarness, node_id: int = 1, client: Any = None) -> TransactionVerifier:
    cache = MetadataCache(node_id, "cluster", h.groups.controller.topics)
    cache.brokers[1] = Broker(1, {LISTENER: ("127.0.0.1", 9092)})
    return TransactionVerifier(node_id, cache, LISTENER, h.coordinator, client)


@pytest.mark.parametrize("remote", [False, True], ids=["local", "remote"])
def test_verify(h: TxnHarness, remote: bool) -> None:
    client = FakeClient(h) if remote else None
    v = verifier(h, node_id=2 if remote else 1, client=client)

    async def run() -> None:
        pid, epoch, _ = await h.init("t")
        assert await h.coordinator.handle_add_partitions("t", pid, epoch, [P0]) == E.NONE
        # Verified: nothing to report; not added: the coordinator's TRANSACTION_ABORTABLE.
        assert await v.verify("t", pid, epoch, [P0]) == {}
        assert await v.verify("t", pid, epoch, [P0, P1]) == {P1: E.TRANSACTION_ABORTABLE}
        # Another epoch (fenced), another producer id, an unknown transactional id.
        assert await v.verify("t", pid, epoch + 1, [P0]) == {P0: E.PRODUCER_FENCED}
        assert await v.verify("t", pid + 1, epoch, [P0]) == {P0: E.INVALID_PRODUCER_ID_MAPPING}
        assert await v.verify("nobody", pid, epoch, [P0]) == {
            P0: E.INVALID_PRODUCER_ID_MAPPING}
        assert h.metadata("t").topic_partitions == {P0}  # verify_only adds nothing
    h.run(run())
    if client is not None:
        broker, request, version = client.sent[0]
        assert (broker, version) == (1, 5)
        assert client.endpoints == {1: ("127.0.0.1", 9092)}
        assert [t.verify_only for t in request.transactions] == [True]


def test_coordinator_not_available(h: TxnHarness) -> None:
    async def run() -> None:
        pid, epoch, _ = await h.init("t")
        # Another broker's coordinator, which cannot be reached.
        client = FakeClient(h)
        client.down = True
        assert await verifier(h, 2, client).verify("t", pid, epoch, [P0]) == {
            P0: E.NETWORK_EXCEPTION}
        # Its broker is not alive.
        v = verifier(h, 2, FakeClient(h))
        v.cache.brokers.clear()
        assert await v.verify("t", pid, epoch, [P0]) == {P0: E.COORDINATOR_NOT_AVAILABLE}
        # No __transaction_state at all.
        empty = TransactionVerifier(1, MetadataCache(1, "cluster"), LISTENER,
                                    h.coordinator, None)
        assert await empty.verify("t", pid, epoch, [P0]) == {P0: E.COORDINATOR_NOT_AVAILABLE}
        # This broker no longer leads the id's partition: NOT_COORDINATOR.
        h.coordinator.on_resignation(h.coordinator.partition_for("t"))
        assert await verifier(h).verify("t", pid, epoch, [P0]) == {P0: E.NOT_COORDINATOR}
    h.run(run())


def test_coordinator_without_verify_only_lets_the_produce_through(h: TxnHarness) -> None:
    async def run() -> None:
        pid, epoch, _ = await h.init("t")
        client = FakeClient(h, max_version=3)
        assert await verifier(h, 2, client).verify("t", pid, epoch, [P0]) == {}
        assert client.sent == []
    h.run(run())


def test_produce_errors() -> None:
    retriable = "Unable to verify the partition has been added to the transaction. "
    for underlying in (E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR,
                       E.COORDINATOR_LOAD_IN_PROGRESS, E.NETWORK_EXCEPTION,
                       E.CONCURRENT_TRANSACTIONS):
        assert produce_error(underlying, 9) == (
            E.NOT_ENOUGH_REPLICAS, f"{retriable}Underlying error: {underlying.name}")
    assert produce_error(E.TRANSACTION_ABORTABLE, 10) == (
        E.INVALID_TXN_STATE, "Partition was not added to the transaction")
    assert produce_error(E.TRANSACTION_ABORTABLE, 3) == (
        E.INVALID_TXN_STATE, "Partition was not added to the transaction")
    assert produce_error(E.TRANSACTION_ABORTABLE, 11) == (E.TRANSACTION_ABORTABLE, None)
    assert produce_error(E.PRODUCER_FENCED, 11) == (E.INVALID_PRODUCER_EPOCH, None)
    assert produce_error(E.INVALID_PRODUCER_ID_MAPPING, 11) == (
        E.INVALID_PRODUCER_ID_MAPPING, None)
