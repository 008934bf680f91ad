"""Legacy message sets (magic 0/1) <-> RecordBatch v2: Produce v0-v2 and Fetch v0-v3.

kafka-python's legacy_records (LegacyRecordBatchBuilder, MemoryRecords/LegacyRecordBatch)
is an independent oracle in both directions; python-lz4 vouches for the LZ4 header
checksum. kafka-python's magic 0 LZ4 needs the `xxhash` package, which is not installed:
those cases lend it a stand-in built on our XXH32, itself checked against published test
vectors and python-lz4's frames.
"""

from __future__ import annotations

import contextlib
import random
import struct
import zlib

import lz4.frame
import pytest
import xxhash
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from odradek.protocol import legacy_records as L
from odradek.protocol.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD, compress
from odradek.protocol.exceptions import (
    CorruptRecordError,
    DecompressionLimitError,
    InvalidRecordError,
    UnsupportedCompressionError,
)
from odradek.protocol.legacy_records import (
    LegacyRecord,
    build_message_set,
    convert_to_batch,
    down_convert,
    encode_message,
    is_legacy,
    iter_legacy_records,
    magic_of,
)
from odradek.protocol.records import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    NO_TIMESTAMP,
    RecordBatchHeader,
    SimpleRecord,
    build_control_batch,
    build_record_batch,
    decode_records,
    iter_batch_headers,
)

CODECS = (NONE, GZIP, SNAPPY, LZ4)
LEGACY_CASES = [(m, c) for m in (0, 1) for c in CODECS]

# keys and values: null, empty, small, one that spans an LZ4/xerial block
SAMPLE = [
    (b"k0", b"v0"),
    (None, b"null key"),
    (b"null value", None),
    (None, None),
    (b"", b""),
    (b"k5", bytes(range(256)) * 300),
    (b"k6", b"x"),
]


def kp_build(magic: int, codec: int, records, first_offset: int = 0) -> bytes:
    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 30)
    for i, (key, value) in enumerate(records):
        builder.append(first_offset + i, 1_700_000_000_000 + i, key, value)
    return bytes(builder.build())


def kp_read(data: bytes) -> list[tuple]:
    """(wrapper offset, magic, codec, timestamp type, [(offset, ts, key, value)]) per entry."""
    records = MemoryRecords(data)
    out = []
    while (batch := records.next_batch()) is not None:
        out.append((batch.base_offset, batch.magic, batch.compression_type,
                    batch.timestamp_type,
                    [(r.offset, r.timestamp, r.key, r.value) for r in batch]))
    return out


def kp_flat(data: bytes) -> list[tuple]:
    return [record for *_, records in kp_read(data) for record in records]


def v2_records(batch: bytes) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value) for r in decode_records(batch)]


def fix_crcs(buf: bytearray) -> bytearray:
    """Recompute the CRC of every message whose framing holds, so damage gets past it."""
    pos = 0
    while pos + 17 <= len(buf):
        size = struct.unpack_from(">i", buf, pos + 8)[0]
        end = pos + 12 + size
        if size < 5 or end > len(buf):
            break
        struct.pack_into(">I", buf, pos + 12, zlib.crc32(bytes(buf[pos + 16 : end])))
        pos = end
    return buf


def wrapper(magic: int, codec: int, inner: bytes, *, offset: int = 0, timestamp: int = 0,
            attributes: int | None = None) -> bytes:
    payload = compress(codec, inner)
    if codec == LZ4 and magic == 0:
        payload = L._lz4_with_header_checksum(payload, broken=True)
    return encode_message(offset, magic, None, payload, timestamp=timestamp,
                          attributes=codec if attributes is None else attributes)


# --- Formats and helpers ------------------------------------------------------------------


def test_magic_of_tells_formats_apart() -> None:
    assert magic_of(build_record_batch([(b"k", b"v")])) == 2
    assert magic_of(kp_build(0, NONE, [(b"k", b"v")])) == 0
    assert magic_of(kp_build(1, GZIP, [(b"k", b"v")])) == 1
    assert magic_of(b"\x00" * 16) is None
    assert is_legacy(memoryview(kp_build(1, NONE, [(None, b"v")])))
    assert not is_legacy(build_record_batch([(b"k", b"v")]))
    assert not is_legacy(b"")


def test_lz4_header_checksums() -> None:
    # python-lz4 writes correct checksums over descriptors of every optional layout
    for options in ({}, {"store_size": True}, {"block_checksum": True},
                    {"content_checksum": True, "block_size": lz4.frame.BLOCKSIZE_MAX4MB}):
        frame = lz4.frame.compress(b"payload" * 50, **options)
        assert L._lz4_with_header_checksum(frame, broken=False) == frame


def test_magic0_lz4_is_written_with_kafkas_broken_header_checksum() -> None:
    out = down_convert(build_record_batch([(b"k", b"v" * 100)] * 3, compression=LZ4), 0,
                       fetch_offset=0)
    ((_, magic, codec, _, records),) = kp_read(out)
    assert (magic, codec, len(records)) == (0, LZ4, 3)
    frame = next(iter_messages_values(out))
    assert frame[6] == (xxhash.xxh32_intdigest(frame[0:6]) >> 8) & 0xFF  # magic + FLG + BD hashed
    assert frame[6] != (xxhash.xxh32_intdigest(frame[4:6]) >> 8) & 0xFF
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(frame)  # a standard reader refuses it...
    assert lz4.frame.decompress(L._lz4_with_header_checksum(frame, broken=False))  # ...fixed


def iter_messages_values(data: bytes):
    for message in L._iter_messages(data, allow_partial=False, where="test"):
        yield message.value


def test_lz4_header_checksum_rules_per_magic() -> None:
    inner = kp_build(0, NONE, [(b"k", b"v")])
    good = compress(LZ4, inner)
    broken = L._lz4_with_header_checksum(good, broken=True)
    assert broken != good
    for payload in (good, broken):  # Kafka ignores the checksum for magic 0
        message = encode_message(0, 0, None, payload, attributes=LZ4)
        assert v2_records(convert_to_batch(message, target_compression=None)) == [
            (0, NO_TIMESTAMP, b"k", b"v")]
    inner1 = kp_build(1, NONE, [(b"k", b"v")])
    broken1 = L._lz4_with_header_checksum(compress(LZ4, inner1), broken=True)
    message = encode_message(0, 1, None, broken1, timestamp=5, attributes=LZ4)
    with pytest.raises(CorruptRecordError, match="lz4"):  # magic 1 must be right
        convert_to_batch(message, target_compression=None)


# --- Produce: legacy -> v2, against kafka-python's builder --------------------------------


@pytest.mark.parametrize(("magic", "codec"), LEGACY_CASES)
def test_convert_kafka_python_sets(magic: int, codec: int) -> None:
    data = kp_build(magic, codec, SAMPLE, first_offset=0)
    batch = convert_to_batch(bytearray(data), target_compression=None)
    (_, header), = iter_batch_headers(batch)
    assert (header.base_offset, header.producer_id, header.producer_epoch,
            header.base_sequence, header.compression, header.timestamp_type,
            header.records_count) == (0, -1, -1, -1, codec, CREATE_TIME, len(SAMPLE))
    expected_ts = [NO_TIMESTAMP if magic == 0 else 1_700_000_000_000 + i
                   for i in range(len(SAMPLE))]
    got = decode_records(batch)
    assert [(r.key, r.value) for r in got] == SAMPLE
    assert [r.timestamp for r in got] == expected_ts
    assert [r.offset for r in got] == list(range(len(SAMPLE)))
    assert all(r.headers == [] for r in got)
    assert header.max_timestamp == max(expected_ts)
    # the reader agrees with kafka-python's
    ours = [(r.offset, r.timestamp, r.key, r.value) for r in iter_legacy_records(data)]
    theirs = [(o, NO_TIMESTAMP if t is None else t, k, v) for o, t, k, v in kp_flat(data)]
    assert ours == theirs


@pytest.mark.parametrize("target", [NONE, GZIP, SNAPPY, LZ4, ZSTD])
def test_convert_uses_the_topic_codec_when_given(target: int) -> None:
    data = kp_build(1, SNAPPY, SAMPLE)
    batch = convert_to_batch(data, target_compression=target)
    assert RecordBatchHeader.parse(batch).compression == target
    assert [(r.key, r.value) for r in decode_records(batch)] == SAMPLE


def test_convert_mixed_set_keeps_order_and_takes_first_wrappers_codec() -> None:
    data = (kp_build(1, NONE, SAMPLE[:2]) + kp_build(1, GZIP, SAMPLE[2:4], first_offset=2)
            + kp_build(1, SNAPPY, SAMPLE[4:], first_offset=4))
    batch = convert_to_batch(data, target_compression=None)
    assert RecordBatchHeader.parse(batch).compression == GZIP
    assert [(r.key, r.value) for r in decode_records(batch)] == SAMPLE


def test_log_append_time_wrapper_gives_its_timestamp_to_inner_records() -> None:
    inner = build_message_set([(0, 11, b"a", b"1"), (1, 22, b"b", b"2")], 1)
    lat = wrapper(1, GZIP, inner, offset=1, timestamp=999, attributes=GZIP | 0x08)
    create = wrapper(1, GZIP, inner, offset=1, timestamp=999)
    assert [r.timestamp for r in decode_records(convert_to_batch(lat, target_compression=None))
            ] == [999, 999]
    assert [r.timestamp for r in iter_legacy_records(lat)] == [999, 999]
    assert [r.timestamp_type for r in iter_legacy_records(lat)] == [LOG_APPEND_TIME] * 2
    batch = convert_to_batch(create, target_compression=None)
    assert RecordBatchHeader.parse(batch).timestamp_type == CREATE_TIME
    assert [r.timestamp for r in decode_records(batch)] == [11, 22]
    # kafka-python reads the LogAppendTime wrapper the same way
    assert [t for _, t, _, _ in kp_flat(lat)] == [999, 999]


def test_magic1_wrapper_offsets_as_kafka_reads_them() -> None:
    inner = build_message_set([(0, 1, b"a", b"1"), (1, 1, b"b", b"2")], 1)
    assert [r.offset for r in iter_legacy_records(wrapper(1, GZIP, inner, offset=41))] == [40, 41]
    # wrapper offset 0 (some librdkafka versions): inner offsets taken as they are
    assert [r.offset for r in iter_legacy_records(wrapper(1, GZIP, inner, offset=0))] == [0, 1]
    # inner offsets not 0..n-1: Kafka 3.9 renumbers rather than rejects (older clients)
    odd = b"".join(encode_message(o, 1, b"k", b"v", timestamp=3) for o in (5, 9, 7))
    batch = convert_to_batch(wrapper(1, SNAPPY, odd, offset=9), target_compression=None)
    assert [(r.offset, r.key) for r in decode_records(batch)] == [(0, b"k"), (1, b"k"), (2, b"k")]
    # magic 0 inner offsets are absolute
    inner0 = build_message_set([(7, 0, b"a", b"1"), (8, 0, b"b", b"2")], 0)
    assert [r.offset for r in iter_legacy_records(wrapper(0, GZIP, inner0, offset=3))] == [7, 8]


def test_partial_trailing_message_is_legal_only_on_the_read_side() -> None:
    data = kp_build(1, NONE, SAMPLE[:3])
    cut = data[:-5]
    assert [r.key for r in iter_legacy_records(cut, allow_partial=True)] == [b"k0", None]
    assert [r.key for r in iter_legacy_records(data[:-len(data) + 70], allow_partial=True)
            ] == [b"k0"]
    with pytest.raises(CorruptRecordError, match="truncated message"):
        list(iter_legacy_records(cut))
    with pytest.raises(CorruptRecordError, match="truncated message"):
        convert_to_batch(cut, target_compression=None)


def test_reader_accepts_mixed_magics_converter_does_not() -> None:
    data = kp_build(0, NONE, [(b"a", b"1")]) + kp_build(1, NONE, [(b"b", b"2")], first_offset=1)
    assert [r.magic for r in iter_legacy_records(data)] == [0, 1]
    with pytest.raises(InvalidRecordError, match="not the magic 0 of the first message"):
        convert_to_batch(data, target_compression=None)


# --- Produce: every refusal ---------------------------------------------------------------


def _v0(key: bytes | None = b"k", value: bytes | None = b"v", offset: int = 0,
        attributes: int = 0) -> bytes:
    return encode_message(offset, 0, key, value, attributes=attributes)


def _recrc(message: bytes | bytearray) -> bytes:
    return bytes(fix_crcs(bytearray(message)))


def _set_size(message: bytes, size: int) -> bytes:
    out = bytearray(message)
    struct.pack_into(">i", out, 8, size)
    return bytes(out)


def _bomb() -> bytes:
    inner = build_message_set([(0, 1, None, b"\x00" * 100_000)], 1)
    return wrapper(1, GZIP, inner)


def _flip_inner_crc() -> bytes:
    inner = bytearray(build_message_set([(0, 1, b"k", b"v")], 1))
    inner[12] ^= 1
    return wrapper(1, GZIP, bytes(inner))


ERRORS = [
    # (input, error type, message fragment)
    (b"", InvalidRecordError, "empty message set"),
    (_v0()[:-1], CorruptRecordError, "truncated message at position 0"),
    (_v0() + b"\x00" * 5, CorruptRecordError, "truncated message at position 28"),
    (_v0()[:20], CorruptRecordError, "truncated message"),
    (bytes([*_v0()[:12], _v0()[12] ^ 0xFF, *_v0()[13:]]), CorruptRecordError, "stored crc"),
    (_set_size(_v0(), 13), CorruptRecordError, r"minimum record overhead \(14\)"),
    (_recrc(_set_size(encode_message(0, 1, None, None, timestamp=1), 18)[:30]),
     CorruptRecordError, "minimum record overhead of magic 1"),
    (_recrc(encode_message(0, 0, b"k" * 3, b"v")[:18] + struct.pack(">i", 50)
            + b"kkk" + struct.pack(">i", 1) + b"v"), CorruptRecordError, "key of 50 bytes"),
    (_recrc(encode_message(0, 0, b"k", b"vv")[:23] + struct.pack(">i", 1) + b"vv"),
     CorruptRecordError, "value of 1 bytes"),
    (_recrc(_set_size(encode_message(0, 0, None, None) + b"zz", 16)), CorruptRecordError,
     "after its null value"),
    (_recrc(bytes([*_v0()[:16], 3, *_v0()[17:]])), CorruptRecordError, "invalid magic 3"),
    (_recrc(_v0(attributes=5)), CorruptRecordError, "unknown compression codec id 5"),
    (encode_message(0, 1, None, b"not gzip at all", timestamp=1, attributes=GZIP),
     CorruptRecordError, "corrupt gzip"),
    (_flip_inner_crc(), CorruptRecordError, "stored crc"),
    (encode_message(0, 1, None, compress(ZSTD, build_message_set([(0, 1, b"k", b"v")], 1)),
                    timestamp=1, attributes=ZSTD), InvalidRecordError, "zstd"),
    (encode_message(0, 0, None, None, attributes=GZIP), InvalidRecordError, "null value"),
    (wrapper(1, SNAPPY, b""), InvalidRecordError, "no inner records"),
    (wrapper(1, GZIP, wrapper(1, GZIP, build_message_set([(0, 1, b"k", b"v")], 1))),
     InvalidRecordError, "nested wrapper"),
    (wrapper(1, GZIP, build_message_set([(0, 0, b"k", b"v")], 0)), InvalidRecordError,
     "compressed message magic 0 does not match wrapper magic 1"),
    (wrapper(0, LZ4, build_message_set([(0, 1, b"k", b"v")], 1)), InvalidRecordError,
     "compressed message magic 1 does not match wrapper magic 0"),
    (_v0() + encode_message(1, 1, b"k", b"v", timestamp=1), InvalidRecordError,
     "not the magic 0 of the first message"),
    (_v0() + build_record_batch([(b"k", b"v")]), InvalidRecordError, "RecordBatch v2"),
    (build_record_batch([(b"k", b"v")]), InvalidRecordError, "RecordBatch v2"),
    (wrapper(1, GZIP, b"".join(encode_message(o, 1, b"k", b"v", timestamp=1) for o in (0, 5)),
             offset=3),
     InvalidRecordError, "wrapper offset '3' is less than the last inner message offset '5'"),
    (encode_message(0, 1, b"k", b"v", timestamp=-2), InvalidRecordError,
     "invalid negative timestamp -2"),
    (encode_message(0, 1, b"k", b"v", timestamp=-1)
     + encode_message(1, 1, b"k", b"v", timestamp=(1 << 63) - 1), InvalidRecordError,
     "cannot be stored relative"),
]


@pytest.mark.parametrize(("data", "error", "fragment"), ERRORS,
                         ids=[f"{i}-{e[2][:30]}" for i, e in enumerate(ERRORS)])
def test_convert_refusals(data: bytes, error: type[Exception], fragment: str) -> None:
    with pytest.raises(error, match=fragment) as info:
        convert_to_batch(data, target_compression=None)
    assert type(info.value) in (error, DecompressionLimitError)


def test_record_errors_name_the_inner_message() -> None:
    inner = build_message_set([(0, 1, b"a", b"1")], 1) + build_message_set([(1, 0, b"b", b"2")], 0)
    with pytest.raises(InvalidRecordError) as info:
        convert_to_batch(wrapper(1, GZIP, inner, offset=1), target_compression=None)
    assert [index for index, _ in info.value.record_errors] == [1]


def test_decompression_bound() -> None:
    bomb = _bomb()
    with pytest.raises(DecompressionLimitError, match="more than 50000"):
        convert_to_batch(bomb, target_compression=None, max_decompressed_size=50_000)
    # the bound covers all wrappers of the set together
    one = wrapper(1, GZIP, build_message_set([(0, 1, None, b"\x00" * 30_000)], 1))
    convert_to_batch(one, target_compression=None, max_decompressed_size=50_000)
    with pytest.raises(DecompressionLimitError):
        convert_to_batch(one + one, target_compression=None, max_decompressed_size=50_000)


# --- Fetch: v2 -> legacy, read back with kafka-python -------------------------------------


def _v2(n: int, base_offset: int, codec: int = NONE, **kwargs) -> bytes:
    records = [SimpleRecord(b"key%d" % i if i % 3 else None, b"value%d" % i if i % 4 else None,
                            [("h", b"x")] if i % 2 else (), 1_000 + 10 * i) for i in range(n)]
    return build_record_batch(records, base_offset=base_offset, compression=codec, **kwargs)


def _expected(n: int, base_offset: int, magic: int, start: int = 0) -> list[tuple]:
    return [(base_offset + i, None if magic == 0 else 1_000 + 10 * i,
             b"key%d" % i if i % 3 else None, b"value%d" % i if i % 4 else None)
            for i in range(start, n)]


@pytest.mark.parametrize(("magic", "codec"), LEGACY_CASES)
def test_down_convert_read_by_kafka_python(magic: int, codec: int) -> None:
    log = _v2(6, 100, codec) + _v2(3, 106, codec)
    out = down_convert(memoryview(log), magic, fetch_offset=100)
    entries = kp_read(out)
    assert all(e[1] == magic and e[2] == codec for e in entries)
    assert kp_flat(out) == _expected(6, 100, magic) + [
        (106 + i, *rest[1:]) for i, rest in enumerate(_expected(3, 0, magic))]
    if codec == NONE:
        assert len(entries) == 9
    else:
        assert [e[0] for e in entries] == [105, 108]  # wrapper offset = last record's
        if magic == 1:  # wrapper timestamp = largest inner timestamp
            wrappers = list(L._iter_messages(out, allow_partial=False, where="test"))
            assert [w.timestamp for w in wrappers] == [1_050, 1_020]
            inner = L._iter_messages(
                L.decompress(codec, wrappers[0].value), allow_partial=False, where="test")
            assert [m.offset for m in inner] == list(range(6))  # relative


@pytest.mark.parametrize(("magic", "codec"), LEGACY_CASES)
def test_round_trip_v2_legacy_v2(magic: int, codec: int) -> None:
    log = _v2(7, 40, codec)
    legacy = down_convert(log, magic, fetch_offset=40)
    back = convert_to_batch(legacy, target_compression=None)
    assert RecordBatchHeader.parse(back).compression == codec
    assert [(r.key, r.value) for r in decode_records(back)] == [
        (r.key, r.value) for r in decode_records(log)]
    assert [r.timestamp for r in decode_records(back)] == [
        NO_TIMESTAMP if magic == 0 else r.timestamp for r in decode_records(log)]
    assert [r.offset for r in iter_legacy_records(legacy)] == list(range(40, 47))


@pytest.mark.parametrize("codec", CODECS)
def test_down_convert_log_append_time(codec: int) -> None:
    log = _v2(4, 10, codec, timestamp_type=LOG_APPEND_TIME, max_timestamp=777_000)
    entries = kp_read(down_convert(log, 1, fetch_offset=10))
    assert {e[3] for e in entries} == {LOG_APPEND_TIME}
    assert [t for e in entries for _, t, _, _ in e[4]] == [777_000] * 4
    records = list(iter_legacy_records(down_convert(log, 1, fetch_offset=10)))
    assert {(r.timestamp, r.timestamp_type) for r in records} == {(777_000, LOG_APPEND_TIME)}
    assert kp_flat(down_convert(log, 0, fetch_offset=10))[0][1] is None


@pytest.mark.parametrize("codec", CODECS)
def test_down_convert_from_the_middle_of_a_batch(codec: int) -> None:
    log = _v2(3, 0, codec) + _v2(8, 3, codec) + _v2(2, 11, codec)
    for magic in (0, 1):
        out = down_convert(log, magic, fetch_offset=6)
        assert [o for o, *_ in kp_flat(out)] == list(range(6, 13))
        assert kp_flat(out)[0] == (6, *_expected(8, 3, magic, 3)[0][1:])
        if codec != NONE and magic == 1:
            first = next(L._iter_messages(out, allow_partial=False, where="test"))
            assert first.offset == 10
            inner = L._iter_messages(L.decompress(codec, first.value), allow_partial=False,
                                     where="test")
            assert [m.offset for m in inner] == [0, 1, 2, 3, 4]


def test_down_convert_drops_a_cut_trailing_batch() -> None:
    log = _v2(2, 0) + _v2(2, 2, GZIP) + _v2(2, 4)
    for cut in (1, 20, 60, len(_v2(2, 4)) - 1):
        out = down_convert(log[:-cut], 1, fetch_offset=0)
        assert [o for o, *_ in kp_flat(out)] == [0, 1, 2, 3]
    assert down_convert(log[:10], 1, fetch_offset=0) == b""
    assert down_convert(b"", 0, fetch_offset=0) == b""


def test_down_convert_max_bytes() -> None:
    log = _v2(10, 0) + _v2(5, 10, GZIP)
    full = down_convert(log, 1, fetch_offset=0)
    messages = list(L._iter_messages(full, allow_partial=False, where="test"))
    sizes = [b.position for b in messages[1:]] + [len(full)]
    # smaller than one message: the first one, whole
    assert down_convert(log, 1, fetch_offset=0, max_bytes=1) == full[: sizes[0]]
    # three and a half messages: three
    limit = sizes[2] + (sizes[3] - sizes[2]) // 2
    assert down_convert(log, 1, fetch_offset=0, max_bytes=limit) == full[: sizes[2]]
    assert down_convert(log, 1, fetch_offset=0, max_bytes=sizes[9]) == full[: sizes[9]]
    assert down_convert(log, 1, fetch_offset=0, max_bytes=len(full)) == full
    # a wrapper bigger than max_bytes still goes out whole when it comes first
    assert down_convert(log, 1, fetch_offset=10, max_bytes=10) == full[sizes[9]:]


def test_down_convert_skips_control_batches_and_headers() -> None:
    marker = build_control_batch(True, producer_id=7, producer_epoch=0, coordinator_epoch=1,
                                 timestamp=5, base_offset=2)
    txn = build_record_batch([(b"a", b"1", [("h", b"v")])], base_offset=0, producer_id=7,
                             producer_epoch=0, base_sequence=0, is_transactional=True)
    log = txn + build_record_batch([(b"b", b"2")], base_offset=1) + marker + _v2(1, 3)
    out = down_convert(log, 1, fetch_offset=0)
    assert [(o, k) for o, _, k, _ in kp_flat(out)] == [(0, b"a"), (1, b"b"), (3, None)]
    assert down_convert(marker, 0, fetch_offset=0) == b""


def test_down_convert_copies_entries_already_legacy() -> None:
    m0 = kp_build(0, NONE, [(b"a", b"1")], first_offset=5)
    m1 = kp_build(1, GZIP, [(b"b", b"2"), (b"c", b"3")], first_offset=6)
    assert down_convert(m0 + _v2(1, 6), 1, fetch_offset=5)[: len(m0)] == m0
    assert down_convert(m1, 1, fetch_offset=0) == m1
    # magic 1 for a magic 0 reader: converted, same codec, absolute inner offsets
    out = down_convert(m1, 0, fetch_offset=0)
    assert kp_read(out) == [(7, 0, GZIP, None, [(6, None, b"b", b"2"), (7, None, b"c", b"3")])]


def test_down_convert_zstd() -> None:
    with pytest.raises(UnsupportedCompressionError, match="zstandard"):
        down_convert(_v2(2, 0, ZSTD), 1, fetch_offset=0)
    out = down_convert(_v2(2, 0) + _v2(2, 2, ZSTD), 1, fetch_offset=0)
    assert [o for o, *_ in kp_flat(out)] == [0, 1]


def test_down_convert_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        down_convert(_v2(1, 0), 2, fetch_offset=0)
    bad = bytearray(_v2(1, 0))
    bad[16] = 9
    with pytest.raises(CorruptRecordError, match="unknown magic 9"):
        down_convert(bytes(bad), 1, fetch_offset=0)


def test_down_convert_refuses_impossible_sizes() -> None:
    short = bytearray(_v2(1, 0))
    struct.pack_into(">i", short, 8, 48)
    with pytest.raises(CorruptRecordError, match="batchLength 48"):
        down_convert(bytes(short), 1, fetch_offset=0)
    with pytest.raises(CorruptRecordError, match=r"size 13, less than the minimum"):
        down_convert(_set_size(_v0(), 13), 0, fetch_offset=0)


def test_inner_message_with_unknown_codec_is_corrupt() -> None:
    inner = encode_message(0, 1, b"k", b"v", timestamp=1, attributes=6)
    with pytest.raises(CorruptRecordError, match="unknown compression codec id 6"):
        convert_to_batch(wrapper(1, GZIP, inner), target_compression=None)


def test_int64_wraps_as_java_longs_do() -> None:
    assert L._int64(5) == 5
    assert L._int64(1 << 63) == -(1 << 63)
    assert L._int64(-(1 << 63) - 1) == (1 << 63) - 1
    with pytest.raises(ValueError):
        encode_message(0, 2, None, None)


def test_build_message_set_matches_kafka_python() -> None:
    for magic in (0, 1):
        for codec in (NONE, GZIP, SNAPPY):
            items = [(i, 1_700_000_000_000 + i, k, v) for i, (k, v) in enumerate(SAMPLE)]
            ours = build_message_set(items, magic, compression=codec)
            assert kp_flat(ours) == [(o, None if magic == 0 else t, k, v)
                                     for o, t, k, v in items]
            if codec == NONE:  # byte for byte where there is no codec in between
                assert ours == kp_build(magic, NONE, SAMPLE)
    with pytest.raises(UnsupportedCompressionError):
        build_message_set([(0, 0, None, b"v")], 1, compression=ZSTD)
    assert list(iter_legacy_records(build_message_set([], 1))) == []
    assert isinstance(next(iter_legacy_records(_v0())), LegacyRecord)


# --- Fuzz ---------------------------------------------------------------------------------


def _corpus() -> list[bytes]:
    corpus = []
    for magic in (0, 1):
        for codec in CODECS:
            corpus.append(build_message_set(
                [(i, 10 + i, k, v) for i, (k, v) in enumerate(SAMPLE[:5])], magic,
                compression=codec))
        corpus.append(build_message_set([(0, 1, b"k", b"v"), (1, 2, None, b"w")], magic))
    return corpus


def _mutate(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        choice = rng.random()
        if choice < 0.5 and buf:
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        elif choice < 0.65 and buf:
            del buf[rng.randrange(len(buf)):]
        elif choice < 0.8:
            pos = rng.randrange(len(buf) + 1)
            buf[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif len(buf) > 12:
            # lengths are where parsers go wrong: write a plausible or hostile int32
            pos = rng.randrange(len(buf) - 4)
            struct.pack_into(">i", buf, pos, rng.choice(
                [-1, -2, 0, 1, 13, 14, 22, 0x7FFFFFFF, -0x80000000, rng.randint(-50, 300)]))
    return bytes(buf)


def _fuzz_input(rng: random.Random, corpus: list[bytes]) -> bytes:
    data = rng.choice(corpus)
    kind = rng.random()
    if kind < 0.3:
        return _mutate(rng, data)
    if kind < 0.65:
        return _recrc(_mutate(rng, data))  # past the outer CRC
    # damage inside a wrapper, inner CRCs fixed, so the inner parser gets exercised
    magic = rng.choice((0, 1))
    inner = _recrc(_mutate(rng, build_message_set(
        [(i, 5, k, v) for i, (k, v) in enumerate(SAMPLE[:4])], magic)))
    codec = rng.choice((GZIP, SNAPPY, LZ4))
    return wrapper(magic, codec, inner, offset=rng.choice((0, 3, 100)), timestamp=7)


def test_fuzz_convert_raises_only_record_errors() -> None:
    rng = random.Random(20240611)
    corpus = _corpus()
    outcomes = {"ok": 0, "corrupt": 0, "invalid": 0}
    for _ in range(5000):
        data = _fuzz_input(rng, corpus)
        try:
            batch = convert_to_batch(data, target_compression=None, max_decompressed_size=1 << 20)
        except InvalidRecordError:
            outcomes["invalid"] += 1
            continue
        except CorruptRecordError:
            outcomes["corrupt"] += 1
            continue
        outcomes["ok"] += 1
        assert decode_records(batch)  # what comes out is a sound batch
        for _ in iter_legacy_records(data, allow_partial=True):
            pass
    assert min(outcomes.values()) > 20, outcomes


def test_fuzz_down_convert_raises_only_protocol_errors() -> None:
    rng = random.Random(7)
    corpus = [_v2(5, 0, codec) + _v2(3, 5) for codec in CODECS]
    for _ in range(1000):
        data = _mutate(rng, rng.choice(corpus))
        with contextlib.suppress(CorruptRecordError, InvalidRecordError,
                                 UnsupportedCompressionError):
            down_convert(data, rng.choice((0, 1)), fetch_offset=rng.randint(0, 8),
                         max_bytes=rng.choice((None, 1, 200)), max_decompressed_size=1 << 20)
