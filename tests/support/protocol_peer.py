"""A fake Kafka broker for tests: real clients connect to it, our codec answers them.

ProtocolPeer listens on 127.0.0.1 (a free port) and serves all its connections from one
background thread (plain sockets and a selector), answering each one's requests in order.
It is a single node (node 1) that leads every partition of every topic it is asked about,
and it implements just what a producer and a consumer need: ApiVersions, Metadata,
Produce, ListOffsets, Fetch, FindCoordinator and InitProducerId. Anything else is logged,
listed in `unhandled`, and the connection is closed, so that a test fails on it instead
of hanging.

Each partition is a list of batches. Produce appends the batches it receives (offsets
assigned, as a broker does, and the payload kept as received in `captured`); a test can
also append batches of its own; Fetch serves them. It is a test harness, not the broker:
no durability, no fetch sessions, no groups, no quotas.
"""

from __future__ import annotations

import itertools
import logging
import selectors
import socket
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field

from odradek.protocol import records
from odradek.protocol.api_keys import API_SPECS, ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import ProtocolError
from odradek.protocol.framing import (
    FrameDecoder,
    Request,
    decode_request,
    decode_request_header,
    encode_response,
)
from odradek.protocol.message import Message
from odradek.protocol.messages.api_versions_response import ApiVersion, ApiVersionsResponse
from odradek.protocol.messages.fetch_request import FetchPartition
from odradek.protocol.messages.fetch_response import (
    AbortedTransaction,
    FetchableTopicResponse,
    FetchResponse,
    PartitionData,
)
from odradek.protocol.messages.find_coordinator_response import (
    Coordinator,
    FindCoordinatorResponse,
)
from odradek.protocol.messages.init_producer_id_response import InitProducerIdResponse
from odradek.protocol.messages.list_offsets_response import (
    ListOffsetsPartitionResponse,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)
from odradek.protocol.messages.metadata_response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from odradek.protocol.messages.produce_response import (
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
NODE_ID = 1
LEADER_EPOCH = 0
CLUSTER_ID = "odradek-protocol-peer"
FIRST_PRODUCER_ID = 1000
EARLIEST_TIMESTAMP = -2  # ListOffsets: the log start offset
LATEST_TIMESTAMP = -1  # ListOffsets: the high watermark
READ_COMMITTED = 1
MAX_FETCH_WAIT_S = 0.1  # a Fetch with nothing to return is answered after at most this
POLL_INTERVAL_S = 0.05  # how soon the thread notices stop()
STOP_TIMEOUT_S = 5.0

# What the peer answers; it advertises our whole version range for each (ApiVersions).
IMPLEMENTED = (
    ApiKey.PRODUCE,
    ApiKey.FETCH,
    ApiKey.LIST_OFFSETS,
    ApiKey.METADATA,
    ApiKey.FIND_COORDINATOR,
    ApiKey.API_VERSIONS,
    ApiKey.INIT_PRODUCER_ID,
)


@dataclass(slots=True)
class _Batch:
    base_offset: int
    last_offset: int
    data: bytes


@dataclass(slots=True)
class _Partition:
    log: list[_Batch] = field(default_factory=list)
    captured: list[bytes] = field(default_factory=list)  # Produce payloads, as received
    aborted: list[tuple[int, int, int]] = field(default_factory=list)  # pid, first, last

    @property
    def end_offset(self) -> int:
        return self.log[-1].last_offset + 1 if self.log else 0


@dataclass(slots=True)
class _Connection:
    sock: socket.socket
    name: str
    decoder: FrameDecoder = field(default_factory=FrameDecoder)
    # Responses in request order, each with the time before which it must not be sent
    # (an empty Fetch waits, as a broker waits for max_wait_ms).
    outbox: deque[tuple[float, bytes]] = field(default_factory=deque)
    sending: bytearray = field(default_factory=bytearray)
    events: int = selectors.EVENT_READ


class ProtocolPeer:
    """Use as a context manager: `with ProtocolPeer(partitions=2) as peer: ...peer.bootstrap`.

    Every topic a client asks about exists with `partitions` partitions. Thread-safe
    accessors: captured(), append(), end_offset(), add_aborted_transaction(). Problems
    (unhandled requests, handler failures) are listed in `unhandled` and `errors`.
    """

    def __init__(self, partitions: int = 1) -> None:
        self.partitions = partitions
        self.requests: list[tuple[str, int]] = []  # (API name, version), in arrival order
        self.unhandled: list[str] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._topic_ids: dict[str, uuid.UUID] = {}
        self._topic_names: dict[uuid.UUID, str] = {}
        self._partitions: dict[tuple[str, int], _Partition] = {}
        self._producer_ids = itertools.count(FIRST_PRODUCER_ID)
        self._handlers = {
            ApiKey.API_VERSIONS: self._api_versions,
            ApiKey.METADATA: self._metadata,
            ApiKey.PRODUCE: self._produce,
            ApiKey.LIST_OFFSETS: self._list_offsets,
            ApiKey.FETCH: self._fetch,
            ApiKey.FIND_COORDINATOR: self._find_coordinator,
            ApiKey.INIT_PRODUCER_ID: self._init_producer_id,
        }
        self._stop = threading.Event()
        self._selector = selectors.DefaultSelector()
        self._listener = socket.create_server((HOST, 0))
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._run, name=f"protocol-peer-{self.port}")

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    # ---- lifecycle ----------------------------------------------------------------------

    def __enter__(self) -> ProtocolPeer:
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is None:  # never started: close what __init__ opened
            self._selector.close()
            self._listener.close()
            return
        self._thread.join(STOP_TIMEOUT_S)  # the thread closes every socket as it ends
        if self._thread.is_alive():
            raise RuntimeError(f"{self._thread.name} did not stop in {STOP_TIMEOUT_S} s")

    # ---- what tests use ---------------------------------------------------------------

    def topic_id(self, topic: str) -> uuid.UUID:
        with self._lock:
            return self._topic(topic)

    def captured(self, topic: str, partition: int) -> list[bytes]:
        """The `records` of every Produce to the partition, as the client sent them."""
        with self._lock:
            return list(self._partition(topic, partition).captured)

    def end_offset(self, topic: str, partition: int) -> int:
        with self._lock:
            return self._partition(topic, partition).end_offset

    def append(self, topic: str, partition: int, batches: bytes) -> int:
        """Append concatenated batches at the end of the partition (their base offsets are
        reassigned, as a broker does); returns the first one's offset."""
        with self._lock:
            return self._append(self._partition(topic, partition), batches)

    def add_aborted_transaction(
        self, topic: str, partition: int, producer_id: int, first_offset: int, last_offset: int
    ) -> None:
        """Declare an aborted transaction (first data offset .. its ABORT marker) that Fetch
        reports to read_committed consumers."""
        with self._lock:
            part = self._partition(topic, partition)
            part.aborted.append((producer_id, first_offset, last_offset))

    # ---- the state, under self._lock ----------------------------------------------------

    def _topic(self, name: str) -> uuid.UUID:
        topic_id = self._topic_ids.get(name)
        if topic_id is None:
            topic_id = self._topic_ids[name] = uuid.uuid4()
            self._topic_names[topic_id] = name
        return topic_id

    def _partition(self, topic: str, partition: int) -> _Partition:
        if not 0 <= partition < self.partitions:
            raise KeyError(f"{topic}-{partition}: the peer has {self.partitions} partitions")
        self._topic(topic)
        return self._partitions.setdefault((topic, partition), _Partition())

    def _find(self, topic: str | None, partition: int) -> _Partition | None:
        if topic not in self._topic_ids or not 0 <= partition < self.partitions:
            return None
        return self._partition(topic, partition)

    @staticmethod
    def _append(part: _Partition, data: bytes) -> int:
        first = part.end_offset
        buf = bytearray(data)
        spans = []
        next_offset = first
        for pos, header in records.iter_batch_headers(buf):
            records.validate_batch(buf, pos, header, from_client=False)
            records.assign_offsets(buf, pos, next_offset)
            spans.append((pos, header.size_in_bytes, next_offset, header.last_offset_delta))
            next_offset += header.last_offset_delta + 1
        for pos, size, base, delta in spans:  # only once every batch checked out
            part.log.append(_Batch(base, base + delta, bytes(buf[pos : pos + size])))
        return first

    # ---- the thread ---------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for key, events in self._selector.select(self._select_timeout()):
                    if key.data is None:
                        self._accept()
                    elif events & selectors.EVENT_READ:
                        self._read(key.data)
                now = time.monotonic()
                for key in list(self._selector.get_map().values()):
                    if key.data is not None:
                        self._flush(key.data, now)
        except Exception as e:
            log.exception("protocol peer thread failed")
            self.errors.append(f"peer thread failed: {e!r}")
        finally:
            for key in list(self._selector.get_map().values()):
                key.fileobj.close()  # type: ignore[union-attr]
            self._selector.close()

    def _select_timeout(self) -> float:
        timeout = POLL_INTERVAL_S
        now = time.monotonic()
        for key in self._selector.get_map().values():
            conn = key.data
            if conn is not None and conn.outbox and not conn.sending:
                timeout = min(timeout, max(0.0, conn.outbox[0][0] - now))
        return timeout

    def _accept(self) -> None:
        try:
            sock, address = self._listener.accept()
        except BlockingIOError:
            return
        sock.setblocking(False)
        conn = _Connection(sock, f"{address[0]}:{address[1]}")
        self._selector.register(sock, selectors.EVENT_READ, conn)
        log.debug("peer %s: connection from %s", self.port, conn.name)

    def _close(self, conn: _Connection) -> None:
        log.debug("peer %s: closing connection from %s", self.port, conn.name)
        self._selector.unregister(conn.sock)
        conn.sock.close()

    def _read(self, conn: _Connection) -> None:
        try:
            data = conn.sock.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close(conn)
            return
        try:
            conn.decoder.feed(data)
            while (frame := conn.decoder.next_frame()) is not None:
                if not self._answer(conn, frame):
                    self._close(conn)
                    return
        except Exception as e:
            log.exception("peer %s: failed to answer %s", self.port, conn.name)
            self.errors.append(f"failed to answer a request: {e!r}")
            self._close(conn)

    def _flush(self, conn: _Connection, now: float) -> None:
        while conn.outbox and conn.outbox[0][0] <= now:
            conn.sending += conn.outbox.popleft()[1]
        if conn.sending:
            try:
                sent = conn.sock.send(conn.sending)
            except BlockingIOError:
                sent = 0
            except OSError:
                self._close(conn)
                return
            del conn.sending[:sent]
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.sending else 0)
        if events != conn.events:
            self._selector.modify(conn.sock, events, conn)
            conn.events = events

    # ---- requests -----------------------------------------------------------------------

    def _answer(self, conn: _Connection, frame: bytearray) -> bool:
        """Queue the response to one request frame; False to close the connection."""
        try:
            header, api, _ = decode_request_header(frame)
        except ProtocolError as e:
            return self._unhandled(f"undecodable request header from {conn.name}: {e}")
        key, version = header.request_api_key, header.request_api_version
        with self._lock:
            self.requests.append((api.name, version))
        log.debug("peer %s: %s v%d from %s", self.port, api.name, version, conn.name)
        handler = self._handlers.get(key)
        if handler is None:
            return self._unhandled(
                f"{api.name} v{version} (api key {key}) from client {header.client_id!r}: "
                f"not implemented by the test peer"
            )
        if key == ApiKey.API_VERSIONS and not api.is_valid(version):
            # KIP-511: answer in v0 with the error and our ranges; the client retries.
            response: Message | None = self._api_versions(None)
            assert isinstance(response, ApiVersionsResponse)
            response.error_code = ErrorCode.UNSUPPORTED_VERSION
            version = 0
        else:
            response = handler(decode_request(frame))
        if response is None:  # Produce with acks=0
            return True
        delay = MAX_FETCH_WAIT_S if _is_empty_fetch(response) else 0.0
        frame_out = encode_response(response, version, header.correlation_id)
        conn.outbox.append((time.monotonic() + delay, frame_out))
        return True

    def _unhandled(self, what: str) -> bool:
        log.warning("protocol peer %s: UNHANDLED REQUEST %s; closing", self.port, what)
        self.unhandled.append(what)
        return False

    def _api_versions(self, request: Request | None) -> Message:
        return ApiVersionsResponse(
            api_keys=[
                ApiVersion(
                    api_key=k,
                    min_version=API_SPECS[k].min_version,
                    max_version=API_SPECS[k].max_version,
                )
                for k in IMPLEMENTED
            ]
        )

    def _metadata(self, request: Request) -> Message:
        body = request.body
        with self._lock:
            if body.topics is None or (request.api_version == 0 and not body.topics):
                names = list(self._topic_ids)  # all topics
            else:
                names = [t.name or self._topic_names.get(t.topic_id, "") for t in body.topics]
            topics = [
                MetadataResponseTopic(
                    name=name,
                    topic_id=self._topic(name),
                    partitions=[
                        MetadataResponsePartition(
                            partition_index=i,
                            leader_id=NODE_ID,
                            leader_epoch=LEADER_EPOCH,
                            replica_nodes=[NODE_ID],
                            isr_nodes=[NODE_ID],
                        )
                        for i in range(self.partitions)
                    ],
                )
                for name in names
            ]
        return MetadataResponse(
            brokers=[MetadataResponseBroker(node_id=NODE_ID, host=HOST, port=self.port)],
            cluster_id=CLUSTER_ID,
            controller_id=NODE_ID,
            topics=topics,
        )

    def _produce(self, request: Request) -> Message | None:
        body = request.body
        responses = []
        with self._lock:
            for topic in body.topic_data:
                partitions = []
                for p in topic.partition_data:
                    error, base_offset = ErrorCode.NONE, -1
                    part = self._find(topic.name, p.index)
                    if part is None:
                        error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    else:
                        data = bytes(p.records or b"")
                        part.captured.append(data)
                        try:
                            base_offset = self._append(part, data)
                        except ProtocolError as e:
                            self.errors.append(f"Produce to {topic.name}-{p.index}: {e!r}")
                            error = ErrorCode(e.error_code)
                    partitions.append(
                        PartitionProduceResponse(
                            index=p.index,
                            error_code=error,
                            base_offset=base_offset,
                            log_start_offset=0,
                        )
                    )
                responses.append(TopicProduceResponse(topic.name, partitions))
        return None if body.acks == 0 else ProduceResponse(responses=responses)

    def _list_offsets(self, request: Request) -> Message:
        version = request.api_version
        topics = []
        with self._lock:
            for topic in request.body.topics:
                partitions = []
                for p in topic.partitions:
                    part = self._find(topic.name, p.partition_index)
                    error, offset = ErrorCode.NONE, -1
                    if part is None:
                        error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    elif p.timestamp == EARLIEST_TIMESTAMP:
                        offset = 0
                    elif p.timestamp == LATEST_TIMESTAMP:
                        offset = part.end_offset
                    # else: a search by timestamp, which the peer does not do: offset -1
                    partitions.append(
                        ListOffsetsPartitionResponse(
                            partition_index=p.partition_index,
                            error_code=error,
                            # Only v0 has old_style_offsets; later versions refuse it set.
                            old_style_offsets=[offset] if version == 0 and offset >= 0 else [],
                            offset=offset,
                            leader_epoch=LEADER_EPOCH,
                        )
                    )
                topics.append(ListOffsetsTopicResponse(topic.name, partitions))
        return ListOffsetsResponse(topics=topics)

    def _fetch(self, request: Request) -> Message:
        body = request.body
        by_id = request.api_version >= 13  # KIP-516: topics by id
        responses = []
        with self._lock:
            for topic in body.topics:
                name = self._topic_names.get(topic.topic_id) if by_id else topic.topic
                partitions = [
                    self._fetch_partition(name, p, body.isolation_level, by_id)
                    for p in topic.partitions
                ]
                responses.append(
                    FetchableTopicResponse(
                        topic=topic.topic, topic_id=topic.topic_id, partitions=partitions
                    )
                )
        return FetchResponse(responses=responses)

    def _fetch_partition(
        self, topic: str | None, p: FetchPartition, isolation_level: int, by_id: bool
    ) -> PartitionData:
        part = self._find(topic, p.partition)
        if part is None:
            unknown = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return PartitionData(partition_index=p.partition, error_code=unknown)
        end = part.end_offset
        result = PartitionData(
            partition_index=p.partition,
            high_watermark=end,
            last_stable_offset=end,
            log_start_offset=0,
            records=b"",
        )
        if not 0 <= p.fetch_offset <= end:
            result.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
            return result
        # From the batch holding fetch_offset on, at least one batch, up to the byte limit.
        batches: list[_Batch] = []
        size = 0
        for batch in part.log:
            if batch.last_offset < p.fetch_offset:
                continue
            if batches and size + len(batch.data) > p.partition_max_bytes:
                break
            batches.append(batch)
            size += len(batch.data)
        result.records = b"".join(b.data for b in batches)
        if isolation_level != READ_COMMITTED:
            result.aborted_transactions = None
        elif batches:
            result.aborted_transactions = [
                AbortedTransaction(producer_id=pid, first_offset=first)
                for pid, first, last in part.aborted
                if last >= p.fetch_offset and first <= batches[-1].last_offset
            ]
        return result

    def _find_coordinator(self, request: Request) -> Message:
        body = request.body
        if request.api_version < 4:
            return FindCoordinatorResponse(
                error_message=None, node_id=NODE_ID, host=HOST, port=self.port
            )
        return FindCoordinatorResponse(
            coordinators=[
                Coordinator(key=key, node_id=NODE_ID, host=HOST, port=self.port, error_message=None)
                for key in body.coordinator_keys
            ]
        )

    def _init_producer_id(self, request: Request) -> Message:
        body = request.body
        if body.producer_id >= 0:  # bumping the epoch of a producer id it has
            return InitProducerIdResponse(
                producer_id=body.producer_id, producer_epoch=body.producer_epoch + 1
            )
        with self._lock:
            producer_id = next(self._producer_ids)
        return InitProducerIdResponse(producer_id=producer_id, producer_epoch=0)


def _is_empty_fetch(response: Message) -> bool:
    return isinstance(response, FetchResponse) and not any(
        p.records for t in response.responses for p in t.partitions
    )
