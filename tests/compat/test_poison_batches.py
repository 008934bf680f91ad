"""Poison batches over the wire, each with a correct CRC, against a real broker: the leader
walks every record (odradek/storage/log_validator.py) and refuses each with its Kafka code,
and the partition stays fully readable by librdkafka and kafka-python. Then librdkafka's
regression test 0011 (records without a key on a compacted topic): record_errors name
exactly the bad records, and the client fails exactly those."""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Iterator

import pytest
import test_wire
from clients import Rec, make_client
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerProcess

from odradek.protocol.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD, compress
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from odradek.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from odradek.protocol.records import (
    CRC_OFFSET,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    RECORDS_OFFSET,
    compute_crc,
    encode_record,
    encode_varint,
    encode_varlong,
)

YEAR = 365 * 86_400_000
CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
REFUSALS = {ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD, ErrorCode.INVALID_TIMESTAMP,
            ErrorCode.MESSAGE_TOO_LARGE}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("poison"),
                            {"auto.create.topics.enable": "true"}).start()
    yield process
    process.stop()
    log = process.log_text()
    assert "Traceback" not in log, log


class Wire(test_wire.Wire):
    """One raw connection: Produce requests carrying bytes of our own making."""

    def produce(self, topic: str, batch: bytes, version: int = 9,
                ) -> tuple[int, list[tuple[int, str | None]]]:
        request = ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=[TopicProduceData(
            name=topic, partition_data=[PartitionProduceData(index=0, records=batch)])])
        p = self.call(request, version).responses[0].partition_responses[0]  # type: ignore[attr-defined]
        return p.error_code, [(e.batch_index, e.batch_index_error_message)
                              for e in p.record_errors]


def batch_of(section: bytes, count: int, *, codec: int = NONE, base_timestamp: int,
             compressed: bytes | None = None) -> bytes:
    """A batch around `section` (compressed here, or given already compressed) whose CRC
    is right whatever the records hold."""
    body = compress(codec, section) if compressed is None else compressed
    batch = bytearray(RECORDS_OFFSET + len(body))
    HEADER_STRUCT.pack_into(batch, 0, 0, len(batch) - LOG_OVERHEAD, -1, 2, 0, codec, count - 1,
                            base_timestamp, base_timestamp, -1, -1, -1, count)
    batch[RECORDS_OFFSET:] = body
    struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch, 0, len(batch)))
    return bytes(batch)


def zstd_rle_bomb(total: int) -> bytes:
    """131 KB of zstd RLE blocks that inflate to `total` bytes (4 GiB)."""
    block = 128 * 1024
    out = bytearray(struct.pack("<I", 0xFD2FB528)) + b"\x00\x58"
    count = total // block
    for i in range(count):
        out += ((block << 3) | 2 | (i == count - 1)).to_bytes(3, "little") + b"\0"
    return bytes(out)


def mutated(rng: random.Random, now: int) -> tuple[bytes, int]:
    """A valid batch whose records section is damaged at random, CRC made right again."""
    n = rng.randint(1, 6)
    section = bytearray(b"".join(
        encode_record(i, rng.randint(0, 50), rng.choice([None, b"k%d" % i]),
                      rng.randbytes(rng.randint(0, 40)), [("h", b"x")] * rng.randint(0, 2))
        for i in range(n)))
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(section) + 1)
        kind = rng.choice(["flip", "insert", "delete", "truncate", "count", "varint"])
        if kind == "flip" and at < len(section):
            section[at] ^= rng.randint(1, 255)
        elif kind == "insert":
            section[at:at] = rng.randbytes(rng.randint(1, 5))
        elif kind == "delete":
            del section[at : at + rng.randint(1, 5)]
        elif kind == "truncate":
            del section[at:]
        elif kind == "count":
            n = max(1, n + rng.choice([-1, 1, 2]))
        else:
            section[at : at + 1] = rng.choice([b"\xff\xff\xff\xff\xff\x01", b"\x01", b"\x03"])
    return batch_of(bytes(section), n, codec=rng.choice(CODECS), base_timestamp=now), n


def test_poison_batches_are_refused_and_the_partition_stays_readable(
        broker: BrokerProcess) -> None:
    topic = "poison"
    wire = Wire(broker.port)
    wire.call(MetadataRequest(topics=[MetadataRequestTopic(name=topic)],
                              allow_auto_topic_creation=True), 12)
    first = [Rec(b"a%d" % i, b"first-%d" % i) for i in range(5)]
    make_client("confluent-kafka", broker.bootstrap).produce(topic, first)

    now = int(time.time() * 1000)
    two = encode_record(0, 0, b"k", b"v" * 20) + encode_record(1, 0, b"k", b"w" * 20)
    null_header_key = (b"\0" + encode_varlong(0) + encode_varint(0) + encode_varint(1) + b"k" +
                       encode_varint(1) + b"v" + encode_varint(1) + encode_varint(-1) +
                       encode_varint(0))
    cases: list[tuple[str, bytes, int]] = [
        # the cases
        ("gzip garbage", batch_of(b"", 1, codec=GZIP, base_timestamp=now,
                                  compressed=b"\x1f\x8b\x08\x00" + bytes(range(256)) + b"x" * 201),
         ErrorCode.CORRUPT_MESSAGE),
        ("count 1, two records", batch_of(two, 1, base_timestamp=now), ErrorCode.CORRUPT_MESSAGE),
        ("deltas 0, 5", batch_of(encode_record(0, 0, b"k", b"v") + encode_record(5, 0, b"k", b"w"),
                                 2, base_timestamp=now), ErrorCode.CORRUPT_MESSAGE),
        ("zstd bomb", batch_of(b"", 1, codec=ZSTD, base_timestamp=now,
                               compressed=zstd_rle_bomb(4 << 30)), ErrorCode.MESSAGE_TOO_LARGE),
        ("a record 10 years ahead", batch_of(
            encode_record(0, 0, b"k", b"v") + encode_record(1, 10 * YEAR, b"k", b"w"), 2,
            base_timestamp=now), ErrorCode.INVALID_TIMESTAMP),
        # more structure
        ("null header key", batch_of(encode_varint(len(null_header_key)) + null_header_key, 1,
                                     base_timestamp=now), ErrorCode.CORRUPT_MESSAGE),
        ("trailing bytes", batch_of(two + b"\0\0", 2, base_timestamp=now),
         ErrorCode.CORRUPT_MESSAGE),
        ("lz4 garbage", batch_of(b"", 1, codec=LZ4, base_timestamp=now,
                                 compressed=b"\x04\x22\x4d\x18" + b"\x55" * 80),
         ErrorCode.CORRUPT_MESSAGE),
        ("snappy garbage", batch_of(b"", 1, codec=SNAPPY, base_timestamp=now,
                                    compressed=b"\x0a" + b"\xfe" * 40),
         ErrorCode.CORRUPT_MESSAGE),
        ("snappy claiming 256 MiB", batch_of(b"", 1, codec=SNAPPY, base_timestamp=now,
                                             compressed=b"\xff\xff\xff\x7f" + b"\x00" * 40),
         ErrorCode.MESSAGE_TOO_LARGE),
    ]
    for name, batch, code in cases:
        got, record_errors = wire.produce(topic, batch)
        assert got == code, name
        if code == ErrorCode.INVALID_TIMESTAMP:
            assert [i for i, _ in record_errors] == [1], name

    # Random damage with a correct CRC, in every codec: refused with a code, or (when the
    # damage happens to leave valid records) stored and readable like any other.
    rng = random.Random(14)
    accepted = 0
    outcomes: set[int] = set()
    for _ in range(60):
        batch, count = mutated(rng, now)
        got, _ = wire.produce(topic, batch)
        assert got in REFUSALS | {ErrorCode.NONE}
        outcomes.add(got)
        accepted += count if got == ErrorCode.NONE else 0
    assert {ErrorCode.NONE, ErrorCode.CORRUPT_MESSAGE} <= outcomes

    last = [Rec(b"z%d" % i, b"last-%d" % i) for i in range(5)]
    make_client("kafka-python", broker.bootstrap).produce(topic, last)
    total = len(first) + accepted + len(last)
    for client in ("confluent-kafka", "kafka-python"):
        got = make_client(client, broker.bootstrap).consume(topic, 1, total, timeout=20)
        assert [r.offset for r in got] == list(range(total)), client
        values = [r.value for r in got]
        assert values[:5] == [r.value for r in first] and values[-5:] == [r.value for r in last]


def test_record_errors_name_the_records_without_key(broker: BrokerProcess) -> None:
    topic = "compacted-0011"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})])[
        topic].result(30)
    # librdkafka's test 0011, variation 0: 100 records in one batch, every tenth keyless.
    failed = deliver(broker, topic, {"linger.ms": 1000, "batch.num.messages": 1000})
    assert sorted(i for i, code in failed.items() if code == KafkaError.INVALID_RECORD) == \
        list(range(0, 100, 10))
    assert sum(code == KafkaError._INVALID_DIFFERENT_RECORD for code in failed.values()) == 90
    # Variation 1: one record per batch; the other 90 are written.
    failed = deliver(broker, topic, {"batch.size": 1})
    assert sorted(failed) == list(range(0, 100, 10))
    assert set(failed.values()) == {KafkaError.INVALID_RECORD}
    got = make_client("kafka-python", broker.bootstrap).consume(topic, 1, 90, timeout=20)
    assert len(got) == 90 and all(r.key is not None for r in got)
    # On the wire: Produce v8+ lists them; older versions have no field for it.
    wire = Wire(broker.port)
    section = b"".join(encode_record(i, 0, None if i % 10 == 0 else b"k", b"v")
                       for i in range(100))
    batch = batch_of(section, 100, base_timestamp=int(time.time() * 1000))
    code, record_errors = wire.produce(topic, batch, version=9)
    assert code == ErrorCode.INVALID_RECORD
    assert [i for i, _ in record_errors] == list(range(0, 100, 10))
    assert all("without key" in (m or "") for _, m in record_errors)
    assert wire.produce(topic, batch, version=7) == (ErrorCode.INVALID_RECORD, [])


def deliver(broker: BrokerProcess, topic: str, config: dict[str, object]) -> dict[int, int]:
    """Produces 100 records, every tenth without a key; {index: error code} of the failed."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                         "message.timeout.ms": 20_000, **config})
    failed: dict[int, int] = {}
    for i in range(100):
        key = None if i % 10 == 0 else b"key-%d" % i

        def report(err: KafkaError | None, _msg: object, i: int = i) -> None:
            if err is not None:
                failed[i] = err.code()

        producer.produce(topic, b"value-%d" % i, key, on_delivery=report)
    assert producer.flush(30) == 0
    return failed
