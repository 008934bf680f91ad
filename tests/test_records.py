"""RecordBatch v2: header walk, CRC, in-place rewrites, records, control batches.

kafka-python's DefaultRecordBatchBuilder / DefaultRecordBatch serve as an independent
oracle in both directions (for the codecs it can handle here: none and gzip).
"""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import (
    ControlRecord,
    DefaultRecordBatch,
    DefaultRecordBatchBuilder,
)
from kafka.record.util import decode_varint as kp_decode_varint
from kafka.record.util import encode_varint as kp_encode_varint

from odradek.protocol import records as R
from odradek.protocol.compression import CODEC_NAMES, GZIP, LZ4, NONE, SNAPPY, ZSTD, compress
from odradek.protocol.exceptions import (
    CorruptRecordError,
    InvalidRecordError,
    ProtocolError,
    UnsupportedCompressionError,
)
from odradek.protocol.records import (
    HEADER_STRUCT,
    ControlRecordType,
    RecordBatchHeader,
    SimpleRecord,
    assign_offsets,
    build_control_batch,
    build_record_batch,
    decode_control_record,
    decode_records,
    decode_varint,
    decode_varlong,
    encode_record,
    encode_varint,
    encode_varlong,
    iter_batch_headers,
    set_log_append_time,
    set_max_timestamp,
    set_partition_leader_epoch,
    validate_batch,
    validate_crc,
)

CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
KAFKA_PYTHON_CODECS = [NONE, GZIP]  # kafka-python has no snappy/lz4/zstd library here
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TS = 1_700_000_000_000

SAMPLE = [
    SimpleRecord(b"key", b"value", [("h1", b"v1"), ("h2", None)], TS),
    SimpleRecord(None, b"null key", (), TS + 5),
    SimpleRecord(b"null value", None, (), TS + 3),
    SimpleRecord(None, None, (), None),
    SimpleRecord(b"", b"", [("", b""), ("ünï", b"\x00\xff")], TS - 10),
    SimpleRecord(b"big", bytes(range(256)) * 40, (), TS + 1),
]


def expected_timestamp(r: SimpleRecord, base: int) -> int:
    return base if r.timestamp is None else r.timestamp


def check_against(records: list[R.Record], sample: list[SimpleRecord], base_offset: int) -> None:
    assert len(records) == len(sample)
    base_ts = sample[0].timestamp
    for i, (got, want) in enumerate(zip(records, sample, strict=True)):
        assert got.offset_delta == i
        assert got.offset == base_offset + i
        assert got.key == want.key
        assert got.value == want.value
        assert got.headers == list(want.headers)
        assert got.timestamp == expected_timestamp(want, base_ts)
        assert got.attributes == 0


def rewrite(batch: bytes | bytearray, **fields: int) -> bytearray:
    """Change header fields by name and recompute the CRC, to craft consistent oddities."""
    names = list(RecordBatchHeader.__dataclass_fields__)
    values = list(HEADER_STRUCT.unpack_from(batch))
    for name, value in fields.items():
        values[names.index(name)] = value
    out = bytearray(batch)
    HEADER_STRUCT.pack_into(out, 0, *values)
    if "crc" not in fields:
        struct.pack_into(">I", out, R.CRC_OFFSET, R.compute_crc(out, 0, len(out)))
    return out


def batch_with_section(section: bytes, count: int, codec: int = NONE) -> bytearray:
    """A batch with a valid header and CRC around an arbitrary (uncompressed) records section."""
    body = compress(codec, section)
    out = bytearray(R.RECORD_BATCH_OVERHEAD + len(body))
    HEADER_STRUCT.pack_into(
        out, 0, 0, len(out) - 12, -1, 2, 0, codec, max(count - 1, 0), TS, TS, -1, -1, -1, count
    )
    out[R.RECORDS_OFFSET :] = body
    struct.pack_into(">I", out, R.CRC_OFFSET, R.compute_crc(out, 0, len(out)))
    return out


# --- layout -------------------------------------------------------------------------------


def test_header_layout_matches_kafka() -> None:
    assert HEADER_STRUCT.size == R.RECORD_BATCH_OVERHEAD == R.RECORDS_OFFSET == 61
    formats = [">q", "i", "i", "b", "I", "h", "i", "q", "q", "q", "h", "i", "i"]
    offsets = [
        R.BASE_OFFSET_OFFSET,
        R.LENGTH_OFFSET,
        R.PARTITION_LEADER_EPOCH_OFFSET,
        R.MAGIC_OFFSET,
        R.CRC_OFFSET,
        R.ATTRIBUTES_OFFSET,
        R.LAST_OFFSET_DELTA_OFFSET,
        R.BASE_TIMESTAMP_OFFSET,
        R.MAX_TIMESTAMP_OFFSET,
        R.PRODUCER_ID_OFFSET,
        R.PRODUCER_EPOCH_OFFSET,
        R.BASE_SEQUENCE_OFFSET,
        R.RECORDS_COUNT_OFFSET,
    ]
    for i, offset in enumerate(offsets):
        assert struct.calcsize(">" + "".join(f.lstrip(">") for f in formats[:i])) == offset
    assert DefaultRecordBatch.ATTRIBUTES_OFFSET == R.ATTRIBUTES_OFFSET
    assert DefaultRecordBatch.CRC_OFFSET == R.CRC_OFFSET
    assert R.LOG_OVERHEAD == 12 and R.MIN_BATCH_LENGTH == 49


def test_header_properties() -> None:
    header = RecordBatchHeader(100, 49, 3, 2, 0, 0x7B, 9, 5, 6, 7, 8, -1, 10)
    assert header.size_in_bytes == 61
    assert header.last_offset == 109 and header.next_offset == 110
    assert header.compression == LZ4
    assert header.timestamp_type == R.LOG_APPEND_TIME
    assert header.is_transactional and header.is_control and header.has_delete_horizon
    assert header.delete_horizon_ms == 5
    assert header.has_producer_id
    assert header.last_sequence == R.NO_SEQUENCE
    header.attributes = 0
    assert header.compression == NONE and header.timestamp_type == R.CREATE_TIME
    assert not (header.is_transactional or header.is_control or header.has_delete_horizon)
    assert header.delete_horizon_ms is None
    header.base_sequence = 2**31 - 5  # sequences wrap past int32 max, as Kafka's do
    assert header.last_sequence == 4  # MAX-4 .. MAX, then 0 .. 4


# --- round trips --------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_NAMES.get)
def test_round_trip(codec: int) -> None:
    batch = build_record_batch(
        SAMPLE,
        base_offset=1000,
        compression=codec,
        producer_id=77,
        producer_epoch=3,
        base_sequence=12,
        is_transactional=True,
        partition_leader_epoch=4,
    )
    [(pos, header)] = list(iter_batch_headers(batch))
    assert pos == 0 and header.size_in_bytes == len(batch)
    assert header.base_offset == 1000 and header.partition_leader_epoch == 4
    assert header.magic == 2 and header.compression == codec
    assert header.records_count == len(SAMPLE) and header.last_offset_delta == len(SAMPLE) - 1
    assert header.base_timestamp == TS and header.max_timestamp == TS + 5
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 3, 12)
    assert header.last_sequence == 12 + len(SAMPLE) - 1
    assert header.is_transactional and not header.is_control
    assert RecordBatchHeader.parse(batch) == header
    validate_batch(batch, 0, header)
    check_against(decode_records(batch, 0, header), SAMPLE, 1000)


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_NAMES.get)
def test_many_records(codec: int) -> None:
    sample = [SimpleRecord(b"k%d" % i, b"v" * (i % 300), (), TS + i) for i in range(3000)]
    batch = build_record_batch(sample, compression=codec)
    header = RecordBatchHeader.parse(batch)
    validate_batch(batch, 0, header)
    check_against(decode_records(batch), sample, 0)


def test_tuples_and_defaults() -> None:
    batch = build_record_batch([(b"a", b"1"), (b"b", b"2", [("h", b"x")]), (None, b"3", (), 9)])
    header = RecordBatchHeader.parse(batch)
    assert header.base_timestamp == R.NO_TIMESTAMP  # first record had none
    records = decode_records(batch)
    assert [r.timestamp for r in records] == [-1, -1, 9]
    assert records[1].headers == [("h", b"x")]
    with pytest.raises(ValueError):
        build_record_batch([])
    with pytest.raises(UnsupportedCompressionError):
        build_record_batch([(b"a", b"1")], compression=5)


def test_non_utf8_header_key_round_trips_byte_for_byte() -> None:
    raw = encode_record(0, 0, None, b"v", [("k\udcff", None)])
    assert b"k\xff" in raw
    batch = batch_with_section(raw, 1)
    [record] = decode_records(batch)
    assert record.headers == [("k\udcff", None)]
    assert encode_record(0, 0, None, b"v", record.headers) == raw


def test_walk_several_batches_in_any_buffer_type() -> None:
    batches = [build_record_batch(SAMPLE[:n], base_offset=n) for n in (1, 3, 6)]
    joined = b"".join(batches)
    expected_positions = [0, len(batches[0]), len(batches[0]) + len(batches[1])]
    for buf in (joined, bytearray(joined), memoryview(joined), memoryview(bytearray(joined))):
        walked = list(iter_batch_headers(buf))
        assert [pos for pos, _ in walked] == expected_positions
        assert [h.records_count for _, h in walked] == [1, 3, 6]
        for pos, header in walked:
            validate_batch(buf, pos, header)
            records = decode_records(buf, pos, header)
            check_against(records, SAMPLE[: header.records_count], header.base_offset)
    assert list(iter_batch_headers(b"")) == []


# --- kafka-python as oracle ---------------------------------------------------------------


def kafka_python_batch(codec: int, sample: list[SimpleRecord], **producer: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=bool(producer.get("transactional", 0)),
        producer_id=producer.get("producer_id", -1),
        producer_epoch=producer.get("producer_epoch", -1),
        base_sequence=producer.get("base_sequence", -1),
        batch_size=1 << 24,
    )
    for i, r in enumerate(sample):
        ts = sample[0].timestamp if r.timestamp is None else r.timestamp
        assert builder.append(i, ts, r.key, r.value, list(r.headers)) is not None
    return bytes(builder.build())


@pytest.mark.parametrize("codec", KAFKA_PYTHON_CODECS, ids=CODEC_NAMES.get)
def test_we_read_kafka_python_batches(codec: int) -> None:
    sample = SAMPLE * 20  # compressible, so kafka-python keeps the codec
    batch = kafka_python_batch(
        codec, sample, producer_id=5, producer_epoch=1, base_sequence=0, transactional=1
    )
    header = RecordBatchHeader.parse(batch)
    assert header.compression == codec
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (5, 1, 0)
    assert header.is_transactional
    validate_batch(batch, 0, header)
    check_against(decode_records(batch, 0, header), sample, 0)


@pytest.mark.parametrize("codec", KAFKA_PYTHON_CODECS, ids=CODEC_NAMES.get)
def test_kafka_python_reads_our_batches(codec: int) -> None:
    batch = build_record_batch(
        SAMPLE,
        base_offset=500,
        compression=codec,
        producer_id=9,
        producer_epoch=2,
        base_sequence=40,
    )
    theirs = DefaultRecordBatch(batch)
    assert theirs.validate_crc()
    assert theirs.base_offset == 500 and theirs.compression_type == codec
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (9, 2, 40)
    assert theirs.last_offset_delta == len(SAMPLE) - 1
    assert theirs.max_timestamp == TS + 5 and theirs.first_timestamp == TS
    decoded = list(theirs)
    assert len(decoded) == len(SAMPLE)
    for i, (got, want) in enumerate(zip(decoded, SAMPLE, strict=True)):
        assert got.offset == 500 + i
        assert got.timestamp == expected_timestamp(want, TS)
        assert got.key == want.key and got.value == want.value
        assert got.headers == list(want.headers)


@pytest.mark.parametrize("codec", [SNAPPY, LZ4, ZSTD], ids=CODEC_NAMES.get)
def test_kafka_python_checks_crc_of_our_other_codecs(codec: int) -> None:
    # It cannot decompress these here, but its CRC and header reading must agree with ours.
    batch = build_record_batch(SAMPLE, compression=codec)
    theirs = DefaultRecordBatch(batch)
    assert theirs.validate_crc()
    assert theirs.compression_type == codec and theirs.records_count == len(SAMPLE)


# --- CRC and corruption -------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_NAMES.get)
def test_any_flipped_byte_after_magic_is_detected(codec: int) -> None:
    batch = build_record_batch(SAMPLE[:3], compression=codec)
    header = RecordBatchHeader.parse(batch)
    for where in range(R.CRC_OFFSET, len(batch)):
        damaged = bytearray(batch)
        damaged[where] ^= 0x01 if where % 2 else 0x80
        with pytest.raises(CorruptRecordError, match="CRC"):
            validate_batch(damaged, 0, RecordBatchHeader.parse(damaged))
        if where >= R.ATTRIBUTES_OFFSET:  # with the original header, a stored-CRC flip is moot
            with pytest.raises(CorruptRecordError):
                validate_crc(damaged, 0, header)


def test_fields_outside_crc_are_free() -> None:
    batch = bytearray(build_record_batch(SAMPLE))
    for where in list(range(0, 8)) + list(range(12, 16)):
        batch[where] ^= 0xFF
    validate_batch(batch, 0, RecordBatchHeader.parse(batch))


def test_crc_on_batch_that_does_not_fit() -> None:
    batch = build_record_batch(SAMPLE)
    header = RecordBatchHeader.parse(batch)
    with pytest.raises(CorruptRecordError):
        validate_crc(batch[:-1], 0, header)
    with pytest.raises(CorruptRecordError):
        decode_records(batch[:-1], 0, header)


# --- walking: legacy, sizes, partial batches ----------------------------------------------


def legacy_message(magic: int, value: bytes = b"hello") -> bytes:
    """One magic 0/1 message, as a pre-0.11 client sends it (its CRC is CRC-32, not C)."""
    body = struct.pack(">bb", magic, 0)
    if magic == 1:
        body += struct.pack(">q", TS)
    body += struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    message = struct.pack(">I", 0) + body
    return struct.pack(">qi", 0, len(message)) + message


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_magic_is_refused_clearly(magic: int) -> None:
    for message in (legacy_message(magic), legacy_message(magic, b"x" * 200)):
        with pytest.raises(InvalidRecordError, match=rf"legacy message format \(magic v{magic}"):
            list(iter_batch_headers(message))
        with pytest.raises(InvalidRecordError, match="RecordBatch v2"):
            RecordBatchHeader.parse(message)
    # Also after a good batch, and with allow_partial.
    good = build_record_batch(SAMPLE[:1])
    with pytest.raises(InvalidRecordError, match=f"at position {len(good)}"):
        list(iter_batch_headers(good + legacy_message(magic), allow_partial=True))


@pytest.mark.parametrize("magic", [3, -1, 127])
def test_unknown_magic_is_corrupt(magic: int) -> None:
    batch = bytearray(build_record_batch(SAMPLE[:1]))
    batch[R.MAGIC_OFFSET] = magic & 0xFF
    with pytest.raises(CorruptRecordError, match="magic"):
        list(iter_batch_headers(batch))
    with pytest.raises(CorruptRecordError, match="magic"):
        RecordBatchHeader.parse(batch)


@pytest.mark.parametrize("batch_length", [-1, 0, 48, -(2**31)])
def test_batch_length_too_small(batch_length: int) -> None:
    batch = bytearray(build_record_batch(SAMPLE[:1]))
    struct.pack_into(">i", batch, R.LENGTH_OFFSET, batch_length)
    with pytest.raises(CorruptRecordError, match="batchLength"):
        list(iter_batch_headers(batch))
    with pytest.raises(CorruptRecordError, match="batchLength"):
        list(iter_batch_headers(batch, allow_partial=True))


def test_partial_trailing_batch() -> None:
    first = build_record_batch(SAMPLE[:2])
    second = build_record_batch(SAMPLE[:3], base_offset=2)
    for cut in (1, 11, 12, 16, 17, 40, 61, len(second) - 1):
        buf = first + second[:cut]
        with pytest.raises(CorruptRecordError, match="truncated"):
            list(iter_batch_headers(buf))
        assert [pos for pos, _ in iter_batch_headers(buf, allow_partial=True)] == [0]
    with pytest.raises(CorruptRecordError, match="truncated"):
        RecordBatchHeader.parse(second[:60])


def test_batch_length_beyond_buffer() -> None:
    batch = bytearray(build_record_batch(SAMPLE[:1]))
    struct.pack_into(">i", batch, R.LENGTH_OFFSET, 2**31 - 1)
    with pytest.raises(CorruptRecordError, match="truncated"):
        list(iter_batch_headers(batch))
    assert list(iter_batch_headers(batch, allow_partial=True)) == []


# --- header consistency -------------------------------------------------------------------


def test_client_rules() -> None:
    good = build_record_batch(SAMPLE[:3], producer_id=1, producer_epoch=0, base_sequence=0)

    def check(batch: bytearray, client_error: type | None, replica_error: type | None) -> None:
        header = RecordBatchHeader.parse(batch)
        for from_client, error in ((True, client_error), (False, replica_error)):
            if error is None:
                validate_batch(batch, 0, header, from_client=from_client)
            else:
                with pytest.raises(error):
                    validate_batch(batch, 0, header, from_client=from_client)

    check(bytearray(good), None, None)
    # Compaction keeps lastOffsetDelta while records go: fine when replicated, not from clients.
    check(rewrite(good, last_offset_delta=9), InvalidRecordError, None)
    check(rewrite(good, last_offset_delta=1), CorruptRecordError, CorruptRecordError)
    check(rewrite(good, records_count=-1), CorruptRecordError, CorruptRecordError)
    check(rewrite(good, attributes=R.CONTROL_FLAG_MASK), InvalidRecordError, None)
    check(rewrite(good, base_sequence=-1), InvalidRecordError, None)
    check(
        rewrite(good, producer_id=-1, attributes=R.TRANSACTIONAL_FLAG_MASK),
        InvalidRecordError,
        None,
    )
    for codec in (5, 6, 7):
        check(
            rewrite(good, attributes=codec),
            UnsupportedCompressionError,
            UnsupportedCompressionError,
        )
    # A section too small for the count it claims (7 bytes is the smallest record).
    check(
        rewrite(good, records_count=10_000, last_offset_delta=9_999),
        CorruptRecordError,
        CorruptRecordError,
    )


def test_empty_batch_kept_by_compaction() -> None:
    empty = batch_with_section(b"", 0)
    empty = rewrite(empty, last_offset_delta=4)
    header = RecordBatchHeader.parse(empty)
    validate_batch(empty, 0, header, from_client=False)
    assert decode_records(empty, 0, header) == []
    assert header.next_offset == 5
    with pytest.raises(InvalidRecordError):
        validate_batch(empty, 0, header)


# --- in-place rewrites --------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_NAMES.get)
def test_assign_offsets_keeps_crc(codec: int) -> None:
    batches = [build_record_batch(SAMPLE[:n], compression=codec) for n in (2, 4)]
    buf = bytearray(b"".join(batches))
    next_offset = 12_345
    for pos, header in iter_batch_headers(buf):
        assign_offsets(buf, pos, next_offset)
        next_offset += header.last_offset_delta + 1
    walked = list(iter_batch_headers(buf))
    assert [h.base_offset for _, h in walked] == [12_345, 12_347]
    for pos, header in walked:
        validate_batch(buf, pos, header)
        offsets = [r.offset for r in decode_records(buf, pos, header)]
        assert offsets == list(range(header.base_offset, header.next_offset))
    if codec in KAFKA_PYTHON_CODECS:
        assert DefaultRecordBatch(buf[walked[1][0] :]).validate_crc()


def test_rewrites_through_a_memoryview() -> None:
    backing = bytearray(b"\xaa" * 5 + build_record_batch(SAMPLE))
    view = memoryview(backing)[5:]
    assign_offsets(view, 0, 7)
    set_partition_leader_epoch(view, 0, 11)
    set_log_append_time(view, 0, TS + 1000)
    header = RecordBatchHeader.parse(backing, 5)
    assert (header.base_offset, header.partition_leader_epoch) == (7, 11)
    validate_batch(backing, 5, header)
    with pytest.raises(TypeError):
        assign_offsets(bytes(backing), 5, 0)  # read-only buffers cannot be rewritten


def test_partition_leader_epoch_keeps_crc() -> None:
    buf = bytearray(build_record_batch(SAMPLE))
    set_partition_leader_epoch(buf, 0, 42)
    header = RecordBatchHeader.parse(buf)
    assert header.partition_leader_epoch == 42
    validate_batch(buf, 0, header)


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_NAMES.get)
def test_log_append_time_keeps_crc(codec: int) -> None:
    original = build_record_batch(
        SAMPLE,
        compression=codec,
        is_transactional=True,
        producer_id=3,
        producer_epoch=0,
        base_sequence=0,
    )
    buf = bytearray(original)
    before = RecordBatchHeader.parse(buf)
    set_log_append_time(buf, 0, TS + 99_999)
    header = RecordBatchHeader.parse(buf)
    validate_batch(buf, 0, header)
    assert header.timestamp_type == R.LOG_APPEND_TIME
    assert header.max_timestamp == TS + 99_999
    assert header.compression == codec and header.is_transactional  # other bits untouched
    assert header.base_timestamp == before.base_timestamp
    assert {r.timestamp for r in decode_records(buf, 0, header)} == {TS + 99_999}
    if codec in KAFKA_PYTHON_CODECS:
        theirs = DefaultRecordBatch(buf)
        assert theirs.validate_crc() and theirs.timestamp_type == 1
        assert {r.timestamp for r in theirs} == {TS + 99_999}
    # And back to CreateTime with the real maximum: the very bytes we started from.
    set_max_timestamp(buf, 0, R.CREATE_TIME, TS + 5)
    assert bytes(buf) == original


def test_set_max_timestamp_unchanged_is_a_no_op() -> None:
    batch = build_record_batch(SAMPLE)
    buf = bytearray(batch)
    set_max_timestamp(buf, 0, R.CREATE_TIME, TS + 5)
    assert bytes(buf) == batch
    with pytest.raises(ValueError):
        set_max_timestamp(buf, 0, 2, TS)


# --- records: malformed -------------------------------------------------------------------


def test_record_count_must_match_data() -> None:
    section = encode_record(0, 0, b"k", b"v") + encode_record(1, 0, b"k", b"v")
    assert len(decode_records(batch_with_section(section, 2))) == 2
    with pytest.raises(CorruptRecordError, match="data for only 2"):
        decode_records(batch_with_section(section, 3))
    with pytest.raises(CorruptRecordError, match="bytes left after 1 records"):
        decode_records(batch_with_section(section, 1))
    for codec in (GZIP, ZSTD):
        with pytest.raises(CorruptRecordError):
            decode_records(batch_with_section(section, 3, codec))


@pytest.mark.parametrize(
    "section",
    [
        encode_varint(50) + b"\x00" * 10,  # record longer than the data
        encode_varint(3) + b"\x00\x00\x00",  # record shorter than its fixed fields
        encode_varint(-2),  # negative record length
        # key length running past the record
        encode_varint(7) + b"\x00\x00\x00" + encode_varint(100) + b"\x00\x00\x00",
        # a record whose fields end before its declared length
        encode_varint(8) + b"\x00\x00\x00\x01\x01\x00\x00\x00",
        # negative header count
        encode_varint(6) + b"\x00\x00\x00\x01\x01" + encode_varint(-3),
        # huge header count
        encode_varint(10) + b"\x00\x00\x00\x01\x01" + encode_varint(2**30) + b"\x00" * 4,
        # negative header key length
        encode_varint(8) + b"\x00\x00\x00\x01\x01\x02" + encode_varint(-1) + b"\x01",
        # overlong varint for the timestamp delta
        encode_varint(16) + b"\x00" + b"\xff" * 11 + b"\x00\x01\x01\x00",
        b"\x80",  # truncated varint
    ],
)
def test_malformed_records_are_corrupt(section: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_records(batch_with_section(section, 1))


def test_decode_refuses_decompression_bomb() -> None:
    section = encode_record(0, 0, None, bytes(2 * 1024 * 1024))
    batch = batch_with_section(section, 1, ZSTD)
    assert len(decode_records(batch)[0].value) == 2 * 1024 * 1024
    with pytest.raises(CorruptRecordError, match="more than"):
        decode_records(batch, max_size=1024 * 1024)


# --- varints ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (63, b"\x7e"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
        (-(2**31), b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_varint_known_encodings(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    assert decode_varint(encoded, 0) == (value, len(encoded))
    assert decode_varlong(encoded, 0) == (value, len(encoded))


def test_varint_bounds() -> None:
    with pytest.raises(CorruptRecordError, match="longer than 5"):
        decode_varint(b"\x80\x80\x80\x80\x80\x00", 0)
    with pytest.raises(CorruptRecordError, match="longer than 10"):
        decode_varlong(b"\x80" * 10 + b"\x00", 0)
    with pytest.raises(CorruptRecordError, match="truncated"):
        decode_varint(b"\x80\x80", 0)
    with pytest.raises(CorruptRecordError, match="truncated"):
        decode_varlong(b"", 0)
    # A fifth byte with bits beyond 32: dropped, as Java's readVarint does.
    assert decode_varint(b"\xfe\xff\xff\xff\x7f", 0) == (2**31 - 1, 5)
    with pytest.raises(ValueError):
        encode_varint(2**31)
    with pytest.raises(ValueError):
        encode_varlong(-(2**63) - 1)
    assert decode_varlong(encode_varlong(-(2**63)), 0) == (-(2**63), 10)


@FUZZ
@given(st.integers(-(2**63), 2**63 - 1), st.binary(max_size=3))
def test_varlong_matches_kafka_python(value: int, prefix: bytes) -> None:
    ours = encode_varlong(value)
    theirs = bytearray()
    kp_encode_varint(value, theirs.append)
    assert ours == bytes(theirs)
    assert decode_varlong(prefix + ours, len(prefix)) == (value, len(prefix) + len(ours))
    assert kp_decode_varint(bytearray(ours), 0) == (value, len(ours))
    if -(2**31) <= value < 2**31:
        assert encode_varint(value) == ours
        assert decode_varint(ours, 0) == (value, len(ours))


# --- control batches ----------------------------------------------------------------------


@pytest.mark.parametrize("commit", [True, False])
def test_control_batch_round_trip(commit: bool) -> None:
    batch = build_control_batch(commit, 4242, 7, 13, TS, base_offset=99, partition_leader_epoch=2)
    header = RecordBatchHeader.parse(batch)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch) == (4242, 7)
    assert header.base_sequence == R.NO_SEQUENCE
    assert header.base_offset == 99 and header.records_count == 1
    assert header.base_timestamp == header.max_timestamp == TS
    assert header.partition_leader_epoch == 2
    validate_batch(batch, 0, header, from_client=False)
    with pytest.raises(InvalidRecordError, match="control"):
        validate_batch(batch, 0, header)  # clients may not write markers
    [record] = decode_records(batch)
    assert record.offset == 99 and record.timestamp == TS
    expected = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    assert record.key == struct.pack(">hh", 0, expected)
    assert record.value == struct.pack(">hi", 0, 13)
    assert decode_control_record(record) == (expected, 13)
    [theirs] = list(DefaultRecordBatch(batch))
    assert isinstance(theirs, ControlRecord)
    assert theirs.commit is commit and theirs.abort is not commit and theirs.offset == 99


def test_decode_control_record_errors() -> None:
    def record(key: bytes | None, value: bytes | None) -> R.Record:
        return R.Record(0, 0, key, value)

    assert decode_control_record(record(struct.pack(">hh", 0, 2), None)) == (2, None)
    # Newer versions carry more fields after the version-0 ones.
    newer = record(struct.pack(">hhh", 1, 1, 0), struct.pack(">hii", 1, 5, 0))
    assert decode_control_record(newer) == (1, 5)
    for bad in (record(None, None), record(b"\x00\x00\x00", b""), record(b"\x00" * 4, b"\x00")):
        with pytest.raises(CorruptRecordError):
            decode_control_record(bad)


# --- fuzzing: only ProtocolErrors, never hangs --------------------------------------------


def exercise(buf: bytes | bytearray) -> None:
    """Everything a reader would do with untrusted bytes; only ProtocolError may escape."""
    for allow_partial in (False, True):
        try:
            for pos, header in iter_batch_headers(buf, allow_partial=allow_partial):
                for call in (
                    lambda pos=pos, header=header: validate_batch(buf, pos, header),
                    lambda pos=pos, header=header: validate_batch(
                        buf, pos, header, from_client=False
                    ),
                    lambda pos=pos, header=header: decode_records(
                        buf, pos, header, max_size=1 << 20
                    ),
                ):
                    with contextlib.suppress(ProtocolError):
                        call()
        except ProtocolError:
            pass
    with contextlib.suppress(ProtocolError):
        RecordBatchHeader.parse(buf)


@FUZZ
@given(st.binary(max_size=300))
def test_fuzz_random_bytes(data: bytes) -> None:
    exercise(data)


@FUZZ
@given(st.binary(min_size=61, max_size=200).map(lambda b: b[:16] + b"\x02" + b[17:]))
def test_fuzz_random_bytes_with_magic_2(data: bytes) -> None:
    exercise(data)


@FUZZ
@given(
    codec=st.sampled_from(CODECS),
    n=st.integers(1, 6),
    edits=st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 255)), max_size=4),
    cut=st.integers(0, 80),
)
def test_fuzz_mutated_batches(codec: int, n: int, edits: list[tuple[int, int]], cut: int) -> None:
    batch = bytearray(build_record_batch(SAMPLE[:n], compression=codec))
    for where, byte in edits:
        batch[where % len(batch)] = byte
    del batch[max(0, len(batch) - cut) :]
    exercise(batch)
    # And the same damage again with a fresh CRC, so it reaches the record parser.
    if len(batch) >= R.RECORD_BATCH_OVERHEAD:
        exercise(rewrite(batch, batch_length=len(batch) - 12))


@FUZZ
@given(
    codec=st.sampled_from(CODECS),
    n=st.integers(1, 6),
    count=st.integers(-2, 10),
    edits=st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 255)), max_size=6),
    cut=st.integers(0, 40),
)
def test_fuzz_mutated_records_section(
    codec: int, n: int, count: int, edits: list[tuple[int, int]], cut: int
) -> None:
    # Damage the uncompressed records, then compress: reaches the parser under every codec.
    section = bytearray(
        b"".join(encode_record(i, i, r.key, r.value, r.headers) for i, r in enumerate(SAMPLE[:n]))
    )
    for where, byte in edits:
        section[where % len(section)] = byte
    del section[max(0, len(section) - cut) :]
    batch = batch_with_section(bytes(section), count, codec)
    validate_crc(batch, 0, RecordBatchHeader.parse(batch))
    exercise(batch)
