"""The exactly-once sink's transactions on the driver: found, committed, aborted, fenced.

The sink is a two-phase commit over Kafka transactions, as Flink's Kafka sink is, with the
micro-batch as the unit Spark commits:

1. Each write task writes its rows in a transaction of its own (transactional id
   `<prefix>-<task partition id>`: the next attempt of the task fences an earlier one and
   aborts what it left open), flushes, and leaves the transaction open. It reports where the
   transaction starts: the first offset it wrote in one partition (`OpenTransaction`).
2. The driver finds each transaction's producer id and epoch: the producer whose open
   transaction starts at that offset (DescribeProducers to the partition's leader). So the
   epoch committed is the one that wrote the rows, never a later attempt's.
3. It records them in the sink's commit log (commit_log.py), then ends each transaction with
   EndTxn as the producer itself would (the transaction "resumed" from its id and epoch), and
   waits until the coordinator has written the markers: once commit() returns, the rows are
   visible to read_committed readers.

librdkafka has no call for any of this, so the requests are Odradek's own codec over the
CLI's blocking sockets (odradek.cli.transactions.Cluster).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

from odradek.cli.client import CliError
from odradek.cli.transactions import (
    Cluster,
    coordinator_of,
    describe_producers_request,
    find_coordinator_request,
    list_transactions_request,
)
from odradek.cli.wire import BrokerSocket, WireError, broker_security, error_name
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages.describe_producers_response import DescribeProducersResponse
from odradek.protocol.messages.describe_transactions_request import (
    DescribeTransactionsRequest,
)
from odradek.protocol.messages.describe_transactions_response import (
    DescribeTransactionsResponse,
)
from odradek.protocol.messages.end_txn_request import EndTxnRequest
from odradek.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from odradek.protocol.messages.find_coordinator_response import FindCoordinatorResponse
from odradek.protocol.messages.init_producer_id_request import InitProducerIdRequest
from odradek.protocol.messages.metadata_request import MetadataRequest
from odradek.protocol.messages.metadata_response import MetadataResponse

if TYPE_CHECKING:
    from odradek.broker.inter_broker_security import InterBrokerSecurity

# Answers after which the same request is sent again shortly: the coordinator is loading,
# moving, or still writing the markers of the transaction's previous step.
_RETRY = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
          ErrorCode.NOT_COORDINATOR, ErrorCode.CONCURRENT_TRANSACTIONS,
          ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_LEADER_OR_FOLLOWER,
          ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
# A transaction that is no longer this producer's: a newer epoch took the id over.
_FENCED = {ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH,
           ErrorCode.INVALID_PRODUCER_ID_MAPPING, ErrorCode.INVALID_TXN_STATE}
_DECIDED = {"CompleteCommit", "CompleteAbort", "Empty", "Dead"}
_PAUSE = 0.005


class SinkTransactionError(RuntimeError):
    """A transaction of the sink could not be committed (or found); the message says which
    task's, and why."""


@dataclass(frozen=True)
class OpenTransaction:
    """What a write task reports: its transaction is open and starts at this offset."""

    transactional_id: str
    topic: str
    partition: int
    first_offset: int


@dataclass(frozen=True)
class ProducerHandle:
    """A transaction as the driver ends it: the id, and the producer id and epoch that wrote
    it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


def _addresses(bootstrap_servers: str) -> list[tuple[str, int]]:
    found = []
    for address in bootstrap_servers.split(","):
        host, _, port = address.strip().rpartition(":")
        if host and port.isdigit():
            found.append((host.strip("[]"), int(port)))
    return found


class _Metadata:
    """Cluster's MetadataSource: Metadata for every topic from the first bootstrap server
    that answers, over the CLI's socket (an AdminClient takes 50 ms to connect), shaped as
    librdkafka's ClusterMetadata."""

    def __init__(self, bootstrap_servers: str, timeout: float,
                 security: InterBrokerSecurity | None = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.timeout = timeout
        self.security = security

    def metadata(self) -> Any:
        failure: Exception = CliError(f"no bootstrap server in {self.bootstrap_servers!r}")
        for host, port in _addresses(self.bootstrap_servers):
            try:
                with BrokerSocket(host, port, timeout=self.timeout,
                                  security=self.security) as sock:
                    response = cast(MetadataResponse, sock.send(
                        MetadataRequest(topics=None, allow_auto_topic_creation=False)))
            except WireError as e:
                failure = e
                continue
            return SimpleNamespace(
                brokers={b.node_id: SimpleNamespace(host=b.host, port=b.port)
                         for b in response.brokers},
                topics={t.name: SimpleNamespace(
                    error=t.error_code or None,
                    partitions={p.partition_index: SimpleNamespace(leader=p.leader_id)
                                for p in t.partitions})
                        for t in response.topics})
        raise failure


class SinkTransactions:
    """The driver's client for the sink's transactions; every call is bounded by `timeout`
    seconds."""

    def __init__(self, client: dict[str, str], timeout: float = 120.0) -> None:
        # The client's TLS and SASL settings (CliError for ones the driver cannot use).
        self._security = broker_security(client)
        self._source = _Metadata(client["bootstrap.servers"], timeout, self._security)
        self.timeout = timeout
        self._cluster: Cluster | None = None
        self._coordinators: dict[str, tuple[int, str, int]] = {}

    def __enter__(self) -> SinkTransactions:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.__exit__()
            self._cluster = None

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            try:
                self._cluster = Cluster(self._source, connect=functools.partial(
                    BrokerSocket, security=self._security))
            except Exception as e:
                raise SinkTransactionError(f"cannot reach the cluster: {e}") from e
        return self._cluster

    def _refresh(self) -> None:
        """New metadata (leaders moved) and new connections."""
        self.close()
        self._coordinators.clear()

    def _deadline_passed(self, deadline: float) -> bool:
        if time.monotonic() < deadline:
            time.sleep(_PAUSE)
            return False
        return True

    # -- finding the producers -------------------------------------------------------------

    def resolve(self, opened: Sequence[OpenTransaction]) -> list[ProducerHandle]:
        """The producer id and epoch of each open transaction; SinkTransactionError names
        the first one that is no longer open (fenced by a newer attempt of its task, or
        aborted by the coordinator after transaction.timeout.ms)."""
        deadline = time.monotonic() + self.timeout
        found: dict[str, ProducerHandle] = {}
        while True:
            missing = [o for o in opened if o.transactional_id not in found]
            if not missing:
                return [found[o.transactional_id] for o in opened]
            retry = False
            by_leader: dict[int, list[OpenTransaction]] = {}
            try:
                for o in missing:
                    by_leader.setdefault(self.cluster.leader(o.topic, o.partition), []).append(o)
                for leader, group in by_leader.items():
                    response = cast(DescribeProducersResponse, self.cluster.send(
                        leader, describe_producers_request({(o.topic, o.partition)
                                                            for o in group})))
                    answers = {(t.name, p.partition_index): p
                               for t in response.topics for p in t.partitions}
                    for o in group:
                        answer = answers.get((o.topic, o.partition))
                        code = answer.error_code if answer else ErrorCode.UNKNOWN_SERVER_ERROR
                        if code in _RETRY:
                            retry = True
                            continue
                        if answer is None or code != ErrorCode.NONE:
                            raise SinkTransactionError(
                                f"cannot describe the producers of {o.topic}-{o.partition} "
                                f"for transaction {o.transactional_id!r}: {error_name(code)}")
                        producer = next((p for p in answer.active_producers
                                         if p.current_txn_start_offset == o.first_offset), None)
                        if producer is None:
                            raise SinkTransactionError(
                                f"the transaction of {o.transactional_id!r} (its first record "
                                f"at {o.topic}-{o.partition} offset {o.first_offset}) is no "
                                "longer open: a newer attempt of its task fenced it, or the "
                                "coordinator aborted it after transaction.timeout.ms")
                        found[o.transactional_id] = ProducerHandle(
                            o.transactional_id, producer.producer_id, producer.producer_epoch)
            except CliError as e:   # a leader moved or a broker went away
                retry = True
                if time.monotonic() >= deadline:
                    raise SinkTransactionError(f"cannot describe the producers: {e}") from e
            if retry:
                if self._deadline_passed(deadline):
                    raise SinkTransactionError(
                        "cannot describe the producers of the sink's transactions within "
                        f"{self.timeout:g}s")
                self._refresh()

    # -- ending transactions ---------------------------------------------------------------

    def _coordinator(self, transactional_id: str) -> tuple[int, str, int]:
        found = self._coordinators.get(transactional_id)
        if found is None:
            found = self.cluster.find_coordinator(transactional_id)
            self._coordinators[transactional_id] = found
        return found

    def _send(self, transactional_id: str, request: Any) -> Any:
        node, host, port = self._coordinator(transactional_id)
        return self.cluster.send(node, request, host=host, port=port)

    def _ask(self, transactional_id: str, request: Any, what: str, deadline: float) -> int:
        """Sends a request to the id's coordinator until the answer is not a retriable
        error; returns the error code."""
        while True:
            try:
                code = int(self._send(transactional_id, request).error_code)
            except CliError as e:   # the coordinator's broker went away
                code, failure = -1, str(e)
            if code == ErrorCode.NONE or (code >= 0 and code not in _RETRY):
                return code
            if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, -1):
                self._coordinators.pop(transactional_id, None)
                if code == -1:
                    self._refresh()
            if self._deadline_passed(deadline):
                detail = failure if code == -1 else error_name(code)
                raise SinkTransactionError(f"cannot {what} {transactional_id!r} within "
                                           f"{self.timeout:g}s: {detail}")

    def end(self, handles: Iterable[ProducerHandle], commit: bool) -> None:
        """Commits (or aborts) each transaction and waits until the coordinator has decided
        it: its markers are written. A commit that the coordinator refuses (the producer was
        fenced, the transaction aborted) raises SinkTransactionError; an abort of a
        transaction that is already gone is not an error. Committing a transaction that is
        already committed succeeds (EndTxn is idempotent for its producer's epoch)."""
        handles = list(handles)
        deadline = time.monotonic() + self.timeout
        what = "commit" if commit else "abort"
        for h in handles:
            request = EndTxnRequest(transactional_id=h.transactional_id,
                                    producer_id=h.producer_id, producer_epoch=h.producer_epoch,
                                    committed=commit)
            code = self._ask(h.transactional_id, request, f"{what} transaction", deadline)
            if code == ErrorCode.NONE or (not commit and code in _FENCED):
                continue
            raise SinkTransactionError(
                f"cannot {what} transaction {h.transactional_id!r} (producer id "
                f"{h.producer_id}, epoch {h.producer_epoch}): {error_name(code)}"
                + (": a newer producer took the id over, or the coordinator aborted it "
                   "after transaction.timeout.ms" if code in _FENCED else ""))
        self._wait_decided(handles, deadline)

    def _wait_decided(self, handles: Sequence[ProducerHandle], deadline: float) -> None:
        """Until no transaction is in PrepareCommit/PrepareAbort any more (markers written),
        or a newer epoch has the id."""
        pending = {h.transactional_id: h for h in handles}
        while pending:
            by_coordinator: dict[tuple[int, str, int], list[str]] = {}
            for transactional_id in pending:
                by_coordinator.setdefault(self._coordinator(transactional_id), []).append(
                    transactional_id)
            for (node, host, port), ids in by_coordinator.items():
                try:
                    response = cast(DescribeTransactionsResponse, self.cluster.send(
                        node, DescribeTransactionsRequest(transactional_ids=ids),
                        host=host, port=port))
                except CliError:
                    self._refresh()
                    break
                for state in response.transaction_states:
                    h = pending.get(state.transactional_id)
                    if h is None or state.error_code in _RETRY:
                        self._coordinators.pop(state.transactional_id, None)
                        continue
                    if (state.error_code != ErrorCode.NONE
                            or state.transaction_state in _DECIDED
                            or state.producer_id != h.producer_id
                            or state.producer_epoch != h.producer_epoch):
                        del pending[state.transactional_id]
            if pending and self._deadline_passed(deadline):
                raise SinkTransactionError(
                    f"transactions {sorted(pending)} were not completed within "
                    f"{self.timeout:g}s (their markers are not all written)")

    # -- fencing what a crashed run left open ------------------------------------------------

    def open_transactions(self, prefix: str) -> list[str]:
        """The ids `<prefix>-N` of transactions that are open now, on any coordinator."""
        found: set[str] = set()
        for broker_id, response in self.cluster.list_transactions(
                list_transactions_request(states=("Ongoing",))):
            if isinstance(response, CliError):
                raise SinkTransactionError(f"cannot list the transactions of broker "
                                           f"{broker_id}: {response}")
            found.update(t.transactional_id for t in response.transaction_states
                         if _belongs(t.transactional_id, prefix))
        return sorted(found)

    def fence(self, transactional_ids: Iterable[str], timeout_ms: int) -> None:
        """InitProducerId for each id, as a new producer would: the coordinator aborts the
        transaction the id left open and bumps its epoch, so that a zombie cannot go on."""
        deadline = time.monotonic() + self.timeout
        for transactional_id in transactional_ids:
            request = InitProducerIdRequest(transactional_id=transactional_id,
                                            transaction_timeout_ms=timeout_ms)
            code = self._ask(transactional_id, request, "fence", deadline)
            if code != ErrorCode.NONE:
                raise SinkTransactionError(f"cannot fence transactional id "
                                           f"{transactional_id!r}: {error_name(code)}")


def _belongs(transactional_id: str, prefix: str) -> bool:
    head, _, task = transactional_id.rpartition("-")
    return head == prefix and task.isdigit()


def transaction_state(client: Mapping[str, Any], transactional_id: str,
                      timeout: float = 10.0) -> str | None:
    """The state of a transactional id's current transaction (CompleteCommit, Ongoing, ...)
    in two requests over the client settings' connections (TLS, SASL): FindCoordinator to
    a bootstrap server, then DescribeTransactions to the coordinator. None when it cannot
    be had in `timeout`, or the settings are ones the CLI's socket cannot use."""
    try:
        security = broker_security(client)
    except CliError:
        return None
    for host, port in _addresses(str(client["bootstrap.servers"])):
        try:
            with BrokerSocket(host, port, timeout=timeout, security=security) as sock:
                version = min(sock.api_versions.get(FindCoordinatorRequest.API_KEY, (0, 0))[1],
                              FindCoordinatorRequest.MAX_VERSION)
                if version < 1:   # no key type before v1: the answer would be a group's
                    return None
                found = cast(FindCoordinatorResponse, sock.send(
                    find_coordinator_request(transactional_id, version), version))
                code, _, (_, c_host, c_port) = coordinator_of(found, transactional_id)
                if code != ErrorCode.NONE:
                    return None
                with BrokerSocket(c_host, c_port, timeout=timeout,
                                  security=security) as coordinator:
                    described = cast(DescribeTransactionsResponse, coordinator.send(
                        DescribeTransactionsRequest(transactional_ids=[transactional_id])))
        except WireError:
            continue
        for state in described.transaction_states:
            if state.transactional_id == transactional_id and state.error_code == 0:
                return str(state.transaction_state)
        return None
    return None
