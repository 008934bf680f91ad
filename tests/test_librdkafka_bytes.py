"""Real bytes from librdkafka (confluent-kafka), read and written by our codec.

A confluent_kafka Producer sends record batches to the test peer (tests/support), in every
compression codec, with and without idempotence: what it captured must parse with
odradek.protocol.records, pass the CRC and Kafka's client-batch checks, and decode to
exactly what was produced. The other way round, batches we build are served by the peer's
Fetch and must come out of a confluent_kafka Consumer as we wrote them, transactions
(commit and abort markers) included.
"""

from __future__ import annotations

import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    Producer,
    TopicPartition,
)
from confluent_kafka import Message as KafkaMessage
from support.protocol_peer import FIRST_PRODUCER_ID, ProtocolPeer

from odradek.protocol import records
from odradek.protocol.compression import CODEC_NAMES
from odradek.protocol.framing import encode_request
from odradek.protocol.messages.heartbeat_request import HeartbeatRequest
from odradek.protocol.records import SimpleRecord

PARTITIONS = 2
DEADLINE_S = 15.0  # for any one wait on librdkafka; tests normally take well under 1 s
POLL_S = 0.1
BASE_TIMESTAMP = 1_700_000_000_000
CODECS = sorted(CODEC_NAMES.items())  # (id, name): none, gzip, snappy, lz4, zstd
CODEC_IDS = [name for _, name in CODECS]

Headers = list[tuple[str, bytes | None]]


@pytest.fixture
def peer() -> Iterator[ProtocolPeer]:
    with ProtocolPeer(partitions=PARTITIONS) as p:
        yield p
    assert not p.unhandled, f"requests the peer does not implement: {p.unhandled}"
    assert not p.errors, f"the peer failed: {p.errors}"
    assert not [t for t in threading.enumerate() if t.name.startswith("protocol-peer")]


# ---- what we produce ----------------------------------------------------------------------


@dataclass(frozen=True)
class Sent:
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int | None  # None: librdkafka stamps it (its delivery report says with what)


def payload(rng: random.Random, i: int, size: int) -> bytes:
    """Mostly repetitive (so every codec actually compresses), with a random tail."""
    text = (f"record {i} of odradek; " * (size // 20 + 1)).encode()
    return (text[: max(0, size - 8)] + rng.randbytes(8))[:size]


def messages(n: int = 50) -> list[Sent]:
    rng = random.Random(20240601)
    sizes = [0, 1, 17, 300, 1_000, 4_096, 20_000, 100_000]
    header_sets: list[Headers] = [
        [],
        [("trace-id", b"0123456789abcdef")],
        [("empty", b""), ("null", None), ("dup", b"1"), ("dup", b"2")],
        [("ünïcödé", bytes(range(256))), ("k" * 200, b"v" * 1_000)],
    ]
    sent = []
    for i in range(n):
        key = None if i % 5 == 0 else b"" if i % 7 == 0 else f"key-{i % 9}".encode()
        value = None if i % 6 == 0 else payload(rng, i, sizes[i % len(sizes)])
        timestamp = BASE_TIMESTAMP + 1_000 * i - 7 * (i % 4) if i % 3 else None
        sent.append(Sent(key, value, header_sets[i % len(header_sets)], timestamp))
    return sent


def as_record(r: records.Record) -> tuple[object, ...]:
    return (r.key, r.value, r.headers, r.timestamp)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
@pytest.mark.parametrize(("codec", "codec_name"), CODECS, ids=CODEC_IDS)
def test_producer_batches_decode(
    peer: ProtocolPeer, codec: int, codec_name: str, idempotent: bool
) -> None:
    topic = f"produced-{codec_name}"
    sent = messages()
    reports: dict[int, tuple[int, int, int]] = {}  # index -> partition, offset, timestamp
    failures = []

    def on_delivery(i: int) -> Callable[[object, KafkaMessage], None]:
        def report(err: object, msg: KafkaMessage) -> None:
            if err is not None:
                failures.append((i, err))
            else:
                ts_type, ts = msg.timestamp()
                assert ts_type == TIMESTAMP_CREATE_TIME
                reports[i] = (msg.partition(), msg.offset(), ts)

        return report

    producer = Producer(
        {
            "bootstrap.servers": peer.bootstrap,
            "compression.type": codec_name,
            "linger.ms": 50,  # the whole burst goes out as one batch per partition
            "enable.idempotence": idempotent,
            "message.timeout.ms": int(DEADLINE_S * 1000),
        }
    )
    try:
        for i, m in enumerate(sent):
            producer.produce(
                topic, value=m.value, key=m.key, partition=i % PARTITIONS,
                headers=m.headers, timestamp=m.timestamp or 0, on_delivery=on_delivery(i),
            )
        assert producer.flush(DEADLINE_S) == 0, "librdkafka did not deliver in time"
    finally:
        producer.close()
    assert not failures
    assert len(reports) == len(sent)

    for partition in range(PARTITIONS):
        payloads = peer.captured(topic, partition)
        assert payloads, f"nothing produced to partition {partition}"
        decoded: list[records.Record] = []
        for data in payloads:
            for pos, header in records.iter_batch_headers(data):
                records.validate_batch(data, pos, header)  # CRC and Kafka's client rules
                batch = records.decode_records(data, pos, header)
                assert header.base_offset == 0  # a client leaves offsets to the broker
                assert header.compression == codec
                assert header.timestamp_type == records.CREATE_TIME
                assert not header.is_transactional and not header.is_control
                assert header.records_count == len(batch) == header.last_offset_delta + 1
                assert [r.offset_delta for r in batch] == list(range(len(batch)))
                assert header.max_timestamp == max(r.timestamp for r in batch)
                if idempotent:
                    assert header.producer_id == FIRST_PRODUCER_ID
                    assert header.producer_epoch == 0
                    assert header.base_sequence == len(decoded)  # sequences run on
                else:
                    assert header.producer_id == records.NO_PRODUCER_ID
                    assert header.producer_epoch == records.NO_PRODUCER_EPOCH
                    assert header.base_sequence == records.NO_SEQUENCE
                decoded += batch
        assert len(decoded) > len(payloads), "linger.ms should put several records per batch"

        # The peer gave offsets in the order it got the batches: decoded[n] is offset n.
        expected: dict[int, tuple[object, ...]] = {}
        for i, m in enumerate(sent):
            p, offset, ts = reports[i]
            if p == partition:
                if m.timestamp is not None:
                    assert ts == m.timestamp
                expected[offset] = (m.key, m.value, m.headers, ts)
        assert sorted(expected) == list(range(len(decoded)))
        for offset, record in enumerate(decoded):
            assert as_record(record) == expected[offset], f"partition {partition}, offset {offset}"


# ---- what we build, consumed by librdkafka ------------------------------------------------


def our_batches(codec: int) -> list[list[SimpleRecord]]:
    rng = random.Random(codec)
    batches = [[SimpleRecord(b"only", b"one record", [("h", b"1")], BASE_TIMESTAMP)]]
    batches.append(
        [
            SimpleRecord(
                None if i % 3 == 0 else f"k{i}".encode(),
                None if i % 4 == 1 else payload(rng, i, 50 * i * i),
                [("n", str(i).encode()), ("null", None)] if i % 2 else [],
                BASE_TIMESTAMP + 10 * i - (i % 3),  # not monotonic within the batch
            )
            for i in range(12)
        ]
    )
    # Records without a timestamp of their own take the batch's base timestamp (the first's).
    batches.append(
        [
            SimpleRecord(f"big{i}".encode(), payload(rng, i, 60_000), [],
                         None if i else BASE_TIMESTAMP + 5)
            for i in range(5)
        ]
    )
    return batches


def consumer_for(peer: ProtocolPeer, **config: object) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": peer.bootstrap,
            "group.id": "odradek-test",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            **config,
        }
    )


def consume_until(consumer: Consumer, last_offset: int) -> list[KafkaMessage]:
    """Poll until the message at last_offset arrives; fail at the deadline."""
    got: list[KafkaMessage] = []
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        msg = consumer.poll(POLL_S)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got.append(msg)
        if msg.offset() >= last_offset:
            return got
    pytest.fail(f"offset {last_offset} not consumed in {DEADLINE_S} s; got {len(got)} messages")


def as_consumed(msg: KafkaMessage) -> tuple[object, ...]:
    return (msg.offset(), msg.key(), msg.value(), msg.headers() or [], msg.timestamp())


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("codec", "codec_name"), CODECS, ids=CODEC_IDS)
def test_consumer_reads_our_batches(peer: ProtocolPeer, codec: int, codec_name: str) -> None:
    topic = f"fetched-{codec_name}"
    expected = []
    for batch in our_batches(codec):
        base = peer.append(topic, 0, records.build_record_batch(batch, compression=codec))
        for i, r in enumerate(batch):
            ts = batch[0].timestamp if r.timestamp is None else r.timestamp
            timestamp = (TIMESTAMP_CREATE_TIME, ts)
            expected.append((base + i, r.key, r.value, list(r.headers), timestamp))
    # A LogAppendTime batch: every record reads as the batch's max timestamp.
    append_time = BASE_TIMESTAMP + 99_999
    stamped = [SimpleRecord(b"a", b"x", [], BASE_TIMESTAMP), SimpleRecord(b"b", None, [], None)]
    base = peer.append(
        topic, 0,
        records.build_record_batch(
            stamped, compression=codec, timestamp_type=records.LOG_APPEND_TIME,
            max_timestamp=append_time,
        ),
    )
    for i, r in enumerate(stamped):
        expected.append((base + i, r.key, r.value, [], (TIMESTAMP_LOG_APPEND_TIME, append_time)))
    end = peer.end_offset(topic, 0)
    assert end == len(expected)

    # One batch per Fetch (the peer always returns at least one): fetch offsets must advance.
    consumer = consumer_for(peer, **{"max.partition.fetch.bytes": 1})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = consume_until(consumer, end - 1)
        assert [as_consumed(m) for m in got] == expected
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), DEADLINE_S) == (0, end)
    finally:
        consumer.close()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
@pytest.mark.parametrize(("codec", "codec_name"), [CODECS[0], CODECS[-1]], ids=["none", "zstd"])
def test_consumer_reads_transactions(
    peer: ProtocolPeer, codec: int, codec_name: str, isolation: str
) -> None:
    topic = f"transactions-{codec_name}"
    committed_pid, aborted_pid = 7_000, 8_000
    visible: list[tuple[int, bytes]] = []  # (offset, value) a consumer gets
    aborted: list[tuple[int, bytes]] = []

    def append(values: list[bytes], **batch_args: object) -> list[tuple[int, bytes]]:
        items = [SimpleRecord(b"k", v, [], BASE_TIMESTAMP) for v in values]
        base = peer.append(
            topic, 1, records.build_record_batch(items, compression=codec, **batch_args)
        )
        return [(base + i, v) for i, v in enumerate(values)]

    def marker(commit: bool, pid: int) -> int:
        batch = records.build_control_batch(commit, pid, 0, 5, BASE_TIMESTAMP)
        return peer.append(topic, 1, batch)

    visible += append([b"plain-0", b"plain-1", b"plain-2"])
    txn = {"producer_epoch": 0, "is_transactional": True}
    visible += append([b"committed-0", b"committed-1"], producer_id=committed_pid,
                      base_sequence=0, **txn)
    aborted += append([b"aborted-0", b"aborted-1", b"aborted-2"], producer_id=aborted_pid,
                      base_sequence=0, **txn)
    marker(True, committed_pid)
    abort_offset = marker(False, aborted_pid)
    peer.add_aborted_transaction(topic, 1, aborted_pid, aborted[0][0], abort_offset)
    visible += append([b"after-0", b"after-1"])

    expected = sorted(visible + aborted) if isolation == "read_uncommitted" else visible
    consumer = consumer_for(peer, **{"isolation.level": isolation})
    try:
        consumer.assign([TopicPartition(topic, 1, OFFSET_BEGINNING)])  # via ListOffsets
        got = consume_until(consumer, expected[-1][0])
        assert [(m.offset(), m.value()) for m in got] == expected  # no control records
    finally:
        consumer.close()


# ---- the peer itself -----------------------------------------------------------------------


@pytest.mark.timeout(10)
def test_peer_reports_requests_it_does_not_implement() -> None:
    with ProtocolPeer() as peer, socket.create_connection(("127.0.0.1", peer.port), 5) as sock:
        request = HeartbeatRequest(group_id="g", generation_id=1, member_id="m")
        sock.sendall(encode_request(request, 4, correlation_id=7, client_id="raw"))
        assert sock.recv(1024) == b""  # closed at once, never left waiting
    assert len(peer.unhandled) == 1
    assert "Heartbeat v4 (api key 12)" in peer.unhandled[0]
    assert peer.requests == [("Heartbeat", 4)]
    assert not peer.errors
