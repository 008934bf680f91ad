"""The broker's network layer seen from a raw socket: pipelining, KIP-511, acks=0, idle
connections, and bad input. Bad input closes the offending connection (or gets an error
code) while the broker keeps serving everyone else and loses nothing it acknowledged."""

from __future__ import annotations

import random
import socket
import struct
import time
from collections.abc import Iterator

import pytest
from support.broker import BrokerProcess

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.framing import decode_response, encode_request
from odradek.protocol.message import Message
from odradek.protocol.messages.api_versions_request import ApiVersionsRequest
from odradek.protocol.messages.api_versions_response import ApiVersionsResponse
from odradek.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from odradek.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from odradek.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from odradek.protocol.records import build_record_batch, decode_records, iter_batch_headers


class Wire:
    """One raw connection speaking our codec."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def send(self, body: Message, version: int) -> int:
        self.correlation += 1
        self.sock.sendall(encode_request(body, version, self.correlation, "wire-test"))
        return self.correlation

    def receive(self, api_key: int, version: int) -> tuple[int, Message]:
        (size,) = struct.unpack(">i", self._exactly(4))
        return decode_response(self._exactly(size), api_key, version)

    def call(self, body: Message, version: int) -> Message:
        correlation = self.send(body, version)
        got, response = self.receive(body.API_KEY, version)  # type: ignore[attr-defined]
        assert got == correlation
        return response

    def closed_by_broker(self, timeout: float = 10) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by the broker")
            data += chunk
        return data


def produce_request(topic: str, records: list[tuple[bytes, bytes]],
                    acks: int = -1) -> ProduceRequest:
    batch = build_record_batch(records, base_timestamp=int(time.time() * 1000))
    partition = PartitionProduceData(index=0, records=batch)
    return ProduceRequest(acks=acks, timeout_ms=5000, topic_data=[
        TopicProduceData(name=topic, partition_data=[partition])])


def fetch_all(wire: Wire, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    response = wire.call(FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=50 << 20, topics=[
        FetchTopic(topic=topic, partitions=[FetchPartition(
            partition=0, fetch_offset=0, partition_max_bytes=50 << 20)])]), 11)
    data = bytes(response.responses[0].partitions[0].records or b"")  # type: ignore[attr-defined]
    return [(r.key, r.value) for pos, h in iter_batch_headers(data)
            for r in decode_records(data, pos, h)]


@pytest.fixture(scope="module")
def wire_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("wire"), {
        "connections.max.idle.ms": "1500", "socket.request.max.bytes": str(1 << 20)}).start()
    yield broker
    broker.stop()
    assert "Traceback" not in broker.log_text(), broker.log_text()


def test_pipelined_requests_are_answered_in_order(wire_broker: BrokerProcess) -> None:
    wire = Wire(wire_broker.port)
    sent = []
    for i in range(30):  # all written before any response is read
        body: Message = ApiVersionsRequest() if i % 2 else MetadataRequest(topics=[])
        sent.append((wire.send(body, 3 if i % 2 else 12), body.API_KEY, 3 if i % 2 else 12))  # type: ignore[attr-defined]
    for correlation, api_key, version in sent:
        got, _ = wire.receive(api_key, version)
        assert got == correlation
    wire.close()


def test_unknown_api_versions_version_gets_our_ranges(wire_broker: BrokerProcess) -> None:
    wire = Wire(wire_broker.port)
    # KIP-511: ApiVersions v99, which the broker cannot know; the answer comes in v0.
    frame = struct.pack(">hhih", ApiKey.API_VERSIONS, 99, 7, 4) + b"test" + b"\x00\x00"
    wire.sock.sendall(struct.pack(">i", len(frame)) + frame)
    correlation, response = wire.receive(ApiKey.API_VERSIONS, 0)
    assert correlation == 7
    assert isinstance(response, ApiVersionsResponse)
    assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[ApiKey.PRODUCE] == (0, 11) and ranges[ApiKey.FETCH] == (0, 17)
    wire.close()


def test_acks_zero_gets_no_response(wire_broker: BrokerProcess) -> None:
    wire = Wire(wire_broker.port)
    wire.call(MetadataRequest(topics=[MetadataRequestTopic(name="acks-zero")],
                              allow_auto_topic_creation=True), 12)
    wire.send(produce_request("acks-zero", [(b"k", b"v")], acks=0), 9)
    response = wire.call(ApiVersionsRequest(), 3)  # the next response is this one's
    assert response.error_code == ErrorCode.NONE  # type: ignore[attr-defined]
    assert fetch_all(wire, "acks-zero") == [(b"k", b"v")]
    # A failed acks=0 produce cannot be answered: Kafka closes the connection instead.
    wire.send(produce_request("no-such-topic", [(b"k", b"v")], acks=0), 9)
    assert wire.closed_by_broker()


def test_idle_connections_are_closed(wire_broker: BrokerProcess) -> None:
    wire = Wire(wire_broker.port)
    wire.call(ApiVersionsRequest(), 3)
    started = time.monotonic()
    assert wire.closed_by_broker(timeout=10)
    assert time.monotonic() - started >= 1.0  # connections.max.idle.ms=1500, not sooner


@pytest.mark.parametrize("garbage", [
    struct.pack(">i", 2 << 20),  # larger than socket.request.max.bytes: refused at once
    struct.pack(">i", -5),
    struct.pack(">ihhi", 8, 999, 0, 1),  # an API key that does not exist
    struct.pack(">ihhi", 8, ApiKey.PRODUCE, 99, 1),  # a version we do not serve
    struct.pack(">ihhih", 10, ApiKey.METADATA, 12, 1, 40) + b"\x00" * 4,  # truncated body
], ids=["huge", "negative", "unknown-api", "unknown-version", "truncated"])
def test_bad_frames_close_only_their_connection(wire_broker: BrokerProcess,
                                                garbage: bytes) -> None:
    bystander = Wire(wire_broker.port)
    bystander.call(ApiVersionsRequest(), 3)
    bad = Wire(wire_broker.port)
    bad.sock.sendall(garbage)
    assert bad.closed_by_broker()
    assert bystander.call(ApiVersionsRequest(), 3).error_code == 0  # type: ignore[attr-defined]
    bystander.close()


def test_corrupt_batches_get_an_error_and_change_nothing(wire_broker: BrokerProcess) -> None:
    wire = Wire(wire_broker.port)
    topic = "corrupt-batches"
    wire.call(MetadataRequest(topics=[MetadataRequestTopic(name=topic)],
                              allow_auto_topic_creation=True), 12)
    good = produce_request(topic, [(b"a", b"1")])
    assert wire.call(good, 9).responses[0].partition_responses[0].error_code == 0  # type: ignore[attr-defined]
    batch = bytearray(build_record_batch([(b"b", b"2")]))
    batch[-1] ^= 0xFF  # a flipped bit in the records: the CRC no longer matches
    bad = produce_request(topic, [(b"x", b"x")])
    bad.topic_data[0].partition_data[0].records = bytes(batch)
    result = wire.call(bad, 9).responses[0].partition_responses[0]  # type: ignore[attr-defined]
    assert result.error_code == ErrorCode.CORRUPT_MESSAGE
    legacy = produce_request(topic, [(b"x", b"x")])
    legacy.topic_data[0].partition_data[0].records = b"\x00" * 16 + b"\x01" + b"\x00" * 20
    result = wire.call(legacy, 9).responses[0].partition_responses[0]  # type: ignore[attr-defined]
    assert result.error_code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD)
    unknown = produce_request("no-such-topic", [(b"x", b"y")])
    result = wire.call(unknown, 9).responses[0].partition_responses[0]  # type: ignore[attr-defined]
    assert result.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert fetch_all(wire, topic) == [(b"a", b"1")]
    wire.close()


def test_random_bytes_never_hurt_the_broker(wire_broker: BrokerProcess) -> None:
    """A bounded loop of random and mutated frames: each bad connection is closed or
    answered; acknowledged data and other clients are untouched."""
    rng = random.Random(20261122)
    keeper = Wire(wire_broker.port)
    topic = "survivor"
    keeper.call(MetadataRequest(topics=[MetadataRequestTopic(name=topic)],
                                allow_auto_topic_creation=True), 12)
    records = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(50)]
    written = keeper.call(produce_request(topic, records), 9)
    assert written.responses[0].partition_responses[0].error_code == 0  # type: ignore[attr-defined]
    valid = [encode_request(produce_request(topic, records[:3]), 9, 1),
             encode_request(MetadataRequest(topics=None), 12, 1),
             encode_request(ApiVersionsRequest(client_software_name="x",
                                               client_software_version="1"), 3, 1)]
    deadline = time.monotonic() + 20
    for _ in range(150):
        if time.monotonic() > deadline:
            break
        frame = bytearray(rng.choice(valid))
        kind = rng.randrange(3)
        if kind == 0:  # random body behind a plausible size
            body = rng.randbytes(rng.randrange(0, 200))
            frame = bytearray(struct.pack(">i", len(body)) + body)
        elif kind == 1:  # flip a few bytes past the size prefix
            for _ in range(rng.randrange(1, 6)):
                frame[rng.randrange(4, len(frame))] = rng.randrange(256)
        else:  # cut it short, then hang up
            frame = frame[: rng.randrange(1, len(frame))]
        wire = Wire(wire_broker.port)
        wire.sock.settimeout(2)
        try:
            wire.sock.sendall(frame)
            wire.sock.shutdown(socket.SHUT_WR)
            while wire.sock.recv(65536):
                pass
        except OSError:
            pass
        wire.close()
    assert keeper.call(ApiVersionsRequest(), 3).error_code == 0  # type: ignore[attr-defined]
    stored = fetch_all(keeper, topic)
    assert stored[:50] == records  # mutated produce requests may add records, never lose any
    keeper.close()


def fetch_request(topic: str, offset: int, max_wait_ms: int, min_bytes: int = 1) -> FetchRequest:
    return FetchRequest(max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=50 << 20, topics=[
        FetchTopic(topic=topic, partitions=[FetchPartition(
            partition=0, fetch_offset=offset, partition_max_bytes=50 << 20)])])


def test_fetch_long_poll_waits_for_data_or_max_wait(wire_broker: BrokerProcess) -> None:
    topic = "long-poll"
    wire = Wire(wire_broker.port)
    wire.call(MetadataRequest(topics=[MetadataRequestTopic(name=topic)],
                              allow_auto_topic_creation=True), 12)
    started = time.monotonic()
    empty = wire.call(fetch_request(topic, 0, max_wait_ms=400), 11)
    waited = time.monotonic() - started
    assert empty.responses[0].partitions[0].records in (b"", None)  # type: ignore[attr-defined]
    assert 0.35 <= waited < 5  # it waited for max_wait_ms, no longer

    # A fetch waiting for 20 s returns as soon as another client's append arrives.
    wire.send(fetch_request(topic, 0, max_wait_ms=20_000), 11)
    time.sleep(0.2)  # let the fetch park in the broker before the append
    writer = Wire(wire_broker.port)
    appended = time.monotonic()
    writer.call(produce_request(topic, [(b"k", b"woken")]), 9)
    _, response = wire.receive(ApiKey.FETCH, 11)
    assert time.monotonic() - appended < 2
    data = bytes(response.responses[0].partitions[0].records)  # type: ignore[attr-defined]
    [(pos, header)] = list(iter_batch_headers(data))
    assert [r.value for r in decode_records(data, pos, header)] == [b"woken"]
    wire.close()
    writer.close()


def test_large_fetches_are_sent_from_the_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """With asyncio's own loop, fetches larger than the copy threshold go out through
    os.sendfile; the bytes must be exactly the stored batches."""
    broker = BrokerProcess(tmp_path / "data", env={"ODRADEK_EVENT_LOOP": "asyncio"}).start()
    try:
        wire = Wire(broker.port)
        topic = "big-fetch"
        wire.call(MetadataRequest(topics=[MetadataRequestTopic(name=topic)],
                                  allow_auto_topic_creation=True), 12)
        records = [(f"k{i}".encode(), bytes([i % 251]) * 10_000) for i in range(300)]
        for i in range(0, 300, 50):
            wire.call(produce_request(topic, records[i : i + 50]), 9)
        assert fetch_all(wire, topic) == records  # 3 MB in one response
        wire.close()
    finally:
        broker.stop()
    assert "Traceback" not in broker.log_text()


def test_sigterm_answers_waiting_fetches_and_exits_promptly(tmp_path) -> None:  # type: ignore[no-untyped-def]
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        wire = Wire(broker.port)
        wire.call(MetadataRequest(topics=[MetadataRequestTopic(name="quiet")],
                                  allow_auto_topic_creation=True), 12)
        wire.send(fetch_request("quiet", 0, max_wait_ms=60_000), 11)
        time.sleep(0.2)  # the fetch is parked in the broker
        started = time.monotonic()
        assert broker.stop() == 0
        assert time.monotonic() - started < 10  # not the fetch's 60 s
        _, response = wire.receive(ApiKey.FETCH, 11)  # answered before the close
        assert response.responses[0].partitions[0].error_code == 0  # type: ignore[attr-defined]
        wire.close()
    finally:
        broker.kill()


def test_offset_for_leader_epoch(wire_broker: BrokerProcess) -> None:
    """KIP-101/320: the end offset of a leader epoch, from the leader epoch cache the leader
    fills as it stamps its epoch (0 on one node) into the batches it appends."""
    from odradek.protocol.messages.offset_for_leader_epoch_request import (
        OffsetForLeaderEpochRequest,
        OffsetForLeaderPartition,
        OffsetForLeaderTopic,
    )

    wire = Wire(wire_broker.port)
    topic = "leader-epochs"
    wire.call(MetadataRequest(topics=[MetadataRequestTopic(name=topic)],
                              allow_auto_topic_creation=True), 12)
    wire.call(produce_request(topic, [(b"k", b"v")] * 3), 9)
    wire.call(produce_request(topic, [(b"k", b"w")] * 2), 9)
    fetched = wire.call(FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=[
        FetchTopic(topic=topic, partitions=[FetchPartition(
            partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]), 11)
    data = bytes(fetched.responses[0].partitions[0].records)  # type: ignore[attr-defined]
    assert [h.partition_leader_epoch for _, h in iter_batch_headers(data)] == [0, 0]

    def ask(*partitions: tuple[int, int, int], name: str = topic) -> list[tuple[int, ...]]:
        request = OffsetForLeaderEpochRequest(replica_id=-1, topics=[OffsetForLeaderTopic(
            topic=name, partitions=[OffsetForLeaderPartition(
                partition=p, current_leader_epoch=current, leader_epoch=epoch)
                for p, current, epoch in partitions])])
        response = wire.call(request, 4)
        return [(e.error_code, e.leader_epoch, e.end_offset)
                for e in response.topics[0].partitions]  # type: ignore[attr-defined]

    assert ask((0, -1, 0), (0, 0, 0)) == [(ErrorCode.NONE, 0, 5)] * 2
    assert ask((0, -1, 7)) == [(ErrorCode.NONE, -1, -1)]   # an epoch after every known one
    assert ask((0, 3, 0), (9, -1, 0)) == [(ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1),
                                          (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]
    assert ask((0, -1, 0), name="no-such-topic") == [
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]
    wire.close()
