"""`odradek transactions` (odradek.cli.transactions) without a broker process: option
parsing, the requests it builds, kafka-transactions.sh's tables and the JSON, and each
command run against fake brokers that answer through the real codec (every request and
response is encoded and decoded in the version negotiated) — DescribeProducers and the
abort's WriteTxnMarkers by the broker's own handlers over an in-process ReplicaManager."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from uuid import UUID

import pytest

from odradek.broker.describe_producers import handle_describe_producers
from odradek.broker.inter_broker_client import choose_version
from odradek.broker.replica_manager import ReplicaManager
from odradek.broker.txn_markers import handle_write_txn_markers
from odradek.cli import transactions
from odradek.cli.client import CliError
from odradek.cli.main import build_parser, main
from odradek.cli.transactions import (
    AbortSpec,
    Cluster,
    OpenTransaction,
    UnsupportedApiError,
)
from odradek.cli.wire import WireError
from odradek.cluster.metadata import PartitionState
from odradek.protocol.api_keys import API_SPECS, ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.message import Message
from odradek.protocol.messages.describe_producers_response import ProducerState
from odradek.protocol.messages.describe_transactions_request import (
    DescribeTransactionsRequest,
)
from odradek.protocol.messages.describe_transactions_response import (
    DescribeTransactionsResponse,
    TopicData,
)
from odradek.protocol.messages.describe_transactions_response import (
    TransactionState as Description,
)
from odradek.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from odradek.protocol.messages.find_coordinator_response import (
    Coordinator,
    FindCoordinatorResponse,
)
from odradek.protocol.messages.list_transactions_request import ListTransactionsRequest
from odradek.protocol.messages.list_transactions_response import (
    ListTransactionsResponse,
)
from odradek.protocol.messages.list_transactions_response import (
    TransactionState as Listing,
)
from odradek.protocol.records import SimpleRecord, build_record_batch
from odradek.storage.config import LogConfig
from odradek.storage.log_manager import LogManager, LogManagerConfig

pytestmark = pytest.mark.timeout(30)

NOW = int(time.time() * 1000)
TOPIC = "payments"
PID, OTHER = 7000, 8000


# ---- option parsing -----------------------------------------------------------------------

def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["transactions", *argv])


def test_options() -> None:
    args = parse("describe-producers", "--topic", "t", "--partition", "3", "--broker-id",
                 "2", "--json", "--bootstrap-server", "h:1", "--command-config", "c.props",
                 "-X", "a=b", "--timeout", "5s")
    assert (args.topic, args.partition, args.broker_id, args.json, args.bootstrap_server,
            args.command_config, args.client_settings, args.timeout) == (
        "t", 3, 2, True, "h:1", "c.props", ["a=b"], 5.0)
    assert parse("list").duration_filter is None
    assert parse("list", "--duration-filter", "60000").duration_filter == 60_000
    assert parse("describe", "--transactional-id", "tx").transactional_id == "tx"
    args = parse("find-hanging", "--broker-id", "1")
    assert (args.broker_id, args.topic, args.partition, args.max_transaction_timeout) == (
        1, None, None, 15)
    args = parse("abort", "--topic", "t", "--partition", "0", "--start-offset", "42")
    assert (args.start_offset, args.producer_id) == (42, None)


@pytest.mark.parametrize("argv", [
    ("describe",),  # --transactional-id is required
    ("describe-producers", "--topic", "t"),  # and --partition
    ("describe-producers", "--topic", "t", "--partition", "-1"),
    ("abort", "--partition", "0", "--start-offset", "1"),  # --topic
    ("list", "--duration-filter", "soon"),
    ("nothing",),
])
def test_usage_mistakes(argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        parse(*argv)
    assert raised.value.code == 2
    assert capsys.readouterr().err


def test_the_transaction_to_abort() -> None:
    def spec(*argv: str) -> AbortSpec | None:
        return transactions.abort_spec_from_options(
            parse("abort", "--topic", "t", "--partition", "1", *argv))

    assert spec("--start-offset", "5") is None  # found through describe-producers
    assert spec("--producer-id", "9", "--producer-epoch", "2", "--coordinator-epoch",
                "4") == AbortSpec("t", 1, 9, 2, 4)
    # Coordinator epoch -1 (no marker seen yet) becomes 0, as Kafka's tool does.
    assert spec("--producer-id", "9", "--producer-epoch", "2", "--coordinator-epoch",
                "-1") == AbortSpec("t", 1, 9, 2, 0)
    for argv, needle in [
        ((), "either with --start-offset"),
        (("--producer-id", "9", "--coordinator-epoch", "1"), "--producer-epoch"),
        (("--producer-id", "9", "--producer-epoch", "1"), "--coordinator-epoch"),
        (("--start-offset", "5", "--producer-id", "9"), "not both"),
    ]:
        with pytest.raises(CliError, match=needle) as raised:
            spec(*argv)
        assert raised.value.exit_code == 2


def test_the_abort_spec_from_the_producers() -> None:
    producers = [ProducerState(producer_id=PID, producer_epoch=3, coordinator_epoch=-1,
                               current_txn_start_offset=-1),
                 ProducerState(producer_id=OTHER, producer_epoch=5, coordinator_epoch=-1,
                               current_txn_start_offset=12),
                 ProducerState(producer_id=9, producer_epoch=1, coordinator_epoch=6,
                               current_txn_start_offset=20)]
    assert transactions.abort_spec_from_producers("t", 0, 12, producers) == AbortSpec(
        "t", 0, OTHER, 5, 0)
    assert transactions.abort_spec_from_producers("t", 0, 20, producers) == AbortSpec(
        "t", 0, 9, 1, 6)
    with pytest.raises(CliError, match="could not find any open transaction starting at "
                       "offset 13 on partition t-0"):
        transactions.abort_spec_from_producers("t", 0, 13, producers)


# ---- requests -----------------------------------------------------------------------------

def roundtrip(message: Message, version: int) -> Message:
    return type(message).decode(message.encode(version), version)


def test_requests() -> None:
    request = transactions.list_transactions_request()
    assert (request.duration_filter, request.producer_id_filters, request.state_filters) == (
        -1, [], [])
    request = transactions.list_transactions_request(60_000, producer_ids=[3, 1, 3])
    assert roundtrip(request, 1) == request
    assert (request.duration_filter, request.producer_id_filters) == (60_000, [1, 3])

    for version in range(1, 7):  # key and key type (v1-v3) or a batch of keys (v4+)
        decoded = roundtrip(transactions.find_coordinator_request("tx-1", version), version)
        assert isinstance(decoded, FindCoordinatorRequest)
        assert decoded.key_type == 1
        assert (decoded.coordinator_keys if version >= 4 else [decoded.key]) == ["tx-1"]

    producers = transactions.describe_producers_request([("a", 0), ("b", 2), ("a", 1)])
    assert roundtrip(producers, 0) == producers
    assert [(t.name, t.partition_indexes) for t in producers.topics] == [
        ("a", [0, 1]), ("b", [2])]

    abort = transactions.abort_request(AbortSpec("a", 1, PID, 3, 4))
    for version in (0, 1):
        assert roundtrip(abort, version) == abort
    (marker,) = abort.markers
    assert (marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
            marker.transaction_result) == (PID, 3, 4, False)  # ABORT
    assert [(t.name, t.partition_indexes) for t in marker.topics] == [("a", [1])]


def test_coordinator_of_either_response_shape() -> None:
    old = FindCoordinatorResponse(node_id=2, host="h", port=9)
    assert transactions.coordinator_of(old, "tx") == (0, "", (2, "h", 9))
    new = FindCoordinatorResponse(coordinators=[
        Coordinator(key="other", node_id=1, host="x", port=1),
        Coordinator(key="tx", node_id=3, host="y", port=2)])
    assert transactions.coordinator_of(new, "tx") == (0, "", (3, "y", 2))
    assert transactions.coordinator_of(new, "missing")[0] == ErrorCode.UNKNOWN_SERVER_ERROR


# ---- formatting ---------------------------------------------------------------------------

def test_kafka_table() -> None:
    assert transactions.kafka_table(("ProducerId", "LastSequence"), [[7, 120], [80000, "-"]]
                                    ).splitlines() == [
        "ProducerId  LastSequence",
        "7           120",
        "80000       -"]
    assert transactions.kafka_table(("A", "B"), []) == "A  B"


def test_producer_rows_and_json() -> None:
    producers = [
        transactions.producer_json(ProducerState(
            producer_id=PID, producer_epoch=0, last_sequence=4, last_timestamp=NOW,
            coordinator_epoch=-1, current_txn_start_offset=-1)),
        transactions.producer_json(ProducerState(
            producer_id=OTHER, producer_epoch=2, last_sequence=0, last_timestamp=NOW,
            coordinator_epoch=5, current_txn_start_offset=17))]
    assert producers[0] == {"producer_id": PID, "producer_epoch": 0,
                            "coordinator_epoch": None, "last_sequence": 4,
                            "last_timestamp": NOW, "current_transaction_start_offset": None}
    # As kafka-transactions.sh: no coordinator epoch is -1, no open transaction None.
    assert transactions.producer_rows(producers) == [
        [PID, 0, -1, 4, NOW, "None"], [OTHER, 2, 5, 0, NOW, "17"]]


def description(state: str = "Ongoing", start: int = NOW - 1500, pid: int = PID,
                partitions: dict[str, list[int]] | None = None,
                error: int = 0) -> Description:
    return Description(
        error_code=error, transactional_id="tx-1", transaction_state=state,
        transaction_timeout_ms=60_000, transaction_start_time_ms=start, producer_id=pid,
        producer_epoch=3, topics=[TopicData(topic=t, partitions=ps)
                                  for t, ps in ({TOPIC: [0, 1]} if partitions is None
                                                  else partitions).items()])


def test_describe_row_and_json() -> None:
    described = transactions.description_json(2, description(), NOW)
    assert described == {
        "coordinator_id": 2, "transactional_id": "tx-1", "producer_id": PID,
        "producer_epoch": 3, "state": "Ongoing", "transaction_timeout_ms": 60_000,
        "transaction_start_time_ms": NOW - 1500, "transaction_duration_ms": 1500,
        "topic_partitions": [{"topic": TOPIC, "partition": 0},
                             {"topic": TOPIC, "partition": 1}]}
    assert transactions.describe_row(described) == [
        2, "tx-1", PID, 3, "Ongoing", 60_000, str(NOW - 1500), "1500",
        f"{TOPIC}-0,{TOPIC}-1"]
    empty = transactions.description_json(2, description("Empty", -1, partitions={}), NOW)
    assert (empty["transaction_start_time_ms"], empty["transaction_duration_ms"],
            empty["topic_partitions"]) == (None, None, [])
    assert transactions.describe_row(empty)[6:] == ["None", "None", ""]


def test_list_rows() -> None:
    listings = [transactions.listing_json(1, Listing(transactional_id="a", producer_id=5,
                                                     transaction_state="Ongoing"))]
    assert listings == [{"transactional_id": "a", "coordinator": 1, "producer_id": 5,
                         "state": "Ongoing"}]
    assert transactions.list_rows(listings) == [["a", 1, 5, "Ongoing"]]


def test_hanging_transactions() -> None:
    old, recent = NOW - 20 * 60_000, NOW - 60_000

    def producer(pid: int, start: int, last: int) -> ProducerState:
        return ProducerState(producer_id=pid, producer_epoch=1, last_sequence=3,
                             last_timestamp=last, coordinator_epoch=2,
                             current_txn_start_offset=start)

    states = {(TOPIC, 0): [producer(PID, 10, old), producer(OTHER, -1, old)],
              (TOPIC, 1): [producer(PID, 4, old), producer(9, 7, recent)],
              (TOPIC, 2): [producer(11, 0, old)]}
    candidates = transactions.candidate_transactions(states, 15 * 60_000, NOW)
    # Open transactions only, and only those whose producer is silent for long enough.
    assert [(c.topic, c.partition, c.producer.producer_id) for c in candidates] == [
        (TOPIC, 0, PID), (TOPIC, 1, PID), (TOPIC, 2, 11)]
    # PID's coordinator counts partition 0 only; producer 11 has no transactional id.
    hanging = transactions.hanging_transactions(
        candidates, {PID: "tx-1"}, {"tx-1": description(partitions={TOPIC: [0]})})
    assert [(h.partition, h.producer.producer_id) for h in hanging] == [(1, PID), (2, 11)]
    # A transactional id the coordinator no longer knows: all its transactions hang.
    assert len(transactions.hanging_transactions(candidates, {PID: "tx-1"},
                                                 {"tx-1": None})) == 3
    row = transactions.hanging_json(OpenTransaction(TOPIC, 1, producer(PID, 4, old)), NOW)
    assert row == {"topic": TOPIC, "partition": 1, "producer_id": PID, "producer_epoch": 1,
                   "coordinator_epoch": 2, "start_offset": 4, "last_timestamp": old,
                   "duration_min": 20}
    assert transactions.hanging_rows([row]) == [[TOPIC, 1, PID, 1, 2, 4, old, 20]]


# ---- the commands, against fake brokers ---------------------------------------------------

class FakeBroker:
    """Stands for wire.BrokerSocket: every request and answer goes through the codec in
    the version both sides know, as on a socket."""

    def __init__(self, cluster: FakeCluster, host: str, port: int, *, timeout: float,
                 node_id: int | None = None) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.name = f"broker {node_id} at {host}:{port}"
        self.api_versions: dict[int, tuple[int, int]] = {}

    def connect(self) -> None:
        if self.node_id in self.cluster.down:
            raise WireError(f"{self.name}: cannot connect: Connection refused")
        self.api_versions = {key: (API_SPECS[key].min_version, API_SPECS[key].max_version)
                             for key in self.cluster.apis}

    def close(self) -> None:
        pass

    def send(self, request: Message, max_version: int | None = None) -> Message:
        api_key: int = request.API_KEY  # type: ignore[attr-defined]
        version = choose_version(api_key, self.api_versions, max_version)
        decoded = type(request).decode(request.encode(version), version)
        self.cluster.requests.append((self.node_id, version, decoded))
        response = self.cluster.apis[api_key](self.node_id, decoded)
        return type(response).decode(response.encode(version), version)


class FakeCluster:
    """Two brokers; node 1 leads the topic's partitions (an in-process ReplicaManager)
    and coordinates "tx-1"; every broker answers ListTransactions from `listings`."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas
        self.requests: list[tuple[int | None, int, Message]] = []
        self.listings: dict[int, list[Listing]] = {1: [], 2: []}
        self.descriptions: dict[str, Description] = {}
        self.coordinator = 1
        self.down: set[int] = set()
        self.apis: dict[int, Callable[[int | None, Any], Message]] = {
            ApiKey.DESCRIBE_PRODUCERS: lambda node, r: handle_describe_producers(
                self.replicas, r, {TOPIC}.__contains__),
            ApiKey.WRITE_TXN_MARKERS: lambda node, r: asyncio.run(
                handle_write_txn_markers(self.replicas, r, timeout_ms=5_000)),
            ApiKey.LIST_TRANSACTIONS: self.list_transactions,
            ApiKey.FIND_COORDINATOR: self.find_coordinator,
            ApiKey.DESCRIBE_TRANSACTIONS: self.describe_transactions,
        }
        partitions = {i: SimpleNamespace(id=i, leader=1, replicas=[1, 2], isrs=[1])
                      for i in (0, 1)}
        self.metadata = SimpleNamespace(
            brokers={1: SimpleNamespace(id=1, host="127.0.0.1", port=9001),
                     2: SimpleNamespace(id=2, host="127.0.0.1", port=9002)},
            topics={TOPIC: SimpleNamespace(topic=TOPIC, error=None, partitions=partitions)})

    def list_transactions(self, node: int | None, request: ListTransactionsRequest
                          ) -> Message:
        assert node is not None
        wanted = set(request.producer_id_filters)
        return ListTransactionsResponse(transaction_states=[
            s for s in self.listings[node] if not wanted or s.producer_id in wanted])

    def find_coordinator(self, node: int | None, request: FindCoordinatorRequest
                         ) -> Message:
        assert request.key_type == 1
        return FindCoordinatorResponse(coordinators=[
            Coordinator(key=k, node_id=self.coordinator, host="127.0.0.1",
                        port=9000 + self.coordinator)
            for k in request.coordinator_keys])

    def describe_transactions(self, node: int | None, request: DescribeTransactionsRequest
                              ) -> Message:
        return DescribeTransactionsResponse(transaction_states=[
            self.descriptions.get(tid) or Description(
                transactional_id=tid, error_code=ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
            for tid in request.transactional_ids])

    def open(self, args: argparse.Namespace, what: str) -> Cluster:
        admin = SimpleNamespace(timeout=5.0, metadata=lambda: self.metadata)
        return Cluster(admin,  # type: ignore[arg-type]
                       connect=lambda host, port, **kw: FakeBroker(self, host, port, **kw))

    def sent(self, api_key: int) -> list[tuple[int | None, int, Message]]:
        return [r for r in self.requests if api_key == r[2].API_KEY]  # type: ignore[attr-defined]


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[ReplicaManager]:
    logs = LogManager(LogManagerConfig(log_dirs=(tmp_path / "logs",)), LogConfig())
    logs.startup(background=False)
    manager = ReplicaManager(1, logs, clock=lambda: NOW, replica_lag_time_max_ms=10_000)
    for index in (0, 1):
        manager.make_leader(TOPIC, index, UUID(int=0x77), PartitionState(
            replicas=[1], leader=1, leader_epoch=0, isr=[1], partition_epoch=0))
    yield manager
    logs.shutdown()


@pytest.fixture
def cluster(replicas: ReplicaManager, monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    fake = FakeCluster(replicas)
    monkeypatch.setattr(transactions, "_open", fake.open)
    return fake


def append(replicas: ReplicaManager, partition: int, count: int, *, pid: int,
           seq: int = 0, epoch: int = 0, transactional: bool = False,
           timestamp: int = NOW) -> None:
    results = replicas.append_records(1, {(TOPIC, partition): bytearray(build_record_batch(
        [SimpleRecord(b"k", b"v", timestamp=timestamp) for _ in range(count)],
        producer_id=pid, producer_epoch=epoch, base_sequence=seq,
        is_transactional=transactional))})
    assert results[(TOPIC, partition)].error_code == ErrorCode.NONE


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["transactions", *argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def test_describe_producers(cluster: FakeCluster, replicas: ReplicaManager,
                            capsys: pytest.CaptureFixture[str]) -> None:
    append(replicas, 0, 3, pid=PID)
    append(replicas, 0, 2, pid=OTHER, transactional=True)  # offsets 3-4, open
    code, out, err = run(capsys, "describe-producers", "--topic", TOPIC, "--partition", "0")
    assert (code, err) == (0, "")
    assert out.splitlines() == transactions.kafka_table(transactions.PRODUCERS_HEADERS, [
        [PID, 0, -1, 2, NOW, "None"], [OTHER, 0, -1, 1, NOW, "3"]]).splitlines()
    assert out.split("\n")[0].split() == [
        "ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
        "LastTimestamp", "CurrentTransactionStartOffset"]
    # To the leader, node 1, in DescribeProducers v0.
    ((node, version, _),) = cluster.sent(ApiKey.DESCRIBE_PRODUCERS)
    assert (node, version) == (1, 0)

    code, out, _ = run(capsys, "describe-producers", "--topic", TOPIC, "--partition", "0",
                       "--broker-id", "2", "--json")
    assert code == 0
    assert cluster.sent(ApiKey.DESCRIBE_PRODUCERS)[-1][0] == 2  # the replica asked
    assert json.loads(out) == {"topic": TOPIC, "partition": 0, "broker": 2, "producers": [
        {"producer_id": PID, "producer_epoch": 0, "coordinator_epoch": None,
         "last_sequence": 2, "last_timestamp": NOW, "current_transaction_start_offset": None},
        {"producer_id": OTHER, "producer_epoch": 0, "coordinator_epoch": None,
         "last_sequence": 1, "last_timestamp": NOW, "current_transaction_start_offset": 3}]}

    code, out, _ = run(capsys, "describe-producers", "--topic", TOPIC, "--partition", "1")
    assert (code, out.splitlines()[1:]) == (0, [])  # headers only


def test_describe_producers_failures(cluster: FakeCluster,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "describe-producers", "--topic", "nowhere", "--partition", "0")
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err
    code, _, err = run(capsys, "describe-producers", "--topic", TOPIC, "--partition", "5")
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err
    code, _, err = run(capsys, "describe-producers", "--topic", TOPIC, "--partition", "0",
                       "--broker-id", "7")
    assert code == 1 and "no broker 7" in err
    # A broker that does not know the API: said before anything is sent.
    del cluster.apis[ApiKey.DESCRIBE_PRODUCERS]
    code, _, err = run(capsys, "describe-producers", "--topic", TOPIC, "--partition", "0")
    assert code == 1
    assert err.strip() == ("odradek transactions describe-producers: broker 1 at "
                           "127.0.0.1:9001 does not support DescribeProducers (API key 61)")
    with pytest.raises(UnsupportedApiError):
        cluster.open(argparse.Namespace(), "x").send(1, transactions.describe_producers_request(
            [(TOPIC, 0)]))


def test_abort_by_start_offset(cluster: FakeCluster, replicas: ReplicaManager,
                               capsys: pytest.CaptureFixture[str]) -> None:
    append(replicas, 1, 1, pid=PID)  # 0
    append(replicas, 1, 2, pid=OTHER, transactional=True)  # 1-2: the hanging one
    partition = replicas.partitions[(TOPIC, 1)]
    assert partition.last_stable_offset == 1
    code, out, err = run(capsys, "abort", "--topic", TOPIC, "--partition", "1",
                         "--start-offset", "1")
    assert (code, err) == (0, "")
    assert out == f"Aborted the transaction of producer {OTHER} (epoch 0) on {TOPIC}-1\n"
    ((node, version, request),) = cluster.sent(ApiKey.WRITE_TXN_MARKERS)
    assert (node, version) == (1, 1)
    (marker,) = request.markers  # type: ignore[attr-defined]
    assert (marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
            marker.transaction_result) == (OTHER, 0, 0, False)
    # The marker ended the transaction: the LSO moved past it, nothing is open.
    assert partition.last_stable_offset == partition.log.log_end_offset == 4
    assert all(p.current_txn_first_offset == -1
               for p in partition.log.active_producers().values())

    code, _, err = run(capsys, "abort", "--topic", TOPIC, "--partition", "1",
                       "--start-offset", "1")
    assert code == 1 and "could not find any open transaction starting at offset 1" in err


def test_abort_by_producer(cluster: FakeCluster, replicas: ReplicaManager,
                           capsys: pytest.CaptureFixture[str]) -> None:
    append(replicas, 0, 2, pid=OTHER, transactional=True)
    code, out, _ = run(capsys, "abort", "--topic", TOPIC, "--partition", "0", "--producer-id",
                       str(OTHER), "--producer-epoch", "0", "--coordinator-epoch", "-1",
                       "--json")
    assert code == 0
    assert json.loads(out) == {"topic": TOPIC, "partition": 0, "producer_id": OTHER,
                               "producer_epoch": 0, "coordinator_epoch": 0, "aborted": True}
    assert not cluster.sent(ApiKey.DESCRIBE_PRODUCERS)  # given, not looked up
    assert replicas.partitions[(TOPIC, 0)].last_stable_offset == 3
    # The leader's refusal is the command's error: a marker older than the producer's
    # epoch (the producer was fenced and started again).
    append(replicas, 0, 1, pid=OTHER, epoch=1, transactional=True)
    code, _, err = run(capsys, "abort", "--topic", TOPIC, "--partition", "0",
                       "--producer-id", str(OTHER), "--producer-epoch", "0",
                       "--coordinator-epoch", "0")
    assert code == 1
    assert f"failed to abort the transaction of producer {OTHER} (epoch 0" in err
    assert "INVALID_PRODUCER_EPOCH" in err
    code, _, err = run(capsys, "abort", "--topic", TOPIC, "--partition", "0")
    assert code == 2 and "either with --start-offset" in err


def test_list(cluster: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.listings = {
        1: [Listing(transactional_id="tx-b", producer_id=OTHER, transaction_state="Empty"),
            Listing(transactional_id="tx-a", producer_id=PID, transaction_state="Ongoing")],
        2: [Listing(transactional_id="tx-c", producer_id=9, transaction_state="CompleteCommit")]}
    code, out, err = run(capsys, "list")
    assert (code, err) == (0, "")
    assert [line.split() for line in out.splitlines()] == [
        ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
        ["tx-a", "1", str(PID), "Ongoing"], ["tx-b", "1", str(OTHER), "Empty"],
        ["tx-c", "2", "9", "CompleteCommit"]]
    assert sorted(r[0] for r in cluster.sent(ApiKey.LIST_TRANSACTIONS)) == [1, 2]  # every broker

    code, out, _ = run(capsys, "list", "--json", "--duration-filter", "1000")
    assert code == 0 and len(json.loads(out)) == 3
    sent = cluster.sent(ApiKey.LIST_TRANSACTIONS)[-2:]
    assert [(v, r.duration_filter) for _, v, r in sent] == [(1, 1000), (1, 1000)]  # type: ignore[attr-defined]

    # A broker that cannot answer: the others' listings, its error, exit 1.
    real = cluster.list_transactions
    cluster.apis[ApiKey.LIST_TRANSACTIONS] = lambda node, r: (
        ListTransactionsResponse(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        if node == 2 else real(node, r))
    code, out, err = run(capsys, "list")
    assert code == 1 and "broker 2: COORDINATOR_LOAD_IN_PROGRESS" in err
    assert len(out.splitlines()) == 3


def test_describe(cluster: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.descriptions["tx-1"] = description(start=NOW - 2000)
    code, out, err = run(capsys, "describe", "--transactional-id", "tx-1")
    assert (code, err) == (0, "")
    header, row = [line.split() for line in out.splitlines()]
    assert header == list(transactions.DESCRIBE_HEADERS)
    assert row[:7] == ["1", "tx-1", str(PID), "3", "Ongoing", "60000", str(NOW - 2000)]
    assert int(row[7]) >= 2000 and row[8] == f"{TOPIC}-0,{TOPIC}-1"
    find = cluster.sent(ApiKey.FIND_COORDINATOR)[-1]
    assert find[1] >= 4  # the batched form, key type TRANSACTION
    assert cluster.sent(ApiKey.DESCRIBE_TRANSACTIONS)[-1][0] == 1  # the coordinator

    code, out, _ = run(capsys, "describe", "--transactional-id", "tx-1", "--json")
    assert json.loads(out)["topic_partitions"] == [{"topic": TOPIC, "partition": 0},
                                                   {"topic": TOPIC, "partition": 1}]
    code, _, err = run(capsys, "describe", "--transactional-id", "tx-unknown")
    assert code == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in err


def test_find_hanging(cluster: FakeCluster, replicas: ReplicaManager,
                      capsys: pytest.CaptureFixture[str]) -> None:
    # Ages are measured against the real clock: not NOW, which is minutes old by the time
    # this runs in the whole suite.
    now = int(time.time() * 1000)
    old = now - 30 * 60_000
    append(replicas, 0, 1, pid=PID, transactional=True, timestamp=old)  # tx-1, counted
    append(replicas, 1, 1, pid=PID, transactional=True, timestamp=old)  # tx-1, not counted
    append(replicas, 1, 1, pid=OTHER, transactional=True, timestamp=old)  # no txn id
    append(replicas, 0, 1, pid=9, transactional=True, timestamp=now)  # recent: not one
    cluster.listings[1] = [Listing(transactional_id="tx-1", producer_id=PID,
                                   transaction_state="Ongoing")]
    cluster.descriptions["tx-1"] = description(partitions={TOPIC: [0]})
    code, out, err = run(capsys, "find-hanging", "--topic", TOPIC)
    assert (code, err) == (0, "")
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == list(transactions.HANGING_HEADERS)
    assert rows[1:] == [[TOPIC, "1", str(PID), "0", "-1", "0", str(old), "30"],
                        [TOPIC, "1", str(OTHER), "0", "-1", "1", str(old), "30"]]
    listed = cluster.sent(ApiKey.LIST_TRANSACTIONS)
    assert {tuple(r.producer_id_filters) for _, _, r in listed} == {  # type: ignore[attr-defined]
        (PID, OTHER)}

    code, out, _ = run(capsys, "find-hanging", "--broker-id", "2", "--json",
                       "--max-transaction-timeout", "60")
    assert (code, json.loads(out)) == (0, [])  # nothing silent for an hour
    assert cluster.sent(ApiKey.DESCRIBE_PRODUCERS)[-1][0] == 2

    code, _, err = run(capsys, "find-hanging")
    assert code == 2 and "--topic or --broker-id" in err
    code, _, err = run(capsys, "find-hanging", "--broker-id", "1", "--partition", "0")
    assert code == 2 and "--partition needs --topic" in err


def test_describe_asks_another_broker_when_one_is_down(
        cluster: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.descriptions["tx-1"] = description()
    cluster.coordinator, cluster.down = 2, {1}
    code, out, err = run(capsys, "describe", "--transactional-id", "tx-1", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out)["coordinator_id"] == 2
    assert {node for node, _, _ in cluster.requests} == {2}
    # The coordinator itself down: its address in the error.
    cluster.down = {1, 2}
    code, _, err = run(capsys, "describe", "--transactional-id", "tx-1")
    assert code == 1 and "broker 2 at 127.0.0.1:9002: cannot connect" in err
