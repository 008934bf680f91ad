"""`odradek transactions`: Kafka's kafka-transactions.sh (KIP-664) for any Kafka cluster.

    list [--duration-filter MS]                 ListTransactions, to every broker
    describe --transactional-id ID              DescribeTransactions, to its coordinator
    describe-producers --topic T --partition P [--broker-id B]
                                                DescribeProducers, to the leader (or B)
    abort --topic T --partition P (--start-offset O |
          --producer-id I --producer-epoch E --coordinator-epoch C)
                                                WriteTxnMarkers ABORT, to the leader
    find-hanging (--topic T [--partition P] | --broker-id B) [--max-transaction-timeout MIN]

librdkafka has none of these admin calls, so the brokers come from librdkafka's Metadata
and the requests are Odradek's own codec over the CLI's socket (wire.py), each sent where
Kafka's admin client sends it: ListTransactions to every broker, DescribeTransactions to
the transactional id's coordinator (FindCoordinator, key type TRANSACTION),
DescribeProducers and the abort's WriteTxnMarkers to the partition's leader. `abort
--start-offset` first asks the leader which producer's open transaction starts at that
offset, as Kafka's tool does. `find-hanging` follows Kafka's: open transactions whose
producer wrote nothing for longer than the maximum transaction timeout, whose producer id
no coordinator knows or whose coordinator does not count the partition in the
transaction.

The tables have kafka-transactions.sh's columns under its own header names; `--json`
gives the same facts with snake_case keys.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from odradek.broker.inter_broker_client import choose_version
from odradek.cli.client import (
    EXIT_FAILURE,
    EXIT_USAGE,
    AdminCommand,
    CliError,
    client_config,
    command,
    common_options,
)
from odradek.cli.output import print_json
from odradek.cli.wire import BrokerSocket, WireError, broker_security, error_name
from odradek.protocol.api_keys import API_SPECS
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import UnsupportedVersionError
from odradek.protocol.message import Message
from odradek.protocol.messages.describe_producers_request import (
    DescribeProducersRequest,
    TopicRequest,
)
from odradek.protocol.messages.describe_producers_response import (
    DescribeProducersResponse,
    PartitionResponse,
    ProducerState,
)
from odradek.protocol.messages.describe_transactions_request import (
    DescribeTransactionsRequest,
)
from odradek.protocol.messages.describe_transactions_response import (
    DescribeTransactionsResponse,
)
from odradek.protocol.messages.describe_transactions_response import (
    TransactionState as TransactionDescription,
)
from odradek.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from odradek.protocol.messages.find_coordinator_response import FindCoordinatorResponse
from odradek.protocol.messages.list_transactions_request import ListTransactionsRequest
from odradek.protocol.messages.list_transactions_response import ListTransactionsResponse
from odradek.protocol.messages.write_txn_markers_request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from odradek.protocol.messages.write_txn_markers_response import WriteTxnMarkersResponse

TopicPartition = tuple[str, int]

TRANSACTION_KEY_TYPE = 1  # FindCoordinator's key type for a transactional id
MAX_BATCH_SIZE = 500  # partitions per DescribeProducers of find-hanging (Kafka's)
DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15
# Answers that mean "ask again shortly" (a coordinator loading or moving).
_RETRIABLE = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
              ErrorCode.NOT_COORDINATOR}

LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                    "TransactionState", "TransactionTimeoutMs",
                    "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                    "TopicPartitions")
PRODUCERS_HEADERS = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                     "LastTimestamp", "CurrentTransactionStartOffset")
HANGING_HEADERS = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                   "StartOffset", "LastTimestamp", "Duration(min)")


class UnsupportedApiError(CliError):
    """A broker that does not advertise the API (ApiVersions) or the version needed."""


# ---- the command line ---------------------------------------------------------------------

def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    transactions = commands.add_parser(
        "transactions", help="list, describe and abort transactions (kafka-transactions.sh)")
    actions = transactions.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser(
        "list", parents=[common_options()],
        help="the transactional ids every broker coordinates, with their producer id "
        "and state")
    listing.add_argument(
        "--duration-filter", metavar="MS", type=int, default=None,
        help="only transactions running for longer than MS milliseconds (a negative "
        "value: every transaction)")
    listing.set_defaults(run=run_list)

    describe = actions.add_parser(
        "describe", parents=[common_options()],
        help="the state of one transactional id, from its coordinator")
    describe.add_argument("--transactional-id", required=True, metavar="ID")
    describe.set_defaults(run=run_describe)

    producers = actions.add_parser(
        "describe-producers", parents=[common_options()],
        help="the active producers of a partition and their open transactions")
    producers.add_argument("--topic", required=True)
    producers.add_argument("--partition", required=True, type=partition_number)
    producers.add_argument("--broker-id", type=int, metavar="ID",
                           help="ask this replica rather than the leader")
    producers.set_defaults(run=run_describe_producers)

    abort = actions.add_parser(
        "abort", parents=[common_options()],
        help="abort a hanging transaction on one partition (writes an ABORT marker)")
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", required=True, type=partition_number)
    by_offset = abort.add_argument_group(
        "by start offset", "the leader is asked which producer's transaction starts there")
    by_offset.add_argument("--start-offset", type=int, metavar="OFFSET",
                           help="the first offset of the transaction to abort")
    by_producer = abort.add_argument_group(
        "by producer", "all three, as describe-producers shows them")
    by_producer.add_argument("--producer-id", type=int, metavar="ID")
    by_producer.add_argument("--producer-epoch", type=int, metavar="EPOCH")
    by_producer.add_argument("--coordinator-epoch", type=int, metavar="EPOCH")
    abort.set_defaults(run=run_abort)

    hanging = actions.add_parser(
        "find-hanging", parents=[common_options()],
        help="open transactions no coordinator will complete")
    hanging.add_argument("--topic", help="search this topic (required with --partition)")
    hanging.add_argument("--partition", type=partition_number)
    hanging.add_argument("--broker-id", type=int, metavar="ID",
                         help="search the partitions this broker holds a replica of, "
                         "asking it")
    hanging.add_argument(
        "--max-transaction-timeout", type=int, metavar="MINUTES",
        default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN,
        help="only transactions whose producer wrote nothing for longer than this "
        f"(default {DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN})")
    hanging.set_defaults(run=run_find_hanging)


def partition_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a partition number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a partition number is at least 0, not {value}")
    return value


# ---- requests -------------------------------------------------------------------------

def list_transactions_request(duration_filter: int | None = None,
                              producer_ids: Iterable[int] = (),
                              states: Iterable[str] = ()) -> ListTransactionsRequest:
    return ListTransactionsRequest(
        state_filters=list(states), producer_id_filters=sorted(set(producer_ids)),
        duration_filter=-1 if duration_filter is None else duration_filter)


def find_coordinator_request(transactional_id: str, version: int) -> FindCoordinatorRequest:
    """`key` up to v3, a batch of `coordinator_keys` from v4 (KIP-699)."""
    if version >= 4:
        return FindCoordinatorRequest(key_type=TRANSACTION_KEY_TYPE,
                                      coordinator_keys=[transactional_id])
    return FindCoordinatorRequest(key=transactional_id, key_type=TRANSACTION_KEY_TYPE)


def describe_producers_request(partitions: Iterable[TopicPartition]
                               ) -> DescribeProducersRequest:
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    return DescribeProducersRequest(topics=[
        TopicRequest(name=topic, partition_indexes=indexes)
        for topic, indexes in by_topic.items()])


@dataclass(frozen=True, slots=True)
class AbortSpec:
    """What Kafka's AbortTransactionSpec holds: the marker to write."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int


def abort_request(spec: AbortSpec) -> WriteTxnMarkersRequest:
    """An ABORT marker for the producer on one partition, as Kafka's admin sends it."""
    return WriteTxnMarkersRequest(markers=[WritableTxnMarker(
        producer_id=spec.producer_id, producer_epoch=spec.producer_epoch,
        transaction_result=False, coordinator_epoch=spec.coordinator_epoch,
        topics=[WritableTxnMarkerTopic(name=spec.topic, partition_indexes=[spec.partition])])])


def abort_spec_from_options(args: argparse.Namespace) -> AbortSpec | None:
    """The spec given by --producer-id, --producer-epoch and --coordinator-epoch; None
    when the transaction is named by --start-offset. A CliError (usage) otherwise."""
    by_producer = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
    if args.start_offset is not None:
        if any(v is not None for v in by_producer):
            raise CliError("give either --start-offset or --producer-id, --producer-epoch "
                           "and --coordinator-epoch, not both", EXIT_USAGE)
        return None
    if args.producer_id is None:
        raise CliError("the transaction to abort must be identified either with "
                       "--start-offset or with --producer-id, --producer-epoch and "
                       "--coordinator-epoch", EXIT_USAGE)
    for option, value in (("--producer-epoch", args.producer_epoch),
                          ("--coordinator-epoch", args.coordinator_epoch)):
        if value is None:
            raise CliError(f"missing required argument {option}", EXIT_USAGE)
    # A transaction that hung before its producer's first marker shows coordinator epoch
    # -1 in describe-producers: 0 is at most any epoch a coordinator had (Kafka's choice).
    return AbortSpec(args.topic, args.partition, args.producer_id, args.producer_epoch,
                     max(args.coordinator_epoch, 0))


def abort_spec_from_producers(topic: str, partition: int, start_offset: int,
                              producers: Sequence[ProducerState]) -> AbortSpec:
    """The producer whose open transaction starts at `start_offset` (Kafka's
    buildAbortSpec)."""
    for producer in producers:
        if producer.current_txn_start_offset == start_offset:
            return AbortSpec(topic, partition, producer.producer_id, producer.producer_epoch,
                             max(producer.coordinator_epoch, 0))
    raise CliError(f"could not find any open transaction starting at offset {start_offset} "
                   f"on partition {topic}-{partition}")


# ---- formatting -----------------------------------------------------------------------

def kafka_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns two spaces apart under kafka-transactions.sh's header names
    (kept as Kafka writes them); no trailing blanks."""
    cells = [list(headers), *[[str(v) for v in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in cells)


def _none_if_negative(value: int) -> int | None:
    return value if value >= 0 else None


def _kafka(value: int | None) -> str:
    """Kafka's tools print an absent optional value as None."""
    return "None" if value is None else str(value)


def listing_json(coordinator: int, state: Any) -> dict[str, Any]:
    return {"transactional_id": state.transactional_id, "coordinator": coordinator,
            "producer_id": state.producer_id, "state": state.transaction_state}


def list_rows(listings: Sequence[dict[str, Any]]) -> list[list[Any]]:
    return [[t["transactional_id"], t["coordinator"], t["producer_id"], t["state"]]
            for t in listings]


def description_json(coordinator: int, description: TransactionDescription,
                     now_ms: int) -> dict[str, Any]:
    start = _none_if_negative(description.transaction_start_time_ms)
    return {
        "coordinator_id": coordinator,
        "transactional_id": description.transactional_id,
        "producer_id": description.producer_id,
        "producer_epoch": description.producer_epoch,
        "state": description.transaction_state,
        "transaction_timeout_ms": description.transaction_timeout_ms,
        "transaction_start_time_ms": start,
        "transaction_duration_ms": None if start is None else now_ms - start,
        "topic_partitions": [{"topic": t.topic, "partition": p}
                             for t in description.topics for p in t.partitions],
    }


def describe_row(described: dict[str, Any]) -> list[Any]:
    return [described["coordinator_id"], described["transactional_id"],
            described["producer_id"], described["producer_epoch"], described["state"],
            described["transaction_timeout_ms"], _kafka(described["transaction_start_time_ms"]),
            _kafka(described["transaction_duration_ms"]),
            ",".join(f"{tp['topic']}-{tp['partition']}" for tp in described["topic_partitions"])]


def producer_json(producer: ProducerState) -> dict[str, Any]:
    return {
        "producer_id": producer.producer_id,
        "producer_epoch": producer.producer_epoch,
        "coordinator_epoch": _none_if_negative(producer.coordinator_epoch),
        "last_sequence": producer.last_sequence,
        "last_timestamp": producer.last_timestamp,
        "current_transaction_start_offset": _none_if_negative(
            producer.current_txn_start_offset),
    }


def producer_rows(producers: Sequence[dict[str, Any]]) -> list[list[Any]]:
    """Kafka's: the coordinator epoch -1 when none, the start offset None when none."""
    return [[p["producer_id"], p["producer_epoch"],
             -1 if p["coordinator_epoch"] is None else p["coordinator_epoch"],
             p["last_sequence"], p["last_timestamp"],
             _kafka(p["current_transaction_start_offset"])] for p in producers]


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    topic: str
    partition: int
    producer: ProducerState


def candidate_transactions(states: dict[TopicPartition, Sequence[ProducerState]],
                           max_timeout_ms: int, now_ms: int) -> list[OpenTransaction]:
    """Open transactions whose producer wrote nothing for longer than `max_timeout_ms`:
    no coordinator would have let them run this long (Kafka's candidates)."""
    return [OpenTransaction(tp[0], tp[1], p)
            for tp, producers in sorted(states.items()) for p in producers
            if p.current_txn_start_offset >= 0 and now_ms - p.last_timestamp > max_timeout_ms]


def hanging_transactions(candidates: Sequence[OpenTransaction],
                         transactional_ids: dict[int, str],
                         descriptions: dict[str, TransactionDescription | None]
                         ) -> list[OpenTransaction]:
    """Kafka's filterHangingTransactions: a candidate hangs when no coordinator knows its
    producer id, when its transactional id is not found, or when the coordinator's
    transaction does not include the partition (it will write no marker there)."""
    hanging = []
    for txn in candidates:
        transactional_id = transactional_ids.get(txn.producer.producer_id)
        description = None if transactional_id is None else descriptions.get(transactional_id)
        if description is None or (txn.topic, txn.partition) not in {
                (t.topic, p) for t in description.topics for p in t.partitions}:
            hanging.append(txn)
    return hanging


def hanging_json(txn: OpenTransaction, now_ms: int) -> dict[str, Any]:
    p = txn.producer
    return {"topic": txn.topic, "partition": txn.partition, "producer_id": p.producer_id,
            "producer_epoch": p.producer_epoch,
            "coordinator_epoch": _none_if_negative(p.coordinator_epoch),
            "start_offset": p.current_txn_start_offset, "last_timestamp": p.last_timestamp,
            "duration_min": (now_ms - p.last_timestamp) // 60_000}


def hanging_rows(hanging: Sequence[dict[str, Any]]) -> list[list[Any]]:
    return [[h["topic"], h["partition"], h["producer_id"], h["producer_epoch"],
             -1 if h["coordinator_epoch"] is None else h["coordinator_epoch"],
             h["start_offset"], h["last_timestamp"], h["duration_min"]] for h in hanging]


# ---- talking to the cluster -------------------------------------------------------------

def now_ms() -> int:
    return int(time.time() * 1000)


class MetadataSource(Protocol):
    """What Cluster needs of an admin client: its timeout and librdkafka's Metadata (an
    AdminCommand here; the Spark sink's driver has its own)."""

    timeout: float

    def metadata(self) -> Any: ...


class Cluster:
    """The brokers and partitions of librdkafka's Metadata, and a connection per broker
    (wire.py) for the requests librdkafka cannot send, all within the command's timeout."""

    def __init__(self, admin: MetadataSource, *, connect: Callable[..., BrokerSocket] =
                 BrokerSocket) -> None:
        self.timeout = admin.timeout
        self.deadline = time.monotonic() + admin.timeout
        self.metadata = admin.metadata()
        self._connect = connect
        self._sockets: dict[int, BrokerSocket] = {}

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        for sock in self._sockets.values():
            sock.close()
        self._sockets.clear()

    @property
    def broker_ids(self) -> list[int]:
        return sorted(self.metadata.brokers)

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def broker(self, node_id: int, host: str | None = None, port: int | None = None
               ) -> BrokerSocket:
        sock = self._sockets.get(node_id)
        if sock is None:
            if host is None or port is None:
                node = self.metadata.brokers.get(node_id)
                if node is None:
                    raise CliError(f"no broker {node_id} in the cluster (brokers: "
                                   f"{', '.join(map(str, self.broker_ids)) or 'none'})")
                host, port = node.host, node.port
            sock = self._connect(host, port, timeout=max(self.remaining(), 0.1),
                                 node_id=node_id)
            sock.connect()
            self._sockets[node_id] = sock
        return sock

    def version(self, node_id: int, api_key: int, *, min_version: int = 0,
                host: str | None = None, port: int | None = None) -> int:
        """The version of an API this broker will be sent (the highest both sides know);
        UnsupportedApiError when the broker does not advertise the API (at least
        `min_version`)."""
        sock = self.broker(node_id, host, port)
        name = API_SPECS[api_key].name
        supported = sock.api_versions.get(api_key)
        if supported is None:
            raise UnsupportedApiError(f"{sock.name} does not support {name} "
                                      f"(API key {api_key})")
        if supported[1] < min_version:
            raise UnsupportedApiError(f"{sock.name} supports {name} up to v{supported[1]}, "
                                      f"this needs v{min_version}")
        try:
            return choose_version(api_key, sock.api_versions)
        except UnsupportedVersionError as e:
            raise UnsupportedApiError(f"{sock.name}: {e}") from e

    def send(self, node_id: int, request: Message, *, min_version: int = 0,
             host: str | None = None, port: int | None = None) -> Message:
        """The request to one broker in the highest version both sides know, refused with
        UnsupportedApiError before anything is sent when the broker does not advertise
        the API (at least `min_version`)."""
        api_key: int = request.API_KEY  # type: ignore[attr-defined]
        version = self.version(node_id, api_key, min_version=min_version, host=host,
                               port=port)
        return self.broker(node_id, host, port).send(request, version)

    def partition(self, topic: str, index: int) -> Any:
        described = self.metadata.topics.get(topic)
        if described is None or (described.error is not None and not described.partitions):
            raise CliError(f"{topic}-{index}: UNKNOWN_TOPIC_OR_PARTITION: no topic {topic!r} "
                           "in the cluster")
        partition = described.partitions.get(index)
        if partition is None:
            raise CliError(f"{topic}-{index}: UNKNOWN_TOPIC_OR_PARTITION: {topic} has "
                           f"{len(described.partitions)} partitions")
        return partition

    def leader(self, topic: str, index: int) -> int:
        leader: int = self.partition(topic, index).leader
        if leader < 0:
            raise CliError(f"{topic}-{index}: LEADER_NOT_AVAILABLE: the partition has no "
                           "leader right now")
        return leader

    # -- the requests ----------------------------------------------------------------

    def list_transactions(self, request: ListTransactionsRequest
                          ) -> Iterator[tuple[int, ListTransactionsResponse | CliError]]:
        """Each broker's answer (or why there is none), in broker id order."""
        min_version = 1 if request.duration_filter >= 0 else 0
        for broker_id in self.broker_ids:
            try:
                response = cast(ListTransactionsResponse,
                                self.send(broker_id, request, min_version=min_version))
            except CliError as e:
                yield broker_id, e
                continue
            if response.error_code:
                yield broker_id, CliError(f"broker {broker_id}: "
                                          f"{error_name(response.error_code)}")
                continue
            yield broker_id, response

    def find_coordinator(self, transactional_id: str) -> tuple[int, str, int]:
        """The coordinator of a transactional id: (node id, host, port)."""
        while True:
            response = self._ask_any_broker(
                lambda version: find_coordinator_request(transactional_id, version))
            code, message, node = coordinator_of(response, transactional_id)
            if code == ErrorCode.NONE:
                return node
            if code not in _RETRIABLE or self.remaining() <= 0.2:
                detail = f": {message}" if message else ""
                raise CliError(f"cannot find the coordinator of {transactional_id!r}: "
                               f"{error_name(code)}{detail}")
            time.sleep(0.2)

    def _ask_any_broker(self, build: Callable[[int], FindCoordinatorRequest]
                        ) -> FindCoordinatorResponse:
        """FindCoordinator to the first broker that answers (in broker id order)."""
        failure: WireError | None = None
        for broker_id in self.broker_ids:
            try:
                version = self.version(broker_id, FindCoordinatorRequest.API_KEY,
                                       min_version=1)
                return cast(FindCoordinatorResponse, self.send(broker_id, build(version)))
            except WireError as e:  # that broker is down: ask the next one
                failure = e
        raise failure or CliError("no broker in the cluster's metadata")

    def describe_transaction(self, transactional_id: str
                             ) -> tuple[int, TransactionDescription]:
        """(coordinator id, its description); the description's error_code is the
        coordinator's answer, retried while the coordinator loads or moves."""
        while True:
            node_id, host, port = self.find_coordinator(transactional_id)
            response = cast(DescribeTransactionsResponse, self.send(
                node_id, DescribeTransactionsRequest(transactional_ids=[transactional_id]),
                host=host, port=port))
            (description,) = [d for d in response.transaction_states
                              if d.transactional_id == transactional_id] or [
                TransactionDescription(transactional_id=transactional_id,
                                       error_code=ErrorCode.UNKNOWN_SERVER_ERROR)]
            if description.error_code not in _RETRIABLE or self.remaining() <= 0.2:
                return node_id, description
            time.sleep(0.2)

    def describe_producers(self, node_id: int, partitions: Sequence[TopicPartition]
                           ) -> dict[TopicPartition, PartitionResponse]:
        response = cast(DescribeProducersResponse, self.send(
            node_id, describe_producers_request(partitions)))
        return {(t.name, p.partition_index): p for t in response.topics for p in t.partitions}


def coordinator_of(response: FindCoordinatorResponse, key: str
                   ) -> tuple[int, str | None, tuple[int, str, int]]:
    """(error code, message, (node id, host, port)) from either shape of the response."""
    for c in response.coordinators:  # v4 and later
        if c.key == key:
            return c.error_code, c.error_message, (c.node_id, c.host, c.port)
    if response.coordinators:
        return ErrorCode.UNKNOWN_SERVER_ERROR, f"no answer for {key!r}", (-1, "", -1)
    return (response.error_code, response.error_message,
            (response.node_id, response.host, response.port))


def _open(args: argparse.Namespace, what: str) -> Cluster:
    security = broker_security(client_config(args))
    return Cluster(AdminCommand(args), connect=functools.partial(BrokerSocket,
                                                                 security=security))


def _partition_error(tp: TopicPartition, result: PartitionResponse | None, where: str
                     ) -> CliError | None:
    if result is None:
        return CliError(f"{tp[0]}-{tp[1]}: {where} did not answer for the partition")
    if result.error_code:
        detail = f": {result.error_message}" if result.error_message else ""
        return CliError(f"{tp[0]}-{tp[1]} on {where}: {error_name(result.error_code)}"
                        f"{detail}")
    return None


# ---- the commands -------------------------------------------------------------------------

@command("transactions list")
def run_list(args: argparse.Namespace) -> int:
    request = list_transactions_request(args.duration_filter)
    status = 0
    listings: list[dict[str, Any]] = []
    with _open(args, "list") as cluster:
        for broker_id, answer in cluster.list_transactions(request):
            if isinstance(answer, CliError):
                print(f"odradek transactions list: {answer}", file=sys.stderr)
                status = EXIT_FAILURE
                continue
            listings.extend(listing_json(broker_id, s) for s in sorted(
                answer.transaction_states, key=lambda s: s.transactional_id))
    if args.json:
        print_json(listings)
    else:
        print(kafka_table(LIST_HEADERS, list_rows(listings)))
    return status


@command("transactions describe")
def run_describe(args: argparse.Namespace) -> int:
    with _open(args, "describe") as cluster:
        coordinator, description = cluster.describe_transaction(args.transactional_id)
    if description.error_code:
        raise CliError(f"cannot describe transactional id {args.transactional_id!r} "
                       f"(coordinator {coordinator}): {error_name(description.error_code)}")
    described = description_json(coordinator, description, now_ms())
    if args.json:
        print_json(described)
    else:
        print(kafka_table(DESCRIBE_HEADERS, [describe_row(described)]))
    return 0


@command("transactions describe-producers")
def run_describe_producers(args: argparse.Namespace) -> int:
    tp = (args.topic, args.partition)
    with _open(args, "describe-producers") as cluster:
        if args.broker_id is None:
            node_id, where = cluster.leader(*tp), "the leader"
        else:
            node_id, where = args.broker_id, f"broker {args.broker_id}"
        result = cluster.describe_producers(node_id, [tp]).get(tp)
    if (error := _partition_error(tp, result, f"{where} ({node_id})")) is not None:
        raise error
    assert result is not None
    producers = [producer_json(p) for p in result.active_producers]
    if args.json:
        print_json({"topic": tp[0], "partition": tp[1], "broker": node_id,
                    "producers": producers})
    else:
        print(kafka_table(PRODUCERS_HEADERS, producer_rows(producers)))
    return 0


@command("transactions abort")
def run_abort(args: argparse.Namespace) -> int:
    spec = abort_spec_from_options(args)
    tp = (args.topic, args.partition)
    with _open(args, "abort") as cluster:
        leader = cluster.leader(*tp)
        if spec is None:
            result = cluster.describe_producers(leader, [tp]).get(tp)
            error = _partition_error(tp, result, f"the leader ({leader})")
            if error is not None:
                raise CliError(f"failed to validate the producer state: {error}")
            assert result is not None
            spec = abort_spec_from_producers(*tp, args.start_offset, result.active_producers)
        response = cast(WriteTxnMarkersResponse, cluster.send(leader, abort_request(spec)))
    code = marker_error(response, spec)
    if code:
        raise CliError(f"failed to abort the transaction of producer {spec.producer_id} "
                       f"(epoch {spec.producer_epoch}, coordinator epoch "
                       f"{spec.coordinator_epoch}) on {spec.topic}-{spec.partition}: "
                       f"{error_name(code)}")
    if args.json:
        print_json({"topic": spec.topic, "partition": spec.partition,
                    "producer_id": spec.producer_id, "producer_epoch": spec.producer_epoch,
                    "coordinator_epoch": spec.coordinator_epoch, "aborted": True})
    else:
        print(f"Aborted the transaction of producer {spec.producer_id} (epoch "
              f"{spec.producer_epoch}) on {spec.topic}-{spec.partition}")
    return 0


def marker_error(response: WriteTxnMarkersResponse, spec: AbortSpec) -> int:
    for marker in response.markers:
        for topic in marker.topics:
            for p in topic.partitions:
                if (topic.name, p.partition_index) == (spec.topic, spec.partition):
                    return p.error_code
    return ErrorCode.UNKNOWN_SERVER_ERROR  # no answer for the partition


def partitions_to_search(metadata: Any, topic: str | None, partition: int | None,
                         broker_id: int | None) -> list[TopicPartition]:
    """Kafka's collectTopicPartitionsToSearch over librdkafka's Metadata."""
    if topic is not None and partition is not None:
        return [(topic, partition)]
    if topic is not None:
        if topic not in metadata.topics:
            raise CliError(f"no topic {topic!r} in the cluster")
        topics = [topic]
    else:
        topics = sorted(metadata.topics)
    return [(name, index) for name in topics
            for index, p in sorted(metadata.topics[name].partitions.items())
            if broker_id is None or broker_id in p.replicas]


@command("transactions find-hanging")
def run_find_hanging(args: argparse.Namespace) -> int:
    if args.topic is None and args.broker_id is None:
        raise CliError("find-hanging needs --topic or --broker-id to limit the search",
                       EXIT_USAGE)
    if args.partition is not None and args.topic is None:
        raise CliError("--partition needs --topic", EXIT_USAGE)
    max_timeout_ms = args.max_transaction_timeout * 60_000
    with _open(args, "find-hanging") as cluster:
        partitions = partitions_to_search(cluster.metadata, args.topic, args.partition,
                                          args.broker_id)
        by_broker: dict[int, list[TopicPartition]] = {}
        for tp in partitions:
            node = args.broker_id if args.broker_id is not None else cluster.leader(*tp)
            by_broker.setdefault(node, []).append(tp)
        states: dict[TopicPartition, Sequence[ProducerState]] = {}
        for node, tps in sorted(by_broker.items()):
            for start in range(0, len(tps), MAX_BATCH_SIZE):
                batch = tps[start:start + MAX_BATCH_SIZE]
                results = cluster.describe_producers(node, batch)
                for tp in batch:
                    error = _partition_error(tp, results.get(tp), f"broker {node}")
                    if error is not None:
                        raise CliError(f"failed to describe the producers: {error}")
                    states[tp] = results[tp].active_producers
        now = now_ms()
        candidates = candidate_transactions(states, max_timeout_ms, now)
        transactional_ids: dict[int, str] = {}
        descriptions: dict[str, TransactionDescription | None] = {}
        if candidates:
            wanted = {c.producer.producer_id for c in candidates}
            request = list_transactions_request(producer_ids=wanted)
            for _, answer in cluster.list_transactions(request):
                if isinstance(answer, CliError):
                    raise CliError(f"failed to list the transactions of {len(wanted)} "
                                   f"producers: {answer}")
                transactional_ids.update((s.producer_id, s.transactional_id)
                                         for s in answer.transaction_states
                                         if s.producer_id in wanted)
            for transactional_id in sorted(set(transactional_ids.values())):
                _, description = cluster.describe_transaction(transactional_id)
                if description.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                    descriptions[transactional_id] = None
                elif description.error_code:
                    raise CliError(f"failed to describe transactional id "
                                   f"{transactional_id!r}: "
                                   f"{error_name(description.error_code)}")
                else:
                    descriptions[transactional_id] = description
    hanging = [hanging_json(t, now) for t in hanging_transactions(
        candidates, transactional_ids, descriptions)]
    if args.json:
        print_json(hanging)
    else:
        print(kafka_table(HANGING_HEADERS, hanging_rows(hanging)))
    return 0

